#version 450
#extension GL_GOOGLE_include_directive : require
// Variants (the build compiles one SPIR-V module per line: name, then defines):
// variant: qkv_prepare
// variant: qkv_prepare_f16 T=F16
// variant: qkv_prepare_bf16 T=BF16
// variant: qkv_prepare_sg ONE_SUBGROUP TEXEL
// variant: qkv_prepare_f16_sg T=F16 ONE_SUBGROUP TEXEL
// variant: qkv_prepare_bf16_sg T=BF16 ONE_SUBGROUP TEXEL
// variant: qkv_prepare_seqs SEQUENCES
// variant: qkv_prepare_seqs_f16 T=F16 SEQUENCES
// variant: qkv_prepare_seqs_bf16 T=BF16 SEQUENCES
// variant: qkv_prepare_seqs_sg SEQUENCES ONE_SUBGROUP TEXEL
// variant: qkv_prepare_seqs_f16_sg T=F16 SEQUENCES ONE_SUBGROUP TEXEL
// variant: qkv_prepare_seqs_bf16_sg T=BF16 SEQUENCES ONE_SUBGROUP TEXEL
// The per-head work between the projection and attention, in one dispatch:
// - q and the new keys: the query or key gate (G4, G3) when the block has
//   one, RMSNorm over each head (q_norm / k_norm, when the model has them;
//   statistics in fp32), then RoPE, rotate-half or interleaved pairs, on the
//   first `rotary` dims (as rope.comp: cos/sin from the host's table at
//   binding 3);
// - the new values: the value gate (G2) when the block has one, else moved
//   as they are. The caches so hold gated values and gated keys.
// Sources are views into the projections; q goes to [B, H, T, Dh] and the
// keys and values to the caches [B, KV, seq, Dh] at positions first + t.
// As separate passes (rmsnorm.comp, rope.comp) a decode step paid a dispatch
// and a barrier for each of q, k and v: 13 µs of the H100's 123 (BENCHMARKS.md).
// One workgroup per row; the rows of token bt are its H query heads, then its
// KV key heads, then its KV value heads, so a row's kind is uniform in the
// workgroup. Storage type T everywhere but the weights and table (fp32); the
// TEXEL variants (CPU drivers) read through texel views.
// SEQUENCES: each b is a sequence of a batched step with its own caches (arrays
// of MAX_SEQS buffers [KV, seq_b, Dh]) and positions, and the table holds B·T
// rows, one per (b, t).
#include "common.glsl"
#include "reduce.glsl"
#include "storage.glsl"
#ifndef T
#define T F32
#endif

IN(0, x, T)
IN(1, qw, F32)
IN(2, kw, F32)
IN(3, table, F32)
RW(4, q_out, T)
const uint MAX_SEQS = 8;
#ifdef SEQUENCES
RW_ARRAY(5, k_out, T, MAX_SEQS)
RW_ARRAY(6, v_out, T, MAX_SEQS)
#else
RW(5, k_out, T)
RW(6, v_out, T)
#define k_out_st_at(a, i, v) k_out_st(i, v)
#define v_out_st_at(a, i, v) v_out_st(i, v)
#endif

#define GATE_LD x_ld
#include "gate.glsl"
#include "params.glsl"
struct Push {
  Gate gate;                    // its scores are in x too
  uint gate_target;             // 0: none; 1: q; 2: k; 3: v
  uint interleaved;             // RoPE pairs (2i, 2i + 1), else (i, i + rotary/2)
  View q_view, k_view, v_view;  // the sources, (bt, head, d) into x
  uint tokens, heads, kv_heads, dim, rotary;
  uint seq, first;  // cache positions per (batch, KV head); where token 0 goes
  uint norm;        // 0: none; 1: x·w; 2: x·(1 + w) (zero-centred)
  float eps;
  uint rows;        // B·T·(heads + 2·kv_heads)
  uvec4 seq_of[2], first_of[2];  // SEQUENCES: seq and first of each b
};
PARAMS(Push)

// The row this workgroup prepares: token bt, head h; whether the gate acts on
// it; its sequence (SEQUENCES: the cache it writes).
uint row_bt, row_h, row_b;
bool row_gated;

// Element i of the row at src, gated when the gate acts on this row.
float source(uint src, uint i) {
  const float xv = x_ld(src + i);
  return row_gated ? gated(p.gate, p.tokens, row_bt, row_h, i, xv) : xv;
}

// Element i of a q or k row at src, normalised (scale: 1/rms) and weighted;
// as it is without a norm (whose weight bindings then hold a stand-in).
float normed(bool is_q, uint src, uint i, float scale) {
  const float xv = source(src, i);
  if (p.norm == 0) return xv;
  const float w = is_q ? qw_ld(i) : kw_ld(i);
  return xv * scale * (p.norm == 2 ? 1.0 + w : w);
}

void out_st(bool is_q, uint i, float val) {
  if (is_q) q_out_st(i, val);
  else k_out_st_at(row_b, i, val);
}

void main() {
  LOAD_PARAMS;
  const uint row = gl_WorkGroupID.x + gl_WorkGroupID.y * gl_NumWorkGroups.x;
  if (row >= p.rows) return;  // the grid is split in 2-D past 65535 groups
  const uint per_token = p.heads + 2 * p.kv_heads;
  const uint bt = row / per_token, j = row - bt * per_token;
  const uint b = bt / p.tokens, t = bt - b * p.tokens;
  const uint tid = gl_LocalInvocationID.x;
#ifdef SEQUENCES
  const uint seq = p.seq_of[b / 4][b % 4], cache_row = p.first_of[b / 4][b % 4] + t;
  const uint cache_b = 0, table_t = bt, table_rows = p.rows / per_token;
#else
  const uint seq = p.seq, cache_row = p.first + t;
  const uint cache_b = b, table_t = t, table_rows = p.tokens;
#endif
  row_b = b;

  row_bt = bt;
  if (j >= p.heads + p.kv_heads) {
    const uint h = j - p.heads - p.kv_heads;
    row_h = h;
    row_gated = p.gate_target == 3;
    const uint src = view_offset(p.v_view, p.tokens, bt, h, 0);
    const uint dst = ((cache_b * p.kv_heads + h) * seq + cache_row) * p.dim;
    for (uint d = tid; d < p.dim; d += WG) v_out_st_at(b, dst + d, source(src, d));
    return;
  }
  const bool is_q = j < p.heads;
  const uint h = is_q ? j : j - p.heads;
  row_h = h;
  row_gated = p.gate_target == (is_q ? 1 : 2);
  const uint src = is_q ? view_offset(p.q_view, p.tokens, bt, h, 0) : view_offset(p.k_view, p.tokens, bt, h, 0);
  const uint dst = is_q ? ((b * p.heads + h) * p.tokens + t) * p.dim : ((cache_b * p.kv_heads + h) * seq + cache_row) * p.dim;

  float scale = 1.0;
  if (p.norm != 0) {
    float ss = 0.0;
    for (uint d = tid; d < p.dim; d += WG) {
      const float xv = source(src, d);
      ss = fma(xv, xv, ss);
    }
    scale = 1.0 / sqrt(wg_sum(ss) / float(p.dim) + p.eps);
  }
  // The rotated pairs (i, i + r/2) or (2i, 2i + 1), then the dims past
  // `rotary`. Two loops, not one with a branch: llvmpipe runs both sides of
  // every branch.
  const uint half_r = p.rotary / 2;
  for (uint i = tid; i < half_r; i += WG) {
    const uint i0 = p.interleaved != 0 ? 2 * i : i, i1 = p.interleaved != 0 ? 2 * i + 1 : i + half_r;
    const float x0 = normed(is_q, src, i0, scale), x1 = normed(is_q, src, i1, scale);
    const float c = table_ld(table_t * half_r + i), s = table_ld((table_rows + table_t) * half_r + i);
    out_st(is_q, dst + i0, x0 * c - x1 * s);
    out_st(is_q, dst + i1, x1 * c + x0 * s);
  }
  for (uint d = 2 * half_r + tid; d < p.dim; d += WG) out_st(is_q, dst + d, normed(is_q, src, d, scale));
}
