#include "gpu/vk.hpp"

#include <cstdlib>
#include <cstring>
#include <string>

namespace vkgate::gpu {

const char* result_name(VkResult r) noexcept {
  switch (r) {
#define CASE(x) \
  case x: return #x;
    CASE(VK_SUCCESS)
    CASE(VK_NOT_READY)
    CASE(VK_TIMEOUT)
    CASE(VK_EVENT_SET)
    CASE(VK_EVENT_RESET)
    CASE(VK_INCOMPLETE)
    CASE(VK_ERROR_OUT_OF_HOST_MEMORY)
    CASE(VK_ERROR_OUT_OF_DEVICE_MEMORY)
    CASE(VK_ERROR_INITIALIZATION_FAILED)
    CASE(VK_ERROR_DEVICE_LOST)
    CASE(VK_ERROR_MEMORY_MAP_FAILED)
    CASE(VK_ERROR_LAYER_NOT_PRESENT)
    CASE(VK_ERROR_EXTENSION_NOT_PRESENT)
    CASE(VK_ERROR_FEATURE_NOT_PRESENT)
    CASE(VK_ERROR_INCOMPATIBLE_DRIVER)
    CASE(VK_ERROR_TOO_MANY_OBJECTS)
    CASE(VK_ERROR_FORMAT_NOT_SUPPORTED)
    CASE(VK_ERROR_FRAGMENTED_POOL)
    CASE(VK_ERROR_UNKNOWN)
    CASE(VK_ERROR_OUT_OF_POOL_MEMORY)
    CASE(VK_ERROR_INVALID_EXTERNAL_HANDLE)
    CASE(VK_ERROR_FRAGMENTATION)
    CASE(VK_ERROR_INVALID_OPAQUE_CAPTURE_ADDRESS)
    CASE(VK_PIPELINE_COMPILE_REQUIRED)
#undef CASE
    default: return "VK_RESULT_UNKNOWN";
  }
}

bool env_flag(const char* name) {
  const char* v = std::getenv(name);
  return v && *v && std::strcmp(v, "0") != 0;
}

void throw_vk(VkResult r, const char* call, const std::string& doing) {
  ErrorCode code = ErrorCode::vulkan;
  if (r == VK_ERROR_OUT_OF_DEVICE_MEMORY || r == VK_ERROR_OUT_OF_HOST_MEMORY)
    code = ErrorCode::out_of_memory;
  else if (r == VK_ERROR_DEVICE_LOST)
    code = ErrorCode::device_lost;
  std::string name(call);  // the call text up to its argument list
  name = name.substr(0, name.find('('));
  std::string msg = doing + ": " + name + " failed with " + result_name(r);
  if (code == ErrorCode::device_lost) msg += " (the Vulkan device was lost)";
  throw Error(code, msg);
}

}  // namespace vkgate::gpu
