#version 450
#extension GL_GOOGLE_include_directive : require
// Variants (the build compiles one SPIR-V module per line: name, then defines):
// variant: qmatmul_rows ROWS
// variant: qmatmul_rows_f16 ROWS X_T=F16 Y_T=F16
// variant: qmatmul_rows_f16_y32 ROWS X_T=F16
// variant: qmatmul_rows_bf16 ROWS X_T=BF16 Y_T=BF16
// variant: qmatmul_rows_bf16_y32 ROWS X_T=BF16
// variant: qmatmul_tiled
// variant: qmatmul_tiled_f16 X_T=F16 Y_T=F16
// variant: qmatmul_tiled_f16_y32 X_T=F16
// variant: qmatmul_tiled_bf16 X_T=BF16 Y_T=BF16
// variant: qmatmul_tiled_bf16_y32 X_T=BF16
// variant: qmatmul_rows_cpu ROWS TEXEL
// variant: qmatmul_rows_cpu_f16 ROWS TEXEL X_T=F16 Y_T=F16
// variant: qmatmul_rows_cpu_f16_y32 ROWS TEXEL X_T=F16
// variant: qmatmul_rows_cpu_bf16 ROWS TEXEL X_T=BF16 Y_T=BF16
// variant: qmatmul_rows_cpu_bf16_y32 ROWS TEXEL X_T=BF16
// variant: qmatmul_tiled_cpu TEXEL
// variant: qmatmul_tiled_cpu_f16 TEXEL X_T=F16 Y_T=F16
// variant: qmatmul_tiled_cpu_f16_y32 TEXEL X_T=F16
// variant: qmatmul_tiled_cpu_bf16 TEXEL X_T=BF16 Y_T=BF16
// variant: qmatmul_tiled_cpu_bf16_y32 TEXEL X_T=BF16
#extension GL_KHR_shader_subgroup_arithmetic : enable
// Y[m, col0 + n] = X[m, :]·W[n, :]ᵀ (+ bias) (gated) (+ R) with W in one of
// ggml's block formats, read as stored (a GGUF tensor's bytes, uploaded as
// they are) and dequantized in registers: the weights cross memory once, at
// 4.5–8.5 bits per element instead of 16. Arithmetic is fp32.
//
// The format is specialization constant 1 (ggml's type id: F32 0, F16 1,
// Q4_0 2, Q4_1 3, Q5_0 6, Q5_1 7, Q8_0 8, Q4_K 12, Q5_K 13, Q6_K 14, BF16
// 30), so the driver folds the format's branch away and one module serves
// all. A fused projection whose parts differ in format (a Q4_K_M file's
// Q4_K q/k beside a Q6_K v) runs one dispatch per part, each writing its
// columns from col0 (bias, residual and gate indexed alike).
//
// W is bound as 32-bit words (a storage buffer, or an R32_UINT texel view
// with TEXEL: llvmpipe gathers texels, where it loops over the lanes for a
// storage load); blocks of 18, 22, 34 or 210 bytes are only 2-byte aligned,
// so bytes are shifted out of the words around them. The host pads W by 8
// bytes, so a read past the last block stays inside the buffer.
//
// ROWS (≤ 8 rows of X: decode): one subgroup per output column; its lanes
// take consecutive 8-element chunks of the row. Otherwise tiles of
// TM × TN outputs: each K step of 32 dequantizes TN rows' chunks of W and
// loads TM rows of X into shared memory, then every thread accumulates a
// RM × RN register tile.
#include "common.glsl"
#include "storage.glsl"
#ifndef X_T
#define X_T F32
#endif
#ifndef Y_T
#define Y_T F32
#endif
layout(constant_id = 1) const uint FMT = 8;

IN(0, x, X_T)
#ifdef TEXEL
layout(binding = 1) uniform usamplerBuffer w_tex;
uint wword(uint i) { return texelFetch(w_tex, int(i)).x; }
#else
layout(std430, binding = 1) readonly buffer w_buf { uint w_words[]; };
uint wword(uint i) { return w_words[i]; }
#endif
RO(2, bias, F32)
RO(3, res, F32)
RW(4, y, Y_T)
RO(5, gate, X_T)

#include "params.glsl"
struct Push {
  uint M, N, K;
  uint ldx, row_bytes, ldy, ldr;
  uint has_bias, has_residual;
  uint col0;  // the first column of Y (and of bias, R, gate) this dispatch writes
  uint gate_act, gate_combine, gate_at, ldg;
};
PARAMS(Push)
#define GATE_ACT_ONLY
#include "gate.glsl"

// ---- bytes of W
uint wbyte(uint b) { return (wword(b >> 2) >> ((b & 3u) * 8u)) & 0xffu; }
float wf16(uint b) { return unpackHalf2x16(wword(b >> 2) >> ((b & 2u) * 8u)).x; }  // b even
// The 4 bytes from b, any alignment.
uint wu32(uint b) {
  const uint s = (b & 3u) * 8u, lo = wword(b >> 2);
  return s == 0u ? lo : (lo >> s) | (wword((b >> 2) + 1u) << (32u - s));
}
vec4 lo_nibbles(uint u) { return vec4(u & 15u, (u >> 8) & 15u, (u >> 16) & 15u, u >> 24 & 15u); }
vec4 hi_nibbles(uint u) { return vec4((u >> 4) & 15u, (u >> 12) & 15u, (u >> 20) & 15u, u >> 28); }
vec4 bytes4(uint u) { return vec4(u & 255u, (u >> 8) & 255u, (u >> 16) & 255u, u >> 24); }
vec4 sbytes4(uint u) { return vec4(ivec4(u << 24, u << 16, u << 8, u) >> 24); }
// Bits i..i+3 of `h`, each as 0 or `one`.
vec4 bits4(uint h, uint i, float one) { return vec4((h >> i) & 1u, (h >> (i + 1u)) & 1u, (h >> (i + 2u)) & 1u, (h >> (i + 3u)) & 1u) * one; }
// Pairs of 2-bit fields at `shift` of each byte of u.
vec4 crumbs4(uint u, uint shift) { return vec4((u >> shift) & 3u, (u >> (8u + shift)) & 3u, (u >> (16u + shift)) & 3u, (u >> (24u + shift)) & 3u); }

// Elements per block and bytes per block of the format.
const uint QK = FMT == 0u || FMT == 1u || FMT == 30u ? 8u : FMT >= 12u && FMT <= 14u ? 256u : 32u;
const uint BB = FMT == 0u ? 32u : FMT == 1u || FMT == 30u ? 16u : FMT == 8u ? 34u : FMT == 2u ? 18u :
                FMT == 3u ? 20u : FMT == 6u ? 22u : FMT == 7u ? 24u : FMT == 12u ? 144u : FMT == 13u ? 176u : 210u;

// A k-quant sub-block's 6-bit scale and min (ggml's get_scale_min_k4) from
// the 12 bytes at `at`.
void scale_min_k4(uint at, uint is, out float sc, out float mn) {
  if (is < 4u) {
    sc = float(wbyte(at + is) & 63u);
    mn = float(wbyte(at + is + 4u) & 63u);
  } else {
    const uint e = wbyte(at + is + 4u);
    sc = float((e & 15u) | ((wbyte(at + is - 4u) >> 6) << 4));
    mn = float((e >> 4) | ((wbyte(at + is) >> 6) << 4));
  }
}

// Elements 8c..8c+7 of the row whose bytes start at `row`, as lo and hi.
void dequant8(uint row, uint c, out vec4 lo, out vec4 hi) {
  const uint b = row + (c / (QK / 8u)) * BB, j = c % (QK / 8u);
  if (FMT == 0u) {  // F32
    lo = uintBitsToFloat(uvec4(wword((b >> 2)), wword((b >> 2) + 1u), wword((b >> 2) + 2u), wword((b >> 2) + 3u)));
    hi = uintBitsToFloat(uvec4(wword((b >> 2) + 4u), wword((b >> 2) + 5u), wword((b >> 2) + 6u), wword((b >> 2) + 7u)));
  } else if (FMT == 1u) {  // F16
    lo = vec4(unpackHalf2x16(wword(b >> 2)), unpackHalf2x16(wword((b >> 2) + 1u)));
    hi = vec4(unpackHalf2x16(wword((b >> 2) + 2u)), unpackHalf2x16(wword((b >> 2) + 3u)));
  } else if (FMT == 30u) {  // BF16
    const uvec4 u = uvec4(wword(b >> 2), wword((b >> 2) + 1u), wword((b >> 2) + 2u), wword((b >> 2) + 3u));
    lo = vec4(uintBitsToFloat(u.x << 16), uintBitsToFloat(u.x & 0xffff0000u), uintBitsToFloat(u.y << 16), uintBitsToFloat(u.y & 0xffff0000u));
    hi = vec4(uintBitsToFloat(u.z << 16), uintBitsToFloat(u.z & 0xffff0000u), uintBitsToFloat(u.w << 16), uintBitsToFloat(u.w & 0xffff0000u));
  } else if (FMT == 8u) {  // Q8_0: d, 32 × int8
    const float d = wf16(b);
    lo = d * sbytes4(wu32(b + 2u + 8u * j));
    hi = d * sbytes4(wu32(b + 6u + 8u * j));
  } else if (FMT == 2u || FMT == 3u) {  // Q4_0: d, nibbles (byte i: element i low, i + 16 high) − 8; Q4_1: d·q + m
    const uint qs = b + (FMT == 2u ? 2u : 4u) + 8u * (j & 1u);
    const uint u0 = wu32(qs), u1 = wu32(qs + 4u);
    const vec4 q0 = j < 2u ? lo_nibbles(u0) : hi_nibbles(u0), q1 = j < 2u ? lo_nibbles(u1) : hi_nibbles(u1);
    const float d = wf16(b);
    if (FMT == 2u) {
      lo = d * (q0 - 8.0);
      hi = d * (q1 - 8.0);
    } else {
      const float m = wf16(b + 2u);
      lo = d * q0 + m;
      hi = d * q1 + m;
    }
  } else if (FMT == 6u || FMT == 7u) {  // Q5_0: d, qh (bit i: element i's fifth bit), nibbles; − 16. Q5_1: d·q + m
    const uint hb = b + (FMT == 6u ? 2u : 4u), qs = hb + 4u + 8u * (j & 1u);
    const uint qh = wu32(hb), u0 = wu32(qs), u1 = wu32(qs + 4u);
    const vec4 q0 = (j < 2u ? lo_nibbles(u0) : hi_nibbles(u0)) + bits4(qh, 8u * j, 16.0);
    const vec4 q1 = (j < 2u ? lo_nibbles(u1) : hi_nibbles(u1)) + bits4(qh, 8u * j + 4u, 16.0);
    const float d = wf16(b);
    if (FMT == 6u) {
      lo = d * (q0 - 16.0);
      hi = d * (q1 - 16.0);
    } else {
      const float m = wf16(b + 2u);
      lo = d * q0 + m;
      hi = d * q1 + m;
    }
  } else if (FMT == 12u || FMT == 13u) {  // Q4_K / Q5_K: 8 sub-blocks of 32, d·sc·q − dmin·m
    // Group g of 64 elements: low nibbles of its 32 bytes are sub-block 2g, high 2g + 1.
    const uint g = j / 8u, h = (j / 4u) & 1u, l = (j & 3u) * 8u;
    float sc, mn;
    scale_min_k4(b + 4u, 2u * g + h, sc, mn);
    const float d1 = wf16(b) * sc, m1 = wf16(b + 2u) * mn;
    const uint qs = b + (FMT == 12u ? 16u : 48u) + 32u * g + l;
    const uint u0 = wu32(qs), u1 = wu32(qs + 4u);
    vec4 q0 = h == 0u ? lo_nibbles(u0) : hi_nibbles(u0), q1 = h == 0u ? lo_nibbles(u1) : hi_nibbles(u1);
    if (FMT == 13u) {  // qh[l]: bit 2g + h is element l's fifth bit in group g
      const uint bit = 2u * g + h, h0 = wu32(b + 16u + l), h1 = wu32(b + 20u + l);
      q0 += 16.0 * vec4((h0 >> bit) & 1u, (h0 >> (8u + bit)) & 1u, (h0 >> (16u + bit)) & 1u, (h0 >> (24u + bit)) & 1u);
      q1 += 16.0 * vec4((h1 >> bit) & 1u, (h1 >> (8u + bit)) & 1u, (h1 >> (16u + bit)) & 1u, (h1 >> (24u + bit)) & 1u);
    }
    lo = d1 * q0 - m1;
    hi = d1 * q1 - m1;
  } else {  // Q6_K: ql[128], qh[64], int8 scales[16], d; halves of 128, quarters of 32
    const uint half_ = j / 16u, quarter = (j / 4u) & 3u, l = (j & 3u) * 8u;
    const uint ql = b + 64u * half_ + l + (quarter & 1u) * 32u, qh = b + 128u + 32u * half_ + l;
    const uint u0 = wu32(ql), u1 = wu32(ql + 4u), h0 = wu32(qh), h1 = wu32(qh + 4u);
    const vec4 q0 = (quarter < 2u ? lo_nibbles(u0) : hi_nibbles(u0)) + 16.0 * crumbs4(h0, 2u * quarter);
    const vec4 q1 = (quarter < 2u ? lo_nibbles(u1) : hi_nibbles(u1)) + 16.0 * crumbs4(h1, 2u * quarter);
    const uint s = wbyte(b + 192u + 8u * half_ + l / 16u + 2u * quarter);
    const float ds = wf16(b + 208u) * float(int(s << 24) >> 24);
    lo = ds * (q0 - 32.0);
    hi = ds * (q1 - 32.0);
  }
}

void store(uint m, uint n, float v) {
  const uint c = p.col0 + n;
  if (p.has_bias != 0) v += bias_ld(c);
  if (p.gate_act != 0) v = gate_apply(p.gate_combine, v, gate_act(p.gate_act - 1, gate_ld(p.gate_at + m * p.ldg + c)));
  if (p.has_residual != 0) v += res_ld(m * p.ldr + c);
  y_st(m * p.ldy + c, v);
}

#ifdef ROWS
const uint MAX_M = 8;
void main() {
  LOAD_PARAMS;
  const uint n = gl_WorkGroupID.x * gl_NumSubgroups + gl_SubgroupID;
  if (n >= p.N) return;  // whole subgroups leave together
  float acc[MAX_M];
  [[unroll]] for (uint m = 0; m < MAX_M; ++m) acc[m] = 0.0;
  const uint row = n * p.row_bytes;
  for (uint c = gl_SubgroupInvocationID; c < p.K / 8u; c += gl_SubgroupSize) {
    vec4 lo, hi;
    dequant8(row, c, lo, hi);
    [[unroll]] for (uint m = 0; m < MAX_M; ++m) {
      if (m >= p.M) break;
      const uint xi = m * p.ldx + 8u * c;
      acc[m] += dot(lo, vec4(x_ld(xi), x_ld(xi + 1u), x_ld(xi + 2u), x_ld(xi + 3u))) +
                dot(hi, vec4(x_ld(xi + 4u), x_ld(xi + 5u), x_ld(xi + 6u), x_ld(xi + 7u)));
    }
  }
  [[unroll]] for (uint m = 0; m < MAX_M; ++m) {
    if (m >= p.M) break;
    const float v = subgroupAdd(acc[m]);
    if (subgroupElect()) store(m, n, v);
  }
}
#else
// 256 threads: a 32 × 64 tile, 2 × 4 outputs each; K in steps of 32 (4 chunks).
const uint TM = 32, TN = 64, TK = 32, RM = 2, RN = 4;
shared float xs[TM][TK + 1];
shared float ws[TN][TK + 1];
void main() {
  LOAD_PARAMS;
  const uint t = gl_LocalInvocationID.x;
  const uint m0 = gl_WorkGroupID.y * TM, n0 = gl_WorkGroupID.x * TN;
  const uint tm = (t / (TN / RN)) * RM, tn = (t % (TN / RN)) * RN;
  float acc[RM][RN];
  [[unroll]] for (uint i = 0; i < RM; ++i)
    [[unroll]] for (uint j = 0; j < RN; ++j) acc[i][j] = 0.0;
  const uint chunks = p.K / 8u;
  for (uint k0 = 0; k0 < p.K; k0 += TK) {
    {  // thread t dequantizes chunk t % 4 of tile row t / 4 (zeros past N or K)
      const uint r = t / 4u, c = k0 / 8u + (t & 3u);
      vec4 lo = vec4(0.0), hi = vec4(0.0);
      if (n0 + r < p.N && c < chunks) dequant8((n0 + r) * p.row_bytes, c, lo, hi);
      const uint kk = (t & 3u) * 8u;
      [[unroll]] for (uint e = 0; e < 4u; ++e) {
        ws[r][kk + e] = lo[e];
        ws[r][kk + 4u + e] = hi[e];
      }
    }
    [[unroll]] for (uint e = 0; e < TM * TK / 256u; ++e) {
      const uint i = t + 256u * e, r = i / TK, k = i % TK;
      xs[r][k] = m0 + r < p.M && k0 + k < p.K ? x_ld((m0 + r) * p.ldx + k0 + k) : 0.0;
    }
    barrier();
    for (uint k = 0; k < TK; ++k) {
      float a[RM], w[RN];
      [[unroll]] for (uint i = 0; i < RM; ++i) a[i] = xs[tm + i][k];
      [[unroll]] for (uint j = 0; j < RN; ++j) w[j] = ws[tn + j][k];
      [[unroll]] for (uint i = 0; i < RM; ++i)
        [[unroll]] for (uint j = 0; j < RN; ++j) acc[i][j] = fma(a[i], w[j], acc[i][j]);
    }
    barrier();
  }
  [[unroll]] for (uint i = 0; i < RM; ++i)
    [[unroll]] for (uint j = 0; j < RN; ++j)
      if (m0 + tm + i < p.M && n0 + tn + j < p.N) store(m0 + tm + i, n0 + tn + j, acc[i][j]);
}
#endif
