#version 450
#extension GL_GOOGLE_include_directive : require
// Variants (the build compiles one SPIR-V module per line: name, then defines):
// variant: rmsnorm
// variant: rmsnorm_f16 X_T=F16 Y_T=F16
// variant: rmsnorm_f16_x32 Y_T=F16
// variant: rmsnorm_bf16 X_T=BF16 Y_T=BF16
// variant: rmsnorm_bf16_x32 Y_T=BF16
// variant: rmsnorm_sg ONE_SUBGROUP TEXEL
// variant: rmsnorm_f16_sg X_T=F16 Y_T=F16 ONE_SUBGROUP TEXEL
// variant: rmsnorm_f16_x32_sg Y_T=F16 ONE_SUBGROUP TEXEL
// variant: rmsnorm_bf16_sg X_T=BF16 Y_T=BF16 ONE_SUBGROUP TEXEL
// variant: rmsnorm_bf16_x32_sg Y_T=BF16 ONE_SUBGROUP TEXEL
// RMSNorm over `dim` elements of each (token, head) row, statistics in fp32:
//   y = x / sqrt(mean(x²) + eps) · w          (plain)
//   y = x / sqrt(mean(x²) + eps) · (1 + w)    (zero-centred, Qwen3-Next)
// Per-row norm: heads = 1, dim = D. Per-head norm (q_norm/k_norm): the views
// pick each head's slice out of q_proj's output and write [B, H, T, Dh].
// One workgroup per row. In-place use (x and y the same range) is safe: every
// element is read before the reduction and each write depends on its result
// (the second pass re-reads only elements its own invocation writes).
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

#include "params.glsl"
struct Push {
  View in_view;
  View out_view;
  uint rows, tokens, heads, dim;
  uint zero_centered;
  float eps;
};
PARAMS(Push)

float weight(uint d) { return p.zero_centered != 0 ? 1.0 + w_ld(d) : w_ld(d); }

void main() {
  LOAD_PARAMS;
  const uint row = gl_WorkGroupID.x + gl_WorkGroupID.y * gl_NumWorkGroups.x;
  if (row >= p.rows) return;  // the grid is split in 2-D past 65535 groups
  const uint bt = row / p.heads, h = row - bt * p.heads;
  const uint src = view_offset(p.in_view, p.tokens, bt, h, 0);
  const uint dst = view_offset(p.out_view, p.tokens, bt, h, 0);
  const uint tid = gl_LocalInvocationID.x;

  // The first PER elements of each invocation stay in registers, with their
  // weights, and are loaded together: a loop of loads, each waiting for the
  // last, made one decode-step row of 2048 take 12 µs on the H100.
  const uint PER = 8;
  float xs[PER], ws[PER];
  float ss = 0.0;
  [[unroll]] for (uint i = 0; i < PER; ++i) {
    const uint d = tid + i * WG;
    xs[i] = d < p.dim ? x_ld(src + d) : 0.0;
    ws[i] = d < p.dim ? weight(d) : 0.0;
    ss = fma(xs[i], xs[i], ss);
  }
  for (uint d = tid + PER * WG; d < p.dim; d += WG) {
    float v = x_ld(src + d);
    ss = fma(v, v, ss);
  }
  const float scale = 1.0 / sqrt(wg_sum(ss) / float(p.dim) + p.eps);
  [[unroll]] for (uint i = 0; i < PER; ++i) {
    const uint d = tid + i * WG;
    if (d < p.dim) y_st(dst + d, xs[i] * scale * ws[i]);
  }
  for (uint d = tid + PER * WG; d < p.dim; d += WG) y_st(dst + d, x_ld(src + d) * scale * weight(d));
}
