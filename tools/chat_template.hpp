// Chat formatting for `vkgate serve`: the two chat template families vkgate
// renders (Qwen's ChatML and Llama 3's headers), recognised by their markers
// in the model's Jinja template text and rendered by hand. Debian 12 has no
// C++ Jinja engine, and these two cover the model families vkgate runs; any
// other template is refused rather than guessed at. Qwen3's template (its
// markers: <tool_call>, reasoning_content, enable_thinking) is rendered with
// all it does: tools and their calls and responses, earlier turns' <think>
// blocks dropped, enable_thinking false. tests/data/chat holds conversations
// and what Hugging Face's Jinja engine renders of them with Qwen3's template.
// Header-only so that the unit tests use it without linking the CLI.
#pragma once

#include <algorithm>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace vkgate::cli {

// A call an assistant turn made: the function's name and its arguments as
// JSON text (OpenAI's `arguments` string, printed as it is).
struct ToolCall {
  std::string name;
  std::string arguments;
};

struct ChatMessage {
  std::string role;  // system, user, assistant or tool
  std::string content;
  // An assistant turn's thinking where the client sends it apart (else it
  // may lead content as <think>...</think>).
  std::optional<std::string> reasoning_content = std::nullopt;
  std::vector<ToolCall> tool_calls = {};
};

struct RenderOptions {
  // Each tool's definition as tojson prints it (OpenAI's {"type": "function", ...}).
  std::vector<std::string> tools;
  // chat_template_kwargs.enable_thinking: false opens the reply with an empty
  // <think></think>, as Qwen3's template does.
  std::optional<bool> enable_thinking;
};

enum class ChatFamily { none, chatml, llama3 };

struct ChatTemplate {
  ChatFamily family = ChatFamily::none;
  // Qwen2.5's template adds this system message when the conversation has none.
  std::string default_system;
  // Llama 3.1+ templates always open with a system header that carries these dates.
  bool knowledge_date = false;
  // Qwen3's ChatML: tools, tool calls and responses, earlier turns' thinking
  // dropped, enable_thinking.
  bool qwen3 = false;

  // From the template text (empty: the model has none).
  static ChatTemplate detect(std::string_view text) {
    ChatTemplate t;
    if (text.find("<|im_start|>") != std::string_view::npos) {
      t.family = ChatFamily::chatml;
      // Qwen2.5 hard-codes its default system prompt in the template; pick it out so
      // that a conversation without one gets what transformers would render.
      constexpr std::string_view qwen25 = "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.";
      if (text.find(qwen25) != std::string_view::npos) t.default_system = qwen25;
      t.qwen3 = t.default_system.empty() && text.find("<tool_call>") != std::string_view::npos &&
                text.find("reasoning_content") != std::string_view::npos &&
                text.find("last_query_index") != std::string_view::npos &&
                text.find("enable_thinking") != std::string_view::npos;
    } else if (text.find("<|start_header_id|>") != std::string_view::npos &&
               text.find("<|eot_id|>") != std::string_view::npos) {
      t.family = ChatFamily::llama3;
      t.knowledge_date = text.find("Cutting Knowledge Date") != std::string_view::npos;
    }
    return t;
  }

  bool usable() const { return family != ChatFamily::none; }

  // The text that ends an assistant turn: a stop string as well as an eos id, for
  // models whose generation_config does not list the turn's end among the eos ids.
  std::string end_of_turn() const {
    switch (family) {
      case ChatFamily::chatml: return "<|im_end|>";
      case ChatFamily::llama3: return "<|eot_id|>";
      default: return {};
    }
  }

  // Whether render takes tools, tool calls and tool messages, and enable_thinking.
  bool takes_tools() const { return qwen3; }

  // The prompt for the assistant's next turn (add_generation_prompt). The text holds
  // the special tokens as text: encode it without the post-processor's own BOS.
  // Tools, tool calls and tool messages only where takes_tools().
  std::string render(const std::vector<ChatMessage>& messages, const RenderOptions& o = {}) const {
    if (qwen3) return render_qwen3(messages, o);
    std::string out;
    if (family == ChatFamily::chatml) {
      const bool has_system = !messages.empty() && messages[0].role == "system";
      if (!has_system && !default_system.empty()) out += "<|im_start|>system\n" + default_system + "<|im_end|>\n";
      for (const ChatMessage& m : messages) out += "<|im_start|>" + m.role + "\n" + m.content + "<|im_end|>\n";
      out += "<|im_start|>assistant\n";
    } else if (family == ChatFamily::llama3) {
      out += "<|begin_of_text|>";
      size_t first = 0;
      if (knowledge_date) {
        // Llama 3.1's template: the system turn always comes first, with its dates
        // (its default date string, as transformers renders it without date_string).
        std::string system;
        if (!messages.empty() && messages[0].role == "system") system = trim(messages[0].content), first = 1;
        out += header("system") + "Cutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n" + system +
               "<|eot_id|>";
      }
      for (size_t i = first; i < messages.size(); ++i)
        out += header(messages[i].role) + trim(messages[i].content) + "<|eot_id|>";
      out += header("assistant");
    }
    return out;
  }

 private:
  // Qwen3's template, step by step.
  static std::string render_qwen3(const std::vector<ChatMessage>& messages, const RenderOptions& o) {
    const size_t n = messages.size();
    const bool has_system = n > 0 && messages[0].role == "system";
    std::string out;
    if (!o.tools.empty()) {
      out += "<|im_start|>system\n";
      if (has_system) out += messages[0].content + "\n\n";
      out += "# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided "
             "with function signatures within <tools></tools> XML tags:\n<tools>";
      for (const std::string& t : o.tools) out += "\n" + t;
      out += "\n</tools>\n\nFor each function call, return a json object with function name and arguments within "
             "<tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": "
             "<args-json-object>}\n</tool_call><|im_end|>\n";
    } else if (has_system) {
      out += "<|im_start|>system\n" + messages[0].content + "<|im_end|>\n";
    }
    // The last user turn that is not tool responses: thinking before it is dropped.
    size_t last_query = n - 1;
    for (size_t i = n; i-- > 0;) {
      const std::string& c = messages[i].content;
      if (messages[i].role == "user" && !(c.starts_with("<tool_response>") && c.ends_with("</tool_response>"))) {
        last_query = i;
        break;
      }
    }
    for (size_t i = 0; i < n; ++i) {
      const ChatMessage& m = messages[i];
      if (m.role == "user" || (m.role == "system" && i > 0)) {
        out += "<|im_start|>" + m.role + "\n" + m.content + "<|im_end|>\n";
      } else if (m.role == "assistant") {
        std::string content = m.content, reasoning;
        if (m.reasoning_content) {
          reasoning = *m.reasoning_content;
        } else if (const size_t end = content.find("</think>"); end != std::string::npos) {
          std::string before = strip(content.substr(0, end), false, true);
          if (const size_t open = before.rfind("<think>"); open != std::string::npos) before.erase(0, open + 7);
          reasoning = strip(before, true, false);
          content = strip(content.substr(content.rfind("</think>") + 8), true, false);
        }
        out += "<|im_start|>assistant\n";
        if (i > last_query && (i + 1 == n || !reasoning.empty()))
          out += "<think>\n" + strip(reasoning, true, true) + "\n</think>\n\n" + strip(content, true, false);
        else
          out += content;
        for (size_t k = 0; k < m.tool_calls.size(); ++k) {
          if (k > 0 || !content.empty()) out += "\n";
          out += "<tool_call>\n{\"name\": \"" + m.tool_calls[k].name + "\", \"arguments\": " +
                 m.tool_calls[k].arguments + "}\n</tool_call>";
        }
        out += "<|im_end|>\n";
      } else if (m.role == "tool") {
        if (i == 0 || messages[i - 1].role != "tool") out += "<|im_start|>user";
        out += "\n<tool_response>\n" + m.content + "\n</tool_response>";
        if (i + 1 == n || messages[i + 1].role != "tool") out += "<|im_end|>\n";
      }
    }
    out += "<|im_start|>assistant\n";
    if (o.enable_thinking == false) out += "<think>\n\n</think>\n\n";
    return out;
  }

  // Python's strip('\n') at the front and/or the back.
  static std::string strip(std::string s, bool front, bool back) {
    if (back) s.erase(s.find_last_not_of('\n') + 1);
    if (front) s.erase(0, std::min(s.find_first_not_of('\n'), s.size()));
    return s;
  }

  static std::string header(const std::string& role) {
    return "<|start_header_id|>" + role + "<|end_header_id|>\n\n";
  }
  // Jinja's trim: the whitespace at both ends.
  static std::string trim(std::string_view s) {
    const std::string_view ws = " \t\n\r\f\v";
    const size_t b = s.find_first_not_of(ws);
    if (b == std::string_view::npos) return {};
    return std::string(s.substr(b, s.find_last_not_of(ws) - b + 1));
  }
};

// A reply's thinking apart from its answer (serve --reasoning-parser qwen3): a
// reply that opens with <think> has its reasoning up to </think> (all of it
// if the reply ends first), the rest is content. Newlines at the reasoning's
// ends and at the content's start are dropped, as Qwen3's template drops them
// when the turn comes back. Fed piece by piece (a stream), it holds back only
// what may yet be a tag or such newlines; finish() gives the rest.
class ReasoningSplitter {
 public:
  struct Parts {
    std::string reasoning, content;
  };
  Parts feed(std::string_view piece) {
    held_ += piece;
    return take(false);
  }
  Parts finish() { return take(true); }
  // A whole reply at once.
  static Parts split(std::string_view text) {
    ReasoningSplitter r;
    Parts a = r.feed(text), b = r.finish();
    return {a.reasoning + b.reasoning, a.content + b.content};
  }

 private:
  static constexpr std::string_view kOpen = "<think>", kClose = "</think>";
  enum class Phase { start, reasoning, content } phase_ = Phase::start;
  std::string held_;
  bool reasoning_began_ = false, content_began_ = false;

  // Whether `s` ends with a proper prefix of `tag` (or a whole one).
  static size_t partial_tag(std::string_view s, std::string_view tag) {
    for (size_t n = std::min(s.size(), tag.size() - 1); n > 0; --n)
      if (s.substr(s.size() - n) == tag.substr(0, n)) return n;
    return 0;
  }
  Parts take(bool end) {
    Parts out;
    if (phase_ == Phase::start) {
      const size_t lead = std::min(held_.find_first_not_of(" \t\r\n"), held_.size());
      const std::string_view rest = std::string_view(held_).substr(lead);
      if (rest.starts_with(kOpen)) {
        held_.erase(0, lead + kOpen.size());
        phase_ = Phase::reasoning;
      } else if (!end && kOpen.starts_with(rest)) {
        return out;  // may still become <think>
      } else {
        phase_ = Phase::content;
      }
    }
    if (phase_ == Phase::reasoning) {
      const size_t close = held_.find(kClose);
      std::string text;
      if (close != std::string::npos) {
        text = held_.substr(0, close);
        held_.erase(0, close + kClose.size());
        phase_ = Phase::content;
        text.erase(text.find_last_not_of('\n') + 1);
      } else {
        // Hold back what may begin </think>, and trailing newlines that may end the reasoning.
        size_t keep = end ? 0 : partial_tag(held_, kClose);
        if (!end) keep = held_.size() - (held_.substr(0, held_.size() - keep).find_last_not_of('\n') + 1);
        text = held_.substr(0, held_.size() - keep);
        held_.erase(0, held_.size() - keep);
        if (end) text.erase(text.find_last_not_of('\n') + 1);
      }
      if (!reasoning_began_) text.erase(0, std::min(text.find_first_not_of('\n'), text.size()));
      reasoning_began_ = reasoning_began_ || !text.empty();
      out.reasoning = std::move(text);
    }
    if (phase_ == Phase::content) {
      if (!content_began_) held_.erase(0, std::min(held_.find_first_not_of('\n'), held_.size()));
      content_began_ = content_began_ || !held_.empty();
      out.content = std::move(held_);
      held_.clear();
    }
    return out;
  }
};

// Jinja's tojson as transformers defines it (Python's json.dumps: ", " and
// ": " between items, keys in the order given, non-ASCII as it is).
inline std::string tojson(const nlohmann::ordered_json& v) {
  const bool object = v.is_object();
  if (!object && !v.is_array()) return v.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
  std::string s = object ? "{" : "[";
  bool first = true;
  for (const auto& item : v.items()) {
    if (!first) s += ", ";
    first = false;
    if (object) s += nlohmann::ordered_json(item.key()).dump() + ": ";
    s += tojson(item.value());
  }
  return s + (object ? "}" : "]");
}

// A Qwen3 reply split as OpenAI's message: the text before its first
// <tool_call> block, and each block's {"name": ..., "arguments": {...}} as a
// call (arguments as tojson prints them). A block that is not such JSON, or
// text after the calls, leaves the whole reply as content with no calls.
struct ParsedReply {
  std::string content;
  std::vector<ToolCall> calls;
};
inline ParsedReply parse_tool_calls(const std::string& text) {
  constexpr std::string_view open = "<tool_call>", close = "</tool_call>";
  size_t at = text.find(open);
  if (at == std::string::npos) return {text, {}};
  ParsedReply r;
  r.content = text.substr(0, at);
  r.content.erase(r.content.find_last_not_of(" \t\n\r") + 1);
  while (at != std::string::npos) {
    const size_t end = text.find(close, at);
    if (end == std::string::npos) return {text, {}};
    const nlohmann::ordered_json call =
        nlohmann::ordered_json::parse(text.begin() + ptrdiff_t(at + open.size()), text.begin() + ptrdiff_t(end), nullptr, false);
    if (!call.is_object() || !call.contains("name") || !call["name"].is_string() ||
        (call.contains("arguments") && !call["arguments"].is_object()))
      return {text, {}};
    r.calls.push_back({call["name"].get<std::string>(),
                       tojson(call.contains("arguments") ? call["arguments"] : nlohmann::ordered_json::object())});
    const size_t next = text.find_first_not_of(" \t\n\r", end + close.size());
    if (next == std::string::npos) break;
    if (text.compare(next, open.size(), open) != 0) return {text, {}};
    at = next;
  }
  return r;
}

}  // namespace vkgate::cli
