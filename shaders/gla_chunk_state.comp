#version 450
#extension GL_GOOGLE_include_directive : require
// Variants (the build compiles one SPIR-V module per line: name, then defines):
// variant: gla_chunk_state
// variant: gla_chunk_state_f16 T=F16
// variant: gla_chunk_state_bf16 T=BF16
// variant: gla_chunk_state_cpu TEXEL SHUFFLE
// variant: gla_chunk_state_f16_cpu T=F16 TEXEL SHUFFLE
// variant: gla_chunk_state_bf16_cpu T=BF16 TEXEL SHUFFLE
// GLA in chunks (gla_chunk.glsl): the pass over the chunks carrying the state.
#include "common.glsl"
#include "storage.glsl"
#ifndef T
#define T F32
#endif

IN(0, qd, F32)
IN(1, kd, F32)
IN(2, cum, F32)
IN(3, x, T)       // the projections: v
RW(4, state, F32)  // [B, H, DK, dv]
RW(5, o, F32)      // [B·T, H, parts, dv]

#include "gla_chunk.glsl"

// One workgroup per (RM state rows × WG·RN columns, query head, batch row),
// through the chunks in order. Rows past DK (when RM does not divide it) are
// clamped copies whose contributions are zeroed or never stored.
void main() {
  LOAD_PARAMS;
  const uint blocks = (DK + RM - 1) / RM, block = gl_WorkGroupID.y % blocks, m0 = block * RM;
  const uint h = gl_WorkGroupID.y / blocks, b = gl_WorkGroupID.z, kvh = kv_head(h);
  const uint n0 = (gl_WorkGroupID.x * WG + LANE) * RN;
  uint col[RN];
  [[unroll]] for (uint j = 0; j < RN; ++j) col[j] = min(n0 + j, p.dv - 1);
  const uint sbase = (b * p.heads + h) * DK;
  float acc[RM][RN];
  [[unroll]] for (uint i = 0; i < RM; ++i)
    [[unroll]] for (uint j = 0; j < RN; ++j) acc[i][j] = state_ld((sbase + min(m0 + i, DK - 1)) * p.dv + col[j]);
  for (uint n = 0; n < p.chunks; ++n) {
    const Chunk c = chunk(b, n);
    // The inter-chunk output, from the state at the chunk's start.
    for (uint t0 = 0; t0 < c.len; t0 += TB) {
      ROWS_TB(qv, RM, m0 + m < DK ? qd_ld(((c.bt0 + min(t0 + u, c.len - 1)) * p.heads + h) * DK + min(m0 + m, DK - 1)) : 0.0)
      float y[TB][RN];
      [[unroll]] for (uint u = 0; u < TB; ++u)
        [[unroll]] for (uint j = 0; j < RN; ++j) y[u][j] = 0.0;
      [[unroll]] for (uint q = 0; q < RM / 8; ++q)
        [[unroll]] for (uint r = 0; r < 8; ++r) {
          float a[TB];
          [[unroll]] for (uint u = 0; u < TB; ++u) a[u] = ROW_TB(qv, u, q, r);
          [[unroll]] for (uint j = 0; j < RN; ++j) {
            const float s = acc[q * 8 + r][j];
            [[unroll]] for (uint u = 0; u < TB; ++u) y[u][j] = fma(a[u], s, y[u][j]);
          }
        }
      [[unroll]] for (uint u = 0; u < TB; ++u) {
        if (t0 + u >= c.len) break;
        const uint ob = (((c.bt0 + t0 + u) * p.heads + h) * p.parts + block) * p.dv;
        [[unroll]] for (uint j = 0; j < RN; ++j)
          if (n0 + j < p.dv) o_st(ob + n0 + j, y[u][j]);
      }
    }
    // S ← e^B ⊙ S + Σ_t kd_tᵀ v_t
    const uint lastb = ((c.bt0 + c.len - 1) * p.kv_heads + kvh) * DK;
    ROWS(decay, RM, exp(cum_ld(lastb + min(m0 + m, DK - 1))))
    [[unroll]] for (uint q = 0; q < RM / 8; ++q)
      [[unroll]] for (uint r = 0; r < 8; ++r) {
        const float a = ROW(decay, q, r);
        [[unroll]] for (uint j = 0; j < RN; ++j) acc[q * 8 + r][j] *= a;
      }
    for (uint t0 = 0; t0 < c.len; t0 += TB) {
      // Tokens past the chunk's end add zeros.
      ROWS_TB(kv, RM, t0 + u < c.len ? kd_ld(((c.bt0 + min(t0 + u, c.len - 1)) * p.kv_heads + kvh) * DK + min(m0 + m, DK - 1)) : 0.0)
      float v[TB][RN];
      [[unroll]] for (uint u = 0; u < TB; ++u) {
        const uint vb = view_offset(p.v_view, p.tokens, c.bt0 + min(t0 + u, c.len - 1), kvh, 0);
        [[unroll]] for (uint j = 0; j < RN; ++j) v[u][j] = x_ld(vb + col[j]);
      }
      [[unroll]] for (uint q = 0; q < RM / 8; ++q)
        [[unroll]] for (uint r = 0; r < 8; ++r) {
          float a[TB];
          [[unroll]] for (uint u = 0; u < TB; ++u) a[u] = ROW_TB(kv, u, q, r);
          [[unroll]] for (uint j = 0; j < RN; ++j) {
            float s = acc[q * 8 + r][j];
            [[unroll]] for (uint u = 0; u < TB; ++u) s = fma(a[u], v[u][j], s);
            acc[q * 8 + r][j] = s;
          }
        }
    }
  }
  [[unroll]] for (uint i = 0; i < RM; ++i) {
    if (m0 + i >= DK) break;
    [[unroll]] for (uint j = 0; j < RN; ++j)
      if (n0 + j < p.dv) state_st((sbase + m0 + i) * p.dv + n0 + j, acc[i][j]);
  }
}

