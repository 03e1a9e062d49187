// Internal: device memory. Tensors are ranges carved out of a few large
// VkDeviceMemory blocks (each bound to one VkBuffer), so a block with dozens
// of tensors costs a handful of vkAllocateMemory calls.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "gpu/vk.hpp"
#include "vkgate/context.hpp"

namespace vkgate::gpu {

inline VkDeviceSize align_up(VkDeviceSize v, VkDeviceSize a) { return (v + a - 1) / a * a; }

enum class MemoryKind {
  device,    // DEVICE_LOCAL: tensors the shaders read and write
  upload,    // HOST_VISIBLE, written by the host, read by transfers
  readback,  // HOST_VISIBLE (cached if possible), written by transfers, read by the host
};

class Allocator;

// A range of a block. Move-only; returns its range to the allocator when destroyed.
class Buffer {
 public:
  Buffer() = default;
  ~Buffer();
  Buffer(Buffer&& o) noexcept { *this = std::move(o); }
  Buffer& operator=(Buffer&& o) noexcept;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  VkBuffer handle() const { return handle_; }
  VkDeviceSize offset() const { return offset_; }
  VkDeviceSize size() const { return size_; }
  uint64_t id() const { return id_; }  // unique per live range; keys the recorder's hazard tracking
  bool valid() const { return handle_ != VK_NULL_HANDLE; }
  // Host pointer for upload/readback buffers, nullptr for device buffers.
  void* mapped() const { return mapped_; }
  const std::string& name() const { return name_; }

 private:
  friend class Allocator;
  Allocator* owner_ = nullptr;
  VkBuffer handle_ = VK_NULL_HANDLE;
  VkDeviceSize offset_ = 0, size_ = 0, reserved_ = 0;
  size_t block_ = 0;
  uint64_t id_ = 0;
  void* mapped_ = nullptr;
  std::string name_;
};

class Allocator {
 public:
  explicit Allocator(Context::Impl& ctx);
  ~Allocator();

  // `name` is used in error messages ("allocating 'q_proj.weight' ...").
  // Refuses, with an Error and before any Vulkan call that could be invalid:
  // a request larger than the device's memory heap or the Context's
  // device_memory_limit (out_of_memory), a device buffer larger than
  // maxStorageBufferRange or a block larger than maxMemoryAllocationSize
  // (unsupported). VK_ERROR_OUT_OF_DEVICE_MEMORY from the driver is
  // Error(out_of_memory). After any of these the allocator is unchanged.
  Buffer allocate(VkDeviceSize bytes, MemoryKind kind, const std::string& name);

  VkDeviceSize bytes_in_use() const;
  VkDeviceSize bytes_allocated() const;  // all blocks
  size_t block_count() const;

 private:
  friend class Buffer;
  struct Range {
    VkDeviceSize offset, size;
  };
  struct Block {
    VkDeviceMemory memory = VK_NULL_HANDLE;
    VkBuffer buffer = VK_NULL_HANDLE;
    VkDeviceSize size = 0;         // of the VkBuffer (0: a trimmed, empty slot)
    VkDeviceSize memory_size = 0;  // of the VkDeviceMemory
    uint32_t heap = 0;
    MemoryKind kind = MemoryKind::device;
    bool dedicated = false;  // one range, exactly sized (GPU-assisted validation)
    void* mapped = nullptr;
    std::vector<Range> free;  // sorted by offset, coalesced
  };
  void release(size_t block, VkDeviceSize offset, VkDeviceSize size);
  // A new block for `bytes`; when memory runs out, trims and tries once more.
  size_t new_block(VkDeviceSize bytes, MemoryKind kind, const std::string& name, bool dedicated);
  size_t try_new_block(VkDeviceSize bytes, MemoryKind kind, const std::string& name, bool dedicated);
  void free_block(Block& b);  // with mutex_ held
  // Frees every block no live range uses; true if any was freed. Called with mutex_ held.
  bool trim();
  uint32_t memory_type(MemoryKind kind, uint32_t allowed, const std::string& name) const;

  Context::Impl& ctx_;
  VkDeviceSize block_size_;
  mutable std::mutex mutex_;
  std::vector<Block> blocks_;
  std::vector<VkDeviceSize> heap_used_;  // bytes of blocks per memory heap
  VkDeviceSize allocated_ = 0;
  VkDeviceSize in_use_ = 0;
  uint64_t next_id_ = 1;
};

}  // namespace vkgate::gpu
