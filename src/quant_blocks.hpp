// The block codecs of ggml's formats behind vkgate/quant.hpp, split by
// family: quant.cpp (the 32-element Q8_0, Q4_0, Q4_1, Q5_0, Q5_1 and the
// dispatch), quant_k.cpp (the k-quants Q2_K ... Q6_K), quant_iq4.cpp (IQ4_NL,
// IQ4_XS). Each codec turns one block's bytes into its values (dequant_*) or
// values into bytes (quant_*), bit for bit as ggml does (quant.cpp says how).
//
// Included only by those three files, which CMake keeps out of unity
// batches: the pragmas below turn off FMA contraction for the rest of the
// including file, as ggml's x86-64 build has none in these loops.
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>

#include "vkgate/dtype.hpp"

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("fp-contract=off")
#endif
#if defined(__clang__)
#pragma clang fp contract(off)
#endif

namespace vkgate::quant_blocks {

constexpr int kSuperBlock = 256;        // QK_K
constexpr float kGroupMaxEps = 1e-15f;  // ggml's GROUP_MAX_EPS: below it a group counts as zero

inline float load_half(const uint8_t* p) { return half_to_float(uint16_t(p[0] | (p[1] << 8))); }

inline void store_half(uint8_t* p, float value) {
  const uint16_t h = float_to_half(value);
  p[0] = uint8_t(h & 0xff);
  p[1] = uint8_t(h >> 8);
}

// ggml's nearest_int: adding 1.5·2^23 leaves the rounded integer in the low
// mantissa bits (ties to even). Defined for every float; only meaningful for |x| < 2^22.
inline int round_even(float x) {
  const uint32_t bits = std::bit_cast<uint32_t>(x + 12582912.f);
  return int(bits & 0x007fffffu) - 0x00400000;
}

// The two halves of a 32-element block: element j in the low nibble of byte j,
// element j + 16 in the high nibble.
inline uint8_t pack_nibbles(int low, int high) { return uint8_t((low & 0x0f) | ((high & 0x0f) << 4)); }

// The signed value of largest magnitude among x[0..n) (the first such), as ggml picks it.
inline float signed_absmax(const float* x, int n) {
  float amax = 0.0f, max = 0.0f;
  for (int j = 0; j < n; ++j) {
    if (amax < std::fabs(x[j])) {
      amax = std::fabs(x[j]);
      max = x[j];
    }
  }
  return max;
}

// quant_k.cpp
void dequant_q4_k(const uint8_t* b, float* y);
void quant_q4_k(const float* x, uint8_t* b);
void dequant_q5_k(const uint8_t* b, float* y);
void quant_q5_k(const float* x, uint8_t* b);
void dequant_q6_k(const uint8_t* b, float* y);
void quant_q6_k(const float* x, uint8_t* b);
void dequant_q2_k(const uint8_t* b, float* y);
void quant_q2_k(const float* x, uint8_t* b);
void dequant_q3_k(const uint8_t* b, float* y);
void quant_q3_k(const float* x, uint8_t* b);
// quant_iq4.cpp
void dequant_iq4_nl(const uint8_t* b, float* y);
void quant_iq4_nl(const float* x, uint8_t* b);
void dequant_iq4_xs(const uint8_t* b, float* y);
void quant_iq4_xs(const float* x, uint8_t* b);

}  // namespace vkgate::quant_blocks
