#include "gpu/memory.hpp"

#include <algorithm>

#include "gpu/context_impl.hpp"

namespace vkgate::gpu {

namespace {
constexpr VkDeviceSize kDefaultBlock = 64ull << 20;

// Rounded up to MiB (KiB below 1 MiB), without overflowing near 2^64.
std::string mib(VkDeviceSize b) {
  if (b < (1u << 20)) return std::to_string((b >> 10) + ((b & 1023) != 0)) + " KiB";
  return std::to_string((b >> 20) + ((b & ((1u << 20) - 1)) != 0)) + " MiB";
}
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
  // Under a memory limit, blocks of an eighth of it (at least 1 MiB), so that
  // one memory kind cannot take the whole limit with a block of free space.
  if (ctx.memory_limit)
    block_size_ = std::min<VkDeviceSize>(block_size_, std::max<VkDeviceSize>(ctx.memory_limit / 8, 1u << 20));
  heap_used_.assign(ctx.memory_props.memoryHeapCount, 0);
}

Allocator::~Allocator() {
  for (Block& b : blocks_) {  // trimmed slots hold null handles
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

size_t Allocator::new_block(VkDeviceSize bytes, MemoryKind kind, const std::string& name, bool dedicated) {
  ctx_.check_not_lost("allocating '" + name + "'");
  if (std::max(bytes, block_size_) > ctx_.info.max_memory_allocation_size && bytes > ctx_.info.max_memory_allocation_size)
    throw Error(ErrorCode::unsupported, "allocating '" + name + "' (" + mib(bytes) +
                                            "): larger than the device's maxMemoryAllocationSize (" +
                                            mib(ctx_.info.max_memory_allocation_size) + ")");
  try {
    return try_new_block(bytes, kind, name, dedicated);
  } catch (const Error& e) {
    // Out of memory: give back the blocks no tensor uses (they may be of
    // another kind than the one needed now) and try once more.
    if (e.code() != ErrorCode::out_of_memory || !trim()) throw;
  }
  return try_new_block(bytes, kind, name, dedicated);
}

size_t Allocator::try_new_block(VkDeviceSize bytes, MemoryKind kind, const std::string& name, bool dedicated) {
  VkDeviceSize size = dedicated ? bytes : std::min(std::max(bytes, block_size_), ctx_.info.max_memory_allocation_size);
  if (ctx_.memory_limit && allocated_ + bytes > ctx_.memory_limit)
    throw Error(ErrorCode::out_of_memory, "allocating '" + name + "' (" + mib(bytes) + "): the Context holds " +
                                              mib(allocated_) + " of device memory and its device_memory_limit is " +
                                              mib(ctx_.memory_limit));
  // A whole default block only while it fits under the limit; else just what is asked for.
  if (ctx_.memory_limit && allocated_ + size > ctx_.memory_limit) size = bytes;
  Block b;
  b.kind = kind;
  b.dedicated = dedicated;
  VkBufferCreateInfo bci{VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO};
  bci.size = size;
  // Host-visible buffers are storage buffers too: a decode step's shaders read
  // its few inputs from, and write its output to, mapped memory directly.
  // Indirect: the recorder's workgroup counts (gpu/param_arena.hpp).
  bci.usage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | VK_BUFFER_USAGE_UNIFORM_TEXEL_BUFFER_BIT |
              VK_BUFFER_USAGE_INDIRECT_BUFFER_BIT | VK_BUFFER_USAGE_TRANSFER_SRC_BIT |
              VK_BUFFER_USAGE_TRANSFER_DST_BIT;
  bci.sharingMode = VK_SHARING_MODE_EXCLUSIVE;
  const std::string doing = "allocating '" + name + "' (" + mib(bytes) + ")";
  VK_CHECK(vkCreateBuffer(ctx_.device, &bci, nullptr, &b.buffer), doing);
  try {
    VkMemoryRequirements req;
    vkGetBufferMemoryRequirements(ctx_.device, b.buffer, &req);
    VkMemoryAllocateInfo ai{VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO};
    ai.allocationSize = req.size;
    ai.memoryTypeIndex = memory_type(kind, req.memoryTypeBits, name);
    b.heap = ctx_.memory_props.memoryTypes[ai.memoryTypeIndex].heapIndex;
    const VkDeviceSize heap_size = ctx_.memory_props.memoryHeaps[b.heap].size;
    if (heap_used_[b.heap] + req.size > heap_size)
      throw Error(ErrorCode::out_of_memory, doing + ": device memory is exhausted (" + mib(heap_used_[b.heap]) +
                                                " of the " + mib(heap_size) + " heap held by this Context)");
    VkResult r = VkResult(ctx_.inject_allocate.exchange(0));
    if (r == VK_SUCCESS) r = vkAllocateMemory(ctx_.device, &ai, nullptr, &b.memory);
    check(r, "vkAllocateMemory", doing);
    VK_CHECK(vkBindBufferMemory(ctx_.device, b.buffer, b.memory, 0), doing);
    if (kind != MemoryKind::device) VK_CHECK(vkMapMemory(ctx_.device, b.memory, 0, VK_WHOLE_SIZE, 0, &b.mapped), doing);
    b.size = size;
    b.memory_size = req.size;
  } catch (...) {
    if (b.memory) vkFreeMemory(ctx_.device, b.memory, nullptr);
    vkDestroyBuffer(ctx_.device, b.buffer, nullptr);
    throw;
  }
  heap_used_[b.heap] += b.memory_size;
  allocated_ += b.memory_size;
  b.free.push_back({0, size});
  // Reuse the slot of a trimmed block: Buffers hold block indices, so slots never move.
  for (size_t i = 0; i < blocks_.size(); ++i)
    if (!blocks_[i].memory) {
      blocks_[i] = std::move(b);
      return i;
    }
  blocks_.push_back(std::move(b));
  return blocks_.size() - 1;
}

void Allocator::free_block(Block& b) {
  vkDestroyBuffer(ctx_.device, b.buffer, nullptr);
  vkFreeMemory(ctx_.device, b.memory, nullptr);
  heap_used_[b.heap] -= b.memory_size;
  allocated_ -= b.memory_size;
  b = Block{};  // an empty slot: no memory, no free ranges
}

bool Allocator::trim() {
  bool any = false;
  for (Block& b : blocks_) {
    if (!b.memory || b.free.size() != 1 || b.free[0].offset != 0 || b.free[0].size != b.size) continue;
    free_block(b);
    any = true;
  }
  return any;
}

Buffer Allocator::allocate(VkDeviceSize bytes, MemoryKind kind, const std::string& name) {
  if (bytes == 0) bytes = 4;  // empty tensors still need a bindable range
  VkDeviceSize largest_heap = 0;
  for (uint32_t i = 0; i < ctx_.memory_props.memoryHeapCount; ++i)
    largest_heap = std::max(largest_heap, ctx_.memory_props.memoryHeaps[i].size);
  if (bytes > largest_heap || (ctx_.memory_limit && bytes > ctx_.memory_limit))
    throw Error(ErrorCode::out_of_memory,
                "allocating '" + name + "' (" + mib(bytes) + "): more than the device has (" +
                    (ctx_.memory_limit && ctx_.memory_limit < largest_heap
                         ? "the Context's device_memory_limit is " + mib(ctx_.memory_limit)
                         : "its largest memory heap is " + mib(largest_heap)) +
                    ")");
  if (kind == MemoryKind::device && bytes > ctx_.info.max_storage_buffer_range)
    throw Error(ErrorCode::unsupported, "allocating '" + name + "' (" + mib(bytes) +
                                            "): larger than the device's maxStorageBufferRange (" +
                                            mib(ctx_.info.max_storage_buffer_range) + ")");
  // Under GPU-assisted validation every range is a VkBuffer of its own, of
  // exactly its size: the layer bounds-checks shader accesses against the
  // VkBuffer's size, so inside a shared block an overrun would go unseen.
  const bool dedicated = ctx_.gpu_assisted;
  // Texel-buffer views (the CPU-driver kernels) need their own alignment too;
  // both are powers of two.
  const VkDeviceSize align = std::max<VkDeviceSize>(
      {ctx_.info.min_storage_buffer_offset_alignment, ctx_.info.min_texel_buffer_offset_alignment, 16});
  const VkDeviceSize reserved = dedicated ? align_up(bytes, 4) : align_up(bytes, align);
  std::lock_guard<std::mutex> lock(mutex_);
  size_t bi = blocks_.size();
  size_t ri = 0;
  for (size_t i = 0; i < blocks_.size() && bi == blocks_.size() && !dedicated; ++i) {
    if (blocks_[i].kind != kind || blocks_[i].dedicated) continue;
    for (size_t r = 0; r < blocks_[i].free.size(); ++r)
      if (blocks_[i].free[r].size >= reserved) {
        bi = i;
        ri = r;
        break;
      }
  }
  if (bi == blocks_.size()) {
    bi = new_block(reserved, kind, name, dedicated);
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
  if (blocks_[block].dedicated) {  // its only range: the block goes with it
    free_block(blocks_[block]);
    in_use_ -= size;
    return;
  }
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

VkDeviceSize Allocator::bytes_allocated() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return allocated_;
}

size_t Allocator::block_count() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return size_t(std::count_if(blocks_.begin(), blocks_.end(), [](const Block& b) { return b.memory != VK_NULL_HANDLE; }));
}

}  // namespace vkgate::gpu
