#include "vkgate/precision.hpp"

namespace vkgate {

const char* to_string(Precision p) noexcept {
  switch (p) {
    case Precision::fp32: return "fp32";
    case Precision::fp16: return "fp16";
    case Precision::bf16: return "bf16";
  }
  return "?";
}

}  // namespace vkgate
