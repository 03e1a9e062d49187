// Internal: the Vulkan C API plus checked calls that turn failures into
// vkgate::Error naming the call, the VkResult and what we were doing.
#pragma once

#include <vulkan/vulkan.h>

#include <cstdint>
#include <span>
#include <string>

#include "vkgate/error.hpp"

namespace vkgate::gpu {

// "VK_ERROR_DEVICE_LOST", ...; nullptr for a value the table does not know.
const char* result_name(VkResult r) noexcept;
// The name, or "VkResult(N)" for an unknown value.
std::string result_text(VkResult r);
// Every VkResult value result_name knows (for the error-surface test).
std::span<const int32_t> known_results() noexcept;

// The Error for a failed call: code out_of_memory for VK_ERROR_OUT_OF_*_MEMORY,
// device_lost for VK_ERROR_DEVICE_LOST, vulkan otherwise; the message is
// "DOING: CALL failed with VK_RESULT_NAME" (plus a hint for the first two).
Error vk_error(VkResult r, const char* call, const std::string& doing);
[[noreturn]] void throw_vk(VkResult r, const char* call, const std::string& doing);

inline void check(VkResult r, const char* call, const std::string& doing) {
  if (r != VK_SUCCESS) throw_vk(r, call, doing);
}

}  // namespace vkgate::gpu

// VK_CHECK(vkFoo(...), "what we were doing")
#define VK_CHECK(expr, doing) ::vkgate::gpu::check((expr), #expr, (doing))
