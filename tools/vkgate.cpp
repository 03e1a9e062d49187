// vkgate — command-line front end: list devices, run the demo.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <memory>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <random>
#include <string>
#include <vector>

#include "vkgate/bench.hpp"
#include "vkgate/block.hpp"
#include "vkgate/checkpoint.hpp"
#include "vkgate/context.hpp"
#include "vkgate/error.hpp"
#include "vkgate/reference.hpp"
#include "vkgate/safetensors.hpp"

namespace {

constexpr const char* kUsage = R"(usage: vkgate <command> [options]

Runs the gated attention block (Qwen3-Next, "Gated Attention for LLMs") on a
Vulkan device and checks it against a double-precision CPU reference.

commands:
  devices    list the Vulkan devices and their capabilities, one per line
  demo       run the Qwen3-Next attention shape on a device and the CPU reference
  run        run one block of a checkpoint on an input file, write the output file
  bench      time ops and the block with GPU timestamps (after checking them)

Run `vkgate <command> --help` for a command's options.

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

constexpr const char* kDemoUsage = R"(usage: vkgate demo [--device SEL] [--tokens N] [--batch N] [--seed N] [--validation]

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
)";

constexpr const char* kRunUsage = R"(usage: vkgate run --weights PATH [--config FILE] [--layer N] --input FILE --output FILE
                  [--device SEL] [--precision fp32|fp16|bf16] [--stats] [--no-check-finite]

Runs one gated-attention block of a checkpoint on the device.

  --weights PATH     a .safetensors file (then --config is required) or a checkpoint
                     directory: model.safetensors, or model.safetensors.index.json and its shards
  --config FILE      Hugging Face config.json (default: PATH/config.json for a directory)
  --layer N          read model.layers.N.self_attn.* and model.layers.N.input_layernorm.weight;
                     a layer that is not full attention (Gated DeltaNet) is refused.
                     Without it: bare names (q_proj.weight, ..., input_layernorm.weight)
  --input FILE       safetensors with hidden_states [B, T, D] and optionally past_key and
                     past_value [B, KV, P, Dh] (keys after k_norm and RoPE) and an additive
                     attention_mask [B, 1, T, P+T]; may be the weights file itself
  --output FILE      written atomically: output [B, T, D] (F32), with a cache also
                     present_key / present_value [B, KV, P+T, Dh]
  --device SEL       device index or name substring (default: VKGATE_DEVICE, else the best)
  --precision P      device storage of weights and activations: fp32 (default), fp16, bf16
  --stats            also write stats.first_token_attn [H] (mean attention on key 0
                     per head) and, when the block has a gate, stats.gate_mean and
                     stats.gate_frac_below_0.1
  --check-finite     (the default) refuse NaN or Inf in the input tensors (-Inf is allowed
                     in attention_mask) and in the weights, and an output that overflows,
                     naming the tensor and the element
  --no-check-finite  let NaN and Inf through to the output

Exit codes: 0 success, 1 bad file, config, shape or device, 2 bad usage.
)";

constexpr const char* kBenchUsage = R"(usage: vkgate bench [--device SEL] [--json] [--peak] [--warmup N] [--reps N] [CASE]

Checks each case against the CPU reference, then times warm-up and repeated
runs with GPU timestamps: median and min..max µs, GFLOP/s, GB/s, and with
--peak the share of the device's measured peak (a large copy for bandwidth, a
large fp32 matmul for compute). Without a CASE: the standard set (matmul
1024³ f32 and f16, attention T 512 × 16 heads × 128, rmsnorm 512×2048,
softmax 16384×1024, the Qwen3-Next block at T 64). Runs go back to back (a
block's recorded commands are replayed) and, on a GPU, warm-up lasts at least
1 s, so the figures are at the clocks of a busy GPU.

CASE:
  --op matmul --m M --n N --k K [--dtype f32|f16|bf16]
  --op attention --T T --heads H [--kv-heads KV] --head-dim Dh [--batch B] [--causal 0|1] [--dtype ...]
             [--unfused]   (default: the fused flash kernel; --unfused: scores, softmax, P·V,
                            which the block takes on CPU drivers while the scores fit 64 MiB)
  --op rmsnorm --rows R --dim D
  --op rope --rows R --heads H --head-dim Dh [--rotary N]
  --op softmax --rows R --keys S
  --op gate --rows R --heads H --head-dim Dh [--gate-width 1|Dh]
  --block [--config FILE] [--batch B] [--T T] [--past P] [--precision fp32|fp16|bf16]
          (default: the Qwen3-Next attention shape, T 64; --past P --T 1 is a decode step)
  --block --sweep [--sweep-max T]   prefill at T = 128, 256, ... up to T (default 8192)

  --json       print one JSON document instead of the table
)";

struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct Args {
  std::vector<std::string> rest;
  size_t i = 0;
  bool done() const { return i >= rest.size(); }
  const std::string& next() { return rest[i++]; }
  std::string value(const std::string& flag) {
    if (done()) throw UsageError(flag + " needs a value");
    return next();
  }
  long number(const std::string& flag, long lo, long hi) {
    const std::string v = value(flag);
    char* end = nullptr;
    const long n = std::strtol(v.c_str(), &end, 10);
    if (v.empty() || *end || n < lo || n > hi)
      throw UsageError(flag + " must be an integer in " + std::to_string(lo) + ".." + std::to_string(hi) + ", got '" + v + "'");
    return n;
  }
};

bool wants_help(const std::vector<std::string>& args) {
  for (const auto& a : args)
    if (a == "--help" || a == "-h") return true;
  return false;
}

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
  vkgate::ContextOptions opts;
  int tokens = 64, batch = 1;
  uint32_t seed = 1;
  while (!args.done()) {
    const std::string a = args.next();
    if (a == "--device") opts.device = args.value(a);
    else if (a == "--tokens") tokens = int(args.number(a, 1, 1 << 20));
    else if (a == "--batch") batch = int(args.number(a, 1, 1024));
    else if (a == "--seed") seed = uint32_t(args.number(a, 0, 0xffffffffL));
    else if (a == "--validation") opts.validation = true;
    else throw UsageError("demo: unknown option '" + a + "'");
  }
  vkgate::Context ctx(opts);
  const vkgate::BlockConfig cfg = vkgate::BlockConfig::qwen3_next_attention();
  std::printf("device: %s\n", ctx.device().summary().c_str());
  std::printf("block:  Qwen3-Next attention, hidden %d, heads %d/%d, head_dim %d, rotary %d, gate %s, batch %d, tokens %d\n",
              cfg.hidden_size, cfg.num_heads, cfg.num_kv_heads, cfg.head_dim, cfg.rotary_dim(),
              vkgate::to_string(cfg.gate_kind), batch, tokens);

  std::mt19937 rng(seed);
  std::map<std::string, std::vector<float>> data;
  vkgate::WeightMap weights;
  for (const auto& spec : vkgate::expected_weights(cfg)) {
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

  vkgate::GatedAttention block(ctx, cfg, weights);
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

  vkgate::reference::Inputs in;
  in.hidden = x;
  in.batch = batch;
  in.tokens = tokens;
  const auto want = vkgate::reference::forward(cfg, weights, in);
  const auto diff = vkgate::reference::compare(y, want.output);
  const bool ok = diff.first_bad < 0 && diff.nmse <= 1e-9;
  std::printf("NMSE vs CPU reference (double): %.3e   max abs error: %.3e   tolerance 1e-9: %s\n", diff.nmse,
              diff.max_abs, ok ? "PASS" : "FAIL");
  return ok ? 0 : 1;
}

// Input tensors as fp32 with their shapes checked; names the tensor and file.
struct InputTensor {
  std::vector<float> data;
  std::vector<int64_t> shape;
};

using vkgate::shape_text;

// "[1, 0, 17]": element `flat` of `shape` as a multi-index.
std::string index_text(int64_t flat, const std::vector<int64_t>& shape) {
  std::vector<int64_t> idx(shape.size());
  for (size_t k = shape.size(); k-- > 0;) {
    const int64_t d = std::max<int64_t>(shape[k], 1);
    idx[k] = flat % d;
    flat /= d;
  }
  return shape_text(idx);
}

// --check-finite: NaN or Inf in an input tensor is refused before the device is
// touched (−Inf, a masked position, is allowed in the mask).
void check_finite(const std::string& path, const std::string& name, const InputTensor& t, bool allow_negative_inf) {
  for (size_t i = 0; i < t.data.size(); ++i) {
    const float v = t.data[i];
    if (std::isfinite(v) || (allow_negative_inf && v < 0 && std::isinf(v))) continue;
    const char* what = std::isnan(v) ? "NaN" : v > 0 ? "+Inf" : "-Inf";
    throw vkgate::Error(vkgate::ErrorCode::non_finite,
                        path + ": tensor '" + name + "' holds " + what + " at " + index_text(int64_t(i), t.shape) +
                            (allow_negative_inf ? " (only -Inf, a masked position, is allowed)" : "") +
                            " (--no-check-finite lets it through)");
  }
}

InputTensor input_tensor(const vkgate::SafetensorsFile& file, const std::string& name,
                         const std::vector<int64_t>& expected) {
  const vkgate::TensorView& t = file.at(name);
  if (t.shape != expected)
    throw vkgate::Error(vkgate::ErrorCode::shape_mismatch, file.path() + ": tensor '" + name + "' has shape " +
                                                               shape_text(t.shape) + ", expected " +
                                                               shape_text(expected));
  return {t.to_f32(), t.shape};
}

int cmd_run(Args& args) {
  std::string weights, config, input, output, device;
  int layer = -1;
  vkgate::BlockOptions options;
  bool stats = false;
  while (!args.done()) {
    const std::string a = args.next();
    if (a == "--weights") weights = args.value(a);
    else if (a == "--config") config = args.value(a);
    else if (a == "--layer") layer = int(args.number(a, 0, 1 << 20));
    else if (a == "--input") input = args.value(a);
    else if (a == "--output") output = args.value(a);
    else if (a == "--device") device = args.value(a);
    else if (a == "--stats") stats = true;
    else if (a == "--check-finite") options.check_finite = true;
    else if (a == "--no-check-finite") options.check_finite = false;
    else if (a == "--precision") {
      const std::string p = args.value(a);
      if (p == "fp32") options.precision = vkgate::Precision::fp32;
      else if (p == "fp16") options.precision = vkgate::Precision::fp16;
      else if (p == "bf16") options.precision = vkgate::Precision::bf16;
      else throw UsageError("--precision must be fp32, fp16 or bf16, got '" + p + "'");
    } else {
      throw UsageError("run: unknown option '" + a + "'");
    }
  }
  if (weights.empty()) throw UsageError("run: --weights is required");
  if (input.empty()) throw UsageError("run: --input is required");
  if (output.empty()) throw UsageError("run: --output is required");
  // The output replaces its path atomically: never let it be one of the inputs.
  for (const std::string& in_path : {weights, input, config}) {
    std::error_code ec;
    if (!in_path.empty() && std::filesystem::equivalent(output, in_path, ec))
      throw UsageError("run: --output " + output + " is the same file as " + in_path);
  }

  const vkgate::Checkpoint ckpt(weights);
  if (config.empty()) {
    if (!ckpt.is_directory())
      throw UsageError("run: --config is required when --weights is a .safetensors file (" + weights + ")");
    config = ckpt.config_path();
  }
  const vkgate::BlockConfig cfg = vkgate::load_config(config);
  if (layer >= 0) cfg.check_layer(layer);
  const vkgate::TensorMap tensors = vkgate::block_tensors(ckpt, cfg, layer);

  const vkgate::SafetensorsFile in_file(input);
  const vkgate::TensorView& hidden_view = in_file.at("hidden_states");
  if (hidden_view.shape.size() != 3 || hidden_view.shape[2] != cfg.hidden_size)
    throw vkgate::Error(vkgate::ErrorCode::shape_mismatch,
                        input + ": tensor 'hidden_states' has shape " + shape_text(hidden_view.shape) +
                            ", expected [B, T, " + std::to_string(cfg.hidden_size) + "]");
  const int64_t B = hidden_view.shape[0], T = hidden_view.shape[1], KV = cfg.num_kv_heads, Dh = cfg.head_dim;
  if (B <= 0 || T <= 0)
    throw vkgate::Error(vkgate::ErrorCode::shape_mismatch, input + ": tensor 'hidden_states' has shape " +
                                                               shape_text(hidden_view.shape) +
                                                               ": batch and tokens must be at least 1");
  const InputTensor hidden = input_tensor(in_file, "hidden_states", {B, T, cfg.hidden_size});
  const bool has_key = in_file.contains("past_key"), has_value = in_file.contains("past_value");
  if (has_key != has_value)
    throw vkgate::Error(vkgate::ErrorCode::missing_tensor, input + ": tensor '" +
                                                               std::string(has_key ? "past_value" : "past_key") +
                                                               "' is missing (a cache needs both past_key and past_value)");
  int64_t P = 0;
  InputTensor past_key, past_value, mask;
  if (has_key) {
    const auto& ks = in_file.at("past_key").shape;
    if (ks.size() != 4)
      throw vkgate::Error(vkgate::ErrorCode::shape_mismatch,
                          input + ": tensor 'past_key' has shape " + shape_text(ks) + ", expected [" +
                              std::to_string(B) + ", " + std::to_string(KV) + ", P, " + std::to_string(Dh) + "]");
    P = ks[2];
    past_key = input_tensor(in_file, "past_key", {B, KV, P, Dh});
    past_value = input_tensor(in_file, "past_value", {B, KV, P, Dh});
  }
  if (in_file.contains("attention_mask")) mask = input_tensor(in_file, "attention_mask", {B, 1, T, P + T});
  if (options.check_finite) {
    check_finite(input, "hidden_states", hidden, false);
    check_finite(input, "past_key", past_key, false);
    check_finite(input, "past_value", past_value, false);
    check_finite(input, "attention_mask", mask, true);
  }

  vkgate::ContextOptions copts;
  copts.device = device;
  vkgate::Context ctx(copts);
  // Errors about the weights' values name the weights path; about the input's, the input path.
  auto with_path = [](const std::string& path, const vkgate::Error& e) {
    const bool values = e.code() == vkgate::ErrorCode::non_finite || e.code() == vkgate::ErrorCode::unsupported;
    return values && std::string(e.what()).rfind("weight '", 0) == 0
               ? vkgate::Error(e.code(), path + ": " + e.what() + " (--no-check-finite lets it through)")
               : e;
  };
  std::unique_ptr<vkgate::GatedAttention> block_ptr;
  try {
    block_ptr = std::make_unique<vkgate::GatedAttention>(ctx, cfg, tensors, options);
  } catch (const vkgate::Error& e) {
    throw with_path(weights, e);
  }
  vkgate::GatedAttention& block = *block_ptr;
  vkgate::ForwardInputs fin;
  fin.hidden = hidden.data;
  fin.batch = int(B);
  fin.tokens = int(T);
  fin.past = int(P);
  fin.past_key = past_key.data;
  fin.past_value = past_value.data;
  fin.attention_mask = mask.data;
  fin.want_cache = has_key;
  fin.want_stats = stats;
  vkgate::ForwardOutputs out;
  try {
    out = block.run(fin);
  } catch (const vkgate::Error& e) {
    const std::string m = e.what();
    if (m.rfind("forward: hidden_states row", 0) == 0)  // fp32 RMSNorm range
      throw vkgate::Error(e.code(), input + ": " + m.substr(9));
    throw;
  }

  double gpu_us = 0;
  for (const auto& t : block.last_timings()) gpu_us += t.microseconds;
  std::vector<vkgate::TensorToWrite> tensors_out;
  auto add = [&](const std::string& name, std::vector<int64_t> shape, const std::vector<float>& v) {
    tensors_out.push_back({name, vkgate::DType::F32, std::move(shape), std::as_bytes(std::span(v))});
  };
  add("output", {B, T, cfg.hidden_size}, out.output);
  if (has_key) {
    add("present_key", {B, KV, P + T, Dh}, out.present_key);
    add("present_value", {B, KV, P + T, Dh}, out.present_value);
  }
  std::vector<float> gate_mean, gate_frac, first_token;
  if (stats) {
    const vkgate::BlockStats& st = *out.stats;
    first_token.assign(st.first_token_attn.begin(), st.first_token_attn.end());
    add("stats.first_token_attn", {int64_t(first_token.size())}, first_token);
    if (cfg.gate_kind != vkgate::GateKind::none) {
      gate_mean = {float(st.gate_mean)};
      gate_frac = {float(st.gate_frac_below_0_1)};
      add("stats.gate_mean", {}, gate_mean);
      add("stats.gate_frac_below_0.1", {}, gate_frac);
    }
  }
  // A run the validation layer objected to writes nothing.
  if (ctx.validation_messages() > 0) {
    std::fprintf(stderr, "vkgate: the validation layer reported %llu message(s)\n",
                 static_cast<unsigned long long>(ctx.validation_messages()));
    return 1;
  }
  vkgate::write_safetensors(output, tensors_out,
                            {{"producer", "vkgate run"},
                             {"device", ctx.device().name},
                             {"precision", vkgate::to_string(options.precision)}});
  std::printf("%s: batch %lld, tokens %lld, past %lld, %s on %s, GPU %.1f us -> %s\n",
              layer >= 0 ? ("layer " + std::to_string(layer)).c_str() : "block", static_cast<long long>(B),
              static_cast<long long>(T), static_cast<long long>(P), vkgate::to_string(options.precision),
              ctx.device().name.c_str(), gpu_us, output.c_str());
  if (stats) {
    std::printf("stats: first_token_attn mean %.4f", [&] {
      double m = 0;
      for (double v : out.stats->first_token_attn) m += v / double(out.stats->first_token_attn.size());
      return m;
    }());
    if (cfg.gate_kind != vkgate::GateKind::none)
      std::printf(", gate_mean %.4f, gate_frac_below_0.1 %.4f", out.stats->gate_mean, out.stats->gate_frac_below_0_1);
    std::printf("\n");
  }
  return 0;
}

vkgate::Precision parse_precision(const std::string& flag, const std::string& v) {
  if (v == "fp32" || v == "f32") return vkgate::Precision::fp32;
  if (v == "fp16" || v == "f16") return vkgate::Precision::fp16;
  if (v == "bf16") return vkgate::Precision::bf16;
  throw UsageError(flag + " must be fp32, fp16 or bf16, got '" + v + "'");
}

void print_case(const vkgate::bench::Case& c, const vkgate::bench::Peak* peak) {
  std::printf("%-46s %11.1f us [%.1f..%.1f] %9.2f GFLOP/s %8.2f GB/s", c.name.c_str(), c.time.median_us,
              c.time.min_us, c.time.max_us, c.gflops(), c.gbps());
  if (peak && peak->matmul_gflops > 0)
    std::printf("  %5.1f%% compute %5.1f%% bandwidth", 100 * c.gflops() / peak->matmul_gflops,
                100 * c.gbps() / peak->copy_gbps);
  std::printf("  NMSE %.2e (%s)  mem %.1f MiB\n", c.nmse, c.check.c_str(), double(c.device_bytes) / (1 << 20));
  if (c.stages.size() > 1)
    for (const auto& [label, st] : c.stages)
      std::printf("    %-20s %11.1f us  %5.1f%%\n", label.c_str(), st.median_us,
                  c.time.median_us > 0 ? 100 * st.median_us / c.time.median_us : 0.0);
}

int cmd_bench(Args& args) {
  vkgate::ContextOptions copts;
  vkgate::bench::Options opt;
  std::map<std::string, std::string> v;  // case parameters by flag
  bool json = false, want_peak = false, block = false, sweep = false, unfused = false;
  std::string op, config;
  while (!args.done()) {
    const std::string a = args.next();
    if (a == "--device") copts.device = args.value(a);
    else if (a == "--json") json = true;
    else if (a == "--peak") want_peak = true;
    else if (a == "--warmup") opt.warmup = int(args.number(a, 0, 1000));
    else if (a == "--reps") opt.reps = int(args.number(a, 1, 100000));
    else if (a == "--op") op = args.value(a);
    else if (a == "--block") block = true;
    else if (a == "--sweep") sweep = true;
    else if (a == "--unfused") unfused = true;
    else if (a == "--config") config = args.value(a);
    else if (a == "--dtype" || a == "--precision") v["precision"] = args.value(a);
    else if (a == "--m" || a == "--n" || a == "--k" || a == "--T" || a == "--heads" || a == "--kv-heads" ||
             a == "--head-dim" || a == "--batch" || a == "--causal" || a == "--rows" || a == "--dim" ||
             a == "--rotary" || a == "--keys" || a == "--gate-width" || a == "--past" || a == "--sweep-max")
      v[a.substr(2)] = std::to_string(args.number(a, 0, 1L << 30));
    else throw UsageError("bench: unknown option '" + a + "'");
  }
  auto get = [&](const char* key, long fallback) -> int64_t {
    auto it = v.find(key);
    if (it != v.end()) return std::stol(it->second);
    if (fallback < 0) throw UsageError(std::string("bench: --op ") + op + " needs --" + key);
    return fallback;
  };
  const vkgate::Precision prec = v.count("precision") ? parse_precision("--dtype", v["precision"]) : vkgate::Precision::fp32;
  if (!op.empty() && block) throw UsageError("bench: give --op or --block, not both");

  vkgate::Context ctx(copts);
  std::vector<vkgate::bench::Case> cases;
  auto add = [&](vkgate::bench::Case c) {
    if (!json) print_case(c, nullptr);
    cases.push_back(std::move(c));
  };
  if (!json) std::printf("device: %s\n", ctx.device().summary().c_str());
  namespace b = vkgate::bench;
  if (op == "matmul") {
    add(b::matmul(ctx, get("m", -1), get("n", -1), get("k", -1), prec, opt));
  } else if (op == "attention") {
    const int64_t H = get("heads", -1);
    add(b::attention(ctx, get("batch", 1), get("T", -1), H, get("kv-heads", H), get("head-dim", -1),
                     get("causal", 1) != 0, prec, opt, !unfused));
  } else if (op == "rmsnorm") {
    add(b::rmsnorm(ctx, get("rows", -1), get("dim", -1), opt));
  } else if (op == "rope") {
    const int64_t Dh = get("head-dim", -1);
    add(b::rope(ctx, get("rows", -1), get("heads", -1), Dh, get("rotary", Dh), opt));
  } else if (op == "softmax") {
    add(b::softmax(ctx, get("rows", -1), get("keys", -1), opt));
  } else if (op == "gate") {
    const int64_t Dh = get("head-dim", -1);
    add(b::gate(ctx, get("rows", -1), get("heads", -1), Dh, get("gate-width", Dh), opt));
  } else if (!op.empty()) {
    throw UsageError("bench: unknown --op '" + op + "' (matmul, attention, rmsnorm, rope, softmax, gate)");
  } else if (block) {
    const vkgate::BlockConfig cfg = config.empty() ? vkgate::BlockConfig::qwen3_next_attention() : vkgate::load_config(config);
    if (sweep) {
      for (int64_t T = 128; T <= get("sweep-max", 8192); T *= 2)
        add(b::block(ctx, cfg, int(get("batch", 1)), int(T), 0, prec, opt));
    } else {
      add(b::block(ctx, cfg, int(get("batch", 1)), int(get("T", 64)), int(get("past", 0)), prec, opt));
    }
  } else {
    add(b::matmul(ctx, 1024, 1024, 1024, vkgate::Precision::fp32, opt));
    if (ctx.device().storage16) add(b::matmul(ctx, 1024, 1024, 1024, vkgate::Precision::fp16, opt));
    add(b::attention(ctx, 1, 512, 16, 16, 128, true, vkgate::Precision::fp32, opt, true));
    add(b::attention(ctx, 1, 512, 16, 16, 128, true, vkgate::Precision::fp32, opt, false));
    add(b::rmsnorm(ctx, 512, 2048, opt));
    add(b::softmax(ctx, 16 * 1024, 1024, opt));
    add(b::block(ctx, vkgate::BlockConfig::qwen3_next_attention(), 1, 64, 0, vkgate::Precision::fp32, opt));
  }
  vkgate::bench::Peak peak;
  if (want_peak) {
    peak = b::peak(ctx, opt);
    if (!json) {
      std::printf("peak: copy %.2f GB/s (copy command %.2f, copy shader %.2f), fp32 matmul %.2f GFLOP/s; shares of peak:\n",
                  peak.copy_gbps, peak.copy_command_gbps, peak.copy_shader_gbps, peak.matmul_gflops);
      for (const auto& c : cases)
        std::printf("  %-46s %5.1f%% compute %5.1f%% bandwidth\n", c.name.c_str(), 100 * c.gflops() / peak.matmul_gflops,
                    100 * c.gbps() / peak.copy_gbps);
    }
  }
  if (json) std::printf("%s\n", b::to_json(ctx.device(), cases, want_peak ? &peak : nullptr).c_str());
  bool ok = true;
  for (const auto& c : cases) ok = ok && std::isfinite(c.nmse) && c.nmse <= (prec == vkgate::Precision::bf16 ? 1e-4 : prec == vkgate::Precision::fp16 ? 1e-5 : 1e-9);
  if (!ok) std::fprintf(stderr, "vkgate: a benchmark case failed its correctness check\n");
  return ok ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> all(argv + 1, argv + argc);
  if (all.empty() || all[0] == "--help" || all[0] == "-h" || all[0] == "help") {
    std::fputs(kUsage, all.empty() ? stderr : stdout);
    return all.empty() ? 2 : 0;
  }
  const std::string cmd = all[0];
  Args args{std::vector<std::string>(all.begin() + 1, all.end())};
  try {
    if (cmd == "devices") {
      if (wants_help(args.rest)) return std::fputs(kDevicesUsage, stdout), 0;
      return cmd_devices(args);
    }
    if (cmd == "demo") {
      if (wants_help(args.rest)) return std::fputs(kDemoUsage, stdout), 0;
      return cmd_demo(args);
    }
    if (cmd == "bench") {
      if (wants_help(args.rest)) return std::fputs(kBenchUsage, stdout), 0;
      return cmd_bench(args);
    }
    if (cmd == "run") {
      if (wants_help(args.rest)) return std::fputs(kRunUsage, stdout), 0;
      return cmd_run(args);
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
