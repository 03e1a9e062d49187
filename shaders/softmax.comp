#version 450
#extension GL_GOOGLE_include_directive : require
// Row softmax of scale·s over `keys` entries, in place, one workgroup per row.
// Rows are (batch, head, query t) of a [B, H, T, S] score tensor. Query t sits
// at absolute position past + t (past = S − T); with `causal` it sees keys
// s ≤ past + t. An optional additive mask [B, 1, T, S] is broadcast over heads.
// A row whose every entry is −inf (fully masked) is written as zeros: the
// max would be −inf and exp(−inf − (−inf)) is NaN.
#include "common.glsl"

layout(std430, binding = 0) buffer SBuf { float s[]; };
layout(std430, binding = 1) readonly buffer MBuf { float mask[]; };

layout(push_constant) uniform Push {
  uint rows, keys, tokens, heads, past;
  uint causal, has_mask;
  float scale;
} p;

shared float red[WG];

float masked_score(uint base, uint mrow, uint t, uint k) {
  if (p.causal != 0 && k > p.past + t) return -1.0 / 0.0;
  float v = s[base + k] * p.scale;
  if (p.has_mask != 0) v += mask[mrow + k];
  return v;
}

void main() {
  const uint row = gl_WorkGroupID.x + gl_WorkGroupID.y * gl_NumWorkGroups.x;
  if (row >= p.rows) return;  // the grid is split in 2-D past 65535 groups
  const uint t = row % p.tokens;
  const uint b = row / (p.tokens * p.heads);
  const uint base = row * p.keys;
  const uint mrow = (b * p.tokens + t) * p.keys;
  const uint tid = gl_LocalInvocationID.x;

  float mx = -1.0 / 0.0;
  for (uint k = tid; k < p.keys; k += WG) mx = max(mx, masked_score(base, mrow, t, k));
  red[tid] = mx;
  barrier();
  for (uint st = WG / 2; st > 0; st >>= 1) {
    if (tid < st) red[tid] = max(red[tid], red[tid + st]);
    barrier();
  }
  mx = red[0];
  barrier();

  if (isinf(mx) && mx < 0.0) {
    for (uint k = tid; k < p.keys; k += WG) s[base + k] = 0.0;
    return;
  }
  float sum = 0.0;
  for (uint k = tid; k < p.keys; k += WG) {
    float e = exp(masked_score(base, mrow, t, k) - mx);
    s[base + k] = e;
    sum += e;
  }
  red[tid] = sum;
  barrier();
  for (uint st = WG / 2; st > 0; st >>= 1) {
    if (tid < st) red[tid] += red[tid + st];
    barrier();
  }
  const float inv = 1.0 / red[0];
  for (uint k = tid; k < p.keys; k += WG) s[base + k] *= inv;
}
