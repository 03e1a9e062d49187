// 16×16 cooperative-matrix fragments for the tensor-core kernels
// (flash_coopmat.comp, matmul_staged.comp): fp16 operands and fp32
// accumulators (Acc) of GL_NV_cooperative_matrix, subgroups of SG = 32 lanes.
//
// EMULATE (-DEMU_SG=subgroup size) makes Acc a plain array with a fixed
// layout and leaves the products to the shaders' scalar code, so the rest of
// each kernel runs on CPU drivers, which have no tensor cores.
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_EXT_control_flow_attributes : enable

#ifdef EMULATE
const uint SG = EMU_SG;
const uint ELEMS = 256 / SG;  // lane l holds elements l, l + SG, ... (row e / 16, column e % 16)
struct Acc {
  float e[ELEMS];
};
#define EL(a, i) a.e[i]
#define ACC_LEN(a) ELEMS
// The loops over a fragment's elements stay loops (ELEM_LOOP): unrolled,
// llvmpipe compiles tens of thousands of scalar multiply-adds (minutes per
// pipeline). Only those: with the 16-step inner loops kept as loops as well,
// llvmpipe (Mesa 22.3.6) returned wrong elements (one query over 256 keys)
// that unrolling them fixes; we did not trace the cause further.
#define ELEM_LOOP [[dont_unroll]]
#else
#extension GL_KHR_memory_scope_semantics : require
#extension GL_NV_cooperative_matrix : require
const uint SG = 32;
#define Acc fcoopmatNV<32, gl_ScopeSubgroup, 16, 16>
#define FragH fcoopmatNV<16, gl_ScopeSubgroup, 16, 16>
#define EL(a, i) a[i]
#define ACC_LEN(a) a.length()
#define ELEM_LOOP [[unroll]]
#endif

void acc_zero(out Acc c) {
#ifdef EMULATE
  for (uint i = 0; i < ELEMS; ++i) c.e[i] = 0.0;
#else
  c = Acc(0.0);
#endif
}

// AccH: fp16 partial sums of products, added into an Acc once per several
// products (the kernels' ACC16); emulated as an Acc whose elements the
// products round to fp16.
#ifdef EMULATE
#define AccH Acc
void acch_zero(out AccH c) { acc_zero(c); }
void acc_add_h(inout Acc c, AccH h) {
  for (uint i = 0; i < ELEMS; ++i) c.e[i] += h.e[i];
}
#else
#define AccH FragH
void acch_zero(out AccH c) { c = AccH(0.0); }
void acc_add_h(inout Acc c, AccH h) { c = c + Acc(h); }
#endif

// Row and column of element i of this lane's part of an emulated fragment.
uint emu_row(uint i) { return (gl_SubgroupInvocationID + i * SG) / 16; }
uint emu_col(uint i) { return (gl_SubgroupInvocationID + i * SG) % 16; }

// The subgroup's shared-memory writes visible to all its lanes.
void subgroup_sync() {
  subgroupMemoryBarrierShared();
  subgroupBarrier();
}

// 8 fp16 values (16 bytes, as loaded from a uvec4 buffer) into arr[off..off+7].
#define PUT8(arr, off, u)                                                            \
  {                                                                                  \
    const f16vec2 h0 = unpackFloat2x16(u.x), h1 = unpackFloat2x16(u.y);              \
    const f16vec2 h2 = unpackFloat2x16(u.z), h3 = unpackFloat2x16(u.w);              \
    arr[off] = h0.x; arr[off + 1] = h0.y; arr[off + 2] = h1.x; arr[off + 3] = h1.y;  \
    arr[off + 4] = h2.x; arr[off + 5] = h2.y; arr[off + 6] = h3.x; arr[off + 7] = h3.y; \
  }
