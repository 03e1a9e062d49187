#version 450
#extension GL_GOOGLE_include_directive : require
// Variants (the build compiles one SPIR-V module per line: name, then defines):
// variant: moe_matmul
// variant: moe_matmul_f16 T=F16 Y_T=F16
// variant: moe_matmul_f16_y32 T=F16
// variant: moe_matmul_bf16 T=BF16 Y_T=BF16
// variant: moe_matmul_bf16_y32 T=BF16
// variant: moe_matmul_rows ROWS
// variant: moe_matmul_rows_f16 ROWS T=F16 Y_T=F16
// variant: moe_matmul_rows_f16_y32 ROWS T=F16
// variant: moe_matmul_rows_bf16 ROWS T=BF16 Y_T=BF16
// variant: moe_matmul_rows_bf16_y32 ROWS T=BF16
// variant: moe_matmul_rows_cpu ROWS_CPU TEXEL
// variant: moe_matmul_rows_cpu_f16 ROWS_CPU TEXEL T=F16 Y_T=F16
// variant: moe_matmul_rows_cpu_f16_y32 ROWS_CPU TEXEL T=F16
// variant: moe_matmul_cpu REGISTER_TILED TEXEL
// variant: moe_matmul_cpu_f16 REGISTER_TILED TEXEL T=F16 Y_T=F16
// variant: moe_matmul_cpu_f16_y32 REGISTER_TILED TEXEL T=F16
// variant: moe_matmul_cpu_bf16 REGISTER_TILED TEXEL T=BF16 Y_T=BF16
// variant: moe_matmul_cpu_bf16_y32 REGISTER_TILED TEXEL T=BF16
// variant: moe_matmul_q_rows QUANT ROWS
// variant: moe_matmul_q_rows_f16 QUANT ROWS T=F16 Y_T=F16
// variant: moe_matmul_q_rows_f16_y32 QUANT ROWS T=F16
// variant: moe_matmul_q_rows_bf16 QUANT ROWS T=BF16 Y_T=BF16
// variant: moe_matmul_q_rows_bf16_y32 QUANT ROWS T=BF16
// variant: moe_matmul_q_slices QUANT SLICE_ROWS
// variant: moe_matmul_q_slices_f16 QUANT SLICE_ROWS T=F16 Y_T=F16
// variant: moe_matmul_q_slices_f16_y32 QUANT SLICE_ROWS T=F16
// variant: moe_matmul_q_slices_bf16 QUANT SLICE_ROWS T=BF16 Y_T=BF16
// variant: moe_matmul_q_slices_bf16_y32 QUANT SLICE_ROWS T=BF16
// variant: moe_matmul_q QUANT
// variant: moe_matmul_q_f16 QUANT T=F16 Y_T=F16
// variant: moe_matmul_q_f16_y32 QUANT T=F16
// variant: moe_matmul_q_bf16 QUANT T=BF16 Y_T=BF16
// variant: moe_matmul_q_bf16_y32 QUANT T=BF16
// variant: moe_matmul_q_rows_cpu QUANT ROWS_CPU TEXEL
// variant: moe_matmul_q_rows_cpu_f16 QUANT ROWS_CPU TEXEL T=F16 Y_T=F16
// variant: moe_matmul_q_rows_cpu_f16_y32 QUANT ROWS_CPU TEXEL T=F16
// variant: moe_matmul_q_cpu QUANT REGISTER_TILED TEXEL
// variant: moe_matmul_q_cpu_f16 QUANT REGISTER_TILED TEXEL T=F16 Y_T=F16
// variant: moe_matmul_q_cpu_f16_y32 QUANT REGISTER_TILED TEXEL T=F16
// The experts' grouped GEMM: for each tile of moe_route.comp (an expert e and
// a run of its rows p in [p0, p1)),
//   Y[p, n] = Σ_k X[src(p), k] · W[e − e_begin][n, k]
// with src(p) = rows[p] (gather: X holds one row per token) or p (X already
// in expert order). Only the experts that received tokens are read, and only
// their tiles get workgroups: the device writes each buffer's dispatch.
// Workgroup y is the tile, x a block of columns.
//
// ROWS (steps of a few tokens, tiles of ≤ MR rows): one subgroup per output
// column streams W[n, :] with consecutive lanes on consecutive k, as
// matvec.comp; a shared-memory tile would be mostly idle rows. Otherwise the
// shared-memory tiles of gemm_tile.glsl. On CPU drivers (TEXEL: X and W read
// through texel views, as matmul.comp's CPU kernels, for the reasons
// gemm_cpu.glsl gives) ROWS_CPU takes matmul.comp's ROWS_CPU scheme and
// REGISTER_TILED gemm_cpu.glsl's, over the tile's gathered rows.
//
// QUANT: W in one of ggml's block formats (or F32/F16/BF16), read as stored
// and dequantized in registers by blocks.glsl, the format specialization
// constant 1 (ggml's type id, as qmatmul.comp) and the kernels' own constants
// from 2. Arithmetic is fp32. An expert's bytes sit expert_bytes apart; the
// dispatch's N rows of row_bytes each start w_at bytes into them and write
// the columns from col0 (a [gate ; up] whose halves differ in format runs
// one dispatch per half). W is bound as 32-bit words (an R32_UINT texel view
// with TEXEL). The CPU kernels read X as RGBA texels (ldx a multiple of 4),
// K in chunks of 8. SLICE_ROWS (GPUs, steps of a few tokens, block formats)
// is qmatmul.comp's decode kernel (qrows_gpu.glsl) over the tile's rows: W
// bound as 16-byte units, X read 8 elements a load (ldx a multiple of 8).
#include "common.glsl"
#include "storage.glsl"
#ifndef T
#define T F32
#endif
#ifndef Y_T
#define Y_T F32
#endif

#ifdef SLICE_ROWS
VEC8_RO(0, x, T)
#else
IN(0, x, T)
#endif
#ifdef QUANT
layout(constant_id = 1) const uint FMT = 8;
#ifdef SLICE_ROWS
layout(std430, binding = 1) readonly buffer QuadBuf { uvec4 w_quads[]; };
#define BLOCK_QUAD(i) w_quads[i]
#define BLOCK_WORD(i) w_quads[(i) >> 2][(i) & 3u]
#elif defined(TEXEL)
layout(binding = 1) uniform usamplerBuffer w_tex;
#ifdef ROWS_CPU
// Block formats as an RGBA32UI view (ops::qrows_cpu_view), F32/F16/BF16 as R32_UINT.
#define BLOCK_QUAD(i) texelFetch(w_tex, int(i))
#define BLOCK_WORD(i) (BLOCK_ELEMS > 8u ? texelFetch(w_tex, int((i) >> 2))[(i) & 3u] : texelFetch(w_tex, int(i)).x)
#else
#define BLOCK_WORD(i) texelFetch(w_tex, int(i)).x
#endif
#else
layout(std430, binding = 1) readonly buffer WordBuf { uint w_words[]; };
#define BLOCK_WORD(i) w_words[i]
#endif
#include "blocks.glsl"
#else
IN(1, w, T)
#endif
RW(2, y, Y_T)
layout(std430, binding = 3) readonly buffer Route { uint route[]; };
layout(std430, binding = 4) readonly buffer Tiles { uint tiles[]; };

#include "params.glsl"
struct Push {
  uint N, K, ldx, ldy;
  uint gather, e_begin, e_end, off_rows;
  uint row_bytes, expert_bytes, w_at, col0;  // QUANT only
};
PARAMS(Push)

uint tile_expert, tile_p0, tile_p1;
uint src_row(uint row) { return p.gather != 0 ? route[p.off_rows + row] : row; }
uint w_base() { return (tile_expert - p.e_begin) * p.N * p.K; }

// This workgroup's tile: the y-th of the tiles of experts from e_begin (the
// dispatch has as many rows of workgroups as this buffer's experts have tiles,
// moe_route.comp), found by bisection in the expert-sorted list; false past it.
bool load_tile() {
  uint lo = 0, hi = tiles[0];
  while (lo < hi) {
    const uint mid = (lo + hi) / 2;
    if (tiles[4 + 4 * mid] < p.e_begin) lo = mid + 1;
    else hi = mid;
  }
  const uint t = lo + gl_WorkGroupID.y;
  if (t >= tiles[0]) return false;
  tile_expert = tiles[4 + 4 * t];
  tile_p0 = tiles[5 + 4 * t];
  tile_p1 = tiles[6 + 4 * t];
  return tile_expert >= p.e_begin && tile_expert < p.e_end;
}

#if defined(QUANT)
// Byte offset of row n of the tile's expert, and the store of column n.
uint q_row(uint n) { return (tile_expert - p.e_begin) * p.expert_bytes + p.w_at + n * p.row_bytes; }
void q_store(uint row, uint n, float v) { y_st(row * p.ldy + p.col0 + n, v); }

#if defined(SLICE_ROWS)
layout(constant_id = 2) const uint MR = 8;      // the most rows a tile has
layout(constant_id = 3) const uint NC = 1;      // columns per subgroup
layout(constant_id = 4) const uint SU = 1;      // slices per lane in flight
layout(constant_id = 5) const uint MIN_SG = 8;  // the smallest subgroup the device may run
#include "qrows_gpu.glsl"
// As qmatmul.comp's: a workgroup's columns fixed by the smallest subgroup size.
const uint WG_COLUMNS = NC * (WG / MIN_SG);

void main() {
  LOAD_PARAMS;
  if (!load_tile()) return;
  const uint count = tile_p1 - tile_p0;
  [[unroll]] for (uint i = 0; i < MR; ++i) xrow[i] = src_row(tile_p0 + min(i, count - 1)) * (p.ldx / 8u);
  const uint first = gl_WorkGroupID.x * WG_COLUMNS, last = min(first + WG_COLUMNS, p.N);
  for (uint n0 = first + gl_SubgroupID * NC; n0 < last; n0 += gl_NumSubgroups * NC) {
    [[unroll]] for (uint j = 0; j < NC; ++j) wrow[j] = q_row(min(n0 + j, p.N - 1));
    qrows_slices(count, p.K);
    if (subgroupElect())
      [[unroll]] for (uint i = 0; i < MR; ++i) {
        if (i >= count) break;
        [[unroll]] for (uint j = 0; j < NC; ++j)
          if (n0 + j < p.N) q_store(tile_p0 + i, n0 + j, acc[i][j]);
      }
  }
}
#elif defined(ROWS_CPU)
// As ROWS_CPU below, the lanes' shares by qrows_cpu.glsl.
layout(constant_id = 2) const uint MR = 1;  // the most rows a tile has (the step's tokens, ≤ 8)
layout(constant_id = 3) const uint NB = 8;
#include "qrows_cpu.glsl"

void main() {
  LOAD_PARAMS;
  if (!load_tile()) return;
  const uint count = tile_p1 - tile_p0;
  [[unroll]] for (uint i = 0; i < MR; ++i) xrow[i] = src_row(tile_p0 + min(i, count - 1)) * p.ldx / 4;
  for (uint n0 = gl_WorkGroupID.x * NB; n0 < p.N; n0 += gl_NumWorkGroups.x * NB) {
    [[unroll]] for (uint j = 0; j < NB; ++j) wrow[j] = q_row(min(n0 + j, p.N - 1));
    qrows_cpu(p.K);
    if (gl_SubgroupInvocationID == 0)
      [[unroll]] for (uint i = 0; i < MR; ++i) {
        if (i >= count) break;
        [[unroll]] for (uint j = 0; j < NB; ++j)
          if (n0 + j < p.N) q_store(tile_p0 + i, n0 + j, acc[i][j]);
      }
  }
}
#elif defined(REGISTER_TILED)
// gemm_cpu.glsl's shape over the tile's gathered rows: the lane owns RN
// columns, dequantized 8 k at a time, and loads rows l, l + 8, ... of the
// tile, which shuffles hand to the other lanes.
#extension GL_KHR_shader_subgroup_shuffle : require
layout(constant_id = 2) const uint RM = 64;  // the tile's rows (a multiple of 8, ≤ 64)
layout(constant_id = 3) const uint RN = 8;
float acc[RM][RN];
// Row 8q + r of the tile: its k-element from lane r, times the lane's RN weights wk.
#define Q_ROW(q, r)                                        \
  {                                                        \
    const float a = subgroupShuffle(xk[q], r);             \
    [[unroll]] for (uint j = 0; j < RN; ++j)               \
      acc[q * 8 + r][j] = fma(a, wk[j], acc[q * 8 + r][j]); \
  }

void main() {
  LOAD_PARAMS;
  if (!load_tile()) return;
  const uint n0 = (gl_WorkGroupID.x * 8 + gl_SubgroupInvocationID) * RN;
  const uint count = tile_p1 - tile_p0;
  uint xrow[RM / 8], wrow[RN];
  [[unroll]] for (uint q = 0; q < RM / 8; ++q)
    xrow[q] = src_row(tile_p0 + min(q * 8 + gl_SubgroupInvocationID, count - 1)) * p.ldx / 4;
  [[unroll]] for (uint j = 0; j < RN; ++j) wrow[j] = q_row(min(n0 + j, p.N - 1));
  [[unroll]] for (uint i = 0; i < RM; ++i)
    [[unroll]] for (uint j = 0; j < RN; ++j) acc[i][j] = 0.0;
  for (uint c = 0; c < p.K / 8; ++c) {
    vec4 wl[RN], wh[RN], xl[RM / 8], xh[RM / 8];
    [[unroll]] for (uint j = 0; j < RN; ++j) dequant8(wrow[j], c, wl[j], wh[j]);
    [[unroll]] for (uint q = 0; q < RM / 8; ++q) {
      xl[q] = texelFetch(x_tex, int(xrow[q] + 2 * c));
      xh[q] = texelFetch(x_tex, int(xrow[q] + 2 * c + 1));
    }
    [[unroll]] for (uint e = 0; e < 8; ++e) {
      float xk[RM / 8], wk[RN];
      [[unroll]] for (uint q = 0; q < RM / 8; ++q) xk[q] = e < 4 ? xl[q][e] : xh[q][e - 4];
      [[unroll]] for (uint j = 0; j < RN; ++j) wk[j] = e < 4 ? wl[j][e] : wh[j][e - 4];
      [[unroll]] for (uint q = 0; q < RM / 8; ++q) {
        Q_ROW(q, 0) Q_ROW(q, 1) Q_ROW(q, 2) Q_ROW(q, 3)
        Q_ROW(q, 4) Q_ROW(q, 5) Q_ROW(q, 6) Q_ROW(q, 7)
      }
    }
  }
  [[unroll]] for (uint i = 0; i < RM; ++i) {
    if (i >= count) break;
    [[unroll]] for (uint j = 0; j < RN; ++j)
      if (n0 + j < p.N) q_store(tile_p0 + i, n0 + j, acc[i][j]);
  }
}
#elif defined(ROWS)
// One subgroup per output column, its lanes on consecutive 8-element chunks.
#extension GL_KHR_shader_subgroup_arithmetic : require
layout(constant_id = 2) const uint MR = 8;  // the most rows a tile has

void main() {
  LOAD_PARAMS;
  if (!load_tile()) return;
  const uint n = gl_WorkGroupID.x * gl_NumSubgroups + gl_SubgroupID;
  if (n >= p.N) return;  // whole subgroups leave together
  const uint count = tile_p1 - tile_p0;
  uint src[MR];
  float acc[MR];
  [[unroll]] for (uint i = 0; i < MR; ++i) {
    src[i] = src_row(tile_p0 + min(i, count - 1)) * p.ldx;
    acc[i] = 0.0;
  }
  const uint wrow = q_row(n);
  for (uint c = gl_SubgroupInvocationID; c < p.K / 8; c += gl_SubgroupSize) {
    vec4 lo, hi;
    dequant8(wrow, c, lo, hi);
    [[unroll]] for (uint i = 0; i < MR; ++i) {
      if (i >= count) break;
      const uint k = src[i] + 8 * c;
      acc[i] += dot(lo, vec4(x_ld(k), x_ld(k + 1), x_ld(k + 2), x_ld(k + 3))) +
                dot(hi, vec4(x_ld(k + 4), x_ld(k + 5), x_ld(k + 6), x_ld(k + 7)));
    }
  }
  [[unroll]] for (uint i = 0; i < MR; ++i) {
    if (i >= count) break;
    const float v = subgroupAdd(acc[i]);
    if (gl_SubgroupInvocationID == 0) q_store(tile_p0 + i, n, v);
  }
}
#else
// Tiles of BM rows × 64 columns, K in steps of 32: thread t dequantizes chunk
// t % 4 of W's row t / 4 and loads BM / 8 elements of X into shared memory,
// then accumulates RM × 4 outputs. 256 threads.
layout(constant_id = 2) const uint BM = 64;  // ≥ the tile's rows, a multiple of 16
layout(constant_id = 3) const uint RM = 4;   // BM / 16
const uint BN = 64, BK = 32;
shared uint tile_src[BM];  // the tile's source rows (offsets into X)
shared float xs[BM][BK + 1];
shared float ws[BN][BK + 1];

void main() {
  LOAD_PARAMS;
  if (!load_tile()) return;
  const uint t = gl_LocalInvocationID.x, count = tile_p1 - tile_p0;
  for (uint i = t; i < BM; i += WG) tile_src[i] = src_row(tile_p0 + min(i, count - 1)) * p.ldx;
  const uint n0 = gl_WorkGroupID.x * BN;
  const uint tm = (t / 16) * RM, tn = (t % 16) * 4;
  float acc[RM][4];
  [[unroll]] for (uint i = 0; i < RM; ++i)
    [[unroll]] for (uint j = 0; j < 4; ++j) acc[i][j] = 0.0;
  for (uint k0 = 0; k0 < p.K; k0 += BK) {
    barrier();  // tile_src written; the previous step's tiles read
    {
      const uint r = t / 4, c = k0 / 8 + (t & 3), kk = (t & 3) * 8;
      vec4 lo = vec4(0.0), hi = vec4(0.0);
      if (n0 + r < p.N && c < p.K / 8) dequant8(q_row(n0 + r), c, lo, hi);
      [[unroll]] for (uint e = 0; e < 4; ++e) {
        ws[r][kk + e] = lo[e];
        ws[r][kk + 4 + e] = hi[e];
      }
    }
    for (uint i = t; i < BM * BK; i += WG) {
      const uint r = i / BK, k = i % BK;
      xs[r][k] = r < count && k0 + k < p.K ? x_ld(tile_src[r] + k0 + k) : 0.0;
    }
    barrier();
    for (uint k = 0; k < BK; ++k) {
      float a[RM], b[4];
      [[unroll]] for (uint i = 0; i < RM; ++i) a[i] = xs[tm + i][k];
      [[unroll]] for (uint j = 0; j < 4; ++j) b[j] = ws[tn + j][k];
      [[unroll]] for (uint i = 0; i < RM; ++i)
        [[unroll]] for (uint j = 0; j < 4; ++j) acc[i][j] = fma(a[i], b[j], acc[i][j]);
    }
  }
  [[unroll]] for (uint i = 0; i < RM; ++i) {
    if (tm + i >= count) break;
    [[unroll]] for (uint j = 0; j < 4; ++j)
      if (n0 + tn + j < p.N) q_store(tile_p0 + tm + i, n0 + tn + j, acc[i][j]);
  }
}
#endif
#elif defined(ROWS_CPU)
// One 8-lane subgroup per workgroup, NB columns at a time, stepping over the
// column blocks (a few workgroups per tile: launching one costs llvmpipe more
// than an empty one saves); lane l takes the vec4s l, l + 8, ... of each row
// (RGBA views; K and ldx multiples of 4) and subgroupAdd sums them.
#extension GL_KHR_shader_subgroup_arithmetic : require
layout(constant_id = 1) const uint MR = 1;  // the most rows a tile has (the step's tokens, ≤ 8)
layout(constant_id = 2) const uint NB = 8;

void main() {
  LOAD_PARAMS;
  if (!load_tile()) return;
  const uint count = tile_p1 - tile_p0;
  uint xrow[MR];
  [[unroll]] for (uint i = 0; i < MR; ++i) xrow[i] = src_row(tile_p0 + min(i, count - 1)) * p.ldx / 4;
  for (uint n0 = gl_WorkGroupID.x * NB; n0 < p.N; n0 += gl_NumWorkGroups.x * NB) {
    uint wrow[NB];
    [[unroll]] for (uint j = 0; j < NB; ++j) wrow[j] = (w_base() + min(n0 + j, p.N - 1) * p.K) / 4;
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
    if (gl_SubgroupInvocationID == 0)
      [[unroll]] for (uint i = 0; i < MR; ++i) {
        if (i >= count) break;
        [[unroll]] for (uint j = 0; j < NB; ++j)
          if (n0 + j < p.N) y_st((tile_p0 + i) * p.ldy + n0 + j, acc[i][j]);
      }
  }
}
#elif defined(REGISTER_TILED)
layout(constant_id = 1) const uint RM = 64;  // the tile's rows (a multiple of 8)
layout(constant_id = 2) const uint RN = 8;
uint a_row(uint m) { return src_row(tile_p0 + m) * p.ldx; }
float a_at(uint i) { return x_ld(i); }
uint b_col(uint n) { return w_base() + n * p.K; }
float b_at(uint i) { return w_ld(i); }
#include "gemm_cpu.glsl"

void main() {
  LOAD_PARAMS;
  if (!load_tile()) return;
  const uint n0 = (gl_WorkGroupID.x * WG + gl_LocalInvocationID.x) * RN;
  const uint count = tile_p1 - tile_p0;
  gemm_cpu(0, n0, count, p.N, p.K, 1);
  [[unroll]] for (uint i = 0; i < RM; ++i) {
    if (i >= count) break;
    [[unroll]] for (uint j = 0; j < RN; ++j)
      if (n0 + j < p.N) y_st((tile_p0 + i) * p.ldy + n0 + j, acc[i][j]);
  }
}
#elif defined(ROWS)
#extension GL_KHR_shader_subgroup_arithmetic : require
layout(constant_id = 1) const uint MR = 8;  // the most rows a tile has

void main() {
  LOAD_PARAMS;
  if (!load_tile()) return;
  const uint n = gl_WorkGroupID.x * gl_NumSubgroups + gl_SubgroupID;
  if (n >= p.N) return;  // whole subgroups leave together
  const uint count = tile_p1 - tile_p0;
  uint src[MR];
  float acc[MR];
  [[unroll]] for (uint i = 0; i < MR; ++i) {
    src[i] = src_row(tile_p0 + min(i, count - 1)) * p.ldx;
    acc[i] = 0.0;
  }
  const uint wrow = w_base() + n * p.K;
  for (uint k = gl_SubgroupInvocationID; k < p.K; k += gl_SubgroupSize) {
    const float wv = w_ld(wrow + k);
    [[unroll]] for (uint i = 0; i < MR; ++i)
      if (i < count) acc[i] = fma(x_ld(src[i] + k), wv, acc[i]);
  }
  [[unroll]] for (uint i = 0; i < MR; ++i) {
    if (i >= count) break;
    const float v = subgroupAdd(acc[i]);
    if (gl_SubgroupInvocationID == 0) y_st((tile_p0 + i) * p.ldy + n, v);
  }
}
#else
layout(constant_id = 1) const uint BM = 64;
layout(constant_id = 2) const uint BN = 64;
layout(constant_id = 3) const uint BK = 16;
layout(constant_id = 4) const uint TM = 4;
layout(constant_id = 5) const uint TN = 4;

shared uint tile_src[BM];  // the tile's source rows (offsets into X)
float load_a(uint m, uint k) { return (tile_p0 + m < tile_p1 && k < p.K) ? x_ld(tile_src[m] + k) : 0.0; }
float load_b(uint n, uint k) { return (n < p.N && k < p.K) ? w_ld(w_base() + n * p.K + k) : 0.0; }

#include "gemm_tile.glsl"

void main() {
  LOAD_PARAMS;
  if (!load_tile()) return;
  for (uint i = gl_LocalInvocationID.x; i < BM; i += WG) tile_src[i] = src_row(tile_p0 + min(i, tile_p1 - tile_p0 - 1)) * p.ldx;
  barrier();
  const uint n0 = gl_WorkGroupID.x * BN;
  gemm_tile(0, n0, 0, p.K);
  [[unroll]] for (uint i = 0; i < TM; ++i) {
    const uint m = tile_row(0, i);
    if (tile_p0 + m >= tile_p1) break;
    [[unroll]] for (uint j = 0; j < TN; ++j) {
      const uint n = tile_col(n0, j);
      if (n < p.N) y_st((tile_p0 + m) * p.ldy + n, acc[i][j]);
    }
  }
}
#endif
