// `vkgate serve`: parsing OpenAI requests and writing its responses.
#include "serve_openai.hpp"

#include <cmath>
#include <limits>

#include "vkgate/error.hpp"
#include "vkgate/sampling.hpp"

namespace vkgate::cli {

using nlohmann::json;

std::string error_body(const ApiError& e) {
  // A message may quote the request's bytes: whatever is not UTF-8 becomes U+FFFD.
  return json{{"error", {{"message", e.what()}, {"type", e.type}, {"code", e.code}}}}.dump(
      -1, ' ', false, json::error_handler_t::replace);
}

namespace {

// Optional fields: absent and null both mean "the default", as OpenAI's clients send either.
const json* field(const json& body, const char* name) {
  const auto it = body.find(name);
  return it == body.end() || it->is_null() ? nullptr : &*it;
}

double number_field(const json& body, const char* name, double fallback) {
  const json* v = field(body, name);
  if (!v) return fallback;
  if (!v->is_number()) throw bad_request("invalid_type", std::string("'") + name + "' must be a number");
  return v->get<double>();
}

std::optional<int64_t> integer_field(const json& body, const char* name) {
  const json* v = field(body, name);
  if (!v) return std::nullopt;
  if (!v->is_number_integer())
    throw bad_request("invalid_type", std::string("'") + name + "' must be an integer");
  return v->get<int64_t>();
}

bool bool_field(const json& body, const char* name) {
  const json* v = field(body, name);
  if (!v) return false;
  if (!v->is_boolean()) throw bad_request("invalid_type", std::string("'") + name + "' must be a boolean");
  return v->get<bool>();
}

// nlohmann's parser passes raw bytes in strings through unchecked; text for the
// tokenizer (and for JSON answers quoting it) must be UTF-8.
bool valid_utf8(const std::string& s) {
  size_t i = 0;
  while (i < s.size()) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    size_t n;
    uint32_t cp;
    if (c < 0x80) n = 0, cp = c;
    else if ((c & 0xE0) == 0xC0) n = 1, cp = c & 0x1F;
    else if ((c & 0xF0) == 0xE0) n = 2, cp = c & 0x0F;
    else if ((c & 0xF8) == 0xF0) n = 3, cp = c & 0x07;
    else return false;
    if (n > 0 && i + n >= s.size()) return false;  // cut short
    for (size_t k = 1; k <= n; ++k) {
      const unsigned char d = static_cast<unsigned char>(s[i + k]);
      if ((d & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (d & 0x3F);
    }
    // Overlong forms, surrogates and code points beyond U+10FFFF are not UTF-8.
    if ((n == 1 && cp < 0x80) || (n == 2 && cp < 0x800) || (n == 3 && cp < 0x10000) || cp > 0x10FFFF ||
        (cp >= 0xD800 && cp <= 0xDFFF))
      return false;
    i += n + 1;
  }
  return true;
}

std::string string_value(const json& v, const std::string& what) {
  if (!v.is_string()) throw bad_request("invalid_type", what + " must be a string");
  std::string s = v.get<std::string>();
  if (!valid_utf8(s)) throw bad_request("invalid_utf8", what + " is not valid UTF-8");
  return s;
}

// A message's text: a string or OpenAI's text parts (null: none, where `optional`).
std::string message_text(const json& m, const std::string& at, bool optional) {
  const json* content = field(m, "content");
  if (!content) {
    if (optional) return {};
    throw bad_request("missing_field", at + ".content is required");
  }
  if (!content->is_array()) return string_value(*content, at + ".content");
  std::string text;
  for (const json& part : *content) {
    if (!part.is_object() || part.value("type", "") != "text" || !part.contains("text"))
      throw bad_request("invalid_value", at + ".content: only text parts are supported");
    text += string_value(part["text"], at + ".content[].text");
  }
  return text;
}

// An assistant turn's tool_calls (OpenAI's [{"type": "function", "function":
// {"name", "arguments"}}], arguments a JSON string or an object), read from
// the order-keeping parse so that an object's keys print as the client sent them.
std::vector<ToolCall> tool_calls(const nlohmann::ordered_json& calls, const std::string& at) {
  if (!calls.is_array()) throw bad_request("invalid_type", at + " must be an array");
  std::vector<ToolCall> out;
  for (size_t k = 0; k < calls.size(); ++k) {
    const std::string here = at + "[" + std::to_string(k) + "].function";
    const auto f = calls[k].is_object() ? calls[k].find("function") : calls[k].end();
    if (f == calls[k].end() || !f->is_object()) throw bad_request("missing_field", here + " is required");
    const auto name = f->find("name"), args = f->find("arguments");
    if (name == f->end() || !name->is_string()) throw bad_request("missing_field", here + ".name must be a string");
    ToolCall c{string_value(json(name->get<std::string>()), here + ".name"), "{}"};
    // Arguments as JSON text are read into an object first, as vLLM and llama.cpp's server do,
    // so that the template prints them its own way.
    nlohmann::ordered_json object = nlohmann::ordered_json::object();
    if (args != f->end() && args->is_string())
      object = nlohmann::ordered_json::parse(string_value(json(args->get<std::string>()), here + ".arguments"), nullptr,
                                             false);
    else if (args != f->end() && !args->is_null())
      object = *args;
    if (!object.is_object())
      throw bad_request("invalid_value", here + ".arguments must be a JSON object, or its text");
    c.arguments = tojson(object);
    out.push_back(std::move(c));
  }
  return out;
}

// The chat-only fields beside messages: tools, tool_choice, chat_template_kwargs.
void parse_chat_options(const json& body, const nlohmann::ordered_json& ordered, CompletionRequest& r) {
  bool render_tools = true;
  if (const json* choice = field(body, "tool_choice")) {
    if (*choice == "none") render_tools = false;
    else if (*choice != "auto")
      throw bad_request("invalid_value", "'tool_choice' must be \"auto\" or \"none\" (vkgate does not force a call)");
  }
  if (field(body, "tools")) {
    const nlohmann::ordered_json& tools = ordered["tools"];
    if (!tools.is_array()) throw bad_request("invalid_type", "'tools' must be an array");
    for (size_t i = 0; i < tools.size(); ++i) {
      const nlohmann::ordered_json& t = tools[i];
      const std::string at = "tools[" + std::to_string(i) + "]";
      if (!t.is_object() || t.value("type", "") != "function" || !t.contains("function") ||
          !t["function"].is_object() || !t["function"].contains("name") || !t["function"]["name"].is_string())
        throw bad_request("invalid_value", at + " must be {\"type\": \"function\", \"function\": {\"name\": ...}}");
      if (render_tools) r.render.tools.push_back(string_value(json(tojson(t)), at));
    }
    r.uses_tools = r.uses_tools || !tools.empty();
  }
  if (const json* kw = field(body, "chat_template_kwargs")) {
    if (!kw->is_object()) throw bad_request("invalid_type", "'chat_template_kwargs' must be an object");
    for (const auto& [key, value] : kw->items()) {
      if (key == "enable_thinking") {
        if (!value.is_boolean()) throw bad_request("invalid_type", "'chat_template_kwargs.enable_thinking' must be a boolean");
        r.render.enable_thinking = value.get<bool>();
      } else if (key == "date_string") {
        r.render.date_string = string_value(value, "'chat_template_kwargs.date_string'");
      } else {
        throw bad_request("invalid_value", "'chat_template_kwargs." + key +
                                               "': vkgate's templates take only enable_thinking and date_string");
      }
    }
  }
}

}  // namespace

CompletionRequest parse_completion_request(const std::string& text, bool chat) {
  json body;
  try {
    body = json::parse(text);  // also refuses strings that are not UTF-8
  } catch (const json::exception& e) {
    throw bad_request("invalid_json", std::string("the body is not valid JSON: ") + e.what());
  }
  if (!body.is_object()) throw bad_request("invalid_json", "the body must be a JSON object");
  CompletionRequest r;
  r.chat = chat;
  if (const json* m = field(body, "model")) r.model = string_value(*m, "'model'");

  if (chat) {
    // Tools and call arguments keep their keys' order in the prompt, as transformers' tojson prints them.
    const nlohmann::ordered_json ordered = nlohmann::ordered_json::parse(text);
    const json* msgs = field(body, "messages");
    if (!msgs) throw bad_request("missing_field", "'messages' is required");
    if (!msgs->is_array() || msgs->empty()) throw bad_request("invalid_type", "'messages' must be a non-empty array");
    for (size_t i = 0; i < msgs->size(); ++i) {
      const json& m = (*msgs)[i];
      const std::string at = "messages[" + std::to_string(i) + "]";
      if (!m.is_object()) throw bad_request("invalid_type", at + " must be an object");
      const json* role = field(m, "role");
      if (!role) throw bad_request("missing_field", at + ".role is required");
      ChatMessage cm;
      cm.role = string_value(*role, at + ".role");
      // "developer" is OpenAI's newer name for the system role.
      if (cm.role == "developer") cm.role = "system";
      if (cm.role != "system" && cm.role != "user" && cm.role != "assistant" && cm.role != "tool")
        throw bad_request("invalid_value", at + ".role '" + cm.role + "' is not system, user, assistant or tool");
      const bool assistant = cm.role == "assistant";
      // An assistant turn that only calls tools may have no content (OpenAI sends null).
      cm.content = message_text(m, at, assistant && field(m, "tool_calls"));
      if (assistant) {
        if (const json* rc = field(m, "reasoning_content")) cm.reasoning_content = string_value(*rc, at + ".reasoning_content");
        if (field(m, "tool_calls")) cm.tool_calls = tool_calls(ordered["messages"][i]["tool_calls"], at + ".tool_calls");
      }
      r.uses_tools = r.uses_tools || cm.role == "tool" || !cm.tool_calls.empty();
      r.messages.push_back(std::move(cm));
    }
    parse_chat_options(body, ordered, r);
  } else {
    const json* p = field(body, "prompt");
    if (!p) throw bad_request("missing_field", "'prompt' is required");
    if (p->is_array()) {
      if (p->size() != 1 || !(*p)[0].is_string())
        throw bad_request("invalid_value", "'prompt' must be a string or an array of one string");
      r.prompt = string_value((*p)[0], "'prompt'");
    } else {
      r.prompt = string_value(*p, "'prompt'");
    }
  }

  std::optional<int64_t> max_tokens = integer_field(body, "max_tokens");
  if (chat)
    if (auto m = integer_field(body, "max_completion_tokens")) max_tokens = m;
  if (max_tokens) {
    if (*max_tokens < 1) throw bad_request("invalid_value", "'max_tokens' must be at least 1");
    r.max_tokens = int(std::min<int64_t>(*max_tokens, std::numeric_limits<int>::max()));
  }
  if (auto n = integer_field(body, "n")) {
    if (*n < 1 || *n > CompletionRequest::kMaxChoices)
      throw bad_request("invalid_value", "'n' must be between 1 and " + std::to_string(CompletionRequest::kMaxChoices));
    r.n = int(*n);
  }
  if (chat) {
    const std::optional<int64_t> top = integer_field(body, "top_logprobs");
    if (top && (*top < 0 || *top > GenerateOptions::kMaxLogprobs))
      throw bad_request("invalid_value", "'top_logprobs' must be between 0 and 20");
    if (bool_field(body, "logprobs")) r.options.logprobs = int(top.value_or(0));
    else if (top) throw bad_request("invalid_value", "'top_logprobs' needs 'logprobs': true");
  } else if (auto n = integer_field(body, "logprobs")) {
    // OpenAI's completions take at most 5 alternatives.
    if (*n < 0 || *n > 5) throw bad_request("invalid_value", "'logprobs' must be between 0 and 5");
    r.options.logprobs = int(*n);
  }

  SamplingOptions& s = r.options.sampling;
  s.temperature = number_field(body, "temperature", 0.0);
  s.top_p = number_field(body, "top_p", 1.0);
  s.min_p = number_field(body, "min_p", 0.0);
  s.presence_penalty = number_field(body, "presence_penalty", 0.0);
  s.frequency_penalty = number_field(body, "frequency_penalty", 0.0);
  s.repeat_penalty = number_field(body, "repeat_penalty", 1.0);
  if (auto k = integer_field(body, "top_k")) {
    if (*k < 0 || *k > std::numeric_limits<int>::max()) throw bad_request("invalid_value", "'top_k' must be at least 0");
    s.top_k = int(*k);
  }
  if (auto seed = integer_field(body, "seed")) s.seed = uint64_t(*seed);
  try {
    Sampler check(s);  // its constructor names an option outside its range
  } catch (const Error& e) {
    throw bad_request("invalid_value", e.what());
  }

  if (const json* stop = field(body, "stop")) {
    if (stop->is_string()) {
      r.options.stop.push_back(string_value(*stop, "'stop'"));
    } else if (stop->is_array()) {
      for (const json& v : *stop) r.options.stop.push_back(string_value(v, "each of 'stop'"));
    } else {
      throw bad_request("invalid_type", "'stop' must be a string or an array of strings");
    }
    if (r.options.stop.size() > 16) throw bad_request("invalid_value", "'stop': at most 16 strings");
    for (const std::string& st : r.options.stop)
      if (st.empty()) throw bad_request("invalid_value", "'stop' strings must not be empty");
  }

  r.stream = bool_field(body, "stream");
  r.cache_prompt = !field(body, "cache_prompt") || bool_field(body, "cache_prompt");
  if (const json* so = field(body, "stream_options")) {
    if (!so->is_object()) throw bad_request("invalid_type", "'stream_options' must be an object");
    r.include_usage = bool_field(*so, "include_usage");
  }
  return r;
}

std::string chat_prompt(const ChatTemplate& chat, CompletionRequest& cr) {
  if (!chat.usable())
    throw bad_request("unsupported_chat_template",
                      "the model's chat template is not one vkgate can render (Qwen ChatML or Llama 3), or it "
                      "has none: use /v1/completions with a formatted prompt");
  if (cr.uses_tools && !chat.takes_tools())
    throw bad_request("unsupported_chat_template",
                      "tools, tool_calls and tool messages are rendered only with Qwen3's chat template or "
                      "Qwen3.5's; this model's is neither");
  if (cr.render.enable_thinking && !chat.takes_tools())
    throw bad_request("unsupported_chat_template",
                      "'chat_template_kwargs.enable_thinking' is rendered only with Qwen3's chat template or "
                      "Qwen3.5's; this model's is neither");
  std::string text;
  try {
    text = chat.render(cr.messages, cr.render);
  } catch (const ChatTemplateError& e) {
    throw bad_request("invalid_messages", std::string("the model's chat template refuses the messages: ") + e.what());
  }
  cr.dialect = chat.dialect;
  cr.think_opened = text.ends_with("<think>\n");
  return text;
}

const char* openai_finish_reason(FinishReason r, bool called) {
  if (r != FinishReason::eos && r != FinishReason::stop_string) return "length";
  return called ? "tool_calls" : "stop";
}

namespace {
// A whole chat reply as its reasoning and content (all content unless the request splits them).
ReasoningSplitter::Parts reply_parts(const CompletionRequest& req, const std::string& text) {
  return req.split_reasoning ? ReasoningSplitter::split(text, req.think_opened) : ReasoningSplitter::Parts{{}, text};
}
}  // namespace

bool calls_tools(const CompletionRequest& req, const std::string& text) {
  return req.chat && !req.render.tools.empty() &&
         !parse_tool_calls(reply_parts(req, text).content, req.dialect, req.render.tools).calls.empty();
}

json usage_json(const Usage& u) {
  return {{"prompt_tokens", u.prompt_tokens},
          {"completion_tokens", u.completion_tokens},
          {"total_tokens", u.prompt_tokens + u.completion_tokens},
          {"prompt_tokens_details", {{"cached_tokens", u.cached_tokens}}}};
}

namespace {

// The bytes `id` decodes to on its own (part of a character, where one spans
// ids); none for an id the tokenizer does not know, as generation decodes it.
std::string token_text(const Tokenizer& tokenizer, int64_t id) {
  if (id >= tokenizer.vocab_size() || !tokenizer.id_to_token(int32_t(id))) return {};
  return tokenizer.decode(std::vector<int32_t>{int32_t(id)});
}

// `text` with each byte that is not part of a UTF-8 character as U+FFFD, as the answer's JSON writes it.
std::string as_utf8(const std::string& text) {
  return json::parse(json(text).dump(-1, ' ', false, json::error_handler_t::replace)).get<std::string>();
}

json token_bytes(const std::string& text) {
  json bytes = json::array();
  for (char c : text) bytes.push_back(int(static_cast<unsigned char>(c)));
  return bytes;
}

// A chat reply's content, and with tools its calls (OpenAI's tool_calls; a
// stream's delta numbers them): the content before the calls, null when none.
// A `whole` reply is split into reasoning_content and content first, where the
// request asks (a stream's pieces come split already).
// Returns whether the reply called tools.
bool put_reply(json& message, const CompletionRequest& req, const std::string& text, const std::string& call_id,
               bool delta, bool whole) {
  const ReasoningSplitter::Parts parts = whole ? reply_parts(req, text) : ReasoningSplitter::Parts{{}, text};
  if (whole && req.split_reasoning && !(delta && parts.reasoning.empty()))
    message["reasoning_content"] = parts.reasoning.empty() ? json(nullptr) : json(parts.reasoning);
  const ParsedReply p = req.render.tools.empty() ? ParsedReply{parts.content, {}}
                                                 : parse_tool_calls(parts.content, req.dialect, req.render.tools);
  if (p.calls.empty()) {
    if (!(delta && parts.content.empty() && message.contains("reasoning_content"))) message["content"] = parts.content;
    return false;
  }
  message["content"] = p.content.empty() ? json(nullptr) : json(p.content);
  json calls = json::array();
  for (size_t k = 0; k < p.calls.size(); ++k) {
    json c = {{"id", call_id + "-" + std::to_string(k)},
              {"type", "function"},
              {"function", {{"name", p.calls[k].name}, {"arguments", p.calls[k].arguments}}}};
    if (delta) c["index"] = k;
    calls.push_back(std::move(c));
  }
  message["tool_calls"] = std::move(calls);
  return true;
}

}  // namespace

json logprobs_json(const CompletionRequest& req, std::span<const TokenLogprob> tokens, const Tokenizer& tokenizer,
                   size_t& offset) {
  if (req.chat) {
    json content = json::array();
    for (const TokenLogprob& t : tokens) {
      json top = json::array();
      for (const auto& [id, lp] : t.top) {
        const std::string s = token_text(tokenizer, id);
        top.push_back({{"token", s}, {"logprob", lp}, {"bytes", token_bytes(s)}});
      }
      const std::string s = token_text(tokenizer, t.id);
      content.push_back({{"token", s}, {"logprob", t.logprob}, {"bytes", token_bytes(s)}, {"top_logprobs", top}});
    }
    return {{"content", content}, {"refusal", nullptr}};
  }
  json texts = json::array(), lps = json::array(), tops = json::array(), offsets = json::array();
  for (const TokenLogprob& t : tokens) {
    const std::string s = token_text(tokenizer, t.id);
    texts.push_back(s);
    lps.push_back(t.logprob);
    // Keyed by text as the answer shows it: ids whose texts differ only in
    // bytes that are not UTF-8 are one key, the likelier id's.
    json top = json::object();
    for (const auto& [id, lp] : t.top) top.emplace(as_utf8(token_text(tokenizer, id)), lp);
    tops.push_back(top);
    offsets.push_back(offset);
    offset += s.size();
  }
  return {{"tokens", texts}, {"token_logprobs", lps}, {"top_logprobs", tops}, {"text_offset", offsets}};
}

json completion_response(const CompletionRequest& req, const std::string& id, int64_t created,
                         const std::string& model, std::span<const Choice> choices, const Usage& usage) {
  json list = json::array();
  for (size_t i = 0; i < choices.size(); ++i) {
    const Choice& c = choices[i];
    json choice = {{"index", i}, {"finish_reason", openai_finish_reason(c.finish)}, {"logprobs", c.logprobs}};
    if (req.chat) {
      json message = {{"role", "assistant"}};
      if (put_reply(message, req, c.text, "call-" + id + "-" + std::to_string(i), false, true))
        choice["finish_reason"] = openai_finish_reason(c.finish, true);
      choice["message"] = std::move(message);
    } else {
      choice["text"] = c.text;
    }
    list.push_back(std::move(choice));
  }
  return {{"id", id},
          {"object", req.chat ? "chat.completion" : "text_completion"},
          {"created", created},
          {"model", model},
          {"choices", list},
          {"usage", usage_json(usage)}};
}

json completion_chunk(const CompletionRequest& req, const std::string& id, int64_t created, const std::string& model,
                      int index, const std::string& text, bool first, std::optional<FinishReason> finish,
                      json logprobs, bool called, const std::string& reasoning) {
  json choice = {{"index", index},
                 {"finish_reason", finish ? json(openai_finish_reason(*finish, called)) : json(nullptr)},
                 {"logprobs", std::move(logprobs)}};
  if (req.chat) {
    json delta = json::object();
    if (first) delta["role"] = "assistant";
    // The final chunk's delta is empty, as OpenAI's.
    if (!finish && !reasoning.empty()) delta["reasoning_content"] = reasoning;
    if (!finish)
      put_reply(delta, req, text, "call-" + id + "-" + std::to_string(index), true, !req.render.tools.empty());
    choice["delta"] = delta;
  } else {
    choice["text"] = text;
  }
  return {{"id", id},
          {"object", req.chat ? "chat.completion.chunk" : "text_completion"},
          {"created", created},
          {"model", model},
          {"choices", json::array({choice})}};
}

json usage_chunk(const CompletionRequest& req, const std::string& id, int64_t created, const std::string& model,
                 const Usage& usage) {
  return {{"id", id},
          {"object", req.chat ? "chat.completion.chunk" : "text_completion"},
          {"created", created},
          {"model", model},
          {"choices", json::array()},
          {"usage", usage_json(usage)}};
}

}  // namespace vkgate::cli
