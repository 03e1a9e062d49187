#include "gpu/memory.hpp"

#include <algorithm>

#include "gpu/context_impl.hpp"

namespace vkgate::gpu {

namespace {
constexpr VkDeviceSize kDefaultBlock = 64ull << 20;

VkDeviceSize align_up(VkDeviceSize v, VkDeviceSize a) { return (v + a - 1) / a * a; }

std::string mib(VkDeviceSize b) { return std::to_string((b + (1 << 20) - 1) >> 20) + " MiB"; }
}  // namespace

Buffer::~Buffer() {
  if (owner_) owner_->release(block_, offset_, reserved_);
}

Buffer& Buffer::operator=(Buffer&& o) noexcept {
  if (this != &o) {
    if (owner_) owner_->release(block_, offset_, reserved_);
    owner_ = o.owner_;
    handle_ = o.handle_;
    offset_ = o.offset_;
    size_ = o.size_;
    reserved_ = o.reserved_;
    block_ = o.block_;
    id_ = o.id_;
    mapped_ = o.mapped_;
    name_ = std::move(o.name_);
    o.owner_ = nullptr;
    o.handle_ = VK_NULL_HANDLE;
    o.mapped_ = nullptr;
  }
  return *this;
}

Allocator::Allocator(Context::Impl& ctx) : ctx_(ctx) {
  block_size_ = std::min<VkDeviceSize>(kDefaultBlock, ctx.info.max_memory_allocation_size);
}

Allocator::~Allocator() {
  for (Block& b : blocks_) {
    if (b.buffer) vkDestroyBuffer(ctx_.device, b.buffer, nullptr);
    if (b.memory) vkFreeMemory(ctx_.device, b.memory, nullptr);
  }
}

uint32_t Allocator::memory_type(MemoryKind kind, uint32_t allowed, const std::string& name) const {
  const auto& mp = ctx_.memory_props;
  auto find = [&](VkMemoryPropertyFlags want) -> int {
    for (uint32_t i = 0; i < mp.memoryTypeCount; ++i)
      if ((allowed & (1u << i)) && (mp.memoryTypes[i].propertyFlags & want) == want) return int(i);
    return -1;
  };
  int t = -1;
  switch (kind) {
    case MemoryKind::device: t = find(VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT); break;
    case MemoryKind::upload:
      t = find(VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT);
      break;
    case MemoryKind::readback:
      t = find(VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT |
               VK_MEMORY_PROPERTY_HOST_CACHED_BIT);
      if (t < 0) t = find(VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT);
      break;
  }
  if (t < 0) throw Error(ErrorCode::unsupported, "allocating '" + name + "': the device has no suitable memory type");
  return uint32_t(t);
}

size_t Allocator::new_block(VkDeviceSize bytes, MemoryKind kind, const std::string& name) {
  const VkDeviceSize size = std::max(bytes, block_size_);
  if (size > ctx_.info.max_memory_allocation_size)
    throw Error(ErrorCode::out_of_memory, "allocating '" + name + "' (" + mib(bytes) +
                                              "): larger than the device's maxMemoryAllocationSize (" +
                                              mib(ctx_.info.max_memory_allocation_size) + ")");
  Block b;
  b.size = size;
  b.kind = kind;
  VkBufferCreateInfo bci{VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO};
  bci.size = size;
  bci.usage = kind == MemoryKind::device ? VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | VK_BUFFER_USAGE_TRANSFER_SRC_BIT |
                                               VK_BUFFER_USAGE_TRANSFER_DST_BIT
                                         : VK_BUFFER_USAGE_TRANSFER_SRC_BIT | VK_BUFFER_USAGE_TRANSFER_DST_BIT;
  bci.sharingMode = VK_SHARING_MODE_EXCLUSIVE;
  const std::string doing = "allocating '" + name + "' (" + mib(bytes) + ")";
  VK_CHECK(vkCreateBuffer(ctx_.device, &bci, nullptr, &b.buffer), doing);
  try {
    VkMemoryRequirements req;
    vkGetBufferMemoryRequirements(ctx_.device, b.buffer, &req);
    VkMemoryAllocateInfo ai{VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO};
    ai.allocationSize = req.size;
    ai.memoryTypeIndex = memory_type(kind, req.memoryTypeBits, name);
    VK_CHECK(vkAllocateMemory(ctx_.device, &ai, nullptr, &b.memory), doing);
    VK_CHECK(vkBindBufferMemory(ctx_.device, b.buffer, b.memory, 0), doing);
    if (kind != MemoryKind::device) VK_CHECK(vkMapMemory(ctx_.device, b.memory, 0, VK_WHOLE_SIZE, 0, &b.mapped), doing);
  } catch (...) {
    if (b.memory) vkFreeMemory(ctx_.device, b.memory, nullptr);
    vkDestroyBuffer(ctx_.device, b.buffer, nullptr);
    throw;
  }
  b.free.push_back({0, size});
  blocks_.push_back(std::move(b));
  return blocks_.size() - 1;
}

Buffer Allocator::allocate(VkDeviceSize bytes, MemoryKind kind, const std::string& name) {
  if (bytes == 0) bytes = 4;  // empty tensors still need a bindable range
  if (kind == MemoryKind::device && bytes > ctx_.info.max_storage_buffer_range)
    throw Error(ErrorCode::unsupported, "allocating '" + name + "' (" + mib(bytes) +
                                            "): larger than the device's maxStorageBufferRange (" +
                                            mib(ctx_.info.max_storage_buffer_range) + ")");
  const VkDeviceSize align = std::max<VkDeviceSize>(ctx_.info.min_storage_buffer_offset_alignment, 16);
  const VkDeviceSize reserved = align_up(bytes, align);
  std::lock_guard<std::mutex> lock(mutex_);
  size_t bi = blocks_.size();
  size_t ri = 0;
  for (size_t i = 0; i < blocks_.size() && bi == blocks_.size(); ++i) {
    if (blocks_[i].kind != kind) continue;
    for (size_t r = 0; r < blocks_[i].free.size(); ++r)
      if (blocks_[i].free[r].size >= reserved) {
        bi = i;
        ri = r;
        break;
      }
  }
  if (bi == blocks_.size()) {
    bi = new_block(reserved, kind, name);
    ri = 0;
  }
  Block& b = blocks_[bi];
  Range& r = b.free[ri];
  Buffer out;
  out.owner_ = this;
  out.handle_ = b.buffer;
  out.offset_ = r.offset;
  out.size_ = bytes;
  out.reserved_ = reserved;
  out.block_ = bi;
  out.id_ = next_id_++;
  out.mapped_ = b.mapped ? static_cast<char*>(b.mapped) + r.offset : nullptr;
  out.name_ = name;
  r.offset += reserved;
  r.size -= reserved;
  if (r.size == 0) b.free.erase(b.free.begin() + std::ptrdiff_t(ri));
  in_use_ += reserved;
  return out;
}

void Allocator::release(size_t block, VkDeviceSize offset, VkDeviceSize size) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto& fl = blocks_[block].free;
  auto it = std::lower_bound(fl.begin(), fl.end(), offset, [](const Range& r, VkDeviceSize o) { return r.offset < o; });
  it = fl.insert(it, Range{offset, size});
  if (it + 1 != fl.end() && it->offset + it->size == (it + 1)->offset) {
    it->size += (it + 1)->size;
    fl.erase(it + 1);
  }
  if (it != fl.begin() && (it - 1)->offset + (it - 1)->size == it->offset) {
    (it - 1)->size += it->size;
    fl.erase(it);
  }
  in_use_ -= size;
}

VkDeviceSize Allocator::bytes_in_use() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return in_use_;
}

size_t Allocator::block_count() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return blocks_.size();
}

}  // namespace vkgate::gpu
