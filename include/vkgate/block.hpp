// GatedAttention: one gated-attention block whose weights live on the device.
//
//   RMSNorm(x) → q/gate, k, v projections → q_norm/k_norm → RoPE → q·kᵀ·Dh^-½
//   (+causal mask) → softmax → ·v → ⊙ sigmoid(gate) → o_proj (→ + x)
//
// Each shape (batch, tokens, past, ...) is recorded once into one command buffer and
// replayed by later calls with that shape.
//
// Thread safety: one GatedAttention is used by one thread at a time (every
// member function, const ones included, since they read state that forward
// changes). Several GatedAttention objects may share a Context and run on
// different threads at once: each has its own command pools, fences and
// buffers, and gives the same results as when the calls run one after another.
// ForwardInputs, ForwardOutputs, BlockStats and BlockOptions are plain values.
//
// Determinism: the same inputs on the same device and driver give bitwise
// identical outputs, run after run (no atomics or order-dependent reductions).
//
// Faults: every failure is a vkgate::Error. A failed construction holds no
// device memory afterwards; a failed forward leaves the block usable (for the
// device-resident cache: unchanged, except after a check_finite failure of the
// output, when the step has happened). See also BlockOptions::check_finite.
#pragma once

#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "vkgate/config.hpp"
#include "vkgate/context.hpp"
#include "vkgate/precision.hpp"
#include "vkgate/weights.hpp"

namespace vkgate {

struct BlockOptions {
  Precision precision = Precision::fp32;
  // Refuse, with Error(non_finite), NaN or ±Inf in the weights (at
  // construction), in hidden_states, past_key or past_value (−Inf is allowed in
  // attention_mask, NaN and +Inf are not) and in the output a forward would
  // return; with fp16 storage also finite values beyond fp16's range (they
  // would become Inf). Also refuse, with Error(unsupported), a hidden_states
  // row whose sum of squares overflows fp32 (RMSNorm would see Inf). Costs one
  // host pass over the weights at construction and over inputs and outputs
  // per forward.
  bool check_finite = true;
};

struct ForwardInputs {
  std::span<const float> hidden;  // [batch, tokens, hidden_size]
  int batch = 1;
  int tokens = 1;
  // KV cache of `past` earlier positions: keys after k_norm and RoPE, values
  // raw, each [batch, KV, past, head_dim]. The new tokens sit at positions
  // past..past+tokens−1 and the causal mask is aligned to the end.
  int past = 0;
  std::span<const float> past_key, past_value;
  std::span<const float> attention_mask;  // optional additive [batch, 1, tokens, past + tokens]
  bool want_cache = false;  // return present_key / present_value
  bool want_stats = false;  // return BlockStats
  // Use the block's device-resident cache instead of past_key/past_value:
  // attend to its cache_length() positions, then append the new tokens to it.
  // No cache crosses the bus; this is the decode loop's mode.
  bool use_device_cache = false;
};

// What the paper measures: gate sparsity and the attention sink.
struct BlockStats {
  double gate_mean = 0;              // mean sigmoid gate score
  double gate_frac_below_0_1 = 0;    // fraction of gate scores < 0.1
  std::vector<double> first_token_attn;  // [H] mean probability on key 0, over batch and queries
};

struct ForwardOutputs {
  std::vector<float> output;         // [batch, tokens, hidden_size]
  std::vector<float> present_key;    // [batch, KV, past + tokens, head_dim] if want_cache
  std::vector<float> present_value;  // same
  std::optional<BlockStats> stats;   // if want_stats
};

struct StageTime {
  std::string stage;  // dispatch label: "rmsnorm", "matmul", "softmax", ...
  double microseconds;
};

class GatedAttention {
 public:
  // Validates cfg and the weights (Error naming the first missing or misshapen
  // tensor) and uploads the weights. `weights` is not referenced afterwards.
  GatedAttention(Context& ctx, const BlockConfig& cfg, const TensorMap& weights, const BlockOptions& options = {});
  GatedAttention(Context& ctx, const BlockConfig& cfg, const WeightMap& weights, const BlockOptions& options = {});
  ~GatedAttention();
  GatedAttention(const GatedAttention&) = delete;
  GatedAttention& operator=(const GatedAttention&) = delete;

  // hidden [batch, tokens, hidden_size] → output [batch, tokens, hidden_size].
  std::vector<float> forward(std::span<const float> hidden, int batch, int tokens);
  // The general form: KV cache in and out, additive mask, statistics. Each
  // (batch, tokens, past, mask, cache, stats) combination is recorded once.
  ForwardOutputs run(const ForwardInputs& in);

  // The device-resident KV cache (see ForwardInputs::use_device_cache):
  // room for `capacity` positions per batch row, emptied.
  void reserve_cache(int batch, int capacity);
  // Fills the resident cache from host tensors [batch, KV, length, head_dim]
  // (keys after k_norm and RoPE, values raw), with room for `capacity`.
  void load_cache(std::span<const float> key, std::span<const float> value, int batch, int length, int capacity);
  int cache_length() const;
  // Forgets the positions from `length` on (e.g. to redo or to roll back a step).
  void truncate_cache(int length);

  // GPU time of each dispatch of the last forward (empty without timestamps:
  // ContextOptions::timestamps).
  std::vector<StageTime> last_timings() const;
  // Submits the last forward's recorded commands again, `times` times, each
  // waited for, on the inputs it staged: the same work with no host-side
  // conversion or check between runs (benchmarks time this, so the GPU is not
  // left idle between runs). Nothing is returned and the resident cache's
  // length is unchanged (its appended positions are written again).
  void replay(int times);

  // Fill every intermediate and the output with NaN at the start of each
  // forward, so an element a shader forgot to write cannot pass a comparison.
  // Re-records the cached command buffers. For tests and the demo.
  void set_poison(bool on);

  const BlockConfig& config() const;
  Precision precision() const;
  // Number of distinct shapes recorded so far (each holds one command buffer).
  size_t recorded_shapes() const;
  // How often those shapes' command buffers were recorded. A decode step on
  // the resident cache records nothing: its positions reach the recorded
  // commands as parameters, so one recording serves every cache length.
  size_t recordings() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace vkgate
