#include "gpu/param_arena.hpp"

#include <algorithm>
#include <cstring>

#include "gpu/context_impl.hpp"
#include "gpu/memory.hpp"
#include "gpu/pipeline.hpp"

namespace vkgate::gpu {

namespace {
// 64 KiB pages: a decoder layer records about fifteen dispatches, so a page
// holds several layers' parameters even with 256-byte alignment.
constexpr VkDeviceSize kPageBytes = 64 << 10;
constexpr VkDeviceSize kCountBytes = 16;  // three uint32 counts, 16-byte aligned
}  // namespace

ParamArena::ParamArena(Context::Impl& ctx)
    : ctx_(ctx), align_(std::max<VkDeviceSize>(ctx.info.min_storage_buffer_offset_alignment, 16)) {}

ParamArena::~ParamArena() {
  for (Page& p : pages_)
    if (p.pool) vkDestroyDescriptorPool(ctx_.device, p.pool, nullptr);
}

void ParamArena::reset() {
  page_ = 0;
  used_ = 0;
  pages_used_ = 0;
}

void ParamArena::add_page() {
  Page p;
  p.host = ctx_.allocator->allocate(kPageBytes, MemoryKind::upload, "dispatch parameters (staging)");
  p.device = ctx_.allocator->allocate(kPageBytes, MemoryKind::device, "dispatch parameters");
  const VkDescriptorPoolSize size{VK_DESCRIPTOR_TYPE_STORAGE_BUFFER_DYNAMIC, 1};
  VkDescriptorPoolCreateInfo ci{VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO};
  ci.maxSets = 1;
  ci.poolSizeCount = 1;
  ci.pPoolSizes = &size;
  VK_CHECK(vkCreateDescriptorPool(ctx_.device, &ci, nullptr, &p.pool), "creating a parameter descriptor pool");
  pages_.push_back(std::move(p));  // owned from here: the destructor frees the pool
  Page& page = pages_.back();
  const VkDescriptorSetLayout layout = ctx_.pipelines->params_layout();
  VkDescriptorSetAllocateInfo ai{VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO};
  ai.descriptorPool = page.pool;
  ai.descriptorSetCount = 1;
  ai.pSetLayouts = &layout;
  VK_CHECK(vkAllocateDescriptorSets(ctx_.device, &ai, &page.set), "allocating the parameter descriptor set");
  const VkDescriptorBufferInfo info{page.device.handle(), page.device.offset(), kMaxParamBytes};
  VkWriteDescriptorSet w{VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET};
  w.dstSet = page.set;
  w.descriptorCount = 1;
  w.descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER_DYNAMIC;
  w.pBufferInfo = &info;
  vkUpdateDescriptorSets(ctx_.device, 1, &w, 0, nullptr);
}

ParamArena::Slot ParamArena::allocate() {
  // A block's descriptor covers kMaxParamBytes from its offset: keep that inside the page.
  const VkDeviceSize need = align_up(kMaxParamBytes, align_) + kCountBytes;
  VkDeviceSize at = align_up(used_, align_);
  if (at + need > kPageBytes) {
    ++page_;
    at = 0;
  }
  if (page_ == pages_.size()) add_page();
  used_ = at + need;
  pages_used_ = page_ + 1;
  return {page_, uint32_t(at), uint32_t(at + align_up(kMaxParamBytes, align_))};
}

void ParamArena::write(const Slot& s, std::span<const std::byte> params, uint32_t gx, uint32_t gy, uint32_t gz) {
  auto* base = static_cast<std::byte*>(pages_[s.page].host.mapped());
  std::memcpy(base + s.params, params.data(), params.size());
  const uint32_t counts[3] = {gx, gy, gz};
  std::memcpy(base + s.counts, counts, sizeof counts);
}

void ParamArena::record_upload(VkCommandBuffer cmd) const {
  if (pages_used_ == 0) return;
  // The previous submission read these pages (parameters, indirect counts):
  // the copy waits for it. Then the copy is made visible to this one.
  constexpr VkPipelineStageFlags readers =
      VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_DRAW_INDIRECT_BIT;
  vkCmdPipelineBarrier(cmd, readers, VK_PIPELINE_STAGE_TRANSFER_BIT, 0, 0, nullptr, 0, nullptr, 0, nullptr);
  std::vector<VkBufferMemoryBarrier> visible;
  for (uint32_t i = 0; i < pages_used_; ++i) {
    const Page& p = pages_[i];
    const VkDeviceSize bytes = i + 1 == pages_used_ ? used_ : kPageBytes;
    const VkBufferCopy region{p.host.offset(), p.device.offset(), bytes};
    vkCmdCopyBuffer(cmd, p.host.handle(), p.device.handle(), 1, &region);
    VkBufferMemoryBarrier b{VK_STRUCTURE_TYPE_BUFFER_MEMORY_BARRIER};
    b.srcAccessMask = VK_ACCESS_TRANSFER_WRITE_BIT;
    b.dstAccessMask = VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_INDIRECT_COMMAND_READ_BIT;
    b.srcQueueFamilyIndex = b.dstQueueFamilyIndex = VK_QUEUE_FAMILY_IGNORED;
    b.buffer = p.device.handle();
    b.offset = p.device.offset();
    b.size = bytes;
    visible.push_back(b);
  }
  vkCmdPipelineBarrier(cmd, VK_PIPELINE_STAGE_TRANSFER_BIT, readers, 0, 0, nullptr, uint32_t(visible.size()),
                       visible.data(), 0, nullptr);
}

}  // namespace vkgate::gpu
