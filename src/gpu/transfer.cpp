#include "gpu/transfer.hpp"

#include <cstring>

#include "gpu/context_impl.hpp"
#include "gpu/recorder.hpp"

namespace vkgate::gpu {

void upload(Context::Impl& ctx, const Buffer& dst, const void* data, size_t bytes) {
  if (bytes == 0) return;
  Buffer staging = ctx.allocator->allocate(bytes, MemoryKind::upload, "staging for '" + dst.name() + "'");
  std::memcpy(staging.mapped(), data, bytes);
  Recorder rec(ctx);
  rec.begin();
  rec.copy(staging, dst, bytes);
  rec.end();
  rec.submit("uploading '" + dst.name() + "'");
}

void download(Context::Impl& ctx, const Buffer& src, void* data, size_t bytes) {
  if (bytes == 0) return;
  Buffer staging = ctx.allocator->allocate(bytes, MemoryKind::readback, "readback of '" + src.name() + "'");
  Recorder rec(ctx);
  rec.begin();
  rec.copy(src, staging, bytes);
  rec.end();
  rec.submit("downloading '" + src.name() + "'");
  std::memcpy(data, staging.mapped(), bytes);
}

}  // namespace vkgate::gpu
