#version 450
#extension GL_GOOGLE_include_directive : require
// Second pass of split-KV (flash-decoding) attention: merges the partial
// results of the key splits written by flash_attention.comp,
//   O = Σ_s O_s·exp(m_s − M) / Σ_s l_s·exp(m_s − M),   M = max_s m_s,
// then applies the output gate and writes out [B, T, H, Dh] once.
// One invocation per output element.
#include "common.glsl"
#include "storage.glsl"
#ifndef T
#define T F32
#endif

RO(0, partial, F32)
RO(1, g, T)
RW(2, o, T)

layout(push_constant) uniform Push {
  View gate_view;
  uint tokens, heads, head_dim, splits;
  uint has_gate, gate_width, count;
} p;

void main() {
  const uint gid = gl_GlobalInvocationID.x + gl_GlobalInvocationID.y * gl_NumWorkGroups.x * WG;
  if (gid >= p.count) return;
  const uint d = gid % p.head_dim;
  const uint bth = gid / p.head_dim;  // (b·T + t)·H + h
  const uint h = bth % p.heads, bt = bth / p.heads;
  const uint b = bt / p.tokens, t = bt % p.tokens;
  const uint Dp = p.head_dim + 2;

  float mx = -1.0 / 0.0;
  for (uint s = 0; s < p.splits; ++s)
    mx = max(mx, partial_ld((((b * p.splits + s) * p.heads + h) * p.tokens + t) * Dp + p.head_dim));
  float num = 0.0, den = 0.0;
  if (!(isinf(mx) && mx < 0.0)) {
    for (uint s = 0; s < p.splits; ++s) {
      const uint base = (((b * p.splits + s) * p.heads + h) * p.tokens + t) * Dp;
      const float w = exp(partial_ld(base + p.head_dim) - mx);  // 0 for an empty split
      num += partial_ld(base + d) * w;
      den += partial_ld(base + p.head_dim + 1) * w;
    }
  }
  float val = den > 0.0 ? num / den : 0.0;
  if (p.has_gate != 0) {
    const float z = g_ld(view_offset(p.gate_view, p.tokens, bt, h, p.gate_width == 1 ? 0 : d));
    val /= 1.0 + exp(-z);
  }
  o_st(gid, val);
}
