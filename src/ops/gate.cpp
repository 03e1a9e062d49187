#include "gpu/context_impl.hpp"
#include "gpu/pipeline.hpp"
#include "ops/ops.hpp"

namespace vkgate::ops {

namespace {
struct Push {
  View gate_view;
  uint32_t tokens, heads, dim, gate_width, count, y_stride;
};
}  // namespace

void gate(Context::Impl& ctx, Recorder& rec, const Buffer& g, View gate_view, const Buffer& y, uint32_t rows,
          uint32_t tokens, uint32_t heads, uint32_t dim, uint32_t gate_width, Storage s, uint32_t y_stride) {
  // One subgroup per head row under the CPU kernels (a workgroup's
  // invocations run one after another on one thread), 64 invocations
  // elsewhere; VKGATE_DISABLE_CPU_MATMUL gives the latter on a CPU driver too,
  // so the test suite runs both.
  const uint32_t wg = cpu_gemm(ctx.info, rec.tuning()) ? 8 : 64;
  const gpu::Pipeline& p = ctx.pipelines->get(variant("gate", s), {wg});
  const uint64_t count = uint64_t(rows) * heads;
  Push push{gate_view, tokens, heads, dim, gate_width, uint32_t(count), y_stride ? y_stride : heads * dim};
  const gpu::Grid grid = gpu::grid_for(count);
  rec.dispatch(p, {{&g, gpu::Access::read}, {&y, gpu::Access::read_write}}, push, grid.x, grid.y, 1, "gate");
}

}  // namespace vkgate::ops
