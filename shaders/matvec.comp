#version 450
#extension GL_GOOGLE_include_directive : require
// Variants (the build compiles one SPIR-V module per line: name, then defines):
// variant: matvec
// variant: matvec_f16 X_T=F16 Y_T=F16
// variant: matvec_f16_y32 X_T=F16
// variant: matvec_bf16 X_T=BF16 Y_T=BF16
// variant: matvec_bf16_y32 X_T=BF16
// variant: matvec_v8 VEC8
// variant: matvec_v8_f16 VEC8 X_T=F16 Y_T=F16
// variant: matvec_v8_f16_y32 VEC8 X_T=F16
// variant: matvec_v8_bf16 VEC8 X_T=BF16 Y_T=BF16
// variant: matvec_v8_bf16_y32 VEC8 X_T=BF16
// variant: matvec_v8_norm VEC8 NORM_X
// variant: matvec_v8_norm_f16 VEC8 NORM_X W_T=F16 Y_T=F16
// variant: matvec_v8_norm_bf16 VEC8 NORM_X W_T=BF16 Y_T=BF16
// variant: matvec_v8_norm_glu VEC8 NORM_X GLU
// variant: matvec_v8_norm_glu_f16 VEC8 NORM_X GLU W_T=F16 Y_T=F16
// variant: matvec_v8_norm_glu_bf16 VEC8 NORM_X GLU W_T=BF16 Y_T=BF16
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
//
// NORM_X (with VEC8; X fp32, no residual): Y = RMSNorm(X)·Wᵀ, the norm of
// each row of X folded in, so that a decode step has no RMSNorm pass (and its
// barrier) before its projection. Every subgroup reads all of its rows of X
// anyway: it sums their squares on the way and scales its results at the
// end; binding 3 holds the norm's weight.
//
// GLU (with NORM_X): the MLP's gate and up projections and glu.comp in one
// pass, Y[m, n] = act(x̂·W[n]) · (x̂·W[N + n]) for n < N, W holding the gate's
// N rows then the up's (and the bias their 2N values): each subgroup takes
// both columns, so a decode step has no [M, 2N] product to write and read
// back, and no GLU pass (and its barrier) between the two projections.
#ifdef GLU
#include "activation.glsl"
#endif
#include "common.glsl"
#include "storage.glsl"
#ifndef X_T
#define X_T F32
#endif
#ifndef W_T
#define W_T X_T
#endif
#ifndef Y_T
#define Y_T F32
#endif
layout(constant_id = 1) const uint MAX_M = 8;  // 8 or 16 (the host's matvec_spec)

#ifdef VEC8
VEC8_RO(0, x, X_T)
VEC8_RO(1, w, W_T)
#else
RO(0, x, X_T)
RO(1, w, W_T)
#endif
RO(2, bias, F32)
#ifdef NORM_X
VEC8_RO(3, norm_w, F32)
#else
RO(3, res, F32)
#endif
RW(4, y, Y_T)
#ifndef NORM_X
RO(5, gate, X_T)
#endif

#include "params.glsl"
struct Push {
  uint M, N, K;
  uint ldx, ldw, ldy, ldr;
  uint has_bias, has_residual;
  uint k_chunk;        // (matmul.comp's split-K; unused here)
  uint zero_centered;  // NORM_X: x̂·(1 + w) instead of x̂·w
  float eps;           // NORM_X
  // The dense gate (epilogue.glsl); with GLU, gate_act is activation.glsl's kind.
  uint gate_act, gate_combine, gate_at, ldg;
};
PARAMS(Push)
#ifndef NORM_X
#include "epilogue.glsl"
#endif

#ifdef GLU
const uint COLS = 2;  // the gate's column n, the up's column N + n
#else
const uint COLS = 1;
#endif
#ifdef NORM_X
float ss[MAX_M];  // this lane's share of each row's sum of squares
#endif
#ifdef VEC8
// Chunk c of row m of X (with NORM_X: times the norm's weight, its squares
// summed on the way).
void x_chunk(uint m, uint c, out vec4 xl, out vec4 xh) {
  x_ld8(m * (p.ldx / 8) + c, xl, xh);
#ifdef NORM_X
  ss[m] += dot(xl, xl) + dot(xh, xh);
  vec4 nl, nh;
  norm_w_ld8(c, nl, nh);
  if (p.zero_centered != 0) {
    nl += 1.0;
    nh += 1.0;
  }
  xl *= nl;
  xh *= nh;
#endif
}
#endif

void main() {
  LOAD_PARAMS;
  const uint n = gl_WorkGroupID.x * gl_NumSubgroups + gl_SubgroupID;
  if (n >= p.N) return;  // whole subgroups leave together
  float acc[COLS][MAX_M];
  [[unroll]] for (uint j = 0; j < COLS; ++j)
    [[unroll]] for (uint m = 0; m < MAX_M; ++m) acc[j][m] = 0.0;
#ifdef NORM_X
  [[unroll]] for (uint m = 0; m < MAX_M; ++m) ss[m] = 0.0;
#endif
#ifdef VEC8
  // U chunks of W per lane in flight at once: one at a time, a subgroup waits
  // out a memory latency per chunk, and a projection with few columns per SM
  // (o_proj: 2048) cannot hide it with other subgroups. On the H100, U = 8 was
  // as fast and 16 slower; workgroups of 128 or 512 no faster than 256.
  const uint U = 4, SG = gl_SubgroupSize, C = p.K / 8, ldw8 = p.ldw / 8;
  uint c = gl_SubgroupInvocationID;
  for (; c + (U - 1) * SG < C; c += U * SG) {
    vec4 wl[COLS][U], wh[COLS][U];
    [[unroll]] for (uint j = 0; j < COLS; ++j)
      [[unroll]] for (uint u = 0; u < U; ++u) w_ld8((n + j * p.N) * ldw8 + c + u * SG, wl[j][u], wh[j][u]);
    [[unroll]] for (uint m = 0; m < MAX_M; ++m)
      if (m < p.M)
        [[unroll]] for (uint u = 0; u < U; ++u) {
          vec4 xl, xh;
          x_chunk(m, c + u * SG, xl, xh);
          [[unroll]] for (uint j = 0; j < COLS; ++j) acc[j][m] += dot(xl, wl[j][u]) + dot(xh, wh[j][u]);
        }
  }
  for (; c < C; c += SG) {
    vec4 wl[COLS], wh[COLS];
    [[unroll]] for (uint j = 0; j < COLS; ++j) w_ld8((n + j * p.N) * ldw8 + c, wl[j], wh[j]);
    [[unroll]] for (uint m = 0; m < MAX_M; ++m)
      if (m < p.M) {
        vec4 xl, xh;
        x_chunk(m, c, xl, xh);
        [[unroll]] for (uint j = 0; j < COLS; ++j) acc[j][m] += dot(xl, wl[j]) + dot(xh, wh[j]);
      }
  }
#else
  for (uint k = gl_SubgroupInvocationID; k < p.K; k += gl_SubgroupSize) {
    const float wv = w_ld(n * p.ldw + k);
    [[unroll]] for (uint m = 0; m < MAX_M; ++m)
      if (m < p.M) acc[0][m] = fma(x_ld(m * p.ldx + k), wv, acc[0][m]);
  }
#endif
  [[unroll]] for (uint m = 0; m < MAX_M; ++m) {
    if (m >= p.M) break;
    float v[COLS];
    [[unroll]] for (uint j = 0; j < COLS; ++j) v[j] = subgroupAdd(acc[j][m]);
#ifdef NORM_X
    const float inv_rms = 1.0 / sqrt(subgroupAdd(ss[m]) / float(p.K) + p.eps);
    [[unroll]] for (uint j = 0; j < COLS; ++j) v[j] *= inv_rms;
#endif
    if (subgroupElect()) {
#ifdef NORM_X
      if (p.has_bias != 0)
        [[unroll]] for (uint j = 0; j < COLS; ++j) v[j] += bias_ld(n + j * p.N);
#ifdef GLU
      v[0] = activation(v[0], p.gate_act) * v[1];
#endif
#else
      v[0] = epilogue(m, n, v[0]);
#endif
      y_st(m * p.ldy + n, v[0]);
    }
  }
}
