// GEMM core for CPU drivers (lavapipe): acc[RM][RN] = Σ_k A(m, k)·B(n, k)
// for the lane's RM rows from m0 and RN columns from n0. The including shader
// defines the spec constants RM (a multiple of 8) and RN, and
//   uint  a_row(uint m)  offset of A(m, 0); A is contiguous in k
//   float a_at(uint i)   A's element at offset i
//   uint  b_col(uint n)  offset of B(0, n)
//   float b_at(uint i)   B's element at offset i; B(n, k) sits at b_col(n) + k·b_kstride
// Rows and columns past M, N are clamped (read, never stored by the caller).
//
// Why this shape: Mesa 22.3's llvmpipe runs a workgroup on one thread and
// each barrier as a coroutine switch, and turns every buffer or shared-memory
// load into a branchy loop over the 8 SIMD lanes, while a subgroup shuffle
// from a constant lane is one vector shuffle. So: no shared memory, no
// barriers, and as few loads per FMA as registers allow. The workgroup is one
// 8-lane subgroup; the lanes share the rows and own distinct columns. Lane l
// loads rows m0 + l, m0 + 8 + l, ... and shuffles them to the others: per k,
// RM/8 + RN loads for RM·RN FMAs. Matmul 1024³ (GFLOP/s): 16×16 tiles 4.3 with
// subgroupBroadcast (which llvmpipe runs as a lane loop); with shuffles 32×8
// 8.4, 64×8 12.2, 64×16 12.7, 128×8 13.6 — but from RM = 80 up llvmpipe
// returns wrong results (72 is right), so hosts keep RM ≤ 64.
#extension GL_KHR_shader_subgroup_shuffle : require

float acc[RM][RN];

// Row 8q + r of the tile: A's value from lane r (a constant, as the shuffle needs).
#define GEMM_CPU_ROW(q, r)                                  \
  {                                                         \
    const float a = subgroupShuffle(xv[q], r);              \
    [[unroll]] for (uint j = 0; j < RN; ++j)                \
      acc[q * 8 + r][j] = fma(a, b[j], acc[q * 8 + r][j]);  \
  }

void gemm_cpu(uint m0, uint n0, uint M, uint N, uint K, uint b_kstride) {
  uint xl[RM / 8], wl[RN];
  [[unroll]] for (uint q = 0; q < RM / 8; ++q) xl[q] = a_row(min(m0 + q * 8 + gl_SubgroupInvocationID, M - 1));
  [[unroll]] for (uint j = 0; j < RN; ++j) wl[j] = b_col(min(n0 + j, N - 1));
  [[unroll]] for (uint i = 0; i < RM; ++i)
    [[unroll]] for (uint j = 0; j < RN; ++j) acc[i][j] = 0.0;
  for (uint k = 0; k < K; ++k) {
    float xv[RM / 8], b[RN];
    [[unroll]] for (uint q = 0; q < RM / 8; ++q) xv[q] = a_at(xl[q] + k);
    [[unroll]] for (uint j = 0; j < RN; ++j) b[j] = b_at(wl[j] + k * b_kstride);
    [[unroll]] for (uint q = 0; q < RM / 8; ++q) {
      GEMM_CPU_ROW(q, 0) GEMM_CPU_ROW(q, 1) GEMM_CPU_ROW(q, 2) GEMM_CPU_ROW(q, 3)
      GEMM_CPU_ROW(q, 4) GEMM_CPU_ROW(q, 5) GEMM_CPU_ROW(q, 6) GEMM_CPU_ROW(q, 7)
    }
  }
}
