#include "gpu/context_impl.hpp"
#include "gpu/pipeline.hpp"
#include "ops/ops.hpp"

namespace vkgate::ops {

namespace {
struct Push {
  uint32_t rows, dim, ld, first, count;
};
}  // namespace

void embed(Context::Impl& ctx, Recorder& rec, const EmbedArgs& a) {
  const auto& [ids, table, x, rows, dim, ld, first, count, s] = a;
  const uint32_t wg = cpu_kernels(ctx.info) ? 8 : 64;
  const Push push{rows, dim, ld ? ld : dim, first, count};
  const gpu::Grid g = gpu::grid_for(rows);
  // Several chunks write disjoint rows of x: read_write keeps each dispatch's
  // rows of the others (the recorder orders them).
  rec.dispatch(ctx.pipelines->get(variant("embed", s), {wg}),
               {{&ids, gpu::Access::read}, {&table, gpu::Access::read}, {&x, gpu::Access::read_write}}, push, g.x, g.y,
               1, "embed");
}

}  // namespace vkgate::ops
