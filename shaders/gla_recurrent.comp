#version 450
#extension GL_GOOGLE_include_directive : require
// Variants (the build compiles one SPIR-V module per line: name, then defines):
// variant: gla_recurrent
// variant: gla_recurrent_f16 T=F16
// variant: gla_recurrent_bf16 T=BF16
// variant: gla_recurrent_cpu TEXEL
// variant: gla_recurrent_f16_cpu T=F16 TEXEL
// variant: gla_recurrent_bf16_cpu T=BF16 TEXEL
// variant: gla_recurrent_cpu4 TEXEL ROWS4
// variant: gla_recurrent_f16_cpu4 T=F16 TEXEL ROWS4
// variant: gla_recurrent_bf16_cpu4 T=BF16 TEXEL ROWS4
// variant: gla_prepare PREPARE
// variant: gla_prepare_f16 PREPARE T=F16
// variant: gla_prepare_bf16 PREPARE T=BF16
// Gated linear attention by its definition (include/vkgate/gla_config.hpp),
// token after token against a carried state:
//   log α_t = max(logsigmoid(gk_t) / normalizer, clamp_min)
//   k̃_t = φ(k_t), or (1 − α_t) ⊙ φ(k_t) with the convex coupling
//   S_t = diag(α_t)·S_{t−1} + k̃_tᵀ v_t          [d_k, d_v] per query head, fp32
//   o_t = scale · φ(q_t) · S_t
// Two dispatches. PREPARE computes, once per element, what every column of
// the state shares: qs = scale·φ(q) [B·T, H, DK], and per KV head k̃ and α
// [B·T, KV, DK] (fp32). The scan then runs one workgroup per (column tile,
// query head and block of RK state rows, batch); invocation j owns RK rows of
// the state's column j in registers and writes its part of o_t[j], which
// gla_output.comp sums over the DK/RK blocks. The token loop has no barrier
// (on llvmpipe a barrier per token, staging these vectors in shared memory,
// made the scan 5x slower) and RK stays small (llvmpipe, Mesa 22.3, computed
// wrong results with a 256-float array per invocation).
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
layout(constant_id = 2) const uint RK = 32;  // state rows per invocation (divides DK)

// The TEXEL variants (CPU drivers) read through texel views: on llvmpipe a
// storage-buffer load is a loop over the lanes, and the scan's inner loop is
// three loads per two FMAs; ROWS4 fetches four rows at once (T 256, d_k 256,
// d_v 512, 4 heads: 42 ms, where one row per fetch measured several times that).
IN(0, x, T)        // the projections: q, k, v (and the single forget gate's logits)
IN(1, gk, T)       // the forget gate's logits (may be x)
RW(2, state, F32)  // [B, H, d_k, d_v]
RW(3, o, F32)      // [B·T, H, DK/RK, d_v]: each row block's part of o
#ifdef PREPARE
RW(4, qs, F32)     // [B·T, H, DK]: scale·φ(q)
RW(5, ks, F32)     // [B·T, KV, DK]: k̃
RW(6, as, F32)     // [B·T, KV, DK]: α
#elif defined(ROWS4)
// Four rows per fetch (RGBA32F views; DK and RK multiples of 4): a quarter of the gathers.
layout(binding = 4) uniform samplerBuffer qs4;
layout(binding = 5) uniform samplerBuffer ks4;
layout(binding = 6) uniform samplerBuffer as4;
#else
IN(4, qs, F32)
IN(5, ks, F32)
IN(6, as, F32)
#endif

#include "params.glsl"
struct Push {
  View q_view, k_view, v_view, gk_view;  // (bt, head, d): q over H heads, the others over KV
  uint tokens, heads, kv_heads, dv;
  uint feature_map;  // 0 none, 1 relu, 2 elu + 1
  uint convex;       // KeyCoupling::convex
  float normalizer, clamp_min, scale;  // clamp_min −inf when unset
  uint batch_tokens;                    // B·T (PREPARE)
};
PARAMS(Push)

#include "gla.glsl"

#ifdef PREPARE
// One invocation per element of q (H heads) and of k and α (KV heads) of every token.
void main() {
  LOAD_PARAMS;
  const uint id = gl_GlobalInvocationID.x + gl_GlobalInvocationID.y * gl_NumWorkGroups.x * WG;
  const uint per_token = (p.heads + p.kv_heads) * DK, rows = p.batch_tokens;
  if (id >= rows * per_token) return;
  const uint bt = id / per_token, r = id - bt * per_token, h = r / DK, i = r - h * DK;
  if (h < p.heads) {
    qs_st((bt * p.heads + h) * DK + i, p.scale * phi(x_ld(view_offset(p.q_view, p.tokens, bt, h, i))));
    return;
  }
  const uint kvh = h - p.heads, at = (bt * p.kv_heads + kvh) * DK + i;
  const float la = log_gate(gk_ld(view_offset(p.gk_view, p.tokens, bt, kvh, i)));
  const float k = phi(x_ld(view_offset(p.k_view, p.tokens, bt, kvh, i)));
  ks_st(at, p.convex != 0 ? one_minus_exp(la) * k : k);
  as_st(at, exp(la));
}
#else
void main() {
  LOAD_PARAMS;
  const uint blocks = DK / RK, block = gl_WorkGroupID.y % blocks, r0 = block * RK;
  const uint h = gl_WorkGroupID.y / blocks, b = gl_WorkGroupID.z, kvh = h / (p.heads / p.kv_heads);
  const uint j = gl_WorkGroupID.x * WG + gl_LocalInvocationID.x;
  if (j >= p.dv) return;  // no barriers below
  const uint base = ((b * p.heads + h) * DK + r0) * p.dv + j;
  float s[RK];
  [[unroll]] for (uint i = 0; i < RK; ++i) s[i] = state_ld(base + i * p.dv);
  for (uint t = 0; t < p.tokens; ++t) {
    const uint bt = b * p.tokens + t, q0 = (bt * p.heads + h) * DK + r0, k0 = (bt * p.kv_heads + kvh) * DK + r0;
    const float v = x_ld(view_offset(p.v_view, p.tokens, bt, kvh, j));
    float acc = 0.0;
#ifdef ROWS4
    [[unroll]] for (uint i = 0; i < RK; i += 4) {
      const vec4 a = texelFetch(as4, int((k0 + i) >> 2)), k = texelFetch(ks4, int((k0 + i) >> 2)),
                 q = texelFetch(qs4, int((q0 + i) >> 2));
      [[unroll]] for (uint c = 0; c < 4; ++c) {
        s[i + c] = fma(a[c], s[i + c], k[c] * v);
        acc = fma(q[c], s[i + c], acc);
      }
    }
#else
    [[unroll]] for (uint i = 0; i < RK; ++i) {
      s[i] = fma(as_ld(k0 + i), s[i], ks_ld(k0 + i) * v);
      acc = fma(qs_ld(q0 + i), s[i], acc);
    }
#endif
    o_st(((bt * p.heads + h) * blocks + block) * p.dv + j, acc);
  }
  [[unroll]] for (uint i = 0; i < RK; ++i) state_st(base + i * p.dv, s[i]);
}
#endif
