#include "gpu/context_impl.hpp"
#include "gpu/pipeline.hpp"
#include "ops/ops.hpp"
#include "vkgate/error.hpp"

namespace vkgate::ops {

void top_k(Context::Impl& ctx, Recorder& rec, const Buffer& x, uint32_t rows, uint32_t n, uint32_t ld, uint32_t k,
           const Buffer& out) {
  if (k < 1 || k > std::min(n, kTopKMax) || rows < 1 || rows > 65535 || ld < n)
    throw Error(ErrorCode::invalid_argument, "top_k: k " + std::to_string(k) + " of rows " + std::to_string(rows) +
                                                 " × " + std::to_string(n) + " (k in [1, min(n, " +
                                                 std::to_string(kTopKMax) + ")], at most 65535 rows)");
  struct Push {
    uint32_t n, k, ld, out_ld;
  } push{n, k, ld, k + 1};
  rec.dispatch(ctx.pipelines->get("topk", {kTopKMax}), {{&x, gpu::Access::read}, {&out, gpu::Access::write}}, push,
               rows, 1, 1, "top_k");
}

}  // namespace vkgate::ops
