#include <algorithm>

#include "gpu/context_impl.hpp"
#include "gpu/pipeline.hpp"
#include "ops/ops.hpp"

namespace vkgate::ops {

namespace {
// Steps of up to this many tokens take the rows form: an expert then has at
// most this many rows (a token picks an expert once), one tile.
constexpr uint32_t kRowsMax = 8;

// {WG, BM, BN, BK, TM, TN} of the shared-memory tiles (gemm_tile.glsl), as the dense matmul's.
std::vector<uint32_t> tile_spec(const DeviceInfo& d) {
  if (d.max_workgroup_invocations >= 256 && d.shared_memory_bytes >= 2 * 16 * 64 * 4) return {256, 64, 64, 16, 4, 4};
  return {128, 32, 64, 16, 2, 8};
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

MoeRouting moe_routing(const DeviceInfo& d, uint32_t rows, uint32_t experts, uint32_t k) {
  return {rows, experts, k, rows <= kRowsMax ? kRowsMax : tile_spec(d)[1]};
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
  const bool rows = r.tile_rows == kRowsMax && r.rows <= kRowsMax;
  const char* y32 = a.y_f32 ? "_y32" : "";
  std::vector<uint32_t> spec;
  uint32_t columns;
  if (rows) {
    constexpr uint32_t wg = 256;
    spec = {wg, kRowsMax};
    columns = wg / std::max(1u, ctx.info.subgroup_size);
  } else {
    spec = tile_spec(ctx.info);
    columns = spec[2];
  }
  rec.dispatch(ctx.pipelines->get(variant(rows ? "moe_matmul_rows" : "moe_matmul", a.s, y32), spec),
               {{&a.x, gpu::Access::read},
                {&a.w, gpu::Access::read},
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
