// Chat formatting for `vkgate serve`: the two chat template families vkgate
// renders (Qwen's ChatML and Llama 3's headers), recognised by their markers
// in the model's Jinja template text and rendered by hand. Debian 12 has no
// C++ Jinja engine, and these two cover the model families vkgate runs; any
// other template is refused rather than guessed at. Header-only so that the
// unit tests use it without linking the CLI.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace vkgate::cli {

struct ChatMessage {
  std::string role;  // system, user or assistant
  std::string content;
};

enum class ChatFamily { none, chatml, llama3 };

struct ChatTemplate {
  ChatFamily family = ChatFamily::none;
  // Qwen2.5's template adds this system message when the conversation has none.
  std::string default_system;
  // Llama 3.1+ templates always open with a system header that carries these dates.
  bool knowledge_date = false;

  // From the template text (empty: the model has none).
  static ChatTemplate detect(std::string_view text) {
    ChatTemplate t;
    if (text.find("<|im_start|>") != std::string_view::npos) {
      t.family = ChatFamily::chatml;
      // Qwen2.5 hard-codes its default system prompt in the template; pick it out so
      // that a conversation without one gets what transformers would render.
      constexpr std::string_view qwen25 = "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.";
      if (text.find(qwen25) != std::string_view::npos) t.default_system = qwen25;
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

  // The prompt for the assistant's next turn (add_generation_prompt). The text holds
  // the special tokens as text: encode it without the post-processor's own BOS.
  std::string render(const std::vector<ChatMessage>& messages) const {
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
