#version 450
#extension GL_GOOGLE_include_directive : require
// Variants (the build compiles one SPIR-V module per line: name, then defines):
// variant: matmul_coopmat
// variant: matmul_coopmat_f16 Y_T=F16
// Only where the shader compiler knows GL_KHR_cooperative_matrix (CMakeLists.txt):
// variant-khr: matmul_coopmat_khr COOPMAT_KHR
// variant-khr: matmul_coopmat_khr_f16 COOPMAT_KHR Y_T=F16
// Y = X·Wᵀ (+ b) (+ R) on tensor cores: fp16 X [M, K] and W [N, K], fp32
// accumulation. Four subgroups of 32 each own a 32×32 block (2×2 fragments of
// 16×16×16) of the workgroup's 64×64 tile; fragments are loaded straight from
// memory (W as the column-major K×N operand), and the tile goes through
// shared memory for the bias/residual epilogue and the store in Y_T.
// The host uses this only when M and N are multiples of 64 and K of 16.
// Split-K as in matmul.comp: workgroup z sums its k_chunk (a multiple of 16)
// into fp32 rows z·M.. of Y.
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
RO(5, gate, F16)

#include "params.glsl"
struct Push {
  uint M, N, K;
  uint ldx, ldw, ldy, ldr;
  uint has_bias, has_residual;
  uint k_chunk, zero_centered;  // (zero_centered and eps: matvec.comp's)
  float eps;
  uint gate_act, gate_combine, gate_at, ldg;  // the dense gate (epilogue.glsl)
};
PARAMS(Push)
#include "epilogue.glsl"

shared float tile[64 * 64];

void main() {
  LOAD_PARAMS;
  const uint sg = gl_SubgroupID;
  const uint sm = sg / 2, sn = sg % 2;
  const uint m0 = gl_WorkGroupID.y * 64 + sm * 32, n0 = gl_WorkGroupID.x * 64 + sn * 32;
  ACC_T acc[2][2];
  for (uint i = 0; i < 2; ++i)
    for (uint j = 0; j < 2; ++j) acc[i][j] = ACC_T(0.0);
  const uint k_end = min(p.K, (gl_WorkGroupID.z + 1) * p.k_chunk);
  for (uint k = gl_WorkGroupID.z * p.k_chunk; k < k_end; k += 16) {
    A_T a[2];
    B_T b[2];
    for (uint i = 0; i < 2; ++i) LOAD_ROWS(a[i], x, (m0 + 16 * i) * p.ldx + k, p.ldx);
    for (uint j = 0; j < 2; ++j) LOAD_COLS(b[j], w, (n0 + 16 * j) * p.ldw + k, p.ldw);
    for (uint i = 0; i < 2; ++i)
      for (uint j = 0; j < 2; ++j) acc[i][j] = MMA(a[i], b[j], acc[i][j]);
  }
  for (uint i = 0; i < 2; ++i)
    for (uint j = 0; j < 2; ++j) STORE_ROWS(acc[i][j], tile, (sm * 32 + 16 * i) * 64 + sn * 32 + 16 * j, 64);
  barrier();
  for (uint e = gl_LocalInvocationID.x; e < 64 * 64; e += 128) {
    const uint m = gl_WorkGroupID.y * 64 + e / 64, n = gl_WorkGroupID.x * 64 + e % 64;
    if (m >= p.M || n >= p.N) continue;
    y_st((gl_WorkGroupID.z * p.M + m) * p.ldy + n, epilogue(m, n, tile[e]));
  }
}
