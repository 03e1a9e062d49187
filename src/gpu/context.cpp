#include <algorithm>
#include <chrono>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>

#include "gpu/context_device.hpp"
#include "gpu/context_impl.hpp"
#include "gpu/memory.hpp"
#include "gpu/pipeline.hpp"
#include "gpu/sanitizer.hpp"
#include "gpu/shaders.hpp"

namespace vkgate {

using namespace gpu::device;

namespace {

constexpr const char* kValidationLayer = "VK_LAYER_KHRONOS_validation";
std::vector<VkExtensionProperties> instance_extensions(const char* layer) {
  uint32_t n = 0;
  vkEnumerateInstanceExtensionProperties(layer, &n, nullptr);
  std::vector<VkExtensionProperties> v(n);
  vkEnumerateInstanceExtensionProperties(layer, &n, v.data());
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

}  // namespace

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

const char* to_string(Progress::Task task) noexcept {
  switch (task) {
    case Progress::Task::pipelines: return "compiling pipelines";
    case Progress::Task::tensors: return "loading tensors";
    case Progress::Task::prefill: return "prefill";
  }
  return "?";
}

Context::Context(const ContextOptions& options) : impl_(std::make_unique<Impl>()) {
  Impl& s = *impl_;
  const char* env_validation = std::getenv("VKGATE_VALIDATION");
  s.gpu_assisted = options.gpu_assisted_validation || (env_validation && std::strcmp(env_validation, "gpu") == 0);
  s.validation = options.validation || s.gpu_assisted || gpu::env_flag("VKGATE_VALIDATION");
  s.memory_limit = options.device_memory_limit;
  s.on_message = options.on_message;
  s.on_progress = options.on_progress;

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
  // Off unless asked for: one around every dispatch cost the H200 9 % of a
  // 0.6B decode step (295.6 tokens/s with them, 322.5 without, 2026-11-28),
  // lavapipe ~75 µs each (168 ms a step with them, 144 without).
  const bool want_timestamps = options.timestamps ? *options.timestamps : gpu::env_flag("VKGATE_TIMESTAMPS");
  s.info.timestamps = s.info.timestamps && want_timestamps;
  s.queue_family = uint32_t(compute_queue_family(s.physical));
  vkGetPhysicalDeviceMemoryProperties(s.physical, &s.memory_props);

  // Enable the optional features vkgate's paths can use when present.
  VkPhysicalDeviceShaderFloat16Int8Features f16{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_FLOAT16_INT8_FEATURES};
  VkPhysicalDevice16BitStorageFeatures s16{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_16BIT_STORAGE_FEATURES, &f16};
  VkPhysicalDeviceFeatures2 feats{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2, &s16};
  f16.shaderFloat16 = s.info.fp16_arithmetic;
  s16.storageBuffer16BitAccess = s.info.storage16;
  feats.features.shaderStorageBufferArrayDynamicIndexing = s.info.storage_buffer_arrays;
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
    memory_model.vulkanMemoryModelDeviceScope = VK_TRUE;  // (coopmat_prerequisites)
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
  // The int8-activation product's packed dot products (shaders/qmatmul_dot.comp).
  VkPhysicalDeviceShaderIntegerDotProductFeatures integer_dot{
      VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_INTEGER_DOT_PRODUCT_FEATURES};
  if (s.info.integer_dot_product) {
    if (api < VK_API_VERSION_1_3) enable.push_back(VK_KHR_SHADER_INTEGER_DOT_PRODUCT_EXTENSION_NAME);
    integer_dot.shaderIntegerDotProduct = VK_TRUE;
    chain(integer_dot);
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
  s.tuning = gpu::tuning_from_environment(s.info);
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

namespace {
VkResult wait_for(VkDevice device, VkFence fence, const gpu::FenceWait& w) {
  if (w.spin_ns == 0) return vkWaitForFences(device, 1, &fence, VK_TRUE, UINT64_MAX);
  if (w.sleep_ns)
    if (const VkResult r = vkWaitForFences(device, 1, &fence, VK_TRUE, w.sleep_ns); r != VK_TIMEOUT) return r;
  const auto until = std::chrono::steady_clock::now() + std::chrono::nanoseconds(w.spin_ns);
  for (;;) {
    if (const VkResult r = vkGetFenceStatus(device, fence); r != VK_NOT_READY) return r;
    if (std::chrono::steady_clock::now() >= until) return vkWaitForFences(device, 1, &fence, VK_TRUE, UINT64_MAX);
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
  }
}
}  // namespace

void Context::Impl::submit_and_wait(std::span<const VkCommandBuffer> cmds, VkFence fence, const char* doing,
                                    const gpu::FenceWait& wait) {
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
  r = wait_for(device, fence, wait);
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
