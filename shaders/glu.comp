#version 450
#extension GL_GOOGLE_include_directive : require
// Variants (the build compiles one SPIR-V module per line: name, then defines):
// variant: glu
// variant: glu_f16 T=F16
// variant: glu_bf16 T=BF16
// The MLP's gated product: h[r, i] = act(g[r, i]) · u[r, i], where row r of
// the fused projection P holds the gate projection's I outputs then the up
// projection's (P [rows, 2I], rows `ld_p` apart; h rows `ld_h` apart, so the
// down projection can read padded operand rows on CPU drivers).
// act: activation.glsl's kind. Storage type T for P and h. A workgroup takes
// `chunk` elements of a row, so that a decode step's single row spreads over
// the GPU (H200: one workgroup per row took 19 µs for 3,072 elements,
// 2026-11-28).
#include "activation.glsl"
#include "common.glsl"
#include "storage.glsl"
#ifndef T
#define T F32
#endif

RO(0, proj, T)
RW(1, h, T)

#include "params.glsl"
struct Push {
  uint rows, inter, ld_p, ld_h, act;
  uint chunk;  // elements of a row per workgroup
};
PARAMS(Push)

void main() {
  LOAD_PARAMS;
  const uint group = gl_WorkGroupID.x + gl_WorkGroupID.y * gl_NumWorkGroups.x;  // 2-D past 65535 groups
  const uint per_row = (p.inter + p.chunk - 1) / p.chunk, r = group / per_row;
  if (r >= p.rows) return;
  const uint g0 = r * p.ld_p, h0 = r * p.ld_h, end = min(p.inter, (group % per_row + 1) * p.chunk);
  for (uint i = (group % per_row) * p.chunk + gl_LocalInvocationID.x; i < end; i += WG)
    h_st(h0 + i, activation(proj_ld(g0 + i), p.act) * proj_ld(g0 + p.inter + i));
}
