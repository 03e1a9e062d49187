#include "gpu/vk.hpp"

#include <array>
#include <string>

namespace vkgate::gpu {

namespace {
// Every VkResult of the Vulkan 1.3 headers, by value, so that the table builds
// against older headers too (Vulkan ≥ 1.2 is required) and names results the
// driver returns even when the headers we were built with predate them.
struct ResultName {
  int32_t value;
  const char* name;
};
constexpr ResultName kResults[] = {
    {0, "VK_SUCCESS"},
    {1, "VK_NOT_READY"},
    {2, "VK_TIMEOUT"},
    {3, "VK_EVENT_SET"},
    {4, "VK_EVENT_RESET"},
    {5, "VK_INCOMPLETE"},
    {-1, "VK_ERROR_OUT_OF_HOST_MEMORY"},
    {-2, "VK_ERROR_OUT_OF_DEVICE_MEMORY"},
    {-3, "VK_ERROR_INITIALIZATION_FAILED"},
    {-4, "VK_ERROR_DEVICE_LOST"},
    {-5, "VK_ERROR_MEMORY_MAP_FAILED"},
    {-6, "VK_ERROR_LAYER_NOT_PRESENT"},
    {-7, "VK_ERROR_EXTENSION_NOT_PRESENT"},
    {-8, "VK_ERROR_FEATURE_NOT_PRESENT"},
    {-9, "VK_ERROR_INCOMPATIBLE_DRIVER"},
    {-10, "VK_ERROR_TOO_MANY_OBJECTS"},
    {-11, "VK_ERROR_FORMAT_NOT_SUPPORTED"},
    {-12, "VK_ERROR_FRAGMENTED_POOL"},
    {-13, "VK_ERROR_UNKNOWN"},
    {-1000069000, "VK_ERROR_OUT_OF_POOL_MEMORY"},
    {-1000072003, "VK_ERROR_INVALID_EXTERNAL_HANDLE"},
    {-1000161000, "VK_ERROR_FRAGMENTATION"},
    {-1000257000, "VK_ERROR_INVALID_OPAQUE_CAPTURE_ADDRESS"},
    {1000297000, "VK_PIPELINE_COMPILE_REQUIRED"},
    {-1000000000, "VK_ERROR_SURFACE_LOST_KHR"},
    {-1000000001, "VK_ERROR_NATIVE_WINDOW_IN_USE_KHR"},
    {1000001003, "VK_SUBOPTIMAL_KHR"},
    {-1000001004, "VK_ERROR_OUT_OF_DATE_KHR"},
    {-1000003001, "VK_ERROR_INCOMPATIBLE_DISPLAY_KHR"},
    {-1000011001, "VK_ERROR_VALIDATION_FAILED_EXT"},
    {-1000012000, "VK_ERROR_INVALID_SHADER_NV"},
    {-1000023000, "VK_ERROR_IMAGE_USAGE_NOT_SUPPORTED_KHR"},
    {-1000023001, "VK_ERROR_VIDEO_PICTURE_LAYOUT_NOT_SUPPORTED_KHR"},
    {-1000023002, "VK_ERROR_VIDEO_PROFILE_OPERATION_NOT_SUPPORTED_KHR"},
    {-1000023003, "VK_ERROR_VIDEO_PROFILE_FORMAT_NOT_SUPPORTED_KHR"},
    {-1000023004, "VK_ERROR_VIDEO_PROFILE_CODEC_NOT_SUPPORTED_KHR"},
    {-1000023005, "VK_ERROR_VIDEO_STD_VERSION_NOT_SUPPORTED_KHR"},
    {-1000158000, "VK_ERROR_INVALID_DRM_FORMAT_MODIFIER_PLANE_LAYOUT_EXT"},
    {-1000174001, "VK_ERROR_NOT_PERMITTED_KHR"},
    {-1000255000, "VK_ERROR_FULL_SCREEN_EXCLUSIVE_MODE_LOST_EXT"},
    {1000268000, "VK_THREAD_IDLE_KHR"},
    {1000268001, "VK_THREAD_DONE_KHR"},
    {1000268002, "VK_OPERATION_DEFERRED_KHR"},
    {1000268003, "VK_OPERATION_NOT_DEFERRED_KHR"},
    {-1000338000, "VK_ERROR_COMPRESSION_EXHAUSTED_EXT"},
};
}  // namespace

const char* result_name(VkResult r) noexcept {
  for (const ResultName& n : kResults)
    if (n.value == int32_t(r)) return n.name;
  return nullptr;
}

std::string result_text(VkResult r) {
  if (const char* n = result_name(r)) return n;
  return "VkResult(" + std::to_string(int32_t(r)) + ")";
}

std::span<const int32_t> known_results() noexcept {
  static const auto values = [] {
    std::array<int32_t, std::size(kResults)> v{};
    for (size_t i = 0; i < v.size(); ++i) v[i] = kResults[i].value;
    return v;
  }();
  return values;
}

Error vk_error(VkResult r, const char* call, const std::string& doing) {
  ErrorCode code = ErrorCode::vulkan;
  if (r == VK_ERROR_OUT_OF_DEVICE_MEMORY || r == VK_ERROR_OUT_OF_HOST_MEMORY)
    code = ErrorCode::out_of_memory;
  else if (r == VK_ERROR_DEVICE_LOST)
    code = ErrorCode::device_lost;
  std::string name(call);  // the call text up to its argument list
  name = name.substr(0, name.find('('));
  std::string msg = doing + ": " + name + " failed with " + result_text(r);
  if (code == ErrorCode::device_lost) msg += " (the Vulkan device was lost; create a new Context)";
  if (r == VK_ERROR_OUT_OF_DEVICE_MEMORY) msg += " (device memory is exhausted)";
  if (r == VK_ERROR_OUT_OF_HOST_MEMORY) msg += " (host memory is exhausted)";
  return Error(code, msg, int32_t(r));
}

void throw_vk(VkResult r, const char* call, const std::string& doing) { throw vk_error(r, call, doing); }

}  // namespace vkgate::gpu
