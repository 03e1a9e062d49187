#version 450
#extension GL_GOOGLE_include_directive : require
// Variants (the build compiles one SPIR-V module per line: name, then defines):
// variant: gdn_chunk_wy WY
// variant: gdn_chunk_state
// Gated DeltaNet's delta rule in chunks of L = 64 tokens (the WY
// representation, as fla's chunk_gated_delta_rule), between gdn_prepare.comp
// and the output pass, in place of gdn_recurrent.comp. Within a chunk, with
// G_i = g_0 + … + g_i (cumulative log decay, ≤ 0) and the state S0 at its start,
//   A_ij = β_i·e^(G_i − G_j)·k_i·k_j   (j < i; strictly lower)
//   (I + A)·W = diag(β·e^G)·K,  (I + A)·Ũ = diag(β)·V   (forward substitution)
//   U = Ũ − W·S0                        (the u of every token of the chunk)
//   o_i = e^(G_i)·q_iᵀS0 + Σ_{m ≤ i} e^(G_i − G_m)·(q_i·k_m)·u_m
//   S = e^(G_last)·S0 + Σ_m e^(G_last − G_m)·k_m·u_mᵀ
// Every exponent is a difference G_i − G_j with j ≤ i (or G_i itself), never
// above 0: nothing overflows whatever the decay (e.g. g = −20 per token).
// WY: one workgroup per (chunk, value head, batch): G (written over g in bg),
// A and P_im = e^(G_i − G_m)·q_i·k_m in shared memory / scratch, then one
// invocation per column of W and Ũ solving its column.
// state: one workgroup per (tile of WG state columns, value head, batch) runs
// the chunks in order, each invocation holding its column of S in shared
// memory (as gdn_recurrent.comp's fallback).
// A first, plain form that pins the algorithm down (the tests hold it to the
// reference, decays of e^-20 per token included); not yet fast: on llvmpipe at
// Qwen3-Next's shape, T 256, WY 0.8 s and the state pass 1.5 s against 0.23 s
// for gdn_recurrent_sg_cpu. Its products want the GEMM kernels' register tiles.
#include "common.glsl"
#include "storage.glsl"

layout(constant_id = 1) const uint DK = 64;
const uint L = 64;

RO(0, mixed, F32)  // [B·T, C]: q (scaled), k (normalised), v
RW(1, bg, F32)     // [B·T, nv, 2]: β, g (WY replaces g by the chunk's cumulative G)
RW(2, cw, F32)     // [B·T, nv, dk]: W
RW(3, cu, F32)     // [B·T, nv, dv]: Ũ
RW(4, cp, F32)     // [B, nv, chunks, L, L]: P (lower triangle with the diagonal)
RW(5, state, F32)  // [B, nv, dk, dv]
RW(6, o, F32)      // [B·T, nv, dv]

#include "params.glsl"
struct Push {
  uint batch, tokens, nk, nv, dv, chunks;
};
PARAMS(Push)

uint q_at(uint bt, uint kh) { return bt * (2 * p.nk * DK + p.nv * p.dv) + kh * DK; }
uint k_at(uint bt, uint kh) { return q_at(bt, kh) + p.nk * DK; }
uint v_at(uint bt, uint h) { return bt * (2 * p.nk * DK + p.nv * p.dv) + 2 * p.nk * DK + h * p.dv; }

#ifdef WY
shared float Gs[L];
shared float Bs[L];
shared float A[L * L];

void main() {
  LOAD_PARAMS;
  const uint c = gl_WorkGroupID.x, h = gl_WorkGroupID.y, b = gl_WorkGroupID.z, tid = gl_LocalInvocationID.x;
  const uint kh = h / (p.nv / p.nk), t0 = c * L, n = min(L, p.tokens - t0), bt0 = b * p.tokens + t0;
  for (uint i = tid; i < n; i += WG) {
    Bs[i] = bg_ld(((bt0 + i) * p.nv + h) * 2);
    Gs[i] = bg_ld(((bt0 + i) * p.nv + h) * 2 + 1);
  }
  barrier();
  if (tid == 0)
    for (uint i = 1; i < n; ++i) Gs[i] += Gs[i - 1];
  barrier();
  for (uint i = tid; i < n; i += WG) bg_st(((bt0 + i) * p.nv + h) * 2 + 1, Gs[i]);
  // Row i of A (j < i) and of P (m ≤ i).
  const uint pbase = ((b * p.nv + h) * p.chunks + c) * L * L;
  for (uint i = tid; i < n; i += WG) {
    const uint ki = k_at(bt0 + i, kh), qi = q_at(bt0 + i, kh);
    for (uint j = 0; j <= i; ++j) {
      const uint kj = k_at(bt0 + j, kh);
      float kk = 0.0, qk = 0.0;
      for (uint d = 0; d < DK; ++d) {
        const float kd = mixed_ld(kj + d);
        kk = fma(mixed_ld(ki + d), kd, kk);
        qk = fma(mixed_ld(qi + d), kd, qk);
      }
      const float decay = exp(Gs[i] - Gs[j]);
      if (j < i) A[i * L + j] = Bs[i] * decay * kk;
      cp_st(pbase + i * L + j, decay * qk);
    }
  }
  barrier();
  // Columns of W (d < DK) and Ũ (d ≥ DK): x_i = rhs_i − Σ_{j<i} A_ij·x_j, read
  // back from what this invocation wrote.
  for (uint col = tid; col < DK + p.dv; col += WG) {
    const bool w = col < DK;
    for (uint i = 0; i < n; ++i) {
      const uint bt = bt0 + i;
      float x = w ? Bs[i] * exp(Gs[i]) * mixed_ld(k_at(bt, kh) + col) : Bs[i] * mixed_ld(v_at(bt, h) + col - DK);
      for (uint j = 0; j < i; ++j) {
        const uint bj = bt0 + j;
        x -= A[i * L + j] * (w ? cw_ld((bj * p.nv + h) * DK + col) : cu_ld((bj * p.nv + h) * p.dv + col - DK));
      }
      if (w) cw_st((bt * p.nv + h) * DK + col, x);
      else cu_st((bt * p.nv + h) * p.dv + col - DK, x);
    }
  }
}
#else
shared float S[DK * WG];
shared float Us[L * WG];

void main() {
  LOAD_PARAMS;
  const uint lid = gl_LocalInvocationID.x, j = gl_WorkGroupID.x * WG + lid;
  const uint h = gl_WorkGroupID.y, b = gl_WorkGroupID.z, kh = h / (p.nv / p.nk);
  if (j >= p.dv) return;  // no barriers below
  const uint base = (b * p.nv + h) * DK * p.dv + j;
  for (uint r = 0; r < DK; ++r) S[r * WG + lid] = state_ld(base + r * p.dv);
  for (uint c = 0; c < p.chunks; ++c) {
    const uint t0 = c * L, n = min(L, p.tokens - t0), bt0 = b * p.tokens + t0;
    const uint pbase = ((b * p.nv + h) * p.chunks + c) * L * L;
    // u_i = Ũ_ij − W_i·S0, and o_i's inter-chunk part e^(G_i)·q_i·S0.
    for (uint i = 0; i < n; ++i) {
      const uint bt = bt0 + i, wi = (bt * p.nv + h) * DK, qi = q_at(bt, kh);
      float ws = 0.0, qs = 0.0;
      for (uint r = 0; r < DK; ++r) {
        const float s = S[r * WG + lid];
        ws = fma(cw_ld(wi + r), s, ws);
        qs = fma(mixed_ld(qi + r), s, qs);
      }
      Us[i * WG + lid] = cu_ld((bt * p.nv + h) * p.dv + j) - ws;
      o_st((bt * p.nv + h) * p.dv + j, exp(bg_ld((bt * p.nv + h) * 2 + 1)) * qs);
    }
    // o_i += Σ_{m ≤ i} P_im·u_m
    for (uint i = 0; i < n; ++i) {
      float acc = 0.0;
      for (uint m = 0; m <= i; ++m) acc = fma(cp_ld(pbase + i * L + m), Us[m * WG + lid], acc);
      const uint at = ((bt0 + i) * p.nv + h) * p.dv + j;
      o_st(at, o_ld(at) + acc);
    }
    // S = e^(G_last)·S0 + Σ_m e^(G_last − G_m)·k_m·u_mᵀ
    const float glast = bg_ld(((bt0 + n - 1) * p.nv + h) * 2 + 1);
    for (uint r = 0; r < DK; ++r) S[r * WG + lid] *= exp(glast);
    for (uint m = 0; m < n; ++m) {
      const uint bt = bt0 + m, km = k_at(bt, kh);
      const float f = exp(glast - bg_ld((bt * p.nv + h) * 2 + 1)) * Us[m * WG + lid];
      for (uint r = 0; r < DK; ++r) S[r * WG + lid] = fma(mixed_ld(km + r), f, S[r * WG + lid]);
    }
  }
  for (uint r = 0; r < DK; ++r) state_st(base + r * p.dv, S[r * WG + lid]);
}
#endif
