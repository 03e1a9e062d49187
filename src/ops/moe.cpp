#include <algorithm>

#include "gpu/context_impl.hpp"
#include "gpu/pipeline.hpp"
#include "ops/ops.hpp"

namespace vkgate::ops {

namespace {
// Steps of up to this many tokens take the rows form: an expert then has at
// most this many rows (a token picks an expert once), one tile.
constexpr uint32_t kRowsMax = 8;
constexpr uint32_t kCpuRN = 8;  // columns per lane of the CPU tiles (as matmul's)
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
};
struct MatmulPush {
  uint32_t N, K, ldx, ldy, gather, e_begin, e_end, off_rows;
};
struct CombinePush {
  uint32_t rows, dim, k, has_shared, ld_logits, gate_at, off_weight, off_pos;
};
}  // namespace

uint32_t MoeRouting::max_tiles() const { return entries() / tile_rows + std::min(experts, entries()); }

MoeRouting moe_routing(const DeviceInfo& d, const Tuning& t, uint32_t rows, uint32_t experts, uint32_t k) {
  const bool cpu = cpu_gemm(d, t);
  if (rows <= kRowsMax) return {rows, experts, k, kRowsMax, cpu ? MoeKernel::rows_cpu : MoeKernel::rows};
  // Tiles about as tall as an expert's share of the rows: a 64-row tile for
  // 10 rows computes 54 rows for nothing.
  const uint32_t entries = rows * k, share = entries / std::min(experts, entries);
  const uint32_t tile = share > 48 ? 64 : share > 12 ? 32 : cpu ? 8 : 16;
  return {rows, experts, k, tile, cpu ? MoeKernel::tiled_cpu : MoeKernel::tiled};
}

void moe_route(Context::Impl& ctx, Recorder& rec, const MoeRouting& r, const MoeRouteArgs& a) {
  const RoutePush push{r.rows,       r.experts,    r.k,         a.ld,           a.norm_topk ? 1u : 0u, r.tile_rows,
                       r.off_weight(), r.off_pos(), r.off_rows(), r.off_count(), r.off_cursor(),       r.off_load()};
  rec.dispatch(ctx.pipelines->get("moe_route", {256}),
               {{&a.logits, gpu::Access::read}, {&a.route, gpu::Access::write}, {&a.tiles, gpu::Access::write}}, push,
               1, 1, 1, "moe.route");
}

void moe_matmul(Context::Impl& ctx, Recorder& rec, const MoeRouting& r, const MoeMatmulArgs& a) {
  const MatmulPush push{a.N, a.K, a.ldx, a.ldy, a.gather ? 1u : 0u, a.e_begin, a.e_end, r.off_rows()};
  const char* y32 = a.y_f32 ? "_y32" : "";
  MoeKernel kernel = r.kernel;
  // The vec4 texel rows need whole vec4s; bfloat16 has no texel format.
  if (kernel == MoeKernel::rows_cpu && (a.K % 4 != 0 || a.ldx % 4 != 0 || a.s == Storage::bf16)) kernel = MoeKernel::rows;
  std::string name;
  std::vector<uint32_t> spec;
  uint32_t columns = 0;
  VkFormat texel = VK_FORMAT_UNDEFINED;
  switch (kernel) {
    case MoeKernel::rows:
      name = variant("moe_matmul_rows", a.s, y32);
      spec = {256, kRowsMax};
      columns = 256 / std::max(1u, ctx.info.subgroup_size);
      break;
    case MoeKernel::rows_cpu:
      name = variant("moe_matmul_rows_cpu", a.s, y32);
      spec = {8, r.rows, 8};
      // The workgroups step over the column blocks: at most kCpuColumnGroups per tile.
      columns = std::max(8u, (a.N + 8 * kCpuColumnGroups - 1) / (8 * kCpuColumnGroups) * 8);
      texel = a.s == Storage::f32 ? VK_FORMAT_R32G32B32A32_SFLOAT : VK_FORMAT_R16G16B16A16_SFLOAT;
      break;
    case MoeKernel::tiled:
      name = variant("moe_matmul", a.s, y32);
      spec = tile_spec(r.tile_rows);
      columns = spec[2];
      break;
    case MoeKernel::tiled_cpu:
      name = variant("moe_matmul_cpu", a.s, y32);
      spec = {8, r.tile_rows, kCpuRN};
      columns = 8 * kCpuRN;
      texel = texel_format(a.s);
      break;
  }
  rec.dispatch(ctx.pipelines->get(name, spec),
               {{&a.x, gpu::Access::read, texel},
                {&a.w, gpu::Access::read, texel},
                {&a.y, gpu::Access::write},
                {&a.route, gpu::Access::read},
                {&a.tiles, gpu::Access::read}},
               push, (a.N + columns - 1) / columns, r.max_tiles(), 1, "moe.experts");
}

void moe_combine(Context::Impl& ctx, Recorder& rec, const MoeRouting& r, const MoeCombineArgs& a) {
  const CombinePush push{r.rows, a.dim, r.k, a.shared ? 1u : 0u, a.ld_logits, a.gate_at, r.off_weight(), r.off_pos()};
  const uint32_t wg = cpu_kernels(ctx.info) ? 8 : 64;
  const gpu::Grid g = gpu::grid_for(r.rows);
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
