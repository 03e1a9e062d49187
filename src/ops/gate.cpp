#include "gpu/context_impl.hpp"
#include "gpu/pipeline.hpp"
#include "ops/ops.hpp"

namespace vkgate::ops {

namespace {
struct Push {
  View gate_view;
  uint32_t tokens, heads, dim, gate_width, count;
};
constexpr uint32_t kWorkgroup = 64;
}  // namespace

void gate(Context::Impl& ctx, Recorder& rec, const Buffer& g, View gate_view, const Buffer& y, uint32_t rows,
          uint32_t tokens, uint32_t heads, uint32_t dim, uint32_t gate_width, Storage s) {
  const gpu::Pipeline& p = ctx.pipelines->get(variant("gate", s), {kWorkgroup});
  const uint64_t count = uint64_t(rows) * heads * dim;
  Push push{gate_view, tokens, heads, dim, gate_width, uint32_t(count)};
  const gpu::Grid grid = gpu::grid_for((count + kWorkgroup - 1) / kWorkgroup);
  rec.dispatch(p, {{&g, gpu::Access::read}, {&y, gpu::Access::read_write}}, &push, grid.x, grid.y, 1, "gate");
}

}  // namespace vkgate::ops
