// Renders chat requests with a model's chat template by Hugging Face's
// JavaScript Jinja engine, as tests/data/chat/README.md says:
//   node render.mjs TEMPLATE CONVERSATIONS.json OUT.json
// TEMPLATE: a tokenizer_config.json (its chat_template) or a .jinja file.
// Each conversation's messages, tools and chat_template_kwargs go to the
// template with add_generation_prompt; tool-call arguments given as JSON
// text are read into objects first, as vLLM and llama.cpp's server do. OUT
// holds per conversation its name and the prompt, or the template's error.
// Run from a directory where @huggingface/jinja is installed. Not run in CI.
import { Template } from "@huggingface/jinja";
import fs from "fs";

const [templatePath, conversationsPath, outPath] = process.argv.slice(2);
const text = fs.readFileSync(templatePath, "utf8");
const template = new Template(templatePath.endsWith(".json") ? JSON.parse(text).chat_template : text);
const renders = JSON.parse(fs.readFileSync(conversationsPath, "utf8")).map((c) => {
  const messages = c.messages.map((m) => ({
    ...m,
    ...(m.tool_calls && {
      tool_calls: m.tool_calls.map((t) => ({
        ...t,
        function: {
          ...t.function,
          arguments: typeof t.function.arguments === "string" ? JSON.parse(t.function.arguments) : t.function.arguments,
        },
      })),
    }),
  }));
  const vars = { messages, add_generation_prompt: true, bos_token: "<|begin_of_text|>", ...c.chat_template_kwargs };
  if (c.tools) vars.tools = c.tools;
  try {
    return { name: c.name, prompt: template.render(vars) };
  } catch (e) {
    return { name: c.name, error: String(e.message) };
  }
});
fs.writeFileSync(outPath, JSON.stringify(renders, null, 1) + "\n");
