// vkgate — command-line front end. This file: the command table, `devices`
// and `demo`; each other command lives in its own file (cli.hpp).
#include <cmath>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "cli.hpp"
#include "vkgate/error.hpp"
#include "vkgate/reference.hpp"
#include "vkgate/version.hpp"

namespace vkgate::cli {

namespace {

constexpr const char* kUsage = R"(usage: vkgate <command> [options]
       vkgate --version

Runs gated attention (Qwen3-Next, "Gated Attention for LLMs") and whole models
built on it on a Vulkan device, checked against a double-precision CPU reference.

commands:
  devices    list the Vulkan devices and their capabilities, one per line
  demo       run the Qwen3-Next attention shape on a device and the CPU reference
  run        run a whole model (qwen3, llama, gla, qwen3_next, qwen3_moe, qwen3_5; input_ids),
             one block or one GLA or Gated DeltaNet layer (hidden_states) of a checkpoint on an
             input file, write the output file
  generate   decoding with a model checkpoint or GGUF file (qwen3, llama, gla, qwen3_next,
             qwen3_moe, qwen3_5): prompt text (or ids) in, text (or ids) out
  quantize   write a checkpoint directory (qwen3, llama, qwen3_moe, qwen3_next, qwen3_5) as a
             GGUF file llama.cpp loads, its projections in a block format (q8_0, q4_k, ...) or
             all in f16/bf16/f32
  serve      an OpenAI-compatible HTTP server for a model (/v1/completions, /v1/chat/completions,
             streaming, /metrics, a chat page)
  tokenize   text to token ids with a model's tokenizer.json (byte-level BPE)
  detokenize token ids back to text, byte for byte
  bench      time ops, the block and whole models with GPU timestamps (after checking them),
             and the tokenizer's loading and encoding (--tokenizer)

Run `vkgate <command> --help` for a command's options; `vkgate --version` (or
`vkgate version`) prints the version. Chat templates (tokenizer_config.json)
are applied only by serve's /v1/chat/completions and generate --chat (Qwen
ChatML and Llama 3); elsewhere text is tokenized as given.

environment:
  VKGATE_DEVICE       device index or name substring (when --device is not given)
  VKGATE_VALIDATION   1 enables VK_LAYER_KHRONOS_validation with synchronization validation,
                      gpu with GPU-assisted validation (out-of-bounds shader accesses)
  VKGATE_PIPELINE_STATS
                      1 prints each pipeline's compiler statistics (registers, ...) to
                      stderr where the driver reports them
  README.md (Environment) lists the others: the VKGATE_DISABLE_* switches of the fast paths.

Every error is one line on stderr, "vkgate: MESSAGE". Exit codes: 0 success,
1 error (bad file, tensor, shape, value or device; no Vulkan device), 2 bad usage.
)";

constexpr const char* kDevicesUsage = R"(usage: vkgate devices

Prints one line per Vulkan device: index, name, type, driver, fp16 arithmetic,
16-bit storage, subgroup size and operations, shared memory, max workgroup
size, max storage-buffer range, device memory, cooperative matrix, timestamps.
)";

constexpr const char* kDemoUsage = R"(usage: vkgate demo [--device SEL] [--tokens N] [--batch N] [--seed N] [--validation] [--quiet]

Builds the attention block of Qwen3-Next-80B-A3B (hidden 2048, 16 query heads,
2 KV heads, head_dim 256, partial rotary 0.25, zero-centred RMSNorm, q/k norm,
elementwise output gate) with seeded random weights, runs it on the device and
on the CPU reference, and prints the GPU time per dispatch, NMSE and max abs
error. Exits 1 if NMSE exceeds 1e-9.

options:
  --device SEL   device index or name substring (default: VKGATE_DEVICE, else the best device)
  --tokens N     sequence length (default 64)
  --batch N      batch size (default 1)
  --seed N       seed for weights and input (default 1)
  --validation   enable the validation layer with synchronization validation
  --quiet        no progress line on stderr (drawn only on a terminal: a first run compiles
                 its pipelines, which takes minutes on a CPU driver)
)";

int cmd_devices(Args& args) {
  if (!args.done()) throw UsageError("devices: unexpected argument '" + args.next() + "'");
  const auto devices = vkgate::Context::list_devices();
  if (devices.empty()) {
    std::fprintf(stderr, "vkgate: no Vulkan device with a compute queue was found\n");
    return 1;
  }
  for (const auto& d : devices) std::printf("%s\n", d.summary().c_str());
  return 0;
}

int cmd_demo(Args& args) {
  ContextOptions opts;
  opts.timestamps = true;  // the demo prints each dispatch's GPU time
  int tokens = 64, batch = 1;
  uint32_t seed = 1;
  bool quiet = false;
  while (!args.done()) {
    const std::string a = args.next();
    if (a == "--device") opts.device = args.value(a);
    else if (a == "--tokens") tokens = int(args.number(a, 1, 1 << 20));
    else if (a == "--batch") batch = int(args.number(a, 1, 1024));
    else if (a == "--seed") seed = uint32_t(args.number(a, 0, 0xffffffffL));
    else if (a == "--validation") opts.validation = true;
    else if (a == "--quiet") quiet = true;
    else throw UsageError("demo: unknown option '" + a + "'");
  }
  show_progress(opts, quiet);
  Context ctx(opts);
  const BlockConfig cfg = BlockConfig::qwen3_next_attention();
  std::printf("device: %s\n", ctx.device().summary().c_str());
  std::printf("block:  Qwen3-Next attention, hidden %d, heads %d/%d, head_dim %d, rotary %d, gate %s, batch %d, tokens %d\n",
              cfg.hidden_size, cfg.num_heads, cfg.num_kv_heads, cfg.head_dim, cfg.rotary_dim(),
              to_string(cfg.gate_kind), batch, tokens);

  std::mt19937 rng(seed);
  std::map<std::string, std::vector<float>> data;
  WeightMap weights;
  for (const auto& spec : expected_weights(cfg)) {
    const bool norm = spec.name.find("norm") != std::string::npos;
    std::normal_distribution<float> dist(0.0f, norm ? 0.1f : float(1.0 / std::sqrt(double(spec.shape.back()))));
    auto& v = data[spec.name];
    v.resize(size_t(spec.numel()));
    for (float& x : v) x = dist(rng);
    weights[spec.name] = v;
  }
  std::normal_distribution<float> unit(0.0f, 1.0f);
  std::vector<float> x(size_t(batch) * tokens * cfg.hidden_size);
  for (float& v : x) v = unit(rng);

  GatedAttention block(ctx, cfg, weights);
  block.set_poison(true);
  block.forward(x, batch, tokens);  // first run records the command buffer
  const auto y = block.forward(x, batch, tokens);
  double total = 0;
  std::printf("GPU time per dispatch (second run):\n");
  for (const auto& t : block.last_timings()) {
    std::printf("  %-18s %10.1f us\n", t.stage.c_str(), t.microseconds);
    total += t.microseconds;
  }
  std::printf("GPU time: %.1f us total\n", total);

  reference::Inputs in;
  in.hidden = x;
  in.batch = batch;
  in.tokens = tokens;
  const auto want = reference::forward(cfg, weights, in);
  const auto diff = reference::compare(y, want.output);
  const bool ok = diff.first_bad < 0 && diff.nmse <= 1e-9;
  std::printf("NMSE vs CPU reference (double): %.3e   max abs error: %.3e   tolerance 1e-9: %s\n", diff.nmse,
              diff.max_abs, ok ? "PASS" : "FAIL");
  return ok ? 0 : 1;
}

}  // namespace

bool wants_help(const std::vector<std::string>& args) {
  for (const auto& a : args)
    if (a == "--help" || a == "-h") return true;
  return false;
}

Precision parse_precision(const std::string& flag, const std::string& v) {
  if (v == "fp32" || v == "f32") return Precision::fp32;
  if (v == "fp16" || v == "f16") return Precision::fp16;
  if (v == "bf16") return Precision::bf16;
  throw UsageError(flag + " must be fp32, fp16 or bf16, got '" + v + "'");
}

std::string one_of(const std::vector<std::string_view>& names) {
  std::string out;
  for (size_t i = 0; i < names.size(); ++i)
    out += std::string(i == 0 ? "" : i + 1 == names.size() ? " or " : ", ") + std::string(names[i]);
  return out;
}

DType parse_quant_flag(const std::string& flag, const std::string& v) {
  if (const std::optional<DType> q = parse_quant(v)) return *q;
  throw UsageError(flag + " must be " + one_of(quant_spellings()) + ", got '" + v + "'");
}

bool validation_failed(const Context& ctx) {
  if (ctx.validation_messages() == 0) return false;
  std::fprintf(stderr, "vkgate: the validation layer reported %llu message(s)\n",
               static_cast<unsigned long long>(ctx.validation_messages()));
  return true;
}

}  // namespace vkgate::cli

int main(int argc, char** argv) {
  using namespace vkgate::cli;
  static const Command kDevices{"devices", kDevicesUsage, cmd_devices}, kDemo{"demo", kDemoUsage, cmd_demo};
  std::vector<std::string> all(argv + 1, argv + argc);
  if (all.empty() || all[0] == "--help" || all[0] == "-h" || all[0] == "help") {
    std::fputs(kUsage, all.empty() ? stderr : stdout);
    return all.empty() ? 2 : 0;
  }
  if (all[0] == "--version" || all[0] == "version") {
    if (all.size() > 1) {
      std::fprintf(stderr, "vkgate: %s takes no arguments (see vkgate --help)\n", all[0].c_str());
      return 2;
    }
    std::printf("vkgate %s\n", vkgate::kVersion);
    return 0;
  }
  const std::string cmd = all[0];
  Args args{std::vector<std::string>(all.begin() + 1, all.end())};
  try {
    for (const Command* c :
         {&kDevices, &kDemo, &kRun, &kGenerate, &kQuantize, &kBench, &kTokenize, &kDetokenize, &kServe}) {
      if (cmd != c->name) continue;
      if (wants_help(args.rest)) return std::fputs(c->usage, stdout), 0;
      return c->run(args);
    }
    throw UsageError("unknown command '" + cmd + "'");
  } catch (const UsageError& e) {
    std::fprintf(stderr, "vkgate: %s (see vkgate --help)\n", e.what());
    return 2;
  } catch (const vkgate::Error& e) {
    std::fprintf(stderr, "vkgate: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "vkgate: %s\n", e.what());
    return 1;
  }
}
