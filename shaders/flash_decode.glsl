// flash_decode.comp and flash_decode_prep.comp (which defines PREPARE): the
// kernel, after its includer's #version and extensions.
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
// Fused attention for a few query rows against many keys (decode, T·G ≤ R
// rows per KV group): the same result, bindings and push constants as
// flash_attention.comp, shaped for a memory-bound stream of K and V.
//
// Each subgroup walks its own blocks of SG keys (one per lane) and switches
// the lanes' roles between the two products, so neither needs a cross-lane
// reduction per key:
// - scores: lane i scores key i against every row, reading its key's row of
//   K in 16-byte loads and the rows of q (pre-scaled, in shared memory) as
//   broadcasts;
// - softmax: one subgroupMax per row and block;
// - O += P·V: the lanes split head_dim into 8-element chunks (a coalesced row
//   of V per key) and read the block's probabilities back from shared memory
//   as broadcasts.
// An earlier version split head_dim across the lanes for the scores too: a
// subgroupAdd per row and key (5 dependent shuffles each) and every lane
// repeating the softmax. On the H100 it took 169 µs for one token over 32k
// keys, whatever the split count, 78 µs of it in those reductions; this one
// takes 73 µs. Two or four keys per lane, workgroups of 64 or 256 and 8 or 16
// chunks in flight were all slower there (BENCHMARKS.md).
// The subgroups' online-softmax states are merged through shared memory at
// the end. Keys run over [split·chunk, ...) as in flash_attention.comp, whose
// partial results (and attention_combine.comp) this shares.
//
// With split keys and p.merge, the last workgroup of a row tile to finish
// (counted in binding 7) merges the splits' partial results itself, as
// attention_combine.comp would: a decode step then has no combine pass, nor
// the barrier before it (H200: 6.4 µs a combine, 2026-11-28). Its counter is
// left at 0 for the next dispatch.
//
// PREPARE (one row tile per KV group, no q/k/v gate): qkv_prepare.comp's work
// folded in, so that a decode step has no qkv_prepare pass nor the barrier
// after it (H200: 6.5 µs a layer, 2026-11-28). Binding 0 holds the
// projections instead of q: every workgroup norms and rotates its q rows into
// shared memory itself, and the workgroup whose split holds the step's new
// positions norms and rotates their keys, writes keys and values to the
// caches (bindings 1 and 2, coherent) and reads them back after a barrier:
// each new position is written and read by that one workgroup.
#include "common.glsl"
#include "storage.glsl"
#ifndef T
#define T F32
#endif

layout(constant_id = 1) const uint R = 8;          // rows per workgroup
layout(constant_id = 2) const uint HEAD_DIM = 128; // Dh, a multiple of 8
layout(constant_id = 3) const uint MIN_SG = 32;    // the smallest subgroup the device may run
const uint UNROLL = 4;  // loads issued together (8 and 16 were slower on the H100)

#ifdef PREPARE
RO(0, x, T)
VEC8_COHERENT(1, k, T)
VEC8_COHERENT(2, v, T)
RO(8, qw, F32)
RO(9, kw, F32)
RO(10, table, F32)
#else
VEC8_RO(0, q, T)
VEC8_RO(1, k, T)
VEC8_RO(2, v, T)
#endif
#define PARTIAL_COHERENT
#include "flash_common.glsl"
layout(std430, binding = 7) coherent buffer Counters { uint counters[]; };  // per (b, KV head, row tile)

const uint CHUNKS = HEAD_DIM / 8;                 // 8-element chunks per row
const uint CPL = (CHUNKS + MIN_SG - 1) / MIN_SG;  // chunks per lane in P·V
const uint NSG = (WG + MIN_SG - 1) / MIN_SG;      // most subgroups a workgroup can hold
// The rows of q (scaled) while keys are scored, then the rows' merged O; as
// lo/hi vec4 pairs per chunk.
shared vec4 rows_s[R * CHUNKS * 2];
shared float p_s[WG * R];  // a block's probabilities, [lane of the key][row]
shared float m_sh[NSG * R], l_sh[NSG * R];
shared float mfin_s[R], lfin_s[R];
shared bool last_s;  // this workgroup is its row tile's last: it merges the splits
const uint DPL = (HEAD_DIM + MIN_SG - 1) / MIN_SG;  // dims per lane in that merge

#ifdef PREPARE
shared float kv_s[2 * HEAD_DIM];  // a new position's key, then its value
float q_get(uint r, uint d) { return rows_s[(r * HEAD_DIM + d) / 4][d % 4]; }
void q_set(uint r, uint d, float val) { rows_s[(r * HEAD_DIM + d) / 4][d % 4] = val; }
// Element d of a q or k row, normed (inv_rms: its 1/rms) and weighted; as it
// is without a norm.
float normed(bool is_q, uint d, float xv, float inv_rms) {
  if (p.norm == 0) return xv;
  const float w = is_q ? qw_ld(d) : kw_ld(d);
  return xv * inv_rms * (p.norm == 2 ? 1.0 + w : w);
}
// RoPE's pair i: dims (2i, 2i + 1) or (i, i + rotary/2).
uvec2 rope_pair(uint i) {
  return p.interleaved != 0 ? uvec2(2 * i, 2 * i + 1) : uvec2(i, i + p.rotary / 2);
}
// The pair x rotated to token t's position: cos/sin from the host's table.
vec2 rotated(uint t, uint i, vec2 x) {
  const uint half_r = p.rotary / 2;
  const float c = table_ld(t * half_r + i), s = table_ld((p.tokens + t) * half_r + i);
  return vec2(x.x * c - x.y * s, x.y * c + x.x * s);
}

// The workgroup's q rows (row r: query head group_head(kvh, (row0 + r) % G),
// token (row0 + r) / G) from the projections, normed, rotated and times
// p.scale, into rows_s; the statistics in fp32, as qkv_prepare.comp's (whose
// q is rounded to the storage type on its way here; this one is not).
void prepare_q(uint b, uint kvh, uint row0, uint rows_total, uint G) {
  const uint tid = gl_LocalInvocationID.x, sg = gl_SubgroupID, nsg = gl_NumSubgroups;
  const uint lane = gl_SubgroupInvocationID, SG = gl_SubgroupSize;
  for (uint e = tid; e < R * HEAD_DIM; e += WG) {
    const uint r = e / HEAD_DIM, d = e % HEAD_DIM;
    const uint row = min(row0 + r, rows_total - 1);
    q_set(r, d, x_ld(view_offset(p.q_view, p.tokens, b * p.tokens + row / G, group_head(kvh, row % G, G), d)));
  }
  barrier();
  if (p.norm != 0) {  // 1/rms of each row into mfin_s, which the end sets again
    for (uint r = sg; r < R; r += nsg) {
      float ss = 0.0;
      for (uint d = lane; d < HEAD_DIM; d += SG) ss = fma(q_get(r, d), q_get(r, d), ss);
      ss = subgroupAdd(ss);
      if (subgroupElect()) mfin_s[r] = 1.0 / sqrt(ss / float(HEAD_DIM) + p.eps);
    }
    barrier();
  }
  // Each thread owns its pair's two elements (or its one past `rotary`): in place.
  const uint half_r = p.rotary / 2, rest = HEAD_DIM - 2 * half_r;
  for (uint e = tid; e < R * half_r; e += WG) {
    const uint r = e / half_r, i = e % half_r;
    const uint t = min(row0 + r, rows_total - 1) / G;
    const uvec2 d = rope_pair(i);
    const float inv_rms = mfin_s[r];
    const vec2 x =
        rotated(t, i, vec2(normed(true, d.x, q_get(r, d.x), inv_rms), normed(true, d.y, q_get(r, d.y), inv_rms)));
    q_set(r, d.x, x.x * p.scale);
    q_set(r, d.y, x.y * p.scale);
  }
  for (uint e = tid; e < R * rest; e += WG) {
    const uint r = e / rest, d = 2 * half_r + e % rest;
    q_set(r, d, normed(true, d, q_get(r, d), mfin_s[r]) * p.scale);
  }
}

// The step's new positions past + t that this workgroup's split holds: their
// keys normed and rotated, and their values, into the caches, visible to the
// workgroup's own loads of k and v afterwards.
void prepare_new_keys(uint b, uint kvh, uint split, uint kv_base) {
  const uint tid = gl_LocalInvocationID.x, lane = gl_SubgroupInvocationID, SG = gl_SubgroupSize;
  const uint half_r = p.rotary / 2, begin = split * p.chunk;
  for (uint t = 0; t < p.tokens; ++t) {
    const uint pos = p.past + t;
    if (pos < begin || pos >= begin + p.chunk) continue;
    const uint bt = b * p.tokens + t;
    for (uint d = tid; d < HEAD_DIM; d += WG) {
      kv_s[d] = x_ld(view_offset(p.k_view, p.tokens, bt, kvh, d));
      kv_s[HEAD_DIM + d] = x_ld(view_offset(p.v_view, p.tokens, bt, kvh, d));
    }
    barrier();
    float inv_rms = 1.0;  // each subgroup sums the squares itself: no shared result to wait for
    if (p.norm != 0) {
      float ss = 0.0;
      for (uint d = lane; d < HEAD_DIM; d += SG) ss = fma(kv_s[d], kv_s[d], ss);
      inv_rms = 1.0 / sqrt(subgroupAdd(ss) / float(HEAD_DIM) + p.eps);
    }
    barrier();  // every subgroup has read the raw key
    for (uint i = tid; i < half_r; i += WG) {
      const uvec2 d = rope_pair(i);
      const vec2 x =
          rotated(t, i, vec2(normed(false, d.x, kv_s[d.x], inv_rms), normed(false, d.y, kv_s[d.y], inv_rms)));
      kv_s[d.x] = x.x;
      kv_s[d.y] = x.y;
    }
    for (uint d = 2 * half_r + tid; d < HEAD_DIM; d += WG) kv_s[d] = normed(false, d, kv_s[d], inv_rms);
    barrier();
    for (uint e = tid; e < 2 * CHUNKS; e += WG) {
      const uint ch = e % CHUNKS, o = e / CHUNKS * HEAD_DIM + 8 * ch;
      const vec4 lo = vec4(kv_s[o], kv_s[o + 1], kv_s[o + 2], kv_s[o + 3]);
      const vec4 hi = vec4(kv_s[o + 4], kv_s[o + 5], kv_s[o + 6], kv_s[o + 7]);
      if (e < CHUNKS) k_st8(kv_base + pos * CHUNKS + ch, lo, hi);
      else v_st8(kv_base + pos * CHUNKS + ch, lo, hi);
    }
    memoryBarrierBuffer();
    barrier();  // the caches are read after; kv_s is rewritten for the next position
  }
}
#endif

void main() {
  LOAD_PARAMS;
  const uint G = p.heads / p.kv_heads;
  const uint kvh = gl_WorkGroupID.y;
  const uint b = gl_WorkGroupID.z / p.splits, split = gl_WorkGroupID.z % p.splits;
  const uint row0 = gl_WorkGroupID.x * R;
  const uint rows_total = p.tokens * G;
  const uint tid = gl_LocalInvocationID.x;
  const uint sg = gl_SubgroupID, nsg = gl_NumSubgroups;
  const uint lane = gl_SubgroupInvocationID, SG = gl_SubgroupSize;
  const uint p_base = (sg * SG) * R;  // this subgroup's block of p_s
  const float NEG_INF = -1.0 / 0.0;

  uint key_begin = split * p.chunk, key_end = min(p.keys, key_begin + p.chunk);
  uint row_pos[R];  // the last key each row may see (causal), as past + t
  [[unroll]] for (uint r = 0; r < R; ++r) row_pos[r] = p.past + min(row0 + r, rows_total - 1) / G;
  if (p.causal != 0) key_end = min(key_end, row_pos[R - 1] + 1);
  const uint kv_base = (b * p.kv_heads + kvh) * p.kv_stride * CHUNKS;  // in chunks

  // Row r is query head (row0 + r) % G of the group (group_head), token (row0 + r) / G.
#ifdef PREPARE
  prepare_q(b, kvh, row0, rows_total, G);
  prepare_new_keys(b, kvh, split, kv_base);
#else
  for (uint e = tid; e < R * CHUNKS; e += WG) {
    const uint r = e / CHUNKS, ch = e % CHUNKS;
    const uint row = min(row0 + r, rows_total - 1), h = group_head(kvh, row % G, G), t = row / G;
    vec4 lo, hi;
    q_ld8(((b * p.heads + h) * p.tokens + t) * CHUNKS + ch, lo, hi);
    rows_s[2 * e] = lo * p.scale;
    rows_s[2 * e + 1] = hi * p.scale;
  }
#endif
  barrier();

  vec4 acc[R][CPL * 2];
  float m[R], l[R];  // l: this lane's share of the row sums
  [[unroll]] for (uint r = 0; r < R; ++r) {
    m[r] = NEG_INF;
    l[r] = 0.0;
    [[unroll]] for (uint c = 0; c < CPL * 2; ++c) acc[r][c] = vec4(0.0);
  }

  for (uint kb = key_begin + sg * SG; kb < key_end; kb += nsg * SG) {
    const uint key = kb + lane;
    const bool live = key < key_end;
    float s[R];
    [[unroll]] for (uint r = 0; r < R; ++r) s[r] = 0.0;
    if (live) {
      // UNROLL chunks' loads in flight together: one at a time, a subgroup
      // waits out a memory latency per chunk (the H100 moved 0.7 TB/s so).
      const uint kbase = kv_base + key * CHUNKS;
      for (uint c0 = 0; c0 < CHUNKS; c0 += UNROLL) {
        vec4 lo[UNROLL], hi[UNROLL];
        [[unroll]] for (uint u = 0; u < UNROLL; ++u)
          if (c0 + u < CHUNKS) k_ld8(kbase + c0 + u, lo[u], hi[u]);
        [[unroll]] for (uint u = 0; u < UNROLL; ++u) {
          if (c0 + u >= CHUNKS) break;
          const uint ch = c0 + u;
          [[unroll]] for (uint r = 0; r < R; ++r)
            s[r] += dot(rows_s[2 * (r * CHUNKS + ch)], lo[u]) + dot(rows_s[2 * (r * CHUNKS + ch) + 1], hi[u]);
        }
      }
    }
    // Online softmax per row over the block; masked scores are −inf.
    [[unroll]] for (uint r = 0; r < R; ++r) {
      float sc = NEG_INF;
      if (live && (p.causal == 0 || key <= row_pos[r])) {
        sc = s[r];
        if (p.has_mask != 0) sc += mask_ld((b * p.tokens + row_pos[r] - p.past) * p.mask_ld + key);
      }
      const float mx = max(m[r], subgroupMax(sc));
      const bool empty = isinf(mx) && mx < 0.0;  // every key so far masked
      const float alpha = empty ? 1.0 : exp(m[r] - mx);
      const float pr = empty ? 0.0 : exp(sc - mx);
      m[r] = mx;
      l[r] = l[r] * alpha + pr;
      p_s[p_base + lane * R + r] = pr;
      [[unroll]] for (uint c = 0; c < CPL * 2; ++c) acc[r][c] *= alpha;
    }
    subgroupMemoryBarrierShared();
    subgroupBarrier();
    // O += P·V over the block's keys.
    const uint n = min(SG, key_end - kb);
    for (uint j0 = 0; j0 < n; j0 += UNROLL) {
      vec4 lo[UNROLL][CPL], hi[UNROLL][CPL];
      [[unroll]] for (uint u = 0; u < UNROLL; ++u)
        [[unroll]] for (uint c = 0; c < CPL; ++c) {
          const uint ch = lane + c * SG;
          lo[u][c] = hi[u][c] = vec4(0.0);
          if (j0 + u < n && ch < CHUNKS) v_ld8(kv_base + (kb + j0 + u) * CHUNKS + ch, lo[u][c], hi[u][c]);
        }
      [[unroll]] for (uint u = 0; u < UNROLL; ++u) {
        if (j0 + u >= n) break;
        const uint j = j0 + u;
        [[unroll]] for (uint r = 0; r < R; ++r) {
          const float pj = p_s[p_base + j * R + r];
          [[unroll]] for (uint c = 0; c < CPL; ++c) {
            acc[r][2 * c] += pj * lo[u][c];
            acc[r][2 * c + 1] += pj * hi[u][c];
          }
        }
      }
    }
    // p_s is rewritten by the next block.
    subgroupBarrier();
  }

  // Merge the subgroups: O = Σ O_sg·exp(m_sg − M), l = Σ l_sg·exp(m_sg − M).
  [[unroll]] for (uint r = 0; r < R; ++r) l[r] = subgroupAdd(l[r]);
  if (lane == 0)
    [[unroll]] for (uint r = 0; r < R; ++r) {
      m_sh[sg * R + r] = m[r];
      l_sh[sg * R + r] = l[r];
    }
  barrier();  // every subgroup is done with q
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
    const uint h = group_head(kvh, row % G, G), t = row / G;
    const float val = rows_s[e / 4][e % 4];
    flash_store(b, t, h, d, split, val, mfin_s[r], lfin_s[r]);
  }
  if (p.merge == 0) return;

  memoryBarrierBuffer();  // this workgroup's partial results, before its count
  barrier();
  const uint counter = (b * p.kv_heads + kvh) * gl_NumWorkGroups.x + gl_WorkGroupID.x;
  if (tid == 0) last_s = atomicAdd(counters[counter], 1u) == p.splits - 1u;
  barrier();
  if (!last_s) return;
  memoryBarrierBuffer();
  // A subgroup per row: O = Σ_s O_s·exp(m_s − M) / Σ_s l_s·exp(m_s − M),
  // M = max_s m_s. Its lanes take SG splits at a time for the weights (each
  // lane one split's m_s and l_s, the weights then shared through p_s, free
  // since the last block), then every dim over those splits, MU splits' loads
  // in flight together: a lane walking the splits one load at a time waits out
  // a memory latency per split, and at Qwen3-Next's 128 splits over 32k keys
  // that serial chain alone would outlast the combine pass it replaces.
  const uint MU = 4;
  for (uint r = sg; r < R; r += nsg) {
    const uint row = row0 + r;
    if (row >= rows_total) break;
    const uint h = group_head(kvh, row % G, G), t = row / G;
    float mx = NEG_INF;
    for (uint s = lane; s < p.splits; s += SG) mx = max(mx, partial_ld(partial_base(b, t, h, s) + HEAD_DIM));
    mx = subgroupMax(mx);
    const bool empty = isinf(mx) && mx < 0.0;  // every key masked: the output is 0
    float num[DPL];
    [[unroll]] for (uint i = 0; i < DPL; ++i) num[i] = 0.0;
    float den = 0.0;
    for (uint s0 = 0; s0 < p.splits; s0 += SG) {
      float w = 0.0;  // 0 for an empty split and for lanes past the last split
      if (s0 + lane < p.splits && !empty) {
        const uint base = partial_base(b, t, h, s0 + lane);
        w = exp(partial_ld(base + HEAD_DIM) - mx);
        den += partial_ld(base + HEAD_DIM + 1) * w;
      }
      p_s[p_base + lane] = w;
      subgroupMemoryBarrierShared();
      subgroupBarrier();
      const uint n = min(SG, p.splits - s0);
      for (uint j0 = 0; j0 < n; j0 += MU) {
        float o[MU][DPL];
        [[unroll]] for (uint u = 0; u < MU; ++u)
          [[unroll]] for (uint i = 0; i < DPL; ++i)
            o[u][i] = j0 + u < n && lane + i * SG < HEAD_DIM
                          ? partial_ld(partial_base(b, t, h, s0 + j0 + u) + lane + i * SG)
                          : 0.0;
        [[unroll]] for (uint u = 0; u < MU; ++u) {
          const float wu = j0 + u < n ? p_s[p_base + j0 + u] : 0.0;
          [[unroll]] for (uint i = 0; i < DPL; ++i) num[i] += o[u][i] * wu;
        }
      }
      subgroupBarrier();  // p_s is rewritten by the next round
    }
    den = subgroupAdd(den);
    [[unroll]] for (uint i = 0; i < DPL; ++i)
      if (lane + i * SG < HEAD_DIM) flash_out(b, t, h, lane + i * SG, den > 0.0 ? num[i] / den : 0.0);
  }
  if (tid == 0) counters[counter] = 0u;
}
