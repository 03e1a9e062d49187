// vkgate::Error — the one exception type the library throws.
#pragma once

#include <stdexcept>
#include <string>

namespace vkgate {

enum class ErrorCode {
  invalid_argument,  // a caller passed an impossible shape, size or option
  invalid_config,    // a BlockConfig field (or config.json key) is wrong
  missing_tensor,    // a weight/input tensor the block needs is absent
  shape_mismatch,    // a tensor is present but has the wrong shape or size
  io,                // a file could not be opened, read, written or parsed
  no_device,         // no Vulkan device, or the selector matched none
  unsupported,       // the device lacks a feature the request needs
  out_of_memory,     // host or device memory exhausted
  device_lost,       // VK_ERROR_DEVICE_LOST
  vulkan,            // any other failing Vulkan call
  validation,        // the validation layer reported a problem
};

const char* to_string(ErrorCode code) noexcept;

class Error : public std::runtime_error {
 public:
  Error(ErrorCode code, const std::string& message)
      : std::runtime_error(message), code_(code) {}
  ErrorCode code() const noexcept { return code_; }

 private:
  ErrorCode code_;
};

}  // namespace vkgate
