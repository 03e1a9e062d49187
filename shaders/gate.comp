#version 450
#extension GL_GOOGLE_include_directive : require
// Variants (the build compiles one SPIR-V module per line: name, then defines):
// variant: gate
// variant: gate_f16 T=F16
// variant: gate_bf16 T=BF16
// A gate as a pass of its own, in place: y[bt, h, d] = gated(y, scores)
// (shaders/gate.glsl). The unfused attention's output gate, and the gate of
// any position when pass fusion is off. The scores are read straight out of
// the projections in whichever layout the checkpoint uses.
// One workgroup per (bt, h), its invocations striding over d: the index
// arithmetic (divisions, which CPU drivers run lane by lane) is done once
// per head row, not per element.
// Storage type: T for the gate rows and y.
#include "common.glsl"
#include "storage.glsl"
#ifndef T
#define T F32
#endif

RO(0, g, T)
RW(1, y, T)

#include "gate.glsl"
#include "params.glsl"
struct Push {
  Gate gate;
  View y_view;
  uint tokens, heads, dim;
  uint count;  // rows · heads
};
PARAMS(Push)

void main() {
  LOAD_PARAMS;
  const uint bh = gl_WorkGroupID.x + gl_WorkGroupID.y * gl_NumWorkGroups.x;
  if (bh >= p.count) return;  // the grid is split in 2-D past 65535 groups
  const uint bt = bh / p.heads, h = bh - bt * p.heads;
  const uint y0 = view_offset(p.y_view, p.tokens, bt, h, 0);
  for (uint d = gl_LocalInvocationID.x; d < p.dim; d += WG) y_st(y0 + d, gated(p.gate, p.tokens, bt, h, d, y_ld(y0 + d)));
}
