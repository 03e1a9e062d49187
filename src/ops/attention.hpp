// Internal: the attention ops (one .cpp each beside ops.hpp): the per-head
// preparation of q and the new keys and values, the unfused route (scores →
// softmax → P·V), the one-dispatch step of CPU drivers and fused flash
// attention, and the shape they share.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "ops/ops.hpp"

namespace vkgate::ops {

// The per-head passes between the projection and attention in one dispatch
// (shaders/qkv_prepare.comp): q and the new keys get the gate when it acts on
// them (`gate_target`, scores in `proj`), RMSNorm (with q_norm and k_norm;
// none when q_norm is null) and RoPE on `rotary` dims in `rope_style`'s pairs
// (cos/sin from `table`, see rope_table); the new values get their gate when
// it acts on them, else are moved as they are. Sources are views into `proj`;
// q goes to [B, heads, T, dim], the keys and values to caches [B, kv_heads,
// seq, dim] at positions first.. . All stored as `s`; weights and table fp32.
enum class GateTarget : uint32_t { none, query, key, value };
// One sequence's cache in a batched step: keys and values [KV, stride, Dh],
// `past` positions filled before the step's.
constexpr uint32_t kStepSequences = 8;  // at most, in one dispatch
struct StepSequence {
  const Buffer* keys;
  const Buffer* values;
  uint32_t past, stride;
};
// The bindings of a shader's arrays of kStepSequences keys, then values, for
// `seqs`: elements past them repeat the last cache (bound, never touched).
void append_caches(std::vector<gpu::Binding>& b, std::span<const StepSequence> seqs, gpu::Access access);
struct QkvPrepare {
  const Buffer& proj;
  View q_view, k_view, v_view;
  const Buffer* q_norm;  // q_norm and k_norm: both, or both null
  const Buffer* k_norm;
  NormKind kind;
  float eps;
  const Buffer& table;
  uint32_t rotary;
  RopeStyle rope_style;
  GateTarget gate_target;
  Gate gating;
  const Buffer& q;
  const Buffer& k;
  const Buffer& v;
  uint32_t seq, first;
  // Where given (at most kStepSequences, one per batch row): row b's keys and
  // values go to its own cache at its past, instead of into k and v.
  std::span<const StepSequence> seqs = {};
};
void qkv_prepare(Context::Impl& ctx, Recorder& rec, const QkvPrepare& a, uint32_t rows, uint32_t tokens,
                 uint32_t heads, uint32_t kv_heads, uint32_t dim, Storage s = Storage::f32);

// In place softmax of scale·scores (+mask) over `keys`, scores [B, H, T, keys]
// with rows `ld` floats apart (0: keys; the mask's rows too). The rows may be a
// chunk of the queries: tokens `first`.. of `total` (0: = tokens), which places
// them for the causal mask and in mask [B, 1, total, keys].
struct SoftmaxArgs {
  const Buffer& scores;
  uint32_t batch, heads, tokens, keys;
  bool causal;
  float scale;
  const Buffer* mask = nullptr;
  uint32_t first = 0, total = 0, ld = 0;
};
void softmax(Context::Impl& ctx, Recorder& rec, const SoftmaxArgs& a);

struct AttentionShape {
  uint32_t batch, heads, kv_heads, tokens, keys, head_dim;
  uint32_t kv_stride = 0;  // positions allocated per (batch, KV head) in k/v; 0: = keys
  // The unfused products and softmax may run on a chunk of the queries:
  // tokens first..first+count−1 (count 0: all), with a score matrix of
  // [B, H, count, S]; q, out and the mask keep all `tokens`.
  uint32_t first = 0, count = 0;
  // Elements between rows (b, t) of attention_values' out: 0 is H·Dh (dense).
  uint32_t out_stride = 0;
  // Floats between rows of the unfused score matrix: 0 is keys.
  uint32_t score_stride = 0;
  // Query head h reads KV head h % KV (GqaMapping::tiled), else h / (H/KV).
  bool tiled = false;
  uint32_t stride() const { return kv_stride ? kv_stride : keys; }
  uint32_t score_row() const { return score_stride ? score_stride : keys; }
  uint32_t out_row() const { return out_stride ? out_stride : heads * head_dim; }
  uint32_t rows() const { return count ? count : tokens; }
};
// Queries per chunk of the unfused attention so that its score matrix stays
// within Tuning::score_bytes (default 64 MiB): at least 1.
uint32_t query_chunk(const Tuning& t, const AttentionShape& s);
// scores [B, H, T, S] (fp32, rows s.score_row() apart) = q [B, H, T, Dh] · k [B, KV, S, Dh]ᵀ
// (unscaled); q, k stored as `st`.
// (T: the shape's rows(), from its first query.)
// With `causal` (query t sees keys ≤ S − T + t), entries beyond may be left
// unwritten: softmax(causal) writes them as zeros.
void attention_scores(Context::Impl& ctx, Recorder& rec, const Buffer& q, const Buffer& k, const Buffer& scores,
                      const AttentionShape& s, Storage st = Storage::f32, bool causal = false);
// out [B, T, H, Dh] = probs [B, H, T, S] (fp32, rows s.score_row() apart) · v [B, KV, S, Dh]; v and
// out stored as `st`;
// rows (b, t) of out s.out_row() elements apart.
// With `causal`, probabilities beyond each query's last key (zeros) may be skipped.
void attention_values(Context::Impl& ctx, Recorder& rec, const Buffer& probs, const Buffer& v, const Buffer& out,
                      const AttentionShape& s, Storage st = Storage::f32, bool causal = false);

// One step's attention on a CPU driver (attention_step.comp): out [B, T, H,
// Dh] (from element out_base, rows s.out_row() apart) = softmax(scale·q·kᵀ)·v
// (causal: position t sees its cache's first past + t + 1 keys), scores, softmax and
// values in one dispatch, for steps of at most kStepTokens positions. Each
// sequence b of the batch has its own cache (keys, values [KV, stride, Dh],
// `past` positions before the step's), up to kStepSequences in one dispatch;
// or one StepSequence for a cache [B, KV, stride, Dh] that the batch shares.
// The new positions' keys are already in the caches. It applies on CPU
// drivers, and to the `batched` steps of several sequences on GPUs with
// Tuning::step_attention_gpu, for steps of ≤ kStepTokens positions with G =
// H/KV ≤ 8, head_dim a multiple of 8 and G·head_dim ≤ 1024.
constexpr uint32_t kStepTokens = 8, kStepWorkgroup = 64;
bool attention_step_applies(const DeviceInfo& d, const Tuning& t, const AttentionShape& s, bool batched);
// How many sequences' caches one dispatch binds: kStepSequences where the
// device indexes arrays of storage buffers (or Tuning::step_sequences), else 1.
uint32_t step_sequences_per_dispatch(const DeviceInfo& d, const Tuning& t);
void attention_step(Context::Impl& ctx, Recorder& rec, const Buffer& q, std::span<const StepSequence> seqs,
                    const Buffer& out, uint32_t out_base, const AttentionShape& s, Storage st, bool causal,
                    float scale);

// Fused attention (one dispatch; two with split keys): out [B, T, H, Dh] =
// softmax(scale·q·kᵀ + mask)·v, then gated (ops::Gate) when a gate is given.
// Memory O(T): no score matrix. q [B, H, T, Dh], k/v [B, KV, S, Dh], mask
// [B, 1, T, S] fp32 with rows s.score_row() apart; the new tokens are the last T keys.
enum class FlashKernel {
  general,           // flash_attention.comp
  decode,            // flash_decode.comp: few rows per KV group
  coopmat,           // flash_coopmat.comp on tensor cores (fp16)
  coopmat_emulated,  // the same with its matrix products in scalar code (CPU drivers; tests)
};
struct FlashPlan {
  FlashKernel kernel = FlashKernel::general;
  uint32_t rows = 0, block = 0;  // rows per workgroup, keys per block
  gpu::FlashTile tile;           // flash_coopmat.comp's, as run (rows = 16·strips, block = keys)
  uint32_t chunk = 0, splits = 1;  // keys per split and number of splits
  // flash_decode.comp with splits: its last workgroup of each row tile merges
  // them (counted in FlashArgs::counters), no attention_combine.comp pass.
  bool merge = false;
};
struct FlashOptions {
  bool split = true;   // keys may be split across workgroups
  bool decode = true;  // ≤ 16 rows per KV group (T·H/KV) may take flash_decode.comp (unless flash_coopmat applies)
  Coopmat coopmat = Coopmat::off;  // fp16 storage may take flash_coopmat.comp (where usable)
  uint32_t splits = 0;  // key splits, at most one per block of keys; 0: the plan's choice
  // The fewest keys the plan's choice gives a split (rounded up to a block); 0:
  // flash_decode.comp's workgroup size (a block of keys per 32-lane subgroup),
  // 4 blocks for the other kernels.
  uint32_t split_keys = 0;
  // flash_decode.comp's most rows (query heads × tokens of a KV group) per
  // workgroup, 1 to 8; 0: 8. Fewer rows take fewer registers (the H100 held 2
  // workgroups of 8 rows per SM at 200 registers) but read the keys once per
  // row tile.
  uint32_t decode_rows = 0;
  // flash_coopmat.comp's tile: its strips at most (fewer where shared memory
  // holds fewer), then its keys per block (else 32).
  gpu::FlashTile tile;
  // The most splits FlashPlan::merge takes (0: none, the combine pass
  // always): flash_decode.comp's last workgroup of a row tile reads every
  // split's partial row of each of its rows, where the combine pass spreads
  // them over a workgroup per row.
  uint32_t merge_splits = 32;
};
// From Tuning's split_kv, flash_decode, coopmat_flash, flash_splits,
// flash_split_keys, flash_decode_rows, flash_tile and decode_merge_splits.
FlashOptions flash_options(const Tuning& t);
FlashPlan flash_plan(const DeviceInfo& d, const AttentionShape& s, Storage st, const FlashOptions& o);
// Why flash_coopmat.comp cannot run exactly tile `t` at head_dim on `d` with
// products `c` (empty if it can): `vkgate bench --op attention --tiles`.
std::string flash_tile_misfit(const DeviceInfo& d, const gpu::FlashTile& t, Coopmat c, uint32_t head_dim);
// The tiles `vkgate bench --op attention --tiles all` times.
std::vector<gpu::FlashTile> flash_tile_candidates();
// Whether attention should take the fused kernel rather than scores → softmax
// → P·V (in query chunks, see query_chunk). On CPU drivers the unfused path
// with the CPU GEMM kernels is much faster (llvmpipe runs the flash kernel's
// shared memory and barriers slowly), unless Tuning::cpu_attention is
// off. Tuning::fused is the caller's.
bool flash_preferred(const DeviceInfo& d, const Tuning& t);
// Floats of the partial-results buffer the plan needs (1 when unsplit).
size_t flash_partial_floats(const AttentionShape& s, const FlashPlan& p);
// 32-bit words of the merge counters the plan needs (0 without
// FlashPlan::merge). They must be zero before the first dispatch; each
// dispatch leaves them so.
size_t flash_counter_words(const AttentionShape& s, const FlashPlan& p);
struct FlashArgs {
  const Buffer& q;
  const Buffer& k;
  const Buffer& v;
  const Buffer* mask;  // may be null
  const Buffer* gate;  // may be null: no gate
  Gate gating;
  const Buffer& out;
  const Buffer* partial;  // needed when the plan has splits > 1
  const Buffer* counters = nullptr;  // needed with FlashPlan::merge (flash_counter_words)
  // Where given (flash_prepares_in_decode), flash_decode_prep.comp does this
  // qkv_prepare's work itself: q is unused, and k and v are also written.
  const QkvPrepare* prepare = nullptr;
};
// Whether flash_decode_prep.comp can take `a`'s qkv_prepare
// (FlashArgs::prepare) with `plan`: one row tile per KV group (each new
// position then has one workgroup to write and read it), no gate on q, k or
// v, one cache with the shape's stride, the new positions last among its
// keys, and a device with 11 storage buffers a stage.
bool flash_prepares_in_decode(const DeviceInfo& d, const AttentionShape& s, const FlashPlan& plan,
                              const QkvPrepare& a);
void flash_attention(Context::Impl& ctx, Recorder& rec, const FlashArgs& a, const AttentionShape& s,
                     const FlashPlan& plan, bool causal, float scale, Storage st = Storage::f32);

}  // namespace vkgate::ops
