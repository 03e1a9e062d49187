#include <algorithm>

#include "gpu/context_impl.hpp"
#include "gpu/pipeline.hpp"
#include "ops/ops.hpp"

namespace vkgate::ops {

void copy_shader(Context::Impl& ctx, Recorder& rec, const Buffer& src, const Buffer& dst, uint64_t bytes) {
  if (bytes % 16 != 0 || bytes / 16 > UINT32_MAX || bytes > src.size() || bytes > dst.size())
    throw Error(ErrorCode::invalid_argument, "copy: " + std::to_string(bytes) +
                                                 " bytes is not a multiple of 16 within both buffers");
  constexpr uint32_t kWorkgroup = 256;
  const uint32_t count = uint32_t(bytes / 16);
  // Enough groups to fill any device; each thread then strides through the rest.
  const uint32_t groups = std::clamp<uint32_t>((count + kWorkgroup - 1) / kWorkgroup, 1, 8192);
  const bool texel = cpu_kernels(ctx.info);
  rec.dispatch(ctx.pipelines->get(texel ? "copy_texel" : "copy", {kWorkgroup}),
               {{&src, gpu::Access::read, texel ? VK_FORMAT_R32G32B32A32_SFLOAT : VK_FORMAT_UNDEFINED},
                {&dst, gpu::Access::write}},
               count, groups, 1, 1, "copy.shader");
}

}  // namespace vkgate::ops
