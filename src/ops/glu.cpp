#include "gpu/context_impl.hpp"
#include "gpu/pipeline.hpp"
#include "ops/ops.hpp"

namespace vkgate::ops {

namespace {
struct GluPush {
  uint32_t rows, inter, ld_p, ld_h, act, chunk;
};
}  // namespace

void glu(Context::Impl& ctx, Recorder& rec, const GluArgs& a) {
  const auto& [proj, h, rows, inter, act, s, ld_p, ld_h] = a;
  // One subgroup per row under the CPU kernels (as the gate: llvmpipe runs a
  // workgroup's invocations one after another); elsewhere 64 invocations per
  // 256 elements of a row.
  const bool cpu = cpu_gemm(ctx.info, rec.tuning());
  const uint32_t wg = cpu ? 8 : 64, chunk = cpu ? inter : 4 * wg;
  const GluPush push{rows, inter, ld_p ? ld_p : 2 * inter, ld_h ? ld_h : inter, uint32_t(act), chunk};
  const gpu::Grid g = gpu::grid_for(uint64_t(rows) * ((inter + chunk - 1) / chunk));
  rec.dispatch(ctx.pipelines->get(variant("glu", s), {wg}), {{&proj, gpu::Access::read}, {&h, gpu::Access::write}},
               push, g.x, g.y, 1, "mlp.glu");
}

}  // namespace vkgate::ops
