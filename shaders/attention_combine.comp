#version 450
#extension GL_GOOGLE_include_directive : require
// Variants (the build compiles one SPIR-V module per line: name, then defines):
// variant: attention_combine
// variant: attention_combine_f16 T=F16
// variant: attention_combine_bf16 T=BF16
// Second pass of split-KV (flash-decoding) attention: merges the partial
// results of the key splits written by the flash kernels,
//   O = Σ_s O_s·exp(m_s − M) / Σ_s l_s·exp(m_s − M),   M = max_s m_s,
// then applies the output gate and writes out [B, T, H, Dh] once.
//
// A workgroup takes DCH dims of one output row (b, t, h): its threads find M
// and the split weights once (not once per element), then WG / DCH slices of
// threads each sum every (WG / DCH)-th split for their dim, so a thread walks
// few splits and its loads are independent; the slices are added in shared
// memory. Grid: x·y the rows, z the dim chunks.
#include "common.glsl"
#include "storage.glsl"
#include "reduce.glsl"
#ifndef T
#define T F32
#endif

RO(0, partial, F32)
RO(1, g, T)
RW(2, o, T)

#include "gate.glsl"
#include "params.glsl"
struct Push {
  Gate gate;
  uint tokens, heads, head_dim, splits;
  uint has_gate, rows;
};
PARAMS(Push)

const uint DCH = 32, SLICES = WG / DCH;
shared float w_s[WG];   // the weights of the splits in this round
shared float sum_s[WG]; // each slice's sum, per dim

void main() {
  LOAD_PARAMS;
  const uint row = gl_WorkGroupID.x + gl_WorkGroupID.y * gl_NumWorkGroups.x;  // (b·T + t)·H + h
  if (row >= p.rows) return;  // whole workgroups only
  const uint tid = gl_LocalInvocationID.x;
  const uint d = gl_WorkGroupID.z * DCH + tid % DCH, slice = tid / DCH;
  const uint h = row % p.heads, bt = row / p.heads;
  const uint b = bt / p.tokens, t = bt % p.tokens;
  const uint Dp = p.head_dim + 2;
  // Split s's row of partial results: O_s (head_dim), m_s, l_s.
#define BASE(s) ((((b * p.splits + (s)) * p.heads + h) * p.tokens + t) * Dp)

  float mx = -1.0 / 0.0;
  for (uint s = tid; s < p.splits; s += WG) mx = max(mx, partial_ld(BASE(s) + p.head_dim));
  mx = wg_max(mx);
  const bool empty = isinf(mx) && mx < 0.0;  // every key masked: the output is 0

  float num = 0.0, den = 0.0;
  for (uint s0 = 0; s0 < p.splits; s0 += WG) {
    const uint s = s0 + tid;
    float w = 0.0;  // 0 for an empty split
    if (s < p.splits && !empty) {
      w = exp(partial_ld(BASE(s) + p.head_dim) - mx);
      den += partial_ld(BASE(s) + p.head_dim + 1) * w;
    }
    w_s[tid] = w;
    barrier();
    const uint n = min(WG, p.splits - s0);
    // U splits' loads in flight together: one at a time, a thread waits out a
    // memory latency per split (16 in a row at 128 splits and 8 slices).
    const uint U = 4;
    if (d < p.head_dim)
      for (uint j0 = slice; j0 < n; j0 += U * SLICES) {
        float o[U];
        [[unroll]] for (uint u = 0; u < U; ++u) {
          const uint j = j0 + u * SLICES;
          o[u] = j < n ? partial_ld(BASE(s0 + j) + d) : 0.0;
        }
        [[unroll]] for (uint u = 0; u < U; ++u) {
          const uint j = j0 + u * SLICES;
          if (j < n) num += o[u] * w_s[j];
        }
      }
    barrier();
  }
  den = wg_sum(den);
  sum_s[tid] = num;
  barrier();
  if (slice != 0 || d >= p.head_dim) return;
  for (uint k = 1; k < SLICES; ++k) num += sum_s[k * DCH + tid];
  float val = den > 0.0 ? num / den : 0.0;
  if (p.has_gate != 0) val = gated(p.gate, p.tokens, bt, h, d, val);
  o_st(row * p.head_dim + d, val);
}
