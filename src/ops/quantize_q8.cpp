#include <algorithm>

#include "gpu/context_impl.hpp"
#include "gpu/pipeline.hpp"
#include "ops/qmatmul_dot.hpp"

namespace vkgate::ops {

namespace {
// Mirrors Push in shaders/quantize_q8.comp.
struct QuantizeQ8Push {
  uint32_t M, K, ldx, d_at;
};
}  // namespace

uint32_t q8_scales_at(uint32_t M, uint32_t K) { return (M * (K / 4) + 3) / 4 * 4; }

size_t q8_bytes(uint32_t M, uint32_t K) {
  const size_t scales = (size_t(M) * (K / 32) + 3) / 4 * 4;
  return (size_t(q8_scales_at(M, K)) + scales) * 4;
}

void quantize_q8(Context::Impl& ctx, Recorder& rec, const QuantizeQ8Args& a) {
  const uint32_t ldx = a.ldx ? a.ldx : a.K;
  if (a.K == 0 || a.K % 32 != 0 || a.M == 0 || ldx < a.K)
    throw Error(ErrorCode::invalid_argument, "quantize_q8: " + std::to_string(a.M) + " rows of " +
                                                 std::to_string(a.K) + " elements " + std::to_string(ldx) +
                                                 " apart: K must be a positive multiple of 32, within the stride");
  if (a.q.size() < q8_bytes(a.M, a.K))
    throw Error(ErrorCode::invalid_argument, "quantize_q8: buffer '" + a.q.name() + "' holds " +
                                                 std::to_string(a.q.size()) + " bytes, " +
                                                 std::to_string(q8_bytes(a.M, a.K)) + " needed");
  const QuantizeQ8Push push{a.M, a.K, ldx, q8_scales_at(a.M, a.K)};
  const uint64_t blocks = uint64_t(a.M) * (a.K / 32);
  // CPU drivers: 8-lane workgroups reading X as RGBA texels (f32, f16; rows 4-aligned).
  const bool texel = cpu_kernels(ctx.info) && a.s != Storage::bf16 && ldx % 4 == 0;
  const uint32_t wg = cpu_kernels(ctx.info) ? 8 : 64;
  const gpu::Grid g = gpu::grid_for((blocks + wg - 1) / wg);
  const VkFormat x4 = texel4_format(a.s);
  rec.dispatch(ctx.pipelines->get(variant(texel ? "quantize_q8_cpu" : "quantize_q8", a.s), {wg}),
               {{&a.x, gpu::Access::read, texel ? x4 : VK_FORMAT_UNDEFINED}, {&a.q, gpu::Access::write}}, push, g.x,
               g.y, 1, "quantize_q8");
}

}  // namespace vkgate::ops
