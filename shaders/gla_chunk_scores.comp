#version 450
#extension GL_GOOGLE_include_directive : require
// Variants (the build compiles one SPIR-V module per line: name, then defines):
// variant: gla_chunk_scores
// variant: gla_chunk_scores_cpu TEXEL SHUFFLE
// GLA in chunks (gla_chunk.glsl): the masked intra-chunk scores.
#include "common.glsl"
#include "storage.glsl"
#ifndef T
#define T F32
#endif

IN(0, qr, F32)
IN(1, kr, F32)
IN(2, cum, F32)
IN(3, qs, F32)
IN(4, ks, F32)
RW(5, sc, F32)  // [B, H, chunks, C, C]

#include "gla_chunk.glsl"

// Lane l owns the key columns of sub-block l (s = 8l .. 8l + 7) for all C
// query rows: acc[t][j] = P[t, 8l + j]. The workgroup is 8 invocations.
void main() {
  LOAD_PARAMS;
  const uint n = gl_WorkGroupID.x, h = gl_WorkGroupID.y, b = gl_WorkGroupID.z, lane = LANE, kvh = kv_head(h);
  const Chunk c = chunk(b, n);
  const uint s0 = lane * SUB;
  uint krow[SUB];
  [[unroll]] for (uint j = 0; j < SUB; ++j) krow[j] = ((c.bt0 + min(s0 + j, c.len - 1)) * p.kv_heads + kvh) * DK;
  const uint last = ((c.bt0 + min(s0 + SUB - 1, c.len - 1)) * p.kv_heads + kvh) * DK;
  float acc[C][SUB];
  [[unroll]] for (uint t = 0; t < C; ++t)
    [[unroll]] for (uint j = 0; j < SUB; ++j) acc[t][j] = 0.0;
  bool exact = false;  // this lane's diagonal sub-block spans more than e^60
  for (uint k = 0; k < DK; ++k) {
    float kv[SUB];
    [[unroll]] for (uint j = 0; j < SUB; ++j) kv[j] = kr_ld(krow[j] + k);
    const float b_l = cum_ld(last + k);
    ROWS(qv, C, qr_ld(((c.bt0 + min(m, c.len - 1)) * p.heads + h) * DK + k))
    ROWS(first, 8, cum_ld(((c.bt0 + min(m * SUB, c.len - 1)) * p.kv_heads + kvh) * DK + k))  // b_f of sub-block m
    [[unroll]] for (uint q = 0; q < C / 8; ++q) {
      // Row sub-block q against key sub-block `lane`: q > lane is ≤ 0; q < lane
      // is masked out below (clamped so that it stays finite).
      const float e = ROW(first, 0, q) - b_l;
      exact = exact || (q == lane && e > 60.0);
      const float d = exp(min(e, q == lane ? 60.0 : 0.0));
      float kq[SUB];
      [[unroll]] for (uint j = 0; j < SUB; ++j) kq[j] = kv[j] * d;
      [[unroll]] for (uint r = 0; r < 8; ++r) {
        const float a = ROW(qv, q, r);
        [[unroll]] for (uint j = 0; j < SUB; ++j) acc[q * 8 + r][j] = fma(a, kq[j], acc[q * 8 + r][j]);
      }
    }
  }
  const uint base = ((b * p.heads + h) * p.chunks + n) * C * C;
  [[unroll]] for (uint t = 0; t < C; ++t)
    [[unroll]] for (uint j = 0; j < SUB; ++j) sc_st(base + t * C + s0 + j, s0 + j <= t && t < c.len ? acc[t][j] : 0.0);
  if (!exact) return;
  for (uint t = s0; t < min(s0 + SUB, c.len); ++t)
    for (uint s = s0; s <= t; ++s) {
      const uint qt = ((c.bt0 + t) * p.heads + h) * DK, kt = ((c.bt0 + t) * p.kv_heads + kvh) * DK,
                 ks0 = ((c.bt0 + s) * p.kv_heads + kvh) * DK;
      float v = 0.0;
      for (uint k = 0; k < DK; ++k) v = fma(qs_ld(qt + k) * ks_ld(ks0 + k), exp(cum_ld(kt + k) - cum_ld(ks0 + k)), v);
      sc_st(base + t * C + s, v);
    }
}

