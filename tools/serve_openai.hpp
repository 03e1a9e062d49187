// `vkgate serve`: OpenAI's request and response shapes. Requests are parsed
// and checked here (every fault an ApiError carrying its HTTP status), so the
// scheduler only ever sees requests it can run.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "chat_reply.hpp"
#include "chat_template.hpp"
#include "vkgate/generate.hpp"
#include "vkgate/tokenizer.hpp"

namespace vkgate::cli {

// An error answered as {"error": {"message", "type", "code"}} with `status`.
struct ApiError : std::runtime_error {
  int status;
  std::string type, code;
  ApiError(int status, std::string type, std::string code, const std::string& message)
      : std::runtime_error(message), status(status), type(std::move(type)), code(std::move(code)) {}
};
inline ApiError bad_request(const std::string& code, const std::string& message) {
  return ApiError(400, "invalid_request_error", code, message);
}
std::string error_body(const ApiError& e);

struct CompletionRequest {
  bool chat = false;
  std::string prompt;                 // completions
  std::vector<ChatMessage> messages;  // chat completions
  std::optional<std::string> model;
  // Absent: 16 for a completion (OpenAI's default), the rest of the context for a
  // chat (OpenAI's chat has no small default; a reply cut at 16 tokens surprises).
  std::optional<int> max_tokens;
  // Sampling, stop and logprobs (a completion's `logprobs` N ≤ 5, a chat's
  // `logprobs` with `top_logprobs` N ≤ 20); max_new_tokens is set once the prompt is encoded.
  GenerateOptions options;
  int n = 1;  // choices, each its own generation (1 to kMaxChoices)
  static constexpr int kMaxChoices = 16;
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  // llama.cpp's field: the prompt may start from a cached sequence, and the
  // generation's sequence is kept for later ones (serve --prompt-cache).
  bool cache_prompt = true;
  // Chat: tools (unless tool_choice is "none") and chat_template_kwargs.enable_thinking.
  RenderOptions render;
  // Chat: tools, tool_calls or a tool message anywhere in the request (a
  // template that does not take them refuses it).
  bool uses_tools = false;
  // Chat: a reply's <think> block as reasoning_content (serve --reasoning-parser qwen3).
  bool split_reasoning = false;
  // Chat, set once rendered: the template's dialect (how tool calls read) and
  // whether the prompt ended inside <think> (Qwen3.5's: the reply starts as reasoning).
  ChatDialect dialect = ChatDialect::plain;
  bool think_opened = false;
};

// The body of POST /v1/completions (chat false) or /v1/chat/completions.
CompletionRequest parse_completion_request(const std::string& body, bool chat);

// A chat request's prompt: its messages (tools, enable_thinking) through the
// model's template, noting in `cr` how its reply reads (dialect, think_opened);
// ApiError 400 where the template cannot render them or refuses them.
std::string chat_prompt(const ChatTemplate& chat, CompletionRequest& cr);

// OpenAI's finish_reason: "stop" (eos or a stop string; "tool_calls" where
// the reply `called` tools) or "length".
const char* openai_finish_reason(FinishReason r, bool called = false);
// Whether a chat reply of a request with tools holds tool calls (parse_tool_calls;
// in its content, apart from its reasoning where the request splits it).
bool calls_tools(const CompletionRequest& req, const std::string& text);

struct Usage {
  size_t prompt_tokens = 0, completion_tokens = 0;
  size_t cached_tokens = 0;  // of prompt_tokens: taken from a cached sequence, not run
};
nlohmann::json usage_json(const Usage& u);

// The whole response (stream false).
// OpenAI's logprobs of `tokens` (GenerateOptions::logprobs ≥ 0), each token
// written as the text it decodes to: a chat's {"content": [{token, logprob,
// bytes, top_logprobs}]}, a completion's {tokens, token_logprobs,
// top_logprobs, text_offset}, whose offsets (bytes into the generated text)
// go on from `offset`, which they advance.
nlohmann::json logprobs_json(const CompletionRequest& req, std::span<const TokenLogprob> tokens,
                             const Tokenizer& tokenizer, size_t& offset);

// One choice of a whole response; `logprobs` is null without them.
struct Choice {
  std::string text;
  FinishReason finish;
  nlohmann::json logprobs;
};
// The whole response (stream false): the choices in order, index 0 up.
nlohmann::json completion_response(const CompletionRequest& req, const std::string& id, int64_t created,
                                   const std::string& model, std::span<const Choice> choices, const Usage& usage);
// One streamed chunk of choice `index`: `text` (a delta) and its tokens'
// `logprobs`, or its final one with `finish` (`called`: the reply called
// tools); a chat choice's first chunk carries the role, and `reasoning` (a
// piece of it, split_reasoning) goes as delta.reasoning_content. With tools a
// chat's reply comes whole in one chunk, its reasoning, content and tool_calls apart.
nlohmann::json completion_chunk(const CompletionRequest& req, const std::string& id, int64_t created,
                                const std::string& model, int index, const std::string& text, bool first,
                                std::optional<FinishReason> finish, nlohmann::json logprobs = nullptr,
                                bool called = false, const std::string& reasoning = {});
// The usage chunk of stream_options.include_usage: choices empty.
nlohmann::json usage_chunk(const CompletionRequest& req, const std::string& id, int64_t created,
                           const std::string& model, const Usage& usage);

}  // namespace vkgate::cli
