#version 450
#extension GL_GOOGLE_include_directive : require
// Y = X·Wᵀ (+ b) (+ R): X [M, K], W [N, K] (PyTorch Linear layout), Y and R [M, N].
// Storage types: X_T (X and W), Y_T; bias and residual are fp32.
#include "common.glsl"
#include "storage.glsl"
#ifndef X_T
#define X_T F32
#endif
#ifndef Y_T
#define Y_T F32
#endif

layout(constant_id = 1) const uint BM = 64;
layout(constant_id = 2) const uint BN = 64;
layout(constant_id = 3) const uint BK = 16;
layout(constant_id = 4) const uint TM = 4;
layout(constant_id = 5) const uint TN = 4;

RO(0, x, X_T)
RO(1, w, X_T)
RO(2, bias, F32)
RO(3, res, F32)
RW(4, y, Y_T)

layout(push_constant) uniform Push {
  uint M, N, K;
  uint ldx, ldw, ldy, ldr;  // row strides
  uint has_bias, has_residual;
} p;

#ifdef REGISTER_TILED
// For CPU drivers (lavapipe), which run a workgroup's barriers as coroutine
// switches and turn every buffer or shared-memory load into a loop over the
// SIMD lanes: no shared memory and no barriers; each invocation keeps an
// RM×RN register tile (a compile-time size, so it stays in registers) and
// loads RM values of X and RN of W per k for RM·RN FMAs. On lavapipe at 1024³:
// 4×4 0.5, 8×8 1.1, 16×16 3.7, 32×32 3.3 GFLOP/s.
const uint RM = 16, RN = 16;
void main() {
  const uint per_n = (p.N + RN - 1) / RN;
  const uint id = gl_GlobalInvocationID.x + gl_GlobalInvocationID.y * gl_NumWorkGroups.x * WG;
  const uint m0 = (id / per_n) * RM, n0 = (id % per_n) * RN;
  if (m0 >= p.M) return;
  uint xr[RM], wr[RN];
  [[unroll]] for (uint i = 0; i < RM; ++i) xr[i] = min(m0 + i, p.M - 1) * p.ldx;
  [[unroll]] for (uint j = 0; j < RN; ++j) wr[j] = min(n0 + j, p.N - 1) * p.ldw;
  float acc[RM][RN];
  [[unroll]] for (uint i = 0; i < RM; ++i)
    [[unroll]] for (uint j = 0; j < RN; ++j) acc[i][j] = 0.0;
  for (uint k = 0; k < p.K; ++k) {
    float a[RM], b[RN];
    [[unroll]] for (uint i = 0; i < RM; ++i) a[i] = x_ld(xr[i] + k);
    [[unroll]] for (uint j = 0; j < RN; ++j) b[j] = w_ld(wr[j] + k);
    [[unroll]] for (uint i = 0; i < RM; ++i)
      [[unroll]] for (uint j = 0; j < RN; ++j) acc[i][j] = fma(a[i], b[j], acc[i][j]);
  }
  [[unroll]] for (uint i = 0; i < RM; ++i) {
    const uint m = m0 + i;
    if (m >= p.M) break;
    [[unroll]] for (uint j = 0; j < RN; ++j) {
      const uint n = n0 + j;
      if (n >= p.N) break;
      float v = acc[i][j];
      if (p.has_bias != 0) v += bias_ld(n);
      if (p.has_residual != 0) v += res_ld(m * p.ldr + n);
      y_st(m * p.ldy + n, v);
    }
  }
}
#else
float load_a(uint m, uint k) { return (m < p.M && k < p.K) ? x_ld(m * p.ldx + k) : 0.0; }
float load_b(uint n, uint k) { return (n < p.N && k < p.K) ? w_ld(n * p.ldw + k) : 0.0; }

#include "gemm_tile.glsl"

void main() {
  const uint m0 = gl_WorkGroupID.y * BM, n0 = gl_WorkGroupID.x * BN;
  gemm_tile(m0, n0, p.K);
  [[unroll]] for (uint i = 0; i < TM; ++i) {
    uint m = tile_row(m0, i);
    if (m >= p.M) break;
    [[unroll]] for (uint j = 0; j < TN; ++j) {
      uint n = tile_col(n0, j);
      if (n >= p.N) break;
      float v = acc[i][j];
      if (p.has_bias != 0) v += bias_ld(n);
      if (p.has_residual != 0) v += res_ld(m * p.ldr + n);
      y_st(m * p.ldy + n, v);
    }
  }
}

#endif  // REGISTER_TILED
