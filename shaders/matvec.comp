#version 450
#extension GL_GOOGLE_include_directive : require
#extension GL_KHR_shader_subgroup_arithmetic : require
// Y = X·Wᵀ (+ b) (+ R) for a few rows of X (M ≤ MAX_M: decode steps), where
// the tiled matmul would leave most of its tile idle. Memory bound on W: one
// subgroup per output column n streams W[n, :] with consecutive lanes on
// consecutive k, keeps one partial sum per row of X, and reduces across the
// subgroup. Same bindings and push constants as matmul.comp.
//
// VEC8 (K, ldx and ldw multiples of 8): each lane reads 8 consecutive k at a
// time, 16 bytes at fp16, the width a GPU's memory transactions want; the
// scalar form moves 2 bytes per lane and load.
#include "common.glsl"
#include "storage.glsl"
#ifndef X_T
#define X_T F32
#endif
#ifndef Y_T
#define Y_T F32
#endif
const uint MAX_M = 8;

#ifdef VEC8
VEC8_RO(0, x, X_T)
VEC8_RO(1, w, X_T)
#else
RO(0, x, X_T)
RO(1, w, X_T)
#endif
RO(2, bias, F32)
RO(3, res, F32)
RW(4, y, Y_T)

layout(push_constant) uniform Push {
  uint M, N, K;
  uint ldx, ldw, ldy, ldr;
  uint has_bias, has_residual;
} p;

void main() {
  const uint n = gl_WorkGroupID.x * gl_NumSubgroups + gl_SubgroupID;
  if (n >= p.N) return;  // whole subgroups leave together
  float acc[MAX_M];
  [[unroll]] for (uint m = 0; m < MAX_M; ++m) acc[m] = 0.0;
#ifdef VEC8
  // U chunks of W per lane in flight at once: one at a time, a subgroup waits
  // out a memory latency per chunk, and a projection with few columns per SM
  // (o_proj: 2048) cannot hide it with other subgroups. On the H100, U = 8 was
  // as fast and 16 slower; workgroups of 128 or 512 no faster than 256.
  const uint U = 4, SG = gl_SubgroupSize, C = p.K / 8, ldw8 = p.ldw / 8, ldx8 = p.ldx / 8;
  uint c = gl_SubgroupInvocationID;
  for (; c + (U - 1) * SG < C; c += U * SG) {
    vec4 wl[U], wh[U];
    [[unroll]] for (uint u = 0; u < U; ++u) w_ld8(n * ldw8 + c + u * SG, wl[u], wh[u]);
    [[unroll]] for (uint m = 0; m < MAX_M; ++m)
      if (m < p.M)
        [[unroll]] for (uint u = 0; u < U; ++u) {
          vec4 xl, xh;
          x_ld8(m * ldx8 + c + u * SG, xl, xh);
          acc[m] += dot(xl, wl[u]) + dot(xh, wh[u]);
        }
  }
  for (; c < C; c += SG) {
    vec4 wl, wh, xl, xh;
    w_ld8(n * ldw8 + c, wl, wh);
    [[unroll]] for (uint m = 0; m < MAX_M; ++m)
      if (m < p.M) {
        x_ld8(m * ldx8 + c, xl, xh);
        acc[m] += dot(xl, wl) + dot(xh, wh);
      }
  }
#else
  for (uint k = gl_SubgroupInvocationID; k < p.K; k += gl_SubgroupSize) {
    const float wv = w_ld(n * p.ldw + k);
    [[unroll]] for (uint m = 0; m < MAX_M; ++m)
      if (m < p.M) acc[m] = fma(x_ld(m * p.ldx + k), wv, acc[m]);
  }
#endif
  [[unroll]] for (uint m = 0; m < MAX_M; ++m) {
    if (m >= p.M) break;
    float v = subgroupAdd(acc[m]);
    if (subgroupElect()) {
      if (p.has_bias != 0) v += bias_ld(n);
      if (p.has_residual != 0) v += res_ld(m * p.ldr + n);
      y_st(m * p.ldy + n, v);
    }
  }
}
