#version 450
#extension GL_GOOGLE_include_directive : require
// Variants (the build compiles one SPIR-V module per line: name, then defines):
// variant: flash_attention
// variant: flash_attention_f16 T=F16
// variant: flash_attention_bf16 T=BF16
// Fused attention, FlashAttention-2 style: softmax(scale·q·kᵀ + mask)·v with
// an online softmax over blocks of BC keys, never materialising the T×S
// scores, and the output gate applied before the single write of O.
//
// A workgroup takes R rows = (query head, token) pairs of ONE KV group, so the
// G = H/KV query heads that share a KV head share every K block it loads.
// Rows are ordered token-major: row r → query head r % G of the group, token t0 + r / G.
// Keys run over [split·chunk, min(S, (split+1)·chunk)); with several splits
// (flash-decoding) each workgroup writes its unnormalised O, running max and
// sum to `partial` and attention_combine.comp finishes the rows.
//
// Storage: q, k, v, out and the gate rows are T; the mask is fp32.
#include "common.glsl"
#include "storage.glsl"
#ifndef T
#define T F32
#endif

layout(constant_id = 1) const uint R = 32;         // rows per workgroup
layout(constant_id = 2) const uint BC = 64;        // keys per block
layout(constant_id = 3) const uint HEAD_DIM = 128; // Dh

RO(0, q, T)
RO(1, k, T)
RO(2, v, T)
#include "flash_common.glsl"

// Scores are accumulated over chunks of DC dims of q and k staged in shared
// memory (rows padded by one float: no bank conflicts), each thread holding a
// TROW × TCOL register tile of the R × BC block, rows and keys interleaved.
const uint DC = HEAD_DIM < 64 ? HEAD_DIM : 64;
const uint LDC = DC + 1;
const uint TCOL = 4;
const uint TC_THREADS = BC / TCOL;
const uint TR_THREADS = WG / TC_THREADS;
const uint TROW = R / TR_THREADS;  // the host keeps R·BC ≥ 4·WG
shared float q_c[R * LDC];
shared float k_c[BC * LDC];
shared float s_s[R * BC];
shared float alpha_s[R];
shared float m_s[R];
shared float l_s[R];

// Each thread owns O[r][d] for d ≡ dcol (mod CT) and r ≡ rgrp (mod RT), so a
// value V[c][d] it loads serves all of its rows.
const uint CT = WG < HEAD_DIM ? WG : HEAD_DIM;  // column threads
const uint RT = WG / CT;                        // row groups
const uint D_PER = (HEAD_DIM + CT - 1) / CT;
const uint R_PER = (R + RT - 1) / RT;

void main() {
  LOAD_PARAMS;
  const uint G = p.heads / p.kv_heads;
  const uint kvh = gl_WorkGroupID.y;
  const uint b = gl_WorkGroupID.z / p.splits, split = gl_WorkGroupID.z % p.splits;
  const uint row0 = gl_WorkGroupID.x * R;
  const uint rows_total = p.tokens * G;
  const uint tid = gl_LocalInvocationID.x;
  const uint S = p.keys;

  if (tid < R) {
    m_s[tid] = -1.0 / 0.0;
    l_s[tid] = 0.0;
  }
  const uint dcol = tid % CT, rgrp = tid / CT;
  float acc[R_PER][D_PER];
  [[unroll]] for (uint i = 0; i < R_PER; ++i)
    [[unroll]] for (uint j = 0; j < D_PER; ++j) acc[i][j] = 0.0;

  // Keys this workgroup needs: its split, and under the causal mask no key
  // beyond the last row's position (past + t).
  uint key_begin = split * p.chunk, key_end = min(S, key_begin + p.chunk);
  if (p.causal != 0) {
    const uint last_row = min(row0 + R, rows_total) - 1;
    key_end = min(key_end, p.past + last_row / G + 1);
  }
  const uint kv_base = (b * p.kv_heads + kvh) * p.kv_stride * HEAD_DIM;
  barrier();

  const uint tr = tid / TC_THREADS, tc = tid % TC_THREADS;
  for (uint kb = key_begin; kb < key_end; kb += BC) {
    float sacc[TROW][TCOL];
    [[unroll]] for (uint i = 0; i < TROW; ++i)
      [[unroll]] for (uint j = 0; j < TCOL; ++j) sacc[i][j] = 0.0;
    for (uint d0 = 0; d0 < HEAD_DIM; d0 += DC) {
      barrier();  // the previous chunk (or block) is consumed
      for (uint e = tid; e < R * DC; e += WG) {
        const uint r = e / DC, d = d0 + e % DC, row = row0 + r;
        float val = 0.0;
        if (row < rows_total && d < HEAD_DIM) {
          const uint h = group_head(kvh, row % G, G), t = row / G;
          val = q_ld(((b * p.heads + h) * p.tokens + t) * HEAD_DIM + d);
        }
        q_c[r * LDC + e % DC] = val;
      }
      for (uint e = tid; e < BC * DC; e += WG) {
        const uint c = e / DC, d = d0 + e % DC;
        k_c[c * LDC + e % DC] = kb + c < key_end && d < HEAD_DIM ? k_ld(kv_base + (kb + c) * HEAD_DIM + d) : 0.0;
      }
      barrier();
      for (uint dd = 0; dd < DC; ++dd) {
        float qa[TROW], kc[TCOL];
        [[unroll]] for (uint i = 0; i < TROW; ++i) qa[i] = q_c[(tr + i * TR_THREADS) * LDC + dd];
        [[unroll]] for (uint j = 0; j < TCOL; ++j) kc[j] = k_c[(tc + j * TC_THREADS) * LDC + dd];
        [[unroll]] for (uint i = 0; i < TROW; ++i)
          [[unroll]] for (uint j = 0; j < TCOL; ++j) sacc[i][j] = fma(qa[i], kc[j], sacc[i][j]);
      }
    }
    // Scores of the block, masked entries −inf.
    [[unroll]] for (uint i = 0; i < TROW; ++i)
      [[unroll]] for (uint j = 0; j < TCOL; ++j) {
        const uint r = tr + i * TR_THREADS, c = tc + j * TC_THREADS, row = row0 + r, key = kb + c;
        float sc = -1.0 / 0.0;
        if (row < rows_total && key < key_end) {
          const uint t = row / G;
          if (p.causal == 0 || key <= p.past + t) {
            sc = sacc[i][j] * p.scale;
            if (p.has_mask != 0) sc += mask_ld((b * p.tokens + t) * p.mask_ld + key);
          }
        }
        s_s[r * BC + c] = sc;
      }
    barrier();
    // Online softmax: new running max, rescale factor, probabilities.
    if (tid < R) {
      float mx = m_s[tid];
      for (uint c = 0; c < BC; ++c) mx = max(mx, s_s[tid * BC + c]);
      const bool empty = isinf(mx) && mx < 0.0;  // every key so far masked
      const float alpha = empty ? 1.0 : exp(m_s[tid] - mx);
      float sum = 0.0;
      for (uint c = 0; c < BC; ++c) {
        const float pr = empty ? 0.0 : exp(s_s[tid * BC + c] - mx);
        s_s[tid * BC + c] = pr;
        sum += pr;
      }
      m_s[tid] = mx;
      l_s[tid] = l_s[tid] * alpha + sum;
      alpha_s[tid] = alpha;
    }
    barrier();
    // O = O·alpha + P·V for the elements this thread owns.
    if (rgrp < RT) {
      [[unroll]] for (uint i = 0; i < R_PER; ++i) {
        const uint r = min(rgrp + i * RT, R - 1);
        [[unroll]] for (uint j = 0; j < D_PER; ++j) acc[i][j] *= alpha_s[r];
      }
      for (uint c = 0; c < BC && kb + c < key_end; ++c) {
        float vv[D_PER];
        [[unroll]] for (uint j = 0; j < D_PER; ++j) {
          const uint d = min(dcol + j * CT, HEAD_DIM - 1);
          vv[j] = v_ld(kv_base + (kb + c) * HEAD_DIM + d);
        }
        [[unroll]] for (uint i = 0; i < R_PER; ++i) {
          const float pr = s_s[min(rgrp + i * RT, R - 1) * BC + c];
          [[unroll]] for (uint j = 0; j < D_PER; ++j) acc[i][j] = fma(pr, vv[j], acc[i][j]);
        }
      }
    }
    barrier();
  }

  if (rgrp >= RT) return;
  [[unroll]] for (uint i = 0; i < R_PER; ++i)
  [[unroll]] for (uint j = 0; j < D_PER; ++j) {
    const uint r = rgrp + i * RT, d = dcol + j * CT, row = row0 + r;
    if (r >= R || d >= HEAD_DIM || row >= rows_total) continue;
    const uint h = group_head(kvh, row % G, G), t = row / G;
    flash_store(b, t, h, d, split, acc[i][j], m_s[r], l_s[r]);
  }
}
