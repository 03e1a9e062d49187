#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>

#include "gpu/context_impl.hpp"
#include "gpu/memory.hpp"
#include "gpu/pipeline.hpp"
#include "gpu/sanitizer.hpp"
#include "gpu/shaders.hpp"

namespace vkgate {

namespace {

constexpr const char* kValidationLayer = "VK_LAYER_KHRONOS_validation";
// The instance asks for Vulkan 1.3 (SPIR-V with cooperative-matrix types needs
// it); a device then offers min(this, its own version).
constexpr uint32_t kInstanceApi = VK_API_VERSION_1_3;
uint32_t usable_api(uint32_t device_api) { return std::min(device_api, kInstanceApi); }

bool has_extension(const std::vector<VkExtensionProperties>& exts, const char* name) {
  return std::any_of(exts.begin(), exts.end(),
                     [&](const VkExtensionProperties& e) { return std::strcmp(e.extensionName, name) == 0; });
}

std::vector<VkExtensionProperties> instance_extensions(const char* layer) {
  uint32_t n = 0;
  vkEnumerateInstanceExtensionProperties(layer, &n, nullptr);
  std::vector<VkExtensionProperties> v(n);
  vkEnumerateInstanceExtensionProperties(layer, &n, v.data());
  v.resize(n);
  return v;
}

std::vector<VkExtensionProperties> device_extensions(VkPhysicalDevice pd) {
  uint32_t n = 0;
  vkEnumerateDeviceExtensionProperties(pd, nullptr, &n, nullptr);
  std::vector<VkExtensionProperties> v(n);
  vkEnumerateDeviceExtensionProperties(pd, nullptr, &n, v.data());
  v.resize(n);
  return v;
}

bool layer_present(const char* name) {
  uint32_t n = 0;
  vkEnumerateInstanceLayerProperties(&n, nullptr);
  std::vector<VkLayerProperties> layers(n);
  vkEnumerateInstanceLayerProperties(&n, layers.data());
  for (uint32_t i = 0; i < n; ++i)
    if (std::strcmp(layers[i].layerName, name) == 0) return true;
  return false;
}

// The loader's informational chatter is not a problem in our code, nor is its
// warning that VK_INSTANCE_LAYERS added a layer (the user asked for it: that
// is how the README enables validation from the environment). Every other
// message (any layer, any type, warning or error) is counted.
bool loader_layer_notice(const char* id, const char* text) {
  return std::strcmp(id, "Loader Message") == 0 && text && std::strstr(text, "VK_INSTANCE_LAYERS") &&
         std::strstr(text, "adding layers");
}

VKAPI_ATTR VkBool32 VKAPI_CALL on_message(VkDebugUtilsMessageSeverityFlagBitsEXT severity,
                                          VkDebugUtilsMessageTypeFlagsEXT,
                                          const VkDebugUtilsMessengerCallbackDataEXT* data,
                                          void* user) {
  auto* impl = static_cast<Context::Impl*>(user);
  const char* id = data->pMessageIdName ? data->pMessageIdName : "";
  const bool loader_info = severity < VK_DEBUG_UTILS_MESSAGE_SEVERITY_WARNING_BIT_EXT;
  if (loader_info || loader_layer_notice(id, data->pMessage)) return VK_FALSE;
  std::string text = std::string(severity >= VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT ? "error" : "warning") +
                     " [" + id + "] " + (data->pMessage ? data->pMessage : "");
  if (impl->creating_instance) {  // single-threaded: inside our own vkCreateInstance
    impl->held_messages.push_back(std::move(text));
    return VK_FALSE;
  }
  impl->record_message(std::move(text));
  return VK_FALSE;
}

const char* type_name(VkPhysicalDeviceType t) {
  switch (t) {
    case VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU: return "discrete";
    case VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU: return "integrated";
    case VK_PHYSICAL_DEVICE_TYPE_VIRTUAL_GPU: return "virtual";
    case VK_PHYSICAL_DEVICE_TYPE_CPU: return "cpu";
    default: return "other";
  }
}

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

// VK_KHR_cooperative_matrix, as in the Vulkan registry: the headers of
// Debian 12 (1.3.239) predate it, so vkgate declares what it queries itself.
constexpr auto kCoopmatFeaturesKhr = VkStructureType(1000506000);
constexpr auto kCoopmatPropertiesKhr = VkStructureType(1000506001);
constexpr const char* kCoopmatKhrExtension = "VK_KHR_cooperative_matrix";
struct CoopmatFeaturesKhr {
  VkStructureType sType = kCoopmatFeaturesKhr;
  void* pNext = nullptr;
  VkBool32 cooperativeMatrix = VK_FALSE, cooperativeMatrixRobustBufferAccess = VK_FALSE;
};
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
// and storage, and the Vulkan memory model.
bool coopmat_prerequisites(VkPhysicalDevice pd, const DeviceInfo& d, uint32_t api) {
  if (!d.fp16_arithmetic || !d.storage16 || api < VK_API_VERSION_1_2 || gpu::env_flag("VKGATE_DISABLE_COOPMAT"))
    return false;
  return device_feature(pd, VkPhysicalDeviceVulkanMemoryModelFeatures{
                                VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_MEMORY_MODEL_FEATURES})
      .vulkanMemoryModel;
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
  d.coopmat_nv = has_extension(exts, VK_NV_COOPERATIVE_MATRIX_EXTENSION_NAME);
  d.coopmat_khr = has_extension(exts, kCoopmatKhrExtension);
  if (size_control) {
    const auto sc = device_feature(pd, VkPhysicalDeviceSubgroupSizeControlFeatures{
                                           VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_SIZE_CONTROL_FEATURES});
    d.subgroup_size_control = sc.subgroupSizeControl && sc.computeFullSubgroups &&
                              (ssc.requiredSubgroupSizeStages & VK_SHADER_STAGE_COMPUTE_BIT);
    d.max_workgroup_subgroups = ssc.maxComputeWorkgroupSubgroups;
  }
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

std::string lower(std::string s) {
  for (char& c : s) c = char(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::string device_list_text(const std::vector<DeviceInfo>& infos) {
  std::string s;
  for (const DeviceInfo& d : infos) s += (s.empty() ? "" : ", ") + std::to_string(d.index) + ": " + d.name;
  return s.empty() ? "none" : s;
}

// Index, name substring, or the best type. `from` says where the selector came from.
int choose_device(const std::vector<DeviceInfo>& infos, const std::vector<VkPhysicalDeviceType>& types,
                  const std::string& selector, const std::string& from) {
  if (infos.empty())
    throw Error(ErrorCode::no_device,
                "no Vulkan device with a compute queue was found (is a Vulkan driver installed? "
                "on Debian: apt-get install mesa-vulkan-drivers)");
  if (selector.empty()) {
    size_t best = 0;
    for (size_t i = 1; i < infos.size(); ++i)
      if (type_rank(types[i]) > type_rank(types[best])) best = i;
    return int(best);
  }
  const bool numeric = std::all_of(selector.begin(), selector.end(), [](char c) { return std::isdigit(static_cast<unsigned char>(c)); });
  if (numeric) {
    const long idx = std::strtol(selector.c_str(), nullptr, 10);
    for (size_t i = 0; i < infos.size(); ++i)
      if (infos[i].index == idx) return int(i);
    throw Error(ErrorCode::no_device, from + ": device index " + selector + " does not exist (devices: " +
                                          device_list_text(infos) + ")");
  }
  for (size_t i = 0; i < infos.size(); ++i)
    if (lower(infos[i].name).find(lower(selector)) != std::string::npos) return int(i);
  throw Error(ErrorCode::no_device, from + ": no device name contains '" + selector + "' (devices: " +
                                        device_list_text(infos) + ")");
}

struct Instance {
  VkInstance handle = VK_NULL_HANDLE;
  bool debug_utils = false;
};

Instance create_instance(bool validation, bool gpu_assisted, const VkDebugUtilsMessengerCreateInfoEXT* messenger_info) {
  const auto exts = instance_extensions(nullptr);
  std::vector<const char*> enable;
  Instance inst;
  inst.debug_utils = has_extension(exts, VK_EXT_DEBUG_UTILS_EXTENSION_NAME);
  std::vector<const char*> layers;
  VkValidationFeaturesEXT features{VK_STRUCTURE_TYPE_VALIDATION_FEATURES_EXT};
  // Synchronization validation, or GPU-assisted validation (with a descriptor
  // set slot of its own reserved, since vkgate binds set 0 only).
  const VkValidationFeatureEnableEXT sync[] = {VK_VALIDATION_FEATURE_ENABLE_SYNCHRONIZATION_VALIDATION_EXT};
  const VkValidationFeatureEnableEXT gpu[] = {VK_VALIDATION_FEATURE_ENABLE_GPU_ASSISTED_EXT,
                                              VK_VALIDATION_FEATURE_ENABLE_GPU_ASSISTED_RESERVE_BINDING_SLOT_EXT};
  const void* next = nullptr;
  if (validation) {
    if (!layer_present(kValidationLayer))
      throw Error(ErrorCode::unsupported,
                  "validation was requested but VK_LAYER_KHRONOS_validation is not installed "
                  "(on Debian: apt-get install vulkan-validationlayers)");
    layers.push_back(kValidationLayer);
    const auto layer_exts = instance_extensions(kValidationLayer);
    inst.debug_utils = inst.debug_utils || has_extension(layer_exts, VK_EXT_DEBUG_UTILS_EXTENSION_NAME);
    if (has_extension(layer_exts, VK_EXT_VALIDATION_FEATURES_EXTENSION_NAME) ||
        has_extension(exts, VK_EXT_VALIDATION_FEATURES_EXTENSION_NAME)) {
      enable.push_back(VK_EXT_VALIDATION_FEATURES_EXTENSION_NAME);
      features.enabledValidationFeatureCount = gpu_assisted ? 2 : 1;
      features.pEnabledValidationFeatures = gpu_assisted ? gpu : sync;
      next = &features;
    } else if (gpu_assisted) {
      throw Error(ErrorCode::unsupported,
                  "GPU-assisted validation was requested but the validation layer lacks VK_EXT_validation_features");
    }
  }
  if (inst.debug_utils) {
    enable.push_back(VK_EXT_DEBUG_UTILS_EXTENSION_NAME);
    // Chained so that messages from instance creation and destruction are caught too.
    auto* chained = const_cast<VkDebugUtilsMessengerCreateInfoEXT*>(messenger_info);
    if (chained) {
      chained->pNext = next;
      next = chained;
    }
  }
  VkInstanceCreateFlags flags = 0;
  if (has_extension(exts, VK_KHR_PORTABILITY_ENUMERATION_EXTENSION_NAME)) {
    enable.push_back(VK_KHR_PORTABILITY_ENUMERATION_EXTENSION_NAME);
    flags |= VK_INSTANCE_CREATE_ENUMERATE_PORTABILITY_BIT_KHR;
  }
  VkApplicationInfo app{VK_STRUCTURE_TYPE_APPLICATION_INFO};
  app.pApplicationName = "vkgate";
  app.pEngineName = "vkgate";
  app.apiVersion = kInstanceApi;
  VkInstanceCreateInfo ci{VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO, next, flags, &app};
  ci.enabledLayerCount = uint32_t(layers.size());
  ci.ppEnabledLayerNames = layers.data();
  ci.enabledExtensionCount = uint32_t(enable.size());
  ci.ppEnabledExtensionNames = enable.data();
  VkResult r = vkCreateInstance(&ci, nullptr, &inst.handle);
  if (r == VK_ERROR_INCOMPATIBLE_DRIVER) {
    std::string why = "no Vulkan driver was found (vkCreateInstance failed with VK_ERROR_INCOMPATIBLE_DRIVER)";
    if (const char* off = std::getenv("VK_LOADER_DRIVERS_DISABLE"); off && *off)
      why += "; VK_LOADER_DRIVERS_DISABLE='" + std::string(off) + "' disables drivers";
    else
      why += "; install one, e.g. on Debian: apt-get install mesa-vulkan-drivers";
    throw Error(ErrorCode::no_device, "creating the Vulkan instance: " + why, int32_t(r));
  }
  gpu::check(r, "vkCreateInstance", "creating the Vulkan instance");
  return inst;
}

// Devices usable by vkgate (Vulkan ≥ 1.1 with a compute queue), in loader order.
std::vector<VkPhysicalDevice> usable_devices(VkInstance instance) {
  uint32_t n = 0;
  VK_CHECK(vkEnumeratePhysicalDevices(instance, &n, nullptr), "enumerating Vulkan devices");
  std::vector<VkPhysicalDevice> all(n);
  VK_CHECK(vkEnumeratePhysicalDevices(instance, &n, all.data()), "enumerating Vulkan devices");
  std::vector<VkPhysicalDevice> out;
  for (VkPhysicalDevice pd : all) {
    VkPhysicalDeviceProperties p{};
    vkGetPhysicalDeviceProperties(pd, &p);
    if (p.apiVersion >= VK_API_VERSION_1_1 && compute_queue_family(pd) >= 0) out.push_back(pd);
  }
  return out;
}

std::string human_bytes(uint64_t b) {
  std::ostringstream os;
  if (b >= (1ull << 30)) os << (b >> 30) << " GiB";
  else if (b >= (1ull << 20)) os << (b >> 20) << " MiB";
  else os << (b >> 10) << " KiB";
  return os.str();
}

}  // namespace

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
     << " timestamps=" << (timestamps ? "yes" : "no");
  return os.str();
}

std::vector<DeviceInfo> Context::list_devices() {
  Instance inst = create_instance(false, false, nullptr);
  gpu::keep_vulkan_modules_loaded();
  std::vector<DeviceInfo> infos;
  try {
    const auto pds = usable_devices(inst.handle);
    for (size_t i = 0; i < pds.size(); ++i) infos.push_back(describe(inst.handle, pds[i], int(i)));
  } catch (...) {
    vkDestroyInstance(inst.handle, nullptr);
    throw;
  }
  vkDestroyInstance(inst.handle, nullptr);
  return infos;
}

Context::Context(const ContextOptions& options) : impl_(std::make_unique<Impl>()) {
  Impl& s = *impl_;
  const char* env_validation = std::getenv("VKGATE_VALIDATION");
  s.gpu_assisted = options.gpu_assisted_validation || (env_validation && std::strcmp(env_validation, "gpu") == 0);
  s.validation = options.validation || s.gpu_assisted || gpu::env_flag("VKGATE_VALIDATION");
  s.memory_limit = options.device_memory_limit;
  s.on_message = options.on_message;

  VkDebugUtilsMessengerCreateInfoEXT mci{VK_STRUCTURE_TYPE_DEBUG_UTILS_MESSENGER_CREATE_INFO_EXT};
  mci.messageSeverity = VK_DEBUG_UTILS_MESSAGE_SEVERITY_WARNING_BIT_EXT | VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT;
  mci.messageType = VK_DEBUG_UTILS_MESSAGE_TYPE_GENERAL_BIT_EXT | VK_DEBUG_UTILS_MESSAGE_TYPE_VALIDATION_BIT_EXT |
                    VK_DEBUG_UTILS_MESSAGE_TYPE_PERFORMANCE_BIT_EXT;
  mci.pfnUserCallback = on_message;
  mci.pUserData = &s;

  s.creating_instance = true;
  Instance inst;
  try {
    inst = create_instance(s.validation, s.gpu_assisted, &mci);
  } catch (...) {
    s.creating_instance = false;
    s.held_messages.clear();
    throw;
  }
  s.creating_instance = false;
  s.instance = inst.handle;
  gpu::keep_vulkan_modules_loaded();  // sanitizer builds only: see gpu/sanitizer.hpp
  for (std::string& m : s.held_messages) s.record_message(std::move(m));
  s.held_messages.clear();
  if (inst.debug_utils) {
    mci.pNext = nullptr;
    auto create = reinterpret_cast<PFN_vkCreateDebugUtilsMessengerEXT>(
        vkGetInstanceProcAddr(s.instance, "vkCreateDebugUtilsMessengerEXT"));
    if (create) VK_CHECK(create(s.instance, &mci, nullptr, &s.messenger), "installing the debug messenger");
  }

  const auto pds = usable_devices(s.instance);
  std::vector<DeviceInfo> infos;
  std::vector<VkPhysicalDeviceType> types;
  for (size_t i = 0; i < pds.size(); ++i) {
    infos.push_back(describe(s.instance, pds[i], int(i)));
    VkPhysicalDeviceProperties p{};
    vkGetPhysicalDeviceProperties(pds[i], &p);
    types.push_back(p.deviceType);
  }
  std::string selector = options.device, from = "device selector";
  if (selector.empty()) {
    if (const char* env = std::getenv("VKGATE_DEVICE"); env && *env) {
      selector = env;
      from = "VKGATE_DEVICE";
    }
  }
  const int chosen = choose_device(infos, types, selector, from);
  s.physical = pds[chosen];
  s.info = infos[chosen];
  s.queue_family = uint32_t(compute_queue_family(s.physical));
  vkGetPhysicalDeviceMemoryProperties(s.physical, &s.memory_props);

  // Enable the optional features vkgate's paths can use when present.
  VkPhysicalDeviceShaderFloat16Int8Features f16{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_FLOAT16_INT8_FEATURES};
  VkPhysicalDevice16BitStorageFeatures s16{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_16BIT_STORAGE_FEATURES, &f16};
  VkPhysicalDeviceFeatures2 feats{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2, &s16};
  f16.shaderFloat16 = s.info.fp16_arithmetic;
  s16.storageBuffer16BitAccess = s.info.storage16;
  const auto dev_exts = device_extensions(s.physical);
  std::vector<const char*> enable;
  VkPhysicalDeviceProperties base{};
  vkGetPhysicalDeviceProperties(s.physical, &base);
  const uint32_t api = usable_api(base.apiVersion);
  if (api < VK_API_VERSION_1_2) {
    // 1.1 devices expose fp16 arithmetic only through the extension.
    if (s.info.fp16_arithmetic && has_extension(dev_exts, VK_KHR_SHADER_FLOAT16_INT8_EXTENSION_NAME))
      enable.push_back(VK_KHR_SHADER_FLOAT16_INT8_EXTENSION_NAME);
    else
      f16.shaderFloat16 = VK_FALSE;
  }

  auto chain = [&](auto& features) {
    features.pNext = f16.pNext;
    f16.pNext = &features;
  };
  // The tensor-core kernels need their extension, its feature and the Vulkan memory model.
  VkPhysicalDeviceVulkanMemoryModelFeatures memory_model{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_MEMORY_MODEL_FEATURES};
  VkPhysicalDeviceCooperativeMatrixFeaturesNV coopmat{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_FEATURES_NV};
  CoopmatFeaturesKhr coopmat_khr;
  if (s.info.coopmat_f16 || s.info.coopmat_f16_khr) {
    memory_model.vulkanMemoryModel = VK_TRUE;
    chain(memory_model);
  }
  if (s.info.coopmat_f16) {
    enable.push_back(VK_NV_COOPERATIVE_MATRIX_EXTENSION_NAME);
    coopmat.cooperativeMatrix = VK_TRUE;
    chain(coopmat);
  }
  if (s.info.coopmat_f16_khr) {
    enable.push_back(kCoopmatKhrExtension);
    coopmat_khr.cooperativeMatrix = VK_TRUE;
    chain(coopmat_khr);
  }
  // Pipelines that ask for a subgroup size (gpu::PipelineCache::get).
  VkPhysicalDeviceSubgroupSizeControlFeatures size_control{
      VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_SIZE_CONTROL_FEATURES};
  if (s.info.subgroup_size_control) {
    if (api < VK_API_VERSION_1_3) enable.push_back(VK_EXT_SUBGROUP_SIZE_CONTROL_EXTENSION_NAME);
    size_control.subgroupSizeControl = size_control.computeFullSubgroups = VK_TRUE;
    chain(size_control);
  }

  // Compiler statistics of each pipeline, for tuning kernels on real GPUs.
  VkPhysicalDevicePipelineExecutablePropertiesFeaturesKHR exec_props{
      VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PIPELINE_EXECUTABLE_PROPERTIES_FEATURES_KHR, feats.pNext};
  if (gpu::env_flag("VKGATE_PIPELINE_STATS")) {
    if (has_extension(dev_exts, VK_KHR_PIPELINE_EXECUTABLE_PROPERTIES_EXTENSION_NAME)) {
      enable.push_back(VK_KHR_PIPELINE_EXECUTABLE_PROPERTIES_EXTENSION_NAME);
      exec_props.pipelineExecutableInfo = VK_TRUE;
      feats.pNext = &exec_props;
      s.pipeline_stats = true;
    } else {
      std::fprintf(stderr, "vkgate: VKGATE_PIPELINE_STATS: %s lacks VK_KHR_pipeline_executable_properties\n",
                   s.info.name.c_str());
    }
  }

  const float priority = 1.0f;
  VkDeviceQueueCreateInfo qci{VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO};
  qci.queueFamilyIndex = s.queue_family;
  qci.queueCount = 1;
  qci.pQueuePriorities = &priority;
  VkDeviceCreateInfo dci{VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO, &feats};
  dci.queueCreateInfoCount = 1;
  dci.pQueueCreateInfos = &qci;
  dci.enabledExtensionCount = uint32_t(enable.size());
  dci.ppEnabledExtensionNames = enable.data();
  VK_CHECK(vkCreateDevice(s.physical, &dci, nullptr, &s.device), "creating the device for " + s.info.name);
  vkGetDeviceQueue(s.device, s.queue_family, 0, &s.queue);

  s.allocator = std::make_unique<gpu::Allocator>(s);
  s.pipelines = std::make_unique<gpu::PipelineCache>(s);
  s.tuning = gpu::tuning_from_environment();
}

Context::Impl::~Impl() {
  if (device) vkDeviceWaitIdle(device);
  pipelines.reset();
  allocator.reset();
  if (device) vkDestroyDevice(device, nullptr);
  if (messenger) {
    auto destroy = reinterpret_cast<PFN_vkDestroyDebugUtilsMessengerEXT>(
        vkGetInstanceProcAddr(instance, "vkDestroyDebugUtilsMessengerEXT"));
    if (destroy) destroy(instance, messenger, nullptr);
  }
  if (instance) vkDestroyInstance(instance, nullptr);
}

void Context::Impl::record_message(std::string text) {
  std::fprintf(stderr, "vkgate: validation %s\n", text.c_str());
  message_count.fetch_add(1);
  if (on_message) on_message(text);
  std::lock_guard<std::mutex> lock(messages_mutex);
  messages.push_back(std::move(text));
}

void Context::Impl::check_not_lost(const std::string& doing) const {
  if (lost.load())
    throw Error(ErrorCode::device_lost,
                doing + ": the Vulkan device was lost earlier (VK_ERROR_DEVICE_LOST); this Context can run "
                        "nothing more, create a new Context",
                int32_t(VK_ERROR_DEVICE_LOST));
}

void Context::Impl::submit_and_wait(std::span<const VkCommandBuffer> cmds, VkFence fence, const char* doing) {
  check_not_lost(doing);
  VkSubmitInfo si{VK_STRUCTURE_TYPE_SUBMIT_INFO};
  si.commandBufferCount = uint32_t(cmds.size());
  si.pCommandBuffers = cmds.data();
  auto fail = [&](VkResult r, const char* call) {
    if (r == VK_ERROR_DEVICE_LOST) lost = true;
    gpu::throw_vk(r, call, doing);
  };
  VkResult r;
  {
    std::lock_guard<std::mutex> lock(queue_mutex);
    r = vkQueueSubmit(queue, 1, &si, fence);
  }
  if (r != VK_SUCCESS) fail(r, "vkQueueSubmit");
  r = vkWaitForFences(device, 1, &fence, VK_TRUE, UINT64_MAX);
  if (const int32_t injected = inject_wait.exchange(0); injected != 0 && r == VK_SUCCESS) r = VkResult(injected);
  if (r != VK_SUCCESS) {
    if (r != VK_ERROR_DEVICE_LOST) {
      // Out of memory while waiting: let the work drain so the fence and the
      // command buffer can be used again.
      vkDeviceWaitIdle(device);
      vkResetFences(device, 1, &fence);
    }
    fail(r, "vkWaitForFences");
  }
  r = vkResetFences(device, 1, &fence);
  if (r != VK_SUCCESS) fail(r, "vkResetFences");
}

Context::~Context() = default;

const DeviceInfo& Context::device() const { return impl_->info; }
bool Context::validation_enabled() const { return impl_->validation; }
bool Context::gpu_assisted_validation_enabled() const { return impl_->gpu_assisted; }
bool Context::device_lost() const { return impl_->lost.load(); }
uint64_t Context::device_memory_allocated() const { return impl_->allocator->bytes_allocated(); }
uint64_t Context::device_memory_in_use() const { return impl_->allocator->bytes_in_use(); }
uint64_t Context::validation_messages() const { return impl_->message_count.load(); }

std::vector<std::string> Context::take_validation_messages() {
  std::lock_guard<std::mutex> lock(impl_->messages_mutex);
  std::vector<std::string> out;
  out.swap(impl_->messages);
  impl_->message_count = 0;
  return out;
}

}  // namespace vkgate
