#version 450
#extension GL_GOOGLE_include_directive : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
// Fused attention for a few query rows against many keys (decode, T·G ≤ R
// rows per KV group): the same result, bindings and push constants as
// flash_attention.comp, shaped for a memory-bound stream of K and V.
//
// flash_attention.comp stages K through shared memory element by element and
// keeps most of its threads on score tiles that a decode step leaves empty.
// Here each subgroup walks its own keys: the lanes split one key's head_dim
// into 8-element chunks (one 16-byte load each at fp16), score every row of
// the workgroup against it (a lane-parallel dot product reduced across the
// subgroup), and keep their chunks of O for every row, so each byte of K and
// V is read once, in wide loads, with no barrier in the loop. The subgroups'
// online-softmax states are merged through shared memory at the end. Keys
// run over [split·chunk, ...) as in flash_attention.comp, whose partial
// results (and attention_combine.comp) this shares.
#include "common.glsl"
#include "storage.glsl"
#ifndef T
#define T F32
#endif

layout(constant_id = 1) const uint R = 8;          // rows per workgroup
layout(constant_id = 2) const uint KB = 4;         // keys per step of a subgroup
layout(constant_id = 3) const uint HEAD_DIM = 128; // Dh, a multiple of 8
layout(constant_id = 4) const uint MIN_SG = 32;    // the smallest subgroup the device may run

VEC8_RO(0, q, T)
VEC8_RO(1, k, T)
VEC8_RO(2, v, T)
#include "flash_common.glsl"

const uint CHUNKS = HEAD_DIM / 8;                 // 8-element chunks per row
const uint CPL = (CHUNKS + MIN_SG - 1) / MIN_SG;  // chunks per lane
const uint NSG = (WG + MIN_SG - 1) / MIN_SG;      // most subgroups a workgroup can hold
// The rows' merged O, as lo/hi vec4 pairs per chunk.
shared vec4 rows_s[R * CHUNKS * 2];
shared float m_sh[NSG * R], l_sh[NSG * R];
shared float mfin_s[R], lfin_s[R];

void main() {
  const uint G = p.heads / p.kv_heads;
  const uint kvh = gl_WorkGroupID.y;
  const uint b = gl_WorkGroupID.z / p.splits, split = gl_WorkGroupID.z % p.splits;
  const uint row0 = gl_WorkGroupID.x * R;
  const uint rows_total = p.tokens * G;
  const uint tid = gl_LocalInvocationID.x;
  const uint sg = gl_SubgroupID, nsg = gl_NumSubgroups;
  const uint lane = gl_SubgroupInvocationID, SG = gl_SubgroupSize;
  const float NEG_INF = -1.0 / 0.0;

  uint key_begin = split * p.chunk, key_end = min(p.keys, key_begin + p.chunk);
  uint row_pos[R];  // the last key each row may see (causal), as past + t
  [[unroll]] for (uint r = 0; r < R; ++r) row_pos[r] = p.past + min(row0 + r, rows_total - 1) / G;
  if (p.causal != 0) key_end = min(key_end, row_pos[R - 1] + 1);
  const uint kv_base = (b * p.kv_heads + kvh) * p.kv_stride * CHUNKS;  // in chunks

  // Row r is query head kvh·G + (row0 + r) % G of token (row0 + r) / G; each
  // lane holds its chunks of every row's q and O.
  vec4 qr[R][CPL * 2], acc[R][CPL * 2];
  float m[R], l[R];
  [[unroll]] for (uint r = 0; r < R; ++r) {
    m[r] = NEG_INF;
    l[r] = 0.0;
    const uint row = min(row0 + r, rows_total - 1), h = kvh * G + row % G, t = row / G;
    [[unroll]] for (uint c = 0; c < CPL; ++c) {
      const uint ch = lane + c * SG;
      acc[r][2 * c] = acc[r][2 * c + 1] = qr[r][2 * c] = qr[r][2 * c + 1] = vec4(0.0);
      if (ch < CHUNKS) q_ld8(((b * p.heads + h) * p.tokens + t) * CHUNKS + ch, qr[r][2 * c], qr[r][2 * c + 1]);
    }
  }

  for (uint kb = key_begin + sg * KB; kb < key_end; kb += nsg * KB) {
    // KB keys and their values: every load first, so they are in flight together.
    vec4 kv[KB][CPL * 2], vv[KB][CPL * 2];
    [[unroll]] for (uint j = 0; j < KB; ++j)
      [[unroll]] for (uint c = 0; c < CPL; ++c) {
        const uint ch = lane + c * SG;
        kv[j][2 * c] = kv[j][2 * c + 1] = vv[j][2 * c] = vv[j][2 * c + 1] = vec4(0.0);
        if (ch < CHUNKS && kb + j < key_end) {
          k_ld8(kv_base + (kb + j) * CHUNKS + ch, kv[j][2 * c], kv[j][2 * c + 1]);
          v_ld8(kv_base + (kb + j) * CHUNKS + ch, vv[j][2 * c], vv[j][2 * c + 1]);
        }
      }
    float s[KB][R];
    [[unroll]] for (uint j = 0; j < KB; ++j)
      [[unroll]] for (uint r = 0; r < R; ++r) {
        float part = 0.0;
        [[unroll]] for (uint c = 0; c < CPL * 2; ++c) part += dot(qr[r][c], kv[j][c]);
        s[j][r] = subgroupAdd(part);
      }
    // Online softmax per row over these keys; masked scores are −inf.
    [[unroll]] for (uint r = 0; r < R; ++r) {
      float mx = m[r];
      [[unroll]] for (uint j = 0; j < KB; ++j) {
        const uint key = kb + j;
        float sc = NEG_INF;
        if (key < key_end && (p.causal == 0 || key <= row_pos[r])) {
          sc = s[j][r] * p.scale;
          if (p.has_mask != 0) sc += mask_ld((b * p.tokens + row_pos[r] - p.past) * p.keys + key);
        }
        s[j][r] = sc;
        mx = max(mx, sc);
      }
      const bool empty = isinf(mx) && mx < 0.0;  // every key so far masked
      const float alpha = empty ? 1.0 : exp(m[r] - mx);
      float sum = 0.0;
      [[unroll]] for (uint j = 0; j < KB; ++j) {
        s[j][r] = empty ? 0.0 : exp(s[j][r] - mx);
        sum += s[j][r];
      }
      m[r] = mx;
      l[r] = l[r] * alpha + sum;
      [[unroll]] for (uint c = 0; c < CPL * 2; ++c) acc[r][c] *= alpha;
    }
    // O += P·V over the same keys.
    [[unroll]] for (uint j = 0; j < KB; ++j)
      [[unroll]] for (uint r = 0; r < R; ++r)
        [[unroll]] for (uint c = 0; c < CPL * 2; ++c) acc[r][c] += s[j][r] * vv[j][c];
  }

  // Merge the subgroups: O = Σ O_sg·exp(m_sg − M), l = Σ l_sg·exp(m_sg − M).
  if (lane == 0)
    [[unroll]] for (uint r = 0; r < R; ++r) {
      m_sh[sg * R + r] = m[r];
      l_sh[sg * R + r] = l[r];
    }
  for (uint e = tid; e < R * CHUNKS * 2; e += WG) rows_s[e] = vec4(0.0);
  barrier();
  if (tid < R) {
    float mx = NEG_INF, sum = 0.0;
    for (uint s = 0; s < nsg; ++s) mx = max(mx, m_sh[s * R + tid]);
    if (!(isinf(mx) && mx < 0.0))
      for (uint s = 0; s < nsg; ++s) sum += l_sh[s * R + tid] * exp(m_sh[s * R + tid] - mx);
    mfin_s[tid] = mx;
    lfin_s[tid] = sum;
  }
  for (uint turn = 0; turn < nsg; ++turn) {
    if (sg == turn)
      [[unroll]] for (uint r = 0; r < R; ++r) {
        float mx = NEG_INF;
        for (uint s = 0; s < nsg; ++s) mx = max(mx, m_sh[s * R + r]);
        const float f = isinf(m[r]) ? 0.0 : exp(m[r] - mx);  // an empty subgroup adds nothing
        [[unroll]] for (uint c = 0; c < CPL; ++c) {
          const uint ch = lane + c * SG;
          if (ch >= CHUNKS) continue;
          rows_s[2 * (r * CHUNKS + ch)] += acc[r][2 * c] * f;
          rows_s[2 * (r * CHUNKS + ch) + 1] += acc[r][2 * c + 1] * f;
        }
      }
    barrier();
  }

  for (uint e = tid; e < R * HEAD_DIM; e += WG) {
    const uint r = e / HEAD_DIM, d = e % HEAD_DIM, row = row0 + r;
    if (row >= rows_total) continue;
    const uint h = kvh * G + row % G, t = row / G;
    const float val = rows_s[e / 4][e % 4];
    flash_store(b, t, h, d, split, val, mfin_s[r], lfin_s[r]);
  }
}
