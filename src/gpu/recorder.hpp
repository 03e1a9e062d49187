// Internal: records dispatches and copies into one command buffer that can be
// submitted many times. It remembers each buffer's last access and inserts a
// barrier exactly where a hazard exists:
//   read after write   → make the write available and visible to the reader
//   write after read   → execution dependency on the readers
//   write after write  → make the first write available before the second
// Nothing is emitted between independent dispatches.
//
// Thread safety: a Recorder is used by one thread at a time.
#pragma once

#include <initializer_list>
#include <string>
#include <unordered_map>
#include <vector>

#include "gpu/memory.hpp"
#include "gpu/pipeline.hpp"
#include "gpu/vk.hpp"

namespace vkgate::gpu {

enum class Access { read, write, read_write };

struct Binding {
  const Buffer* buffer;
  Access access;
  // For a pipeline's uniform texel buffer binding: the format of its texels
  // (the recorder makes a VkBufferView over the whole Buffer).
  VkFormat texel_format = VK_FORMAT_UNDEFINED;
};

struct DispatchTiming {
  std::string label;
  double microseconds;
};

class Recorder {
 public:
  explicit Recorder(Context::Impl& ctx);
  ~Recorder();
  Recorder(const Recorder&) = delete;
  Recorder& operator=(const Recorder&) = delete;

  // Starts (re)recording; earlier contents and descriptor sets are dropped.
  void begin();
  // Bindings go to bindings 0..n−1 in order; `push` must hold the pipeline's push_bytes.
  void dispatch(const Pipeline& p, std::initializer_list<Binding> bindings, const void* push, uint32_t groups_x,
                uint32_t groups_y = 1, uint32_t groups_z = 1, std::string label = {});
  void copy(const Buffer& src, const Buffer& dst, VkDeviceSize bytes);
  // Several regions in one command; offsets are relative to each Buffer's start.
  void copy(const Buffer& src, const Buffer& dst, std::vector<VkBufferCopy> regions);
  void fill(const Buffer& dst, uint32_t word);  // every 32-bit word of dst
  // Closes a timed span named `label` covering the commands since the last
  // dispatch or mark (dispatches close their own spans).
  void mark(std::string label);
  // Ends recording; writes to host-visible buffers are made visible to the host.
  void end();

  // Submits and waits. May be called many times per recording.
  void submit(const std::string& doing);

  // GPU time of each dispatch of the last submit (empty without timestamp support).
  std::vector<DispatchTiming> timings() const;

  size_t barrier_count() const { return barriers_; }

  // Only for the test that proves the validation layer catches a missing barrier.
  void disable_hazard_tracking_for_test() { tracking_ = false; }

 private:
  struct State {
    VkPipelineStageFlags write_stage = 0;  // last write not yet made visible everywhere
    VkAccessFlags write_access = 0;
    VkPipelineStageFlags visible_stages = 0;  // stages/accesses the last write is visible to
    VkAccessFlags visible_access = 0;
    VkPipelineStageFlags read_stages = 0;  // reads since the last write
  };
  struct Use {
    const Buffer* buffer;
    VkPipelineStageFlags stage;
    VkAccessFlags access;
    bool reads, writes;
  };
  void sync(std::initializer_list<Use> uses);
  void sync(const std::vector<Use>& uses);
  VkDescriptorSet allocate_set(VkDescriptorSetLayout layout);
  void timestamp();

  Context::Impl& ctx_;
  VkCommandPool pool_ = VK_NULL_HANDLE;
  VkCommandBuffer cmd_ = VK_NULL_HANDLE;
  VkFence fence_ = VK_NULL_HANDLE;
  VkQueryPool queries_ = VK_NULL_HANDLE;
  uint32_t query_capacity_ = 0;
  uint32_t queries_used_ = 0;
  std::vector<VkDescriptorPool> descriptor_pools_;
  std::vector<VkBufferView> views_;  // texel buffer views of this recording
  size_t pool_index_ = 0;     // descriptor pool sets come from now
  uint32_t sets_in_pool_ = 0;
  std::unordered_map<uint64_t, State> states_;
  std::unordered_map<uint64_t, const Buffer*> host_visible_written_;
  std::vector<std::string> labels_;
  size_t barriers_ = 0;
  bool tracking_ = true;
  bool recording_ = false;
  bool recorded_ = false;
};

// Splits a 1-D count of workgroups into an (x, y) grid within the 65535 limit.
struct Grid {
  uint32_t x, y;
};
Grid grid_for(uint64_t groups);

}  // namespace vkgate::gpu
