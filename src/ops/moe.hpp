// Internal: the sparse MoE's ops (moe_route.comp, moe_matmul.comp,
// moe_combine.comp; host side in moe.cpp), apart from ops.hpp's shared list.
#pragma once

#include <cstdint>

#include "ops/ops.hpp"
#include "vkgate/dtype.hpp"

namespace vkgate::ops {

// The routing for `rows` tokens lives in two uint32 buffers: `route`, whose word
// offsets MoeRouting gives (each slot's expert and weight, each entry's row
// in expert order, each row's token, per-expert counts and loads), and
// `tiles` (the count, then 4 words per tile of at most tile_rows rows). The
// grouped GEMM's kernel: for steps of ≤ 8 tokens the rows form (one subgroup
// per column: an expert then has ≤ 8 rows, one tile), else tiles whose height
// follows the expected rows per expert (entries / min(E, entries): 8 or 16,
// 32 or 64), each on the CPU drivers' kernels where cpu_gemm says so.
enum class MoeKernel { rows, rows_cpu, tiled, tiled_cpu };
struct MoeRouting {
  uint32_t rows = 0, experts = 0, k = 0, tile_rows = 0;
  MoeKernel kernel = MoeKernel::tiled;
  uint32_t shard_experts = 0;  // experts per weight buffer: each buffer's GEMMs are their own dispatches
  gpu::QrowsTile qrows;        // the rows form's block-format kernel on GPUs (Tuning::qrows_tile)
  uint32_t shards() const { return (experts + shard_experts - 1) / shard_experts; }
  // Per buffer, the two grouped GEMMs' VkDispatchIndirectCommand, 16 bytes apart (moe_route.comp).
  uint64_t dispatch_bytes() const { return 32 * uint64_t(shards()); }
  uint32_t entries() const { return rows * k; }
  uint32_t off_weight() const { return entries(); }
  uint32_t off_pos() const { return 2 * entries(); }
  uint32_t off_rows() const { return 3 * entries(); }
  uint32_t off_count() const { return 4 * entries(); }
  uint32_t off_cursor() const { return off_count() + experts; }
  uint32_t off_load() const { return off_cursor() + experts; }  // E floats: count / rows
  uint64_t route_bytes() const { return uint64_t(off_load() + experts) * 4; }
  // Each non-empty expert has a partial tile at most: entries / tile_rows + min(E, entries).
  uint32_t max_tiles() const;
  uint64_t tile_bytes() const { return (4 + 4 * uint64_t(max_tiles())) * 4; }
};
MoeRouting moe_routing(const DeviceInfo& d, const Tuning& t, uint32_t rows, uint32_t experts, uint32_t k,
                       uint32_t shard_experts);
// The grouped GEMM's workgroups along its N output columns (K, ldx: its input
// rows; s: storage; quantized: the weights in a block format, MoeBlocks).
uint32_t moe_matmul_groups(const DeviceInfo& d, const MoeRouting& r, uint32_t N, uint32_t K, uint32_t ldx, Storage s,
                           bool quantized = false);

// logits fp32 [rows, ld] (the router's E, then with a shared expert its gate).
struct MoeRouteArgs {
  const Buffer& logits;
  uint32_t ld;
  bool norm_topk;
  const Buffer& route;
  const Buffer& tiles;
  const Buffer& dispatch;    // MoeRouting::dispatch_bytes
  uint32_t gx_up, gx_down;   // moe_matmul_groups of the two GEMMs
};
void moe_route(Context::Impl& ctx, Recorder& rec, const MoeRouting& r, const MoeRouteArgs& a);

// Weights in one of ggml's block formats (or F32/F16/BF16 rows kept as
// stored beside them), dequantized in the kernel: expert e's N rows of
// stored_bytes(dtype, K) bytes start at byte (e − e_begin)·expert_bytes + at
// of `w` (4-byte aligned for the float types), and write y's columns from
// col0. K a multiple of 8 and of the format's block; `w` padded by
// qmatmul_padding bytes.
struct MoeBlocks {
  DType dtype;
  uint32_t expert_bytes, at = 0, col0 = 0;
};

// y[p, :N] (rows ldy apart, `s` or fp32 with y_f32) = X[src(p)]·W_eᵀ for the
// tiles of experts [e_begin, e_end) whose weights `w` holds ([e_end − e_begin,
// N, K] in `s`, or as `blocks` says); src(p) the token of row p with `gather`
// (x [rows, ldx]), else p (x [entries, ldx]). Its workgroup counts:
// `dispatch` at byte dispatch_at, as moe_route wrote them.
struct MoeMatmulArgs {
  const Buffer& x;
  uint32_t ldx;
  bool gather;
  const Buffer& w;
  uint32_t e_begin, e_end, N, K;
  const Buffer& y;
  uint32_t ldy;
  Storage s;
  bool y_f32;
  const Buffer& route;
  const Buffer& tiles;
  const Buffer& dispatch;
  uint32_t dispatch_at;
  const MoeBlocks* blocks = nullptr;
};
void moe_matmul(Context::Impl& ctx, Recorder& rec, const MoeRouting& r, const MoeMatmulArgs& a);

// y = x + Σ_j weight·experts[pos] (+ σ(logits[t, gate_at])·shared), fp32 [rows, dim].
struct MoeCombineArgs {
  const Buffer& x;
  const Buffer& y;
  const Buffer& experts;  // [entries, dim] in expert order
  const Buffer& route;
  const Buffer& logits;
  uint32_t ld_logits, dim;
  const Buffer* shared = nullptr;  // [rows, dim]; its gate logit at column gate_at
  uint32_t gate_at = 0;
};
void moe_combine(Context::Impl& ctx, Recorder& rec, const MoeRouting& r, const MoeCombineArgs& a);

}  // namespace vkgate::ops
