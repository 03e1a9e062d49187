#version 450
#extension GL_GOOGLE_include_directive : require
// Variants (the build compiles one SPIR-V module per line: name, then defines):
// variant: gla_output
// variant: gla_output_f16 T=F16
// variant: gla_output_bf16 T=BF16
// variant: gla_output_sg ONE_SUBGROUP
// variant: gla_output_f16_sg T=F16 ONE_SUBGROUP
// variant: gla_output_bf16_sg T=BF16 ONE_SUBGROUP
// GLA's per-head output before o_proj: y = RMSNorm(o)·w (when the layer has an
// output norm) ⊙ swish(g) (when it has an output gate), o the sum of the
// recurrence's fp32 parts [B·T, H, parts, d_v], g read from the projections. One workgroup per
// (token, head) row, statistics in fp32. Storage: T for g and y.
#include "common.glsl"
#include "reduce.glsl"
#include "storage.glsl"
#ifndef T
#define T F32
#endif

RO(0, o, F32)
RO(1, x, T)   // the projections (g)
RO(2, w, F32) // the norm's weight (a stand-in without a norm)
RW(3, y, T)   // [B·T, y_ld], head h at h·d_v (y_tile: see main)

#include "params.glsl"
struct Push {
  View g_view;
  uint tokens, heads, dv, rows;  // rows: B·T·H
  uint has_norm, has_gate, y_ld, parts;
  float eps;
  uint y_tile;
};
PARAMS(Push)

// Element d of row `row` of o: the sum of its parts.
float o_at(uint row, uint d) {
  float v = 0.0;
  for (uint c = 0; c < p.parts; ++c) v += o_ld((row * p.parts + c) * p.dv + d);
  return v;
}

void main() {
  LOAD_PARAMS;
  const uint row = gl_WorkGroupID.x + gl_WorkGroupID.y * gl_NumWorkGroups.x;
  if (row >= p.rows) return;  // whole workgroups: the reduction below stays uniform
  const uint tid = gl_LocalInvocationID.x, bt = row / p.heads, h = row - bt * p.heads;
  float scale = 1.0;
  if (p.has_norm != 0) {
    float ss = 0.0;
    for (uint d = tid; d < p.dv; d += WG) {
      const float v = o_at(row, d);
      ss = fma(v, v, ss);
    }
    scale = 1.0 / sqrt(wg_sum(ss) / float(p.dv) + p.eps);
  }
  const uint g0 = view_offset(p.g_view, p.tokens, bt, h, 0);
  // Head h = j·y_tile + i goes to position i·(heads / y_tile) + j: a Qwen3.5
  // GGUF's out_proj takes the Gated DeltaNet's value heads tiled (y_tile = r).
  const uint y0 = bt * p.y_ld + ((h % p.y_tile) * (p.heads / p.y_tile) + h / p.y_tile) * p.dv;
  for (uint d = tid; d < p.dv; d += WG) {
    float v = o_at(row, d) * scale;
    if (p.has_norm != 0) v *= w_ld(d);
    if (p.has_gate != 0) {
      const float g = x_ld(g0 + d);
      v *= g / (1.0 + exp(-g));
    }
    y_st(y0 + d, v);
  }
}
