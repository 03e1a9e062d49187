#version 450
#extension GL_GOOGLE_include_directive : require
// Y = X·Wᵀ (+ b) (+ R) on tensor cores: fp16 X [M, K] and W [N, K], fp32
// accumulation. Four subgroups of 32 each own a 64×64 block (4×4 fragments of
// 16×16×16) of the workgroup's 128×128 tile; fragments are loaded straight
// from memory (W as the column-major K×N operand), and each finished fragment
// goes through a small shared stage for the bias/residual epilogue and the
// store in Y_T. The host uses this only when M and N are multiples of 128 and
// K of 16.
// -DCOOPMAT_KHR selects GL_KHR_cooperative_matrix, else GL_NV_cooperative_matrix.
#extension GL_KHR_memory_scope_semantics : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#extension GL_KHR_shader_subgroup_basic : require
#ifdef COOPMAT_KHR
#extension GL_KHR_cooperative_matrix : require
#define ACC_T coopmat<float, gl_ScopeSubgroup, 16, 16, gl_MatrixUseAccumulator>
#define A_T coopmat<float16_t, gl_ScopeSubgroup, 16, 16, gl_MatrixUseA>
#define B_T coopmat<float16_t, gl_ScopeSubgroup, 16, 16, gl_MatrixUseB>
#define LOAD_ROWS(m, buf, off, stride) coopMatLoad(m, buf, off, stride, gl_CooperativeMatrixLayoutRowMajor)
#define LOAD_COLS(m, buf, off, stride) coopMatLoad(m, buf, off, stride, gl_CooperativeMatrixLayoutColumnMajor)
#define MMA(a, b, c) coopMatMulAdd(a, b, c)
#define STORE_ROWS(m, buf, off, stride) coopMatStore(m, buf, off, stride, gl_CooperativeMatrixLayoutRowMajor)
#else
#extension GL_NV_cooperative_matrix : require
#define ACC_T fcoopmatNV<32, gl_ScopeSubgroup, 16, 16>
#define A_T fcoopmatNV<16, gl_ScopeSubgroup, 16, 16>
#define B_T fcoopmatNV<16, gl_ScopeSubgroup, 16, 16>
#define LOAD_ROWS(m, buf, off, stride) coopMatLoadNV(m, buf, off, stride, false)
#define LOAD_COLS(m, buf, off, stride) coopMatLoadNV(m, buf, off, stride, true)
#define MMA(a, b, c) coopMatMulAddNV(a, b, c)
#define STORE_ROWS(m, buf, off, stride) coopMatStoreNV(m, buf, off, stride, false)
#endif
#include "storage.glsl"
#ifndef Y_T
#define Y_T F32
#endif

layout(local_size_x = 128) in;

layout(std430, binding = 0) readonly buffer XBuf { float16_t x[]; };
layout(std430, binding = 1) readonly buffer WBuf { float16_t w[]; };
RO(2, bias, F32)
RO(3, res, F32)
RW(4, y, Y_T)

layout(push_constant) uniform Push {
  uint M, N, K;
  uint ldx, ldw, ldy, ldr;
  uint has_bias, has_residual;
} p;

// Fragments per subgroup along M and N: each subgroup owns a 64×64 block,
// the workgroup (2×2 subgroups) a 128×128 tile.
const uint FM = 4, FN = 4;
const uint TILE = 32 * FM;  // = 32 * FN

// Per-subgroup staging of one 16×16 fragment for the epilogue.
shared float stage[4 * 256];

void main() {
  const uint sg = gl_SubgroupID, lane = gl_SubgroupInvocationID;
  const uint sm = sg / 2, sn = sg % 2;
  const uint m0 = gl_WorkGroupID.y * TILE + sm * 16 * FM, n0 = gl_WorkGroupID.x * TILE + sn * 16 * FN;
  ACC_T acc[FM][FN];
  for (uint i = 0; i < FM; ++i)
    for (uint j = 0; j < FN; ++j) acc[i][j] = ACC_T(0.0);
  for (uint k = 0; k < p.K; k += 16) {
    A_T a[FM];
    B_T b[FN];
    for (uint i = 0; i < FM; ++i) LOAD_ROWS(a[i], x, (m0 + 16 * i) * p.ldx + k, p.ldx);
    for (uint j = 0; j < FN; ++j) LOAD_COLS(b[j], w, (n0 + 16 * j) * p.ldw + k, p.ldw);
    for (uint i = 0; i < FM; ++i)
      for (uint j = 0; j < FN; ++j) acc[i][j] = MMA(a[i], b[j], acc[i][j]);
  }
  for (uint i = 0; i < FM; ++i)
    for (uint j = 0; j < FN; ++j) {
      STORE_ROWS(acc[i][j], stage, sg * 256, 16);
      subgroupMemoryBarrierShared();
      subgroupBarrier();
      for (uint e = lane; e < 256; e += gl_SubgroupSize) {
        const uint m = m0 + 16 * i + e / 16, n = n0 + 16 * j + e % 16;
        float v = stage[sg * 256 + e];
        if (p.has_bias != 0) v += bias_ld(n);
        if (p.has_residual != 0) v += res_ld(m * p.ldr + n);
        y_st(m * p.ldy + n, v);
      }
      subgroupBarrier();
    }
}
