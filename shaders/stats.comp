#version 450
#extension GL_GOOGLE_include_directive : require
// Variants (the build compiles one SPIR-V module per line: name, then defines):
// variant: stats
// variant: stats_f16 T=F16
// variant: stats_bf16 T=BF16
// variant: stats_sg ONE_SUBGROUP
// variant: stats_f16_sg T=F16 ONE_SUBGROUP
// variant: stats_bf16_sg T=BF16 ONE_SUBGROUP
// The paper's per-layer measurements, reduced on the device into an fp32
// statistics buffer at out_at (one workgroup per result, each thread summing
// a fixed stride of elements, then a fixed reduction tree: deterministic).
//   mode 0  first-token attention: out[h] = mean over (b, t) of the
//           probability on key 0, probs [B, H, T, ·] with rows ld apart (the
//           unfused attention's score matrix after softmax); workgroup h.
//   mode 1  gate scores: out[0] = Σ s, out[1] = the count of s < 0.1, for
//           the activated score s = act(z) (before head sharing) of every
//           (bt, h, j < width) of the gate's view into x (the projections,
//           storage T).
//   mode 2  max |x| over the first `count` elements of x (the residual stream).
// Modes 0 and 2 read fp32 (the T = F32 variant).
#include "common.glsl"
#include "reduce.glsl"
#include "storage.glsl"
#ifndef T
#define T F32
#endif

RO(0, x, T)
RW(1, result, F32)

#define GATE_LD x_ld
#include "gate.glsl"
#include "params.glsl"
struct Push {
  Gate gate;
  uint mode, batch, heads, tokens, ld, count, out_at;
};
PARAMS(Push)

void main() {
  LOAD_PARAMS;
  const uint tid = gl_LocalInvocationID.x;
  if (p.mode == 0) {
    const uint h = gl_WorkGroupID.x, rows = p.batch * p.tokens;
    float s = 0.0;
    for (uint i = tid; i < rows; i += WG) {
      const uint b = i / p.tokens, t = i - b * p.tokens;
      s += x_ld(((b * p.heads + h) * p.tokens + t) * p.ld);
    }
    s = wg_sum(s);
    if (tid == 0) result_st(p.out_at + h, s / float(rows));
  } else if (p.mode == 1) {
    const uint n = p.count * p.gate.width;  // count: B·T·heads gate rows
    float s = 0.0, below = 0.0;
    for (uint i = tid; i < n; i += WG) {
      const uint r = i / p.gate.width, j = i - r * p.gate.width;
      const uint bt = r / p.heads, h = r - bt * p.heads;
      const float g = gate_act(p.gate.act, x_ld(view_offset(p.gate.view, p.tokens, bt, h, j)));
      s += g;
      below += g < 0.1 ? 1.0 : 0.0;
    }
    s = wg_sum(s);
    below = wg_sum(below);
    if (tid == 0) {
      result_st(p.out_at, s);
      result_st(p.out_at + 1, below);
    }
  } else {
    float m = 0.0;
    for (uint i = tid; i < p.count; i += WG) m = max(m, abs(x_ld(i)));
    m = wg_max(m);
    if (tid == 0) result_st(p.out_at, m);
  }
}
