#include "gpu/context_impl.hpp"
#include "gpu/pipeline.hpp"
#include "ops/attention.hpp"

namespace vkgate::ops {

namespace {
struct SoftmaxPush {
  uint32_t rows, keys, tokens, heads, past, causal, has_mask;
  float scale;
  uint32_t mask_tokens, mask_first, ld;
};
}  // namespace

void softmax(Context::Impl& ctx, Recorder& rec, const SoftmaxArgs& a) {
  auto [scores, batch, heads, tokens, keys, causal, scale, mask, first, total, ld] = a;
  if (total == 0) total = tokens;
  if (ld == 0) ld = keys;
  if (ld < keys) throw Error(ErrorCode::invalid_argument, "softmax: rows of " + std::to_string(keys) +
                                                              " keys cannot be " + std::to_string(ld) + " apart");
  const RowReduce r = row_reduce(ctx.info, rec.tuning(), keys);
  // Whole vec4s per row (the CPU variant only): every row and mask row starts
  // at a multiple of 4. Decided by the stride, not the keys, so a plan whose
  // keys grow keeps its pipeline.
  const bool vec4 = r.suffix == std::string("_sg") && ld % 4 == 0;
  const gpu::Pipeline& p = vec4 ? ctx.pipelines->get("softmax_sg4", {r.wg, mask ? 1u : 0u})
                                 : ctx.pipelines->get(std::string("softmax") + r.suffix, {r.wg});
  const uint32_t rows = batch * heads * tokens;
  SoftmaxPush push{rows,  keys, tokens, heads, keys - total + first, causal ? 1u : 0u, mask ? 1u : 0u,
                   scale, total, first, ld};
  const gpu::Grid g = gpu::grid_for(rows);
  // The TEXEL variant reads the scores through binding 2 (a texel view of the
  // same buffer); the others ignore that binding.
  const VkFormat f = !p.texel_bindings ? VK_FORMAT_UNDEFINED
                     : vec4               ? VK_FORMAT_R32G32B32A32_SFLOAT
                                          : VK_FORMAT_R32_SFLOAT;
  rec.dispatch(p,
               {{&scores, gpu::Access::read_write}, {mask ? mask : &scores, gpu::Access::read, f},
                {&scores, gpu::Access::read, f}},
               push, g.x, g.y, 1, "softmax");
}

}  // namespace vkgate::ops
