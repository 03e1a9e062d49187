#version 450
#extension GL_GOOGLE_include_directive : require
// Variants (the build compiles one SPIR-V module per line: name, then defines):
// variant: quantize_q8
// variant: quantize_q8_f16 X_T=F16
// variant: quantize_q8_bf16 X_T=BF16
// variant: quantize_q8_cpu TEXEL4
// variant: quantize_q8_cpu_f16 TEXEL4 X_T=F16
// Activations to int8 blocks for the integer-dot product (qmatmul_dot.comp):
// each 32-element block of X's rows (K a multiple of 32) becomes an fp32
// scale d = max|x|/127 and q = round(x/d) ∈ [−127, 127] (0 for a zero block),
// so that |x − d·q| ≤ d/2 = max|x_block|/254 per element (plus the rounding
// of x/d in fp32).
//
// Output (ops::quantize_q8's layout, words of the buffer q): row m's int8
// values packed 4 per word, little-endian, at words m·K/4 .. (m+1)·K/4 − 1;
// the scales as fp32 bits from word `d_at` (a multiple of 4), block b of row m
// at d_at + m·K/32 + b.
//
// One invocation per block. TEXEL4 (CPU drivers, ldx a multiple of 4): X read
// as RGBA texels, 8 per block (llvmpipe gathers texels; a storage load loops
// over the lanes).
#include "common.glsl"
#include "storage.glsl"
#ifndef X_T
#define X_T F32
#endif

#ifdef TEXEL4
layout(binding = 0) uniform samplerBuffer x_tex;
#else
RO(0, x, X_T)
#endif
layout(std430, binding = 1) writeonly buffer q_buf { uint q_words[]; };

#include "params.glsl"
struct Push {
  uint M, K, ldx, d_at;
};
PARAMS(Push)

void main() {
  LOAD_PARAMS;
  const uint blocks = p.K / 32u;
  const uint i = (gl_WorkGroupID.x + gl_WorkGroupID.y * gl_NumWorkGroups.x) * WG + gl_LocalInvocationID.x;
  if (i >= p.M * blocks) return;
  const uint m = i / blocks, b = i - m * blocks;
  vec4 v[8];
#ifdef TEXEL4
  const uint t0 = (m * p.ldx + 32u * b) / 4u;
  [[unroll]] for (uint k = 0; k < 8u; ++k) v[k] = texelFetch(x_tex, int(t0 + k));
#else
  const uint e0 = m * p.ldx + 32u * b;
  [[unroll]] for (uint k = 0; k < 8u; ++k)
    v[k] = vec4(x_ld(e0 + 4u * k), x_ld(e0 + 4u * k + 1u), x_ld(e0 + 4u * k + 2u), x_ld(e0 + 4u * k + 3u));
#endif
  vec4 amax4 = abs(v[0]);
  [[unroll]] for (uint k = 1; k < 8u; ++k) amax4 = max(amax4, abs(v[k]));
  const float amax = max(max(amax4.x, amax4.y), max(amax4.z, amax4.w));
  const float d = amax * (1.0 / 127.0);
  const float id = amax > 0.0 ? 127.0 / amax : 0.0;
  const uint q0 = m * (p.K / 4u) + 8u * b;
  [[unroll]] for (uint k = 0; k < 8u; ++k) {
    const ivec4 q = clamp(ivec4(roundEven(v[k] * id)), ivec4(-127), ivec4(127));
    const uvec4 u = uvec4(q) & 255u;
    q_words[q0 + k] = u.x | (u.y << 8) | (u.z << 16) | (u.w << 24);
  }
  q_words[p.d_at + i] = floatBitsToUint(d);
}
