// Element types of host tensors and their fp16/bf16 <-> fp32 conversions.
//
// Thread safety: pure functions on values; call them from any thread.
#pragma once

#include <cstddef>
#include <cstdint>

namespace vkgate {

// The element types vkgate reads and writes; a file holding any other dtype
// (F8_E4M3, U8, IQ2_XXS, ...) is rejected when opened, naming the tensor and
// dtype. The integer types hold token ids (input_ids); activations are always
// one of the floating-point types. Weights may also be in one of ggml's block
// formats (Q8_0 ... Q6_K, Q2_K, Q3_K, IQ4_NL, IQ4_XS, bit for bit as GGUF
// stores them: vkgate/quant.hpp), where `block_elements` consecutive
// elements of a row share one block of `block_bytes` bytes.
enum class DType {
  F32, F16, BF16, F64, I64, I32,
  Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K, Q2_K, Q3_K, IQ4_NL, IQ4_XS
};

const char* to_string(DType dtype) noexcept;  // "F32", "BF16", ... (safetensors), "Q4_K", ... (ggml)
constexpr bool is_integer(DType dtype) noexcept { return dtype == DType::I64 || dtype == DType::I32; }
constexpr bool is_quantized(DType dtype) noexcept { return dtype >= DType::Q8_0; }
// Bytes per element of the plain types; 0 for the block formats (block_bytes).
size_t dtype_size(DType dtype) noexcept;
// Elements per block (32 or 256 for the block formats, 1 otherwise) and bytes per block.
size_t block_elements(DType dtype) noexcept;
size_t block_bytes(DType dtype) noexcept;

// IEEE binary16 and bfloat16 bit patterns. The float -> 16-bit directions round
// to nearest, ties to even; overflow gives ±inf and NaN stays NaN (quiet).
float half_to_float(uint16_t bits) noexcept;
uint16_t float_to_half(float value) noexcept;
float bf16_to_float(uint16_t bits) noexcept;
uint16_t float_to_bf16(float value) noexcept;

}  // namespace vkgate
