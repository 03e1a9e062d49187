// vkgate::Error — the one exception type the library throws.
//
// Every failure of the library is an Error carrying a code (below) and a
// message that says what was being done, naming the tensor, key, file or
// device involved; for a failing Vulkan call it also names the call and its
// VkResult, e.g.
//   "uploading 'o_proj.weight': vkQueueSubmit failed with VK_ERROR_DEVICE_LOST
//    (the Vulkan device was lost; create a new Context)"
// Nothing else escapes the library except std::bad_alloc when host memory runs
// out outside a Vulkan call.
//
// Thread safety: an Error is an immutable value; to_string and
// all_error_codes may be called from any thread.
#pragma once

#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>

namespace vkgate {

enum class ErrorCode {
  invalid_argument,  // a caller passed an impossible shape, size or option
  invalid_config,    // a BlockConfig field (or config.json key) is wrong
  missing_tensor,    // a weight/input tensor the block needs is absent
  shape_mismatch,    // a tensor is present but has the wrong shape or size
  io,                // a file could not be opened, read, written or parsed
  no_device,         // no Vulkan driver or device, or the selector matched none
  unsupported,       // the device lacks a feature or a limit the request needs
  out_of_memory,     // host or device memory exhausted (or the Context's memory limit)
  device_lost,       // VK_ERROR_DEVICE_LOST: the Context can run nothing more
  vulkan,            // any other failing Vulkan call
  validation,        // the validation layer reported a problem
  non_finite,        // a NaN or Inf in an input, a weight or the output (BlockOptions::check_finite)
};

// A short lower-case name: "invalid argument", "device lost", ...
const char* to_string(ErrorCode code) noexcept;
// Every ErrorCode, in declaration order.
std::span<const ErrorCode> all_error_codes() noexcept;

class Error : public std::runtime_error {
 public:
  Error(ErrorCode code, const std::string& message, int32_t vk_result = 0)
      : std::runtime_error(message), code_(code), vk_result_(vk_result) {}
  ErrorCode code() const noexcept { return code_; }
  // The VkResult of the failing Vulkan call (a negative value), 0 when the
  // error did not come from a Vulkan call.
  int32_t vk_result() const noexcept { return vk_result_; }

 private:
  ErrorCode code_;
  int32_t vk_result_;
};

}  // namespace vkgate
