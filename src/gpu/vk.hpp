// Internal: the Vulkan C API plus checked calls that turn failures into
// vkgate::Error naming the call, the VkResult and what we were doing.
#pragma once

#include <vulkan/vulkan.h>

#include <string>

#include "vkgate/error.hpp"

namespace vkgate::gpu {

const char* result_name(VkResult r) noexcept;

[[noreturn]] void throw_vk(VkResult r, const char* call, const std::string& doing);

// True when the environment variable is set to something other than "" or "0".
bool env_flag(const char* name);

inline void check(VkResult r, const char* call, const std::string& doing) {
  if (r != VK_SUCCESS) throw_vk(r, call, doing);
}

}  // namespace vkgate::gpu

// VK_CHECK(vkFoo(...), "what we were doing")
#define VK_CHECK(expr, doing) ::vkgate::gpu::check((expr), #expr, (doing))
