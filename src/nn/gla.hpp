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
#include "nn/storage.hpp"
#include "nn/workspace.hpp"
#include "vkgate/gla_config.hpp"
#include "vkgate/weights.hpp"

namespace vkgate::nn {

struct GlaIo {
  // [B·T, D]: fp32 when the layer has attn_norm, else already in the
  // activation storage (the caller converts: the projection reads it as is).
  const gpu::Buffer& x;
  const gpu::Buffer& y;      // fp32 [B·T, D]
  const gpu::Buffer& state;  // fp32 [B, H, dk, dv]
  const gpu::Buffer* residual;  // fp32 [B·T, D] added to y, or null
};

class Gla {
 public:
  // Validates the weights against cfg (which the caller validated) and
  // uploads them: projections in `act`, norms and biases in fp32.
  Gla(Context::Impl& vk, const gpu::Tuning& tuning, const GlaConfig& cfg, const TensorMap& weights, Storage act);

  // The scratch a recording of `batch`×`tokens` uses (roles "normed",
  // "gla_proj", "gla_gk", "gla_o", "gla_attn", "split_k").
  void reserve(uint32_t batch, uint32_t tokens, Workspace& ws) const;
  void record(gpu::Recorder& rec, const Workspace& ws, uint32_t batch, uint32_t tokens, const GlaIo& io,
              bool poison = false) const;

  const GlaConfig& config() const { return cfg_; }
  const gpu::Tuning& tuning() const { return tuning_; }  // the Context's when the module was made
  const GlaForms& forms() const { return forms_; }
  bool has_attn_norm() const { return forms_.attn_norm; }
  // The bytes per token of the largest buffer a recording uses (its input,
  // output or a scratch role): what bounds the tokens of one recording.
  uint64_t largest_token_bytes() const;
  uint64_t weight_bytes() const;

 private:
  // The partial sums of o that a recording of `tokens` tokens per sequence
  // writes: the scan's row blocks, or the chunked form's (ops::gla_chunkwise).
  uint32_t o_parts(uint32_t tokens) const;

  Context::Impl& vk_;
  const gpu::Tuning tuning_;
  GlaConfig cfg_;
  GlaForms forms_;
  Storage act_;
  uint32_t D_ = 0, H_ = 0, KV_ = 0, dk_ = 0, dv_ = 0, rank_ = 0;
  // Columns of the projections: [gk_proj.0 (rank) | q | k | v | g | gk_proj (single form)].
  uint32_t q_col_ = 0, k_col_ = 0, v_col_ = 0, g_col_ = 0, gk_col_ = 0, cols_ = 0;
  uint32_t ld_hidden_ = 0, ld_rank_ = 0, ld_out_ = 0;  // operand row strides (ops::operand_stride)
  Buffer norm_w_, w_proj_, b_proj_, w_gk1_, b_gk1_, out_norm_w_, w_o_;
};

}  // namespace vkgate::nn
