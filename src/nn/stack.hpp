// Internal: a whole decoder-only model as modules, and its recording.
//
//   x = embed(ids);  for each layer: h = x + mixer(norm(x)); x = h + mlp(norm(h))
//   logits = lm_head(norm(x))          (every position, or the last of each row)
//
// The mixer is softmax attention, or for a GLA model a gated linear attention
// layer (nn::Gla) whose recurrent state replaces the KV cache.
//
// The Stack owns the weights (shared by every plan and sequence); a StackPlan
// owns one shape's buffers, workspace and command buffer; the caches are
// the caller's (a sequence's, which outlive a step), or scratch shared by all
// layers when a forward keeps none (a GLA layer then starts from a zero state).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "gpu/recorder.hpp"
#include "gpu/tuning.hpp"
#include "nn/attention.hpp"
#include "nn/gla.hpp"
#include "nn/mlp.hpp"
#include "nn/storage.hpp"
#include "nn/vocab.hpp"
#include "nn/workspace.hpp"
#include "vkgate/model_config.hpp"
#include "vkgate/weights.hpp"

namespace vkgate::nn {

// One layer's cache: keys and values [B, KV, capacity, Dh] in the activation
// storage (softmax attention), or the GLA state fp32 [B, H, dk, dv].
struct LayerCache {
  Buffer keys, values;
  Buffer state;
};

struct StackPlan {
  uint32_t batch = 0, tokens = 0;
  uint32_t kv_stride = 0;   // the caches' positions: a sequence's capacity, or tokens
  bool sequence = false;    // the caches are a sequence's (else scratch)
  bool all_logits = false;  // logits of every position, else of each row's last
  bool with_stats = false;
  AttentionPlan attention;
  Workspace scratch;
  Buffer ids;               // int32 [B·T], mapped: the host writes it, the gather reads it
  Buffer rope_up, rope;     // cos/sin for the step's positions (rope: its device copy, for long steps)
  Buffer x, h;              // the residual stream, fp32 [B·T, D]: x → (attention) h → (MLP) x
  Buffer last;              // fp32 [B, D]: each row's last position (when !all_logits)
  Buffer normed;            // lm_head's input [M, D] in the activation storage
  Buffer logits;            // fp32 [M, V], host-visible
  Buffer stats, stats_down;  // per layer [H first-token][gate sum][gate count < 0.1][max |x|]; GLA: [max |x|]
  std::unique_ptr<gpu::Recorder> rec;
  uint32_t past = 0;        // the positions before the step, as last recorded
  uint32_t rows() const { return all_logits ? batch * tokens : batch; }  // M
  const Buffer& rope_table() const { return rope.valid() ? rope : rope_up; }
};

class Stack {
 public:
  // `weights`: full Hugging Face names, checked by the caller.
  Stack(Context::Impl& vk, const gpu::Tuning& tuning, const ModelConfig& cfg, const TensorMap& weights, Storage act);

  std::unique_ptr<StackPlan> plan(uint32_t batch, uint32_t tokens, uint32_t kv_stride, bool sequence,
                                  bool all_logits, bool stats) const;
  // Records the plan for a step after `past` positions, into `caches` (one per
  // layer; null for a plan without a sequence). Mode::update rewrites the
  // parameters of a recorded plan for another `past`.
  void record(StackPlan& p, gpu::Recorder::Mode mode, uint32_t past, const std::vector<LayerCache>* caches,
              bool poison = false) const;

  // The floats per layer of StackPlan::stats. A GLA layer has no attention
  // probabilities and no sigmoid gate scores: only max |x| is measured.
  uint32_t stats_stride() const { return cfg_.gla ? 1 : uint32_t(cfg_.attention.num_heads) + 3; }
  // The floats of one layer's GLA state for `batch` rows (0 without GLA layers).
  size_t gla_state_elements(uint32_t batch) const;
  // The most tokens one step of `batch` rows may hold: a GLA layer's largest
  // buffer must fit maxStorageBufferRange (VKGATE_GLA_SEGMENT_TOKENS lowers it
  // for tests); 0 when not even one token fits; unbounded without GLA layers.
  uint32_t max_step_tokens(uint32_t batch) const;
  const ModelConfig& config() const { return cfg_; }
  Storage storage() const { return act_; }
  const gpu::Tuning& tuning() const { return tuning_; }
  uint64_t weight_bytes() const;

 private:
  struct Layer {
    std::unique_ptr<Attention> attention;  // one of attention and gla
    std::unique_ptr<Gla> gla;
    std::unique_ptr<Mlp> mlp;
  };
  Context::Impl& vk_;
  const gpu::Tuning tuning_;
  ModelConfig cfg_;
  Storage act_;
  std::unique_ptr<VocabMatrix> embed_, lm_head_;  // lm_head_ null when tied: embed_ serves both
  std::vector<Layer> layers_;
  Buffer final_norm_;
};

}  // namespace vkgate::nn
