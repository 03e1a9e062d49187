#include "nn/workspace.hpp"

#include <algorithm>
#include <vector>

#include "gpu/transfer.hpp"
#include "vkgate/error.hpp"

namespace vkgate::nn {

void Workspace::need(const std::string& role, size_t bytes) {
  size_t& s = sizes_[role];
  s = std::max(s, bytes);
}

void Workspace::need_zeroed(const std::string& role, size_t bytes) {
  need(role, bytes);
  zeroed_.insert(role);
}

void Workspace::allocate(Context::Impl& vk) {
  for (const auto& [role, bytes] : sizes_) {
    if (buffers_.count(role)) continue;
    const gpu::Buffer& b =
        buffers_.emplace(role, vk.allocator->allocate(bytes, gpu::MemoryKind::device, "scratch '" + role + "'"))
            .first->second;
    if (zeroed_.count(role)) {
      const std::vector<std::byte> zeros(b.size());
      gpu::upload(vk, b, zeros.data(), zeros.size());
    }
  }
}

const gpu::Buffer& Workspace::operator[](const std::string& role) const {
  const gpu::Buffer* b = find(role);
  if (!b) throw Error(ErrorCode::invalid_argument, "workspace: no scratch '" + role + "' was reserved");
  return *b;
}

const gpu::Buffer* Workspace::find(const std::string& role) const {
  const auto it = buffers_.find(role);
  return it == buffers_.end() ? nullptr : &it->second;
}

uint64_t Workspace::bytes() const {
  uint64_t n = 0;
  for (const auto& [role, b] : buffers_) n += b.size();
  return n;
}

}  // namespace vkgate::nn
