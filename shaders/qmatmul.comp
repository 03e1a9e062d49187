#version 450
#extension GL_GOOGLE_include_directive : require
// Variants (the build compiles one SPIR-V module per line: name, then defines):
// variant: qmatmul_rows ROWS
// variant: qmatmul_rows_f16 ROWS X_T=F16 Y_T=F16
// variant: qmatmul_rows_f16_y32 ROWS X_T=F16
// variant: qmatmul_rows_bf16 ROWS X_T=BF16 Y_T=BF16
// variant: qmatmul_rows_bf16_y32 ROWS X_T=BF16
// variant: qmatmul_slices SLICE_ROWS
// variant: qmatmul_slices_f16 SLICE_ROWS X_T=F16 Y_T=F16
// variant: qmatmul_slices_f16_y32 SLICE_ROWS X_T=F16
// variant: qmatmul_slices_bf16 SLICE_ROWS X_T=BF16 Y_T=BF16
// variant: qmatmul_slices_bf16_y32 SLICE_ROWS X_T=BF16
// variant: qmatmul_slices_norm SLICE_ROWS NORM_X
// variant: qmatmul_slices_norm_f16 SLICE_ROWS NORM_X Y_T=F16
// variant: qmatmul_slices_norm_bf16 SLICE_ROWS NORM_X Y_T=BF16
// variant: qmatmul_slices_norm_glu SLICE_ROWS NORM_X GLU
// variant: qmatmul_slices_norm_glu_f16 SLICE_ROWS NORM_X GLU Y_T=F16
// variant: qmatmul_slices_norm_glu_bf16 SLICE_ROWS NORM_X GLU Y_T=BF16
// variant: qmatmul_tiled
// variant: qmatmul_tiled_f16 X_T=F16 Y_T=F16
// variant: qmatmul_tiled_f16_y32 X_T=F16
// variant: qmatmul_tiled_bf16 X_T=BF16 Y_T=BF16
// variant: qmatmul_tiled_bf16_y32 X_T=BF16
// variant: qmatmul_rows_cpu ROWS_CPU TEXEL
// variant: qmatmul_rows_cpu_f16 ROWS_CPU TEXEL X_T=F16 Y_T=F16
// variant: qmatmul_rows_cpu_f16_y32 ROWS_CPU TEXEL X_T=F16
// variant: qmatmul_cpu REGISTER_TILED TEXEL
// variant: qmatmul_cpu_f16 REGISTER_TILED TEXEL X_T=F16 Y_T=F16
// variant: qmatmul_cpu_f16_y32 REGISTER_TILED TEXEL X_T=F16
// variant: qmatmul_cpu_slices REGISTER_TILED SLICES TEXEL
// variant: qmatmul_cpu_slices_f16 REGISTER_TILED SLICES TEXEL X_T=F16 Y_T=F16
// variant: qmatmul_cpu_slices_f16_y32 REGISTER_TILED SLICES TEXEL X_T=F16
#extension GL_KHR_shader_subgroup_arithmetic : enable
// Y[m, col0 + n] = X[m, :]·W[n, :]ᵀ (+ bias) (gated) (+ R) with W in one of
// ggml's block formats, read as stored (a GGUF tensor's bytes, uploaded as
// they are) and dequantized in registers: the weights cross memory once, at
// 4.5–8.5 bits per element instead of 16. Arithmetic is fp32.
//
// The format is specialization constant 1 (ggml's type id: F32 0, F16 1,
// Q4_0 2, Q4_1 3, Q5_0 6, Q5_1 7, Q8_0 8, Q4_K 12, Q5_K 13, Q6_K 14, BF16
// 30), so the driver folds the format's branch away and one module serves
// all. A fused projection whose parts differ in format (a Q4_K_M file's
// Q4_K q/k beside a Q6_K v) runs one dispatch per part, each writing its
// columns from col0 (bias, residual and gate indexed alike).
//
// W is bound as 32-bit words (a storage buffer, or an R32_UINT texel view
// with TEXEL: llvmpipe gathers texels, where it loops over the lanes for a
// storage load; ROWS_CPU reads a block format's 16 bytes per fetch); blocks
// of 18, 22, 34 or 210 bytes are only 2-byte aligned, so bytes are shifted
// out of the words around them. The host pads W (ops::qmatmul_padding), so
// a read past the last block stays inside the buffer.
//
// GPUs: SLICE_ROWS (≤ 8 rows of X, block formats: decode) gives each
// subgroup NC output columns, its lanes on consecutive 32-element slices of
// the rows (qrows_gpu.glsl); ROWS (the float formats, or the "chunks" decode
// tile) one subgroup per column, its lanes on consecutive 8-element chunks
// (dequant8, which reads a block's header again per chunk); otherwise tiles of
// TM × TN outputs, each K step of 32 dequantizing TN rows' chunks of W and
// loading TM rows of X into shared memory.
// SLICE_ROWS with NORM_X (X the fp32 residual stream, no residual): Y =
// RMSNorm(X)·Wᵀ, as matvec.comp's NORM_X (binding 3 the norm's weight), so
// that a quantized decode step has no RMSNorm pass before its projection;
// with GLU too, the MLP's gate and up products and act(gate)·up, as
// matvec.comp's GLU: each subgroup takes the gate's row n and the up's row
// N + n (NC = 2) and writes column n.
// CPU drivers (TEXEL; llvmpipe runs a workgroup on one thread, a barrier as a
// coroutine switch, and gathers texels): workgroups of one 8-lane subgroup,
// no shared memory, X read as RGBA texels (ldx a multiple of 4). ROWS_CPU
// (decode) gives the subgroup NB columns whose lanes split K (qrows_cpu.glsl);
// REGISTER_TILED is gemm_cpu.glsl's shape (an RM × 8·RN tile, rows shuffled
// across the lanes) with the lane's RN columns dequantized 8 k at a time, or
// with SLICES (block formats) a block's 32-element slice at a time.
#include "common.glsl"
#include "storage.glsl"
#ifndef X_T
#define X_T F32
#endif
#ifndef Y_T
#define Y_T F32
#endif
layout(constant_id = 1) const uint FMT = 8;

#ifdef SLICE_ROWS
VEC8_RO(0, x, X_T)
#else
IN(0, x, X_T)
#endif
#ifdef TEXEL
layout(binding = 1) uniform usamplerBuffer w_tex;
uint wword(uint i) { return texelFetch(w_tex, int(i)).x; }
#elif defined(SLICE_ROWS)
// One view of W, 16 bytes an element: words are taken out of their quad.
layout(std430, binding = 1) readonly buffer w_buf { uvec4 w_quads[]; };
uint wword(uint i) { return w_quads[i >> 2][i & 3u]; }
#define BLOCK_QUAD(i) w_quads[i]
#else
layout(std430, binding = 1) readonly buffer w_buf { uint w_words[]; };
uint wword(uint i) { return w_words[i]; }
#endif
RO(2, bias, F32)
#ifdef NORM_X
VEC8_RO(3, norm_w, F32)
#else
RO(3, res, F32)
#endif
RW(4, y, Y_T)
RO(5, gate, X_T)

#include "params.glsl"
struct Push {
  uint M, N, K;
  uint ldx, row_bytes, ldy, ldr;
  uint has_bias, has_residual;
  uint col0;  // the first column of Y (and of bias, R, gate) this dispatch writes
  uint gate_act, gate_combine, gate_at, ldg;
  uint zero_centered;  // NORM_X: x̂·(1 + w) instead of x̂·w
  float eps;           // NORM_X
  uint act;            // GLU: activation.glsl's kind
};
PARAMS(Push)
#define GATE_ACT_ONLY
#include "gate.glsl"
#ifdef GLU
#include "activation.glsl"
#endif

#if defined(ROWS_CPU) || defined(SLICES)
// Block formats are bound as an RGBA32UI view here (ops::qrows_cpu_view),
// F32, F16 and BF16 as R32_UINT.
#define BLOCK_QUAD(i) texelFetch(w_tex, int(i))
#define BLOCK_WORD(i) (BLOCK_ELEMS > 8u ? texelFetch(w_tex, int((i) >> 2))[(i) & 3u] : wword(i))
#else
#define BLOCK_WORD(i) wword(i)
#endif
#include "blocks.glsl"

void store(uint m, uint n, float v) {
  const uint c = p.col0 + n;
  if (p.has_bias != 0) v += bias_ld(c);
  if (p.gate_act != 0) v = gate_apply(p.gate_combine, v, gate_act(p.gate_act - 1, gate_ld(p.gate_at + m * p.ldg + c)));
#ifndef NORM_X
  if (p.has_residual != 0) v += res_ld(m * p.ldr + c);
#endif
  y_st(m * p.ldy + c, v);
}

#if defined(ROWS_CPU)
layout(constant_id = 2) const uint MR = 1;  // rows (M ≤ MR ≤ 8)
layout(constant_id = 3) const uint NB = 8;  // columns per workgroup
#include "qrows_cpu.glsl"
void main() {
  LOAD_PARAMS;
  const uint n0 = (gl_WorkGroupID.x + gl_WorkGroupID.y * gl_NumWorkGroups.x) * NB;
  if (n0 >= p.N) return;  // the grid is split in 2-D past 65535 groups
  [[unroll]] for (uint j = 0; j < NB; ++j) wrow[j] = min(n0 + j, p.N - 1) * p.row_bytes;
  [[unroll]] for (uint i = 0; i < MR; ++i) xrow[i] = min(i, p.M - 1) * p.ldx / 4;
  qrows_cpu(p.K);
  if (gl_SubgroupInvocationID != 0) return;
  [[unroll]] for (uint i = 0; i < MR; ++i) {
    if (i >= p.M) break;
    [[unroll]] for (uint j = 0; j < NB; ++j) {
      if (n0 + j >= p.N) break;
      store(i, n0 + j, acc[i][j]);
    }
  }
}
#elif defined(REGISTER_TILED)
#extension GL_KHR_shader_subgroup_shuffle : require
layout(constant_id = 2) const uint RM = 32;  // a multiple of 8
layout(constant_id = 3) const uint RN = 8;
float acc[RM][RN];
// Row 8q + r of the tile takes k-element e of lane r's row.
#define QROW(q, r, e)                                              \
  {                                                                \
    const float a = subgroupShuffle(xk[q], r);                     \
    [[unroll]] for (uint j = 0; j < RN; ++j)                       \
      acc[q * 8 + r][j] = fma(a, e < 4u ? wl[j][e] : wh[j][e - 4u], acc[q * 8 + r][j]); \
  }
// Row 8q + r of the tile against the slice: lane r's 32 elements of X and their half sums.
#define SROW(q, r)                                                                  \
  {                                                                                 \
    vec4 xr[8];                                                                     \
    [[unroll]] for (uint k = 0; k < 8u; ++k) xr[k] = subgroupShuffle(xv[k], r);    \
    const vec2 xsr = subgroupShuffle(xs, r);                                        \
    [[unroll]] for (uint j = 0; j < RN; ++j) {                                      \
      vec2 d = vec2(0.0);                                                           \
      [[unroll]] for (uint k = 0; k < 8u; ++k) d[k >> 2] += dot(w[j][k], xr[k]);   \
      acc[q * 8 + r][j] += dot(wa[j], d) + dot(wc[j], xsr);                         \
    }                                                                               \
  }
void main() {
  LOAD_PARAMS;
  const uint n0 = gl_WorkGroupID.x * 8u * RN + gl_SubgroupInvocationID * RN;
  uint wrow[RN];
  [[unroll]] for (uint j = 0; j < RN; ++j) wrow[j] = min(n0 + j, p.N - 1) * p.row_bytes;
  // A grid of at most 65535 row blocks steps through taller matrices.
  for (uint m0 = gl_WorkGroupID.y * RM; m0 < p.M; m0 += gl_NumWorkGroups.y * RM) {
    uint xrow[RM / 8];
    [[unroll]] for (uint q = 0; q < RM / 8; ++q) xrow[q] = min(m0 + q * 8u + gl_SubgroupInvocationID, p.M - 1) * p.ldx / 4;
    [[unroll]] for (uint i = 0; i < RM; ++i)
      [[unroll]] for (uint j = 0; j < RN; ++j) acc[i][j] = 0.0;
#ifdef SLICES
    // Block formats a 32-element slice at a time (blocks.glsl's block_slice: the
    // block's scales read once per slice), w = a·q + c per half of it, so that
    // Σ w·x = a·Σ q·x + c·Σ x: the lanes' rows of X and their half sums are
    // shuffled to the others once per slice for all RN columns.
    for (uint s = 0; s < p.K / 32u; ++s) {
      vec4 w[RN][8];
      vec2 wa[RN], wc[RN];
      [[unroll]] for (uint j = 0; j < RN; ++j) block_slice(wrow[j], s, w[j], wa[j], wc[j]);
      [[unroll]] for (uint q = 0; q < RM / 8; ++q) {
        vec4 xv[8];
        vec2 xs = vec2(0.0);
        [[unroll]] for (uint k = 0; k < 8u; ++k) {
          xv[k] = texelFetch(x_tex, int(xrow[q] + 8u * s + k));
          xs[k >> 2] += dot(xv[k], vec4(1.0));
        }
        SROW(q, 0) SROW(q, 1) SROW(q, 2) SROW(q, 3) SROW(q, 4) SROW(q, 5) SROW(q, 6) SROW(q, 7)
      }
    }
#else
    for (uint c = 0; c < p.K / 8u; ++c) {
      vec4 wl[RN], wh[RN], xl[RM / 8], xh[RM / 8];
      [[unroll]] for (uint j = 0; j < RN; ++j) dequant8(wrow[j], c, wl[j], wh[j]);
      [[unroll]] for (uint q = 0; q < RM / 8; ++q) {
        xl[q] = texelFetch(x_tex, int(xrow[q] + 2u * c));
        xh[q] = texelFetch(x_tex, int(xrow[q] + 2u * c + 1u));
      }
      [[unroll]] for (uint e = 0; e < 8u; ++e) {
        float xk[RM / 8];
        [[unroll]] for (uint q = 0; q < RM / 8; ++q) xk[q] = e < 4u ? xl[q][e] : xh[q][e - 4u];
        [[unroll]] for (uint q = 0; q < RM / 8; ++q) {
          QROW(q, 0, e) QROW(q, 1, e) QROW(q, 2, e) QROW(q, 3, e)
          QROW(q, 4, e) QROW(q, 5, e) QROW(q, 6, e) QROW(q, 7, e)
        }
      }
    }
#endif
    [[unroll]] for (uint i = 0; i < RM; ++i) {
      const uint m = m0 + i;
      if (m >= p.M) break;
      [[unroll]] for (uint j = 0; j < RN; ++j) {
        const uint n = n0 + j;
        if (n >= p.N) break;
        store(m, n, acc[i][j]);
      }
    }
  }
}
#elif defined(SLICE_ROWS)
const uint MR = 8;                              // the most rows of X
#ifdef GLU
const uint NC = 2;  // the gate's row and the up's
#else
layout(constant_id = 2) const uint NC = 1;      // columns per subgroup
#endif
layout(constant_id = 3) const uint SU = 1;      // slices per lane in flight
layout(constant_id = 4) const uint MIN_SG = 8;  // the smallest subgroup the device may run
#include "qrows_gpu.glsl"
// A workgroup's columns are fixed by the smallest subgroup size, and its
// subgroups step over them: a device that runs wider subgroups than that still
// covers every column.
#ifdef GLU
const uint WG_COLUMNS = WG / MIN_SG;
#else
const uint WG_COLUMNS = NC * (WG / MIN_SG);
#endif
void main() {
  LOAD_PARAMS;
  [[unroll]] for (uint i = 0; i < MR; ++i) xrow[i] = min(i, p.M - 1) * (p.ldx / 8u);
  const uint first = gl_WorkGroupID.x * WG_COLUMNS, last = min(first + WG_COLUMNS, p.N);
#ifdef GLU
  for (uint n = first + gl_SubgroupID; n < last; n += gl_NumSubgroups) {
    wrow[0] = n * p.row_bytes;
    wrow[1] = (p.N + n) * p.row_bytes;
    qrows_slices(p.M, p.K);
    if (subgroupElect())
      [[unroll]] for (uint i = 0; i < MR; ++i) {
        if (i >= p.M) break;
        float g = acc[i][0], u = acc[i][1];
        if (p.has_bias != 0) {
          g += bias_ld(n);
          u += bias_ld(p.N + n);
        }
        y_st(i * p.ldy + n, activation(g, p.act) * u);
      }
  }
#else
  for (uint n0 = first + gl_SubgroupID * NC; n0 < last; n0 += gl_NumSubgroups * NC) {
    [[unroll]] for (uint j = 0; j < NC; ++j) wrow[j] = min(n0 + j, p.N - 1) * p.row_bytes;
    qrows_slices(p.M, p.K);
    if (subgroupElect())
      [[unroll]] for (uint i = 0; i < MR; ++i) {
        if (i >= p.M) break;
        [[unroll]] for (uint j = 0; j < NC; ++j)
          if (n0 + j < p.N) store(i, n0 + j, acc[i][j]);
      }
  }
#endif
}
#elif defined(ROWS)
const uint MAX_M = 8;
void main() {
  LOAD_PARAMS;
  const uint n = gl_WorkGroupID.x * gl_NumSubgroups + gl_SubgroupID;
  if (n >= p.N) return;  // whole subgroups leave together
  float acc[MAX_M];
  [[unroll]] for (uint m = 0; m < MAX_M; ++m) acc[m] = 0.0;
  const uint row = n * p.row_bytes;
  for (uint c = gl_SubgroupInvocationID; c < p.K / 8u; c += gl_SubgroupSize) {
    vec4 lo, hi;
    dequant8(row, c, lo, hi);
    [[unroll]] for (uint m = 0; m < MAX_M; ++m) {
      if (m >= p.M) break;
      const uint xi = m * p.ldx + 8u * c;
      acc[m] += dot(lo, vec4(x_ld(xi), x_ld(xi + 1u), x_ld(xi + 2u), x_ld(xi + 3u))) +
                dot(hi, vec4(x_ld(xi + 4u), x_ld(xi + 5u), x_ld(xi + 6u), x_ld(xi + 7u)));
    }
  }
  [[unroll]] for (uint m = 0; m < MAX_M; ++m) {
    if (m >= p.M) break;
    const float v = subgroupAdd(acc[m]);
    if (subgroupElect()) store(m, n, v);
  }
}
#else
// 256 threads: a 32 × 64 tile, 2 × 4 outputs each; K in steps of 32 (4 chunks).
const uint TM = 32, TN = 64, TK = 32, RM = 2, RN = 4;
shared float xs[TM][TK + 1];
shared float ws[TN][TK + 1];
void main() {
  LOAD_PARAMS;
  const uint t = gl_LocalInvocationID.x;
  const uint m0 = gl_WorkGroupID.y * TM, n0 = gl_WorkGroupID.x * TN;
  const uint tm = (t / (TN / RN)) * RM, tn = (t % (TN / RN)) * RN;
  float acc[RM][RN];
  [[unroll]] for (uint i = 0; i < RM; ++i)
    [[unroll]] for (uint j = 0; j < RN; ++j) acc[i][j] = 0.0;
  const uint chunks = p.K / 8u;
  for (uint k0 = 0; k0 < p.K; k0 += TK) {
    {  // thread t dequantizes chunk t % 4 of tile row t / 4 (zeros past N or K)
      const uint r = t / 4u, c = k0 / 8u + (t & 3u);
      vec4 lo = vec4(0.0), hi = vec4(0.0);
      if (n0 + r < p.N && c < chunks) dequant8((n0 + r) * p.row_bytes, c, lo, hi);
      const uint kk = (t & 3u) * 8u;
      [[unroll]] for (uint e = 0; e < 4u; ++e) {
        ws[r][kk + e] = lo[e];
        ws[r][kk + 4u + e] = hi[e];
      }
    }
    [[unroll]] for (uint e = 0; e < TM * TK / 256u; ++e) {
      const uint i = t + 256u * e, r = i / TK, k = i % TK;
      xs[r][k] = m0 + r < p.M && k0 + k < p.K ? x_ld((m0 + r) * p.ldx + k0 + k) : 0.0;
    }
    barrier();
    for (uint k = 0; k < TK; ++k) {
      float a[RM], w[RN];
      [[unroll]] for (uint i = 0; i < RM; ++i) a[i] = xs[tm + i][k];
      [[unroll]] for (uint j = 0; j < RN; ++j) w[j] = ws[tn + j][k];
      [[unroll]] for (uint i = 0; i < RM; ++i)
        [[unroll]] for (uint j = 0; j < RN; ++j) acc[i][j] = fma(a[i], w[j], acc[i][j]);
    }
    barrier();
  }
  [[unroll]] for (uint i = 0; i < RM; ++i)
    [[unroll]] for (uint j = 0; j < RN; ++j)
      if (m0 + tm + i < p.M && n0 + tn + j < p.N) store(m0 + tm + i, n0 + tn + j, acc[i][j]);
}
#endif
