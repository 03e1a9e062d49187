#version 450
#extension GL_GOOGLE_include_directive : require
// Variants (the build compiles one SPIR-V module per line: name, then defines):
// variant: gla_chunk_intra
// variant: gla_chunk_intra_f16 T=F16
// variant: gla_chunk_intra_bf16 T=BF16
// variant: gla_chunk_intra_cpu TEXEL SHUFFLE
// variant: gla_chunk_intra_f16_cpu T=F16 TEXEL SHUFFLE
// variant: gla_chunk_intra_bf16_cpu T=BF16 TEXEL SHUFFLE
// GLA in chunks (gla_chunk.glsl): the intra-chunk part P·V, o's last part.
#include "common.glsl"
#include "storage.glsl"
#ifndef T
#define T F32
#endif

IN(0, sc, F32)  // [B, H, chunks, C, C]
IN(1, x, T)     // the projections: v
RW(2, o, F32)   // [B·T, H, parts, dv]: writes part parts − 1

#include "gla_chunk.glsl"

// One workgroup per (WG·RN columns, chunk and query head, batch row):
// Σ_s P[t, s] v_s for the chunk's C rows (P is zero above the diagonal).
void main() {
  LOAD_PARAMS;
  const uint n = gl_WorkGroupID.y % p.chunks, h = gl_WorkGroupID.y / p.chunks, b = gl_WorkGroupID.z, kvh = kv_head(h);
  const Chunk c = chunk(b, n);
  const uint n0 = (gl_WorkGroupID.x * WG + LANE) * RN, pb = ((b * p.heads + h) * p.chunks + n) * C * C;
  uint col[RN];
  [[unroll]] for (uint j = 0; j < RN; ++j) col[j] = min(n0 + j, p.dv - 1);
  float acc[C][RN];
  [[unroll]] for (uint t = 0; t < C; ++t)
    [[unroll]] for (uint j = 0; j < RN; ++j) acc[t][j] = 0.0;
  for (uint s0 = 0; s0 < c.len; s0 += TB) {
    // Keys past the chunk's end add zeros.
    ROWS_TB(pv, C, s0 + u < c.len ? sc_ld(pb + min(m, c.len - 1) * C + s0 + u) : 0.0)
    float v[TB][RN];
    [[unroll]] for (uint u = 0; u < TB; ++u) {
      const uint vb = view_offset(p.v_view, p.tokens, c.bt0 + min(s0 + u, c.len - 1), kvh, 0);
      [[unroll]] for (uint j = 0; j < RN; ++j) v[u][j] = x_ld(vb + col[j]);
    }
    [[unroll]] for (uint q = 0; q < C / 8; ++q) {
      if (q * 8 + 7 < s0) continue;  // rows before these keys: P is zero (half the products)
      [[unroll]] for (uint r = 0; r < 8; ++r) {
        float a[TB];
        [[unroll]] for (uint u = 0; u < TB; ++u) a[u] = ROW_TB(pv, u, q, r);
        [[unroll]] for (uint j = 0; j < RN; ++j) {
          float s = acc[q * 8 + r][j];
          [[unroll]] for (uint u = 0; u < TB; ++u) s = fma(a[u], v[u][j], s);
          acc[q * 8 + r][j] = s;
        }
      }
    }
  }
  [[unroll]] for (uint t = 0; t < C; ++t) {
    if (t >= c.len) break;
    const uint ob = (((c.bt0 + t) * p.heads + h) * p.parts + p.parts - 1) * p.dv;
    [[unroll]] for (uint j = 0; j < RN; ++j)
      if (n0 + j < p.dv) o_st(ob + n0 + j, acc[t][j]);
  }
}
