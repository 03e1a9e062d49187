#include "gpu/context_device.hpp"

#include <cstring>
#include <sstream>
#include <string>

#include "gpu/context_impl.hpp"
#include "gpu/pipeline.hpp"
#include "gpu/shaders.hpp"

namespace vkgate::gpu::device {

bool has_extension(const std::vector<VkExtensionProperties>& exts, const char* name) {
  return std::any_of(exts.begin(), exts.end(),
                     [&](const VkExtensionProperties& e) { return std::strcmp(e.extensionName, name) == 0; });
}

std::vector<VkExtensionProperties> device_extensions(VkPhysicalDevice pd) {
  uint32_t n = 0;
  vkEnumerateDeviceExtensionProperties(pd, nullptr, &n, nullptr);
  std::vector<VkExtensionProperties> v(n);
  vkEnumerateDeviceExtensionProperties(pd, nullptr, &n, v.data());
  v.resize(n);
  return v;
}

namespace {

const char* type_name(VkPhysicalDeviceType t) {
  switch (t) {
    case VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU: return "discrete";
    case VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU: return "integrated";
    case VK_PHYSICAL_DEVICE_TYPE_VIRTUAL_GPU: return "virtual";
    case VK_PHYSICAL_DEVICE_TYPE_CPU: return "cpu";
    default: return "other";
  }
}

}  // namespace

int type_rank(VkPhysicalDeviceType t) {
  switch (t) {
    case VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU: return 4;
    case VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU: return 3;
    case VK_PHYSICAL_DEVICE_TYPE_VIRTUAL_GPU: return 2;
    case VK_PHYSICAL_DEVICE_TYPE_CPU: return 1;
    default: return 0;
  }
}

int compute_queue_family(VkPhysicalDevice pd) {
  uint32_t n = 0;
  vkGetPhysicalDeviceQueueFamilyProperties(pd, &n, nullptr);
  std::vector<VkQueueFamilyProperties> fams(n);
  vkGetPhysicalDeviceQueueFamilyProperties(pd, &n, fams.data());
  int best = -1;
  for (uint32_t i = 0; i < n; ++i) {
    if (!(fams[i].queueFlags & VK_QUEUE_COMPUTE_BIT)) continue;
    // A compute-only family is usually the least contended; otherwise take the first.
    if (best < 0 || !(fams[i].queueFlags & VK_QUEUE_GRAPHICS_BIT)) best = int(i);
  }
  return best;
}

namespace {

struct CoopmatPropertiesKhr {
  VkStructureType sType = kCoopmatPropertiesKhr;
  void* pNext = nullptr;
  uint32_t MSize, NSize, KSize;
  uint32_t AType, BType, CType, ResultType;  // VkComponentTypeKHR
  VkBool32 saturatingAccumulation;
  uint32_t scope;  // VkScopeKHR
};
// shaders/matmul_coopmat.comp: four 32-lane subgroups.
constexpr uint32_t kCoopmatMatmulWorkgroup = 128;
using CoopmatPropertiesKhrQuery = VkResult(VKAPI_PTR*)(VkPhysicalDevice, uint32_t*, CoopmatPropertiesKhr*);

// The one shape vkgate's tensor-core kernels use: 16×16×16, fp16 A and B,
// fp32 C and result, subgroup scope. Both extensions number the component
// types and scopes alike (FLOAT16 0, FLOAT32 1, SUBGROUP 3).
bool f16_shape(uint32_t m, uint32_t n, uint32_t k, uint32_t a, uint32_t b, uint32_t c, uint32_t result,
               uint32_t scope) {
  return m == 16 && n == 16 && k == 16 && a == VK_COMPONENT_TYPE_FLOAT16_NV && b == VK_COMPONENT_TYPE_FLOAT16_NV &&
         c == VK_COMPONENT_TYPE_FLOAT32_NV && result == VK_COMPONENT_TYPE_FLOAT32_NV && scope == VK_SCOPE_SUBGROUP_NV;
}

// The feature struct `F` as the device reports it.
template <class F>
F device_feature(VkPhysicalDevice pd, F f) {
  VkPhysicalDeviceFeatures2 f2{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2, &f};
  vkGetPhysicalDeviceFeatures2(pd, &f2);
  return f;
}

// What the kernels of either extension need besides the extension itself
// and 32-lane subgroups (they split a workgroup into four): fp16 arithmetic
// and storage, and the Vulkan memory model with device scope.
bool coopmat_prerequisites(VkPhysicalDevice pd, const DeviceInfo& d, uint32_t api) {
  if (!d.fp16_arithmetic || !d.storage16 || api < VK_API_VERSION_1_2 || gpu::env_flag("VKGATE_DISABLE_COOPMAT"))
    return false;
  // Device scope too: with the memory model on, moe_route.comp's device-scoped
  // buffer barriers need it (VUID-RuntimeSpirv-vulkanMemoryModel-06265).
  const auto mm = device_feature(pd, VkPhysicalDeviceVulkanMemoryModelFeatures{
                                         VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_MEMORY_MODEL_FEATURES});
  return mm.vulkanMemoryModel && mm.vulkanMemoryModelDeviceScope;
}

// The shapes an extension's properties query lists (an instance-level entry
// point); none if the query is missing or fails.
template <class Query, class Props>
std::vector<Props> coopmat_shapes(VkInstance instance, VkPhysicalDevice pd, const char* query_name, Props blank) {
  auto query = reinterpret_cast<Query>(vkGetInstanceProcAddr(instance, query_name));
  uint32_t n = 0;
  if (!query || query(pd, &n, nullptr) != VK_SUCCESS) return {};
  std::vector<Props> props(n, blank);
  if (query(pd, &n, props.data()) != VK_SUCCESS) return {};
  props.resize(n);
  return props;
}

bool nv_coopmat_f16(VkInstance instance, VkPhysicalDevice pd, const DeviceInfo& d) {
  if (!d.coopmat_nv ||
      !device_feature(pd, VkPhysicalDeviceCooperativeMatrixFeaturesNV{
                              VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_FEATURES_NV})
           .cooperativeMatrix)
    return false;
  const auto props = coopmat_shapes<PFN_vkGetPhysicalDeviceCooperativeMatrixPropertiesNV>(
      instance, pd, "vkGetPhysicalDeviceCooperativeMatrixPropertiesNV",
      VkCooperativeMatrixPropertiesNV{VK_STRUCTURE_TYPE_COOPERATIVE_MATRIX_PROPERTIES_NV});
  return std::any_of(props.begin(), props.end(), [](const VkCooperativeMatrixPropertiesNV& p) {
    return f16_shape(p.MSize, p.NSize, p.KSize, p.AType, p.BType, p.CType, p.DType, p.scope);
  });
}

// Only where this build embeds the KHR kernels (a glslang with
// GL_KHR_cooperative_matrix) and the device is Vulkan 1.3, which SPIR-V
// modules with cooperative-matrix types require.
bool khr_coopmat_f16(VkInstance instance, VkPhysicalDevice pd, const DeviceInfo& d, uint32_t api) {
  if (!gpu::has_shader("matmul_coopmat_khr") || !d.coopmat_khr ||
      api < VK_API_VERSION_1_3 || gpu::env_flag("VKGATE_DISABLE_COOPMAT_KHR") ||
      !gpu::subgroup_size_ok(d, 32, kCoopmatMatmulWorkgroup) ||
      !device_feature(pd, CoopmatFeaturesKhr{}).cooperativeMatrix)
    return false;
  const auto props = coopmat_shapes<CoopmatPropertiesKhrQuery>(
      instance, pd, "vkGetPhysicalDeviceCooperativeMatrixPropertiesKHR", CoopmatPropertiesKhr{});
  return std::any_of(props.begin(), props.end(), [](const CoopmatPropertiesKhr& p) {
    return !p.saturatingAccumulation &&
           f16_shape(p.MSize, p.NSize, p.KSize, p.AType, p.BType, p.CType, p.ResultType, p.scope);
  });
}

std::string human_bytes(uint64_t b) {
  std::ostringstream os;
  if (b >= (1ull << 30)) os << (b >> 30) << " GiB";
  else if (b >= (1ull << 20)) os << (b >> 20) << " MiB";
  else os << (b >> 10) << " KiB";
  return os.str();
}

}  // namespace

DeviceInfo describe(VkInstance instance, VkPhysicalDevice pd, int index) {
  DeviceInfo d;
  d.index = index;
  VkPhysicalDeviceSubgroupProperties sub{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_PROPERTIES};
  VkPhysicalDeviceSubgroupSizeControlProperties ssc{
      VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_SIZE_CONTROL_PROPERTIES};
  VkPhysicalDeviceDriverProperties drv{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_DRIVER_PROPERTIES};
  VkPhysicalDeviceProperties2 props{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2};
  VkPhysicalDeviceProperties base{};
  vkGetPhysicalDeviceProperties(pd, &base);
  const auto exts = device_extensions(pd);
  const uint32_t api = usable_api(base.apiVersion);
  const bool v12 = api >= VK_API_VERSION_1_2;
  const bool v13 = api >= VK_API_VERSION_1_3;
  props.pNext = &sub;
  if (v12 || has_extension(exts, VK_KHR_DRIVER_PROPERTIES_EXTENSION_NAME)) sub.pNext = &drv;
  const bool size_control = v13 || has_extension(exts, VK_EXT_SUBGROUP_SIZE_CONTROL_EXTENSION_NAME);
  if (size_control) drv.pNext = &ssc;
  vkGetPhysicalDeviceProperties2(pd, &props);
  const VkPhysicalDeviceLimits& lim = base.limits;

  d.name = base.deviceName;
  d.type = type_name(base.deviceType);
  d.vendor_id = base.vendorID;
  d.device_id = base.deviceID;
  d.driver = std::string(drv.driverName) + (drv.driverInfo[0] ? std::string(" ") + drv.driverInfo : "");
  d.api_version = std::to_string(VK_API_VERSION_MAJOR(base.apiVersion)) + "." +
                  std::to_string(VK_API_VERSION_MINOR(base.apiVersion)) + "." +
                  std::to_string(VK_API_VERSION_PATCH(base.apiVersion));
  d.subgroup_size = sub.subgroupSize;
  d.min_subgroup_size = ssc.minSubgroupSize ? ssc.minSubgroupSize : sub.subgroupSize;
  d.max_subgroup_size = ssc.maxSubgroupSize ? ssc.maxSubgroupSize : sub.subgroupSize;
  const bool compute_ops = sub.supportedStages & VK_SHADER_STAGE_COMPUTE_BIT;
  d.subgroup_arithmetic = compute_ops && (sub.supportedOperations & VK_SUBGROUP_FEATURE_ARITHMETIC_BIT);
  d.subgroup_shuffle = compute_ops && (sub.supportedOperations & VK_SUBGROUP_FEATURE_SHUFFLE_BIT);
  d.shared_memory_bytes = lim.maxComputeSharedMemorySize;
  d.max_workgroup_invocations = lim.maxComputeWorkGroupInvocations;
  for (int i = 0; i < 3; ++i) d.max_workgroup_size[i] = lim.maxComputeWorkGroupSize[i];
  for (int i = 0; i < 3; ++i) d.max_workgroup_count[i] = lim.maxComputeWorkGroupCount[i];
  d.max_storage_buffer_range = lim.maxStorageBufferRange;
  d.min_storage_buffer_offset_alignment = lim.minStorageBufferOffsetAlignment;
  d.max_texel_buffer_elements = lim.maxTexelBufferElements;
  d.min_texel_buffer_offset_alignment = lim.minTexelBufferOffsetAlignment;

  VkPhysicalDeviceMaintenance3Properties m3{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MAINTENANCE_3_PROPERTIES};
  VkPhysicalDeviceProperties2 p2{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2, &m3};
  vkGetPhysicalDeviceProperties2(pd, &p2);
  d.max_memory_allocation_size = m3.maxMemoryAllocationSize;

  VkPhysicalDeviceMemoryProperties mem{};
  vkGetPhysicalDeviceMemoryProperties(pd, &mem);
  for (uint32_t i = 0; i < mem.memoryHeapCount; ++i)
    if (mem.memoryHeaps[i].flags & VK_MEMORY_HEAP_DEVICE_LOCAL_BIT) d.device_local_bytes += mem.memoryHeaps[i].size;

  VkPhysicalDeviceShaderFloat16Int8Features f16{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_FLOAT16_INT8_FEATURES};
  VkPhysicalDevice16BitStorageFeatures s16{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_16BIT_STORAGE_FEATURES, &f16};
  VkPhysicalDeviceFeatures2 feats{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2, &s16};
  vkGetPhysicalDeviceFeatures2(pd, &feats);
  d.fp16_arithmetic = f16.shaderFloat16;
  d.storage16 = s16.storageBuffer16BitAccess;
  d.storage_buffer_arrays = feats.features.shaderStorageBufferArrayDynamicIndexing;
  d.max_stage_storage_buffers = lim.maxPerStageDescriptorStorageBuffers;
  d.coopmat_nv = has_extension(exts, VK_NV_COOPERATIVE_MATRIX_EXTENSION_NAME);
  d.coopmat_khr = has_extension(exts, kCoopmatKhrExtension);
  if (size_control) {
    const auto sc = device_feature(pd, VkPhysicalDeviceSubgroupSizeControlFeatures{
                                           VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_SIZE_CONTROL_FEATURES});
    d.subgroup_size_control = sc.subgroupSizeControl && sc.computeFullSubgroups &&
                              (ssc.requiredSubgroupSizeStages & VK_SHADER_STAGE_COMPUTE_BIT);
    d.max_workgroup_subgroups = ssc.maxComputeWorkgroupSubgroups;
  }
  // Packed int8 dot products: core in Vulkan 1.3, else the KHR extension (the
  // same feature struct); the shaders declare SPV_KHR_integer_dot_product.
  if ((v13 || has_extension(exts, VK_KHR_SHADER_INTEGER_DOT_PRODUCT_EXTENSION_NAME)) &&
      !gpu::env_flag("VKGATE_DISABLE_INTEGER_DOT"))
    d.integer_dot_product = device_feature(pd, VkPhysicalDeviceShaderIntegerDotProductFeatures{
                                                   VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_INTEGER_DOT_PRODUCT_FEATURES})
                                .shaderIntegerDotProduct;
  if (coopmat_prerequisites(pd, d, api)) {
    d.coopmat_f16 = d.subgroup_size == 32 && nv_coopmat_f16(instance, pd, d);
    d.coopmat_f16_khr = khr_coopmat_f16(instance, pd, d, api);
  }

  const int fam = compute_queue_family(pd);
  if (fam >= 0) {
    uint32_t n = 0;
    vkGetPhysicalDeviceQueueFamilyProperties(pd, &n, nullptr);
    std::vector<VkQueueFamilyProperties> fams(n);
    vkGetPhysicalDeviceQueueFamilyProperties(pd, &n, fams.data());
    d.timestamps = fams[fam].timestampValidBits > 0 && lim.timestampPeriod > 0;
  }
  d.timestamp_period_ns = lim.timestampPeriod;
  return d;
}

}  // namespace vkgate::gpu::device

namespace vkgate {

using gpu::device::human_bytes;

std::string DeviceInfo::summary() const {
  std::ostringstream os;
  os << index << ": " << name << " (" << type << ", Vulkan " << api_version << ", " << driver << ")"
     << " fp16=" << (fp16_arithmetic ? "yes" : "no") << " storage16=" << (storage16 ? "yes" : "no")
     << " subgroup=" << subgroup_size;
  if (min_subgroup_size != max_subgroup_size) os << " [" << min_subgroup_size << ".." << max_subgroup_size << "]";
  os << " subgroup_ops=" << (subgroup_arithmetic ? "arith" : "") << (subgroup_shuffle ? (subgroup_arithmetic ? "+shuffle" : "shuffle") : "")
     << (subgroup_arithmetic || subgroup_shuffle ? "" : "none")
     << " shared=" << human_bytes(shared_memory_bytes) << " max_wg=" << max_workgroup_invocations
     << " max_buffer_range=" << human_bytes(max_storage_buffer_range)
     << " device_memory=" << human_bytes(device_local_bytes)
     << " coopmat=" << (coopmat_khr && coopmat_nv ? "khr+nv" : coopmat_khr ? "khr" : coopmat_nv ? "nv" : "no")
     << (coopmat_f16_khr && coopmat_f16 ? " (fp16 16x16x16 used: matmul khr, attention nv)"
         : coopmat_f16_khr                ? " (fp16 16x16x16 used: matmul khr)"
         : coopmat_f16                    ? " (fp16 16x16x16 used: nv)"
                                          : "")
     << " int8_dot=" << (integer_dot_product ? "yes" : "no") << " timestamps=" << (timestamps ? "yes" : "no");
  return os.str();
}

}  // namespace vkgate
