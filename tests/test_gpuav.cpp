// GPU-assisted validation (issue 5, item 2): with VKGATE_VALIDATION=gpu (or
// ContextOptions::gpu_assisted_validation) the validation layer instruments
// the shaders so that an out-of-bounds buffer access is reported — and the
// suite's fixture turns any report into a failed test. This positive control
// dispatches a tiny test shader (tests/gpuav_oob.comp, built with debug info)
// that writes past its binding and requires the layer to say so, naming the
// source line. It runs on a Context of its own and is skipped unless the suite
// runs with VKGATE_VALIDATION=gpu (CI's GPU-assisted stage).
#include <cstdlib>
#include <cstring>

#include "gpu/context_impl.hpp"
#include "gpu/memory.hpp"
#include "gpuav_oob_spv.h"
#include "harness.hpp"

namespace test_gpuav {

using namespace vkgate;

namespace {

// A compute pipeline for the control shader: one storage buffer, no push constants.
struct OobPipeline {
  VkDevice device;
  VkDescriptorSetLayout set_layout = VK_NULL_HANDLE;
  VkPipelineLayout layout = VK_NULL_HANDLE;
  VkPipeline pipeline = VK_NULL_HANDLE;
  VkDescriptorPool pool = VK_NULL_HANDLE;
  VkDescriptorSet set = VK_NULL_HANDLE;

  OobPipeline(VkDevice d, const gpu::Buffer& out) : device(d) {
    VkDescriptorSetLayoutBinding b{0, VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, 1, VK_SHADER_STAGE_COMPUTE_BIT, nullptr};
    VkDescriptorSetLayoutCreateInfo dl{VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO};
    dl.bindingCount = 1;
    dl.pBindings = &b;
    REQUIRE(vkCreateDescriptorSetLayout(device, &dl, nullptr, &set_layout) == VK_SUCCESS);
    VkPipelineLayoutCreateInfo pl{VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO};
    pl.setLayoutCount = 1;
    pl.pSetLayouts = &set_layout;
    REQUIRE(vkCreatePipelineLayout(device, &pl, nullptr, &layout) == VK_SUCCESS);
    VkShaderModuleCreateInfo mi{VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO};
    mi.codeSize = sizeof(gpuav_oob_spv);
    mi.pCode = gpuav_oob_spv;
    VkShaderModule module = VK_NULL_HANDLE;
    REQUIRE(vkCreateShaderModule(device, &mi, nullptr, &module) == VK_SUCCESS);
    VkComputePipelineCreateInfo ci{VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO};
    ci.stage = {VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO};
    ci.stage.stage = VK_SHADER_STAGE_COMPUTE_BIT;
    ci.stage.module = module;
    ci.stage.pName = "main";
    ci.layout = layout;
    const VkResult r = vkCreateComputePipelines(device, VK_NULL_HANDLE, 1, &ci, nullptr, &pipeline);
    vkDestroyShaderModule(device, module, nullptr);
    REQUIRE(r == VK_SUCCESS);
    VkDescriptorPoolSize size{VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, 1};
    VkDescriptorPoolCreateInfo pci{VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO};
    pci.maxSets = 1;
    pci.poolSizeCount = 1;
    pci.pPoolSizes = &size;
    REQUIRE(vkCreateDescriptorPool(device, &pci, nullptr, &pool) == VK_SUCCESS);
    VkDescriptorSetAllocateInfo ai{VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO};
    ai.descriptorPool = pool;
    ai.descriptorSetCount = 1;
    ai.pSetLayouts = &set_layout;
    REQUIRE(vkAllocateDescriptorSets(device, &ai, &set) == VK_SUCCESS);
    VkDescriptorBufferInfo info{out.handle(), out.offset(), out.size()};
    VkWriteDescriptorSet w{VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET};
    w.dstSet = set;
    w.descriptorCount = 1;
    w.descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER;
    w.pBufferInfo = &info;
    vkUpdateDescriptorSets(device, 1, &w, 0, nullptr);
  }
  ~OobPipeline() {
    vkDestroyDescriptorPool(device, pool, nullptr);
    vkDestroyPipeline(device, pipeline, nullptr);
    vkDestroyPipelineLayout(device, layout, nullptr);
    vkDestroyDescriptorSetLayout(device, set_layout, nullptr);
  }
};

}  // namespace

TEST_CASE("gpu-assisted validation: an out-of-bounds shader write is reported, naming the source line") {
  const char* mode = std::getenv("VKGATE_VALIDATION");
  if (!mode || std::strcmp(mode, "gpu") != 0) {
    MESSAGE("skipped: runs with VKGATE_VALIDATION=gpu (CI's GPU-assisted validation stage)");
    return;
  }
  ContextOptions o;
  o.gpu_assisted_validation = true;
  if (const char* d = std::getenv("VKGATE_TEST_DEVICE")) o.device = d;
  Context ctx(o);
  REQUIRE(ctx.gpu_assisted_validation_enabled());
  auto& vk = ctx.impl();
  // 256 floats in a block; the binding covers the first 64, the dispatch writes 256.
  gpu::Buffer whole = vk.allocator->allocate(256 * 4, gpu::MemoryKind::device, "whole");
  gpu::Buffer out = vk.allocator->allocate(64 * 4, gpu::MemoryKind::device, "bound range");
  {
    OobPipeline p(vk.device, out);
    VkCommandPoolCreateInfo pci{VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO};
    pci.queueFamilyIndex = vk.queue_family;
    VkCommandPool pool = VK_NULL_HANDLE;
    REQUIRE(vkCreateCommandPool(vk.device, &pci, nullptr, &pool) == VK_SUCCESS);
    VkCommandBufferAllocateInfo ai{VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO};
    ai.commandPool = pool;
    ai.level = VK_COMMAND_BUFFER_LEVEL_PRIMARY;
    ai.commandBufferCount = 1;
    VkCommandBuffer cmd = VK_NULL_HANDLE;
    REQUIRE(vkAllocateCommandBuffers(vk.device, &ai, &cmd) == VK_SUCCESS);
    VkFenceCreateInfo fci{VK_STRUCTURE_TYPE_FENCE_CREATE_INFO};
    VkFence fence = VK_NULL_HANDLE;
    REQUIRE(vkCreateFence(vk.device, &fci, nullptr, &fence) == VK_SUCCESS);
    VkCommandBufferBeginInfo bi{VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO};
    vkBeginCommandBuffer(cmd, &bi);
    vkCmdBindPipeline(cmd, VK_PIPELINE_BIND_POINT_COMPUTE, p.pipeline);
    vkCmdBindDescriptorSets(cmd, VK_PIPELINE_BIND_POINT_COMPUTE, p.layout, 0, 1, &p.set, 0, nullptr);
    vkCmdDispatch(cmd, 4, 1, 1);  // 256 invocations
    vkEndCommandBuffer(cmd);
    vk.submit_and_wait(cmd, fence, "the out-of-bounds control dispatch");
    vkDestroyFence(vk.device, fence, nullptr);
    vkDestroyCommandPool(vk.device, pool, nullptr);
  }
  const auto msgs = ctx.take_validation_messages();
  for (const auto& m : msgs) MESSAGE(m);
  REQUIRE_MESSAGE(!msgs.empty(), "GPU-assisted validation did not report an out-of-bounds write");
  bool oob = false, line = false;
  for (const auto& m : msgs) {
    oob = oob || m.find("out of bounds") != std::string::npos || m.find("OOB") != std::string::npos ||
          m.find("out-of-bounds") != std::string::npos || m.find("outside") != std::string::npos;
    line = line || m.find("gpuav_oob.comp") != std::string::npos || m.find("line 8") != std::string::npos;
  }
  CHECK(oob);
  CHECK(line);
}

}  // namespace test_gpuav
