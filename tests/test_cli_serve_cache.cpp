// `vkgate serve`'s prompt cache (--prompt-cache), over HTTP, on a tiny random
// qwen3 model and a qwen3_next one (Gated DeltaNet states, restored from a
// checkpoint): a chat's next turn and a repeated prompt run only what the
// cache lacks (usage.prompt_tokens_details.cached_tokens) and answer as a
// server without the cache does; "cache_prompt": false; the metrics.
#ifdef VKGATE_CLI

#include "doctest.hpp"

#include <nlohmann/json.hpp>

#include "cli_harness.hpp"
#include "harness.hpp"
#include "model_dir.hpp"
#include "model_weights.hpp"
#include "serve_client.hpp"

namespace test_cli_serve_cache {

namespace {

using nlohmann::json;
using namespace vkgate;
using namespace vkgate::cli_test;

const char* kChatMl = "{% for message in messages %}<|im_start|>{{ message.role }}\n{{ message.content }}<|im_end|>\n{% endfor %}";

size_t cached(const json& usage) { return usage["prompt_tokens_details"]["cached_tokens"].get<size_t>(); }

void check_prompt_cache(const std::string& weights) {
  Served warm(weights, {"--ctx", "200"}), cold(weights, {"--ctx", "200", "--prompt-cache", "0"});
  auto chat = [](const Served& s, const json& body) { return post_json(s.port, "/v1/chat/completions", body); };
  auto content = [](const json& r) { return r["choices"][0]["message"]["content"].get<std::string>(); };
  json turn = {{"messages", json::array({{{"role", "user"}, {"content", "Hi there"}}})}, {"max_tokens", 6}};
  const json a1 = chat(warm, turn), b1 = chat(cold, turn);
  CHECK(content(a1) == content(b1));
  CHECK(cached(a1["usage"]) == 0);
  const size_t first = a1["usage"]["prompt_tokens"];

  // The next turn: the first turn's prompt comes from the cache (a recurrent
  // model's from its checkpoint before the last token, or all of the reply).
  turn["messages"].push_back({{"role", "assistant"}, {"content", content(a1)}});
  turn["messages"].push_back({{"role", "user"}, {"content", "And then?"}});
  const json a2 = chat(warm, turn), b2 = chat(cold, turn);
  CHECK(content(a2) == content(b2));
  const size_t prompt = a2["usage"]["prompt_tokens"];
  CHECK(cached(a2["usage"]) >= first - 1);
  CHECK(cached(a2["usage"]) < prompt);
  CHECK(cached(b2["usage"]) == 0);

  // The same prompt again, streamed: all of it but its last token.
  json usage, streamed = turn;
  streamed["stream_options"] = {{"include_usage", true}};
  CHECK(streamed_text(warm.port, streamed, true, &usage) == content(a2));
  CHECK(cached(usage) == prompt - 1);

  // "cache_prompt": false neither takes a cached sequence nor leaves one.
  turn["cache_prompt"] = false;
  const json a3 = chat(warm, turn);
  CHECK(content(a3) == content(a2));
  CHECK(cached(a3["usage"]) == 0);
  check_error(http(warm.port, "POST", "/v1/chat/completions", json{{"messages", turn["messages"]}, {"cache_prompt", 1}}.dump()),
              400);

  const std::string metrics = http(warm.port, "GET", "/metrics").body;
  INFO(metrics);
  CHECK(metrics.find("\nvkgate_prompt_tokens_cached_total " + std::to_string(cached(a2["usage"]) + cached(usage)) +
                     "\n") != std::string::npos);
  CHECK(metrics.find("\nvkgate_cached_sequences 1\n") != std::string::npos);
  CHECK(http(cold.port, "GET", "/metrics").body.find("\nvkgate_cached_sequences 0\n") != std::string::npos);
}

}  // namespace

TEST_CASE("cli serve: --prompt-cache runs only what a cached sequence lacks and answers as without it (qwen3)") {
  std::mt19937 rng(31);
  TextModel tm(rng, kChatMl);
  check_prompt_cache(tm.m.path());
}

TEST_CASE("cli serve: --prompt-cache restores Gated DeltaNet states from a checkpoint (qwen3_next)") {
  std::mt19937 rng(37);
  const Tokenizer tok = Tokenizer::load(std::string(VKGATE_TOKENIZER_UNIT_DIR) + "/gpt2_style.json");
  json config = test::tiny_qwen3_next_json();
  config["vocab_size"] = tok.vocab_size();
  ModelDir m(parse_model_config_json(config.dump(), "config.json"), rng, DType::F32, false, config);
  write_text(m.dir / "tokenizer.json",
             test::read_file_text(std::string(VKGATE_TOKENIZER_UNIT_DIR) + "/gpt2_style.json"));
  write_text(m.dir / "tokenizer_config.json", json{{"chat_template", kChatMl}}.dump());
  check_prompt_cache(m.path());
}

}  // namespace test_cli_serve_cache

#endif  // VKGATE_CLI
