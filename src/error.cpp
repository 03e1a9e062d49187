#include "vkgate/error.hpp"

namespace vkgate {

const char* to_string(ErrorCode code) noexcept {
  switch (code) {
    case ErrorCode::invalid_argument: return "invalid argument";
    case ErrorCode::invalid_config: return "invalid config";
    case ErrorCode::missing_tensor: return "missing tensor";
    case ErrorCode::shape_mismatch: return "shape mismatch";
    case ErrorCode::io: return "i/o error";
    case ErrorCode::no_device: return "no device";
    case ErrorCode::unsupported: return "unsupported";
    case ErrorCode::out_of_memory: return "out of memory";
    case ErrorCode::device_lost: return "device lost";
    case ErrorCode::vulkan: return "vulkan error";
    case ErrorCode::validation: return "validation error";
    case ErrorCode::non_finite: return "non-finite value";
  }
  return "unknown error";
}

std::span<const ErrorCode> all_error_codes() noexcept {
  static constexpr ErrorCode codes[] = {
      ErrorCode::invalid_argument, ErrorCode::invalid_config, ErrorCode::missing_tensor, ErrorCode::shape_mismatch,
      ErrorCode::io,               ErrorCode::no_device,      ErrorCode::unsupported,    ErrorCode::out_of_memory,
      ErrorCode::device_lost,      ErrorCode::vulkan,         ErrorCode::validation,     ErrorCode::non_finite,
  };
  return codes;
}

}  // namespace vkgate
