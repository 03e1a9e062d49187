// `vkgate run`: one block of a checkpoint on hidden states, or the whole
// model on token ids; writes one safetensors file.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cli.hpp"
#include "vkgate/checkpoint.hpp"
#include "vkgate/error.hpp"
#include "vkgate/gdn.hpp"
#include "vkgate/gguf_model.hpp"
#include "vkgate/gla.hpp"
#include "vkgate/model.hpp"
#include "vkgate/output_file.hpp"
#include "vkgate/safetensors.hpp"

namespace vkgate::cli {

namespace {

constexpr const char* kRunUsage = R"(usage: vkgate run --weights PATH [--config FILE] [--layer N] --input FILE --output FILE
                  [--device SEL] [--precision fp32|fp16|bf16] [--quant T] [--int8] [--stats] [--no-check-finite]
                  [--ignore-context-limit] [--quiet]

Runs a checkpoint on the device: the whole model when the input holds input_ids,
one gated-attention block when it holds hidden_states, one gated linear
attention layer when the config says "mixer": "gla" (hidden_states and an
optional initial_state [B, H, d_k, d_v] in; output and final_state out, F32),
or one Gated DeltaNet layer when it says "mixer": "gated_deltanet"
(hidden_states, optional conv_state [B, C, K-1] (oldest first) and
initial_state [B, nv, d_k, d_v] in; output, final_state and final_conv_state
out, F32; VKGATE_GDN_MODE=recurrent|chunk forces a form).

  --weights PATH     a checkpoint directory (model.safetensors, or model.safetensors.index.json
                     and its shards) or a .safetensors file (then --config is required), or
                     for a whole model a GGUF file (.gguf: llama, qwen3, qwen3moe, qwen3next, qwen35,
                     qwen35moe; its own config)
  --config FILE      Hugging Face config.json (default: PATH/config.json for a directory; a
                     model also reads PATH/generation_config.json)
  --input FILE       safetensors with either
                       input_ids [B, T] (I64 or I32): the whole model (model_type qwen3,
                       llama, gla: fla's GLA models, qwen3_next, qwen3_moe, qwen3_5 or
                       qwen3_5_moe; recurrent layers from a zero state) runs,
                       each row causal from its first token; or
                       hidden_states [B, T, D] and optionally past_key and past_value
                       [B, KV, P, Dh] (keys after k_norm and RoPE) and an additive
                       attention_mask [B, 1, T, P+T]: one block runs (may be the weights file)
  --output FILE      logits [B, T, V] (F32) for a model; output [B, T, D] (F32) for a block,
                     with a cache also present_key / present_value [B, KV, P+T, Dh]. A file is
                     replaced atomically (a temporary file beside it, removed on an error or
                     SIGINT/SIGTERM/SIGHUP; no file on an error), keeping its mode; a symbolic
                     link's target is replaced; a FIFO or device is written directly; a
                     read-only file, a directory or a socket is refused. - writes the file to
                     stdout, and the summary line then goes to stderr
  --layer N          (a block) read model.layers.N.self_attn.* and
                     model.layers.N.input_layernorm.weight; a layer that is not full attention
                     (Gated DeltaNet) is refused. Without it: bare names (q_proj.weight, ...)
  --device SEL       device index or name substring (default: VKGATE_DEVICE, else the best)
  --precision P      device storage of weights and activations: fp32 (default, whatever the
                     checkpoint stores), fp16, bf16; arithmetic and the residual stream are fp32
  --quant T          (a model) quantize the float projections and an untied lm_head on load to
                     the block format T: q8_0, q4_0, q4_1, q5_0, q5_1, q2_k, q3_k, q4_k, q5_k,
                     q6_k, iq4_nl, iq4_xs (ggml's layouts and reference quantizers); --precision
                     stays the activations' storage. Weights already in a block format (a GGUF)
                     are kept as they are
  --int8             (a model) int8 activations: Q8_0 and Q4_0 projections quantize their input
                     per 32-element block to int8 (scale max|x|/127) and multiply with integer
                     dot products, where the device has them (`vkgate devices`: int8_dot=yes;
                     elsewhere the fp32 product runs). Error per output at most the sum over
                     the 32-element blocks b of max|x_b|/254 · Σ_{i∈b} |w_i|, plus fp32 rounding
  --stats            also write the paper's measurements. A model: stats.max_activation [L]
                     (max |x| of the residual stream after each layer); for its softmax-
                     attention layers (stats.attention_layers [L_attn], I64: every layer of
                     qwen3 and llama, the full-attention layers of qwen3_next, none of gla)
                     stats.first_token_attn [L_attn, H] (attention on key 0, mean over batch
                     and queries) and, gated, stats.gate_mean [L_attn]; for its sparse MoE
                     layers (stats.moe_layers [L_moe], I64) stats.expert_load [L_moe, E]
                     (the share of the tokens routed to each expert; a row sums to k).
                     A block: stats.first_token_attn [H] and, gated, stats.gate_mean and
                     stats.gate_frac_below_0.1
  --check-finite     (the default) refuse NaN or Inf in the input tensors (-Inf is allowed
                     in attention_mask) and in the weights, and an output that overflows,
                     naming the tensor and the element
  --no-check-finite  let NaN and Inf through to the output
  --ignore-context-limit
                     (a model) run input_ids longer than the model's context limit
                     (max_position_embeddings, or the length its rope_scaling reaches),
                     which is refused without it
  --quiet            no progress line on stderr (drawn only on a terminal: a first run's
                     pipeline compilation, the tensors loading)

Exit codes: 0 success, 1 bad file, config, shape or device, 2 bad usage.
)";

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

struct RunOptions {
  std::string weights, config, input, output, device;
  int layer = -1;
  vkgate::BlockOptions options;
  bool stats = false, quiet = false, ignore_context_limit = false;
  std::optional<vkgate::DType> quant;
  bool int8 = false;

  vkgate::ContextOptions context_options() const {
    vkgate::ContextOptions c;
    c.device = device;
    c.timestamps = true;  // the summary line's GPU time
    show_progress(c, quiet);
    return c;
  }
};

RunOptions parse_run(Args& args) {
  RunOptions o;
  auto& [weights, config, input, output, device, layer, options, stats, quiet, ignore_context_limit, quant, int8] = o;
  while (!args.done()) {
    const std::string a = args.next();
    if (a == "--weights") weights = args.value(a);
    else if (a == "--config") config = args.value(a);
    else if (a == "--layer") layer = int(args.number(a, 0, 1 << 20));
    else if (a == "--input") input = args.value(a);
    else if (a == "--output") output = args.value(a);
    else if (a == "--device") device = args.value(a);
    else if (a == "--stats") stats = true;
    else if (a == "--quiet") quiet = true;
    else if (a == "--ignore-context-limit") ignore_context_limit = true;
    else if (a == "--quant") quant = parse_quant_flag(a, args.value(a));
    else if (a == "--int8") int8 = true;
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
  if (!vkgate::is_stdout_path(output))
    for (const std::string& in_path : {weights, input, config}) {
      std::error_code ec;
      if (!in_path.empty() && std::filesystem::equivalent(output, in_path, ec))
        throw UsageError("run: --output " + output + " is the same file as " + in_path);
    }
  return o;
}

// Where the summary lines go: stdout, unless the output file goes there.
FILE* summary(const RunOptions& o) { return vkgate::is_stdout_path(o.output) ? stderr : stdout; }

// Writes the output file unless the validation layer objected to the run.
bool write_output(const vkgate::Context& ctx, const RunOptions& o, const std::vector<vkgate::TensorToWrite>& tensors) {
  if (validation_failed(ctx)) return false;
  vkgate::write_safetensors(o.output, tensors,
                            {{"producer", "vkgate run"},
                             {"model", o.weights},
                             {"device", ctx.device().name},
                             {"precision", vkgate::to_string(o.options.precision)}});
  return true;
}

// The config of a block or layer run: --config, else the checkpoint directory's.
std::string layer_config_path(const RunOptions& o, const vkgate::Checkpoint& ckpt) {
  if (!o.config.empty()) return o.config;
  if (!ckpt.is_directory())
    throw UsageError("run: --config is required when --weights is a .safetensors file (" + o.weights + ")");
  return ckpt.config_path();
}

// hidden_states [B, T, D] of the input file, its shape checked against D.
InputTensor hidden_states(const std::string& input, const vkgate::SafetensorsFile& in_file, int64_t D) {
  const vkgate::TensorView& view = in_file.at("hidden_states");
  const std::string has = input + ": tensor 'hidden_states' has shape " + shape_text(view.shape);
  if (view.shape.size() != 3 || view.shape[2] != D)
    throw vkgate::Error(vkgate::ErrorCode::shape_mismatch, has + ", expected [B, T, " + std::to_string(D) + "]");
  if (view.shape[0] <= 0 || view.shape[1] <= 0)
    throw vkgate::Error(vkgate::ErrorCode::shape_mismatch, has + ": batch and tokens must be at least 1");
  return input_tensor(in_file, "hidden_states", view.shape);
}

// One gated linear attention layer (`"mixer": "gla"`) on hidden_states and an
// optional initial_state: output and final_state.
int run_gla(const RunOptions& o, const vkgate::SafetensorsFile& in_file, const vkgate::Checkpoint& ckpt,
            const std::string& config) {
  if (o.layer >= 0) throw UsageError("run: --layer reads a softmax-attention layer; a GLA layer file has bare names");
  if (o.stats) throw UsageError("run: --stats measures softmax attention; a GLA layer has no attention probabilities");
  const vkgate::GlaConfig cfg = vkgate::load_gla_config(config);
  const vkgate::TensorMap tensors = vkgate::gla_layer_tensors(ckpt, cfg);
  const InputTensor hidden = hidden_states(o.input, in_file, cfg.hidden_size);
  const int64_t B = hidden.shape[0], T = hidden.shape[1];
  const std::vector<int64_t> state_shape{B, cfg.num_heads, cfg.head_k_dim(), cfg.head_v_dim()};
  InputTensor state;
  if (in_file.contains("initial_state")) state = input_tensor(in_file, "initial_state", state_shape);
  if (o.options.check_finite) {
    check_finite(o.input, "hidden_states", hidden, false);
    check_finite(o.input, "initial_state", state, false);
  }
  vkgate::Context ctx(o.context_options());
  std::unique_ptr<vkgate::GlaLayer> layer;
  try {
    layer = std::make_unique<vkgate::GlaLayer>(ctx, cfg, tensors, o.options);
  } catch (const vkgate::Error& e) {
    throw with_weights_path(o.weights, e);
  }
  const vkgate::GlaOutputs out = layer->forward(hidden.data, int(B), int(T), state.data);
  std::vector<vkgate::TensorToWrite> tensors_out{
      {"output", vkgate::DType::F32, {B, T, cfg.hidden_size}, std::as_bytes(std::span(out.output))},
      {"final_state", vkgate::DType::F32, state_shape, std::as_bytes(std::span(out.final_state))}};
  if (!write_output(ctx, o, tensors_out)) return 1;
  std::fprintf(summary(o), "gla layer: batch %lld, tokens %lld, %s on %s -> %s\n", static_cast<long long>(B),
               static_cast<long long>(T), vkgate::to_string(o.options.precision), ctx.device().name.c_str(),
               o.output.c_str());
  return 0;
}

// One Gated DeltaNet layer (`"mixer": "gated_deltanet"`) on hidden_states and
// optional conv_state and initial_state: output and both final states.
int run_gdn(const RunOptions& o, const vkgate::SafetensorsFile& in_file, const vkgate::Checkpoint& ckpt,
            const std::string& config) {
  if (o.layer >= 0)
    throw UsageError("run: --layer reads a softmax-attention layer; a Gated DeltaNet layer file has bare names");
  if (o.stats)
    throw UsageError("run: --stats measures softmax attention; a Gated DeltaNet layer has no attention probabilities");
  const vkgate::GdnConfig cfg = vkgate::load_gdn_config(config);
  const vkgate::TensorMap tensors = vkgate::gdn_layer_tensors(ckpt, cfg);
  const InputTensor hidden = hidden_states(o.input, in_file, cfg.hidden_size);
  const int64_t B = hidden.shape[0], T = hidden.shape[1];
  const std::vector<int64_t> conv_shape{B, cfg.conv_channels(), cfg.conv_kernel - 1},
      state_shape{B, cfg.num_value_heads, cfg.key_head_dim, cfg.value_head_dim};
  InputTensor conv, state;
  if (in_file.contains("conv_state")) conv = input_tensor(in_file, "conv_state", conv_shape);
  if (in_file.contains("initial_state")) state = input_tensor(in_file, "initial_state", state_shape);
  if (o.options.check_finite) {
    check_finite(o.input, "hidden_states", hidden, false);
    check_finite(o.input, "conv_state", conv, false);
    check_finite(o.input, "initial_state", state, false);
  }
  vkgate::Context ctx(o.context_options());
  std::unique_ptr<vkgate::GatedDeltaNet> layer;
  try {
    layer = std::make_unique<vkgate::GatedDeltaNet>(ctx, cfg, tensors, o.options);
  } catch (const vkgate::Error& e) {
    throw with_weights_path(o.weights, e);
  }
  const vkgate::GdnOutputs out = layer->forward(hidden.data, int(B), int(T), conv.data, state.data);
  std::vector<vkgate::TensorToWrite> tensors_out{
      {"output", vkgate::DType::F32, {B, T, cfg.hidden_size}, std::as_bytes(std::span(out.output))},
      {"final_state", vkgate::DType::F32, state_shape, std::as_bytes(std::span(out.final_state))},
      {"final_conv_state", vkgate::DType::F32, conv_shape, std::as_bytes(std::span(out.final_conv_state))}};
  if (!write_output(ctx, o, tensors_out)) return 1;
  std::fprintf(summary(o), "gated deltanet layer: batch %lld, tokens %lld, %s (%s) on %s -> %s\n",
               static_cast<long long>(B), static_cast<long long>(T), vkgate::to_string(o.options.precision),
               layer->chunked(int(T)) ? "chunked" : "recurrent", ctx.device().name.c_str(), o.output.c_str());
  return 0;
}

// One gated-attention block on hidden_states (and a cache and a mask), or a
// GLA or Gated DeltaNet layer.
int run_block(const RunOptions& o, const vkgate::SafetensorsFile& in_file) {
  const auto& [weights, config_arg, input, output, device, layer, options, stats, quiet, ignore_context_limit, quant, int8] = o;
  const vkgate::Checkpoint ckpt(weights);
  const std::string config = layer_config_path(o, ckpt);
  // A file that cannot be read is left to load_config, whose error says why.
  std::error_code ec;
  if (std::filesystem::is_regular_file(config, ec)) {
    const std::string text = read_file(config);
    if (vkgate::is_gla_config_json(text, config)) return run_gla(o, in_file, ckpt, config);
    if (vkgate::is_gdn_config_json(text, config)) return run_gdn(o, in_file, ckpt, config);
  }
  const vkgate::BlockConfig cfg = vkgate::load_config(config);
  if (layer >= 0) cfg.check_layer(layer);
  const vkgate::TensorMap tensors = vkgate::block_tensors(ckpt, cfg, layer);

  const InputTensor hidden = hidden_states(input, in_file, cfg.hidden_size);
  const int64_t B = hidden.shape[0], T = hidden.shape[1], KV = cfg.num_kv_heads, Dh = cfg.head_dim;
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

  vkgate::Context ctx(o.context_options());
  std::unique_ptr<vkgate::GatedAttention> block_ptr;
  try {
    block_ptr = std::make_unique<vkgate::GatedAttention>(ctx, cfg, tensors, options);
  } catch (const vkgate::Error& e) {
    throw with_weights_path(weights, e);
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
  if (!write_output(ctx, o, tensors_out)) return 1;
  std::fprintf(summary(o), "%s: batch %lld, tokens %lld, past %lld, %s on %s, GPU %.1f us -> %s\n",
               layer >= 0 ? ("layer " + std::to_string(layer)).c_str() : "block", static_cast<long long>(B),
               static_cast<long long>(T), static_cast<long long>(P), vkgate::to_string(options.precision),
               ctx.device().name.c_str(), gpu_us, output.c_str());
  if (stats) {
    std::fprintf(summary(o), "stats: first_token_attn mean %.4f", [&] {
      double m = 0;
      for (double v : out.stats->first_token_attn) m += v / double(out.stats->first_token_attn.size());
      return m;
    }());
    if (cfg.gate_kind != vkgate::GateKind::none)
      std::fprintf(summary(o), ", gate_mean %.4f, gate_frac_below_0.1 %.4f", out.stats->gate_mean,
                   out.stats->gate_frac_below_0_1);
    std::fprintf(summary(o), "\n");
  }
  return 0;
}

// The model's config: --config FILE, else DIR/config.json (with DIR's
// generation_config.json).
vkgate::ModelConfig model_config(const RunOptions& o, const vkgate::Checkpoint& ckpt) {
  if (o.config.empty()) {
    if (!ckpt.is_directory())
      throw UsageError("run: --config is required when --weights is a .safetensors file (" + o.weights + ")");
    return vkgate::load_model_config(o.weights);
  }
  std::ifstream in(o.config, std::ios::binary);
  if (!in) throw vkgate::Error(vkgate::ErrorCode::io, o.config + ": cannot open");
  const std::string text{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  return vkgate::parse_model_config_json(text, o.config);
}

// Token ids [B, T] (I64 or I32) of the input file.
std::vector<int64_t> input_ids(const vkgate::SafetensorsFile& file, int64_t& B, int64_t& T) {
  const vkgate::TensorView& t = file.at("input_ids");
  if (t.shape.size() != 2 || t.shape[0] < 1 || t.shape[1] < 1)
    throw vkgate::Error(vkgate::ErrorCode::shape_mismatch, file.path() + ": tensor 'input_ids' has shape " +
                                                               shape_text(t.shape) + ", expected [B, T] with B, T >= 1");
  B = t.shape[0];
  T = t.shape[1];
  return t.to_i64();
}

// The whole model on input_ids: logits [B, T, V] and, with --stats, the paper's measurements per layer.
int run_model(const RunOptions& o, const vkgate::SafetensorsFile& in_file) {
  // A GGUF file holds its config; a checkpoint reads config.json (or --config).
  std::optional<vkgate::Checkpoint> ckpt;
  std::optional<vkgate::GgufFile> gguf;
  vkgate::TensorBuffers copies;  // what the GGUF's tensors needed re-laid (llama's q/k rows)
  vkgate::ModelConfig cfg;
  vkgate::TensorMap tensors;
  if (vkgate::is_gguf_file(o.weights)) {
    if (!o.config.empty()) throw UsageError("run: --config does not go with a GGUF file (" + o.weights + " holds its config)");
    gguf.emplace(vkgate::GgufFile::open(o.weights));
    cfg = vkgate::gguf_model_config(*gguf);
    tensors = vkgate::gguf_model_tensors(*gguf, cfg, copies);
  } else {
    ckpt.emplace(o.weights);
    cfg = model_config(o, *ckpt);
    tensors = vkgate::model_tensors(*ckpt, cfg);
  }
  int64_t B = 0, T = 0;
  const std::vector<int64_t> ids = input_ids(in_file, B, T);

  vkgate::Context ctx(o.context_options());
  std::unique_ptr<vkgate::Model> model;
  try {
    model = std::make_unique<vkgate::Model>(ctx, cfg, tensors, vkgate::ModelOptions{o.options.precision, o.options.check_finite, o.ignore_context_limit, o.quant, o.int8});
  } catch (const vkgate::Error& e) {
    throw with_weights_path(o.weights, e);
  }
  vkgate::ModelStats stats;
  std::vector<float> logits;
  try {
    logits = model->logits(ids, int(B), int(T), o.stats ? &stats : nullptr);
  } catch (const vkgate::Error& e) {  // an id out of range: name the file and the tensor
    const std::string what = e.what();
    if (what.starts_with("input id ")) throw vkgate::Error(e.code(), o.input + ": tensor 'input_ids': " + what);
    if (what.starts_with("logits: "))  // more positions than the context limit
      throw vkgate::Error(e.code(), o.input + ": tensor 'input_ids' holds " + what.substr(8));
    throw;
  }
  const int64_t V = cfg.vocab_size, L = cfg.num_hidden_layers, H = stats.heads;
  if (o.options.check_finite)
    if (auto bad = std::find_if(logits.begin(), logits.end(), [](float v) { return !std::isfinite(v); });
        bad != logits.end())
      throw vkgate::Error(vkgate::ErrorCode::non_finite,
                          "the logits hold " + std::string(std::isnan(*bad) ? "NaN" : "Inf") + " at " +
                              index_text(bad - logits.begin(), {B, T, V}) +
                              " (the weights and ids are valid: an intermediate overflowed the " +
                              vkgate::to_string(o.options.precision) + " storage or fp32 arithmetic)");

  std::vector<vkgate::TensorToWrite> out;
  auto add = [&](const std::string& name, std::vector<int64_t> shape, const std::vector<float>& v) {
    out.push_back({name, vkgate::DType::F32, std::move(shape), std::as_bytes(std::span(v))});
  };
  add("logits", {B, T, V}, logits);
  const std::vector<float> first(stats.first_token_attn.begin(), stats.first_token_attn.end()),
      max_act(stats.max_activation.begin(), stats.max_activation.end()),
      gate(stats.gate_mean.begin(), stats.gate_mean.end()), load(stats.expert_load.begin(), stats.expert_load.end());
  const std::vector<int64_t> attention_layers(stats.attention_layers.begin(), stats.attention_layers.end()),
      moe_layers(stats.moe_layers.begin(), stats.moe_layers.end());
  auto add_i64 = [&](const std::string& name, const std::vector<int64_t>& v) {
    out.push_back({name, vkgate::DType::I64, {int64_t(v.size())}, std::as_bytes(std::span(v))});
  };
  if (o.stats) {
    const int64_t La = int64_t(attention_layers.size()), Lm = int64_t(moe_layers.size());
    if (!first.empty()) {
      add("stats.first_token_attn", {La, H}, first);
      add_i64("stats.attention_layers", attention_layers);
    }
    add("stats.max_activation", {L}, max_act);
    if (!gate.empty()) add("stats.gate_mean", {La}, gate);
    if (!load.empty()) {
      add("stats.expert_load", {Lm, int64_t(stats.experts)}, load);
      add_i64("stats.moe_layers", moe_layers);
    }
  }
  if (!write_output(ctx, o, out)) return 1;
  double gpu_us = 0;
  for (const auto& t : model->last_timings()) gpu_us += t.microseconds;
  std::fprintf(summary(o), "model: %lld layers, batch %lld, tokens %lld, %s on %s, GPU %.1f us -> %s\n",
               static_cast<long long>(L), static_cast<long long>(B), static_cast<long long>(T),
               vkgate::to_string(o.options.precision), ctx.device().name.c_str(), gpu_us, o.output.c_str());
  if (o.stats) {
    auto mean = [](const std::vector<double>& v) {
      double m = 0;
      for (double x : v) m += x / double(v.size());
      return m;
    };
    std::fprintf(summary(o), "stats:");
    if (!first.empty()) std::fprintf(summary(o), " first_token_attn mean %.4f,", mean(stats.first_token_attn));
    if (!gate.empty()) std::fprintf(summary(o), " gate_mean %.4f,", mean(stats.gate_mean));
    std::fprintf(summary(o), " max_activation %.4g\n",
                 *std::max_element(stats.max_activation.begin(), stats.max_activation.end()));
  }
  return 0;
}

int cmd_run(Args& args) {
  const RunOptions o = parse_run(args);
  vkgate::check_output_path(o.output);  // a read-only file or a directory is refused before the work
  const vkgate::SafetensorsFile in_file(o.input);
  if (!in_file.contains("input_ids") && !in_file.contains("hidden_states")) {
    std::string held;
    for (const std::string& name : in_file.names()) held += (held.empty() ? "'" : ", '") + name + "'";
    throw vkgate::Error(vkgate::ErrorCode::missing_tensor,
                        o.input + ": holds neither 'input_ids' [B, T] (to run the whole model) nor 'hidden_states' "
                                  "[B, T, D] (to run one block or layer); it holds " +
                            (held.empty() ? "no tensors" : held));
  }
  if (!in_file.contains("input_ids")) return run_block(o, in_file);
  if (o.layer >= 0)
    throw UsageError("run: --layer runs one block on hidden_states, but " + o.input +
                     " holds input_ids (the whole model runs without --layer)");
  return run_model(o, in_file);
}

}  // namespace

vkgate::Error with_weights_path(const std::string& path, const vkgate::Error& e) {
  const bool values = e.code() == vkgate::ErrorCode::non_finite || e.code() == vkgate::ErrorCode::unsupported;
  return values && std::string(e.what()).rfind("weight '", 0) == 0
             ? vkgate::Error(e.code(), path + ": " + e.what() + " (--no-check-finite lets it through)")
             : e;
}

vkgate::Model load_model(vkgate::Context& ctx, const std::string& weights, const vkgate::ModelOptions& options) {
  try {
    return vkgate::Model::load(ctx, weights, options);
  } catch (const vkgate::Error& e) {
    throw with_weights_path(weights, e);  // NaN in a weight: name the directory and --no-check-finite
  }
}

const Command kRun{"run", kRunUsage, cmd_run};

}  // namespace vkgate::cli
