// GlaLayer: one gated linear attention layer (include/vkgate/gla_config.hpp)
// whose weights live on the device.
//
//   (attn_norm) → q, k, v, g, forget-gate projections → the recurrence
//   S_t = diag(α_t)·S_{t−1} + k̃_tᵀ v_t, o_t = scale·φ(q_t)·S_t → per head
//   RMSNorm·w ⊙ swish(g) → o_proj
//
// A forward takes hidden_states [B, T, D] and an initial state [B, H, dk, dv]
// (none: zeros) and returns the output [B, T, D] and the final state, fp32
// whatever the storage precision: a decode loop feeds the final state of one
// call to the next. Each (batch, tokens) shape is recorded once and replayed.
//
// Thread safety and faults: as GatedAttention (include/vkgate/block.hpp).
#pragma once

#include <memory>
#include <span>
#include <vector>

#include "vkgate/block.hpp"
#include "vkgate/context.hpp"
#include "vkgate/gla_config.hpp"
#include "vkgate/weights.hpp"

namespace vkgate {

struct GlaOutputs {
  std::vector<float> output;       // [B, T, D]
  std::vector<float> final_state;  // [B, H, dk, dv]
};

class GlaLayer {
 public:
  // Validates the config, then the weights (bare names: q_proj.weight, ...;
  // gla_forms says which optional forms they take), and uploads them.
  GlaLayer(Context& ctx, const GlaConfig& cfg, const TensorMap& weights, const BlockOptions& options = {});
  GlaLayer(Context& ctx, const GlaConfig& cfg, const WeightMap& weights, const BlockOptions& options = {});
  ~GlaLayer();
  GlaLayer(const GlaLayer&) = delete;
  GlaLayer& operator=(const GlaLayer&) = delete;

  GlaOutputs forward(std::span<const float> hidden, int batch, int tokens,
                     std::span<const float> initial_state = {});

  const GlaConfig& config() const;
  const GlaForms& forms() const;
  // Fill every output and scratch buffer with NaN before each forward (tests).
  void set_poison(bool on);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace vkgate
