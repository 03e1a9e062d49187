#version 450
#extension GL_GOOGLE_include_directive : require
// Variants (the build compiles one SPIR-V module per line: name, then defines):
// variant: gla_chunk_keys
// variant: gla_chunk_keys_f16 T=F16
// variant: gla_chunk_keys_bf16 T=BF16
// variant: gla_chunk_keys_cpu TEXEL
// variant: gla_chunk_keys_f16_cpu T=F16 TEXEL
// variant: gla_chunk_keys_bf16_cpu T=BF16 TEXEL
// GLA in chunks (gla_chunk.glsl), per KV head: b_t, k̃, k̃ e^{B − b_t}, k̃ e^{b_l − b_t}.
#include "common.glsl"
#include "storage.glsl"
#ifndef T
#define T F32
#endif

IN(0, x, T)   // the projections: q, k, v (and the single forget gate's logits)
IN(1, gk, T)  // the forget gate's logits (may be x)
RW(2, ks, F32)  // [B·T, KV, DK]: k̃
RW(3, kd, F32)  // k̃ e^{B − b_t}
RW(4, kr, F32)  // k̃ e^{b_l − b_t}
RW(5, cum, F32) // b_t

#include "gla_chunk.glsl"

// One invocation per (batch row, chunk, KV head, state row): b_t first (kr
// needs b at the end of each sub-block), then the vectors.
void main() {
  LOAD_PARAMS;
  Chunk c;
  uint kvh, i;
  if (!prepare_item(p.kv_heads, c, kvh, i)) return;
  float b_t = 0.0;
  for (uint t = 0; t < c.len; ++t) {
    b_t += log_gate(gk_ld(view_offset(p.gk_view, p.tokens, c.bt0 + t, kvh, i)));
    cum_st(((c.bt0 + t) * p.kv_heads + kvh) * DK + i, b_t);
  }
  for (uint t = 0; t < c.len; ++t) {
    const uint bt = c.bt0 + t, at = (bt * p.kv_heads + kvh) * DK + i;
    const float b_s = cum_ld(at), b_l = cum_ld(((c.bt0 + min(t | (SUB - 1), c.len - 1)) * p.kv_heads + kvh) * DK + i);
    float k = phi(x_ld(view_offset(p.k_view, p.tokens, bt, kvh, i)));
    if (p.convex != 0) k *= one_minus_exp(log_gate(gk_ld(view_offset(p.gk_view, p.tokens, bt, kvh, i))));
    ks_st(at, k);
    kd_st(at, k * exp(b_t - b_s));
    kr_st(at, k * exp(b_l - b_s));
  }
}
