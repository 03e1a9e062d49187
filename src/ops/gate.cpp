#include "gpu/context_impl.hpp"
#include "gpu/pipeline.hpp"
#include "ops/ops.hpp"

namespace vkgate::ops {

namespace {
struct GatePush {
  Gate gate;
  View y_view;
  uint32_t tokens, heads, dim, count;
};
}  // namespace

void gate(Context::Impl& ctx, Recorder& rec, const GateArgs& a) {
  const auto& [g, gating, y, y_view, rows, tokens, heads, dim, s] = a;
  // One subgroup per head row under the CPU kernels (a workgroup's
  // invocations run one after another on one thread), 64 invocations
  // elsewhere; VKGATE_DISABLE_CPU_MATMUL gives the latter on a CPU driver too,
  // so the test suite runs both.
  const uint32_t wg = cpu_gemm(ctx.info, rec.tuning()) ? 8 : 64;
  const gpu::Pipeline& p = ctx.pipelines->get(variant("gate", s), {wg});
  const uint64_t count = uint64_t(rows) * heads;
  const GatePush push{gating, y_view, tokens, heads, dim, uint32_t(count)};
  const gpu::Grid grid = gpu::grid_for(count);
  // g and y may be one buffer (a gate on the projections), y_view then apart from the scores.
  rec.dispatch(p, {{&g, gpu::Access::read}, {&y, gpu::Access::read_write}}, push, grid.x, grid.y, 1, "gate");
}

}  // namespace vkgate::ops
