// Writes qwen3_renders.json: each conversation of qwen3_conversations.json
// rendered with Qwen3's chat template (add_generation_prompt, its tools and
// enable_thinking) by Hugging Face's JavaScript Jinja engine:
//   node render_qwen3.mjs TOKENIZER_CONFIG.json tests/data/chat
// from a directory where @huggingface/jinja is installed (README.md here). Not run in CI.
import { Template } from "@huggingface/jinja";
import fs from "fs";
import path from "path";

const [configPath, here] = process.argv.slice(2);
const template = new Template(JSON.parse(fs.readFileSync(configPath, "utf8")).chat_template);
const conversations = JSON.parse(fs.readFileSync(path.join(here, "qwen3_conversations.json"), "utf8"));
const renders = conversations.map((c) => {
  const vars = { messages: c.messages, add_generation_prompt: true };
  if (c.tools) vars.tools = c.tools;
  if (c.chat_template_kwargs) Object.assign(vars, c.chat_template_kwargs);
  return { name: c.name, prompt: template.render(vars) };
});
fs.writeFileSync(path.join(here, "qwen3_renders.json"), JSON.stringify(renders, null, 1) + "\n");
