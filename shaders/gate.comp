#version 450
#extension GL_GOOGLE_include_directive : require
// The gated output: y[bt, h, d] *= sigmoid(g[bt, h, gw == 1 ? 0 : d]).
// Headwise gates (gw = 1) scale a whole head; elementwise (gw = Dh) each
// channel. The gate view reads the raw gate rows straight out of q_proj's
// output in whichever layout the checkpoint uses.
// Storage type: T for the gate rows and y.
#include "common.glsl"
#include "storage.glsl"
#ifndef T
#define T F32
#endif

RO(0, g, T)
RW(1, y, T)

layout(push_constant) uniform Push {
  View gate_view;
  uint tokens, heads, dim, gate_width;
  uint count;  // rows · heads · dim
} p;

void main() {
  const uint gid = gl_GlobalInvocationID.x + gl_GlobalInvocationID.y * gl_NumWorkGroups.x * WG;
  if (gid >= p.count) return;
  const uint d = gid % p.dim;
  const uint bh = gid / p.dim;
  const uint bt = bh / p.heads, h = bh - bt * p.heads;
  const float z = g_ld(view_offset(p.gate_view, p.tokens, bt, h, p.gate_width == 1 ? 0 : d));
  y_st(gid, y_ld(gid) / (1.0 + exp(-z)));
}
