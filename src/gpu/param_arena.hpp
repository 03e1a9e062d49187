// Internal: the dispatch parameters of one recording. Each dispatch's
// parameter block (shaders/params.glsl) and workgroup counts get a slot in a
// page of host-visible memory; a prologue command buffer copies the used part
// of every page to device memory at the start of each submission, where the
// shaders read their block as a dynamic storage buffer (shaders/params.glsl)
// and vkCmdDispatchIndirect reads the counts (unless the recorder put them
// in the command buffer: Tuning::direct_dispatch). Rewriting a slot between
// submissions therefore changes what the next submission runs without
// recording the command buffer again (Recorder::Mode::update: a decode step
// whose cache grows by one position per replay).
//
// Thread safety: used by its Recorder's thread only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "gpu/memory.hpp"
#include "gpu/vk.hpp"
#include "vkgate/context.hpp"

namespace vkgate::gpu {

class ParamArena {
 public:
  // The largest parameter block a shader may declare.
  static constexpr VkDeviceSize kMaxParamBytes = 256;

  explicit ParamArena(Context::Impl& ctx);
  ~ParamArena();
  ParamArena(const ParamArena&) = delete;
  ParamArena& operator=(const ParamArena&) = delete;

  struct Slot {
    uint32_t page = 0;
    uint32_t params = 0;  // offset of the parameter block in the page (the dynamic offset)
    uint32_t counts = 0;  // offset of the three workgroup counts
  };
  // A new recording: slots are handed out from the start of the first page
  // again (pages are kept; they grow, never shrink).
  void reset();
  Slot allocate();
  // The slot's parameter block (at most kMaxParamBytes) and workgroup counts,
  // for the next submission.
  void write(const Slot& s, std::span<const std::byte> params, uint32_t gx, uint32_t gy, uint32_t gz);
  VkDescriptorSet set(const Slot& s) const { return pages_[s.page].set; }
  const Buffer& counts_buffer(const Slot& s) const { return pages_[s.page].device; }
  // Records the copies of the used pages to device memory, ordered after
  // earlier submissions' reads and before this one's.
  void record_upload(VkCommandBuffer cmd) const;

 private:
  struct Page {
    Buffer host, device;
    VkDescriptorPool pool = VK_NULL_HANDLE;
    VkDescriptorSet set = VK_NULL_HANDLE;
  };
  void add_page();

  Context::Impl& ctx_;
  VkDeviceSize align_;  // of a parameter block: minStorageBufferOffsetAlignment
  std::vector<Page> pages_;
  uint32_t page_ = 0;       // page slots come from now
  VkDeviceSize used_ = 0;   // bytes of it handed out
  uint32_t pages_used_ = 0;  // pages with slots of this recording
};

}  // namespace vkgate::gpu
