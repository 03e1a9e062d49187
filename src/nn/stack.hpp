// Internal: a whole decoder-only model as modules, and its recording.
//
//   x = embed(ids);  for each layer: h = x + mixer(norm(x)); x = h + mlp(norm(h))
//   logits = lm_head(norm(x))          (every position, or the last of each row)
//
// Each layer's token mixer is the nn::Mixer its config names
// (ModelConfig::mixer): softmax attention, gated linear attention, ...
//
// The Stack owns the weights (shared by every plan and sequence); a StackPlan
// owns one shape's buffers, workspace and command buffer; the caches are
// the caller's (a sequence's, which outlive a step), or each mixer's scratch
// when a forward keeps none.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "gpu/recorder.hpp"
#include "gpu/tuning.hpp"
#include "nn/mixer.hpp"
#include "nn/mlp.hpp"
#include "nn/storage.hpp"
#include "nn/vocab.hpp"
#include "nn/workspace.hpp"
#include "vkgate/model_config.hpp"
#include "vkgate/weights.hpp"

namespace vkgate::nn {

struct StackPlan {
  uint32_t batch = 0, tokens = 0;
  uint32_t kv_stride = 0;   // the caches' positions: a sequence's capacity, or tokens
  bool sequence = false;    // the caches are a sequence's (else scratch)
  bool all_logits = false;  // logits of every position, else of each row's last
  bool with_stats = false;
  // One plan per distinct mixer config, shared by the layers that have it.
  std::vector<std::unique_ptr<MixerPlan>> mixers;
  Workspace scratch;
  Buffer ids;               // int32 [B·T], mapped: the host writes it, the gather reads it
  Buffer x, h;              // the residual stream, fp32 [B·T, D]: x → (mixer) h → (MLP) x
  Buffer last;              // fp32 [B, D]: each row's last position (when !all_logits)
  Buffer normed;            // lm_head's input [M, D] in the activation storage
  Buffer logits;            // fp32 [M, V], host-visible (device memory with top_k)
  // With top_k > 0, each row's top_k largest logits chosen on the device
  // (ops::top_k): uint32 pairs [M, top_k + 1], host-visible.
  uint32_t top_k = 0;
  Buffer top;
  Buffer stats, stats_down;  // per layer stats_stride() floats: the mixer's, the MLP's, then max |x|
  // Shared: the Model keeps the last one submitted for last_timings(), which
  // reads its timestamps only when asked, even after the plan is dropped.
  std::shared_ptr<gpu::Recorder> rec;
  uint32_t past = 0;        // the positions before the step, as last recorded
  // A step whose rows are separate sequences (Stack::record_rows): each row's
  // cache capacity, and each row's past as last recorded.
  std::vector<uint32_t> row_strides, pasts;
  uint32_t rows() const { return all_logits ? batch * tokens : batch; }  // M
  uint64_t bytes() const;   // its buffers and scratch
};

// A sequence's caches, one per layer.
using LayerCaches = std::vector<std::unique_ptr<MixerCache>>;

// A row of a step whose rows are separate sequences: its caches and past.
struct RowSequence {
  const LayerCaches* caches;
  uint32_t past;
};

class Stack {
 public:
  // `weights`: full Hugging Face names, checked by the caller.
  Stack(Context::Impl& vk, const gpu::Tuning& tuning, const ModelConfig& cfg, const TensorMap& weights, Storage act);

  std::unique_ptr<StackPlan> plan(uint32_t batch, uint32_t tokens, uint32_t kv_stride, bool sequence,
                                  bool all_logits, bool stats, uint32_t top_k = 0) const;
  // A plan of `tokens` tokens for each of several sequences, one per row, row r's
  // caches of capacity row_strides[r]; the logits of each row's last position.
  std::unique_ptr<StackPlan> plan_rows(std::vector<uint32_t> row_strides, uint32_t tokens, uint32_t top_k = 0) const;
  // The host's part of a step after `past` positions, before each submit.
  void prepare(StackPlan& p, uint32_t past) const;
  void prepare_rows(StackPlan& p, std::span<const uint32_t> pasts) const;
  // Records the plan for a step after `past` positions, into `caches` (one per
  // layer; null for a plan without a sequence). Mode::update rewrites the
  // parameters of a recorded plan for another `past`.
  void record(StackPlan& p, gpu::Recorder::Mode mode, uint32_t past, const LayerCaches* caches,
              bool poison = false) const;
  // The same for a plan_rows plan: one sequence per row.
  void record_rows(StackPlan& p, gpu::Recorder::Mode mode, std::span<const RowSequence> rows,
                   bool poison = false) const;
  // One cache per layer for `batch` rows of `capacity` positions (RecurrentStates
  // returns their recurrent states to an empty sequence).
  LayerCaches make_caches(uint32_t batch, uint32_t capacity) const;
  // The floats per layer of StackPlan::stats: the most any mixer writes, the
  // most any MLP writes, then max |x|.
  uint32_t stats_stride() const { return stats_stride_; }
  // Layer `layer`'s statistics of the plan's last run: its mixer's, and its
  // MLP's floats (a sparse layer's expert load; empty for a dense one).
  MixerStats layer_stats(const StackPlan& p, int layer) const;
  std::vector<double> mlp_stats(const StackPlan& p, int layer) const;
  // The most tokens one step of `batch` rows may hold (the least any mixer
  // allows; 0 when not even one token fits).
  uint32_t max_step_tokens(uint32_t batch) const;

  const ModelConfig& config() const { return cfg_; }
  Storage storage() const { return act_; }
  const gpu::Tuning& tuning() const { return tuning_; }
  uint64_t weight_bytes() const;
  // The weight bytes a decode step of one token reads: every layer (sparse
  // MoE layers their average share of experts), the final norm, the lm_head,
  // and one row of the embedding table.
  uint64_t token_read_bytes() const;

 private:
  std::unique_ptr<StackPlan> make_plan(MixerShape shape, bool all_logits, uint32_t top_k) const;
  void record_step(StackPlan& p, gpu::Recorder::Mode mode, uint32_t past, const LayerCaches* caches,
                   std::span<const RowSequence> rows, bool poison) const;

  Context::Impl& vk_;
  const gpu::Tuning tuning_;
  ModelConfig cfg_;
  Storage act_;
  std::unique_ptr<VocabMatrix> embed_, lm_head_;  // lm_head_ null when tied: embed_ serves both
  std::vector<std::unique_ptr<Mixer>> mixers_;    // per layer
  std::vector<std::unique_ptr<FeedForward>> ffns_;  // per layer
  std::vector<size_t> plan_of_;   // per layer: its plan in StackPlan::mixers
  std::vector<size_t> planners_;  // per plan: the first layer that has it (its mixer makes the plan)
  uint32_t mixer_stats_ = 0;  // the floats of each layer's slot before its MLP's
  uint32_t stats_stride_ = 1;
  Buffer final_norm_;
};

}  // namespace vkgate::nn
