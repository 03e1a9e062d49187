// Internal: a layer's token mixer — gated softmax attention (nn::Attention),
// gated linear attention (nn::Gla) — behind one interface, so that a model
// (nn::Stack) holds any kind in any layer and a facade (GatedAttention,
// GlaLayer) drives its own kind through the same calls:
//
//   plan(shape, workspace)   the shape's kernel choices, its scratch reserved
//   prepare(plan, past)      host work before each submit (attention: RoPE table)
//   record_begin(rec, plan)  commands once per recording for every layer of the plan
//   record(rec, plan, ws, io) the layer's dispatches: y = (x +) mixer(norm(x))
//   make_cache(batch, capacity)  a sequence's state for this layer (a KV cache,
//                            a recurrent state), with its own truncate rule
//   stats_floats / read_stats   the per-layer statistics it measures
//
// A new kind costs its shaders, its op files, its module (a Mixer), its
// reference and one line of make_mixer.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "gpu/memory.hpp"
#include "gpu/recorder.hpp"
#include "gpu/tuning.hpp"
#include "nn/storage.hpp"
#include "nn/workspace.hpp"
#include "ops/ops.hpp"
#include "vkgate/model_config.hpp"
#include "vkgate/weights.hpp"

namespace vkgate::nn {

// The shape of one recording.
struct MixerShape {
  uint32_t batch = 0, tokens = 0;
  // Positions a sequence's cache holds per row: its capacity (or, without a
  // sequence, the step's tokens). Attention's keys; a recurrent state ignores it.
  uint32_t kv_stride = 0;
  // The step runs against a sequence's cache (MixerIo::cache); else against
  // scratch of the plan's own that starts empty (no positions, a zero state).
  bool sequence = false;
  bool stats = false;  // the statistics are measured (stats_floats)
  bool mask = false;   // an additive attention mask (the block facade)
  // Non-empty: the batch's rows are separate sequences (Model::extend of
  // several), row r with a cache of its own that holds row_strides[r]
  // positions and its own past (MixerIo::rows). The projections run on all
  // rows at once (one weight read); what touches a cache runs per row (an
  // attention step on a CPU driver: up to 8 rows' caches in one dispatch).
  // Neither stats nor mask.
  std::vector<uint32_t> row_strides;
  bool rows_apart() const { return !row_strides.empty(); }
};

// A plan: the shape and every kernel choice, decided once; what a mixer
// needs beyond the shared workspace lives in its subclass.
struct MixerPlan {
  virtual ~MixerPlan() = default;
  MixerShape shape;
};

// One layer's state for a sequence.
class MixerCache {
 public:
  virtual ~MixerCache() = default;
  virtual uint64_t bytes() const = 0;
  // A recurrent state's buffers (fp32), none for a KV cache. Such a state
  // sums every position so far: it can be cleared, kept, or restored from a
  // copy (a Sequence's checkpoint), nothing between, and a step that failed
  // half way leaves it undefined. A KV cache can be truncated anywhere.
  virtual std::vector<const gpu::Buffer*> states() const { return {}; }
  bool recurrent() const { return !states().empty(); }
  // Records what returns the cache to an empty sequence: zeroes a recurrent
  // state; nothing for a KV cache, whose positions are overwritten.
  void record_clear(gpu::Recorder& rec) const {
    for (const gpu::Buffer* b : states()) rec.fill(*b, 0);  // the word of 0.0f
  }
  // Records the copy of what this cache holds for its first `positions`
  // positions into `to`, the same layer's cache with as many rows and room
  // for them (a sequence moving to more room): a recurrent state whole.
  virtual void record_copy(gpu::Recorder& rec, const MixerCache& to, uint32_t /*positions*/) const {
    const std::vector<const gpu::Buffer*> from = states(), into = to.states();
    for (size_t i = 0; i < from.size(); ++i) rec.copy(*from[i], *into[i], from[i]->size());
  }
};

// Where a layer writes its statistics: stats_floats() floats at `at`.
struct StatsSlot {
  const gpu::Buffer* buffer = nullptr;
  uint32_t at = 0;
};

// A row's sequence in a step whose rows are separate sequences.
struct RowCache {
  const MixerCache* cache;
  uint32_t past;  // its positions before the step's
};

// One recording's inputs and outputs.
struct MixerIo {
  const gpu::Buffer& x;      // fp32 [B·T, D]: the layer's input, before the mixer's norm
  const gpu::Buffer& y;      // fp32 [B·T, D]: mixer(norm(x)), + x with `residual`
  bool residual;
  const MixerCache* cache;   // the sequence's (MixerShape::sequence), else null
  uint32_t past;             // positions before the step's
  StatsSlot stats;           // when MixerShape::stats
  const gpu::Buffer* mask;   // fp32 [B, 1, T, ·] when MixerShape::mask
  std::span<const RowCache> rows;  // one per batch row when MixerShape::rows_apart (cache and past unused)
};

// The scratch role of batch row `row`'s own copy of `role` (a step whose rows
// are separate sequences): rows that share no scratch may overlap on a GPU.
// kAllRows: `role` itself (a plan's scratch for the whole batch).
constexpr uint32_t kAllRows = UINT32_MAX;
std::string row_role(const std::string& role, uint32_t row);
// `v` moved on by `elements` (a later row of the same tensor).
ops::View shifted(ops::View v, uint32_t elements);
// Copies row `row` (`bytes` each) of a one-row buffer into row `row` of `all`.
void copy_row(gpu::Recorder& rec, const gpu::Buffer& one, const gpu::Buffer& all, uint32_t row, uint64_t bytes);

// A layer's statistics, as read back (read_stats).
struct MixerStats {
  std::vector<double> first_token_attn;  // per head; empty without attention probabilities
  std::optional<double> gate_mean;       // mean sigmoid gate score; none without a gate
  std::optional<double> gate_frac_below_0_1;
};

class Mixer {
 public:
  virtual ~Mixer() = default;
  virtual std::unique_ptr<MixerPlan> plan(const MixerShape& shape, Workspace& ws) const = 0;
  virtual void prepare(MixerPlan& /*plan*/, uint32_t /*past*/) const {}
  // prepare() of a plan whose rows are separate sequences: each row's past.
  virtual void prepare_rows(MixerPlan& /*plan*/, std::span<const uint32_t> /*pasts*/) const {}
  virtual void record_begin(gpu::Recorder& /*rec*/, const MixerPlan& /*plan*/) const {}
  // `poison` fills the module's scratch with NaN first (tests).
  virtual void record(gpu::Recorder& rec, const MixerPlan& plan, const Workspace& ws, const MixerIo& io,
                      bool poison) const = 0;
  // `name` starts the cache's buffer names ("layer 3 ").
  virtual std::unique_ptr<MixerCache> make_cache(uint32_t batch, uint32_t capacity, const std::string& name) const = 0;
  // The statistics floats a layer writes, and what they say for `values`
  // rows (batch × tokens) of the recording.
  virtual uint32_t stats_floats() const { return 0; }
  virtual MixerStats read_stats(const float* /*floats*/, double /*rows*/) const { return {}; }
  // The most tokens one step of `batch` rows may hold (its largest buffer
  // within maxStorageBufferRange); 0 when not even one fits.
  virtual uint32_t max_step_tokens(uint32_t /*batch*/) const { return UINT32_MAX; }
  virtual uint64_t weight_bytes() const = 0;
  virtual const gpu::Tuning& tuning() const = 0;
};

// The module of `config`, its weights under their bare names (mixer_weights).
std::unique_ptr<Mixer> make_mixer(Context::Impl& vk, const gpu::Tuning& tuning, const MixerConfig& config,
                                  const TensorMap& weights, Storage act);

}  // namespace vkgate::nn
