#include <algorithm>
#include <bit>
#include <optional>
#include <string>
#include <vector>

#include "gpu/context_impl.hpp"
#include "gpu/pipeline.hpp"
#include "ops/attention.hpp"

namespace vkgate::ops {

namespace {
struct FlashPush {
  Gate gate;
  uint32_t tokens, keys, kv_stride, heads, kv_heads, past;
  uint32_t causal, has_mask, has_gate, tiled;
  uint32_t chunk, splits;
  float scale;
  uint32_t mask_ld, merge;
};
// flash_decode_prep.comp's parameters: FlashPush, then PREPARE's (flash_common.glsl).
struct FlashPreparePush {
  FlashPush base;
  View q, k, v;
  uint32_t rotary, interleaved, norm;
  float eps;
};
struct CombinePush {
  Gate gate;
  uint32_t tokens, heads, head_dim, splits;
  uint32_t has_gate, rows;
};
constexpr uint32_t kWorkgroup = 128;
constexpr uint32_t kPrepareBindings = 11;  // flash_decode_prep.comp's

// Rows per workgroup and keys per block: the largest that fit the device's
// shared memory (a q and a k chunk of up to 64 dims, the block's scores and
// per-row state) while giving every thread a whole score tile (R·BC ≥ 4·WG).
struct Tiles {
  uint32_t rows, block;
};
// Short queries (a decode step has G rows per KV head) take the smallest
// row count that holds them, so fewer rows sit idle.
Tiles tiles(const DeviceInfo& d, uint32_t head_dim, uint32_t rows_needed) {
  const uint64_t chunk = std::min<uint32_t>(head_dim, 64) + 1;
  for (Tiles t : {Tiles{32, 64}, Tiles{16, 64}, Tiles{8, 64}}) {
    if (t.rows > 8 && t.rows / 2 >= rows_needed) continue;
    const uint64_t bytes = (uint64_t(t.rows) + t.block) * chunk * 4 + uint64_t(t.rows) * t.block * 4 + 3ull * t.rows * 4;
    if (bytes <= d.shared_memory_bytes) return t;
  }
  throw Error(ErrorCode::unsupported, "flash attention: the device's shared memory (" +
                                          std::to_string(d.shared_memory_bytes) + " bytes) is too small");
}
// flash_decode.comp: up to kDecodeRows rows (query heads × tokens of one KV
// group) per workgroup, each subgroup scoring its own blocks of keys, one key
// per lane.
constexpr uint32_t kDecodeRows = 8;
bool decode_kernel(const DeviceInfo& d, const AttentionShape& s, uint32_t rows) {
  return rows <= 2 * kDecodeRows && s.head_dim % 8 == 0 && d.subgroup_arithmetic;
}

// flash_coopmat.comp's shared memory: q rows and one k/v block in fp16 (rows
// padded by 8), per strip a 16 × (keys + 4) fp32 scratch and 16 × (keys + 8)
// fp16 probabilities, and 3 floats per row.
uint64_t coopmat_shared_bytes(uint32_t strips, uint32_t keys, uint32_t head_dim) {
  const uint64_t rows = 16 * strips, ldq = head_dim + 8;
  return (rows + keys) * ldq * 2 + strips * 16 * ((keys + 4) * 4 + (keys + 8) * 2) + 3 * rows * 4;
}
}  // namespace

std::string flash_tile_misfit(const DeviceInfo& d, const gpu::FlashTile& t, Coopmat c, uint32_t head_dim) {
  const uint64_t shared = coopmat_shared_bytes(t.strips, t.keys, head_dim);
  const uint32_t wg = t.strips * coopmat_lanes(c);
  if (head_dim % 16) return "head_dim " + std::to_string(head_dim) + " is not a multiple of 16";
  if (wg > d.max_workgroup_invocations)
    return std::to_string(wg) + " invocations, the device takes " + std::to_string(d.max_workgroup_invocations);
  if (shared > d.shared_memory_bytes)
    return std::to_string(shared) + " bytes of shared memory, the device has " + std::to_string(d.shared_memory_bytes);
  return {};
}

std::vector<gpu::FlashTile> flash_tile_candidates() {
  std::vector<gpu::FlashTile> out;
  using Acc16 = gpu::FlashTile::Acc16;
  for (Acc16 acc : {Acc16::none, Acc16::pv, Acc16::both})
    for (uint32_t keys : {32u, 64u})
      for (uint32_t strips : {4u, 2u}) out.push_back({strips, keys, acc});
  return out;
}

namespace {
// The tile flash_coopmat.comp runs with products `c`: `want`, with fewer
// strips (down to 2, unless it asks for 1) where they do not fit, then the
// same with blocks of 32 keys; none if nothing fits (the general kernel then
// runs).
std::optional<gpu::FlashTile> coopmat_tile(const DeviceInfo& d, Coopmat c, uint32_t head_dim, gpu::FlashTile want) {
  for (uint32_t keys : {want.keys, 32u})
    for (uint32_t strips = want.strips; strips >= std::min(want.strips, 2u); strips /= 2)
      if (const gpu::FlashTile t{strips, keys, want.acc16}; flash_tile_misfit(d, t, c, head_dim).empty()) return t;
  return std::nullopt;
}
}  // namespace

FlashOptions flash_options(const Tuning& t) {
  return {t.split_kv,         t.flash_decode,      t.coopmat_flash, t.flash_splits,
          t.flash_split_keys, t.flash_decode_rows, t.flash_tile,    t.decode_merge_splits};
}

bool flash_preferred(const DeviceInfo& d, const Tuning& t) { return !cpu_gemm(d, t) || !t.cpu_attention; }

FlashPlan flash_plan(const DeviceInfo& d, const AttentionShape& s, Storage st, const FlashOptions& o) {
  const uint32_t rows_needed = s.tokens * (s.heads / s.kv_heads);
  FlashPlan p;
  // flash_coopmat.comp's softmax meets a row's lanes by shuffles.
  const Coopmat coopmat = st == Storage::f16 && d.subgroup_shuffle ? coopmat_usable(d, o.coopmat) : Coopmat::off;
  const std::optional<gpu::FlashTile> tile =
      coopmat != Coopmat::off ? coopmat_tile(d, coopmat, s.head_dim, o.tile) : std::nullopt;
  // Decode steps first: on the H100 one token over 32k keys took 73–86 µs in
  // flash_decode, 129 in the split-key flash_coopmat (whose workgroups of
  // 16-row strips hold only 8 rows here).
  if (o.decode && decode_kernel(d, s, rows_needed)) {
    p.kernel = FlashKernel::decode;
    // A power of two: fewer pipelines to compile, at the cost of idle rows.
    p.rows = std::min(std::bit_ceil(rows_needed), o.decode_rows ? std::min(o.decode_rows, kDecodeRows) : kDecodeRows);
    p.block = 64;  // no blocks in that kernel: only sizes the splits below
  } else if (tile) {
    p.kernel = coopmat == Coopmat::tensor ? FlashKernel::coopmat : FlashKernel::coopmat_emulated;
    p.tile = *tile;
    p.rows = 16 * tile->strips;
    p.block = tile->keys;
  } else {
    const Tiles t = tiles(d, s.head_dim, rows_needed);
    static_assert(kWorkgroup * 4 <= 8 * 64, "the smallest tile must cover the workgroup");
    p.rows = t.rows;
    p.block = t.block;
  }
  const uint32_t row_tiles = (rows_needed + p.rows - 1) / p.rows;
  const uint64_t groups = uint64_t(row_tiles) * s.kv_heads * s.batch;
  // Split the keys (flash-decoding) when too few workgroups would fill the
  // device: a decode step has one row tile per KV head. Each split keeps at
  // least split_keys: in flash_decode.comp a block of 32 keys for each of its
  // subgroups (on the H100 a subgroup's chain of dependent loads, not the
  // bytes, set the time of a split: BENCHMARKS.md, 2026-11-23), elsewhere 4
  // blocks, so that the partial results stay small beside the keys read.
  const uint64_t want = d.type == "cpu" ? 8 : p.kernel == FlashKernel::decode ? 256 : 512;
  const uint32_t min_keys = o.split_keys ? o.split_keys : p.kernel == FlashKernel::decode ? kWorkgroup : 4 * p.block;
  uint32_t splits = 1;
  if (o.split && o.splits) {
    // Rounded up: 1000 keys take 16 splits (15 of 64 keys, one of 40), not
    // 15 of 67 rounded up to 8 of 128.
    splits = std::clamp<uint32_t>(o.splits, 1, std::max<uint32_t>(1, (s.keys + p.block - 1) / p.block));
  } else if (o.split && groups < want) {
    const uint32_t max_splits = std::max<uint32_t>(1, s.keys / std::max(min_keys, p.block));
    splits = uint32_t(std::min<uint64_t>((want + groups - 1) / groups, max_splits));
  }
  const uint32_t chunk = (s.keys + splits - 1) / splits;
  p.chunk = (chunk + p.block - 1) / p.block * p.block;
  p.splits = (s.keys + p.chunk - 1) / p.chunk;
  if (p.splits == 0) p.splits = 1;
  p.merge = p.kernel == FlashKernel::decode && p.splits > 1 && p.splits <= o.merge_splits;
  return p;
}

size_t flash_partial_floats(const AttentionShape& s, const FlashPlan& p) {
  return p.splits > 1 ? size_t(s.batch) * p.splits * s.heads * s.tokens * (s.head_dim + 2) : 1;
}

namespace {
uint32_t row_tiles(const AttentionShape& s, const FlashPlan& p) {
  return (s.tokens * (s.heads / s.kv_heads) + p.rows - 1) / p.rows;
}
}  // namespace

size_t flash_counter_words(const AttentionShape& s, const FlashPlan& p) {
  return p.merge ? size_t(s.batch) * s.kv_heads * row_tiles(s, p) : 0;
}

bool flash_prepares_in_decode(const DeviceInfo& d, const AttentionShape& s, const FlashPlan& plan,
                              const QkvPrepare& a) {
  return d.max_stage_storage_buffers >= kPrepareBindings && plan.kernel == FlashKernel::decode &&
         row_tiles(s, plan) == 1 && a.gate_target == GateTarget::none && a.seqs.empty() && a.seq == s.stride() &&
         a.first == s.keys - s.tokens;
}

void flash_attention(Context::Impl& ctx, Recorder& rec, const FlashArgs& a, const AttentionShape& s,
                     const FlashPlan& plan, bool causal, float scale, Storage st) {
  if (a.prepare && !flash_prepares_in_decode(ctx.info, s, plan, *a.prepare))
    throw Error(ErrorCode::invalid_argument,
                "flash attention: q, k and v are prepared in flash_decode only, with one row tile per KV group and "
                "no gate on them");
  const gpu::Pipeline* p = nullptr;
  const char* label = "flash_attention";
  switch (plan.kernel) {
    case FlashKernel::decode:
      p = &ctx.pipelines->get(variant(a.prepare ? "flash_decode_prep" : "flash_decode", st),
                              {kWorkgroup, plan.rows, s.head_dim, ctx.info.min_subgroup_size});
      label = a.prepare ? "flash_attention.decode+prepare" : "flash_attention.decode";
      break;
    case FlashKernel::coopmat:
    case FlashKernel::coopmat_emulated: {
      const bool emulated = plan.kernel == FlashKernel::coopmat_emulated;
      const uint32_t lanes = coopmat_lanes(emulated ? Coopmat::emulated : Coopmat::tensor);
      p = &ctx.pipelines->get(emulated ? "flash_coopmat_emulated" : "flash_coopmat",
                              {plan.tile.strips * lanes, s.head_dim, plan.tile.keys, uint32_t(plan.tile.acc16)});
      label = emulated ? "flash_attention.emulated" : "flash_attention.coopmat";
      break;
    }
    case FlashKernel::general:
      p = &ctx.pipelines->get(variant("flash_attention", st), {kWorkgroup, plan.rows, plan.block, s.head_dim});
      break;
  }
  // Keys per split from the keys this step has, not the plan's (a cache's
  // capacity): a decode step over a partly filled cache spreads them over
  // every split instead of filling the first few and leaving the rest empty.
  const uint32_t even = (s.keys + plan.splits - 1) / plan.splits;
  const uint32_t chunk = std::min(plan.chunk, (even + plan.block - 1) / plan.block * plan.block);
  FlashPush push{a.gating, s.tokens, s.keys, s.stride(), s.heads, s.kv_heads, s.keys - s.tokens, causal ? 1u : 0u,
            a.mask ? 1u : 0u, a.gate ? 1u : 0u, s.tiled ? 1u : 0u, chunk, plan.splits, scale, s.score_row(),
            plan.merge ? 1u : 0u};
  if (uint64_t(s.batch) * plan.splits > 65535 || s.kv_heads > 65535)
    throw Error(ErrorCode::invalid_argument, "flash attention: batch × splits exceeds 65535");
  if (plan.merge && (!a.counters || a.counters->size() < flash_counter_words(s, plan) * 4))
    throw Error(ErrorCode::invalid_argument, "flash attention: the plan merges its splits and needs " +
                                                 std::to_string(flash_counter_words(s, plan)) + " counters");
  const Buffer& partial = a.partial ? *a.partial : a.out;
  const bool split = plan.splits > 1, merged_here = !split || plan.merge;
  const gpu::Access kv = a.prepare ? gpu::Access::read_write : gpu::Access::read;
  std::vector<gpu::Binding> bindings{{a.prepare ? &a.prepare->proj : &a.q, gpu::Access::read},
                                     {&a.k, kv},
                                     {&a.v, kv},
                                     {a.mask ? a.mask : &a.q, gpu::Access::read},
                                     {a.gate ? a.gate : &a.q, gpu::Access::read},
                                     {&a.out, merged_here ? gpu::Access::write : gpu::Access::read},
                                     {&partial, split ? (plan.merge ? gpu::Access::read_write : gpu::Access::write)
                                                      : gpu::Access::read}};
  // flash_decode.comp's counters (the partial buffer stands in, unused, without a merge)
  if (plan.kernel == FlashKernel::decode)
    bindings.push_back({plan.merge ? a.counters : &partial, plan.merge ? gpu::Access::read_write : bindings[6].access});
  if (a.prepare) {
    // Without a q/k norm its weight bindings hold the table, which the shader then never reads.
    const QkvPrepare& prep = *a.prepare;
    bindings.push_back({prep.q_norm ? prep.q_norm : &prep.table, gpu::Access::read});
    bindings.push_back({prep.k_norm ? prep.k_norm : &prep.table, gpu::Access::read});
    bindings.push_back({&prep.table, gpu::Access::read});
    const uint32_t norm = !prep.q_norm ? 0u : prep.kind == NormKind::zero_centered ? 2u : 1u;
    const FlashPreparePush pp{push,        prep.q_view,
                              prep.k_view, prep.v_view,
                              prep.rotary, prep.rope_style == RopeStyle::interleaved ? 1u : 0u,
                              norm,        prep.eps};
    rec.dispatch(*p, bindings, pp, row_tiles(s, plan), s.kv_heads, s.batch * plan.splits, label);
  } else {
    rec.dispatch(*p, bindings, push, row_tiles(s, plan), s.kv_heads, s.batch * plan.splits, label);
  }
  if (merged_here) return;
  // attention_combine.comp: a workgroup per 32 dims of a row.
  const uint32_t wg = ctx.info.type == "cpu" ? 64 : 256;
  const gpu::Pipeline& c = ctx.pipelines->get(variant("attention_combine", st), {wg});
  const uint32_t rows = s.batch * s.tokens * s.heads;
  CombinePush cp{a.gating, s.tokens, s.heads, s.head_dim, plan.splits, a.gate ? 1u : 0u, rows};
  const gpu::Grid grid = gpu::grid_for(rows);
  rec.dispatch(c, {{&partial, gpu::Access::read}, {a.gate ? a.gate : &partial, gpu::Access::read}, {&a.out, gpu::Access::write}},
               cp, grid.x, grid.y, (s.head_dim + 31) / 32, "attention_combine");
}

}  // namespace vkgate::ops
