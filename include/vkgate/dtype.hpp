// Element types of host tensors and their fp16/bf16 <-> fp32 conversions.
//
// Thread safety: pure functions on values; call them from any thread.
#pragma once

#include <cstddef>
#include <cstdint>

namespace vkgate {

// The element types vkgate reads and writes; a file holding any other dtype
// (F8_E4M3, U8, ...) is rejected when opened, naming the tensor and dtype.
// The integer types hold token ids (input_ids); weights and activations are
// always one of the floating-point types.
enum class DType { F32, F16, BF16, F64, I64, I32 };

const char* to_string(DType dtype) noexcept;  // the safetensors spelling: "F32", "BF16", ...
size_t dtype_size(DType dtype) noexcept;      // bytes per element
constexpr bool is_integer(DType dtype) noexcept { return dtype == DType::I64 || dtype == DType::I32; }

// IEEE binary16 and bfloat16 bit patterns. The float -> 16-bit directions round
// to nearest, ties to even; overflow gives ±inf and NaN stays NaN (quiet).
float half_to_float(uint16_t bits) noexcept;
uint16_t float_to_half(float value) noexcept;
float bf16_to_float(uint16_t bits) noexcept;
uint16_t float_to_bf16(float value) noexcept;

}  // namespace vkgate
