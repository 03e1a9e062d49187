#version 450
#extension GL_GOOGLE_include_directive : require
// variant: moe_combine
// The sparse MoE's output with the residual, per token t and element d:
//   y[t, d] = x[t, d] + Σ_j weight[t·k + j] · experts[pos[t·k + j], d]
//             (+ σ(logits[t, E]) · shared[t, d] with a shared expert)
// the slots summed in order (j ascending), experts' rows in expert order
// (moe_route.comp). All fp32.
#include "common.glsl"
#include "storage.glsl"

RO(0, x, F32)
RW(1, y, F32)
RO(2, experts, F32)
layout(std430, binding = 3) readonly buffer Route { uint route[]; };
RO(4, logits, F32)
RO(5, shared_out, F32)

#include "params.glsl"
struct Push {
  uint rows, dim, k, has_shared;
  uint ld_logits, gate_at;  // the shared expert's gate logit: logits[t·ld_logits + gate_at]
  uint off_weight, off_pos;
  uint chunk;  // elements of a row per workgroup: the row's chunks are workgroups side by side
};
PARAMS(Push)

void main() {
  LOAD_PARAMS;
  const uint chunks = (p.dim + p.chunk - 1) / p.chunk;
  const uint g = gl_WorkGroupID.x + gl_WorkGroupID.y * gl_NumWorkGroups.x;
  const uint t = g / chunks, d0 = (g - t * chunks) * p.chunk;
  if (t >= p.rows) return;  // the grid is split in 2-D past 65535 groups
  const float s = p.has_shared != 0 ? 1.0 / (1.0 + exp(-logits_ld(t * p.ld_logits + p.gate_at))) : 0.0;
  for (uint d = d0 + gl_LocalInvocationID.x; d < min(p.dim, d0 + p.chunk); d += WG) {
    float v = 0.0;
    for (uint j = 0; j < p.k; ++j) {
      const uint i = t * p.k + j;
      v = fma(uintBitsToFloat(route[p.off_weight + i]), experts_ld(route[p.off_pos + i] * p.dim + d), v);
    }
    if (p.has_shared != 0) v = fma(s, shared_out_ld(t * p.dim + d), v);
    y_st(t * p.dim + d, x_ld(t * p.dim + d) + v);
  }
}
