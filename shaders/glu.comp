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
// act (the config's hidden_act): 0 silu x·σ(x), 1 gelu x·Φ(x) with the erf
// form, 2 gelu_pytorch_tanh, 3 sigmoid. Storage type T for P and h.
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
};
PARAMS(Push)

// Both GELUs are written without 1 + erf(·) or 1 + tanh(·): for negative x
// those cancel to a few correct bits, and GELU(x) is small exactly there.
// erfc by the Chebyshev fit of Numerical Recipes §6.2 (relative error below
// 1.2e-7 for all z ≥ 0); GLSL has no erf.
float erfc_pos(float z) {
  const float t = 1.0 / (1.0 + 0.5 * z);
  const float poly =
      -1.26551223 +
      t * (1.00002368 +
           t * (0.37409196 +
                t * (0.09678418 +
                     t * (-0.18628806 +
                          t * (0.27886807 + t * (-1.13520398 + t * (1.48851587 + t * (-0.82215223 + t * 0.17087277))))))));
  return t * exp(-z * z + poly);
}

float act(float x) {
  if (p.act == 0) return x / (1.0 + exp(-x));
  if (p.act == 1) {  // x·Φ(x) = x·erfc(−x/√2)/2
    const float z = x * 0.70710678118654752;
    return 0.5 * x * (z < 0.0 ? erfc_pos(-z) : 2.0 - erfc_pos(z));
  }
  // 1 + tanh(u) = 2σ(2u), u = √(2/π)(x + 0.044715x³)
  if (p.act == 2) return x / (1.0 + exp(-1.5957691216057308 * (x + 0.044715 * x * x * x)));
  return 1.0 / (1.0 + exp(-x));
}

void main() {
  LOAD_PARAMS;
  const uint r = gl_WorkGroupID.x + gl_WorkGroupID.y * gl_NumWorkGroups.x;
  if (r >= p.rows) return;  // the grid is split in 2-D past 65535 groups
  const uint g0 = r * p.ld_p, h0 = r * p.ld_h;
  for (uint i = gl_LocalInvocationID.x; i < p.inter; i += WG) h_st(h0 + i, act(proj_ld(g0 + i)) * proj_ld(g0 + p.inter + i));
}
