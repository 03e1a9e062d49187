#version 450
#extension GL_GOOGLE_include_directive : require
// Variants (the build compiles one SPIR-V module per line: name, then defines):
// variant: matmul
// variant: matmul_f16 X_T=F16 Y_T=F16
// variant: matmul_cpu REGISTER_TILED TEXEL
// variant: matmul_rows_cpu ROWS_CPU TEXEL
// variant: matmul_rows_cpu_f16 ROWS_CPU TEXEL X_T=F16 Y_T=F16
// variant: matmul_rows_cpu_f16_y32 ROWS_CPU TEXEL X_T=F16
// variant: matmul_cpu_f16 REGISTER_TILED TEXEL X_T=F16 Y_T=F16
// variant: matmul_cpu_f16_y32 REGISTER_TILED TEXEL X_T=F16
// variant: matmul_cpu_bf16 REGISTER_TILED TEXEL X_T=BF16 Y_T=BF16
// variant: matmul_cpu_bf16_y32 REGISTER_TILED TEXEL X_T=BF16
// variant: matmul_f16_y32 X_T=F16
// variant: matmul_bf16 X_T=BF16 Y_T=BF16
// variant: matmul_bf16_y32 X_T=BF16
// Y = X·Wᵀ (+ b) (gated) (+ R): X [M, K], W [N, K] (PyTorch Linear layout), Y and R [M, N].
// Storage types: X_T (X and W), Y_T; bias and residual are fp32. With TEXEL
// (the CPU-driver variants) X and W are texel buffers.
// Split-K (the shared-memory tiled variant): workgroup z sums k in
// [z·k_chunk, (z + 1)·k_chunk) into rows z·M.. of Y, fp32 partial sums that
// matmul_combine.comp adds up (the host then passes no bias, gate or residual).
#include "common.glsl"
#include "storage.glsl"
#ifndef X_T
#define X_T F32
#endif
#ifndef Y_T
#define Y_T F32
#endif

IN(0, x, X_T)
IN(1, w, X_T)
RO(2, bias, F32)
RO(3, res, F32)
RW(4, y, Y_T)
RO(5, gate, X_T)

#include "params.glsl"
struct Push {
  uint M, N, K;
  uint ldx, ldw, ldy, ldr;  // row strides
  uint has_bias, has_residual;
  uint k_chunk;  // k per split (workgroup z); K when unsplit
  uint zero_centered;  // (matvec.comp's)
  float eps;
  uint gate_act, gate_combine, gate_at, ldg;  // the dense gate (epilogue.glsl)
};
PARAMS(Push)
#include "epilogue.glsl"

void store_y(uint m, uint n, float v) { y_st((gl_WorkGroupID.z * p.M + m) * p.ldy + n, epilogue(m, n, v)); }

#if defined(ROWS_CPU)
// CPU drivers, a few rows (decode): one 8-lane subgroup per NB columns. The
// lanes split K: lane l takes the vec4s l, l + 8, ... of each row (X and W
// are RGBA texel views; K, ldx and ldw multiples of 4), so together they read
// 128 contiguous bytes of a W row per fetch, and subgroupAdd sums them. The
// 8-row tiles of gemm_cpu.glsl would compute 7 clamped copies of one row.
#extension GL_KHR_shader_subgroup_arithmetic : require
layout(constant_id = 1) const uint MR = 1;  // rows (M ≤ MR ≤ 8)
layout(constant_id = 2) const uint NB = 8;  // columns per workgroup

void main() {
  LOAD_PARAMS;
  const uint n0 = (gl_WorkGroupID.x + gl_WorkGroupID.y * gl_NumWorkGroups.x) * NB;
  if (n0 >= p.N) return;  // the grid is split in 2-D past 65535 groups
  uint wrow[NB], xrow[MR];
  [[unroll]] for (uint j = 0; j < NB; ++j) wrow[j] = min(n0 + j, p.N - 1) * p.ldw / 4;
  [[unroll]] for (uint i = 0; i < MR; ++i) xrow[i] = min(i, p.M - 1) * p.ldx / 4;
  float acc[MR][NB];
  [[unroll]] for (uint i = 0; i < MR; ++i)
    [[unroll]] for (uint j = 0; j < NB; ++j) acc[i][j] = 0.0;
  for (uint k4 = gl_SubgroupInvocationID; k4 < p.K / 4; k4 += 8) {
    vec4 xv[MR];
    [[unroll]] for (uint i = 0; i < MR; ++i) xv[i] = texelFetch(x_tex, int(xrow[i] + k4));
    [[unroll]] for (uint j = 0; j < NB; ++j) {
      const vec4 wv = texelFetch(w_tex, int(wrow[j] + k4));
      [[unroll]] for (uint i = 0; i < MR; ++i) acc[i][j] += dot(xv[i], wv);
    }
  }
  [[unroll]] for (uint i = 0; i < MR; ++i)
    [[unroll]] for (uint j = 0; j < NB; ++j) acc[i][j] = subgroupAdd(acc[i][j]);
  if (gl_SubgroupInvocationID != 0) return;
  [[unroll]] for (uint i = 0; i < MR; ++i) {
    if (i >= p.M) break;
    [[unroll]] for (uint j = 0; j < NB; ++j) {
      if (n0 + j >= p.N) break;
      store_y(i, n0 + j, acc[i][j]);
    }
  }
}
#elif defined(REGISTER_TILED)
// CPU drivers: one 8-lane subgroup per RM×(8·RN) tile (see gemm_cpu.glsl).
layout(constant_id = 1) const uint RM = 64;
layout(constant_id = 2) const uint RN = 8;
uint a_row(uint m) { return m * p.ldx; }
float a_at(uint i) { return x_ld(i); }
uint b_col(uint n) { return n * p.ldw; }
float b_at(uint i) { return w_ld(i); }
#include "gemm_cpu.glsl"

void main() {
  LOAD_PARAMS;
  const uint n0 = (gl_WorkGroupID.x * WG + gl_LocalInvocationID.x) * RN;
  // A grid of at most 65535 row blocks steps through taller matrices.
  for (uint m0 = gl_WorkGroupID.y * RM; m0 < p.M; m0 += gl_NumWorkGroups.y * RM) {
    gemm_cpu(m0, n0, p.M, p.N, p.K, 1);
    [[unroll]] for (uint i = 0; i < RM; ++i) {
      const uint m = m0 + i;
      if (m >= p.M) break;
      [[unroll]] for (uint j = 0; j < RN; ++j) {
        const uint n = n0 + j;
        if (n >= p.N) break;
        store_y(m, n, acc[i][j]);
      }
    }
  }
}
#else
layout(constant_id = 1) const uint BM = 64;
layout(constant_id = 2) const uint BN = 64;
layout(constant_id = 3) const uint BK = 16;
layout(constant_id = 4) const uint TM = 4;
layout(constant_id = 5) const uint TN = 4;

float load_a(uint m, uint k) { return (m < p.M && k < p.K) ? x_ld(m * p.ldx + k) : 0.0; }
float load_b(uint n, uint k) { return (n < p.N && k < p.K) ? w_ld(n * p.ldw + k) : 0.0; }

#include "gemm_tile.glsl"

void main() {
  LOAD_PARAMS;
  const uint m0 = gl_WorkGroupID.y * BM, n0 = gl_WorkGroupID.x * BN, k0 = gl_WorkGroupID.z * p.k_chunk;
  gemm_tile(m0, n0, k0, min(p.K, k0 + p.k_chunk));
  [[unroll]] for (uint i = 0; i < TM; ++i) {
    uint m = tile_row(m0, i);
    if (m >= p.M) break;
    [[unroll]] for (uint j = 0; j < TN; ++j) {
      uint n = tile_col(n0, j);
      if (n >= p.N) break;
      store_y(m, n, acc[i][j]);
    }
  }
}

#endif  // REGISTER_TILED
