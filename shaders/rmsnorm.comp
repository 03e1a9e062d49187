#version 450
#extension GL_GOOGLE_include_directive : require
// RMSNorm over `dim` elements of each (token, head) row, statistics in fp32:
//   y = x / sqrt(mean(x²) + eps) · w          (plain)
//   y = x / sqrt(mean(x²) + eps) · (1 + w)    (zero-centred, Qwen3-Next)
// Per-row norm: heads = 1, dim = D. Per-head norm (q_norm/k_norm): the views
// pick each head's slice out of q_proj's output and write [B, H, T, Dh].
// One workgroup per row. In-place use (x and y the same range) is safe: each
// invocation writes only elements it read itself, after the reduction.
// Storage types: X_T, Y_T; the weight is fp32. The TEXEL variants (CPU
// drivers) read x and w through texel views.
#include "common.glsl"
#include "reduce.glsl"
#include "storage.glsl"
#ifndef X_T
#define X_T F32
#endif
#ifndef Y_T
#define Y_T F32
#endif

IN(0, x, X_T)
IN(1, w, F32)
RW(2, y, Y_T)

layout(push_constant) uniform Push {
  View in_view;
  View out_view;
  uint rows, tokens, heads, dim;
  uint zero_centered;
  float eps;
} p;

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
  const float scale = 1.0 / sqrt(wg_sum(ss) / float(p.dim) + p.eps);
  for (uint d = tid; d < p.dim; d += WG) {
    float g = p.zero_centered != 0 ? 1.0 + w_ld(d) : w_ld(d);
    y_st(dst + d, x_ld(src + d) * scale * g);
  }
}
