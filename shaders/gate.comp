#version 450
#extension GL_GOOGLE_include_directive : require
// Variants (the build compiles one SPIR-V module per line: name, then defines):
// variant: gate
// variant: gate_f16 T=F16
// variant: gate_bf16 T=BF16
// The gated output: y[bt, h, d] *= sigmoid(g[bt, h, gw == 1 ? 0 : d]).
// Headwise gates (gw = 1) scale a whole head; elementwise (gw = Dh) each
// channel. The gate view reads the raw gate rows straight out of q_proj's
// output in whichever layout the checkpoint uses.
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

#include "params.glsl"
struct Push {
  View gate_view;
  uint tokens, heads, dim, gate_width;
  uint count;     // rows · heads
  uint y_stride;  // elements between rows of y
};
PARAMS(Push)

void main() {
  LOAD_PARAMS;
  const uint bh = gl_WorkGroupID.x + gl_WorkGroupID.y * gl_NumWorkGroups.x;
  if (bh >= p.count) return;  // the grid is split in 2-D past 65535 groups
  const uint bt = bh / p.heads, h = bh - bt * p.heads;
  const uint g0 = view_offset(p.gate_view, p.tokens, bt, h, 0);
  const uint step = p.gate_width == 1 ? 0 : 1;
  const uint y0 = bt * p.y_stride + h * p.dim;
  for (uint d = gl_LocalInvocationID.x; d < p.dim; d += WG) {
    const float z = g_ld(g0 + d * step);
    y_st(y0 + d, y_ld(y0 + d) / (1.0 + exp(-z)));
  }
}
