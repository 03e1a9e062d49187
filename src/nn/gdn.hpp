// Internal: the Gated DeltaNet module (include/vkgate/gdn_config.hpp gives the
// equations), an nn::Mixer. It owns one layer's weights on the device and
// records
//
//   (input RMSNorm) → [in_proj_qkvz ; in_proj_ba] = x̂·Wᵀ (one product) →
//   conv + SiLU + l2 norms + β, g (ops::gdn_prepare, the conv state carried) →
//   the delta rule against the carried state (ops::gdn_recurrent, or in chunks
//   of 64: ops::gdn_chunked) → RMSNorm(o)·w·silu(z) → ·out_projᵀ (+ x)
//
// into a recorder it is given; the caller owns the input, the output, the
// states (GdnState, make_cache) and the workspace.
#pragma once

#include <cstdint>

#include "gpu/memory.hpp"
#include "gpu/recorder.hpp"
#include "gpu/tuning.hpp"
#include "nn/mixer.hpp"
#include "nn/projection.hpp"
#include "nn/storage.hpp"
#include "nn/workspace.hpp"
#include "vkgate/model_config.hpp"
#include "vkgate/weights.hpp"

namespace vkgate::nn {

// A sequence's states of one layer, fp32: the conv's last K−1 inputs [B, C,
// K−1] (oldest first) and the delta rule's S [B, nv, dk, dv].
struct GdnState final : MixerCache {
  gpu::Buffer conv, state;
  uint64_t bytes() const override { return conv.size() + state.size(); }
  std::vector<const gpu::Buffer*> states() const override { return {&conv, &state}; }
};

class Gdn final : public Mixer {
 public:
  // Validates the weights against cfg (which the caller validated) and
  // uploads them: the projections in `act`, everything else in fp32.
  Gdn(Context::Impl& vk, const gpu::Tuning& tuning, const GdnMixer& cfg, const TensorMap& weights, Storage act);

  // Reserves the scratch roles "normed" (with an input norm), "gdn_proj",
  // "gdn_mixed", "gdn_bg", "gdn_o", "gdn_y", the chunked form's "gdn_w",
  // "gdn_u", "gdn_p", "split_k" (and "gdn_conv", "gdn_state" without a
  // sequence: zero states each layer starts from). The input x is fp32 with
  // an input norm, else already in the activation storage (the projection
  // reads it as is).
  std::unique_ptr<MixerPlan> plan(const MixerShape& shape, Workspace& ws) const override;
  void record(gpu::Recorder& rec, const MixerPlan& plan, const Workspace& ws, const MixerIo& io,
              bool poison) const override;
  std::unique_ptr<MixerCache> make_cache(uint32_t batch, uint32_t capacity, const std::string& name) const override;
  uint32_t max_step_tokens(uint32_t batch) const override;
  uint64_t weight_bytes() const override;
  const gpu::Tuning& tuning() const override { return tuning_; }

  const GdnConfig& config() const { return cfg_.config; }
  bool has_input_norm() const { return cfg_.input_norm.has_value(); }
  // Whether a recording of `tokens` tokens takes the chunked form.
  bool chunked(uint32_t tokens) const;
  // The floats of each state of `batch` rows.
  size_t conv_elements(uint32_t batch) const;
  // The recurrence's scratch for `batch` rows of `tokens`: the plan's, or in
  // a step of separate sequences row `row`'s own (row_role).
  void reserve_delta(Workspace& ws, uint32_t batch, uint32_t tokens, uint32_t row) const;
  size_t state_elements(uint32_t batch) const;

 private:
  uint64_t largest_token_bytes() const;

  Context::Impl& vk_;
  const gpu::Tuning tuning_;
  GdnMixer cfg_;
  Storage act_;
  uint32_t D_ = 0, qkvz_ = 0, cols_ = 0;   // the projections: [qkvz (qkvz_) | ba (2·nv)] = cols_ columns
  uint32_t ld_hidden_ = 0, ld_value_ = 0;  // operand row strides (ops::operand_stride) of x̂ and y
  Buffer norm_w_, conv_w_, a_log_, dt_bias_, out_norm_w_;
  Projection w_in_, w_out_;
};

}  // namespace vkgate::nn
