#include "gpu/pipeline.hpp"

#include <bit>
#include <cstdio>
#include <string>

#include "gpu/context_impl.hpp"

namespace vkgate::gpu {

namespace {
// One stderr line per executable of `pipeline`: its name and every statistic
// the driver reports (VK_KHR_pipeline_executable_properties).
void print_statistics(VkDevice dev, VkPipeline pipeline, const std::string& shader, const std::vector<uint32_t>& spec) {
  auto props = reinterpret_cast<PFN_vkGetPipelineExecutablePropertiesKHR>(
      vkGetDeviceProcAddr(dev, "vkGetPipelineExecutablePropertiesKHR"));
  auto stats = reinterpret_cast<PFN_vkGetPipelineExecutableStatisticsKHR>(
      vkGetDeviceProcAddr(dev, "vkGetPipelineExecutableStatisticsKHR"));
  if (!props || !stats) return;
  std::string name = shader + " {";
  for (size_t i = 0; i < spec.size(); ++i) {
    if (i) name += ',';
    name += std::to_string(spec[i]);
  }
  name += '}';
  VkPipelineInfoKHR pi{VK_STRUCTURE_TYPE_PIPELINE_INFO_KHR};
  pi.pipeline = pipeline;
  uint32_t n = 0;
  if (props(dev, &pi, &n, nullptr) != VK_SUCCESS) return;
  std::vector<VkPipelineExecutablePropertiesKHR> exes(n, {VK_STRUCTURE_TYPE_PIPELINE_EXECUTABLE_PROPERTIES_KHR});
  if (props(dev, &pi, &n, exes.data()) != VK_SUCCESS) return;
  for (uint32_t e = 0; e < n; ++e) {
    VkPipelineExecutableInfoKHR ei{VK_STRUCTURE_TYPE_PIPELINE_EXECUTABLE_INFO_KHR};
    ei.pipeline = pipeline;
    ei.executableIndex = e;
    uint32_t m = 0;
    if (stats(dev, &ei, &m, nullptr) != VK_SUCCESS) continue;
    std::vector<VkPipelineExecutableStatisticKHR> st(m, {VK_STRUCTURE_TYPE_PIPELINE_EXECUTABLE_STATISTIC_KHR});
    if (stats(dev, &ei, &m, st.data()) != VK_SUCCESS) continue;
    std::string line = "vkgate: pipeline " + name + " " + exes[e].name + ":";
    for (const auto& x : st) {
      line += std::string(" ") + x.name + "=";
      switch (x.format) {
        case VK_PIPELINE_EXECUTABLE_STATISTIC_FORMAT_BOOL32_KHR: line += x.value.b32 ? "yes" : "no"; break;
        case VK_PIPELINE_EXECUTABLE_STATISTIC_FORMAT_INT64_KHR: line += std::to_string(x.value.i64); break;
        case VK_PIPELINE_EXECUTABLE_STATISTIC_FORMAT_UINT64_KHR: line += std::to_string(x.value.u64); break;
        default: line += std::to_string(x.value.f64); break;
      }
    }
    std::fprintf(stderr, "%s\n", line.c_str());
  }
}
}  // namespace

PipelineCache::PipelineCache(Context::Impl& ctx) : ctx_(ctx) {
  VkPipelineCacheCreateInfo ci{VK_STRUCTURE_TYPE_PIPELINE_CACHE_CREATE_INFO};
  VK_CHECK(vkCreatePipelineCache(ctx.device, &ci, nullptr, &cache_), "creating the pipeline cache");
  const VkDescriptorSetLayoutBinding params{0, VK_DESCRIPTOR_TYPE_STORAGE_BUFFER_DYNAMIC, 1,
                                            VK_SHADER_STAGE_COMPUTE_BIT, nullptr};
  VkDescriptorSetLayoutCreateInfo dl{VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO};
  dl.bindingCount = 1;
  dl.pBindings = &params;
  const VkResult r = vkCreateDescriptorSetLayout(ctx.device, &dl, nullptr, &params_layout_);
  if (r != VK_SUCCESS) {
    vkDestroyPipelineCache(ctx.device, cache_, nullptr);
    throw_vk(r, "vkCreateDescriptorSetLayout", "creating the parameter descriptor set layout");
  }
}

PipelineCache::~PipelineCache() {
  for (auto& [key, p] : pipelines_) {
    vkDestroyPipeline(ctx_.device, p->pipeline, nullptr);
    vkDestroyPipelineLayout(ctx_.device, p->layout, nullptr);
    vkDestroyDescriptorSetLayout(ctx_.device, p->set_layout, nullptr);
  }
  vkDestroyDescriptorSetLayout(ctx_.device, params_layout_, nullptr);
  vkDestroyPipelineCache(ctx_.device, cache_, nullptr);
}

size_t PipelineCache::size() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return pipelines_.size();
}

bool subgroup_size_ok(const DeviceInfo& d, uint32_t size, uint32_t workgroup) {
  if (size == 0 || workgroup % size != 0) return false;
  if (d.subgroup_size_control)
    return std::has_single_bit(size) && d.min_subgroup_size <= size && size <= d.max_subgroup_size &&
           workgroup / size <= d.max_workgroup_subgroups;
  return d.min_subgroup_size == size && d.max_subgroup_size == size;
}

const Pipeline& PipelineCache::get(const std::string& shader, const std::vector<uint32_t>& spec,
                                   uint32_t subgroup_size) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (auto it = pipelines_.find(std::tie(shader, spec, subgroup_size)); it != pipelines_.end()) return *it->second;

  const ShaderModuleInfo& info = shader_info(shader);
  const std::string doing = "creating the '" + info.name + "' pipeline";
  if (spec.empty() || spec[0] == 0 || spec[0] > ctx_.info.max_workgroup_invocations)
    throw Error(ErrorCode::unsupported, doing + ": workgroup size " + std::to_string(spec.empty() ? 0 : spec[0]) +
                                            " exceeds the device limit " +
                                            std::to_string(ctx_.info.max_workgroup_invocations));
  if (subgroup_size && !subgroup_size_ok(ctx_.info, subgroup_size, spec[0]))
    throw Error(ErrorCode::unsupported,
                doing + ": it needs full subgroups of " + std::to_string(subgroup_size) + " lanes (workgroup " +
                    std::to_string(spec[0]) + "), which " + ctx_.info.name + " cannot guarantee (subgroups of " +
                    std::to_string(ctx_.info.min_subgroup_size) + ".." + std::to_string(ctx_.info.max_subgroup_size) +
                    (ctx_.info.subgroup_size_control
                         ? ", at most " + std::to_string(ctx_.info.max_workgroup_subgroups) + " per workgroup)"
                         : ", no subgroup size control)"));
  auto p = std::make_unique<Pipeline>();
  p->shader = shader;
  p->spec = spec;
  p->subgroup_size = subgroup_size;
  p->bindings = info.bindings;
  p->texel_bindings = info.texel_bindings;
  p->counts = info.counts;
  p->param_bytes = info.param_bytes;
  VkDevice dev = ctx_.device;

  std::vector<VkDescriptorSetLayoutBinding> binds(info.bindings);
  for (uint32_t i = 0; i < info.bindings; ++i)
    binds[i] = {i, (info.texel_bindings >> i & 1) ? VK_DESCRIPTOR_TYPE_UNIFORM_TEXEL_BUFFER : VK_DESCRIPTOR_TYPE_STORAGE_BUFFER,
                info.counts[i], VK_SHADER_STAGE_COMPUTE_BIT, nullptr};
  VkDescriptorSetLayoutCreateInfo dl{VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO};
  dl.bindingCount = info.bindings;
  dl.pBindings = binds.data();
  VkShaderModule module = VK_NULL_HANDLE;
  try {
    VK_CHECK(vkCreateDescriptorSetLayout(dev, &dl, nullptr, &p->set_layout), doing);
    const VkDescriptorSetLayout sets[] = {p->set_layout, params_layout_};
    VkPipelineLayoutCreateInfo pl{VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO};
    pl.setLayoutCount = 2;
    pl.pSetLayouts = sets;
    VK_CHECK(vkCreatePipelineLayout(dev, &pl, nullptr, &p->layout), doing);

    VkShaderModuleCreateInfo mi{VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO};
    mi.codeSize = info.spirv.size_bytes();
    mi.pCode = info.spirv.data();
    VK_CHECK(vkCreateShaderModule(dev, &mi, nullptr, &module), doing);

    std::vector<VkSpecializationMapEntry> entries(spec.size());
    for (uint32_t i = 0; i < spec.size(); ++i) entries[i] = {i, i * 4, 4};
    VkSpecializationInfo si{uint32_t(entries.size()), entries.data(), spec.size() * 4, spec.data()};
    VkComputePipelineCreateInfo ci{VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO};
    ci.stage = {VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO};
    ci.stage.stage = VK_SHADER_STAGE_COMPUTE_BIT;
    ci.stage.module = module;
    ci.stage.pName = "main";
    ci.stage.pSpecializationInfo = &si;
    VkPipelineShaderStageRequiredSubgroupSizeCreateInfo required{
        VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_REQUIRED_SUBGROUP_SIZE_CREATE_INFO};
    if (subgroup_size && ctx_.info.subgroup_size_control) {
      required.requiredSubgroupSize = subgroup_size;
      ci.stage.pNext = &required;
      ci.stage.flags |= VK_PIPELINE_SHADER_STAGE_CREATE_REQUIRE_FULL_SUBGROUPS_BIT;
    }
    ci.layout = p->layout;
    if (ctx_.pipeline_stats) ci.flags |= VK_PIPELINE_CREATE_CAPTURE_STATISTICS_BIT_KHR;
    VK_CHECK(vkCreateComputePipelines(dev, cache_, 1, &ci, nullptr, &p->pipeline), doing);
  } catch (...) {
    if (module) vkDestroyShaderModule(dev, module, nullptr);
    if (p->layout) vkDestroyPipelineLayout(dev, p->layout, nullptr);
    if (p->set_layout) vkDestroyDescriptorSetLayout(dev, p->set_layout, nullptr);
    throw;
  }
  vkDestroyShaderModule(dev, module, nullptr);
  if (ctx_.pipeline_stats) print_statistics(dev, p->pipeline, shader, spec);
  const Pipeline& ref = *p;
  pipelines_.emplace(std::make_tuple(shader, spec, subgroup_size), std::move(p));
  return ref;
}

}  // namespace vkgate::gpu
