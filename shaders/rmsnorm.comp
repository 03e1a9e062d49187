#version 450
#extension GL_GOOGLE_include_directive : require
// RMSNorm over `dim` elements of each (token, head) row, statistics in fp32:
//   y = x / sqrt(mean(x²) + eps) · w          (plain)
//   y = x / sqrt(mean(x²) + eps) · (1 + w)    (zero-centred, Qwen3-Next)
// Per-row norm: heads = 1, dim = D. Per-head norm (q_norm/k_norm): the views
// pick each head's slice out of q_proj's output and write [B, H, T, Dh].
// One workgroup per row. In-place use (x and y the same range) is safe: every
// read happens before the reduction's barrier, every write after it.
// Storage types: X_T, Y_T; the weight is fp32.
#include "common.glsl"
#include "storage.glsl"
#ifndef X_T
#define X_T F32
#endif
#ifndef Y_T
#define Y_T F32
#endif

RO(0, x, X_T)
RO(1, w, F32)
RW(2, y, Y_T)

layout(push_constant) uniform Push {
  View in_view;
  View out_view;
  uint rows, tokens, heads, dim;
  uint zero_centered;
  float eps;
} p;

shared float partial[WG];

void main() {
  const uint row = gl_WorkGroupID.x + gl_WorkGroupID.y * gl_NumWorkGroups.x;
  if (row >= p.rows) return;  // the grid is split in 2-D past 65535 groups
  const uint bt = row / p.heads, h = row - bt * p.heads;
  const uint src = view_offset(p.in_view, p.tokens, bt, h, 0);
  const uint dst = view_offset(p.out_view, p.tokens, bt, h, 0);
  const uint tid = gl_LocalInvocationID.x;

  float ss = 0.0;
  for (uint d = tid; d < p.dim; d += WG) {
    float v = x_ld(src + d);
    ss = fma(v, v, ss);
  }
  partial[tid] = ss;
  barrier();
  for (uint s = WG / 2; s > 0; s >>= 1) {
    if (tid < s) partial[tid] += partial[tid + s];
    barrier();
  }
  const float scale = 1.0 / sqrt(partial[0] / float(p.dim) + p.eps);
  for (uint d = tid; d < p.dim; d += WG) {
    float g = p.zero_centered != 0 ? 1.0 + w_ld(d) : w_ld(d);
    y_st(dst + d, x_ld(src + d) * scale * g);
  }
}
