#version 450
#extension GL_GOOGLE_include_directive : require
// Variants (the build compiles one SPIR-V module per line: name, then defines):
// variant: qmatmul_dot_rows ROWS
// variant: qmatmul_dot_rows_f16 ROWS X_T=F16 Y_T=F16
// variant: qmatmul_dot_rows_f16_y32 ROWS X_T=F16
// variant: qmatmul_dot_rows_bf16 ROWS X_T=BF16 Y_T=BF16
// variant: qmatmul_dot_rows_bf16_y32 ROWS X_T=BF16
// variant: qmatmul_dot_tiled
// variant: qmatmul_dot_tiled_f16 X_T=F16 Y_T=F16
// variant: qmatmul_dot_tiled_f16_y32 X_T=F16
// variant: qmatmul_dot_tiled_bf16 X_T=BF16 Y_T=BF16
// variant: qmatmul_dot_tiled_bf16_y32 X_T=BF16
// variant: qmatmul_dot_rows_cpu ROWS_CPU TEXEL
// variant: qmatmul_dot_rows_cpu_f16 ROWS_CPU TEXEL X_T=F16 Y_T=F16
// variant: qmatmul_dot_rows_cpu_f16_y32 ROWS_CPU TEXEL X_T=F16
// variant: qmatmul_dot_rows_cpu_bf16 ROWS_CPU TEXEL X_T=BF16 Y_T=BF16
// variant: qmatmul_dot_rows_cpu_bf16_y32 ROWS_CPU TEXEL X_T=BF16
// variant: qmatmul_dot_cpu REGISTER_TILED TEXEL
// variant: qmatmul_dot_cpu_f16 REGISTER_TILED TEXEL X_T=F16 Y_T=F16
// variant: qmatmul_dot_cpu_f16_y32 REGISTER_TILED TEXEL X_T=F16
// variant: qmatmul_dot_cpu_bf16 REGISTER_TILED TEXEL X_T=BF16 Y_T=BF16
// variant: qmatmul_dot_cpu_bf16_y32 REGISTER_TILED TEXEL X_T=BF16
#extension GL_KHR_shader_subgroup_arithmetic : enable
#extension GL_EXT_spirv_intrinsics : require
// Y[m, col0 + n] = Σ_b d_w[n, b]·d_x[m, b]·Σ_{i<32} q_w[n, 32b + i]·q_x[m, 32b + i]
// (+ bias) (gated) (+ R): the int8-activation product. X comes quantized per
// 32-element block by quantize_q8.comp (an fp32 scale d_x = max|x|/127 and
// q_x = round(x/d_x), int8, 4 per word); W is Q8_0 (fp16 d_w, int8 q_w) or
// Q4_0 (fp16 d_w, q_w = nibble − 8) read as stored. Each block's Σ q_w·q_x
// is exact in int32 (at most 32·127·127), from 8 packed 4×int8 dot products
// (on CPU drivers the same sums by two byte products per 32-bit multiply: see
// block_dot); the scales, the sum over blocks and the epilogue are fp32.
//
// Error bound against X·Wᵀ on the dequantized weights w = d_w·q_w: per
// element |x − d_x·q_x| ≤ d_x/2 = max|x_block|/254, so per output
//   |Δy| ≤ Σ_blocks (max|x_b|/254)·Σ_{i∈b} |w_i|
// plus fp32 rounding (of x/d_x, and of the per-block products and the sum).
//
// The format is specialization constant 1 (ggml's type id: Q4_0 2, Q8_0 8).
// The epilogue is qmatmul.comp's: bias, residual and the gate's scores are
// indexed by the full column col0 + n, y rows ldy apart.
//
// X's quantized words (ops::quantize_q8's layout: row m's words at
// m·K/4.., the scales' fp32 bits from word d_at, block b of row m at
// d_at + m·K/32 + b) are read as 16-byte quads: a uvec4 storage buffer, or
// with TEXEL an RGBA32UI texel view. W: words of a storage buffer, or with
// TEXEL an RGBA32UI view read a quad at a time (blocks.glsl's slice_load:
// Q8_0's 34-byte and Q4_0's 18-byte blocks are only 2-byte aligned).
//
// GPUs: ROWS (≤ 8 rows: decode) has one subgroup per output column, its lanes
// on consecutive blocks; otherwise tiles of TM × TN outputs, each block step
// putting TN blocks of W and TM of X in shared memory.
// CPU drivers (TEXEL; one 8-lane subgroup per workgroup, no shared memory, as
// qmatmul.comp's): ROWS_CPU gives the subgroup NB columns and MR rows, lane l
// on blocks l, l + 8, ...; REGISTER_TILED an RM × 8·RN tile, each lane RN
// columns, X's rows shuffled across the lanes one block (8 words and a scale)
// at a time. X's bytes are split into pairs once per block and row, W's per
// block and column (block_dot).
#include "common.glsl"
#include "storage.glsl"
#ifndef X_T
#define X_T F32
#endif
#ifndef Y_T
#define Y_T F32
#endif
layout(constant_id = 1) const uint FMT = 8;

// GL_EXT_integer_dot_product's dotPacked4x8EXT (OpSDot on 32-bit words as
// PackedVectorFormat4x8Bit): Debian 12's glslang (12.0) does not know the
// extension, so it is declared by its SPIR-V opcode (capabilities DotProduct,
// DotProductInput4x8BitPacked). The block's 8 products are added without
// saturation (dotPacked4x8AccSatEXT, OpSDotAccSat): the sum cannot overflow,
// and a driver without the instruction (lavapipe) lowers the saturating add
// to a compare and select per step.
spirv_instruction(extensions = ["SPV_KHR_integer_dot_product"], capabilities = [6019, 6018], id = 4450)
int sdot_packed(uint a, uint b, spirv_literal int packed_format);
#define dotPacked4x8(a, b) sdot_packed(a, b, 0)

#ifdef TEXEL
layout(binding = 0) uniform usamplerBuffer xq_tex;
#define XQUAD(i) texelFetch(xq_tex, int(i))
layout(binding = 1) uniform usamplerBuffer w_tex;
#define BLOCK_QUAD(i) texelFetch(w_tex, int(i))
#define BLOCK_WORD(i) texelFetch(w_tex, int((i) >> 2))[(i) & 3u]
#else
layout(std430, binding = 0) readonly buffer xq_buf { uvec4 xq4[]; };
#define XQUAD(i) xq4[i]
layout(std430, binding = 1) readonly buffer w_buf { uint w_words[]; };
#define BLOCK_WORD(i) w_words[i]
#endif
RO(2, bias, F32)
RO(3, res, F32)
RW(4, y, Y_T)
RO(5, gate, X_T)

#include "params.glsl"
struct Push {
  uint M, N, K;
  uint row_bytes;
  uint d_at;  // the word of X's first scale
  uint ldy, ldr;
  uint has_bias, has_residual;
  uint col0;
  uint gate_act, gate_combine, gate_at, ldg;
};
PARAMS(Push)
#define GATE_ACT_ONLY
#include "gate.glsl"
#include "blocks.glsl"

void store(uint m, uint n, float v) {
  const uint c = p.col0 + n;
  if (p.has_bias != 0) v += bias_ld(c);
  if (p.gate_act != 0) v = gate_apply(p.gate_combine, v, gate_act(p.gate_act - 1, gate_ld(p.gate_at + m * p.ldg + c)));
  if (p.has_residual != 0) v += res_ld(m * p.ldr + c);
  y_st(m * p.ldy + c, v);
}

// Four nibbles (one per byte, 0..15) less 8 as signed bytes, without borrows
// between the bytes.
uint nibbles_less_8(uint v) { return ((v | 0x80808080u) - 0x08080808u) ^ 0x80808080u; }

// Block s of the W row whose bytes start at `row`: its scale d_w, and its 32
// int8 values q_w, element 4e + k in byte k of q[e] (X's packing).
float wblock(uint row, uint s, out uint q[8]) {
  const uint b = row + BLOCK_BYTES * s;
  const uint words = FMT == 8u ? 9u : 5u;  // the words from b & ~3 that hold the block
#ifdef TEXEL
  slice_load(b, words);
#else
  [[unroll]] for (uint i = 0; i < 9u; ++i) {
    if (i >= words) break;
    slice_w[i] = BLOCK_WORD((b >> 2) + i);
  }
#endif
  if (FMT == 8u) {
    [[unroll]] for (uint e = 0; e < 8u; ++e) q[e] = slice_u32(b, 2u + 4u * e);
  } else {
    // Q4_0: element i < 16 the low nibble of qs[i], i + 16 its high nibble.
    [[unroll]] for (uint e = 0; e < 4u; ++e) {
      const uint u = slice_u32(b, 2u + 4u * e);
      q[e] = nibbles_less_8(u & 0x0f0f0f0fu);
      q[e + 4u] = nibbles_less_8((u >> 4) & 0x0f0f0f0fu);
    }
  }
  return slice_half(b, 0u);
}

// X's block as block_dot takes it, and Σ over the block of q_w·q_x.
#ifdef TEXEL
// CPU drivers: lavapipe reports the packed dot product unaccelerated and
// lowers each OpSDot to four byte extracts of both operands, four multiplies
// and adds. Here X's bytes are extracted once per block and row, for all the
// columns they meet, as pairs x0·2¹⁶ + x2 and x1·2¹⁶ + x3 (exact int values),
// and each W word's pairs w0 + w2·2¹⁶, w1 + w3·2¹⁶ are multiplied by them:
//   (w0 + w2·2¹⁶)(x0·2¹⁶ + x2) ≡ (w0·x0 + w2·x2)·2¹⁶ + w0·x2   (mod 2³²)
// with |w0·x2| < 2¹⁵ and |w0·x0 + w2·x2| ≤ 2·127² < 2¹⁵, so adding 2¹⁵ and
// shifting right by 16 leaves w0·x0 + w2·x2 exactly: two byte products per
// 32-bit multiply, the same integer sum as dotPacked4x8. On lavapipe 5–28 %
// faster than OpSDot (and than the fp32 product) for 1 to 64 rows.
struct XBlock {
  ivec2 pairs[8];
};
XBlock x_prepare(uvec4 xa, uvec4 xb) {
  XBlock x;
  [[unroll]] for (uint e = 0; e < 8u; ++e) {
    const uint v = e < 4u ? xa[e] : xb[e - 4u];
    const ivec4 b = ivec4(uvec4(v << 24, v << 16, v << 8, v)) >> 24;
    x.pairs[e] = ivec2((b.x << 16) + b.z, (b.y << 16) + b.w);
  }
  return x;
}
int word_dot(uint w, ivec2 x) {
  const int even = int(((w & 0x00ff00ffu) ^ 0x00800080u) - 0x00800080u);  // w0 + w2·2¹⁶
  const int odd = int((((w >> 8) & 0x00ff00ffu) ^ 0x00800080u) - 0x00800080u);
  return ((even * x.x + 0x8000) >> 16) + ((odd * x.y + 0x8000) >> 16);
}
int block_dot(uint q[8], XBlock x) {
  return ((word_dot(q[0], x.pairs[0]) + word_dot(q[1], x.pairs[1])) + (word_dot(q[2], x.pairs[2]) + word_dot(q[3], x.pairs[3]))) +
         ((word_dot(q[4], x.pairs[4]) + word_dot(q[5], x.pairs[5])) + (word_dot(q[6], x.pairs[6]) + word_dot(q[7], x.pairs[7])));
}
#else
struct XBlock {
  uvec4 a, b;
};
XBlock x_prepare(uvec4 xa, uvec4 xb) { return XBlock(xa, xb); }
int block_dot(uint q[8], XBlock x) {
  return ((dotPacked4x8(q[0], x.a.x) + dotPacked4x8(q[1], x.a.y)) + (dotPacked4x8(q[2], x.a.z) + dotPacked4x8(q[3], x.a.w))) +
         ((dotPacked4x8(q[4], x.b.x) + dotPacked4x8(q[5], x.b.y)) + (dotPacked4x8(q[6], x.b.z) + dotPacked4x8(q[7], x.b.w)));
}
#endif

// X's block s of row m: the two quads of its values and its scale.
void xblock(uint m, uint s, out uvec4 xa, out uvec4 xb, out float xd) {
  const uint t = m * (p.K / 16u) + 2u * s;
  xa = XQUAD(t);
  xb = XQUAD(t + 1u);
  const uint di = p.d_at + m * (p.K / 32u) + s;
  xd = uintBitsToFloat(XQUAD(di >> 2)[di & 3u]);
}

#if defined(ROWS_CPU)
layout(constant_id = 2) const uint MR = 1;  // rows (M ≤ MR ≤ 8)
layout(constant_id = 3) const uint NB = 8;  // columns per workgroup
void main() {
  LOAD_PARAMS;
  const uint n0 = (gl_WorkGroupID.x + gl_WorkGroupID.y * gl_NumWorkGroups.x) * NB;
  if (n0 >= p.N) return;  // the grid is split in 2-D past 65535 groups
  uint wrow[NB];
  [[unroll]] for (uint j = 0; j < NB; ++j) wrow[j] = min(n0 + j, p.N - 1) * p.row_bytes;
  float acc[MR][NB];
  [[unroll]] for (uint i = 0; i < MR; ++i)
    [[unroll]] for (uint j = 0; j < NB; ++j) acc[i][j] = 0.0;
  for (uint s = gl_SubgroupInvocationID; s < p.K / 32u; s += 8u) {
    XBlock xs[MR];
    float xd[MR];
    [[unroll]] for (uint i = 0; i < MR; ++i) {
      uvec4 xa, xb;
      xblock(min(i, p.M - 1), s, xa, xb, xd[i]);
      xs[i] = x_prepare(xa, xb);
    }
    [[unroll]] for (uint j = 0; j < NB; ++j) {
      uint q[8];
      const float dw = wblock(wrow[j], s, q);
      [[unroll]] for (uint i = 0; i < MR; ++i) acc[i][j] += dw * xd[i] * float(block_dot(q, xs[i]));
    }
  }
  [[unroll]] for (uint i = 0; i < MR; ++i)
    [[unroll]] for (uint j = 0; j < NB; ++j) acc[i][j] = subgroupAdd(acc[i][j]);
  if (gl_SubgroupInvocationID != 0) return;
  [[unroll]] for (uint i = 0; i < MR; ++i) {
    if (i >= p.M) break;
    [[unroll]] for (uint j = 0; j < NB; ++j) {
      if (n0 + j >= p.N) break;
      store(i, n0 + j, acc[i][j]);
    }
  }
}
#elif defined(REGISTER_TILED)
#extension GL_KHR_shader_subgroup_shuffle : require
layout(constant_id = 2) const uint RM = 32;  // a multiple of 8
layout(constant_id = 3) const uint RN = 8;
float acc[RM][RN];
void main() {
  LOAD_PARAMS;
  const uint n0 = gl_WorkGroupID.x * 8u * RN + gl_SubgroupInvocationID * RN;
  uint wrow[RN];
  [[unroll]] for (uint j = 0; j < RN; ++j) wrow[j] = min(n0 + j, p.N - 1) * p.row_bytes;
  // A grid of at most 65535 row blocks steps through taller matrices.
  for (uint m0 = gl_WorkGroupID.y * RM; m0 < p.M; m0 += gl_NumWorkGroups.y * RM) {
    [[unroll]] for (uint i = 0; i < RM; ++i)
      [[unroll]] for (uint j = 0; j < RN; ++j) acc[i][j] = 0.0;
    for (uint s = 0; s < p.K / 32u; ++s) {
      uint wq[RN][8];
      float dw[RN];
      [[unroll]] for (uint j = 0; j < RN; ++j) dw[j] = wblock(wrow[j], s, wq[j]);
      [[unroll]] for (uint g = 0; g < RM / 8u; ++g) {
        // Lane r holds row m0 + 8g + r's block; each row in turn goes to every lane.
        uvec4 xa, xb;
        float xd;
        xblock(min(m0 + 8u * g + gl_SubgroupInvocationID, p.M - 1), s, xa, xb, xd);
        [[unroll]] for (uint r = 0; r < 8u; ++r) {
          const XBlock rx = x_prepare(subgroupShuffle(xa, r), subgroupShuffle(xb, r));
          const float rd = subgroupShuffle(xd, r);
          [[unroll]] for (uint j = 0; j < RN; ++j)
            acc[8u * g + r][j] += dw[j] * rd * float(block_dot(wq[j], rx));
        }
      }
    }
    [[unroll]] for (uint i = 0; i < RM; ++i) {
      const uint m = m0 + i;
      if (m >= p.M) break;
      [[unroll]] for (uint j = 0; j < RN; ++j) {
        const uint n = n0 + j;
        if (n >= p.N) break;
        store(m, n, acc[i][j]);
      }
    }
  }
}
#elif defined(ROWS)
const uint MAX_M = 8;
void main() {
  LOAD_PARAMS;
  const uint n = gl_WorkGroupID.x * gl_NumSubgroups + gl_SubgroupID;
  if (n >= p.N) return;  // whole subgroups leave together
  float acc[MAX_M];
  [[unroll]] for (uint m = 0; m < MAX_M; ++m) acc[m] = 0.0;
  const uint row = n * p.row_bytes;
  for (uint s = gl_SubgroupInvocationID; s < p.K / 32u; s += gl_SubgroupSize) {
    uint q[8];
    const float dw = wblock(row, s, q);
    [[unroll]] for (uint m = 0; m < MAX_M; ++m) {
      if (m >= p.M) break;
      uvec4 xa, xb;
      float xd;
      xblock(m, s, xa, xb, xd);
      acc[m] += dw * xd * float(block_dot(q, x_prepare(xa, xb)));
    }
  }
  [[unroll]] for (uint m = 0; m < MAX_M; ++m) {
    if (m >= p.M) break;
    const float v = subgroupAdd(acc[m]);
    if (subgroupElect()) store(m, n, v);
  }
}
#else
// 256 threads: a 32 × 64 tile, 2 × 4 outputs each; K one block (32) per step,
// threads 0-63 unpacking W's blocks and 64-95 fetching X's into shared memory.
const uint TM = 32, TN = 64, RM = 2, RN = 4;
shared uint wsq[TN][9];  // 8 words of int8 values, then the scale's bits (9: fewer bank conflicts)
shared uint xsq[TM][9];
void main() {
  LOAD_PARAMS;
  const uint t = gl_LocalInvocationID.x;
  const uint m0 = gl_WorkGroupID.y * TM, n0 = gl_WorkGroupID.x * TN;
  const uint tm = (t / (TN / RN)) * RM, tn = (t % (TN / RN)) * RN;
  float acc[RM][RN];
  [[unroll]] for (uint i = 0; i < RM; ++i)
    [[unroll]] for (uint j = 0; j < RN; ++j) acc[i][j] = 0.0;
  for (uint s = 0; s < p.K / 32u; ++s) {
    if (t < TN) {
      uint q[8];
      float d = 0.0;
      if (n0 + t < p.N) {
        d = wblock((n0 + t) * p.row_bytes, s, q);
      } else {
        [[unroll]] for (uint e = 0; e < 8u; ++e) q[e] = 0u;
      }
      [[unroll]] for (uint e = 0; e < 8u; ++e) wsq[t][e] = q[e];
      wsq[t][8] = floatBitsToUint(d);
    } else if (t < TN + TM) {
      const uint r = t - TN;
      uvec4 xa = uvec4(0u), xb = uvec4(0u);
      float xd = 0.0;
      if (m0 + r < p.M) xblock(m0 + r, s, xa, xb, xd);
      [[unroll]] for (uint e = 0; e < 4u; ++e) {
        xsq[r][e] = xa[e];
        xsq[r][4u + e] = xb[e];
      }
      xsq[r][8] = floatBitsToUint(xd);
    }
    barrier();
    uint wq[RN][8];
    [[unroll]] for (uint j = 0; j < RN; ++j)
      [[unroll]] for (uint e = 0; e < 8u; ++e) wq[j][e] = wsq[tn + j][e];
    [[unroll]] for (uint i = 0; i < RM; ++i) {
      const XBlock x = x_prepare(uvec4(xsq[tm + i][0], xsq[tm + i][1], xsq[tm + i][2], xsq[tm + i][3]),
                                 uvec4(xsq[tm + i][4], xsq[tm + i][5], xsq[tm + i][6], xsq[tm + i][7]));
      const float xd = uintBitsToFloat(xsq[tm + i][8]);
      [[unroll]] for (uint j = 0; j < RN; ++j)
        acc[i][j] += xd * uintBitsToFloat(wsq[tn + j][8]) * float(block_dot(wq[j], x));
    }
    barrier();
  }
  [[unroll]] for (uint i = 0; i < RM; ++i)
    [[unroll]] for (uint j = 0; j < RN; ++j)
      if (m0 + tm + i < p.M && n0 + tn + j < p.N) store(m0 + tm + i, n0 + tn + j, acc[i][j]);
}
#endif
