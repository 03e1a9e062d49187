#version 450
#extension GL_GOOGLE_include_directive : require
// Variants (the build compiles one SPIR-V module per line: name, then defines):
// variant: matmul_staged
// variant: matmul_staged_f16 Y_T=F16
// variant: matmul_staged_emulated EMULATE EMU_SG=8
// variant: matmul_staged_emulated_f16 EMULATE EMU_SG=8 Y_T=F16
// Y = X·Wᵀ (+ b) (+ R) on tensor cores through shared memory: fp16 X [M, K]
// and W [N, K], fp32 results, for M and N multiples of the workgroup tile
// (TM × TN) and K of TK.
//
// matmul_coopmat.comp loads each fragment straight from memory, so every
// subgroup re-reads its operands and the loads are 16×16 scattered rows. Here
// the workgroup (WM × WN subgroups) copies a TM × TK slice of X and a TN × TK
// slice of W into shared memory as 16-byte pieces, and each subgroup
// multiplies an FM × FN block of 16 × 16 fragments of Y from there. Shared
// memory holds STAGES slices. With two, the next one is loaded into registers
// and stored into the other half while this one is multiplied, one barrier
// per slice; with one (room for larger tiles), it is loaded into registers
// during the products and stored between two barriers.
// Rows are TK + 8 halves apart, so the 8 rows of a fragment load fall in
// different banks. The epilogue reuses the X slices as a 16 × 16 scratch per
// subgroup (bias, residual, storage type).
//
// The tile is specialization constants (gpu::StagedTile, chosen per device by
// the Context's tuning and swept by `vkgate bench --op matmul --tiles`), not
// build variants: one module serves every shape.
// ACC16: each slice's products accumulate in fp16 fragments, added into the
// fp32 accumulators once per slice (TK / 16 products), for drivers whose
// fp32-accumulating products are the slower ones.
//
// EMULATE (coopmat.glsl) runs the products as scalar code on CPU drivers.
#include "storage.glsl"
#include "coopmat.glsl"
#ifndef Y_T
#define Y_T F32
#endif

layout(local_size_x_id = 0) in;
layout(constant_id = 1) const uint WM = 2;   // subgroups along M
layout(constant_id = 2) const uint WN = 4;   // ... and along N
layout(constant_id = 3) const uint FM = 4;   // fragments per subgroup along M
layout(constant_id = 4) const uint FN = 2;   // ... and along N
layout(constant_id = 5) const uint TK = 32;  // k per slice, a multiple of 16
layout(constant_id = 6) const bool ACC16 = false;
layout(constant_id = 7) const uint STAGES = 2;  // slices in shared memory: 2 overlap the stores with the products
const uint WG = WM * WN * SG;
const uint TM = WM * FM * 16, TN = WN * FN * 16;  // workgroup tile
const uint LD8 = TK / 8 + 1;                      // row stride in 16-byte pieces (one of padding)
// 16-byte pieces per lane of each slice (the host makes these whole).
const uint X_PER_LANE = TM * TK / 8 / WG, W_PER_LANE = TN * TK / 8 / WG;
// Per lane, at most this many pieces of a slice are held in registers.
const uint MAX_PER_LANE = 8;

layout(std430, binding = 0) readonly buffer XBuf { uvec4 x8[]; };
layout(std430, binding = 1) readonly buffer WBuf { uvec4 w8[]; };
RO(2, bias, F32)
RO(3, res, F32)
RW(4, y, Y_T)
RO(5, gate, F16)

#include "params.glsl"
struct Push {
  uint M, N, K;
  uint ldx, ldw, ldy, ldr;
  uint has_bias, has_residual;
  uint k_chunk, zero_centered;  // (matmul.comp's and matvec.comp's)
  float eps;
  uint gate_act, gate_combine, gate_at, ldg;  // the dense gate (epilogue.glsl)
};
PARAMS(Push)
#include "epilogue.glsl"

const uint SCRATCH = WM * WN * 64;  // 256 floats per subgroup, in 16-byte pieces
const uint X_SLICES = STAGES * TM * LD8;
shared uvec4 x_s[X_SLICES > SCRATCH ? X_SLICES : SCRATCH];  // two slices; after the loop, the epilogue's scratch
shared uvec4 w_s[STAGES * TN * LD8];

#ifdef EMULATE
// Half i (counted in halves) of a uvec4 shared array.
#define HALF_AT(arr, i) unpackFloat2x16(arr[(i) / 8][((i) % 8) / 2])[(i) % 2]
#endif

// A fragment as 16 × 16 floats, rows 16 apart, at x_s[off4] onwards.
void acc_store(Acc c, uint off4) {
#ifdef EMULATE
  for (uint i = 0; i < ELEMS; ++i) {
    const uint e = emu_row(i) * 16 + emu_col(i);
    x_s[off4 + e / 4][e % 4] = floatBitsToUint(c.e[i]);
  }
#else
  coopMatStoreNV(c, x_s, off4, 4, false);
#endif
}

void main() {
  LOAD_PARAMS;
  const uint tid = gl_LocalInvocationID.x, sg = gl_SubgroupID, lane = gl_SubgroupInvocationID;
  const uint m0 = gl_WorkGroupID.y * TM, n0 = gl_WorkGroupID.x * TN;
  const uint sm = (sg / WN) * FM * 16, sn = (sg % WN) * FN * 16;  // the subgroup's block within the tile

  // Piece e of a slice: row e / (TK / 8), 16-byte column e % (TK / 8).
  uvec4 xr[MAX_PER_LANE], wr[MAX_PER_LANE];
  // The slice at k0 from memory into registers, and from there into shared buffer `buf`.
#define LOAD_SLICE(k0)                                                         \
  [[unroll]] for (uint i = 0; i < X_PER_LANE; ++i) {                           \
    const uint e = tid + i * WG, r = e / (TK / 8), c = e % (TK / 8);           \
    xr[i] = x8[((m0 + r) * p.ldx + (k0)) / 8 + c];                             \
  }                                                                            \
  [[unroll]] for (uint i = 0; i < W_PER_LANE; ++i) {                           \
    const uint e = tid + i * WG, r = e / (TK / 8), c = e % (TK / 8);           \
    wr[i] = w8[((n0 + r) * p.ldw + (k0)) / 8 + c];                             \
  }
#define STORE_SLICE(buf)                                                       \
  [[unroll]] for (uint i = 0; i < X_PER_LANE; ++i) {                           \
    const uint e = tid + i * WG;                                               \
    x_s[((buf) * TM + e / (TK / 8)) * LD8 + e % (TK / 8)] = xr[i];             \
  }                                                                            \
  [[unroll]] for (uint i = 0; i < W_PER_LANE; ++i) {                           \
    const uint e = tid + i * WG;                                               \
    w_s[((buf) * TN + e / (TK / 8)) * LD8 + e % (TK / 8)] = wr[i];             \
  }

  Acc acc[FM][FN];
  [[unroll]] for (uint i = 0; i < FM; ++i)
    [[unroll]] for (uint j = 0; j < FN; ++j) acc_zero(acc[i][j]);

  LOAD_SLICE(0)
  STORE_SLICE(0)
  barrier();
  uint buf = 0;
  for (uint k0 = 0; k0 < p.K; k0 += TK, buf = STAGES - 1 - buf) {
    const bool more = k0 + TK < p.K;
    if (more) { LOAD_SLICE(k0 + TK) }
#ifdef EMULATE
    const uint LDH = LD8 * 8;
    [[unroll]] for (uint kk = 0; kk < TK; kk += 16)
      [[unroll]] for (uint i = 0; i < FM; ++i)
        [[unroll]] for (uint j = 0; j < FN; ++j) {
          const uint a = (buf * TM + sm + 16 * i) * LDH + kk, b = (buf * TN + sn + 16 * j) * LDH + kk;
          ELEM_LOOP for (uint e = 0; e < ELEMS; ++e) {
            const uint r = emu_row(e), col = emu_col(e);
            float sum = 0.0;
            [[unroll]] for (uint k = 0; k < 16; ++k)
              sum += float(HALF_AT(x_s, a + r * LDH + k)) * float(HALF_AT(w_s, b + col * LDH + k));
            acc[i][j].e[e] += sum;
          }
        }
#else
    AccH part[FM][FN];  // ACC16's fp16 sums of this slice
    if (ACC16) {
      [[unroll]] for (uint i = 0; i < FM; ++i)
        [[unroll]] for (uint j = 0; j < FN; ++j) acch_zero(part[i][j]);
    }
    [[unroll]] for (uint kk = 0; kk < TK; kk += 16) {
      FragH fa[FM], fb[FN];
      [[unroll]] for (uint i = 0; i < FM; ++i)
        coopMatLoadNV(fa[i], x_s, (buf * TM + sm + 16 * i) * LD8 + kk / 8, LD8, false);
      [[unroll]] for (uint j = 0; j < FN; ++j)
        coopMatLoadNV(fb[j], w_s, (buf * TN + sn + 16 * j) * LD8 + kk / 8, LD8, true);
      [[unroll]] for (uint i = 0; i < FM; ++i)
        [[unroll]] for (uint j = 0; j < FN; ++j) {
          if (ACC16)
            part[i][j] = coopMatMulAddNV(fa[i], fb[j], part[i][j]);
          else
            acc[i][j] = coopMatMulAddNV(fa[i], fb[j], acc[i][j]);
        }
    }
    if (ACC16) {
      [[unroll]] for (uint i = 0; i < FM; ++i)
        [[unroll]] for (uint j = 0; j < FN; ++j) acc_add_h(acc[i][j], part[i][j]);
    }
#endif
    // Two stages: the other buffer was last read before the previous barrier.
    if (STAGES == 1) barrier();
    if (more) { STORE_SLICE(STAGES - 1 - buf) }
    barrier();
  }

  const uint scratch = sg * 64;
  [[unroll]] for (uint i = 0; i < FM; ++i)
    [[unroll]] for (uint j = 0; j < FN; ++j) {
      subgroup_sync();
      acc_store(acc[i][j], scratch);
      subgroup_sync();
      for (uint e = lane; e < 256; e += SG) {
        const uint m = m0 + sm + 16 * i + e / 16, n = n0 + sn + 16 * j + e % 16;
        y_st(m * p.ldy + n, epilogue(m, n, uintBitsToFloat(x_s[scratch + e / 4][e % 4])));
      }
    }
}
