#version 450
#extension GL_GOOGLE_include_directive : require
// Variants (the build compiles one SPIR-V module per line: name, then defines):
// variant: matmul_combine
// variant: matmul_combine_f16 Y_T=F16
// variant: matmul_combine_bf16 Y_T=BF16
// variant: matmul_combine_f16_y32 G_T=F16
// variant: matmul_combine_bf16_y32 G_T=BF16
// Second pass of a split-K matmul (matmul.comp, matmul_coopmat.comp): Y[m, n]
// = Σ_s P[s, m, n], the fp32 partial sums P [splits, M, N] added in split
// order, then the epilogue (epilogue.glsl). Storage: Y_T; G_T for the dense
// gate's scores; P, bias and residual fp32.
#include "common.glsl"
#include "storage.glsl"
#ifndef Y_T
#define Y_T F32
#endif
#ifndef G_T
#define G_T Y_T
#endif

RO(0, part, F32)
RO(1, bias, F32)
RO(2, res, F32)
RW(3, y, Y_T)
RO(4, gate, G_T)

#include "params.glsl"
struct Push {
  uint M, N, ldy, ldr;
  uint has_bias, has_residual, splits;
  uint gate_act, gate_combine, gate_at, ldg;  // the dense gate (epilogue.glsl)
};
PARAMS(Push)
#include "epilogue.glsl"

void main() {
  LOAD_PARAMS;
  const uint i = gl_GlobalInvocationID.x + gl_GlobalInvocationID.y * gl_NumWorkGroups.x * WG;
  if (i >= p.M * p.N) return;
  const uint m = i / p.N, n = i - m * p.N;
  float v = 0.0;
  for (uint s = 0; s < p.splits; ++s) v += part_ld(s * p.M * p.N + i);
  y_st(m * p.ldy + n, epilogue(m, n, v));
}
