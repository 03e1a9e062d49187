// Internal: the int8-activation product (shaders/quantize_q8.comp,
// shaders/qmatmul_dot.comp): X quantized per 32-element block to int8 with an
// fp32 scale, multiplied by Q8_0 or Q4_0 weights with packed 4×int8 integer
// dot products (DeviceInfo::integer_dot_product).
//
// Error against X·Wᵀ on the dequantized weights w: per element of X
// |x − d·q| ≤ d/2 = max|x_block|/254, so per output
//   |Δy| ≤ Σ_blocks (max|x_b|/254)·Σ_{i∈b} |w_i|
// plus fp32 rounding (x/d, the per-block products and their sum).
#pragma once

#include <cstddef>
#include <cstdint>

#include "ops/qmatmul.hpp"

namespace vkgate::ops {

// The words of quantize_q8's output for M rows of K elements (K a multiple of
// 32): the int8 values, 4 per word, row m at words m·K/4 .. (m+1)·K/4 − 1, then
// from word q8_scales_at(M, K) (a multiple of 4) the fp32 scales, block b of
// row m at q8_scales_at + m·K/32 + b. q8_bytes: the buffer it needs (whole
// 16-byte quads, which the kernels read).
uint32_t q8_scales_at(uint32_t M, uint32_t K);
size_t q8_bytes(uint32_t M, uint32_t K);

// X [M, K] (rows ldx apart, 0: K; stored as `s`) into `q` as above: per
// 32-element block d = max|x|/127 and q = round(x/d) (ties to even; 0 for a
// zero block). K must be a multiple of 32.
struct QuantizeQ8Args {
  const Buffer& x;
  const Buffer& q;
  uint32_t M, K;
  Storage s = Storage::f32;
  uint32_t ldx = 0;
};
void quantize_q8(Context::Impl& ctx, Recorder& rec, const QuantizeQ8Args& a);

// Whether the device multiplies rows of K elements of `wtype` with integer
// dot products: Q8_0 or Q4_0 (whole blocks), and DeviceInfo::integer_dot_product.
bool qmatmul_dot_takes(const DeviceInfo& d, DType wtype, uint32_t K);
// ops::qmatmul's product and epilogue (QmatmulArgs, the same meanings) with
// `x` quantize_q8's output for the same M and K (ldx is not used): y, bias,
// residual and the gate's scores as qmatmul takes them. Error(unsupported)
// where !qmatmul_dot_takes.
void qmatmul_dot(Context::Impl& ctx, Recorder& rec, const QmatmulArgs& a);

}  // namespace vkgate::ops
