// ggml's block formats read from a buffer of 32-bit words, as llama.cpp and
// GGUF store them (vkgate/quant.hpp), dequantized in registers 8 elements at a
// time. Shared by the quantized products (qmatmul.comp, moe_matmul.comp's
// QUANT variants).
//
// The includer provides, before `#include "blocks.glsl"`:
//   FMT            a constant uint (a specialization constant): ggml's type id
//                  — F32 0, F16 1, Q4_0 2, Q4_1 3, Q5_0 6, Q5_1 7, Q8_0 8,
//                  Q2_K 10, Q3_K 11, Q4_K 12, Q5_K 13, Q6_K 14, IQ4_NL 20,
//                  IQ4_XS 23, BF16 30
//   BLOCK_WORD(i)  a macro: word i of the weights (a storage-buffer element,
//                  or texelFetch of an R32_UINT texel view)
//   BLOCK_PRECISE  (optional) `precise` to keep the driver from fusing
//                  dequant8's d·q + m into one fma, so that its values equal
//                  the host's dequantize bit for bit (the embedding gather);
//                  left empty by the products
// and gets:
//   BLOCK_ELEMS, BLOCK_BYTES   elements and bytes per block (8 elements for
//                              the float types, whose "block" is a chunk)
//   dequant8(row, c, lo, hi)   elements 8c..8c+7 of the row whose bytes start
//                              at byte `row`, as two vec4
//   block_byte, block_half, block_u32   the byte readers dequant8 uses
//
// Alignment: blocks of 18, 22, 34, 110 or 210 bytes leave a row only 2-byte
// aligned, so 4-byte reads take the bytes from the words around them, and
// may read past a row's last block (slices: the 16-byte units around it):
// the host pads the buffer (ops::qmatmul_padding). Rows of F32, F16 and BF16
// start 4-byte aligned.
#ifndef VKGATE_BLOCKS_GLSL
#define VKGATE_BLOCKS_GLSL

const uint BLOCK_ELEMS = (FMT == 0u || FMT == 1u || FMT == 30u)            ? 8u
                       : ((FMT >= 10u && FMT <= 14u) || FMT == 23u) ? 256u
                                                                    : 32u;
const uint BLOCK_BYTES = FMT == 0u  ? 32u
                       : FMT == 1u  ? 16u
                       : FMT == 30u ? 16u
                       : FMT == 2u  ? 18u
                       : FMT == 20u ? 18u
                       : FMT == 3u  ? 20u
                       : FMT == 6u  ? 22u
                       : FMT == 7u  ? 24u
                       : FMT == 8u  ? 34u
                       : FMT == 12u ? 144u
                       : FMT == 13u ? 176u
                       : FMT == 10u ? 84u
                       : FMT == 11u ? 110u
                       : FMT == 23u ? 136u
                                    : 210u;

// Byte b, the fp16 at (even) byte b, the 4 bytes from b (little-endian, any alignment).
uint block_byte(uint b) { return (BLOCK_WORD(b >> 2) >> ((b & 3u) << 3)) & 255u; }
float block_half(uint b) { return unpackHalf2x16(BLOCK_WORD(b >> 2) >> ((b & 2u) << 3)).x; }
uint block_u32(uint b) {
  const uint shift = (b & 3u) << 3;
  const uint first = BLOCK_WORD(b >> 2);
  if (shift == 0u) return first;
  return (first >> shift) | (BLOCK_WORD((b >> 2) + 1u) << (32u - shift));
}

// The four bytes of u as: low nibbles, high nibbles, unsigned, signed values.
vec4 block_lo4(uint u) { return vec4(uvec4(u, u >> 8, u >> 16, u >> 24) & 15u); }
vec4 block_hi4(uint u) { return vec4(uvec4(u >> 4, u >> 12, u >> 20, u >> 28) & 15u); }
vec4 block_s8(uint u) { return vec4(ivec4(uvec4(u << 24, u << 16, u << 8, u)) >> 24); }
// Bit `bit` of each of the four bytes of u.
vec4 block_bit_of_bytes(uint u, uint bit) { return vec4((uvec4(u, u >> 8, u >> 16, u >> 24) >> bit) & 1u); }
// Bits first..first+3 of h.
vec4 block_bits(uint h, uint first) { return vec4((uvec4(h) >> (uvec4(0u, 1u, 2u, 3u) + first)) & 1u); }
// The 2-bit field at `shift` of each of the four bytes of u.
vec4 block_crumbs(uint u, uint shift) { return vec4((uvec4(u, u >> 8, u >> 16, u >> 24) >> shift) & 3u); }
vec4 block_bf16x2(uint u, uint v) {
  return vec4(uintBitsToFloat(u << 16), uintBitsToFloat(u & 0xffff0000u), uintBitsToFloat(v << 16),
              uintBitsToFloat(v & 0xffff0000u));
}

// The k-quants' 6-bit scale and min of sub-block `sub` (0..7) from the 12
// bytes at `at` (ggml's get_scale_min_k4): sub-blocks 0-3 in the low 6 bits of
// bytes 0-3 (scales) and 4-7 (mins); 4-7 in the nibbles of bytes 8-11 with
// their top 2 bits in the high bits of bytes 0-3 and 4-7.
vec2 block_scale_min_k4(uint at, uint sub) {
  if (sub < 4u) return vec2(block_byte(at + sub) & 63u, block_byte(at + sub + 4u) & 63u);
  const uint packed = block_byte(at + sub + 4u);
  return vec2((packed & 15u) | ((block_byte(at + sub - 4u) >> 6) << 4), (packed >> 4) | ((block_byte(at + sub) >> 6) << 4));
}

// Q3_K's 6-bit scale of sub-block s (0..15) from its 12 bytes, as three
// little-endian words: the low 4 bits in the low (s < 8) or high nibble of
// byte s % 8, the top 2 at bit 2·(s / 4) of byte 8 + s % 4 (word 2); stored
// with an offset of 32.
float block_q3k_scale(uvec3 w, uint s) {
  const uint low = (w[(s & 7u) >> 2] >> (((s & 3u) << 3) + ((s >> 3) << 2))) & 15u;
  const uint high = (w.z >> (((s & 3u) << 3) + ((s >> 2) << 1))) & 3u;
  return float(int(low | (high << 4)) - 32);
}

// IQ4_NL and IQ4_XS: a 4-bit code is an index into a table of 16 int8
// (ggml's kvalues_iq4nl: −127, −104, −83, −65, −49, −35, −22, −10, 1, 13, 25,
// 38, 53, 69, 89, 113), a grid denser near zero. Packed 4 per word in one
// vector, so a lookup is a dynamic component and a shift: an array indexed
// at run time would go to per-lane memory on some GPUs.
const uvec4 IQ4_VALUES = uvec4(0xbfad9881u, 0xf6eaddcfu, 0x26190d01u, 0x71594535u);
float block_iq4_value(uint code) { return float(int(IQ4_VALUES[code >> 2] << (24u - ((code & 3u) << 3))) >> 24); }
// The table values of the nibbles at `shift` (0 or 4) of the four bytes of u.
vec4 block_iq4(uint u, uint shift) {
  const uvec4 i = (uvec4(u, u >> 8, u >> 16, u >> 24) >> shift) & 15u;
  return vec4(block_iq4_value(i.x), block_iq4_value(i.y), block_iq4_value(i.z), block_iq4_value(i.w));
}
// IQ4_XS's 6-bit scale of sub-block s (0..7) of the block at b, less its offset of 32:
// the low nibble of byte 4 + s / 2 (the high one for odd s), the top 2 bits at bit 2s of the uint16 at 2.
float block_iq4xs_scale(uint b, uint s) {
  const uint low = (block_byte(b + 4u + (s >> 1)) >> ((s & 1u) << 2)) & 15u;
  const uint high = (block_u32(b + 2u) >> (2u * s)) & 3u;
  return float(int(low | (high << 4)) - 32);
}

#ifndef BLOCK_PRECISE
#define BLOCK_PRECISE
#endif
void dequant8(uint row, uint c, BLOCK_PRECISE out vec4 lo, BLOCK_PRECISE out vec4 hi) {
  const uint chunks = BLOCK_ELEMS / 8u;  // chunks of 8 per block
  const uint b = row + (c / chunks) * BLOCK_BYTES, j = c % chunks;
  if (FMT == 0u) {
    const uint w = b >> 2;
    lo = uintBitsToFloat(uvec4(BLOCK_WORD(w), BLOCK_WORD(w + 1u), BLOCK_WORD(w + 2u), BLOCK_WORD(w + 3u)));
    hi = uintBitsToFloat(uvec4(BLOCK_WORD(w + 4u), BLOCK_WORD(w + 5u), BLOCK_WORD(w + 6u), BLOCK_WORD(w + 7u)));
  } else if (FMT == 1u) {
    const uint w = b >> 2;
    lo = vec4(unpackHalf2x16(BLOCK_WORD(w)), unpackHalf2x16(BLOCK_WORD(w + 1u)));
    hi = vec4(unpackHalf2x16(BLOCK_WORD(w + 2u)), unpackHalf2x16(BLOCK_WORD(w + 3u)));
  } else if (FMT == 30u) {
    const uint w = b >> 2;
    lo = block_bf16x2(BLOCK_WORD(w), BLOCK_WORD(w + 1u));
    hi = block_bf16x2(BLOCK_WORD(w + 2u), BLOCK_WORD(w + 3u));
  } else if (FMT == 8u) {
    // Q8_0: fp16 d, int8 q[32]; x = d·q.
    const float d = block_half(b);
    lo = d * block_s8(block_u32(b + 2u + 8u * j));
    hi = d * block_s8(block_u32(b + 6u + 8u * j));
  } else if (FMT == 2u || FMT == 3u || FMT == 6u || FMT == 7u) {
    // Q4_0 (d, qs[16]), Q4_1 (d, m, qs[16]), Q5_0 (d, qh[4], qs[16]), Q5_1
    // (d, m, qh[4], qs[16]): element i < 16 is the low nibble of qs[i],
    // element i + 16 its high nibble; the Q5 forms add bit i of qh as 16.
    // x = d·(q − 8) (Q4_0), d·(q − 16) (Q5_0), d·q + m (Q4_1, Q5_1).
    const bool has_min = FMT == 3u || FMT == 7u, five = FMT == 6u || FMT == 7u;
    const uint head = has_min ? 4u : 2u;
    const uint qs = b + head + (five ? 4u : 0u) + 8u * (j & 1u);
    const uint u0 = block_u32(qs), u1 = block_u32(qs + 4u);
    vec4 q0 = j < 2u ? block_lo4(u0) : block_hi4(u0);
    vec4 q1 = j < 2u ? block_lo4(u1) : block_hi4(u1);
    if (five) {
      const uint qh = block_u32(b + head);
      q0 += 16.0 * block_bits(qh, 8u * j);
      q1 += 16.0 * block_bits(qh, 8u * j + 4u);
    }
    const float d = block_half(b);
    if (has_min) {
      const float m = block_half(b + 2u);
      lo = d * q0 + m;
      hi = d * q1 + m;
    } else {
      const float zero = five ? 16.0 : 8.0;
      lo = d * (q0 - zero);
      hi = d * (q1 - zero);
    }
  } else if (FMT == 12u || FMT == 13u) {
    // Q4_K (d, dmin, scales[12], qs[128]) and Q5_K (…, qh[32], qs[128]):
    // 4 groups of 64 elements; group g's first 32 are the low nibbles of
    // qs[32g..32g+31] (sub-block 2g), the next 32 their high nibbles (2g + 1).
    // Q5_K's fifth bit of element l of sub-block s is bit s of qh[l].
    // x = d·scale·q − dmin·min.
    const uint group = j >> 3, upper = (j >> 2) & 1u, l = (j & 3u) << 3, sub = 2u * group + upper;
    const vec2 sm = block_scale_min_k4(b + 4u, sub);
    const float scale = block_half(b) * sm.x, shift = block_half(b + 2u) * sm.y;
    const uint qs = b + (FMT == 12u ? 16u : 48u) + 32u * group + l;
    const uint u0 = block_u32(qs), u1 = block_u32(qs + 4u);
    vec4 q0 = upper == 0u ? block_lo4(u0) : block_hi4(u0);
    vec4 q1 = upper == 0u ? block_lo4(u1) : block_hi4(u1);
    if (FMT == 13u) {
      q0 += 16.0 * block_bit_of_bytes(block_u32(b + 16u + l), sub);
      q1 += 16.0 * block_bit_of_bytes(block_u32(b + 20u + l), sub);
    }
    lo = scale * q0 - shift;
    hi = scale * q1 - shift;
  } else if (FMT == 10u || FMT == 11u) {
    // Q2_K (scales[16], qs[64], fp16 d, dmin) and Q3_K (hmask[32], qs[64],
    // scales[12], fp16 d): two halves of 128 elements, quarter t of half h
    // taking bits 2t, 2t+1 of qs[32h + l] for element l (0..31); its two
    // sub-blocks of 16 are 8h + 2t and 8h + 2t + 1. Q2_K: x = d·(sc & 15)·q
    // − dmin·(sc >> 4). Q3_K: x = d·(sc − 32)·(q − 4), q's third bit at bit
    // 4h + t of hmask[l].
    const uint half_ = j >> 4, quarter = (j >> 2) & 3u, l = (j & 3u) << 3, sub = 8u * half_ + 2u * quarter + (l >> 4);
    const uint qs = b + (FMT == 10u ? 16u : 32u) + 32u * half_ + l;
    vec4 q0 = block_crumbs(block_u32(qs), 2u * quarter), q1 = block_crumbs(block_u32(qs + 4u), 2u * quarter);
    if (FMT == 10u) {
      const uint sc = block_byte(b + sub);
      const float dl = block_half(b + 80u) * float(sc & 15u), ml = block_half(b + 82u) * float(sc >> 4);
      lo = dl * q0 - ml;
      hi = dl * q1 - ml;
    } else {
      const uint bit = 4u * half_ + quarter;
      q0 += 4.0 * block_bit_of_bytes(block_u32(b + l), bit) - 4.0;
      q1 += 4.0 * block_bit_of_bytes(block_u32(b + l + 4u), bit) - 4.0;
      const uvec3 scales = uvec3(block_u32(b + 96u), block_u32(b + 100u), block_u32(b + 104u));
      const float dl = block_half(b + 108u) * block_q3k_scale(scales, sub);
      lo = dl * q0;
      hi = dl * q1;
    }
  } else if (FMT == 20u || FMT == 23u) {
    // IQ4_NL (d, qs[16]) is Q4_0's block with x = d·table[q]; IQ4_XS (d,
    // scales_h, scales_l[4], qs[128]) 8 such sub-blocks of 32 under one d,
    // x = d·(sc − 32)·table[q].
    const uint sub = FMT == 20u ? 0u : j >> 2, k = j & 3u;
    const uint qs = b + (FMT == 20u ? 2u : 8u + 16u * sub) + 8u * (k & 1u), shift = k < 2u ? 0u : 4u;
    const float dl = FMT == 20u ? block_half(b) : block_half(b) * block_iq4xs_scale(b, sub);
    lo = dl * block_iq4(block_u32(qs), shift);
    hi = dl * block_iq4(block_u32(qs + 4u), shift);
  } else {
    // Q6_K: ql[128], qh[64], int8 scales[16], fp16 d. Two halves of 128
    // elements (ql 64 bytes, qh 32, scales 8 each); quarter q of a half takes
    // element l (0..31) from the low (q 0, 1) or high (q 2, 3) nibble of
    // ql[l + 32·(q & 1)] and bits 2q, 2q+1 of qh[l]; its scale is
    // scales[l / 16 + 2q]. x = d·scale·(q − 32).
    const uint half_ = j >> 4, quarter = (j >> 2) & 3u, l = (j & 3u) << 3;
    const uint ql = b + 64u * half_ + 32u * (quarter & 1u) + l, qh = b + 128u + 32u * half_ + l;
    const uint u0 = block_u32(ql), u1 = block_u32(ql + 4u);
    const vec4 q0 = (quarter < 2u ? block_lo4(u0) : block_hi4(u0)) + 16.0 * block_crumbs(block_u32(qh), 2u * quarter);
    const vec4 q1 = (quarter < 2u ? block_lo4(u1) : block_hi4(u1)) + 16.0 * block_crumbs(block_u32(qh + 4u), 2u * quarter);
    const int scale = int(block_byte(b + 192u + 8u * half_ + (l >> 4) + 2u * quarter) << 24) >> 24;
    const float ds = block_half(b + 208u) * float(scale);
    lo = ds * (q0 - 32.0);
    hi = ds * (q1 - 32.0);
  }
}

// ---- Slices: a 32-element block per lane (the CPU drivers' decode) ----
// block_slice(row, s, q, a, c): elements 32s..32s+31 of the row whose bytes
// start at `row`, as w = a·q + c with q[8] the quantized integers, a and c
// per half (.x for elements 0-15, .y for 16-31: Q6_K's scales are per 16).
// A lane then takes a·(q·x) + c·Σx per half: one conversion and one fma per
// element, the block's constants once. Each
// format reads its words once per slice, where dequant8 reads a block's
// header again for every 8 elements (on llvmpipe every read is a gather).
// Slices read 16 bytes at a time through BLOCK_QUAD(i) (the i-th 16 bytes),
// which the includer may define (an RGBA32UI texel view: on llvmpipe a
// fetch costs about the same whatever its width) and otherwise is four
// BLOCK_WORDs. Q4_K and Q5_K blocks are whole 16-byte units; the other
// formats' fields are 2-byte aligned: slice_load takes the words from b & ~3
// out of the quads around them, and a 4-byte field at an even offset r is
// shifted out of one or two words.
#ifndef BLOCK_QUAD
#define BLOCK_QUAD(i) uvec4(BLOCK_WORD(4u * (i)), BLOCK_WORD(4u * (i) + 1u), BLOCK_WORD(4u * (i) + 2u), BLOCK_WORD(4u * (i) + 3u))
#endif
uint slice_w[9];
// The n (≤ 9) words from byte b & ~3 on, from the quads that hold them.
void slice_load(uint b, uint n) {
  const uint first = b >> 4, skip = (b >> 2) & 3u, quads = (n + 6u) / 4u;
  uint w[12];
  [[unroll]] for (uint k = 0; k < 3u; ++k) {
    if (k >= quads) break;
    const uvec4 t = BLOCK_QUAD(first + k);
    w[4u * k] = t.x;
    w[4u * k + 1u] = t.y;
    w[4u * k + 2u] = t.z;
    w[4u * k + 3u] = t.w;
  }
  [[unroll]] for (uint i = 0; i < 9u; ++i) {
    if (i >= n) break;
    slice_w[i] = skip == 0u ? w[i] : skip == 1u ? w[i + 1u] : skip == 2u ? w[i + 2u] : w[i + 3u];
  }
}
// The 4 bytes at b + r (b even, r an even constant) of the loaded words.
uint slice_u32(uint b, uint r) {
  const uint i = r >> 2;
  const bool aligned = ((b & 2u) != 0u) == ((r & 2u) != 0u);
  if ((r & 2u) != 0u) return aligned ? slice_w[i + 1u] : (slice_w[i] >> 16) | (slice_w[i + 1u] << 16);
  return aligned ? slice_w[i] : (slice_w[i] >> 16) | (slice_w[i + 1u] << 16);
}
float slice_half(uint b, uint r) { return unpackHalf2x16(slice_u32(b, r)).x; }

void block_slice(uint row, uint s, out vec4 q[8], out vec2 a, out vec2 c) {
  if (FMT == 8u) {  // Q8_0: d, qs[32]
    const uint b = row + 34u * s;
    slice_load(b, 9u);
    a = vec2(slice_half(b, 0u));
    c = vec2(0.0);
    [[unroll]] for (uint i = 0; i < 8u; ++i) q[i] = block_s8(slice_u32(b, 2u + 4u * i));
  } else if (FMT == 2u || FMT == 3u || FMT == 6u || FMT == 7u) {
    // Q4_0, Q4_1, Q5_0, Q5_1 (see dequant8): element i < 16 the low nibble of
    // qs[i], i + 16 its high nibble, plus 16·bit i of qh for the Q5 forms.
    const bool has_min = FMT == 3u || FMT == 7u, five = FMT == 6u || FMT == 7u;
    const uint head = has_min ? 4u : 2u, at = head + (five ? 4u : 0u);
    const uint b = row + BLOCK_BYTES * s;
    slice_load(b, (at + 12u) / 4u + 2u);
    const float d = slice_half(b, 0u);
    a = vec2(d);
    c = vec2(has_min ? slice_half(b, 2u) : (five ? -16.0 : -8.0) * d);
    const uint qh = five ? slice_u32(b, head) : 0u;
    [[unroll]] for (uint i = 0; i < 4u; ++i) {
      const uint u = slice_u32(b, at + 4u * i);
      q[i] = block_lo4(u);
      q[i + 4u] = block_hi4(u);
      if (five) {
        q[i] += 16.0 * block_bits(qh, 4u * i);
        q[i + 4u] += 16.0 * block_bits(qh, 16u + 4u * i);
      }
    }
  } else if (FMT == 12u || FMT == 13u) {
    // Q4_K, Q5_K: sub-block `sub` of super-block `sb` is the low (even sub)
    // or high nibbles of the 32 bytes of group sub / 2 (see dequant8).
    const uint sb = s >> 3, sub = s & 7u, quads = BLOCK_BYTES / 16u;
    const uint first = row / 16u + quads * sb;
    const uvec4 h = BLOCK_QUAD(first);
    const uvec3 sc = h.yzw;
    // get_scale_min_k4 on the 12 bytes of sc; byte j is (sc[j / 4] >> 8·(j % 4)) & 255.
#define SC_BYTE(j) ((sc[(j) >> 2] >> (((j) & 3u) << 3)) & 255u)
    float scale, mn;
    if (sub < 4u) {
      scale = float(SC_BYTE(sub) & 63u);
      mn = float(SC_BYTE(sub + 4u) & 63u);
    } else {
      const uint packed = SC_BYTE(sub + 4u);
      scale = float((packed & 15u) | ((SC_BYTE(sub - 4u) >> 6) << 4));
      mn = float((packed >> 4) | ((SC_BYTE(sub) >> 6) << 4));
    }
#undef SC_BYTE
    a = vec2(unpackHalf2x16(h.x).x * scale);
    c = vec2(-unpackHalf2x16(h.x).y * mn);
    const uint qs = first + (FMT == 12u ? 1u : 3u) + 2u * (sub >> 1), shift = (sub & 1u) << 2;
    const uvec4 u0 = BLOCK_QUAD(qs), u1 = BLOCK_QUAD(qs + 1u);
    [[unroll]] for (uint i = 0; i < 4u; ++i) {
      q[i] = block_lo4(u0[i] >> shift);
      q[i + 4u] = block_lo4(u1[i] >> shift);
    }
    if (FMT == 13u) {  // the fifth bit of element l: bit sub of qh[l]
      const uvec4 h0 = BLOCK_QUAD(first + 1u), h1 = BLOCK_QUAD(first + 2u);
      [[unroll]] for (uint i = 0; i < 4u; ++i) {
        q[i] += 16.0 * block_bit_of_bytes(h0[i], sub);
        q[i + 4u] += 16.0 * block_bit_of_bytes(h1[i], sub);
      }
    }
  } else if (FMT == 10u || FMT == 11u) {
    // Q2_K, Q3_K (see dequant8): slice t of a super-block is quarter t % 4 of
    // half t / 4, its halves sub-blocks 2t and 2t + 1. Q3_K's q − 4 is taken
    // as q + 4·bit with c = −4a.
    const uint b = row + BLOCK_BYTES * (s >> 3), t = s & 7u, half_ = t >> 2, crumb = 2u * (t & 3u);
    const uint qs = b + (FMT == 10u ? 16u : 32u) + 32u * half_;
    slice_load(qs, 9u);
    [[unroll]] for (uint i = 0; i < 8u; ++i) q[i] = block_crumbs(slice_u32(qs, 4u * i), crumb);
    if (FMT == 10u) {
      const uint sc = block_u32(b + 2u * t);
      const vec2 dm = unpackHalf2x16(block_u32(b + 80u));
      a = dm.x * vec2(sc & 15u, (sc >> 8) & 15u);
      c = -dm.y * vec2((sc >> 4) & 15u, (sc >> 12) & 15u);
    } else {
      slice_load(b, 9u);
      [[unroll]] for (uint i = 0; i < 8u; ++i) q[i] += 4.0 * block_bit_of_bytes(slice_u32(b, 4u * i), t);
      // The 12 bytes of scales and d (bytes 96 to 109) in two 16-byte loads.
      const uint sb = b + 96u;
      slice_load(sb, 5u);
      const uvec3 scales = uvec3(slice_u32(sb, 0u), slice_u32(sb, 4u), slice_u32(sb, 8u));
      a = unpackHalf2x16(slice_u32(sb, 12u)).x * vec2(block_q3k_scale(scales, 2u * t), block_q3k_scale(scales, 2u * t + 1u));
      c = -4.0 * a;
    }
  } else if (FMT == 20u || FMT == 23u) {
    // IQ4_NL, IQ4_XS (see dequant8): slice s is block s (IQ4_NL) or
    // sub-block s % 8 of super-block s / 8: 16 bytes of codes, low nibbles
    // the first 16 elements, high nibbles the rest.
    const uint b = row + BLOCK_BYTES * (FMT == 20u ? s : s >> 3), t = s & 7u;
    const uint qs = b + (FMT == 20u ? 2u : 8u + 16u * t);
    slice_load(qs, 5u);
    [[unroll]] for (uint i = 0; i < 4u; ++i) {
      const uint u = slice_u32(qs, 4u * i);
      q[i] = block_iq4(u, 0u);
      q[i + 4u] = block_iq4(u, 4u);
    }
    a = vec2(FMT == 20u ? block_half(b) : block_half(b) * block_iq4xs_scale(b, t));
    c = vec2(0.0);
  } else {
    // Q6_K (see dequant8): slice t of a super-block is quarter t % 4 of half
    // t / 4: 32 bytes of ql (low or high nibbles), 32 of qh (bits 2·quarter),
    // two int8 scales (elements 0-15, 16-31), then d. The 6-bit values are
    // put together four per word before they are split into floats.
    const uint b = row + 210u * (s >> 3), t = s & 7u, half_ = t >> 2, quarter = t & 3u;
    const uint ql = b + 64u * half_ + 32u * (quarter & 1u), qhb = b + 128u + 32u * half_;
    const uint nib = quarter < 2u ? 0u : 4u, crumb = 2u * quarter;
    uint six[8];
    slice_load(ql, 9u);
    [[unroll]] for (uint i = 0; i < 8u; ++i) six[i] = (slice_u32(ql, 4u * i) >> nib) & 0x0f0f0f0fu;
    slice_load(qhb, 9u);
    [[unroll]] for (uint i = 0; i < 8u; ++i) six[i] |= ((slice_u32(qhb, 4u * i) >> crumb) & 0x03030303u) << 4;
    const uint scales = block_u32(b + 192u + 8u * half_ + 2u * quarter);
    a = block_half(b + 208u) * vec2(int(scales << 24) >> 24, int(scales << 16) >> 24);
    c = -32.0 * a;
    [[unroll]] for (uint i = 0; i < 8u; ++i) q[i] = vec4(uvec4(six[i], six[i] >> 8, six[i] >> 16, six[i] >> 24) & 255u);
  }
}

#endif
