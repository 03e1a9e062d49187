#version 450
#extension GL_GOOGLE_include_directive : require
// Y = X·Wᵀ (+ b) (+ R) on tensor cores through shared memory: fp16 X [M, K]
// and W [N, K], fp32 accumulation, for M and N multiples of 128 and K of 32.
//
// matmul_coopmat.comp loads each fragment straight from memory, so every
// subgroup re-reads its operands and the loads are 16×16 scattered rows. Here
// the workgroup (8 subgroups, 2 × 4) copies a 128 × 32 slice of X and of W
// into shared memory with 16-byte loads, the next slice already in registers
// while the current one is multiplied, and each subgroup multiplies a 64 × 32
// block of Y (4 × 2 fragments) from shared memory. The epilogue goes through
// a 16 × 16 scratch per subgroup (bias, residual, storage type).
//
// EMULATE (coopmat.glsl) runs the products as scalar code on CPU drivers.
#include "storage.glsl"
#include "coopmat.glsl"
#ifndef Y_T
#define Y_T F32
#endif

const uint WG = 8 * SG;
layout(local_size_x = WG) in;
const uint TM = 128, TN = 128, TK = 32;  // workgroup tile
const uint FM = 4, FN = 2;               // fragments per subgroup: 64 × 32 of Y
const uint LD = TK + 8;                  // fp16 row stride in shared memory (16 bytes of padding)
const uint CHUNKS = TM * TK / 8;         // 16-byte pieces of one operand slice
const uint PER_LANE = CHUNKS / WG;

layout(std430, binding = 0) readonly buffer XBuf { uvec4 x8[]; };
layout(std430, binding = 1) readonly buffer WBuf { uvec4 w8[]; };
RO(2, bias, F32)
RO(3, res, F32)
RW(4, y, Y_T)

layout(push_constant) uniform Push {
  uint M, N, K;
  uint ldx, ldw, ldy, ldr;
  uint has_bias, has_residual;
} p;

shared float16_t x_s[TM * LD];
shared float16_t w_s[TN * LD];
shared float out_s[8 * 16 * 16];

// c += x_s[a..] (16 × 16, rows LD apart) · w_s[b..]ᵀ (16 columns of Y × 16 k).
void mma(inout Acc c, uint a, uint b) {
#ifdef EMULATE
  ELEM_LOOP for (uint i = 0; i < ELEMS; ++i) {
    const uint r = emu_row(i), col = emu_col(i);
    float sum = 0.0;
    [[unroll]] for (uint k = 0; k < 16; ++k) sum += float(x_s[a + r * LD + k]) * float(w_s[b + col * LD + k]);
    c.e[i] += sum;
  }
#else
  FragH fa, fb;
  coopMatLoadNV(fa, x_s, a, LD, false);
  coopMatLoadNV(fb, w_s, b, LD, true);
  c = coopMatMulAddNV(fa, fb, c);
#endif
}

void acc_store(Acc c, uint off) {
#ifdef EMULATE
  for (uint i = 0; i < ELEMS; ++i) out_s[off + emu_row(i) * 16 + emu_col(i)] = c.e[i];
#else
  coopMatStoreNV(c, out_s, off, 16, false);
#endif
}

void main() {
  const uint tid = gl_LocalInvocationID.x, sg = gl_SubgroupID, lane = gl_SubgroupInvocationID;
  const uint m0 = gl_WorkGroupID.y * TM, n0 = gl_WorkGroupID.x * TN;
  const uint sm = (sg / 4) * FM * 16, sn = (sg % 4) * FN * 16;  // the subgroup's block within the tile

  // Piece e of a slice: row e / (TK / 8), k-chunk e % (TK / 8).
  uvec4 xr[PER_LANE], wr[PER_LANE];
  [[unroll]] for (uint i = 0; i < PER_LANE; ++i) {
    const uint e = tid + i * WG, r = e / (TK / 8), c = e % (TK / 8);
    xr[i] = x8[((m0 + r) * p.ldx) / 8 + c];
    wr[i] = w8[((n0 + r) * p.ldw) / 8 + c];
  }
  Acc acc[FM][FN];
  [[unroll]] for (uint i = 0; i < FM; ++i)
    [[unroll]] for (uint j = 0; j < FN; ++j) acc_zero(acc[i][j]);

  for (uint k0 = 0; k0 < p.K; k0 += TK) {
    barrier();  // every subgroup is done with the previous slice
    [[unroll]] for (uint i = 0; i < PER_LANE; ++i) {
      const uint e = tid + i * WG, r = e / (TK / 8), c = e % (TK / 8);
      PUT8(x_s, r * LD + c * 8, xr[i]);
      PUT8(w_s, r * LD + c * 8, wr[i]);
    }
    barrier();
    if (k0 + TK < p.K)  // the next slice travels while this one is multiplied
      [[unroll]] for (uint i = 0; i < PER_LANE; ++i) {
        const uint e = tid + i * WG, r = e / (TK / 8), c = e % (TK / 8);
        xr[i] = x8[((m0 + r) * p.ldx + k0 + TK) / 8 + c];
        wr[i] = w8[((n0 + r) * p.ldw + k0 + TK) / 8 + c];
      }
    [[unroll]] for (uint kk = 0; kk < TK; kk += 16)
      [[unroll]] for (uint i = 0; i < FM; ++i)
        [[unroll]] for (uint j = 0; j < FN; ++j) mma(acc[i][j], (sm + 16 * i) * LD + kk, (sn + 16 * j) * LD + kk);
  }

  const uint scratch = sg * 256;
  [[unroll]] for (uint i = 0; i < FM; ++i)
    [[unroll]] for (uint j = 0; j < FN; ++j) {
      subgroup_sync();
      acc_store(acc[i][j], scratch);
      subgroup_sync();
      for (uint e = lane; e < 256; e += SG) {
        const uint m = m0 + sm + 16 * i + e / 16, n = n0 + sn + 16 * j + e % 16;
        float v = out_s[scratch + e];
        if (p.has_bias != 0) v += bias_ld(n);
        if (p.has_residual != 0) v += res_ld(m * p.ldr + n);
        y_st(m * p.ldy + n, v);
      }
    }
}
