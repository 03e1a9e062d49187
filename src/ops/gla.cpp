#include <cmath>
#include <limits>

#include "gpu/context_impl.hpp"
#include "gpu/pipeline.hpp"
#include "ops/ops.hpp"

namespace vkgate::ops {

namespace {
struct ScanPush {
  View q, k, v, gk;
  uint32_t tokens, heads, kv_heads, dv, feature_map, convex;
  float normalizer, clamp_min, scale;
};
struct OutputPush {
  View g;
  uint32_t tokens, heads, dv, rows, has_norm, has_gate, y_ld;
  float eps;
};
}  // namespace

void gla_recurrent(Context::Impl& ctx, Recorder& rec, const GlaScan& a, Storage s) {
  // A column per invocation: as many as d_v needs, 8 to 64 (CPU drivers run a
  // workgroup on one thread, so more workgroups keep every core busy).
  uint32_t wg = 8;
  while (wg < a.dv && wg < 64) wg *= 2;
  const gpu::Pipeline& p = ctx.pipelines->get(variant("gla_recurrent", s), {wg, a.dk});
  const ScanPush push{a.q_view, a.k_view, a.v_view, a.gk_view, a.tokens, a.heads, a.kv_heads, a.dv,
                      uint32_t(a.feature_map), a.convex ? 1u : 0u, a.normalizer,
                      a.clamp_min ? float(*a.clamp_min) : -std::numeric_limits<float>::infinity(), a.scale};
  rec.dispatch(p,
               {{&a.proj, gpu::Access::read},
                {&a.gk, gpu::Access::read},
                {&a.state, gpu::Access::read_write},
                {&a.o, gpu::Access::write}},
               push, (a.dv + wg - 1) / wg, a.heads, a.batch, "gla.recurrent");
}

void gla_output(Context::Impl& ctx, Recorder& rec, const GlaOutput& a, Storage s) {
  const RowReduce r = row_reduce(ctx.info, rec.tuning(), a.dv);
  const gpu::Pipeline& p = ctx.pipelines->get(variant("gla_output", s) + r.suffix, {r.wg});
  const uint64_t rows = uint64_t(a.rows) * a.heads;
  const OutputPush push{a.g_view, a.tokens, a.heads, a.dv, uint32_t(rows), a.norm ? 1u : 0u, a.gate ? 1u : 0u,
                        a.y_ld, a.eps};
  const gpu::Grid g = gpu::grid_for(rows);
  rec.dispatch(p,
               {{&a.o, gpu::Access::read},
                {&a.proj, gpu::Access::read},
                {a.norm ? a.norm : &a.o, gpu::Access::read},
                {&a.y, gpu::Access::write}},
               push, g.x, g.y, 1, "gla.output");
}

}  // namespace vkgate::ops
