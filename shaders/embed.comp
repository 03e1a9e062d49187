#version 450
#extension GL_GOOGLE_include_directive : require
// Variants (the build compiles one SPIR-V module per line: name, then defines):
// variant: embed
// variant: embed_f16 T=F16
// variant: embed_bf16 T=BF16
// The embedding gather: x[bt, :] = table[id(bt) − first, :] for the token
// ids of rows first..first+count−1 of the table (a table larger than one
// device buffer is split into row chunks, one dispatch each; ids outside this
// chunk are another dispatch's). Table rows `ld` elements apart, storage T;
// x fp32 [rows, dim]; ids int32 (range-checked on the host).
#include "common.glsl"
#include "storage.glsl"
#ifndef T
#define T F32
#endif

layout(std430, binding = 0) readonly buffer Ids { int ids[]; };
RO(1, table, T)
RW(2, x, F32)

#include "params.glsl"
struct Push {
  uint rows, dim, ld, first, count;
};
PARAMS(Push)

void main() {
  LOAD_PARAMS;
  const uint r = gl_WorkGroupID.x + gl_WorkGroupID.y * gl_NumWorkGroups.x;
  if (r >= p.rows) return;
  const uint row = uint(ids[r]) - p.first;  // wraps past count for ids below first
  if (row >= p.count) return;
  for (uint d = gl_LocalInvocationID.x; d < p.dim; d += WG) x_st(r * p.dim + d, table_ld(row * p.ld + d));
}
