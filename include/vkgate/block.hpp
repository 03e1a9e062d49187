// GatedAttention: one gated-attention block whose weights live on the device.
//
//   RMSNorm(x) → q/gate, k, v projections → q_norm/k_norm → RoPE → q·kᵀ·Dh^-½
//   (+causal mask) → softmax → ·v → ⊙ sigmoid(gate) → o_proj (→ + x)
//
// Each (batch, tokens) shape is recorded once into one command buffer and
// replayed by later calls with that shape.
//
// Thread safety: one GatedAttention is used by one thread at a time. Several
// GatedAttention objects may share a Context across threads.
#pragma once

#include <memory>
#include <span>
#include <string>
#include <vector>

#include "vkgate/config.hpp"
#include "vkgate/context.hpp"
#include "vkgate/weights.hpp"

namespace vkgate {

struct StageTime {
  std::string stage;  // dispatch label: "rmsnorm", "matmul", "softmax", ...
  double microseconds;
};

class GatedAttention {
 public:
  // Validates cfg and the weights (Error naming the first missing or misshapen
  // tensor) and uploads the weights. `weights` is not referenced afterwards.
  GatedAttention(Context& ctx, const BlockConfig& cfg, const WeightMap& weights);
  ~GatedAttention();
  GatedAttention(const GatedAttention&) = delete;
  GatedAttention& operator=(const GatedAttention&) = delete;

  // hidden [batch, tokens, hidden_size] → output [batch, tokens, hidden_size].
  std::vector<float> forward(std::span<const float> hidden, int batch, int tokens);

  // GPU time of each dispatch of the last forward (empty if the device has no timestamps).
  std::vector<StageTime> last_timings() const;

  // Fill every intermediate and the output with NaN at the start of each
  // forward, so an element a shader forgot to write cannot pass a comparison.
  // Re-records the cached command buffers. For tests and the demo.
  void set_poison(bool on);

  const BlockConfig& config() const;
  // Number of distinct shapes recorded so far (each holds one command buffer).
  size_t recorded_shapes() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace vkgate
