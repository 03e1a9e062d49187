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

// erf by Abramowitz & Stegun 7.1.26 (|error| ≤ 1.5e-7, below fp32's step at
// 1): GLSL has no erf.
float erf_as(float x) {
  const float t = 1.0 / (1.0 + 0.3275911 * abs(x));
  const float y = 1.0 - t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429)))) *
                            exp(-x * x);
  return x < 0.0 ? -y : y;
}

float act(float x) {
  if (p.act == 0) return x / (1.0 + exp(-x));
  if (p.act == 1) return 0.5 * x * (1.0 + erf_as(x * 0.70710678118654752));
  if (p.act == 2) return 0.5 * x * (1.0 + tanh(0.79788456080286536 * (x + 0.044715 * x * x * x)));
  return 1.0 / (1.0 + exp(-x));
}

void main() {
  LOAD_PARAMS;
  const uint r = gl_WorkGroupID.x + gl_WorkGroupID.y * gl_NumWorkGroups.x;
  if (r >= p.rows) return;  // the grid is split in 2-D past 65535 groups
  const uint g0 = r * p.ld_p, h0 = r * p.ld_h;
  for (uint i = gl_LocalInvocationID.x; i < p.inter; i += WG) h_st(h0 + i, act(proj_ld(g0 + i)) * proj_ld(g0 + p.inter + i));
}
