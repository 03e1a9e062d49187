#include <algorithm>

#include "gpu/context_impl.hpp"
#include "gpu/pipeline.hpp"
#include "ops/moe.hpp"
#include "ops/qmatmul.hpp"
#include "vkgate/error.hpp"
#include "vkgate/quant.hpp"

namespace vkgate::ops {

namespace {
// Steps of up to this many tokens take the rows form: an expert then has at
// most this many rows (a token picks an expert once), one tile.
constexpr uint32_t kRowsMax = 8;
// Workgroups per tile of the CPU rows kernel: llvmpipe launches each at a cost
// (decode, 512 experts over 4 buffers: 640 workgroups a dispatch, most empty).
constexpr uint32_t kCpuColumnGroups = 16;

// {WG, BM, BN, BK, TM, TN} of gemm_tile.glsl for tiles of `rows` rows: WG = (BM/TM)·(BN/TN).
std::vector<uint32_t> tile_spec(uint32_t rows) {
  if (rows >= 64) return {256, 64, 64, 16, 4, 4};
  if (rows >= 32) return {128, 32, 64, 16, 4, 4};
  return {64, 16, 64, 16, 4, 4};
}

struct RoutePush {
  uint32_t rows, experts, k, ld, norm_topk, tile_rows;
  uint32_t off_weight, off_pos, off_rows, off_count, off_cursor, off_load;
  uint32_t shards, shard_experts, gx_up, gx_down;
};
struct MoeMatmulPush {
  uint32_t N, K, ldx, ldy, gather, e_begin, e_end, off_rows;
  uint32_t row_bytes = 0, expert_bytes = 0, w_at = 0, col0 = 0;  // block formats only
};
struct MoeCombinePush {
  uint32_t rows, dim, k, has_shared, ld_logits, gate_at, off_weight, off_pos, chunk;
};
}  // namespace

uint32_t MoeRouting::max_tiles() const { return entries() / tile_rows + std::min(experts, entries()); }

MoeRouting moe_routing(const DeviceInfo& d, const Tuning& t, uint32_t rows, uint32_t experts, uint32_t k,
                       uint32_t shard_experts) {
  const bool cpu = cpu_gemm(d, t);
  if (rows <= kRowsMax)
    return {rows, experts, k, kRowsMax, cpu ? MoeKernel::rows_cpu : MoeKernel::rows, shard_experts, t.qrows_tile};
  // Tiles about as tall as an expert's share of the rows: a 64-row tile for
  // 10 rows computes 54 rows for nothing.
  const uint32_t entries = rows * k, share = entries / std::min(experts, entries);
  const uint32_t tile = share > 48 ? 64 : share > 12 ? 32 : cpu ? 8 : 16;
  if (cpu) return {rows, experts, k, std::min(tile, t.cpu_gemm_rows), MoeKernel::tiled_cpu, shard_experts};
  return {rows, experts, k, tile, MoeKernel::tiled, shard_experts};
}

namespace {
// The grouped GEMM's shader, spec constants, output columns per workgroup
// and texel format for its operands (none: storage buffers).
struct Kernel {
  std::string name;
  std::vector<uint32_t> spec;
  uint32_t columns;
  VkFormat texel = VK_FORMAT_UNDEFINED;
  VkFormat w_texel = VK_FORMAT_R32_UINT;  // the block formats' W
};
// The block-format kernels (moe_matmul.comp's QUANT variants): spec constant
// 1 the format, the kernel's own from 2. The CPU ones read X as RGBA texels
// (f32 or f16, ldx a multiple of 4); bf16 takes the GPU kernels.
Kernel quant_kernel_for(const DeviceInfo& d, const MoeRouting& r, uint32_t N, uint32_t ldx, Storage s, bool y_f32,
                        DType wtype) {
  const uint32_t fmt = ggml_type_of(wtype);
  const char* y32 = y_f32 ? "_y32" : "";
  const bool texel_x = s != Storage::bf16 && ldx % 4 == 0;
  const VkFormat x4 = texel4_format(s);
  MoeKernel kernel = r.kernel;
  if (kernel == MoeKernel::rows_cpu && !texel_x) kernel = MoeKernel::rows;
  if (kernel == MoeKernel::tiled_cpu && !texel_x) kernel = MoeKernel::tiled;
  switch (kernel) {
    case MoeKernel::rows:
      if (const auto sr = slice_rows(d, r.qrows, wtype, ldx))
        return {variant("moe_matmul_q_slices", s, y32),
                {256, fmt, kRowsMax, r.qrows.columns, r.qrows.unroll, sr->min_subgroup}, sr->columns};
      return {variant("moe_matmul_q_rows", s, y32), {256, fmt, kRowsMax}, 256 / std::max(1u, d.subgroup_size)};
    case MoeKernel::rows_cpu:
      return {variant("moe_matmul_q_rows_cpu", s, y32), {8, fmt, r.rows, 8},
              std::max(8u, (N + 8 * kCpuColumnGroups - 1) / (8 * kCpuColumnGroups) * 8), x4, qrows_cpu_view(wtype)};
    case MoeKernel::tiled: {
      const uint32_t bm = std::max(16u, r.tile_rows);  // the CPU drivers' tiles of 8 included
      return {variant("moe_matmul_q", s, y32), {256, fmt, bm, bm / 16}, 64};
    }
    case MoeKernel::tiled_cpu:
      return {variant("moe_matmul_q_cpu", s, y32), {8, fmt, r.tile_rows, kCpuRN}, 8 * kCpuRN, x4};
  }
  return {};
}

Kernel kernel_for(const DeviceInfo& d, const MoeRouting& r, uint32_t N, uint32_t K, uint32_t ldx, Storage s,
                  bool y_f32) {
  const char* y32 = y_f32 ? "_y32" : "";
  MoeKernel kernel = r.kernel;
  // The vec4 texel rows need whole vec4s; bfloat16 has no texel format.
  if (kernel == MoeKernel::rows_cpu && (K % 4 != 0 || ldx % 4 != 0 || s == Storage::bf16)) kernel = MoeKernel::rows;
  switch (kernel) {
    case MoeKernel::rows:
      return {variant("moe_matmul_rows", s, y32), {256, kRowsMax}, 256 / std::max(1u, d.subgroup_size)};
    case MoeKernel::rows_cpu:
      // The workgroups step over the column blocks: at most kCpuColumnGroups per tile.
      return {variant("moe_matmul_rows_cpu", s, y32), {8, r.rows, 8},
              std::max(8u, (N + 8 * kCpuColumnGroups - 1) / (8 * kCpuColumnGroups) * 8),
              texel4_format(s)};
    case MoeKernel::tiled: {
      std::vector<uint32_t> spec = tile_spec(r.tile_rows);
      const uint32_t columns = spec[2];
      return {variant("moe_matmul", s, y32), std::move(spec), columns};
    }
    case MoeKernel::tiled_cpu:
      return {variant("moe_matmul_cpu", s, y32), {8, r.tile_rows, kCpuRN}, 8 * kCpuRN, texel_format(s)};
  }
  return {};
}
}  // namespace

uint32_t moe_matmul_groups(const DeviceInfo& d, const MoeRouting& r, uint32_t N, uint32_t K, uint32_t ldx, Storage s,
                           bool quantized) {
  // A [gate ; up] may hold a block format and a float one (one dispatch per
  // half, the same count of workgroups): enough for the narrower kernel.
  const uint32_t columns = quantized ? std::min(quant_kernel_for(d, r, N, ldx, s, false, DType::Q8_0).columns,
                                                quant_kernel_for(d, r, N, ldx, s, false, DType::F16).columns)
                                     : kernel_for(d, r, N, K, ldx, s, false).columns;
  return (N + columns - 1) / columns;
}

void moe_route(Context::Impl& ctx, Recorder& rec, const MoeRouting& r, const MoeRouteArgs& a) {
  const RoutePush push{r.rows,       r.experts,    r.k,          a.ld,          a.norm_topk ? 1u : 0u, r.tile_rows,
                       r.off_weight(), r.off_pos(), r.off_rows(), r.off_count(), r.off_cursor(),       r.off_load(),
                       r.shards(),   r.shard_experts, a.gx_up,   a.gx_down};
  rec.dispatch(ctx.pipelines->get("moe_route", {256}),
               {{&a.logits, gpu::Access::read},
                {&a.route, gpu::Access::write},
                {&a.tiles, gpu::Access::write},
                {&a.dispatch, gpu::Access::write}},
               push, 1, 1, 1, "moe.route");
}

void moe_matmul(Context::Impl& ctx, Recorder& rec, const MoeRouting& r, const MoeMatmulArgs& a) {
  MoeMatmulPush push{a.N, a.K, a.ldx, a.ldy, a.gather ? 1u : 0u, a.e_begin, a.e_end, r.off_rows()};
  Kernel k;
  VkFormat w_texel = VK_FORMAT_UNDEFINED;
  if (a.blocks) {
    const MoeBlocks& b = *a.blocks;
    const std::optional<size_t> row_bytes = stored_bytes(b.dtype, a.K);
    const bool kernel_takes = is_quantized(b.dtype) || b.dtype == DType::F32 || b.dtype == DType::F16 ||
                              b.dtype == DType::BF16;
    if (a.K % 8 != 0 || !row_bytes || !kernel_takes)
      throw Error(ErrorCode::invalid_argument, "moe_matmul: rows of " + std::to_string(a.K) + " elements of " +
                                                   to_string(b.dtype) + " are not a shape its kernel takes (whole blocks, 8-element chunks)");
    const uint64_t need = uint64_t(a.e_end - a.e_begin - 1) * b.expert_bytes + b.at + uint64_t(a.N) * *row_bytes +
                          qmatmul_padding;
    if (a.w.size() < need)
      throw Error(ErrorCode::invalid_argument, "moe_matmul: weight buffer '" + a.w.name() + "' holds " +
                                                   std::to_string(a.w.size()) + " bytes, " + std::to_string(need) + " needed");
    push.row_bytes = uint32_t(*row_bytes);
    push.expert_bytes = b.expert_bytes;
    push.w_at = b.at;
    push.col0 = b.col0;
    k = quant_kernel_for(ctx.info, r, a.N, a.ldx, a.s, a.y_f32, b.dtype);
    w_texel = k.w_texel;
  } else {
    k = kernel_for(ctx.info, r, a.N, a.K, a.ldx, a.s, a.y_f32);
    w_texel = k.texel;
  }
  const gpu::Pipeline& pipeline = ctx.pipelines->get(k.name, k.spec);
  if (!(pipeline.texel_bindings & 2u)) w_texel = VK_FORMAT_UNDEFINED;
  rec.dispatch_indirect(pipeline,
                        {{&a.x, gpu::Access::read, k.texel},
                         {&a.w, gpu::Access::read, w_texel},
                         {&a.y, gpu::Access::write},
                         {&a.route, gpu::Access::read},
                         {&a.tiles, gpu::Access::read}},
                        push, a.dispatch, a.dispatch_at, "moe.experts");
}

void moe_combine(Context::Impl& ctx, Recorder& rec, const MoeRouting& r, const MoeCombineArgs& a) {
  // With the CPU drivers' kernels a workgroup takes a whole row, else an
  // element per lane: the slots' chains of loads (route, then the expert's
  // row) in one workgroup per row took 46 µs of a decode step's layer (2048
  // elements) on an H200.
  const uint32_t wg = cpu_kernels(ctx.info) ? 8 : 64, chunk = cpu_gemm(ctx.info, rec.tuning()) ? a.dim : wg;
  const MoeCombinePush push{r.rows,    a.dim,          r.k,         a.shared ? 1u : 0u, a.ld_logits,
                            a.gate_at, r.off_weight(), r.off_pos(), chunk};
  const gpu::Grid g = gpu::grid_for(uint64_t(r.rows) * ((a.dim + chunk - 1) / chunk));
  rec.dispatch(ctx.pipelines->get("moe_combine", {wg}),
               {{&a.x, gpu::Access::read},
                {&a.y, gpu::Access::write},
                {&a.experts, gpu::Access::read},
                {&a.route, gpu::Access::read},
                {&a.logits, gpu::Access::read},
                {a.shared ? a.shared : &a.experts, gpu::Access::read}},
               push, g.x, g.y, 1, "moe.combine");
}

}  // namespace vkgate::ops
