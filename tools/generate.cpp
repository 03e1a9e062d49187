// `vkgate generate`: greedy decoding with a model checkpoint. The new ids go
// to stdout as they come (one line, space-separated), everything else to stderr.
#include <cerrno>
#include <cstdio>
#include <string>
#include <vector>

#include "cli.hpp"
#include "vkgate/error.hpp"
#include "vkgate/model.hpp"

namespace vkgate::cli {

namespace {

constexpr const char* kGenerateUsage = R"(usage: vkgate generate --weights DIR --prompt-ids "1,2,3" --max-new-tokens N
                       [--device SEL] [--precision fp32|fp16|bf16] [--ignore-eos] [--json]

Greedy decoding: one step for the prompt, then one replayed step per new token,
with the KV cache on the device. Prints the generated ids (not the prompt)
space-separated on one line as they are decided, and nothing else on stdout;
progress and errors go to stderr.

  --weights DIR          a model checkpoint directory: config.json (model_type qwen3 or
                         llama), model.safetensors or model.safetensors.index.json and shards,
                         optionally generation_config.json
  --prompt-ids LIST      the prompt's token ids, comma-separated, each in [0, vocab_size)
  --max-new-tokens N     at most N new ids
  --device SEL           device index or name substring (default: VKGATE_DEVICE, else the best)
  --precision P          device storage of weights and activations: fp32 (default), fp16, bf16
  --ignore-eos           keep going after eos_token_id (config.json or generation_config.json;
                         a list means any of them). Without it the eos id is printed, then
                         generation stops
  --json                 print one JSON object instead: generated (the ids), tokens_per_s (the
                         decode steps'), prefill_ms, step_ms (each decode step), prompt_tokens

Exit codes: 0 success, 1 bad file, config, id or device, 2 bad usage.
)";

std::vector<int64_t> parse_ids(const std::string& flag, const std::string& text) {
  std::vector<int64_t> ids;
  size_t at = 0;
  while (at <= text.size()) {
    const size_t comma = std::min(text.find(',', at), text.size());
    const std::string item = text.substr(at, comma - at);
    char* end = nullptr;
    errno = 0;
    const long long v = std::strtoll(item.c_str(), &end, 10);
    if (item.empty() || *end || errno == ERANGE)
      throw UsageError(flag + " must be comma-separated integers, got '" + item + "' in '" + text + "'");
    ids.push_back(v);
    at = comma + 1;
  }
  return ids;
}

std::string json_list(const std::vector<double>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%s%.3f", i ? ", " : "", v[i]);
    s += buf;
  }
  return s + "]";
}

int cmd_generate(Args& args) {
  std::string weights, device;
  std::vector<int64_t> prompt;
  bool json = false, have_prompt = false;
  ModelOptions options;
  GenerateOptions g;
  g.max_new_tokens = -1;
  while (!args.done()) {
    const std::string a = args.next();
    if (a == "--weights") weights = args.value(a);
    else if (a == "--prompt-ids") prompt = parse_ids(a, args.value(a)), have_prompt = true;
    else if (a == "--max-new-tokens") g.max_new_tokens = int(args.number(a, 0, 1 << 24));
    else if (a == "--device") device = args.value(a);
    else if (a == "--precision") options.precision = parse_precision(a, args.value(a));
    else if (a == "--ignore-eos") g.stop_at_eos = false;
    else if (a == "--json") json = true;
    else throw UsageError("generate: unknown option '" + a + "'");
  }
  if (weights.empty()) throw UsageError("generate: --weights is required");
  if (!have_prompt) throw UsageError("generate: --prompt-ids is required");
  if (g.max_new_tokens < 0) throw UsageError("generate: --max-new-tokens is required");

  ContextOptions copts;
  copts.device = device;
  Context ctx(copts);
  Model model = Model::load(ctx, weights, options);
  for (size_t i = 0; i < prompt.size(); ++i)
    if (prompt[i] < 0 || prompt[i] >= model.config().vocab_size)
      throw Error(ErrorCode::invalid_argument, "--prompt-ids: id " + std::to_string(prompt[i]) + " at position " +
                                                   std::to_string(i) + " is outside the vocabulary [0, " +
                                                   std::to_string(model.config().vocab_size) + ") of " + weights);
  std::fprintf(stderr, "vkgate: %s, %d layers, %s on %s: %zu prompt ids, up to %d new\n",
               model.config().model_type.c_str(), model.config().num_hidden_layers, to_string(options.precision),
               ctx.device().name.c_str(), prompt.size(), g.max_new_tokens);
  bool first = true;
  if (!json)
    g.on_token = [&](int64_t id) {
      std::printf("%s%lld", first ? "" : " ", static_cast<long long>(id));
      std::fflush(stdout);
      first = false;
      return true;
    };
  const GenerateResult r = model.generate(prompt, g);
  if (validation_failed(ctx)) return 1;
  if (json) {
    std::string ids;
    for (int64_t id : r.ids) ids += (ids.empty() ? "" : ", ") + std::to_string(id);
    std::printf("{\"generated\": [%s], \"prompt_tokens\": %zu, \"tokens_per_s\": %.3f, \"prefill_ms\": %.3f, "
                "\"step_ms\": %s}\n",
                ids.c_str(), prompt.size(), r.tokens_per_s(), r.prefill_ms, json_list(r.step_ms).c_str());
  } else {
    std::printf("\n");
  }
  std::fprintf(stderr, "vkgate: %zu ids; prompt %.1f ms, %.2f tokens/s decoding\n", r.ids.size(), r.prefill_ms,
               r.tokens_per_s());
  return 0;
}

}  // namespace

const Command kGenerate{"generate", kGenerateUsage, cmd_generate};

}  // namespace vkgate::cli
