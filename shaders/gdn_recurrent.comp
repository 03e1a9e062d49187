#version 450
#extension GL_GOOGLE_include_directive : require
// Variants (the build compiles one SPIR-V module per line: name, then defines):
// variant: gdn_recurrent
// variant: gdn_recurrent_sg SUBGROUP
// variant: gdn_recurrent_sg_cpu SUBGROUP TEXEL
// Gated DeltaNet's delta rule by its definition, token after token against a
// carried state (include/vkgate/gdn_config.hpp), per value head h:
//   S ← e^g·S;  u = β·(v − Sᵀk);  S ← S + k·uᵀ;  o = Sᵀq        S [dk, dv] fp32
// Column j of S evolves on its own (u_j needs only column j), so invocation j
// owns one column: one workgroup per (tile of WG columns, value head, batch),
// the columns in shared memory (DK·WG floats, each invocation touching only its
// own, so the token loop has no barrier). q and k are those of key head h / r.
// Inputs from gdn_prepare.comp: mixed [B·T, C] fp32 (q scaled and k
// normalised, [all q | all k | all v]) and bg [B·T, nv, 2] (β, g); the state
// is read at the start and written back at the end (the initial state in, the
// final state out, or a decode step's carried state); o [B·T, nv, dv] fp32.
// SUBGROUP: one subgroup of SG lanes per column instead, the column's rows in
// registers, lane l holding rows l, l + SG, ... (RK of them); Sᵀk and Sᵀq are
// subgroup sums. The host asks for full subgroups of SG lanes. On CPU drivers
// (TEXEL: q, k, v, β and g read through texel views, a gather where a storage
// load is a loop over the lanes) the 8 lanes are one SIMD register, and the
// state never leaves registers: with Qwen3-Next's shape, T 1 to 512, 2 to 6×
// faster on llvmpipe than the shared-memory columns.
#include "common.glsl"
#include "storage.glsl"

layout(constant_id = 1) const uint DK = 64;  // dk: the state's rows

IN(0, mixed, F32)
IN(1, bg, F32)
RW(2, state, F32)  // [B, nv, dk, dv]
RW(3, o, F32)      // [B·T, nv, dv]

#include "params.glsl"
struct Push {
  uint batch, tokens, nk, nv, dv;
};
PARAMS(Push)

#ifdef SUBGROUP
#extension GL_KHR_shader_subgroup_arithmetic : require
layout(constant_id = 2) const uint SG = 8;  // lanes per column: the subgroup size
layout(constant_id = 3) const uint RK = 8;  // rows per lane: ceil(DK / SG)

void main() {
  LOAD_PARAMS;
  const uint lane = gl_SubgroupInvocationID, j = gl_WorkGroupID.x * (WG / SG) + gl_SubgroupID;
  const uint h = gl_WorkGroupID.y, b = gl_WorkGroupID.z, kh = h / (p.nv / p.nk);
  if (j >= p.dv) return;  // the whole subgroup: its sums below stay complete
  const uint C = 2 * p.nk * DK + p.nv * p.dv;
  const uint base = (b * p.nv + h) * DK * p.dv + j;
  float s[RK];
  [[unroll]] for (uint i = 0; i < RK; ++i) {
    const uint row = lane + SG * i;
    s[i] = row < DK ? state_ld(base + row * p.dv) : 0.0;
  }
  for (uint t = 0; t < p.tokens; ++t) {
    const uint bt = b * p.tokens + t, row0 = bt * C;
    const uint q0 = row0 + kh * DK + lane, k0 = row0 + p.nk * DK + kh * DK + lane;
    const float beta = bg_ld((bt * p.nv + h) * 2), decay = exp(bg_ld((bt * p.nv + h) * 2 + 1));
    const float v = mixed_ld(row0 + 2 * p.nk * DK + h * p.dv + j);
    float k[RK];
    float kv = 0.0;
    [[unroll]] for (uint i = 0; i < RK; ++i) {
      k[i] = lane + SG * i < DK ? mixed_ld(k0 + SG * i) : 0.0;
      kv = fma(s[i], k[i], kv);
    }
    const float u = beta * (v - decay * subgroupAdd(kv));
    float acc = 0.0;
    [[unroll]] for (uint i = 0; i < RK; ++i) {
      s[i] = fma(decay, s[i], k[i] * u);
      if (lane + SG * i < DK) acc = fma(s[i], mixed_ld(q0 + SG * i), acc);
    }
    acc = subgroupAdd(acc);
    if (lane == 0) o_st((bt * p.nv + h) * p.dv + j, acc);
  }
  [[unroll]] for (uint i = 0; i < RK; ++i) {
    const uint row = lane + SG * i;
    if (row < DK) state_st(base + row * p.dv, s[i]);
  }
}
#else
shared float S[DK * WG];

void main() {
  LOAD_PARAMS;
  const uint lid = gl_LocalInvocationID.x, j = gl_WorkGroupID.x * WG + lid;
  const uint h = gl_WorkGroupID.y, b = gl_WorkGroupID.z, kh = h / (p.nv / p.nk);
  if (j >= p.dv) return;  // no barriers below
  const uint C = 2 * p.nk * DK + p.nv * p.dv;
  const uint base = (b * p.nv + h) * DK * p.dv + j;
  for (uint i = 0; i < DK; ++i) S[i * WG + lid] = state_ld(base + i * p.dv);
  for (uint t = 0; t < p.tokens; ++t) {
    const uint bt = b * p.tokens + t, row = bt * C;
    const uint q0 = row + kh * DK, k0 = row + p.nk * DK + kh * DK;
    const float beta = bg_ld((bt * p.nv + h) * 2), decay = exp(bg_ld((bt * p.nv + h) * 2 + 1));
    const float v = mixed_ld(row + 2 * p.nk * DK + h * p.dv + j);
    float kv = 0.0;
    for (uint i = 0; i < DK; ++i) kv = fma(S[i * WG + lid], mixed_ld(k0 + i), kv);
    const float u = beta * (v - decay * kv);
    float acc = 0.0;
    for (uint i = 0; i < DK; ++i) {
      const float s = fma(decay, S[i * WG + lid], mixed_ld(k0 + i) * u);
      S[i * WG + lid] = s;
      acc = fma(s, mixed_ld(q0 + i), acc);
    }
    o_st((bt * p.nv + h) * p.dv + j, acc);
  }
  for (uint i = 0; i < DK; ++i) state_st(base + i * p.dv, S[i * WG + lid]);
}
#endif
