#version 450
#extension GL_GOOGLE_include_directive : require
// Variants (the build compiles one SPIR-V module per line: name, then defines):
// variant: gla_recurrent
// variant: gla_recurrent_f16 T=F16
// variant: gla_recurrent_bf16 T=BF16
// Gated linear attention by its definition (include/vkgate/gla_config.hpp),
// token after token against a carried state:
//   log α_t = max(logsigmoid(gk_t) / normalizer, clamp_min)
//   k̃_t = φ(k_t), or (1 − α_t) ⊙ φ(k_t) with the convex coupling
//   S_t = diag(α_t)·S_{t−1} + k̃_tᵀ v_t          [d_k, d_v] per query head, fp32
//   o_t = scale · φ(q_t) · S_t
// One workgroup per (column tile, query head, batch); invocation j owns the
// state's column j, all DK rows of it in registers, so o_t[j] needs no
// reduction across invocations. Per token the workgroup stages φ(q)·scale, k̃
// and α (shared by every column) in shared memory once.
// The state is read from `state` at the start and written back at the end (in
// place: each invocation reads and writes only its own column): the initial
// state in, the final state out, or a decode step's carried state.
// Storage: T for the projections, fp32 for the state and o.
#include "common.glsl"
#include "storage.glsl"
#ifndef T
#define T F32
#endif

layout(constant_id = 1) const uint DK = 64;  // d_k: the state's rows

RO(0, x, T)        // the projections: q, k, v (and the single forget gate's logits)
RO(1, gk, T)       // the forget gate's logits (may be x)
RW(2, state, F32)  // [B, H, d_k, d_v]
RW(3, o, F32)      // [B·T, H, d_v]

#include "params.glsl"
struct Push {
  View q_view, k_view, v_view, gk_view;  // (bt, head, d): q over H heads, the others over KV
  uint tokens, heads, kv_heads, dv;
  uint feature_map;  // 0 none, 1 relu, 2 elu + 1
  uint convex;       // KeyCoupling::convex
  float normalizer, clamp_min, scale;  // clamp_min −inf when unset
};
PARAMS(Push)

shared float q_s[DK], k_s[DK], a_s[DK];

float phi(float v) { return p.feature_map == 1 ? max(v, 0.0) : p.feature_map == 2 ? (v > 0.0 ? v + 1.0 : exp(v)) : v; }

// log(1 + y) for y ≥ 0, without losing y ≪ 1 to rounding.
float log1p_pos(float y) { return y < 1e-4 ? y * (1.0 - y * (0.5 - y / 3.0)) : log(1.0 + y); }
float log_sigmoid(float v) { return v < 0.0 ? v - log1p_pos(exp(v)) : -log1p_pos(exp(-v)); }
// 1 − e^l for l ≤ 0, exact to rounding where e^l is close to 1.
float one_minus_exp(float l) { return l > -1e-2 ? -l * (1.0 + l * (0.5 + l * (1.0 / 6.0 + l / 24.0))) : 1.0 - exp(l); }

void main() {
  LOAD_PARAMS;
  const uint tid = gl_LocalInvocationID.x;
  const uint h = gl_WorkGroupID.y, b = gl_WorkGroupID.z, kvh = h / (p.heads / p.kv_heads);
  const uint j = gl_WorkGroupID.x * WG + tid;
  const bool column = j < p.dv;
  const uint base = (b * p.heads + h) * DK * p.dv + j;
  float s[DK];
  [[unroll]] for (uint i = 0; i < DK; ++i) s[i] = column ? state_ld(base + i * p.dv) : 0.0;
  for (uint t = 0; t < p.tokens; ++t) {
    const uint bt = b * p.tokens + t;
    for (uint i = tid; i < DK; i += WG) {
      const float la = max(log_sigmoid(gk_ld(view_offset(p.gk_view, p.tokens, bt, kvh, i))) / p.normalizer, p.clamp_min);
      const float k = phi(x_ld(view_offset(p.k_view, p.tokens, bt, kvh, i)));
      q_s[i] = p.scale * phi(x_ld(view_offset(p.q_view, p.tokens, bt, h, i)));
      k_s[i] = p.convex != 0 ? one_minus_exp(la) * k : k;
      a_s[i] = exp(la);
    }
    barrier();
    if (column) {
      const float v = x_ld(view_offset(p.v_view, p.tokens, bt, kvh, j));
      float acc = 0.0;
      [[unroll]] for (uint i = 0; i < DK; ++i) {
        s[i] = fma(a_s[i], s[i], k_s[i] * v);
        acc = fma(q_s[i], s[i], acc);
      }
      o_st((bt * p.heads + h) * p.dv + j, acc);
    }
    barrier();  // the next token overwrites the staged vectors
  }
  if (column)
    [[unroll]] for (uint i = 0; i < DK; ++i) state_st(base + i * p.dv, s[i]);
}
