// Internal: the gated linear attention module (GLA, include/vkgate/gla_config.hpp).
// It owns one layer's weights on the device and records
//
//   (attn_norm) → [gk_proj.0 ; q ; k ; v ; g ; gk_proj] = x̂·Wᵀ (→ gk_proj.1) →
//   the recurrence over the tokens against the carried state → per head
//   RMSNorm·w ⊙ swish(g) → ·W_oᵀ (+ residual)
//
// into a recorder it is given. The caller owns the input, the output, the
// state [B, H, dk, dv] (fp32: read as the initial state, left as the final
// one) and the workspace.
#pragma once

#include <cstdint>

#include "gpu/memory.hpp"
#include "gpu/recorder.hpp"
#include "gpu/tuning.hpp"
#include "nn/mixer.hpp"
#include "nn/projection.hpp"
#include "nn/storage.hpp"
#include "nn/workspace.hpp"
#include "vkgate/gla_config.hpp"
#include "vkgate/weights.hpp"

namespace vkgate::nn {

// A sequence's state of one GLA layer: fp32 [B, H, dk, dv].
struct GlaState final : MixerCache {
  gpu::Buffer state;
  uint64_t bytes() const override { return state.size(); }
  std::vector<const gpu::Buffer*> states() const override { return {&state}; }
};

class Gla final : public Mixer {
 public:
  // Validates the weights against cfg (which the caller validated) and
  // uploads them: projections in `act`, norms and biases in fp32.
  Gla(Context::Impl& vk, const gpu::Tuning& tuning, const GlaConfig& cfg, const TensorMap& weights, Storage act);

  // Reserves the scratch roles "normed", "gla_proj", "gla_gk", "gla_o",
  // "gla_attn", "split_k" (and "layer_state" without a sequence: a zero
  // state each layer starts from). The input x is fp32 when the layer has
  // attn_norm, else already in the activation storage (the projection reads it as is).
  std::unique_ptr<MixerPlan> plan(const MixerShape& shape, Workspace& ws) const override;
  void record(gpu::Recorder& rec, const MixerPlan& plan, const Workspace& ws, const MixerIo& io,
              bool poison) const override;
  std::unique_ptr<MixerCache> make_cache(uint32_t batch, uint32_t capacity, const std::string& name) const override;
  uint32_t max_step_tokens(uint32_t batch) const override;
  uint64_t weight_bytes() const override;
  const gpu::Tuning& tuning() const override { return tuning_; }  // the Context's when the module was made

  const GlaConfig& config() const { return cfg_; }
  const GlaForms& forms() const { return forms_; }
  bool has_attn_norm() const { return forms_.attn_norm; }
  // The floats of the state of `batch` rows.
  size_t state_elements(uint32_t batch) const { return size_t(batch) * H_ * dk_ * dv_; }
  // The bytes per token of the largest buffer a recording uses (its input,
  // output or a scratch role): what bounds the tokens of one recording.
  uint64_t largest_token_bytes() const;

 private:
  // The partial sums of o that a recording of `tokens` tokens per sequence
  // writes: the scan's row blocks, or the chunked form's (ops::gla_chunkwise).
  uint32_t o_parts(uint32_t tokens) const;
  // The scan's scratch for `batch` rows of `tokens`: the plan's, or in a step
  // of separate sequences row `row`'s own (row_role).
  void reserve_scan(Workspace& ws, uint32_t batch, uint32_t tokens, uint32_t row) const;

  Context::Impl& vk_;
  const gpu::Tuning tuning_;
  GlaConfig cfg_;
  GlaForms forms_;
  Storage act_;
  uint32_t D_ = 0, H_ = 0, KV_ = 0, dk_ = 0, dv_ = 0, rank_ = 0;
  // Columns of the projections: [gk_proj.0 (rank) | q | k | v | g | gk_proj (single form)].
  uint32_t q_col_ = 0, k_col_ = 0, v_col_ = 0, g_col_ = 0, gk_col_ = 0, cols_ = 0;
  uint32_t ld_hidden_ = 0, ld_out_ = 0;  // operand row strides (ops::operand_stride)
  Buffer norm_w_, b_proj_, b_gk1_, out_norm_w_;
  Projection w_proj_, w_gk1_, w_o_;
};

}  // namespace vkgate::nn
