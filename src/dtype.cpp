#include "vkgate/dtype.hpp"

#include <bit>
#include <cmath>
#include <cstring>

namespace vkgate {

const char* to_string(DType dtype) noexcept {
  switch (dtype) {
    case DType::F32:
      return "F32";
    case DType::F16:
      return "F16";
    case DType::BF16:
      return "BF16";
    case DType::F64:
      return "F64";
    case DType::I64:
      return "I64";
    case DType::I32:
      return "I32";
    case DType::Q8_0: return "Q8_0";
    case DType::Q4_0: return "Q4_0";
    case DType::Q4_1: return "Q4_1";
    case DType::Q5_0: return "Q5_0";
    case DType::Q5_1: return "Q5_1";
    case DType::Q4_K: return "Q4_K";
    case DType::Q5_K: return "Q5_K";
    case DType::Q6_K: return "Q6_K";
    case DType::Q2_K: return "Q2_K";
    case DType::Q3_K: return "Q3_K";
    case DType::IQ4_NL: return "IQ4_NL";
    case DType::IQ4_XS: return "IQ4_XS";
  }
  return "?";
}

size_t dtype_size(DType dtype) noexcept {
  switch (dtype) {
    case DType::F32:
      return 4;
    case DType::F16:
      return 2;
    case DType::BF16:
      return 2;
    case DType::F64:
    case DType::I64:
      return 8;
    case DType::I32:
      return 4;
    default:
      return 0;
  }
}

size_t block_elements(DType dtype) noexcept {
  switch (dtype) {
    case DType::Q8_0:
    case DType::Q4_0:
    case DType::Q4_1:
    case DType::Q5_0:
    case DType::Q5_1:
    case DType::IQ4_NL: return 32;
    case DType::Q4_K:
    case DType::Q5_K:
    case DType::Q6_K:
    case DType::Q2_K:
    case DType::Q3_K:
    case DType::IQ4_XS: return 256;
    default: return 1;
  }
}

// ggml's block structs: fp16 scale (and min) then the packed quants; the
// k-quants' super-blocks add 6-bit sub-block scales (Q4_K, Q5_K, Q3_K),
// 8-bit ones (Q6_K) or 4-bit scale and min pairs (Q2_K); IQ4_NL is Q4_0's
// layout, IQ4_XS a super-block of 6-bit scales over IQ4_NL's nibbles.
size_t block_bytes(DType dtype) noexcept {
  switch (dtype) {
    case DType::Q8_0: return 2 + 32;
    case DType::Q4_0: return 2 + 16;
    case DType::Q4_1: return 4 + 16;
    case DType::Q5_0: return 2 + 4 + 16;
    case DType::Q5_1: return 4 + 4 + 16;
    case DType::Q4_K: return 4 + 12 + 128;
    case DType::Q5_K: return 4 + 12 + 32 + 128;
    case DType::Q6_K: return 128 + 64 + 16 + 2;
    case DType::Q2_K: return 16 + 64 + 2 + 2;
    case DType::Q3_K: return 32 + 64 + 12 + 2;
    case DType::IQ4_NL: return 2 + 16;
    case DType::IQ4_XS: return 2 + 2 + 4 + 128;
    default: return dtype_size(dtype);
  }
}

// ---- 16-bit float conversions ----

float half_to_float(uint16_t bits) noexcept {
  const uint32_t sign = uint32_t(bits & 0x8000u) << 16;
  const uint32_t exponent = (bits >> 10) & 0x1fu;
  const uint32_t mantissa = bits & 0x3ffu;
  if (exponent == 0) {  // zero or subnormal: mantissa · 2^-24, exact in float
    const float magnitude = std::ldexp(float(mantissa), -24);
    return sign ? -magnitude : magnitude;
  }
  if (exponent == 0x1f) return std::bit_cast<float>(sign | 0x7f800000u | (mantissa << 13));
  return std::bit_cast<float>(sign | ((exponent + 112) << 23) | (mantissa << 13));
}

namespace {

// `value >> shift`, rounded to nearest with ties to even (shift ≥ 1).
uint32_t shift_right_rne(uint32_t value, uint32_t shift) {
  const uint32_t kept = value >> shift;
  const uint32_t rest = value & ((1u << shift) - 1);
  const uint32_t half = 1u << (shift - 1);
  return (rest > half || (rest == half && (kept & 1u))) ? kept + 1 : kept;
}

}  // namespace

uint16_t float_to_half(float value) noexcept {
  const uint32_t x = std::bit_cast<uint32_t>(value);
  const auto sign = uint16_t((x >> 16) & 0x8000u);
  const uint32_t magnitude = x & 0x7fffffffu;
  if (magnitude > 0x7f800000u) return uint16_t(sign | 0x7e00u | ((magnitude >> 13) & 0x3ffu));
  // 65520 = 65504 + half an ulp: from there on, round-to-even gives infinity.
  if (magnitude >= 0x477ff000u) return uint16_t(sign | 0x7c00u);
  const uint32_t exponent = magnitude >> 23;  // float bias 127; half normals need ≥ 113
  if (exponent >= 113) {
    // Rebias the exponent in place; a mantissa carry correctly bumps the exponent.
    return uint16_t(sign | shift_right_rne(magnitude - (112u << 23), 13));
  }
  // Half subnormal (or zero): value / 2^-24 with the float's 24-bit significand.
  // Below 2^-25 (exponent < 102) everything rounds to zero.
  if (exponent < 102) return sign;
  const uint32_t significand = (magnitude & 0x7fffffu) | 0x800000u;
  return uint16_t(sign | shift_right_rne(significand, 126 - exponent));
}

float bf16_to_float(uint16_t bits) noexcept { return std::bit_cast<float>(uint32_t(bits) << 16); }

uint16_t float_to_bf16(float value) noexcept {
  const uint32_t x = std::bit_cast<uint32_t>(value);
  if ((x & 0x7fffffffu) > 0x7f800000u) return uint16_t((x >> 16) | 0x40u);  // keep NaN quiet
  return uint16_t((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

}  // namespace vkgate
