#version 450
#extension GL_GOOGLE_include_directive : require
// Variants (the build compiles one SPIR-V module per line: name, then defines):
// variant: gdn_prepare
// variant: gdn_prepare_f16 T=F16
// variant: gdn_prepare_bf16 T=BF16
// variant: gdn_prepare_cpu ONE_SUBGROUP TEXEL
// variant: gdn_prepare_f16_cpu T=F16 ONE_SUBGROUP TEXEL
// variant: gdn_prepare_bf16_cpu T=BF16 ONE_SUBGROUP TEXEL
// variant: gdn_conv_state CONV_STATE
// variant: gdn_conv_state_f16 CONV_STATE T=F16
// variant: gdn_conv_state_bf16 CONV_STATE T=BF16
// Gated DeltaNet (include/vkgate/gdn_config.hpp) from the input projections
// to the delta rule's inputs, in one pass: one workgroup per (token, key head
// j) reads the head's block of in_proj_qkvz's output, [q_j (dk) | k_j (dk) |
// v of its r value heads (r·dv) | z (r·dv)], and per channel of q, k and v
//   y = SiLU(Σ_tap w[c, tap]·x[t − (K−1) + tap])   (causal depthwise conv;
//       inputs before the first token come from the conv state, oldest first)
// then q ← q·rsqrt(Σq² + 1e-6)·dk^-0.5 and k ← k·rsqrt(Σk² + 1e-6), writing
// `mixed` [B·T, C] fp32 in the conv's channel order [all q | all k | all v];
// and per value head of the key head β = sigmoid(b), g = −exp(A_log)·
// softplus(a + dt_bias) into bg [B·T, nv, 2] fp32.
// CONV_STATE (a second dispatch, after the first has read the state): one
// invocation per (batch, channel) replaces the conv state [B, C, K−1] by the
// last K−1 inputs of [state | new tokens], in place (each invocation reads its
// whole row into registers before writing it).
// Storage: T for the projections; fp32 for the conv weight, A_log, dt_bias,
// the conv state and the outputs. TEXEL (CPU drivers) reads the inputs through
// texel views (storage.glsl).
#include "common.glsl"
#include "storage.glsl"
#ifndef CONV_STATE
#include "reduce.glsl"
#endif
#ifndef T
#define T F32
#endif

IN(0, x, T)            // in_proj_qkvz's output: row bt at bt·qkvz_ld + qkvz_base
IN(1, xba, T)          // in_proj_ba's output: row bt at bt·ba_ld + ba_base, per key head [b (r) | a (r)]
IN(2, conv_w, F32)     // [C, K]
IN(3, a_log, F32)      // [nv]
IN(4, dt_bias, F32)    // [nv]
#ifdef CONV_STATE
RW(5, conv_state, F32) // [B, C, K−1]
#else
IN(5, conv_state, F32)
RW(6, mixed, F32)      // [B·T, C]
RW(7, bg, F32)         // [B·T, nv, 2]: β, g
#endif

#include "params.glsl"
struct Push {
  uint batch, tokens, nk, nv, dk, dv, kernel;
  uint qkvz_base, qkvz_ld, ba_base, ba_ld;
  uint groups;  // B·T·nk (the first pass's workgroups), or B·C (invocations of CONV_STATE)
  float q_scale;
};
PARAMS(Push)

// Input τ of channel c (local column e of key head j's block) in sequence b:
// τ ≥ 0 a new token, τ < 0 the conv state's slot K − 1 + τ.
float conv_input(uint b, uint c, uint j, uint e, int tau) {
  if (tau >= 0) return x_ld((b * p.tokens + uint(tau)) * p.qkvz_ld + p.qkvz_base + j * (2 * p.dk + 2 * (p.nv / p.nk) * p.dv) + e);
  const uint C = 2 * p.nk * p.dk + p.nv * p.dv;
  return conv_state_ld((b * C + c) * (p.kernel - 1) + uint(int(p.kernel) - 1 + tau));
}

// The conv channel of local column e (< 2·dk + r·dv) of key head j's block.
uint channel(uint j, uint e) {
  const uint r = p.nv / p.nk;
  if (e < p.dk) return j * p.dk + e;
  if (e < 2 * p.dk) return p.nk * p.dk + j * p.dk + (e - p.dk);
  return 2 * p.nk * p.dk + j * r * p.dv + (e - 2 * p.dk);
}

#ifdef CONV_STATE
const uint KMAX = 16;  // GdnConfig's bound on linear_conv_kernel_dim

void main() {
  LOAD_PARAMS;
  const uint id = gl_GlobalInvocationID.x + gl_GlobalInvocationID.y * gl_NumWorkGroups.x * WG;
  if (id >= p.groups) return;
  const uint C = 2 * p.nk * p.dk + p.nv * p.dv, b = id / C, c = id - b * C, r = p.nv / p.nk;
  // c back to (key head j, local column e).
  uint j, e;
  if (c < p.nk * p.dk) {
    j = c / p.dk;
    e = c - j * p.dk;
  } else if (c < 2 * p.nk * p.dk) {
    j = (c - p.nk * p.dk) / p.dk;
    e = p.dk + (c - p.nk * p.dk - j * p.dk);
  } else {
    const uint cv = c - 2 * p.nk * p.dk;
    j = cv / (r * p.dv);
    e = 2 * p.dk + (cv - j * r * p.dv);
  }
  const uint n = p.kernel - 1;
  float keep[KMAX];
  // Slot s of the new state is input τ = T − (K−1) + s.
  for (uint s = 0; s < n; ++s) keep[s] = conv_input(b, c, j, e, int(p.tokens) - int(n) + int(s));
  for (uint s = 0; s < n; ++s) conv_state_st((b * C + c) * n + s, keep[s]);
}
#else
void main() {
  LOAD_PARAMS;
  const uint group = gl_WorkGroupID.x + gl_WorkGroupID.y * gl_NumWorkGroups.x;
  if (group >= p.groups) return;  // whole workgroups: the reductions below stay uniform
  const uint tid = gl_LocalInvocationID.x, r = p.nv / p.nk;
  const uint bt = group / p.nk, j = group - bt * p.nk, b = bt / p.tokens, t = bt - b * p.tokens;
  const uint C = 2 * p.nk * p.dk + p.nv * p.dv, width = 2 * p.dk + r * p.dv;
  float qq = 0.0, kk = 0.0;
  for (uint e = tid; e < width; e += WG) {
    const uint c = channel(j, e);
    float acc = 0.0;
    for (uint tap = 0; tap < p.kernel; ++tap)
      acc = fma(conv_w_ld(c * p.kernel + tap), conv_input(b, c, j, e, int(t) - int(p.kernel - 1) + int(tap)), acc);
    const float y = acc / (1.0 + exp(-acc));
    if (e < p.dk) qq = fma(y, y, qq);
    else if (e < 2 * p.dk) kk = fma(y, y, kk);
    mixed_st(bt * C + c, y);
  }
  // Each invocation scales the q and k elements it wrote itself.
  const float qn = p.q_scale / sqrt(wg_sum(qq) + 1e-6), kn = 1.0 / sqrt(wg_sum(kk) + 1e-6);
  for (uint e = tid; e < 2 * p.dk; e += WG) {
    const uint c = channel(j, e);
    mixed_st(bt * C + c, mixed_ld(bt * C + c) * (e < p.dk ? qn : kn));
  }
  for (uint i = tid; i < r; i += WG) {
    const uint h = j * r + i, row = bt * p.ba_ld + p.ba_base + j * 2 * r;
    const float bl = xba_ld(row + i), arg = xba_ld(row + r + i) + dt_bias_ld(h);
    // softplus as torch computes it: x itself above 20; log(1 + e^x) without losing e^x ≪ 1.
    const float ex = exp(arg);
    const float sp = arg > 20.0 ? arg : ex < 1e-4 ? ex * (1.0 - ex * (0.5 - ex / 3.0)) : log(1.0 + ex);
    bg_st((bt * p.nv + h) * 2, 1.0 / (1.0 + exp(-bl)));
    bg_st((bt * p.nv + h) * 2 + 1, -exp(a_log_ld(h)) * sp);
  }
}
#endif
