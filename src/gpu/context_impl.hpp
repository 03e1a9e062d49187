// Internal: what a Context holds. Only the library and its tests see this.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "gpu/vk.hpp"
#include "vkgate/context.hpp"

namespace vkgate::gpu {
class Allocator;
class PipelineCache;
}  // namespace vkgate::gpu

namespace vkgate {

struct Context::Impl {
  VkInstance instance = VK_NULL_HANDLE;
  VkDebugUtilsMessengerEXT messenger = VK_NULL_HANDLE;
  VkPhysicalDevice physical = VK_NULL_HANDLE;
  VkDevice device = VK_NULL_HANDLE;
  VkQueue queue = VK_NULL_HANDLE;
  uint32_t queue_family = 0;
  DeviceInfo info;
  VkPhysicalDeviceMemoryProperties memory_props{};
  bool validation = false;

  std::unique_ptr<gpu::Allocator> allocator;
  std::unique_ptr<gpu::PipelineCache> pipelines;

  std::mutex queue_mutex;  // vkQueueSubmit needs external synchronisation

  std::mutex messages_mutex;
  std::vector<std::string> messages;
  std::atomic<uint64_t> message_count{0};

  void submit_and_wait(VkCommandBuffer cmd, VkFence fence, const char* doing);

  ~Impl();
};

}  // namespace vkgate
