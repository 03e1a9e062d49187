#include <cmath>

#include "gpu/context_impl.hpp"
#include "gpu/pipeline.hpp"
#include "ops/ops.hpp"

namespace vkgate::ops {

namespace {
struct Push {
  View in, out;
  uint32_t tokens, heads, dim, rotary, count, interleaved;
};
constexpr uint32_t kWorkgroup = 64;
}  // namespace

std::vector<float> rope_table(uint32_t tokens, uint32_t rotary, double theta, uint32_t first) {
  const uint32_t half = rotary / 2;
  std::vector<float> t(size_t(2) * tokens * half + 1);  // +1: never an empty buffer
  for (uint32_t p = 0; p < tokens; ++p)
    for (uint32_t i = 0; i < half; ++i) {
      const double angle = double(first + p) * std::pow(theta, -2.0 * i / double(rotary));
      t[size_t(p) * half + i] = float(std::cos(angle));
      t[size_t(tokens) * half + size_t(p) * half + i] = float(std::sin(angle));
    }
  return t;
}

void rope(Context::Impl& ctx, Recorder& rec, const Buffer& x, View in, const Buffer& table, const Buffer& y,
          View out, uint32_t rows, uint32_t tokens, uint32_t heads, uint32_t dim, uint32_t rotary, Storage s,
          RopeStyle style) {
  const gpu::Pipeline& p = ctx.pipelines->get(variant("rope", s), {kWorkgroup});
  const uint64_t count = uint64_t(rows) * heads * (dim - rotary / 2);
  Push push{in, out, tokens, heads, dim, rotary, uint32_t(count), style == RopeStyle::interleaved ? 1u : 0u};
  const gpu::Grid g = gpu::grid_for((count + kWorkgroup - 1) / kWorkgroup);
  const bool in_place = &x == &y;
  rec.dispatch(p, {{&x, gpu::Access::read}, {&table, gpu::Access::read}, {&y, in_place ? gpu::Access::read_write : gpu::Access::write}},
               push, g.x, g.y, 1, rotary ? "rope" : "relayout");
}

}  // namespace vkgate::ops
