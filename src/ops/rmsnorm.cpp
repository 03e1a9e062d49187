#include <algorithm>

#include "gpu/context_impl.hpp"
#include "gpu/pipeline.hpp"
#include "ops/ops.hpp"

namespace vkgate::ops {

namespace {
struct RmsnormPush {
  View in, out;
  uint32_t rows, tokens, heads, dim, zero_centered;
  float eps;
};
}  // namespace

void rmsnorm(Context::Impl& ctx, Recorder& rec, const RmsnormArgs& a) {
  const auto& [x, in, w, y, out, rows, tokens, heads, dim, kind, eps, s, x_f32] = a;
  const RowReduce r = row_reduce(ctx.info, rec.tuning(), dim);
  const gpu::Pipeline& p = ctx.pipelines->get(variant("rmsnorm", s, x_f32 ? "_x32" : "") + r.suffix, {r.wg});
  RmsnormPush push{in, out, rows * heads, tokens, heads, dim, kind == NormKind::zero_centered ? 1u : 0u, eps};
  const gpu::Grid g = gpu::grid_for(uint64_t(rows) * heads);
  const bool in_place = &x == &y;
  const bool texel = p.texel_bindings != 0;
  rec.dispatch(p,
               {{&x, gpu::Access::read, texel ? texel_format(x_f32 ? Storage::f32 : s) : VK_FORMAT_UNDEFINED},
                {&w, gpu::Access::read, texel ? VK_FORMAT_R32_SFLOAT : VK_FORMAT_UNDEFINED},
                {&y, in_place ? gpu::Access::read_write : gpu::Access::write}},
               push, g.x, g.y, 1, heads == 1 ? "rmsnorm" : "rmsnorm.heads");
}

}  // namespace vkgate::ops
