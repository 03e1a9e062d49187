// Storage buffers whose element type is picked at compile time, so each shader
// is written once in fp32 arithmetic and compiled per storage type:
//   RO(binding, name, T) declares a read-only buffer with name_ld(i)
//   RW(binding, name, T) also adds name_st(i, v)
// T is F32, F16 (IEEE half) or BF16 (bfloat16 held as uint16_t; stored with
// round-to-nearest-even, NaN kept quiet). Shaders take T from -D defines.
#extension GL_EXT_shader_16bit_storage : enable

#define F32_TYPE float
#define F16_TYPE float16_t
#define BF16_TYPE uint16_t

// The bfloat16 bits of v in the low half (16-bit values may only live in
// buffers without the int16 arithmetic extension, hence uint).
uint bf16_bits(float v) {
  uint u = floatBitsToUint(v);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (u >> 16) | 0x40u;
  return (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
}

#define LOAD_F32(name) float name##_ld(uint i) { return name[i]; }
#define LOAD_F16(name) float name##_ld(uint i) { return float(name[i]); }
#define LOAD_BF16(name) float name##_ld(uint i) { return uintBitsToFloat(uint(name[i]) << 16); }
#define STORE_F32(name) void name##_st(uint i, float v) { name[i] = v; }
#define STORE_F16(name) void name##_st(uint i, float v) { name[i] = float16_t(v); }
#define STORE_BF16(name) void name##_st(uint i, float v) { name[i] = uint16_t(bf16_bits(v)); }

#define BUFFER_DECL(b_, q_, name, T) \
  layout(std430, binding = b_) q_ buffer name##_buf { T##_TYPE name[]; };
#define RO_EXPAND(b_, name, T) BUFFER_DECL(b_, readonly, name, T) LOAD_##T(name)
#define RW_EXPAND(b_, name, T) BUFFER_DECL(b_, , name, T) LOAD_##T(name) STORE_##T(name)
#define RO(b_, name, T) RO_EXPAND(b_, name, T)
#define RW(b_, name, T) RW_EXPAND(b_, name, T)
// RW_COHERENT: RW for a buffer that other workgroups of the same dispatch read
// after an atomic hand-off (their loads and stores bypass incoherent caches).
#define RW_COHERENT_EXPAND(b_, name, T) BUFFER_DECL(b_, coherent, name, T) LOAD_##T(name) STORE_##T(name)
#define RW_COHERENT(b_, name, T) RW_COHERENT_EXPAND(b_, name, T)

// TEXEL_RO(binding, name, T): the same name_ld(i), read through a uniform
// texel buffer (the host binds an R32_SFLOAT or R16_SFLOAT view). On llvmpipe
// a texel fetch is a branch-free AVX2 gather, where a storage-buffer load is a
// branchy loop over the SIMD lanes. bfloat16 stays a storage buffer: read as
// R16_UINT texels, llvmpipe takes ~40× longer to compile the matmul (23 s).
#define TEXEL_FLOAT(b_, name) \
  layout(binding = b_) uniform samplerBuffer name##_tex; \
  float name##_ld(uint i) { return texelFetch(name##_tex, int(i)).x; }
#define TEXEL_F32(b_, name) TEXEL_FLOAT(b_, name)
#define TEXEL_F16(b_, name) TEXEL_FLOAT(b_, name)
#define TEXEL_BF16(b_, name) RO_EXPAND(b_, name, BF16)
#define TEXEL_EXPAND(b_, name, T) TEXEL_##T(b_, name)
#define TEXEL_RO(b_, name, T) TEXEL_EXPAND(b_, name, T)
// RO, or TEXEL_RO where the variant defines TEXEL.
#ifdef TEXEL
#define IN(b_, name, T) TEXEL_RO(b_, name, T)
#else
#define IN(b_, name, T) RO(b_, name, T)
#endif

// VEC8_RO(binding, name, T): name_ld8(i, lo, hi) reads elements 8i..8i+7 as two
// vec4 with 16-byte loads (one for fp16 and bf16, two for fp32): a GPU moves
// memory in wide transactions, and 2-byte loads leave most of each unused.
// The caller keeps rows 8-element aligned (and the binding 16-byte aligned).
#define VEC8_F32(b_, name) \
  layout(std430, binding = b_) readonly buffer name##_buf8 { vec4 name##8[]; }; \
  void name##_ld8(uint i, out vec4 lo, out vec4 hi) { lo = name##8[2 * i]; hi = name##8[2 * i + 1]; }
// fp16 and bf16: one uvec4 holds the 8 values, PAIR unpacks two of them.
#define VEC8_LD_PACKED(name, PAIR) \
  void name##_ld8(uint i, out vec4 lo, out vec4 hi) { \
    const uvec4 u = name##8[i]; \
    lo = vec4(PAIR(u.x), PAIR(u.y)); \
    hi = vec4(PAIR(u.z), PAIR(u.w)); \
  }
#define VEC8_PACKED(b_, name, PAIR) \
  layout(std430, binding = b_) readonly buffer name##_buf8 { uvec4 name##8[]; }; \
  VEC8_LD_PACKED(name, PAIR)
#define BF16_PAIR(u) vec2(uintBitsToFloat((u) << 16), uintBitsToFloat((u) & 0xffff0000u))
#define VEC8_F16(b_, name) VEC8_PACKED(b_, name, unpackHalf2x16)
#define VEC8_BF16(b_, name) VEC8_PACKED(b_, name, BF16_PAIR)
#define VEC8_EXPAND(b_, name, T) VEC8_##T(b_, name)
#define VEC8_RO(b_, name, T) VEC8_EXPAND(b_, name, T)

// VEC8_COHERENT(binding, name, T): VEC8_RO's name_ld8, and name_st8(i, lo, hi)
// writing elements 8i..8i+7, on a coherent buffer: for a workgroup that reads
// back what it wrote in the same dispatch (flash_decode.comp's PREPARE).
#define VEC8_COHERENT_F32(b_, name) \
  layout(std430, binding = b_) coherent buffer name##_buf8 { vec4 name##8[]; }; \
  void name##_ld8(uint i, out vec4 lo, out vec4 hi) { lo = name##8[2 * i]; hi = name##8[2 * i + 1]; } \
  void name##_st8(uint i, vec4 lo, vec4 hi) { name##8[2 * i] = lo; name##8[2 * i + 1] = hi; }
#define VEC8_COHERENT_PACKED(b_, name, PAIR, PACK) \
  layout(std430, binding = b_) coherent buffer name##_buf8 { uvec4 name##8[]; }; \
  VEC8_LD_PACKED(name, PAIR) \
  void name##_st8(uint i, vec4 lo, vec4 hi) { name##8[i] = uvec4(PACK(lo.xy), PACK(lo.zw), PACK(hi.xy), PACK(hi.zw)); }
#define BF16_PACK(v) (bf16_bits((v).x) | (bf16_bits((v).y) << 16))
#define VEC8_COHERENT_F16(b_, name) VEC8_COHERENT_PACKED(b_, name, unpackHalf2x16, packHalf2x16)
#define VEC8_COHERENT_BF16(b_, name) VEC8_COHERENT_PACKED(b_, name, BF16_PAIR, BF16_PACK)
#define VEC8_COHERENT_EXPAND(b_, name, T) VEC8_COHERENT_##T(b_, name)
#define VEC8_COHERENT(b_, name, T) VEC8_COHERENT_EXPAND(b_, name, T)

// VEC8_ARRAY_RO(binding, name, T, N): an array of N such buffers (one per
// sequence of a batched step), read as name_ld8_at(a, i, lo, hi) with a
// dynamically uniform a (shaderStorageBufferArrayDynamicIndexing).
#define VEC8_ARRAY_F32(b_, name, N) \
  layout(std430, binding = b_) readonly buffer name##_bufs8 { vec4 v8[]; } name##_arr[N]; \
  void name##_ld8_at(uint a, uint i, out vec4 lo, out vec4 hi) { lo = name##_arr[a].v8[2 * i]; hi = name##_arr[a].v8[2 * i + 1]; }
#define VEC8_ARRAY_PACKED(b_, name, N, PAIR) \
  layout(std430, binding = b_) readonly buffer name##_bufs8 { uvec4 v8[]; } name##_arr[N]; \
  void name##_ld8_at(uint a, uint i, out vec4 lo, out vec4 hi) { \
    const uvec4 u = name##_arr[a].v8[i]; \
    lo = vec4(PAIR(u.x), PAIR(u.y)); \
    hi = vec4(PAIR(u.z), PAIR(u.w)); \
  }
#define VEC8_ARRAY_F16(b_, name, N) VEC8_ARRAY_PACKED(b_, name, N, unpackHalf2x16)
#define VEC8_ARRAY_BF16(b_, name, N) VEC8_ARRAY_PACKED(b_, name, N, BF16_PAIR)
#define VEC8_ARRAY_EXPAND(b_, name, T, N) VEC8_ARRAY_##T(b_, name, N)
#define VEC8_ARRAY_RO(b_, name, T, N) VEC8_ARRAY_EXPAND(b_, name, T, N)

// RW_ARRAY(binding, name, T, N): an array of N writable buffers (one per
// sequence of a batched step), written as name_st_at(a, i, v) with a
// dynamically uniform a.
#define STORE_AT_F32(name) void name##_st_at(uint a, uint i, float v) { name##_arr[a].e[i] = v; }
#define STORE_AT_F16(name) void name##_st_at(uint a, uint i, float v) { name##_arr[a].e[i] = float16_t(v); }
#define STORE_AT_BF16(name) void name##_st_at(uint a, uint i, float v) { name##_arr[a].e[i] = uint16_t(bf16_bits(v)); }
#define RW_ARRAY_EXPAND(b_, name, T, N) \
  layout(std430, binding = b_) buffer name##_bufs { T##_TYPE e[]; } name##_arr[N]; \
  STORE_AT_##T(name)
#define RW_ARRAY(b_, name, T, N) RW_ARRAY_EXPAND(b_, name, T, N)
