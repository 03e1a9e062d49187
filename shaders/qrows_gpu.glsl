// The GPUs' decode product over block-quantized rows, shared by qmatmul.comp
// and moe_matmul.comp (their SLICE_ROWS variants): one subgroup sums
// acc[i][j] = X[xrow i]·W[wrow j] for the first `rows` (≤ MR) rows of X and
// NC columns, then subgroupAdd reduces the lanes' shares.
//
// Lane l takes the 32-element slices l, l + SG, ... of each row, SU of them
// per pass (their loads issued together), through blocks.glsl's block_slice:
// the slice's bytes in 16-byte loads (BLOCK_QUAD), the block's scales once
// per slice, w = a·q + c per half, so that Σ w·x = a·Σ q·x + c·Σ x. X's 32
// elements come in four 8-element loads (x_ld8 of VEC8_RO). dequant8's one
// lane per 8 elements read the block's header again for every 8, 4 bytes a
// load.
//
// The includer declares MR, NC, SU, X as VEC8_RO(…, x, …) and includes
// blocks.glsl with BLOCK_QUAD reading 16-byte units of W; it sets wrow (the
// rows' byte offsets) and xrow (the rows of X, in 8-element units) first.
// With NORM_X it also declares norm_w (VEC8_RO) and p.zero_centered, p.eps:
// X is RMS-normalized on the way (qmatmul.comp).
#ifndef VKGATE_QROWS_GPU_GLSL
#define VKGATE_QROWS_GPU_GLSL
#extension GL_KHR_shader_subgroup_arithmetic : require

uint wrow[NC], xrow[MR];
float acc[MR][NC];
#ifdef NORM_X
float ss[MR];  // this lane's share of each row's sum of squares
#endif

void qrows_slices(uint rows, uint K) {
  [[unroll]] for (uint i = 0; i < MR; ++i)
    [[unroll]] for (uint j = 0; j < NC; ++j) acc[i][j] = 0.0;
#ifdef NORM_X
  [[unroll]] for (uint i = 0; i < MR; ++i) ss[i] = 0.0;
#endif
  const uint slices = K / 32u, step = gl_SubgroupSize * SU;
  for (uint s0 = gl_SubgroupInvocationID; s0 < slices; s0 += step) {
    [[unroll]] for (uint u = 0; u < SU; ++u) {
      const uint s = s0 + u * gl_SubgroupSize;
      if (s >= slices) break;
      [[unroll]] for (uint j = 0; j < NC; ++j) {
        vec4 q[8];
        vec2 a, c;
        block_slice(wrow[j], s, q, a, c);
        [[unroll]] for (uint i = 0; i < MR; ++i) {
          if (i >= rows) break;
          vec2 d = vec2(0.0), xs = vec2(0.0);
          [[unroll]] for (uint e = 0; e < 4u; ++e) {
            vec4 lo, hi;
            x_ld8(xrow[i] + 4u * s + e, lo, hi);
#ifdef NORM_X
            if (j == 0) ss[i] += dot(lo, lo) + dot(hi, hi);
            vec4 nl, nh;
            norm_w_ld8(4u * s + e, nl, nh);
            if (p.zero_centered != 0) {
              nl += 1.0;
              nh += 1.0;
            }
            lo *= nl;
            hi *= nh;
#endif
            d[e >> 1] += dot(q[2u * e], lo) + dot(q[2u * e + 1u], hi);
            xs[e >> 1] += dot(lo + hi, vec4(1.0));
          }
          acc[i][j] += dot(a, d) + dot(c, xs);
        }
      }
    }
  }
  [[unroll]] for (uint i = 0; i < MR; ++i) {
    if (i >= rows) break;
#ifdef NORM_X
    const float scale = 1.0 / sqrt(subgroupAdd(ss[i]) / float(K) + p.eps);
#else
    const float scale = 1.0;
#endif
    [[unroll]] for (uint j = 0; j < NC; ++j) acc[i][j] = subgroupAdd(acc[i][j]) * scale;
  }
}

#endif
