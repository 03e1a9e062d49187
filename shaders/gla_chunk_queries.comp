#version 450
#extension GL_GOOGLE_include_directive : require
// Variants (the build compiles one SPIR-V module per line: name, then defines):
// variant: gla_chunk_queries
// variant: gla_chunk_queries_f16 T=F16
// variant: gla_chunk_queries_bf16 T=BF16
// variant: gla_chunk_queries_cpu TEXEL
// variant: gla_chunk_queries_f16_cpu T=F16 TEXEL
// variant: gla_chunk_queries_bf16_cpu T=BF16 TEXEL
// GLA in chunks (gla_chunk.glsl), per query head: q̂, q̂ e^{b_t}, q̂ e^{b_t − b_f},
// b_t read from the keys pass.
#include "common.glsl"
#include "storage.glsl"
#ifndef T
#define T F32
#endif

IN(0, x, T)   // the projections: q, k, v (and the single forget gate's logits)
IN(1, cum, F32)  // [B·T, KV, DK]: b_t
RW(2, qs, F32)  // [B·T, H, DK]: q̂
RW(3, qd, F32)  // q̂ e^{b_t}
RW(4, qr, F32)  // q̂ e^{b_t − b_f}

#include "gla_chunk.glsl"

// One invocation per (batch row, chunk, query head, state row).
void main() {
  LOAD_PARAMS;
  Chunk c;
  uint h, i;
  if (!prepare_item(p.heads, c, h, i)) return;
  const uint kvh = kv_head(h);
  float b_f = 0.0;
  for (uint t = 0; t < c.len; ++t) {
    const uint bt = c.bt0 + t, at = (bt * p.heads + h) * DK + i;
    const float b_t = cum_ld((bt * p.kv_heads + kvh) * DK + i);
    if (t % SUB == 0) b_f = b_t;
    const float q = p.scale * phi(x_ld(view_offset(p.q_view, p.tokens, bt, h, i)));
    qs_st(at, q);
    qd_st(at, q * exp(b_t));
    qr_st(at, q * exp(b_t - b_f));
  }
}
