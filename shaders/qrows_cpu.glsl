// The CPU drivers' decode product over block-quantized rows, shared by
// qmatmul.comp and moe_matmul.comp (their ROWS_CPU variants): one 8-lane
// subgroup sums acc[i][j] = X[xrow i]·W[wrow j] for MR rows of X and NB
// columns, then subgroupAdd reduces the lanes' shares.
//
// Block formats: lane l takes the 32-element slices l, l + 8, ... of each
// row (blocks.glsl's block_slice: a block's scales read once per slice, not
// per 8 elements), X's 32 elements of a slice fetched once for all NB
// columns, and Σx per 16 kept for the formats' offsets (w = a·q + c). F32, F16,
// BF16: 8 elements per lane and step (dequant8).
//
// The includer declares MR and NB, X as the RGBA texel view x_tex (rows of
// ldx/4 texels) and includes blocks.glsl; it sets wrow (the rows' byte
// offsets) and xrow (the rows of X, in texels) before calling.
#ifndef VKGATE_QROWS_CPU_GLSL
#define VKGATE_QROWS_CPU_GLSL
#extension GL_KHR_shader_subgroup_arithmetic : require

uint wrow[NB], xrow[MR];
float acc[MR][NB];

void qrows_cpu(uint K) {
  [[unroll]] for (uint i = 0; i < MR; ++i)
    [[unroll]] for (uint j = 0; j < NB; ++j) acc[i][j] = 0.0;
  if (BLOCK_ELEMS > 8u) {
    for (uint s = gl_SubgroupInvocationID; s < K / 32u; s += 8u) {
      vec4 xv[MR][8];
      vec2 xsum[MR];  // Σx over each half of the slice
      [[unroll]] for (uint i = 0; i < MR; ++i) {
        xsum[i] = vec2(0.0);
        [[unroll]] for (uint k = 0; k < 8u; ++k) {
          xv[i][k] = texelFetch(x_tex, int(xrow[i] + 8u * s + k));
          xsum[i][k >> 2] += dot(xv[i][k], vec4(1.0));
        }
      }
      [[unroll]] for (uint j = 0; j < NB; ++j) {
        vec4 q[8];
        vec2 a, c;
        block_slice(wrow[j], s, q, a, c);
        [[unroll]] for (uint i = 0; i < MR; ++i) {
          vec2 d = vec2(0.0);
          [[unroll]] for (uint k = 0; k < 8u; ++k) d[k >> 2] += dot(q[k], xv[i][k]);
          acc[i][j] += dot(a, d) + dot(c, xsum[i]);
        }
      }
    }
  } else {
    for (uint c = gl_SubgroupInvocationID; c < K / 8u; c += 8u) {
      vec4 xl[MR], xh[MR];
      [[unroll]] for (uint i = 0; i < MR; ++i) {
        xl[i] = texelFetch(x_tex, int(xrow[i] + 2u * c));
        xh[i] = texelFetch(x_tex, int(xrow[i] + 2u * c + 1u));
      }
      [[unroll]] for (uint j = 0; j < NB; ++j) {
        vec4 lo, hi;
        dequant8(wrow[j], c, lo, hi);
        [[unroll]] for (uint i = 0; i < MR; ++i) acc[i][j] += dot(xl[i], lo) + dot(xh[i], hi);
      }
    }
  }
  [[unroll]] for (uint i = 0; i < MR; ++i)
    [[unroll]] for (uint j = 0; j < NB; ++j) acc[i][j] = subgroupAdd(acc[i][j]);
}

#endif
