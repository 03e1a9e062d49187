// Internal: the gated-attention module. It owns one block's weights on the
// device and records the chain
//
//   RMSNorm(x) → [q (+gate rows) ; k ; v] = x̂·Wᵀ → q/k norm, RoPE, new keys and
//   values into the cache → softmax(q·kᵀ/√Dh + mask)·v → ⊙ sigmoid(gate) → ·W_oᵀ (+ x)
//
// with the gate at any of the paper's positions (BlockConfig::gate_position),
// each inside the pass that already holds its tensor.
//
// into a recorder it is given (an nn::Mixer): the caller owns the input, the
// output, the KV cache (KvCache, make_cache) and the workspace. A plan
// (AttentionPlan) fixes the shape and every kernel choice once, and owns the
// RoPE table that prepare() fills for a step's positions; record() may then
// run any number of times with the same plan, in Recorder::Mode::update with
// a grown cache too (only `past` changes the recorded parameters).
#pragma once

#include <cstdint>

#include "gpu/memory.hpp"
#include "gpu/recorder.hpp"
#include "gpu/tuning.hpp"
#include "nn/mixer.hpp"
#include "nn/projection.hpp"
#include "nn/storage.hpp"
#include "nn/workspace.hpp"
#include "ops/attention.hpp"
#include "vkgate/config.hpp"
#include "vkgate/weights.hpp"

namespace vkgate::nn {

// Keys (after k_norm and RoPE) and values of one attention layer, [B, KV,
// capacity, Dh] each in the activation storage: a model's sequence holds one
// per layer, the block facade one (its resident cache, or a plan's given one).
struct KvCache final : MixerCache {
  gpu::Buffer keys, values;
  uint32_t batch = 0, heads = 0, capacity = 0;  // heads: KV
  uint64_t bytes() const override { return keys.size() + values.size(); }
  // Each (row, head)'s first `positions` keys and values, to the same place in `to`'s longer runs.
  void record_copy(gpu::Recorder& rec, const MixerCache& to, uint32_t positions) const override {
    if (positions == 0) return;
    const auto& into = static_cast<const KvCache&>(to);
    const VkDeviceSize runs = VkDeviceSize(batch) * heads, position = keys.size() / runs / capacity;
    std::vector<VkBufferCopy> regions;
    for (VkDeviceSize r = 0; r < runs; ++r)
      regions.push_back({r * capacity * position, r * into.capacity * position, positions * position});
    rec.copy(keys, into.keys, regions);
    rec.copy(values, into.values, std::move(regions));
  }
};

// The kernel choices of one recording, decided once.
struct AttentionPlan final : MixerPlan {
  bool fused = false;      // fused flash attention, else scores → softmax → P·V in query chunks
  bool step = false;       // attention_step.comp (a short step on a CPU driver), else as `fused` says
  ops::FlashPlan flash;
  uint32_t chunk = 0;      // queries per chunk of the unfused attention
  uint32_t score_ld = 0;   // row stride of the scores and the mask
  uint32_t attn_ld = 0;    // row stride of the attention output
  bool norm_in_projection = false;  // the projection applies the input RMSNorm (matvec NORM_X)
  // cos/sin of the step's positions (ops::rope_table): prepare() writes the
  // mapped staging table; a longer step reads the device copy (record_begin).
  gpu::Buffer rope_up, rope;
  const gpu::Buffer& rope_table() const { return rope.valid() ? rope : rope_up; }
  // Rows apart (MixerShape::row_strides): each row's own plan of the part that
  // touches its cache (batch 1, its cache's positions), whose scratch roles
  // are the row's (row_role); `row` is that row, else none.
  // With `step`, a plan per group of up to ops::step_sequences_per_dispatch
  // rows instead, whose caches one qkv_prepare and one attention_step bind
  // together: its batch is the group's rows, `row` the first of them, its
  // table their positions'.
  std::vector<std::unique_ptr<AttentionPlan>> rows;
  uint32_t row = kAllRows;
};

class Attention final : public Mixer {
 public:
  // Validates the weights against cfg (which the caller validated) and
  // uploads them: projections in `act`, norms and biases in fp32.
  Attention(Context::Impl& vk, const gpu::Tuning& tuning, const BlockConfig& cfg, const TensorMap& weights,
            Storage act);

  // Reserves the scratch roles "normed", "proj", "q", "attn", "scores",
  // "partial", "split_k" (and "keys", "values" without a sequence).
  std::unique_ptr<MixerPlan> plan(const MixerShape& shape, Workspace& ws) const override;
  void prepare(MixerPlan& plan, uint32_t past) const override;
  void prepare_rows(MixerPlan& plan, std::span<const uint32_t> pasts) const override;
  void record_begin(gpu::Recorder& rec, const MixerPlan& plan) const override;
  void record(gpu::Recorder& rec, const MixerPlan& plan, const Workspace& ws, const MixerIo& io,
              bool poison) const override;
  std::unique_ptr<MixerCache> make_cache(uint32_t batch, uint32_t capacity, const std::string& name) const override;
  // [H first-token means][gate sum][gate count < 0.1]
  uint32_t stats_floats() const override { return uint32_t(cfg_.num_heads) + 2; }
  MixerStats read_stats(const float* floats, double rows) const override;
  uint64_t weight_bytes() const override;
  const gpu::Tuning& tuning() const override { return tuning_; }

  const BlockConfig& config() const { return cfg_; }
  // The gate as its passes read it: raw scores in the projections ("proj"
  // scratch) for `tokens` tokens, and how they act.
  ops::Gate gating(uint32_t tokens) const;
  uint32_t projection_columns() const;

 private:
  // The kernel choices and scratch of the part that touches the cache (q/k
  // preparation and attention) for p.shape.
  void plan_attend(AttentionPlan& p, Workspace& ws) const;
  // That part, for the plan's rows: the projections of its first row at
  // element `base` of "proj", into `cache` after `past` positions (or scratch
  // keys and values), the output into `attn`.
  void record_attend(gpu::Recorder& rec, const AttentionPlan& p, const Workspace& ws, const KvCache* cache,
                     uint32_t past, uint32_t base, const gpu::Buffer& attn, const MixerIo& io) const;
  // A step group's rows (AttentionPlan::rows with `step`) from "proj" into
  // their rows of `attn`, each against its own cache.
  void record_group(gpu::Recorder& rec, const AttentionPlan& group, const AttentionPlan& parent, const Workspace& ws,
                    const gpu::Buffer& attn, const MixerIo& io) const;
  ops::AttentionShape attention_shape(uint32_t batch, uint32_t tokens, uint32_t keys, uint32_t stride,
                                      uint32_t attn_ld, uint32_t score_ld) const;
  // The plan's RoPE table for `rows` (batch row, position) pairs.
  void plan_rope(AttentionPlan& p, uint32_t rows) const;
  // qkv_prepare's arguments for the plan's rows of the projections at element `base`.
  ops::QkvPrepare qkv_args(const AttentionPlan& p, const Workspace& ws, uint32_t base, const gpu::Buffer& q,
                           const gpu::Buffer& keys, const gpu::Buffer& values, uint32_t stride, uint32_t past) const;
  ops::View query_view(uint32_t tokens) const;
  ops::View key_view(uint32_t tokens) const;
  ops::View value_view(uint32_t tokens) const;

  Context::Impl& vk_;
  const gpu::Tuning tuning_;
  BlockConfig cfg_;
  Storage act_;
  uint32_t cols_ = 0, k_col_ = 0, v_col_ = 0, groups_ = 1, group_stride_ = 0;  // see attention.cpp
  uint32_t ld_hidden_ = 0, ld_heads_ = 0;  // operand row strides (ops::operand_stride)
  Buffer norm_w_, b_qkv_, qn_w_, kn_w_, b_o_;
  Projection w_qkv_, w_o_;
};

}  // namespace vkgate::nn
