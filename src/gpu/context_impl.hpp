// Internal: what a Context holds. Only the library and its tests see this.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "gpu/tuning.hpp"
#include "gpu/vk.hpp"
#include "vkgate/context.hpp"

namespace vkgate::gpu {
class Allocator;
class PipelineCache;

// The environment, read by the Context only (context_env.cpp).
// True when the variable is set to something other than "" or "0".
bool env_flag(const char* name);
// The VKGATE_* kernel switches as one value, over `device`'s defaults.
Tuning tuning_from_environment(const DeviceInfo& device);
}  // namespace vkgate::gpu

namespace vkgate {

namespace gpu {
// How Context::Impl::submit_and_wait waits: asleep in vkWaitForFences for
// `sleep_ns`, then polling the fence for up to `spin_ns`, then asleep until
// it is signaled. A thread woken by the driver starts late (llama.cpp
// measured a few percent of a decode step on NVIDIA, its PR 12630); one
// already polling sees the fence at once. Both 0: asleep throughout.
struct FenceWait {
  uint64_t sleep_ns = 0, spin_ns = 0;
};
}  // namespace gpu

struct Context::Impl {
  VkInstance instance = VK_NULL_HANDLE;
  VkDebugUtilsMessengerEXT messenger = VK_NULL_HANDLE;
  VkPhysicalDevice physical = VK_NULL_HANDLE;
  VkDevice device = VK_NULL_HANDLE;
  VkQueue queue = VK_NULL_HANDLE;
  uint32_t queue_family = 0;
  DeviceInfo info;
  // The kernel switches, read from the environment when the Context was made;
  // plans copy it when they are made (gpu/tuning.hpp).
  gpu::Tuning tuning;
  VkPhysicalDeviceMemoryProperties memory_props{};
  bool validation = false;
  bool gpu_assisted = false;
  // VKGATE_PIPELINE_STATS=1 on a device with VK_KHR_pipeline_executable_properties:
  // each pipeline's compiler statistics (registers, spills, ...) go to stderr.
  bool pipeline_stats = false;
  uint64_t memory_limit = 0;  // ContextOptions::device_memory_limit
  std::function<void(const std::string&)> on_message;
  std::function<void(const Progress&)> on_progress;  // ContextOptions::on_progress
  std::atomic<bool> lost{false};  // a call returned VK_ERROR_DEVICE_LOST
  // Messages that arrive while vkCreateInstance runs are held back: when it
  // fails (no driver) the Error says why in one line, without the loader's chatter.
  bool creating_instance = false;
  std::vector<std::string> held_messages;

  // Fault injection for tests: a nonzero VkResult is returned once, instead of
  // the real result, by the next vkAllocateMemory (inject_allocate) or the
  // next fence wait after a submission (inject_wait; the real wait runs first,
  // so the device stays consistent).
  std::atomic<int32_t> inject_allocate{0}, inject_wait{0};

  std::unique_ptr<gpu::Allocator> allocator;
  std::unique_ptr<gpu::PipelineCache> pipelines;

  std::mutex queue_mutex;  // vkQueueSubmit needs external synchronisation

  std::mutex messages_mutex;
  std::vector<std::string> messages;
  std::atomic<uint64_t> message_count{0};

  // Submits and waits; a lost device sets `lost` and throws Error(device_lost),
  // and once lost every call throws at once.
  void submit_and_wait(VkCommandBuffer cmd, VkFence fence, const char* doing) { submit_and_wait({&cmd, 1}, fence, doing); }
  // Several command buffers in one submission, in order.
  void submit_and_wait(std::span<const VkCommandBuffer> cmds, VkFence fence, const char* doing,
                       const gpu::FenceWait& wait = {});
  // Throws Error(device_lost) if the device was lost earlier.
  void check_not_lost(const std::string& doing) const;
  // Counts, logs and forwards one message (the debug messenger's callback body).
  void record_message(std::string text);

  ~Impl();
};

namespace gpu {
// One task's reports to ContextOptions::on_progress (nothing without one):
// advance() as the work goes, the elapsed time filled in.
class ProgressReport {
 public:
  ProgressReport(const Context::Impl& ctx, Progress::Task task, uint64_t total)
      : sink_(ctx.on_progress), start_(std::chrono::steady_clock::now()) {
    p_.task = task;
    p_.total = total;
  }
  void advance(uint64_t done, uint64_t bytes = 0) {
    if (!sink_) return;
    p_.done = done;
    p_.bytes = bytes;
    p_.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    sink_(p_);
  }

 private:
  const std::function<void(const Progress&)>& sink_;
  std::chrono::steady_clock::time_point start_;
  Progress p_;
};
}  // namespace gpu

}  // namespace vkgate
