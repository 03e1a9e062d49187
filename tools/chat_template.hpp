// Chat formatting for `vkgate serve`: the two chat template families vkgate
// renders (Qwen's ChatML and Llama 3's headers), recognised by their markers
// in the model's Jinja template text and rendered by hand. Debian 12 has no
// C++ Jinja engine, and these two cover the model families vkgate runs; any
// other template is refused rather than guessed at. Qwen3's and Qwen3.5's
// templates (their markers: <tool_call>, reasoning_content, enable_thinking,
// and Qwen3.5's <function=...> example) are rendered with all they do: tools
// and their calls and responses, earlier turns' <think> blocks dropped,
// enable_thinking. tests/data/chat holds conversations and what Hugging
// Face's Jinja engine renders of them with the real templates (Qwen2.5,
// Qwen3, Qwen3.5, Llama 3.1 to 3.3).
// Header-only so that the unit tests use it without linking the CLI.
#pragma once

#include <algorithm>
#include <ctime>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace vkgate::cli {

// A call an assistant turn made: the function's name and its arguments, a
// JSON object as tojson prints it.
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
  // chat_template_kwargs.date_string: Llama 3.1+'s "Today Date".
  std::optional<std::string> date_string;
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
    // A key from a model's reply may hold bytes that are not UTF-8: U+FFFD, as values.
    if (object) s += tojson(nlohmann::ordered_json(item.key())) + ": ";
    s += tojson(item.value());
  }
  return s + (object ? "}" : "]");
}

// A conversation the template refuses (Qwen3.5's raise_exception: a system
// turn after the first, no user query): serve answers 400 with its message.
struct ChatTemplateError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

enum class ChatFamily { none, chatml, llama3 };
// Which ChatML: plain (Qwen2.5's and others' turns), Qwen3's (tools as JSON in
// <tool_call>, thinking), Qwen3.5's (tools as <function=...> XML, a reply
// that opens inside <think>).
enum class ChatDialect { plain, qwen3, qwen35 };

struct ChatTemplate {
  ChatFamily family = ChatFamily::none;
  // Qwen2.5's template adds this system message when the conversation has none.
  std::string default_system;
  // Llama 3.1+ templates always open with a system header that carries these dates;
  // 3.2's today's date (strftime_now), 3.1's and 3.3's a fixed one.
  bool knowledge_date = false, date_today = false;
  ChatDialect dialect = ChatDialect::plain;

  // From the template text (empty: the model has none).
  static ChatTemplate detect(std::string_view text) {
    ChatTemplate t;
    if (text.find("<|im_start|>") != std::string_view::npos) {
      t.family = ChatFamily::chatml;
      // Qwen2.5 hard-codes its default system prompt in the template; pick it out so
      // that a conversation without one gets what transformers would render.
      constexpr std::string_view qwen25 = "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.";
      if (text.find(qwen25) != std::string_view::npos) t.default_system = qwen25;
      auto has = [&](std::string_view marker) { return text.find(marker) != std::string_view::npos; };
      if (t.default_system.empty() && has("<tool_call>") && has("reasoning_content") && has("last_query_index") &&
          has("enable_thinking"))
        t.dialect = has("<function=example_function_name>") ? ChatDialect::qwen35 : ChatDialect::qwen3;
    } else if (text.find("<|start_header_id|>") != std::string_view::npos &&
               text.find("<|eot_id|>") != std::string_view::npos) {
      t.family = ChatFamily::llama3;
      t.knowledge_date = text.find("Cutting Knowledge Date") != std::string_view::npos;
      t.date_today = t.knowledge_date && text.find("strftime_now") != std::string_view::npos;
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

  // Today as Llama 3.2's template writes it (transformers' strftime_now("%d %b %Y"): the local date).
  static std::string today() {
    const std::time_t now = std::time(nullptr);
    std::tm tm{};
    localtime_r(&now, &tm);
    char buf[32];
    std::strftime(buf, sizeof buf, "%d %b %Y", &tm);
    return buf;
  }

  // Whether render takes tools, tool calls and tool messages, and enable_thinking.
  bool takes_tools() const { return dialect != ChatDialect::plain; }

  // The prompt for the assistant's next turn (add_generation_prompt). The text holds
  // the special tokens as text: encode it without the post-processor's own BOS.
  // Tools, tool calls and tool messages only where takes_tools(). Throws
  // ChatTemplateError where the template refuses the conversation.
  std::string render(const std::vector<ChatMessage>& messages, const RenderOptions& o = {}) const {
    if (dialect == ChatDialect::qwen3) return render_qwen3(messages, o);
    if (dialect == ChatDialect::qwen35) return render_qwen35(messages, o);
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
        // (date_string, else 3.2's today as transformers' strftime_now gives it,
        // else the template's default).
        std::string system;
        if (!messages.empty() && messages[0].role == "system") system = trim(messages[0].content), first = 1;
        const std::string date = o.date_string ? *o.date_string : date_today ? today() : "26 Jul 2024";
        out += header("system") + "Cutting Knowledge Date: December 2023\nToday Date: " + date + "\n\n" + system +
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
    const size_t last_query = std::min(last_user_query(messages, false), n - 1);
    for (size_t i = 0; i < n; ++i) {
      const ChatMessage& m = messages[i];
      if (m.role == "user" || (m.role == "system" && i > 0)) {
        out += "<|im_start|>" + m.role + "\n" + m.content + "<|im_end|>\n";
      } else if (m.role == "assistant") {
        std::string content = m.content;
        const std::string reasoning = thinking(m, content);
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

  // Qwen3.5's template, step by step: contents trimmed, tool calls as
  // <function=NAME><parameter=K>value</parameter>... blocks, the reply opened
  // inside <think> unless enable_thinking is false.
  static std::string render_qwen35(const std::vector<ChatMessage>& messages, const RenderOptions& o) {
    const size_t n = messages.size();
    const bool has_system = n > 0 && messages[0].role == "system";
    std::string out;
    if (!o.tools.empty()) {
      out += "<|im_start|>system\n# Tools\n\nYou have access to the following functions:\n\n<tools>";
      for (const std::string& t : o.tools) out += "\n" + t;
      out += "\n</tools>\n\nIf you choose to call a function ONLY reply in the following format with NO suffix:\n\n"
             "<tool_call>\n<function=example_function_name>\n<parameter=example_parameter_1>\nvalue_1\n</parameter>\n"
             "<parameter=example_parameter_2>\nThis is the value for the second parameter\nthat can span\nmultiple "
             "lines\n</parameter>\n</function>\n</tool_call>\n\n<IMPORTANT>\nReminder:\n- Function calls MUST follow "
             "the specified format: an inner <function=...></function> block must be nested within "
             "<tool_call></tool_call> XML tags\n- Required parameters MUST be specified\n- You may provide optional "
             "reasoning for your function call in natural language BEFORE the function call, but NOT after\n- If "
             "there is no function call available, answer the question like normal with your current knowledge and "
             "do not tell the user about function calls\n</IMPORTANT>";
      if (has_system && !trim(messages[0].content).empty()) out += "\n\n" + trim(messages[0].content);
      out += "<|im_end|>\n";
    } else if (has_system) {
      out += "<|im_start|>system\n" + trim(messages[0].content) + "<|im_end|>\n";
    }
    const size_t last_query = last_user_query(messages, true);
    if (last_query == n) throw ChatTemplateError("No user query found in messages.");
    for (size_t i = 0; i < n; ++i) {
      const ChatMessage& m = messages[i];
      std::string content = trim(m.content);
      if (m.role == "system") {
        if (i > 0) throw ChatTemplateError("System message must be at the beginning.");
      } else if (m.role == "user") {
        out += "<|im_start|>user\n" + content + "<|im_end|>\n";
      } else if (m.role == "assistant") {
        const std::string reasoning = thinking(m, content);
        out += "<|im_start|>assistant\n";
        if (i > last_query) out += "<think>\n" + trim(reasoning) + "\n</think>\n\n";
        out += content;
        for (size_t k = 0; k < m.tool_calls.size(); ++k) {
          out += k > 0 ? "\n" : trim(content).empty() ? "" : "\n\n";
          out += "<tool_call>\n<function=" + m.tool_calls[k].name + ">\n";
          const nlohmann::ordered_json args =
              nlohmann::ordered_json::parse(m.tool_calls[k].arguments, nullptr, false);
          if (!args.is_object())
            throw ChatTemplateError("the arguments of tool call '" + m.tool_calls[k].name +
                                    "' must be a JSON object for this template");
          for (const auto& item : args.items()) {
            const nlohmann::ordered_json& v = item.value();
            out += "<parameter=" + item.key() + ">\n" + (v.is_string() ? v.get<std::string>() : python_str(v)) +
                   "\n</parameter>\n";
          }
          out += "</function>\n</tool_call>";
        }
        out += "<|im_end|>\n";
      } else if (m.role == "tool") {
        if (i > 0 && messages[i - 1].role != "tool") out += "<|im_start|>user";
        out += "\n<tool_response>\n" + content + "\n</tool_response>";
        if (i + 1 == n || messages[i + 1].role != "tool") out += "<|im_end|>\n";
      }
    }
    out += "<|im_start|>assistant\n";
    out += o.enable_thinking == false ? "<think>\n\n</think>\n\n" : "<think>\n";
    return out;
  }

  // Python's str() of a JSON value as a Jinja template prints it under
  // transformers: objects and arrays as tojson, True/False, None.
  static std::string python_str(const nlohmann::ordered_json& v) {
    if (v.is_object() || v.is_array()) return tojson(v);
    if (v.is_boolean()) return v.get<bool>() ? "True" : "False";
    if (v.is_null()) return "None";
    return v.dump();
  }

  // The index of the last user turn that is not tool responses (contents
  // `trimmed` first, as Qwen3.5's template does); messages.size() if none.
  static size_t last_user_query(const std::vector<ChatMessage>& messages, bool trimmed) {
    for (size_t i = messages.size(); i-- > 0;) {
      const std::string c = trimmed ? trim(messages[i].content) : messages[i].content;
      if (messages[i].role == "user" && !(c.starts_with("<tool_response>") && c.ends_with("</tool_response>")))
        return i;
    }
    return messages.size();
  }

  // An assistant turn's thinking: its reasoning_content, else the text of a
  // <think> block in `content`, which is then left with what follows </think>
  // (the templates' split('</think>') and strips).
  static std::string thinking(const ChatMessage& m, std::string& content) {
    if (m.reasoning_content) return *m.reasoning_content;
    const size_t end = content.find("</think>");
    if (end == std::string::npos) return {};
    std::string before = strip(content.substr(0, end), false, true);
    if (const size_t open = before.rfind("<think>"); open != std::string::npos) before.erase(0, open + 7);
    content = strip(content.substr(content.rfind("</think>") + 8), true, false);
    return strip(before, true, false);
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

}  // namespace vkgate::cli
