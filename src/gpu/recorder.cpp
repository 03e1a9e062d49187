#include "gpu/recorder.hpp"

#include <algorithm>
#include <chrono>
#include <cstring>

#include "gpu/context_impl.hpp"

namespace vkgate::gpu {

namespace {
constexpr uint32_t kSetsPerPool = 64;
constexpr uint32_t kMaxBindings = 12;
constexpr uint32_t kMaxDescriptors = 24;  // in one set: arrays count each element
constexpr uint32_t kTimestampsPerPool = 1024;
constexpr uint32_t kMaxTimestamps = 64 * kTimestampsPerPool;  // past this a recording's later spans go untimed
constexpr VkPipelineStageFlags kCompute = VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT;
constexpr VkPipelineStageFlags kTransfer = VK_PIPELINE_STAGE_TRANSFER_BIT;

// Bytes per texel of the view formats the kernels use.
uint32_t texel_bytes(VkFormat f) {
  switch (f) {
    case VK_FORMAT_R16_SFLOAT: return 2;
    case VK_FORMAT_R32_SFLOAT:
    case VK_FORMAT_R32_UINT: return 4;
    case VK_FORMAT_R16G16B16A16_SFLOAT: return 8;
    case VK_FORMAT_R32G32B32A32_SFLOAT:
    case VK_FORMAT_R32G32B32A32_UINT: return 16;
    default:
      throw Error(ErrorCode::invalid_argument, "texel view format " + std::to_string(int(f)) + " is not one vkgate uses");
  }
}

// A hash of a command's identity (its pipeline, buffers, regions, label):
// what an update must find again, command by command. FNV-style over 64-bit
// words, not bytes: a decode step's update hashes ~170 dispatches per token.
struct Signature {
  uint64_t value = 1469598103934665603ull;
  Signature& add(uint64_t v) {
    value = (value ^ v) * 1099511628211ull;
    value ^= value >> 29;
    return *this;
  }
  Signature& add(std::span<const std::byte> bytes) {
    size_t i = 0;
    for (uint64_t w; i + 8 <= bytes.size(); i += 8) {
      std::memcpy(&w, bytes.data() + i, 8);
      add(w);
    }
    uint64_t tail = 0;
    std::memcpy(&tail, bytes.data() + i, bytes.size() - i);
    return add(tail).add(uint64_t(bytes.size()));
  }
  Signature& add(const std::string& s) { return add(std::as_bytes(std::span(s))); }
};
}  // namespace

Grid grid_for(uint64_t groups) {
  constexpr uint64_t kMax = 65535;
  if (groups <= kMax) return {uint32_t(std::max<uint64_t>(groups, 1)), 1};
  const uint64_t y = (groups + kMax - 1) / kMax;
  if (y > kMax) throw Error(ErrorCode::invalid_argument, "dispatch of " + std::to_string(groups) + " workgroups is too large");
  return {uint32_t((groups + y - 1) / y), uint32_t(y)};
}

Recorder::Recorder(Context::Impl& ctx) : Recorder(ctx, ctx.tuning) {}

Recorder::Recorder(Context::Impl& ctx, const Tuning& tuning) : ctx_(ctx), tuning_(tuning), params_(ctx) {
  VkCommandPoolCreateInfo pci{VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO};
  pci.flags = VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT;
  pci.queueFamilyIndex = ctx.queue_family;
  VK_CHECK(vkCreateCommandPool(ctx.device, &pci, nullptr, &pool_), "creating a command pool");
  try {
    VkCommandBufferAllocateInfo ai{VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO};
    ai.commandPool = pool_;
    ai.level = VK_COMMAND_BUFFER_LEVEL_PRIMARY;
    ai.commandBufferCount = 2;
    VkCommandBuffer both[2];
    VK_CHECK(vkAllocateCommandBuffers(ctx.device, &ai, both), "allocating command buffers");
    prologue_ = both[0];
    cmd_ = both[1];
    VkFenceCreateInfo fci{VK_STRUCTURE_TYPE_FENCE_CREATE_INFO};
    VK_CHECK(vkCreateFence(ctx.device, &fci, nullptr, &fence_), "creating a fence");
    timestamps_ = ctx.info.timestamps;
  } catch (...) {
    release();
    throw;
  }
}

Recorder::~Recorder() { release(); }

void Recorder::release() {
  VkDevice dev = ctx_.device;
  for (VkDescriptorPool p : descriptor_pools_) vkDestroyDescriptorPool(dev, p, nullptr);
  descriptor_pools_.clear();
  for (VkBufferView v : views_) vkDestroyBufferView(dev, v, nullptr);
  views_.clear();
  for (VkQueryPool q : query_pools_) vkDestroyQueryPool(dev, q, nullptr);
  query_pools_.clear();
  if (fence_) vkDestroyFence(dev, fence_, nullptr);
  if (pool_) vkDestroyCommandPool(dev, pool_, nullptr);
  fence_ = VK_NULL_HANDLE;
  pool_ = VK_NULL_HANDLE;
}

void Recorder::begin(Mode mode) {
  if (mode == Mode::update) {
    if (!recorded_) throw Error(ErrorCode::invalid_argument, "recorder: nothing recorded to update");
    // Not submittable until the update is complete (end()).
    recorded_ = false;
    updating_ = true;
    next_step_ = 0;
    return;
  }
  updating_ = false;
  submitted_ = false;
  last_run_ns_ = 0;
  ++recordings_;
  steps_.clear();
  cold_.clear();
  params_.reset();
  VK_CHECK(vkResetCommandBuffer(cmd_, 0), "resetting a command buffer");
  for (VkDescriptorPool p : descriptor_pools_) vkResetDescriptorPool(ctx_.device, p, 0);
  for (VkBufferView v : views_) vkDestroyBufferView(ctx_.device, v, nullptr);
  views_.clear();
  pool_index_ = 0;
  sets_in_pool_ = descriptors_in_pool_ = 0;
  states_.clear();
  host_visible_written_.clear();
  labels_.clear();
  barriers_ = 0;
  queries_used_ = 0;
  VkCommandBufferBeginInfo bi{VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO};
  VK_CHECK(vkBeginCommandBuffer(cmd_, &bi), "beginning a command buffer");
  recording_ = true;
  recorded_ = false;
  // The buffer may be replayed, and other command buffers touch the same
  // tensors between replays: order everything before this point against it.
  VkMemoryBarrier mb{VK_STRUCTURE_TYPE_MEMORY_BARRIER};
  mb.srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_WRITE_BIT;
  mb.dstAccessMask = VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_READ_BIT |
                     VK_ACCESS_TRANSFER_WRITE_BIT;
  vkCmdPipelineBarrier(cmd_, kCompute | kTransfer, kCompute | kTransfer, 0, 1, &mb, 0, nullptr, 0, nullptr);
  timestamp();
}

void Recorder::timestamp() {
  if (!timestamps_ || queries_used_ >= kMaxTimestamps) return;
  const uint32_t pool = queries_used_ / kTimestampsPerPool, slot = queries_used_ % kTimestampsPerPool;
  if (pool == query_pools_.size()) {
    VkQueryPoolCreateInfo qci{VK_STRUCTURE_TYPE_QUERY_POOL_CREATE_INFO};
    qci.queryType = VK_QUERY_TYPE_TIMESTAMP;
    qci.queryCount = kTimestampsPerPool;
    VkQueryPool q;
    VK_CHECK(vkCreateQueryPool(ctx_.device, &qci, nullptr, &q), "creating a timestamp query pool");
    query_pools_.push_back(q);
  }
  if (slot == 0) vkCmdResetQueryPool(cmd_, query_pools_[pool], 0, kTimestampsPerPool);
  vkCmdWriteTimestamp(cmd_, VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, query_pools_[pool], slot);
  ++queries_used_;
}

void Recorder::sync(std::initializer_list<Use> uses) { sync(std::vector<Use>(uses)); }

void Recorder::sync(const std::vector<Use>& uses) {
  std::vector<VkBufferMemoryBarrier> barriers;
  VkPipelineStageFlags src = 0, dst = 0;
  for (const Use& u : uses) {
    State& s = states_[u.buffer->id()];
    VkAccessFlags src_access = 0, dst_access = 0;
    VkPipelineStageFlags src_stage = 0;
    bool hazard = false;
    const bool unseen_write =
        s.write_stage && ((s.visible_stages & u.stage) != u.stage || (s.visible_access & u.access) != u.access);
    if (u.reads && unseen_write) {  // RAW
      hazard = true;
      src_stage |= s.write_stage;
      src_access |= s.write_access;
      dst_access |= u.access & (VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_TRANSFER_READ_BIT | VK_ACCESS_INDIRECT_COMMAND_READ_BIT);
    }
    if (u.writes) {
      if (s.read_stages) {  // WAR: an execution dependency is enough
        hazard = true;
        src_stage |= s.read_stages;
      }
      if (s.write_stage) {  // WAW
        hazard = true;
        src_stage |= s.write_stage;
        src_access |= s.write_access;
      }
      dst_access |= u.access & (VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_WRITE_BIT);
    }
    if (hazard && tracking_) {
      VkBufferMemoryBarrier b{VK_STRUCTURE_TYPE_BUFFER_MEMORY_BARRIER};
      b.srcAccessMask = src_access;
      b.dstAccessMask = dst_access;
      b.srcQueueFamilyIndex = b.dstQueueFamilyIndex = VK_QUEUE_FAMILY_IGNORED;
      b.buffer = u.buffer->handle();
      b.offset = u.buffer->offset();
      b.size = u.buffer->size();
      barriers.push_back(b);
      src |= src_stage;
      dst |= u.stage;
      if (u.reads && unseen_write) {
        s.visible_stages |= u.stage;
        s.visible_access |= dst_access;
      }
    }
    if (u.writes) {
      s.write_stage = u.stage;
      s.write_access = u.access & (VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_WRITE_BIT);
      s.visible_stages = 0;
      s.visible_access = 0;
      s.read_stages = 0;
      if (u.buffer->mapped()) host_visible_written_[u.buffer->id()] = u.buffer;
    } else {
      s.read_stages |= u.stage;
    }
  }
  if (!barriers.empty()) {
    vkCmdPipelineBarrier(cmd_, src, dst, 0, 0, nullptr, uint32_t(barriers.size()), barriers.data(), 0, nullptr);
    ++barriers_;
  }
}

VkDescriptorSet Recorder::allocate_set(VkDescriptorSetLayout layout, uint32_t descriptors) {
  // Each type's share of a pool holds kSetsPerPool · kMaxBindings descriptors.
  if (sets_in_pool_ == kSetsPerPool || descriptors_in_pool_ + descriptors > kSetsPerPool * kMaxBindings) {
    ++pool_index_;
    sets_in_pool_ = 0;
    descriptors_in_pool_ = 0;
  }
  if (pool_index_ == descriptor_pools_.size()) {
    const VkDescriptorPoolSize sizes[] = {{VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, kSetsPerPool * kMaxBindings},
                                          {VK_DESCRIPTOR_TYPE_UNIFORM_TEXEL_BUFFER, kSetsPerPool * kMaxBindings}};
    VkDescriptorPoolCreateInfo ci{VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO};
    ci.maxSets = kSetsPerPool;
    ci.poolSizeCount = 2;
    ci.pPoolSizes = sizes;
    VkDescriptorPool pool;
    VK_CHECK(vkCreateDescriptorPool(ctx_.device, &ci, nullptr, &pool), "creating a descriptor pool");
    descriptor_pools_.push_back(pool);
  }
  VkDescriptorSetAllocateInfo ai{VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO};
  ai.descriptorPool = descriptor_pools_[pool_index_];
  ai.descriptorSetCount = 1;
  ai.pSetLayouts = &layout;
  VkDescriptorSet set;
  VK_CHECK(vkAllocateDescriptorSets(ctx_.device, &ai, &set), "allocating a descriptor set");
  ++sets_in_pool_;
  descriptors_in_pool_ += descriptors;
  return set;
}

template <typename What>
size_t Recorder::expect(uint64_t sig, What what) {
  if (next_step_ >= steps_.size() || steps_[next_step_].signature != sig)
    throw Error(ErrorCode::invalid_argument, "recorder: updating the recording, " + what() + " differs from command " +
                                                 std::to_string(next_step_) + " of the " +
                                                 std::to_string(steps_.size()) + " recorded");
  return next_step_++;
}

void Recorder::dispatch_bytes(const Pipeline& p, std::span<const Binding> bindings,
                              std::span<const std::byte> params, uint32_t gx, uint32_t gy, uint32_t gz,
                              std::string label) {
  record_dispatch(p, bindings, params, {gx, gy, gz}, nullptr, 0, std::move(label));
}

void Recorder::record_dispatch(const Pipeline& p, std::span<const Binding> bindings,
                               std::span<const std::byte> params, std::array<uint32_t, 3> groups,
                               const Buffer* counts_from, VkDeviceSize counts_offset, std::string label) {
  const auto [gx, gy, gz] = groups;
  uint32_t descriptors = 0;
  for (uint32_t n : p.counts) descriptors += n;
  if (bindings.size() != descriptors || p.bindings > kMaxBindings || descriptors > kMaxDescriptors)
    throw Error(ErrorCode::invalid_argument, "dispatch of '" + p.shader + "': expected " +
                                                 std::to_string(descriptors) + " buffers for its " +
                                                 std::to_string(p.bindings) + " bindings, got " +
                                                 std::to_string(bindings.size()));
  // Variants of one op share one host struct and may read a prefix of it.
  if (params.size() < p.param_bytes || params.size() > ParamArena::kMaxParamBytes)
    throw Error(ErrorCode::invalid_argument, "dispatch of '" + p.shader + "': its parameter block is " +
                                                 std::to_string(p.param_bytes) + " bytes, the host passed " +
                                                 std::to_string(params.size()));
  for (const Binding& b : bindings)
    if (!b.buffer->valid())
      throw Error(ErrorCode::invalid_argument, "dispatch of '" + p.shader + "': binding " +
                                                   std::to_string(&b - bindings.data()) + " has no buffer");
  const auto& max = ctx_.info.max_workgroup_count;
  if (gx > max[0] || gy > max[1] || gz > max[2])
    throw Error(ErrorCode::unsupported, "dispatch of '" + p.shader + "': " + std::to_string(gx) + "×" +
                                            std::to_string(gy) + "×" + std::to_string(gz) +
                                            " workgroups exceed the device's maxComputeWorkGroupCount (" +
                                            std::to_string(max[0]) + "×" + std::to_string(max[1]) + "×" +
                                            std::to_string(max[2]) + ")");
  if (label.empty()) label = p.shader;
  Signature sig;
  sig.add(uint64_t(reinterpret_cast<uintptr_t>(p.pipeline))).add(label);
  for (const Binding& b : bindings) sig.add(b.buffer->id()).add(uint64_t(b.texel_format));
  if (counts_from) {
    if (!counts_from->valid() || counts_offset % 4 != 0 || counts_offset + 12 > counts_from->size())
      throw Error(ErrorCode::invalid_argument, "dispatch of '" + p.shader + "': its workgroup counts at byte " +
                                                   std::to_string(counts_offset) + " are outside their buffer");
    sig.add(counts_from->id()).add(uint64_t(counts_offset));
  }
  const bool direct = tuning_.direct_dispatch && !counts_from;
  if (updating_) {
    const Step& step = steps_[expect(sig.value, [&] { return "dispatch of '" + p.shader + "'"; })];
    if (step.direct && step.groups != groups)
      throw Error(ErrorCode::invalid_argument,
                  "recorder: updating the recording, dispatch of '" + p.shader + "' has " + std::to_string(gx) + "×" +
                      std::to_string(gy) + "×" + std::to_string(gz) + " workgroups, not the " +
                      std::to_string(step.groups[0]) + "×" + std::to_string(step.groups[1]) + "×" +
                      std::to_string(step.groups[2]) + " recorded in the command buffer (direct dispatch)");
    params_.write(step.slot, params, gx, gy, gz);
    return;
  }
  const ParamArena::Slot slot = params_.allocate();
  params_.write(slot, params, gx, gy, gz);
  steps_.push_back({sig.value, slot, direct, groups});
  std::vector<Use> uses;
  VkDescriptorBufferInfo infos[kMaxDescriptors];
  VkWriteDescriptorSet writes[kMaxBindings];
  VkBufferView texel_views[kMaxBindings];
  const VkDescriptorSet set = allocate_set(p.set_layout, descriptors);
  // A buffer bound twice (in-place ops) is one use: it must not look like a hazard with itself.
  for (const Binding& b : bindings) {
    const bool reads = b.access != Access::write, wr = b.access != Access::read;
    const VkAccessFlags access = (reads ? VK_ACCESS_SHADER_READ_BIT : 0) | (wr ? VK_ACCESS_SHADER_WRITE_BIT : 0);
    auto same = std::find_if(uses.begin(), uses.end(), [&](const Use& u) { return u.buffer->id() == b.buffer->id(); });
    if (same != uses.end()) {
      same->access |= access;
      same->reads = same->reads || reads;
      same->writes = same->writes || wr;
    } else {
      uses.push_back({b.buffer, kCompute, access, reads, wr});
    }
  }
  // Binding i takes the next p.counts[i] buffers: one, or an array's elements.
  for (uint32_t i = 0, at = 0; i < p.bindings; at += p.counts[i], ++i) {
    const Binding& b = bindings[at];
    writes[i] = {VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET};
    writes[i].dstSet = set;
    writes[i].dstBinding = i;
    writes[i].descriptorCount = p.counts[i];
    if (p.texel_bindings >> i & 1) {
      if (p.counts[i] != 1)
        throw Error(ErrorCode::invalid_argument, "dispatch of '" + p.shader + "': binding " + std::to_string(i) +
                                                     " is an array of texel buffers");
      if (b.texel_format == VK_FORMAT_UNDEFINED)
        throw Error(ErrorCode::invalid_argument,
                    "dispatch of '" + p.shader + "': binding " + std::to_string(i) + " is a texel buffer without a format");
      // Whole texels only (the range must be a multiple of the texel size):
      // a vec4 view of a buffer with a partial last texel leaves it out.
      const uint32_t texel = texel_bytes(b.texel_format);
      if (b.buffer->size() < texel)
        throw Error(ErrorCode::invalid_argument, "dispatch of '" + p.shader + "': binding " + std::to_string(i) +
                                                     " is smaller than one texel of its view");
      VkBufferViewCreateInfo vi{VK_STRUCTURE_TYPE_BUFFER_VIEW_CREATE_INFO};
      vi.buffer = b.buffer->handle();
      vi.format = b.texel_format;
      vi.offset = b.buffer->offset();
      vi.range = b.buffer->size() / texel * texel;
      VkBufferView view;
      VK_CHECK(vkCreateBufferView(ctx_.device, &vi, nullptr, &view), "creating a texel buffer view for '" + p.shader + "'");
      views_.push_back(view);
      texel_views[i] = view;
      writes[i].descriptorType = VK_DESCRIPTOR_TYPE_UNIFORM_TEXEL_BUFFER;
      writes[i].pTexelBufferView = &texel_views[i];
    } else {
      for (uint32_t e = at; e < at + p.counts[i]; ++e)
        infos[e] = {bindings[e].buffer->handle(), bindings[e].buffer->offset(), bindings[e].buffer->size()};
      writes[i].descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER;
      writes[i].pBufferInfo = &infos[at];
    }
  }
  vkUpdateDescriptorSets(ctx_.device, p.bindings, writes, 0, nullptr);
  if (!p.warm.load() && std::none_of(cold_.begin(), cold_.end(), [&](const Cold& c) { return c.pipeline == &p; }))
    cold_.push_back({&p, set, slot});
  if (counts_from)
    uses.push_back({counts_from, VK_PIPELINE_STAGE_DRAW_INDIRECT_BIT, VK_ACCESS_INDIRECT_COMMAND_READ_BIT, true, false});
  sync(uses);
  vkCmdBindPipeline(cmd_, VK_PIPELINE_BIND_POINT_COMPUTE, p.pipeline);
  const VkDescriptorSet sets[] = {set, params_.set(slot)};
  vkCmdBindDescriptorSets(cmd_, VK_PIPELINE_BIND_POINT_COMPUTE, p.layout, 0, 2, sets, 1, &slot.params);
  if (direct) {
    vkCmdDispatch(cmd_, gx, gy, gz);
  } else {
    const Buffer& counts = counts_from ? *counts_from : params_.counts_buffer(slot);
    vkCmdDispatchIndirect(cmd_, counts.handle(), counts.offset() + (counts_from ? counts_offset : slot.counts));
  }
  labels_.push_back(std::move(label));
  timestamp();
}

void Recorder::copy(const Buffer& src, const Buffer& dst, VkDeviceSize bytes) {
  copy(src, dst, std::vector<VkBufferCopy>{{0, 0, bytes}});
}

void Recorder::copy(const Buffer& src, const Buffer& dst, std::vector<VkBufferCopy> regions) {
  const uint64_t sig = Signature().add(src.id()).add(dst.id()).add(std::as_bytes(std::span(regions))).value;
  if (updating_) {
    expect(sig, [&] { return "a copy from '" + src.name() + "' to '" + dst.name() + "'"; });
    return;
  }
  steps_.push_back({sig, {}});
  for (VkBufferCopy& r : regions) {
    if (r.srcOffset + r.size > src.size() || r.dstOffset + r.size > dst.size())
      throw Error(ErrorCode::invalid_argument, "copy of " + std::to_string(r.size) + " bytes from '" + src.name() +
                                                   "' to '" + dst.name() + "' exceeds a buffer");
    r.srcOffset += src.offset();
    r.dstOffset += dst.offset();
  }
  sync({{&src, kTransfer, VK_ACCESS_TRANSFER_READ_BIT, true, false},
        {&dst, kTransfer, VK_ACCESS_TRANSFER_WRITE_BIT, false, true}});
  vkCmdCopyBuffer(cmd_, src.handle(), dst.handle(), uint32_t(regions.size()), regions.data());
}

void Recorder::fill(const Buffer& dst, uint32_t word) {
  const uint64_t sig = Signature().add(dst.id()).add(word).value;
  if (updating_) {
    expect(sig, [&] { return "a fill of '" + dst.name() + "'"; });
    return;
  }
  steps_.push_back({sig, {}});
  sync({{&dst, kTransfer, VK_ACCESS_TRANSFER_WRITE_BIT, false, true}});
  vkCmdFillBuffer(cmd_, dst.handle(), dst.offset(), dst.size() / 4 * 4, word);
}

void Recorder::mark(std::string label) {
  const uint64_t sig = Signature().add(label).value;
  if (updating_) {
    expect(sig, [&] { return "mark '" + label + "'"; });
    return;
  }
  steps_.push_back({sig, {}});
  labels_.push_back(std::move(label));
  timestamp();
}

void Recorder::end() {
  if (updating_) {
    if (next_step_ != steps_.size())
      throw Error(ErrorCode::invalid_argument, "recorder: updating the recording, " + std::to_string(next_step_) +
                                                   " of its " + std::to_string(steps_.size()) + " commands came");
    updating_ = false;
    recorded_ = true;
    return;
  }
  if (!host_visible_written_.empty()) {
    VkMemoryBarrier mb{VK_STRUCTURE_TYPE_MEMORY_BARRIER};
    mb.srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_WRITE_BIT;
    mb.dstAccessMask = VK_ACCESS_HOST_READ_BIT;
    vkCmdPipelineBarrier(cmd_, kCompute | kTransfer, VK_PIPELINE_STAGE_HOST_BIT, 0, 1, &mb, 0, nullptr, 0, nullptr);
    ++barriers_;
  }
  VK_CHECK(vkEndCommandBuffer(cmd_), "ending a command buffer");
  VK_CHECK(vkResetCommandBuffer(prologue_, 0), "resetting a command buffer");
  VkCommandBufferBeginInfo bi{VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO};
  VK_CHECK(vkBeginCommandBuffer(prologue_, &bi), "beginning a command buffer");
  params_.record_upload(prologue_);
  VK_CHECK(vkEndCommandBuffer(prologue_), "ending a command buffer");
  recording_ = false;
  warm_up();
  recorded_ = true;
}

// lavapipe (llvmpipe) JIT-compiles a pipeline for what is bound when it first
// runs, seconds each on a CPU: inside the first submit of a recording, where
// it would count as GPU time and show no progress. A dispatch of no workgroups
// compiles it and runs nothing (GPU drivers compiled it at creation already).
void Recorder::warm_up() {
  if (cold_.empty()) return;
  if (!warm_cmd_) {
    VkCommandBufferAllocateInfo ai{VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO};
    ai.commandPool = pool_;
    ai.level = VK_COMMAND_BUFFER_LEVEL_PRIMARY;
    ai.commandBufferCount = 1;
    VK_CHECK(vkAllocateCommandBuffers(ctx_.device, &ai, &warm_cmd_), "allocating a command buffer");
  }
  ProgressReport report(ctx_, Progress::Task::pipelines, cold_.size());
  for (size_t i = 0; i < cold_.size(); ++i) {
    const Cold& c = cold_[i];
    if (!c.pipeline->warm.load()) {
      const std::string doing = "compiling the '" + c.pipeline->shader + "' pipeline";
      VK_CHECK(vkResetCommandBuffer(warm_cmd_, 0), doing);
      VkCommandBufferBeginInfo bi{VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO};
      bi.flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT;
      VK_CHECK(vkBeginCommandBuffer(warm_cmd_, &bi), doing);
      // Its bindings are the recording's buffers, which other command buffers
      // write: ordered against them as the recording itself is (begin()).
      VkMemoryBarrier mb{VK_STRUCTURE_TYPE_MEMORY_BARRIER};
      mb.srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_WRITE_BIT;
      mb.dstAccessMask = VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT;
      vkCmdPipelineBarrier(warm_cmd_, kCompute | kTransfer, kCompute, 0, 1, &mb, 0, nullptr, 0, nullptr);
      vkCmdBindPipeline(warm_cmd_, VK_PIPELINE_BIND_POINT_COMPUTE, c.pipeline->pipeline);
      const VkDescriptorSet sets[] = {c.set, params_.set(c.slot)};
      vkCmdBindDescriptorSets(warm_cmd_, VK_PIPELINE_BIND_POINT_COMPUTE, c.pipeline->layout, 0, 2, sets, 1,
                              &c.slot.params);
      vkCmdDispatch(warm_cmd_, 0, 0, 0);
      VK_CHECK(vkEndCommandBuffer(warm_cmd_), doing);
      ctx_.submit_and_wait(warm_cmd_, fence_, doing.c_str());
      c.pipeline->warm.store(true);
    }
    report.advance(i + 1);
  }
  cold_.clear();
}

void Recorder::submit(const std::string& doing) {
  if (!recorded_) throw Error(ErrorCode::invalid_argument, doing + ": the command buffer was not recorded");
  const VkCommandBuffer both[] = {prologue_, cmd_};
  FenceWait wait;
  if (tuning_.fence_spin_us && last_run_ns_) {
    const uint64_t spin = std::min<uint64_t>(last_run_ns_ / 5, uint64_t(tuning_.fence_spin_us) * 1000);
    wait = {last_run_ns_ - spin, 2 * spin};
  }
  const auto start = std::chrono::steady_clock::now();
  ctx_.submit_and_wait(both, fence_, doing.c_str(), wait);
  last_run_ns_ = uint64_t(std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start).count());
  submitted_ = true;
}

std::vector<DispatchTiming> Recorder::timings() const {
  std::vector<DispatchTiming> out;
  if (!submitted_ || queries_used_ < 2) return out;
  std::vector<uint64_t> ts(queries_used_);
  for (uint32_t first = 0; first < queries_used_; first += kTimestampsPerPool) {
    const uint32_t n = std::min(kTimestampsPerPool, queries_used_ - first);
    VK_CHECK(vkGetQueryPoolResults(ctx_.device, query_pools_[first / kTimestampsPerPool], 0, n, n * 8, &ts[first], 8,
                                   VK_QUERY_RESULT_64_BIT | VK_QUERY_RESULT_WAIT_BIT),
             "reading GPU timestamps");
  }
  const double ns = ctx_.info.timestamp_period_ns;
  for (size_t i = 0; i + 1 < ts.size() && i < labels_.size(); ++i)
    out.push_back({labels_[i], double(ts[i + 1] - ts[i]) * ns / 1000.0});
  return out;
}

}  // namespace vkgate::gpu
