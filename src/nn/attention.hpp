// Internal: the gated-attention module. It owns one block's weights on the
// device and records the chain
//
//   RMSNorm(x) → [q (+gate rows) ; k ; v] = x̂·Wᵀ → q/k norm, RoPE, new keys and
//   values into the cache → softmax(q·kᵀ/√Dh + mask)·v → ⊙ sigmoid(gate) → ·W_oᵀ (+ x)
//
// with the gate at any of the paper's positions (BlockConfig::gate_position),
// each inside the pass that already holds its tensor.
//
// into a recorder it is given, reading and writing buffers it is handed: the
// caller owns the input, the output, the KV cache and the workspace. A plan
// (AttentionPlan) fixes the shape and every kernel choice once; record() may
// then run any number of times with the same plan, in Recorder::Mode::update
// with a grown cache too (only `past` changes the recorded parameters).
#pragma once

#include <cstdint>

#include "gpu/memory.hpp"
#include "gpu/recorder.hpp"
#include "gpu/tuning.hpp"
#include "nn/storage.hpp"
#include "nn/workspace.hpp"
#include "ops/ops.hpp"
#include "vkgate/config.hpp"
#include "vkgate/weights.hpp"

namespace vkgate::nn {

// The shape and kernel choices of one recording, decided once.
struct AttentionPlan {
  uint32_t batch = 0, tokens = 0;
  uint32_t kv_stride = 0;  // positions allocated per (batch, KV head) in the cache: the most keys
  bool mask = false;       // an additive mask [B, 1, T, ·] rows score_ld apart
  bool stats = false;      // the per-layer statistics (the unfused path: it has the probabilities)
  bool fused = false;      // fused flash attention, else scores → softmax → P·V in query chunks
  ops::FlashPlan flash;
  uint32_t chunk = 0;      // queries per chunk of the unfused attention
  uint32_t score_ld = 0;   // row stride of the scores and the mask
  uint32_t attn_ld = 0;    // row stride of the attention output
  bool norm_in_projection = false;  // the projection applies the input RMSNorm (matvec NORM_X)
};

// The statistics one layer writes (ops::first_token_attn, ops::gate_scores):
// floats at `at` of `buffer`: [H first-token means][gate sum][gate count < 0.1].
struct StatsSlot {
  const gpu::Buffer* buffer = nullptr;
  uint32_t at = 0;
};

// What one recording of the module reads and writes.
struct AttentionIo {
  const gpu::Buffer& x;       // fp32 [B·T, D] (device or mapped staging)
  const gpu::Buffer& y;       // fp32 [B·T, D]: the block's output (+ x with cfg.residual)
  const gpu::Buffer& keys;    // [B, KV, kv_stride, Dh] in the activation storage
  const gpu::Buffer& values;  // same
  uint32_t past;              // positions before the new tokens (written at past..past+T−1)
  const gpu::Buffer& rope;    // cos/sin for positions past.. (ops::rope_table)
  const gpu::Buffer* mask;    // when plan.mask
  StatsSlot stats;            // when plan.stats
};

class Attention {
 public:
  // Validates the weights against cfg (which the caller validated) and
  // uploads them: projections in `act`, norms and biases in fp32.
  Attention(Context::Impl& vk, const gpu::Tuning& tuning, const BlockConfig& cfg, const TensorMap& weights,
            Storage act);

  AttentionPlan plan(uint32_t batch, uint32_t tokens, uint32_t kv_stride, bool mask, bool stats,
                     bool resident) const;
  // The scratch the plan records into (roles "normed", "proj", "q", "attn",
  // "scores", "partial", "split_k").
  void reserve(const AttentionPlan& p, Workspace& ws) const;
  // `poison` fills the module's scratch with NaN first (tests).
  void record(gpu::Recorder& rec, const AttentionPlan& p, const Workspace& ws, const AttentionIo& io,
              bool poison = false) const;

  const BlockConfig& config() const { return cfg_; }
  // The kernel choices the module was made with (its weight layout follows them).
  const gpu::Tuning& tuning() const { return tuning_; }
  // The gate as its passes read it: raw scores in the projections ("proj"
  // scratch) for `tokens` tokens, and how they act.
  ops::Gate gating(uint32_t tokens) const;
  uint32_t projection_columns() const;
  uint64_t weight_bytes() const;

 private:
  ops::View query_view(uint32_t tokens) const;
  ops::View key_view(uint32_t tokens) const;
  ops::View value_view(uint32_t tokens) const;

  Context::Impl& vk_;
  const gpu::Tuning tuning_;
  BlockConfig cfg_;
  Storage act_;
  uint32_t cols_ = 0, k_col_ = 0, v_col_ = 0, groups_ = 1, group_stride_ = 0;  // see attention.cpp
  uint32_t ld_hidden_ = 0, ld_heads_ = 0;  // operand row strides (ops::operand_stride)
  Buffer norm_w_, w_qkv_, b_qkv_, qn_w_, kn_w_, w_o_, b_o_;
};

}  // namespace vkgate::nn
