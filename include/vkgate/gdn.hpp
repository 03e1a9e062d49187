// GatedDeltaNet: one Gated DeltaNet layer (Qwen3-Next's linear attention,
// include/vkgate/gdn_config.hpp) whose weights live on the device.
//
//   [in_proj_qkvz ; in_proj_ba] → causal conv + SiLU → l2-normalised q, k →
//   S ← e^g·S; u = β·(v − Sᵀk); S ← S + k·uᵀ; o = Sᵀq → RMSNorm(o)·w·silu(z) → out_proj
//
// A forward takes hidden_states [B, T, D], a conv state [B, C, K−1] (the
// conv's previous K−1 inputs, oldest first) and an initial state [B, nv, dk,
// dv] (none: zeros), and returns the output [B, T, D] and both final states,
// fp32 whatever the storage precision: a decode loop feeds one call's states
// to the next. The recurrence runs token by token, or with
// VKGATE_GDN_MODE=chunk in chunks of 64 (README "Gated DeltaNet"). Each
// (batch, tokens) shape is recorded once and replayed.
//
// Thread safety and faults: as GatedAttention (include/vkgate/block.hpp).
#pragma once

#include <memory>
#include <span>
#include <vector>

#include "vkgate/block.hpp"
#include "vkgate/context.hpp"
#include "vkgate/gdn_config.hpp"
#include "vkgate/weights.hpp"

namespace vkgate {

struct GdnOutputs {
  std::vector<float> output;            // [B, T, D]
  std::vector<float> final_state;       // [B, nv, dk, dv]
  std::vector<float> final_conv_state;  // [B, C, K−1], oldest first
};

class GatedDeltaNet {
 public:
  // Validates the config, then the weights (bare names: in_proj_qkvz.weight,
  // ..., gdn_expected_weights), and uploads them.
  GatedDeltaNet(Context& ctx, const GdnConfig& cfg, const TensorMap& weights, const BlockOptions& options = {});
  GatedDeltaNet(Context& ctx, const GdnConfig& cfg, const WeightMap& weights, const BlockOptions& options = {});
  ~GatedDeltaNet();
  GatedDeltaNet(const GatedDeltaNet&) = delete;
  GatedDeltaNet& operator=(const GatedDeltaNet&) = delete;

  GdnOutputs forward(std::span<const float> hidden, int batch, int tokens, std::span<const float> conv_state = {},
                     std::span<const float> initial_state = {});

  const GdnConfig& config() const;
  // Whether a forward of `tokens` tokens (one recording's) runs the chunked form.
  bool chunked(int tokens) const;
  // Fill every output and scratch buffer with NaN before each forward (tests).
  void set_poison(bool on);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace vkgate
