#version 450
#extension GL_GOOGLE_include_directive : require
// Variants (the build compiles one SPIR-V module per line: name, then defines):
// variant: flash_coopmat
// variant: flash_coopmat_emulated EMULATE EMU_SG=8
// Fused attention on tensor cores (fp16 storage): the result, bindings and
// push constants of flash_attention.comp, with q·kᵀ and P·V as 16×16×16
// cooperative-matrix products (fp16 inputs, fp32 accumulation).
//
// A workgroup takes BR = 16·NS rows (query head, token pairs of one KV group,
// token-major as in flash_attention.comp); subgroup s owns rows 16s..16s+15
// as a strip: its scores, its online softmax and its O fragments (HEAD_DIM/16
// accumulators), so the softmax needs no workgroup barrier. Per block of BC
// keys: K into shared memory, S = q·kᵀ per strip (stored to a per-strip
// scratch), the strip's softmax by its lanes (P as fp16), O rescaled
// element-wise, V into the same shared buffer, O += P·V.
//
// The tile is specialization constants (gpu::FlashTile, swept by `vkgate
// bench --op attention --tiles`): the strips (the workgroup size), BC and
// ACC16, fp16 partial sums added into the fp32 accumulators: bit 0 P·V's per
// block, bit 1 also q·k's per 64 dims. On the H100 the fp32-accumulating
// products set the pace of matmul_staged.comp, whose fp16 partial sums ran
// 1.5–2.6× faster (BENCHMARKS.md, 2026-11-27), and this kernel ran at about
// the same TFLOP/s as that one's fp32 tiles.
//
// The softmax gives each row LPR lanes, each a strided share of the block's
// keys, so that every lane of a 32-lane subgroup works (16 rows); their max
// and sum meet by shuffles.
//
// O is rescaled in its fragments: a fragment's element→row mapping is not
// exposed, but it is the same for every fragment of a type, so a fragment
// loaded from a matrix of row indices tells each lane the row of each of its
// elements.
//
// EMULATE (coopmat.glsl) runs the products as scalar code on CPU drivers,
// rounding fp16 partial sums as tensor cores do, once per product.
#include "common.glsl"
#include "storage.glsl"
#include "coopmat.glsl"
#extension GL_KHR_shader_subgroup_shuffle : require
#define T F16  // gate and output (flash_common.glsl)

layout(constant_id = 1) const uint HEAD_DIM = 128;  // a multiple of 16
layout(constant_id = 2) const uint BC = 32;         // keys per block, a multiple of 16
layout(constant_id = 3) const uint ACC16 = 0;       // fp16 partial sums: 1 P·V, 3 P·V and q·k
const bool PV16 = (ACC16 & 1) != 0, QK16 = (ACC16 & 2) != 0;
const uint QK16_DIMS = 64;      // q·k's dims per fp16 partial sum
const uint NS = WG / SG;        // subgroups, one strip of 16 rows each
const uint BR = 16 * NS;        // rows per workgroup
const uint KF = BC / 16;        // score fragments per strip
const uint DF = HEAD_DIM / 16;  // O fragments per strip
const uint CH = HEAD_DIM / 8;   // 16-byte chunks per row
const uint LPR = 2;             // softmax lanes per row
const uint KPL = BC / LPR;      // ... and keys per lane
// Row strides in shared memory, padded by 16 bytes so that the 16 rows a
// fragment load reads start in different banks.
const uint LDQ = HEAD_DIM + 8;  // fp16 q and k/v rows
const uint LDS = BC + 4;        // fp32 scratch
const uint LDP = BC + 8;        // fp16 probabilities

layout(std430, binding = 0) readonly buffer QBuf { uvec4 q8[]; };
layout(std430, binding = 1) readonly buffer KBuf { uvec4 k8[]; };
layout(std430, binding = 2) readonly buffer VBuf { uvec4 v8[]; };
#include "flash_common.glsl"

shared float16_t q_s[BR * LDQ];
shared float16_t kv_s[BC * LDQ];
shared float s_s[NS * 16 * LDS];
shared float16_t p_s[NS * 16 * LDP];
shared float m_s[BR], l_s[BR], alpha_s[BR];

// c += q_s[a..] (16×16, rows LDQ apart) · kv_s[b..]ᵀ (16 keys × 16 dims);
// c += p_s[a..] (16 rows × 16 keys, rows LDP apart) · kv_s[b..] (16 keys × 16 dims).
// The _h forms accumulate into fp16 partial sums (AccH).
#ifdef EMULATE
void mma(inout Acc c, uint a, uint b, bool values, bool h) {
  ELEM_LOOP for (uint i = 0; i < ELEMS; ++i) {
    const uint r = emu_row(i), col = emu_col(i);
    float sum = 0.0;
    if (values) {
      [[unroll]] for (uint k = 0; k < 16; ++k) sum += float(p_s[a + r * LDP + k]) * float(kv_s[b + k * LDQ + col]);
    } else {
      [[unroll]] for (uint k = 0; k < 16; ++k) sum += float(q_s[a + r * LDQ + k]) * float(kv_s[b + col * LDQ + k]);
    }
    c.e[i] = h ? float(float16_t(c.e[i] + sum)) : c.e[i] + sum;
  }
}
#define mma_qk(c, a, b) mma(c, a, b, false, false)
#define mma_qk_h(c, a, b) mma(c, a, b, false, true)
#define mma_pv(c, a, b) mma(c, a, b, true, false)
#define mma_pv_h(c, a, b) mma(c, a, b, true, true)
#else
#define MMA_QK(name, C)                        \
  void name(inout C c, uint a, uint b) {       \
    FragH fa, fb;                              \
    coopMatLoadNV(fa, q_s, a, LDQ, false);     \
    coopMatLoadNV(fb, kv_s, b, LDQ, true);     \
    c = coopMatMulAddNV(fa, fb, c);            \
  }
#define MMA_PV(name, C)                        \
  void name(inout C c, uint a, uint b) {       \
    FragH fa, fb;                              \
    coopMatLoadNV(fa, p_s, a, LDP, false);     \
    coopMatLoadNV(fb, kv_s, b, LDQ, false);    \
    c = coopMatMulAddNV(fa, fb, c);            \
  }
MMA_QK(mma_qk, Acc)
MMA_QK(mma_qk_h, AccH)
MMA_PV(mma_pv, Acc)
MMA_PV(mma_pv_h, AccH)
#endif

// s_s[off..] (16×16, rows LDS apart) ↔ c.
void acc_store(Acc c, uint off) {
#ifdef EMULATE
  for (uint i = 0; i < ELEMS; ++i) s_s[off + emu_row(i) * LDS + emu_col(i)] = c.e[i];
#else
  coopMatStoreNV(c, s_s, off, LDS, false);
#endif
}
void acc_load(out Acc c, uint off) {
#ifdef EMULATE
  for (uint i = 0; i < ELEMS; ++i) c.e[i] = s_s[off + emu_row(i) * LDS + emu_col(i)];
#else
  coopMatLoadNV(c, s_s, off, LDS, false);
#endif
}

// K or V rows kb..kb+BC−1 into kv_s, zeros from key_end on.
void load_block(bool values, uint kv_base, uint kb, uint key_end) {
  for (uint e = gl_LocalInvocationID.x; e < BC * CH; e += WG) {
    const uint c = e / CH, ch = e % CH;
    uvec4 u = uvec4(0);
    if (kb + c < key_end) u = values ? v8[kv_base + (kb + c) * CH + ch] : k8[kv_base + (kb + c) * CH + ch];
    PUT8(kv_s, c * LDQ + ch * 8, u);
  }
}

void main() {
  LOAD_PARAMS;
  const uint G = p.heads / p.kv_heads;
  const uint kvh = gl_WorkGroupID.y;
  const uint b = gl_WorkGroupID.z / p.splits, split = gl_WorkGroupID.z % p.splits;
  const uint row0 = gl_WorkGroupID.x * BR;
  const uint rows_total = p.tokens * G;
  const uint tid = gl_LocalInvocationID.x, sg = gl_SubgroupID, lane = gl_SubgroupInvocationID;
  const uint strip = 16 * sg;
  const float NEG_INF = -1.0 / 0.0;

  for (uint e = tid; e < BR * CH; e += WG) {
    const uint r = e / CH, ch = e % CH, row = row0 + r;
    uvec4 u = uvec4(0);
    if (row < rows_total) {
      const uint h = group_head(kvh, row % G, G), t = row / G;
      u = q8[((b * p.heads + h) * p.tokens + t) * CH + ch];
    }
    PUT8(q_s, r * LDQ + ch * 8, u);
  }
  for (uint r = tid; r < BR; r += WG) {  // the emulation has fewer lanes than rows
    m_s[r] = NEG_INF;
    l_s[r] = 0.0;
  }
  const uint scratch = strip * LDS;
  for (uint e = lane; e < 256; e += SG) s_s[scratch + (e / 16) * LDS + e % 16] = float(e / 16);
  subgroup_sync();
  Acc rowmap;  // element i of any fragment lies in row EL(rowmap, i) of it
  acc_load(rowmap, scratch);
  Acc acc[DF];
  [[unroll]] for (uint f = 0; f < DF; ++f) acc_zero(acc[f]);

  uint key_begin = split * p.chunk, key_end = min(p.keys, key_begin + p.chunk);
  if (p.causal != 0) key_end = min(key_end, p.past + (min(row0 + BR, rows_total) - 1) / G + 1);
  const uint kv_base = (b * p.kv_heads + kvh) * p.kv_stride * CH;

  for (uint kb = key_begin; kb < key_end; kb += BC) {
    barrier();  // every strip is done with the previous V block (and q_s is written)
    load_block(false, kv_base, kb, key_end);
    barrier();
    Acc sc[KF];
    [[unroll]] for (uint j = 0; j < KF; ++j) acc_zero(sc[j]);
    if (QK16) {
      [[unroll]] for (uint d0 = 0; d0 < DF; d0 += QK16_DIMS / 16)
        [[unroll]] for (uint j = 0; j < KF; ++j) {
          AccH part;
          acch_zero(part);
          [[unroll]] for (uint d = d0; d < min(d0 + QK16_DIMS / 16, DF); ++d)
            mma_qk_h(part, strip * LDQ + d * 16, j * 16 * LDQ + d * 16);
          acc_add_h(sc[j], part);
        }
    } else {
      [[unroll]] for (uint d = 0; d < DF; ++d)
        [[unroll]] for (uint j = 0; j < KF; ++j) mma_qk(sc[j], strip * LDQ + d * 16, j * 16 * LDQ + d * 16);
    }
    subgroup_sync();  // the lanes are done with the scratch (rowmap, last block's epilogue)
    [[unroll]] for (uint j = 0; j < KF; ++j) acc_store(sc[j], scratch + j * 16);
    subgroup_sync();
    // Online softmax of the strip's rows over this block; masked scores −inf.
    // Lane pairs share a row (keys part, part + LPR, ...); every lane runs
    // the same number of rows, so the subgroup stays converged.
    for (uint r = lane / LPR; r < 16; r += SG / LPR) {
      const uint part = lane % LPR;
      const uint row = row0 + strip + r, t = min(row, rows_total - 1) / G;
      const float m_old = m_s[strip + r];
      float sv[KPL];
      float mx = m_old;
      [[unroll]] for (uint i = 0; i < KPL; ++i) {
        const uint c = part + i * LPR, key = kb + c;
        float x = NEG_INF;
        if (row < rows_total && key < key_end && (p.causal == 0 || key <= p.past + t)) {
          x = s_s[scratch + r * LDS + c] * p.scale;
          if (p.has_mask != 0) x += mask_ld((b * p.tokens + t) * p.mask_ld + key);
        }
        sv[i] = x;
        mx = max(mx, x);
      }
      [[unroll]] for (uint o = 1; o < LPR; o *= 2) mx = max(mx, subgroupShuffleXor(mx, o));
      const bool empty = isinf(mx) && mx < 0.0;  // every key so far masked
      const float alpha = empty ? 1.0 : exp(m_old - mx);
      float sum = 0.0;
      [[unroll]] for (uint i = 0; i < KPL; ++i) {
        const float16_t ph = float16_t(empty ? 0.0 : exp(sv[i] - mx));
        p_s[(strip + r) * LDP + part + i * LPR] = ph;
        sum += float(ph);  // l sums the probabilities P·V uses
      }
      [[unroll]] for (uint o = 1; o < LPR; o *= 2) sum += subgroupShuffleXor(sum, o);
      subgroup_sync();  // the row's lanes have read m_s
      if (part == 0) {
        m_s[strip + r] = mx;
        l_s[strip + r] = l_s[strip + r] * alpha + sum;
        alpha_s[strip + r] = alpha;
      }
    }
    subgroup_sync();
    [[unroll]] for (uint f = 0; f < DF; ++f)
      [[unroll]] for (uint i = 0; i < ACC_LEN(acc[f]); ++i) EL(acc[f], i) *= alpha_s[strip + uint(EL(rowmap, i))];
    barrier();  // every strip is done with K
    load_block(true, kv_base, kb, key_end);
    barrier();
    [[unroll]] for (uint f = 0; f < DF; ++f) {
      if (PV16) {
        AccH part;
        acch_zero(part);
        [[unroll]] for (uint j = 0; j < KF; ++j) mma_pv_h(part, strip * LDP + j * 16, j * 16 * LDQ + f * 16);
        acc_add_h(acc[f], part);
      } else {
        [[unroll]] for (uint j = 0; j < KF; ++j) mma_pv(acc[f], strip * LDP + j * 16, j * 16 * LDQ + f * 16);
      }
    }
  }

  // Each O fragment through the scratch, then normalised, gated and written
  // once (or, with split keys, written unnormalised with the row's max and sum).
  [[unroll]] for (uint f = 0; f < DF; ++f) {
    subgroup_sync();
    acc_store(acc[f], scratch);
    subgroup_sync();
    for (uint e = lane; e < 256; e += SG) {
      const uint r = e / 16, d = f * 16 + e % 16, row = row0 + strip + r;
      if (row >= rows_total) continue;
      const uint h = group_head(kvh, row % G, G), t = row / G;
      const float val = s_s[scratch + r * LDS + e % 16];
      flash_store(b, t, h, d, split, val, m_s[strip + r], l_s[strip + r]);
    }
  }
}
