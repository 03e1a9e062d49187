#version 450
#extension GL_GOOGLE_include_directive : require
// Variants (the build compiles one SPIR-V module per line: name, then defines):
// variant: attention
// variant: attention_f16_scores A_T=F16 B_T=F16
// variant: attention_f16_values B_T=F16 C_T=F16
// variant: attention_bf16_scores A_T=BF16 B_T=BF16
// variant: attention_bf16_values B_T=BF16 C_T=BF16
// variant: attention_cpu REGISTER_TILED TEXEL
// variant: attention_cpu_f16_scores REGISTER_TILED TEXEL A_T=F16 B_T=F16
// variant: attention_cpu_f16_values REGISTER_TILED TEXEL B_T=F16 C_T=F16
// variant: attention_cpu_bf16_scores REGISTER_TILED TEXEL A_T=BF16 B_T=BF16
// variant: attention_cpu_bf16_values REGISTER_TILED TEXEL B_T=BF16 C_T=BF16
// variant: attention_rows_cpu ROWS_CPU TEXEL
// variant: attention_rows_cpu_f16_scores ROWS_CPU TEXEL A_T=F16 B_T=F16
// variant: attention_rows_cpu_f16_values ROWS_CPU TEXEL B_T=F16 C_T=F16
// The two attention products as a batched GEMM over (batch, query head):
//   C[b,h](m, n) = Σ_k A[b,h](m, k) · B[b, kv(h)](k, n)
// scores: A = q [T, Dh], B(k=d, n=s) = key s   → C = raw scores [T, S]
// P·V:    A = probabilities [T, S], B(k=s, n=d) = value s → C = SDPA output
// Query head h reads KV head kv(h) = h / G (G = H/KV: MHA G=1, MQA G=H), or
// h % KV with tiled GQA (BlockConfig::gqa_mapping). Every
// stride comes from push constants, so one pipeline serves both products.
// Storage types: A_T, B_T, C_T (q/k/v in the activation type, scores fp32).
// With TEXEL (the CPU-driver variants) A and B are texel buffers.
// ROWS_CPU (CPU drivers, a few rows: a decode step's query, or a KV group's
// query heads as the rows; ops::attention_scores picks it) reads them as RGBA
// texels and computes only those rows, where the register tiles pad a
// group of 2 heads to 8 rows and a handful of keys to 64 columns (lavapipe,
// the 0.6B shape's step of 8 sequences: 186 µs per row and layer's scores
// in the tiles, 115 here).
#include "common.glsl"
#include "storage.glsl"
#ifndef A_T
#define A_T F32
#endif
#ifndef B_T
#define B_T F32
#endif
#ifndef C_T
#define C_T F32
#endif

IN(0, a, A_T)
IN(1, b, B_T)
RW(2, c, C_T)

#include "params.glsl"
struct Push {
  uint M, N, K;
  uint heads, group;          // H and G = H / KV
  uint a_sb, a_sh, a_sm;      // A: batch, head, row strides (k contiguous)
  uint b_sb, b_sh, b_sk, b_sn;  // B: batch, KV-head, k and n strides
  uint c_sb, c_sh, c_sm;      // C: batch, head, row strides (n contiguous)
  // Causal attention: row m sees keys ≤ past + m; the keys are the columns
  // (1: scores) or k (2: P·V), 0: not causal. The CPU kernels skip what
  // lies beyond (the softmax writes zeros there); the others compute all.
  uint causal, past;
  uint a_off, c_off;  // added to A's and C's (batch, head) base: a chunk of the queries
  uint tiled_kv;      // KV with tiled GQA (kv(h) = h % KV); 0: kv(h) = h / group
};
PARAMS(Push)

uint a_base, b_base;

#if defined(ROWS_CPU)
#extension GL_KHR_shader_subgroup_arithmetic : require
layout(constant_id = 1) const uint MR = 1;      // rows (M ≤ MR ≤ 8)
layout(constant_id = 2) const uint VALUES = 0;  // 0: scores, B's k contiguous; 1: P·V, B's n contiguous
// Scores: a workgroup per 8 columns (keys), the lanes splitting k (head_dim)
// in vec4s and subgroupAdd summing them. P·V: a workgroup per 32 columns
// (head_dim), lane l owning 4 of them and walking every k (key), A's value at
// k the same for all lanes. Offsets and strides in elements, multiples of 4 (the host checks).
void rows_cpu(uint c_base) {
  const uint lane = gl_SubgroupInvocationID;
  if (VALUES == 0) {
    const uint n0 = gl_WorkGroupID.x * 8u;
    float acc[MR][8];
    [[unroll]] for (uint i = 0; i < MR; ++i)
      [[unroll]] for (uint j = 0; j < 8u; ++j) acc[i][j] = 0.0;
    for (uint k4 = lane; k4 < p.K / 4u; k4 += 8u) {
      vec4 av[MR];
      [[unroll]] for (uint i = 0; i < MR; ++i) av[i] = texelFetch(a_tex, int((a_base + min(i, p.M - 1u) * p.a_sm) / 4u + k4));
      [[unroll]] for (uint j = 0; j < 8u; ++j) {
        const vec4 bv = texelFetch(b_tex, int((b_base + min(n0 + j, p.N - 1u) * p.b_sn) / 4u + k4));
        [[unroll]] for (uint i = 0; i < MR; ++i) acc[i][j] += dot(av[i], bv);
      }
    }
    [[unroll]] for (uint i = 0; i < MR; ++i)
      [[unroll]] for (uint j = 0; j < 8u; ++j) acc[i][j] = subgroupAdd(acc[i][j]);
    if (lane != 0) return;
    [[unroll]] for (uint i = 0; i < MR; ++i) {
      if (i >= p.M) break;
      [[unroll]] for (uint j = 0; j < 8u; ++j)
        if (n0 + j < p.N) c_st(c_base + i * p.c_sm + n0 + j, acc[i][j]);
    }
  } else {
    const uint n = gl_WorkGroupID.x * 32u + 4u * lane;
    const uint col = min(n, p.N - 4u) / 4u;  // a lane past N reads the last vec4 and stores nothing
    vec4 acc[MR];
    [[unroll]] for (uint i = 0; i < MR; ++i) acc[i] = vec4(0.0);
    for (uint k = 0; k < p.K; ++k) {
      const vec4 bv = texelFetch(b_tex, int((b_base + k * p.b_sk) / 4u + col));
      [[unroll]] for (uint i = 0; i < MR; ++i) {
        const uint at = a_base + min(i, p.M - 1u) * p.a_sm + k;
        acc[i] += texelFetch(a_tex, int(at / 4u))[at % 4u] * bv;
      }
    }
    if (n >= p.N) return;
    [[unroll]] for (uint i = 0; i < MR; ++i) {
      if (i >= p.M) break;
      [[unroll]] for (uint j = 0; j < 4u; ++j) c_st(c_base + i * p.c_sm + n + j, acc[i][j]);
    }
  }
}
#elif defined(REGISTER_TILED)
// CPU drivers: one 8-lane subgroup per RM×(8·RN) tile (see gemm_cpu.glsl).
layout(constant_id = 1) const uint RM = 64;
layout(constant_id = 2) const uint RN = 8;
uint a_row(uint m) { return a_base + m * p.a_sm; }
float a_at(uint i) { return a_ld(i); }
uint b_col(uint n) { return b_base + n * p.b_sn; }
float b_at(uint i) { return b_ld(i); }
#include "gemm_cpu.glsl"
#else
layout(constant_id = 1) const uint BM = 32;
layout(constant_id = 2) const uint BN = 32;
layout(constant_id = 3) const uint BK = 16;
layout(constant_id = 4) const uint TM = 2;
layout(constant_id = 5) const uint TN = 4;

float load_a(uint m, uint k) { return (m < p.M && k < p.K) ? a_ld(a_base + m * p.a_sm + k) : 0.0; }
float load_b(uint n, uint k) {
  return (n < p.N && k < p.K) ? b_ld(b_base + k * p.b_sk + n * p.b_sn) : 0.0;
}

#include "gemm_tile.glsl"
#endif

void main() {
  LOAD_PARAMS;
  const uint bh = gl_WorkGroupID.z;
  const uint batch = bh / p.heads, h = bh - batch * p.heads;
  a_base = batch * p.a_sb + h * p.a_sh + p.a_off;
  b_base = batch * p.b_sb + (p.tiled_kv != 0 ? h % p.tiled_kv : h / p.group) * p.b_sh;
  const uint c_base = batch * p.c_sb + h * p.c_sh + p.c_off;
#if defined(ROWS_CPU)
  rows_cpu(c_base);
#elif defined(REGISTER_TILED)
  const uint n0 = (gl_WorkGroupID.x * WG + gl_LocalInvocationID.x) * RN;
  for (uint m0 = gl_WorkGroupID.y * RM; m0 < p.M; m0 += gl_NumWorkGroups.y * RM) {
    const uint last_key = p.past + min(m0 + RM, p.M) - 1;  // of the tile's last row
    if (p.causal == 1 && gl_WorkGroupID.x * WG * RN > last_key) continue;  // the whole tile is masked
    gemm_cpu(m0, n0, p.M, p.N, p.causal == 2 ? min(p.K, last_key + 1) : p.K, p.b_sk);
    [[unroll]] for (uint i = 0; i < RM; ++i) {
      const uint m = m0 + i;
      if (m >= p.M) break;
      [[unroll]] for (uint j = 0; j < RN; ++j) {
        const uint n = n0 + j;
        if (n >= p.N) break;
        c_st(c_base + m * p.c_sm + n, acc[i][j]);
      }
    }
  }
#else
  const uint m0 = gl_WorkGroupID.y * BM, n0 = gl_WorkGroupID.x * BN;
  gemm_tile(m0, n0, 0, p.K);
  [[unroll]] for (uint i = 0; i < TM; ++i) {
    uint m = tile_row(m0, i);
    if (m >= p.M) break;
    [[unroll]] for (uint j = 0; j < TN; ++j) {
      uint n = tile_col(n0, j);
      if (n >= p.N) break;
      c_st(c_base + m * p.c_sm + n, acc[i][j]);
    }
  }
#endif
}
