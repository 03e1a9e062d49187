// What comes back from a chat model in `vkgate serve`: a reply's thinking
// apart from its answer (ReasoningSplitter), and its tool calls in the
// template's dialect (parse_tool_calls: Qwen3's JSON in <tool_call>, Qwen3.5's
// <function=...> XML). Header-only, as chat_template.hpp, for the unit tests.
#pragma once

#include <algorithm>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "chat_template.hpp"

namespace vkgate::cli {

// A reply's thinking apart from its answer (serve --reasoning-parser qwen3): a
// reply that opens with <think> (or whose prompt opened it) has its reasoning
// up to </think> (all of it if the reply ends first), the rest is content.
// Newlines at the reasoning's ends and at the content's start are dropped, as
// Qwen3's template drops them when the turn comes back. Fed piece by piece (a stream), it holds back only
// what may yet be a tag or such newlines; finish() gives the rest.
class ReasoningSplitter {
 public:
  struct Parts {
    std::string reasoning, content;
  };
  // `opened`: the prompt ended inside <think> (Qwen3.5's), so the reply begins as reasoning.
  explicit ReasoningSplitter(bool opened = false) : phase_(opened ? Phase::reasoning : Phase::start) {}
  Parts feed(std::string_view piece) {
    held_ += piece;
    return take(false);
  }
  Parts finish() { return take(true); }
  // A whole reply at once.
  static Parts split(std::string_view text, bool opened = false) {
    ReasoningSplitter r(opened);
    Parts a = r.feed(text), b = r.finish();
    return {a.reasoning + b.reasoning, a.content + b.content};
  }

 private:
  static constexpr std::string_view kOpen = "<think>", kClose = "</think>";
  enum class Phase { start, reasoning, content } phase_;
  std::string held_;
  bool reasoning_began_ = false, content_began_ = false;

  // How many bytes at the end of `s` are a proper prefix of `tag` (0: none).
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

// A reply split as OpenAI's message: the text before its first <tool_call>
// block, and each block as a call, its arguments as tojson prints them.
// Qwen3 writes a block as {"name": ..., "arguments": {...}}; Qwen3.5 as
// <function=NAME> with a <parameter=K>\nVALUE\n</parameter> per argument,
// VALUE text: a parameter the request's tool declares "type": "string" stays
// text, another is read as JSON where it is JSON (vLLM's qwen3_coder parser
// does so by the schema too). A block that is not such, or text after the
// calls, leaves the whole reply as content with no calls.
struct ParsedReply {
  std::string content;
  std::vector<ToolCall> calls;
};

namespace reply_detail {
inline constexpr std::string_view kSpace = " \t\n\r";

// Qwen3's block: JSON.
inline std::optional<ToolCall> json_call(std::string_view block) {
  const nlohmann::ordered_json call = nlohmann::ordered_json::parse(block.begin(), block.end(), nullptr, false);
  if (!call.is_object() || !call.contains("name") || !call["name"].is_string() ||
      (call.contains("arguments") && !call["arguments"].is_object()))
    return std::nullopt;
  return ToolCall{call["name"].get<std::string>(),
                  tojson(call.contains("arguments") ? call["arguments"] : nlohmann::ordered_json::object())};
}

// The "type" a tool of `tools` (tojson texts) declares for parameter `param` of `function`.
inline std::string declared_type(const std::vector<std::string>& tools, const std::string& function,
                                 const std::string& param) {
  for (const std::string& text : tools) {
    const nlohmann::ordered_json t = nlohmann::ordered_json::parse(text, nullptr, false);
    const nlohmann::ordered_json f = t.is_object() ? t.value("function", nlohmann::ordered_json()) : nullptr;
    if (!f.is_object() || f.value("name", "") != function) continue;
    const nlohmann::ordered_json& props = f.value("parameters", nlohmann::ordered_json::object());
    if (!props.is_object() || !props.contains("properties") || !props["properties"].is_object()) continue;
    const nlohmann::ordered_json& p = props["properties"];
    if (p.contains(param) && p[param].is_object() && p[param].contains("type") && p[param]["type"].is_string())
      return p[param]["type"].get<std::string>();
  }
  return {};
}

// Qwen3.5's block: <function=NAME>, then <parameter=K>\nVALUE\n</parameter>s, then </function>.
inline std::optional<ToolCall> xml_call(std::string_view block, const std::vector<std::string>& tools) {
  auto skip = [&](size_t at) { return std::min(block.find_first_not_of(kSpace, at), block.size()); };
  size_t at = skip(0);
  if (!block.substr(at).starts_with("<function=")) return std::nullopt;
  const size_t name_end = block.find('>', at);
  if (name_end == std::string_view::npos) return std::nullopt;
  const std::string name(block.substr(at + 10, name_end - at - 10));
  nlohmann::ordered_json args = nlohmann::ordered_json::object();
  at = skip(name_end + 1);
  while (block.substr(at).starts_with("<parameter=")) {
    const size_t key_end = block.find('>', at), value_end = block.find("</parameter>", at);
    if (key_end == std::string_view::npos || value_end == std::string_view::npos || key_end > value_end)
      return std::nullopt;
    const std::string key(block.substr(at + 11, key_end - at - 11));
    std::string_view value = block.substr(key_end + 1, value_end - key_end - 1);
    if (value.starts_with('\n')) value.remove_prefix(1);
    if (value.ends_with('\n')) value.remove_suffix(1);
    const bool text = declared_type(tools, name, key) == "string";
    const nlohmann::ordered_json parsed =
        text ? nlohmann::ordered_json() : nlohmann::ordered_json::parse(value.begin(), value.end(), nullptr, false);
    if (text || parsed.is_discarded()) args[key] = std::string(value);
    else args[key] = parsed;
    at = skip(value_end + 12);
  }
  if (!block.substr(at).starts_with("</function>") || skip(at + 11) != block.size()) return std::nullopt;
  return ToolCall{name, tojson(args)};
}
}  // namespace reply_detail

inline ParsedReply parse_tool_calls(const std::string& text, ChatDialect dialect = ChatDialect::qwen3,
                                    const std::vector<std::string>& tools = {}) {
  using reply_detail::kSpace;
  constexpr std::string_view open = "<tool_call>", close = "</tool_call>";
  size_t at = text.find(open);
  if (at == std::string::npos) return {text, {}};
  ParsedReply r;
  r.content = text.substr(0, at);
  r.content.erase(r.content.find_last_not_of(kSpace) + 1);
  while (at != std::string::npos) {
    const size_t end = text.find(close, at);
    if (end == std::string::npos) return {text, {}};
    const std::string_view block = std::string_view(text).substr(at + open.size(), end - at - open.size());
    const std::optional<ToolCall> call =
        dialect == ChatDialect::qwen35 ? reply_detail::xml_call(block, tools) : reply_detail::json_call(block);
    if (!call) return {text, {}};
    r.calls.push_back(*call);
    const size_t next = text.find_first_not_of(kSpace, end + close.size());
    if (next == std::string::npos) break;
    if (text.compare(next, open.size(), open) != 0) return {text, {}};
    at = next;
  }
  return r;
}

}  // namespace vkgate::cli
