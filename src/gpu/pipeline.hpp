// Internal: compute pipelines from embedded SPIR-V, one per (shader,
// specialization constants), created on first use and kept for the Context's
// lifetime behind a VkPipelineCache.
#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <mutex>
#include <utility>
#include <vector>

#include "gpu/shaders.hpp"
#include "gpu/vk.hpp"
#include "vkgate/context.hpp"

namespace vkgate::gpu {

// Whether a pipeline of `workgroup` invocations can be made to run in full
// subgroups of exactly `size` lanes: the device takes that size on request
// (subgroup_size_control: a power of two in its range, the workgroup at most
// max_workgroup_subgroups of them), or it has no other.
bool subgroup_size_ok(const DeviceInfo& d, uint32_t size, uint32_t workgroup);

struct Pipeline {
  std::string shader;
  std::vector<uint32_t> spec;  // spec[0] is the workgroup size
  uint32_t subgroup_size = 0;  // required, or 0: the driver's choice
  VkPipeline pipeline = VK_NULL_HANDLE;
  VkPipelineLayout layout = VK_NULL_HANDLE;
  VkDescriptorSetLayout set_layout = VK_NULL_HANDLE;
  uint32_t bindings = 0;
  uint32_t texel_bindings = 0;  // bit i: binding i is a uniform texel buffer
  std::vector<uint32_t> counts;  // descriptors at each binding (an array's length, else 1)
  uint32_t param_bytes = 0;     // the parameter block (set 1; shaders/params.glsl)
  // Run once (Recorder::end): a driver that compiles a pipeline when it first
  // runs (lavapipe JIT-compiles it then) has compiled this one.
  mutable std::atomic<bool> warm{false};
  uint32_t workgroup_size() const { return spec[0]; }
};

class PipelineCache {
 public:
  explicit PipelineCache(Context::Impl& ctx);
  ~PipelineCache();

  // Specialization constants are uint32 values for constant_id 0, 1, ...
  // A non-zero `subgroup_size` makes the pipeline run in full subgroups of
  // that many lanes (Error(unsupported) where !subgroup_size_ok).
  const Pipeline& get(const std::string& shader, const std::vector<uint32_t>& spec, uint32_t subgroup_size = 0);
  size_t size() const;
  // Set 1 of every pipeline: one dynamic storage buffer, the dispatch's parameters.
  VkDescriptorSetLayout params_layout() const { return params_layout_; }

 private:
  Context::Impl& ctx_;
  VkPipelineCache cache_ = VK_NULL_HANDLE;
  VkDescriptorSetLayout params_layout_ = VK_NULL_HANDLE;
  mutable std::mutex mutex_;
  // std::less<>: get() looks a pipeline up by references, without copying its
  // name and constants (every dispatch of every replayed step asks).
  std::map<std::tuple<std::string, std::vector<uint32_t>, uint32_t>, std::unique_ptr<Pipeline>, std::less<>> pipelines_;
};

}  // namespace vkgate::gpu
