// `vkgate generate`: greedy decoding with a model checkpoint. The new ids go
// to stdout as they come (one line, space-separated), everything else to stderr.
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "cli.hpp"
#include "vkgate/error.hpp"
#include "vkgate/model.hpp"
#include "vkgate/tokenizer.hpp"

namespace vkgate::cli {

namespace {

constexpr const char* kGenerateUsage = R"(usage: vkgate generate --weights DIR (--prompt TEXT | --prompt-ids "1,2,3") --max-new-tokens N
                       [--tokenizer PATH] [--device SEL] [--precision fp32|fp16|bf16] [--ignore-eos] [--json]
                       [--no-check-finite]

Greedy decoding: one step for the prompt, then one replayed step per new token,
with the KV cache (a GLA model: each layer's recurrent state) on the device.
With --prompt, the text is tokenized with the model's own tokenizer.json and
the generated text streams to stdout as it is decided (whole UTF-8
characters); with --prompt-ids, the generated ids (not the prompt) go to
stdout space-separated on one line. Nothing else goes to
stdout; progress, tokens/s and errors go to stderr. Chat templates
(tokenizer_config.json) are not applied: the prompt is tokenized as given.

  --weights DIR          a model checkpoint directory: config.json (model_type qwen3, llama
                         or gla), model.safetensors or model.safetensors.index.json and shards,
                         optionally generation_config.json and tokenizer.json
  --prompt TEXT          the prompt as text (UTF-8), tokenized with DIR/tokenizer.json and
                         the special tokens its post-processor adds (e.g. Llama 3.1's BOS)
  --prompt-ids LIST      the prompt's token ids, comma-separated, each in [0, vocab_size)
  --max-new-tokens N     at most N new ids
  --tokenizer PATH       a tokenizer.json (or a directory holding one) instead of DIR's
  --device SEL           device index or name substring (default: VKGATE_DEVICE, else the best)
  --precision P          device storage of weights and activations: fp32 (default), fp16, bf16
  --ignore-eos           keep going after eos_token_id (config.json or generation_config.json;
                         a list means any of them). Without it the eos id is printed, then
                         generation stops
  --json                 print one JSON object instead: generated (the ids), text (with
                         --prompt: the generated text, bytes that are not UTF-8 as U+FFFD),
                         tokens_per_s (the decode steps'; null when one id was generated,
                         so no decode step ran), prefill_ms, step_ms (each decode step),
                         prompt_tokens
  --check-finite         (the default) refuse NaN or Inf in a weight, naming the directory,
                         the tensor and the element (and, with --precision fp16, a value
                         beyond fp16's range)
  --no-check-finite      let them through

Exit codes: 0 success, 1 bad file, config, id or device, 2 bad usage.
)";

std::string json_list(const std::vector<double>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%s%.3f", i ? ", " : "", v[i]);
    s += buf;
  }
  return s + "]";
}

std::string number(double v, const char* format = "%.3f") {
  char buf[32];
  std::snprintf(buf, sizeof buf, format, v);
  return buf;
}

int cmd_generate(Args& args) {
  std::string weights, device, text_prompt, tokenizer_path;
  std::vector<int64_t> prompt;
  bool json = false, have_prompt = false, have_text = false;
  ModelOptions options;
  GenerateOptions g;
  g.max_new_tokens = -1;
  while (!args.done()) {
    const std::string a = args.next();
    if (a == "--weights") weights = args.value(a);
    else if (a == "--prompt-ids") prompt = parse_id_list(a, args.value(a)), have_prompt = true;
    else if (a == "--prompt") text_prompt = args.value(a), have_text = true;
    else if (a == "--tokenizer") tokenizer_path = args.value(a);
    else if (a == "--max-new-tokens") g.max_new_tokens = int(args.number(a, 0, 1 << 24));
    else if (a == "--device") device = args.value(a);
    else if (a == "--precision") options.precision = parse_precision(a, args.value(a));
    else if (a == "--ignore-eos") g.stop_at_eos = false;
    else if (a == "--json") json = true;
    else if (a == "--check-finite") options.check_finite = true;
    else if (a == "--no-check-finite") options.check_finite = false;
    else throw UsageError("generate: unknown option '" + a + "'");
  }
  if (weights.empty()) throw UsageError("generate: --weights is required");
  if (have_prompt == have_text) throw UsageError("generate: give one of --prompt and --prompt-ids");
  if (have_prompt && prompt.empty()) throw UsageError("--prompt-ids needs at least one id");
  if (!tokenizer_path.empty() && !have_text) throw UsageError("generate: --tokenizer goes with --prompt");
  if (g.max_new_tokens < 0) throw UsageError("generate: --max-new-tokens is required");

  // The tokenizer first: a missing or malformed tokenizer.json fails before the weights load.
  std::optional<Tokenizer> tokenizer;
  if (have_text) {
    tokenizer = Tokenizer::load(tokenizer_path.empty() ? weights : tokenizer_path);
    std::vector<int32_t> ids;
    try {
      ids = tokenizer->encode(text_prompt);
    } catch (const Error& e) {
      throw Error(e.code(), std::string("--prompt: ") + e.what());
    }
    prompt.assign(ids.begin(), ids.end());
    if (prompt.empty()) throw Error(ErrorCode::invalid_argument, "--prompt: the text encodes to no tokens");
  }
  ContextOptions copts;
  copts.device = device;
  Context ctx(copts);
  Model model = [&] {
    try {
      return Model::load(ctx, weights, options);
    } catch (const Error& e) {
      throw with_weights_path(weights, e);  // NaN in a weight: name the directory and --no-check-finite
    }
  }();
  if (tokenizer && tokenizer->vocab_size() > model.config().vocab_size)
    throw Error(ErrorCode::invalid_argument, tokenizer->source() + " has " + std::to_string(tokenizer->vocab_size()) +
                                                 " tokens, more than the " + std::to_string(model.config().vocab_size) +
                                                 " rows of the model in " + weights);
  for (size_t i = 0; i < prompt.size(); ++i)
    if (prompt[i] < 0 || prompt[i] >= model.config().vocab_size)
      throw Error(ErrorCode::invalid_argument, "--prompt-ids: id " + std::to_string(prompt[i]) + " at position " +
                                                   std::to_string(i) + " is outside the vocabulary [0, " +
                                                   std::to_string(model.config().vocab_size) + ") of " + weights);
  std::fprintf(stderr, "vkgate: %s, %d layers, %s on %s: %zu prompt %s, up to %d new\n",
               model.config().model_type.c_str(), model.config().num_hidden_layers, to_string(options.precision),
               ctx.device().name.c_str(), prompt.size(), prompt.size() == 1 ? "id" : "ids", g.max_new_tokens);
  bool first = true;
  if (!json && tokenizer) {
    g.on_text = [&](std::string_view piece) {
      std::fwrite(piece.data(), 1, piece.size(), stdout);
      std::fflush(stdout);
      return true;
    };
  } else if (!json) {
    g.on_token = [&](int64_t id) {
      std::printf("%s%lld", first ? "" : " ", static_cast<long long>(id));
      std::fflush(stdout);
      first = false;
      return true;
    };
  }
  const GenerateResult r = tokenizer ? model.generate(*tokenizer, text_prompt, g) : model.generate(prompt, g);
  if (validation_failed(ctx)) return 1;
  const std::optional<double> rate = r.tokens_per_s();
  if (json) {
    std::string ids;
    for (int64_t id : r.ids) ids += (ids.empty() ? "" : ", ") + std::to_string(id);
    const std::string text = tokenizer ? ", \"text\": " + json_string(r.text) : "";
    std::printf("{\"generated\": [%s]%s, \"prompt_tokens\": %zu, \"tokens_per_s\": %s, \"prefill_ms\": %.3f, "
                "\"step_ms\": %s}\n",
                ids.c_str(), text.c_str(), prompt.size(), rate.has_value() ? number(*rate).c_str() : "null",
                r.prefill_ms, json_list(r.step_ms).c_str());
  } else if (tokenizer) {
    std::fputc('\n', stderr);  // stdout holds exactly the generated text
  } else {
    std::printf("\n");
  }
  std::fprintf(stderr, "vkgate: %zu %s; prompt %.1f ms, %s\n", r.ids.size(), r.ids.size() == 1 ? "id" : "ids",
               r.prefill_ms, rate.has_value() ? (number(*rate, "%.2f") + " tokens/s decoding").c_str()
                                              : "tokens/s n/a (no decode step)");
  return 0;
}

}  // namespace

const Command kGenerate{"generate", kGenerateUsage, cmd_generate};

}  // namespace vkgate::cli
