// ggml's block formats on the host (vkgate/quant.hpp).
//
// The layouts and the reference quantizers follow ggml (llama.cpp de3ff81:
// ggml/src/ggml-common.h for the block structs, ggml/src/ggml-quants.c for
// dequantize_row_*, quantize_row_*_ref and quantize_iq4_nl); this is our own
// code for the same algorithms. Agreement is bit for bit, so every float operation below keeps
// ggml's order and precision: fp32 throughout, sums accumulated left to
// right, int -> float conversions where ggml's C promotions put them.
//
// Rounding, as ggml does it:
// - fp32 -> fp16: ggml-quants.c uses GGML_FP32_TO_FP16, which (ggml-impl.h)
//   is ggml_compute_fp32_to_fp16, a portable bit trick whose float addition
//   rounds to nearest even; the CPU backend's F16C path (_cvtss_sh(x, 0),
//   ggml-cpu/simd-mappings.h) is also round-to-nearest-even. Both equal
//   vkgate::float_to_half for every float but NaNs (checked over all 2^32
//   bit patterns, ±inf and overflow included) and for the default NaN; other
//   NaNs keep their payload here where ggml gives 0x7e00.
// - nearest_int (the k-quants): x + 1.5·2^23 in fp32 then the low mantissa
//   bits, i.e. round half to even for |x| < 2^22; reproduced by round_even().
// - best_index_int8 (IQ4_NL, IQ4_XS): the nearest value of the 16-entry table,
//   a tie going to the larger; nearest_iq4_index().
// - Q8_0 uses roundf (half away from zero), Q4_*/Q5_* truncate x + 8.5 etc.,
//   through C's float -> int8_t/uint8_t conversions: x86 compilers emit a
//   32-bit cvttss2si and keep the low byte. to_byte() does the same without
//   the undefined behaviour of an out-of-range conversion, so NaN, ±inf and
//   subnormal-scale blocks give the bytes ggml gives on x86-64.
//
// Contraction of a·b + c into an FMA would change results (ggml-base is built
// without -march, so x86-64 ggml has no FMA in these loops). GCC contracts
// C++ by default (-ffp-contract=fast, even under -std=c++20) and clang within
// an expression; both are told not to for this file.
#include "vkgate/quant.hpp"

#include <algorithm>
#include <bit>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <limits>

#include "vkgate/error.hpp"

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("fp-contract=off")
#endif
#if defined(__clang__)
#pragma clang fp contract(off)
#endif

namespace vkgate {

namespace {

constexpr int kSuperBlock = 256;  // QK_K
constexpr float kGroupMaxEps = 1e-15f;  // ggml's GROUP_MAX_EPS: below it a Q6_K group counts as zero

// ---- scalar helpers ----

float load_half(const uint8_t* p) { return half_to_float(uint16_t(p[0] | (p[1] << 8))); }

void store_half(uint8_t* p, float value) {
  const uint16_t h = float_to_half(value);
  p[0] = uint8_t(h & 0xff);
  p[1] = uint8_t(h >> 8);
}

uint32_t load_u32(const uint8_t* p) {
  return uint32_t(p[0]) | (uint32_t(p[1]) << 8) | (uint32_t(p[2]) << 16) | (uint32_t(p[3]) << 24);
}

void store_u32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = uint8_t(v >> (8 * i));
}

// ggml's nearest_int: adding 1.5·2^23 leaves the rounded integer in the low
// mantissa bits (ties to even). Defined for every float; only meaningful for |x| < 2^22.
int round_even(float x) {
  const uint32_t bits = std::bit_cast<uint32_t>(x + 12582912.f);
  return int(bits & 0x007fffffu) - 0x00400000;
}

// C's (int8_t)/(uint8_t) conversion of a float as x86-64 compilers emit it:
// truncate to int32 (0x80000000 when NaN or out of range) and keep the low byte.
uint8_t to_byte(float x) {
  if (!(x > -2147483648.f && x < 2147483648.f)) return 0;
  return uint8_t(uint32_t(int32_t(x)));
}
int to_int8(float x) { return int(int8_t(to_byte(x))); }

// The two halves of a 32-element block: element j in the low nibble of byte j,
// element j + 16 in the high nibble.
uint8_t pack_nibbles(int low, int high) { return uint8_t((low & 0x0f) | ((high & 0x0f) << 4)); }

// ---- Q8_0: fp16 d, 32 × int8; x = d·q ----

void dequant_q8_0(const uint8_t* b, float* y) {
  const float d = load_half(b);
  for (int j = 0; j < 32; ++j) y[j] = float(int8_t(b[2 + j])) * d;
}

void quant_q8_0(const float* x, uint8_t* b) {
  float amax = 0.0f;
  for (int j = 0; j < 32; ++j) amax = amax > std::fabs(x[j]) ? amax : std::fabs(x[j]);  // ggml's MAX, NaN included
  const float d = amax / 127;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  store_half(b, d);
  for (int j = 0; j < 32; ++j) b[2 + j] = to_byte(std::round(x[j] * id));
}

// ---- Q4_0 / Q5_0: fp16 d (Q5_0: 32 high bits in qh), x = d·(q − 8) or d·(q − 16) ----

// The signed value of largest magnitude (the first such), as ggml picks it.
float signed_absmax(const float* x) {
  float amax = 0.0f, max = 0.0f;
  for (int j = 0; j < 32; ++j) {
    if (amax < std::fabs(x[j])) {
      amax = std::fabs(x[j]);
      max = x[j];
    }
  }
  return max;
}

void dequant_q4_0(const uint8_t* b, float* y) {
  const float d = load_half(b);
  for (int j = 0; j < 16; ++j) {
    y[j] = float((b[2 + j] & 0x0f) - 8) * d;
    y[j + 16] = float((b[2 + j] >> 4) - 8) * d;
  }
}

void quant_q4_0(const float* x, uint8_t* b) {
  const float d = signed_absmax(x) / -8;  // the extreme value maps to q = 0 exactly
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  store_half(b, d);
  for (int j = 0; j < 16; ++j) {
    const int lo = std::min(15, to_int8(x[j] * id + 8.5f));
    const int hi = std::min(15, to_int8(x[j + 16] * id + 8.5f));
    b[2 + j] = uint8_t(uint8_t(lo) | uint8_t(hi << 4));
  }
}

// Q5_0's and Q5_1's fifth bits: bit j of the little-endian qh is element j's.
int fifth_bit(uint32_t qh, int j) { return int((qh >> j) & 1u) << 4; }

void dequant_q5_0(const uint8_t* b, float* y) {
  const float d = load_half(b);
  const uint32_t qh = load_u32(b + 2);
  for (int j = 0; j < 16; ++j) {
    y[j] = float(((b[6 + j] & 0x0f) | fifth_bit(qh, j)) - 16) * d;
    y[j + 16] = float(((b[6 + j] >> 4) | fifth_bit(qh, j + 16)) - 16) * d;
  }
}

void quant_q5_0(const float* x, uint8_t* b) {
  const float d = signed_absmax(x) / -16;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  store_half(b, d);
  uint32_t qh = 0;
  for (int j = 0; j < 16; ++j) {
    const uint8_t lo = uint8_t(std::min(31, to_int8(x[j] * id + 16.5f)));
    const uint8_t hi = uint8_t(std::min(31, to_int8(x[j + 16] * id + 16.5f)));
    b[6 + j] = pack_nibbles(lo, hi);
    qh |= uint32_t((lo >> 4) & 1u) << j;
    qh |= uint32_t((hi >> 4) & 1u) << (j + 16);
  }
  store_u32(b + 2, qh);
}

// ---- Q4_1 / Q5_1: fp16 d, fp16 m (Q5_1: qh), x = d·q + m ----

struct MinMax {
  float min = FLT_MAX, max = -FLT_MAX;
};

MinMax block_range(const float* x) {
  MinMax r;
  for (int j = 0; j < 32; ++j) {
    if (x[j] < r.min) r.min = x[j];
    if (x[j] > r.max) r.max = x[j];
  }
  return r;
}

void dequant_q4_1(const uint8_t* b, float* y) {
  const float d = load_half(b), m = load_half(b + 2);
  for (int j = 0; j < 16; ++j) {
    y[j] = float(b[4 + j] & 0x0f) * d + m;
    y[j + 16] = float(b[4 + j] >> 4) * d + m;
  }
}

void quant_q4_1(const float* x, uint8_t* b) {
  const MinMax r = block_range(x);
  const float d = (r.max - r.min) / 15;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  store_half(b, d);
  store_half(b + 2, r.min);
  for (int j = 0; j < 16; ++j) {
    const int lo = std::min(15, to_int8((x[j] - r.min) * id + 0.5f));
    const int hi = std::min(15, to_int8((x[j + 16] - r.min) * id + 0.5f));
    b[4 + j] = uint8_t(uint8_t(lo) | uint8_t(hi << 4));
  }
}

void dequant_q5_1(const uint8_t* b, float* y) {
  const float d = load_half(b), m = load_half(b + 2);
  const uint32_t qh = load_u32(b + 4);
  for (int j = 0; j < 16; ++j) {
    y[j] = float((b[8 + j] & 0x0f) | fifth_bit(qh, j)) * d + m;
    y[j + 16] = float((b[8 + j] >> 4) | fifth_bit(qh, j + 16)) * d + m;
  }
}

void quant_q5_1(const float* x, uint8_t* b) {
  const MinMax r = block_range(x);
  const float d = (r.max - r.min) / 31;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  store_half(b, d);
  store_half(b + 2, r.min);
  uint32_t qh = 0;
  for (int j = 0; j < 16; ++j) {
    const uint8_t lo = to_byte((x[j] - r.min) * id + 0.5f);  // no clamp in ggml: at most 31 anyway
    const uint8_t hi = to_byte((x[j + 16] - r.min) * id + 0.5f);
    b[8 + j] = pack_nibbles(lo, hi);
    qh |= uint32_t((lo >> 4) & 1u) << j;
    qh |= uint32_t((hi >> 4) & 1u) << (j + 16);
  }
  store_u32(b + 4, qh);
}

// ---- Q4_K / Q5_K: fp16 d, fp16 dmin, 12 bytes of 6-bit scales and mins ----
// Sub-block s (32 elements) is x = d·sc[s]·q − dmin·mn[s]. The 12 bytes:
// bytes 0-3 hold sc[0..3] in their low 6 bits and the top 2 bits of sc[4..7];
// bytes 4-7 the same for mn; bytes 8-11 the low 4 bits of sc[4..7] (low
// nibble) and of mn[4..7] (high nibble).

struct ScaleMin {
  int scale, min;
};

ScaleMin unpack_scale_min(const uint8_t* s, int sub) {
  if (sub < 4) return {s[sub] & 63, s[sub + 4] & 63};
  return {(s[sub + 4] & 0x0f) | ((s[sub - 4] >> 6) << 4), (s[sub + 4] >> 4) | ((s[sub] >> 6) << 4)};
}

void pack_scales_mins(const uint8_t (&sc)[8], const uint8_t (&mn)[8], uint8_t* s) {
  for (int j = 0; j < 4; ++j) {
    s[j] = uint8_t(sc[j] | ((sc[j + 4] >> 4) << 6));
    s[j + 4] = uint8_t(mn[j] | ((mn[j + 4] >> 4) << 6));
    s[j + 8] = uint8_t((sc[j + 4] & 0x0f) | ((mn[j + 4] & 0x0f) << 4));
  }
}

// The k-quant nibbles: each 64 elements share 32 bytes, the first 32 in the
// low nibbles, the next 32 in the high ones. Q5_K's fifth bits: element
// 64·g + l has bit 2g of qh[l], element 64·g + 32 + l bit 2g + 1.
template <bool kFifthBit>
void dequant_k_4_5(const uint8_t* b, float* y) {
  const float d = load_half(b), dmin = load_half(b + 2);
  const uint8_t* scales = b + 4;
  const uint8_t* qh = b + 16;
  const uint8_t* qs = kFifthBit ? b + 48 : b + 16;
  for (int g = 0; g < 4; ++g, qs += 32, y += 64) {
    for (int half = 0; half < 2; ++half) {
      const ScaleMin sm = unpack_scale_min(scales, 2 * g + half);
      const float dl = d * float(sm.scale), ml = dmin * float(sm.min);
      for (int l = 0; l < 32; ++l) {
        int q = half ? qs[l] >> 4 : qs[l] & 0x0f;
        if (kFifthBit && (qh[l] >> (2 * g + half)) & 1) q += 16;
        y[32 * half + l] = dl * float(q) - ml;
      }
    }
  }
}

// ggml's make_qkx2_quants: fit x ≈ scale·L − min over n elements with
// weights w, L in [0, nmax], trying nstep + 1 inverse scales
// (rmin + rdelta·i + nmax)/(max − min) by weighted least squares and keeping
// each trial that lowers the weighted error, squared (Q4_K, Q5_K) or absolute
// (Q2_K: ggml's use_mad). Returns the scale; `min_out` gets the
// (non-negative) subtracted min. The trials run in order: a kept trial's min
// shifts the grid of every later one.
enum class Loss { squared, absolute };

template <int n, Loss kLoss>
float fit_scale_min(const float* x, const float* w, int nmax, float rmin, float rdelta, int nstep, uint8_t* L,
                    float* min_out) {
  auto loss = [](float diff) { return kLoss == Loss::squared ? diff * diff : std::fabs(diff); };
  float min = x[0], max = x[0];
  float sum_w = w[0];
  float sum_x = sum_w * x[0];
  for (int i = 1; i < n; ++i) {
    if (x[i] < min) min = x[i];
    if (x[i] > max) max = x[i];
    sum_w += w[i];
    sum_x += w[i] * x[i];
  }
  if (min > 0) min = 0;
  if (max == min) {
    std::fill(L, L + n, uint8_t(0));
    *min_out = -min;
    return 0.0f;
  }
  float iscale = float(nmax) / (max - min);
  float scale = 1 / iscale;
  float best_error = 0;
  for (int i = 0; i < n; ++i) {
    L[i] = uint8_t(std::clamp(round_even(iscale * (x[i] - min)), 0, nmax));
    best_error += w[i] * loss(scale * float(L[i]) + min - x[i]);
  }
  uint8_t trial[n];
  for (int step = 0; step <= nstep; ++step) {
    iscale = (rmin + rdelta * float(step) + float(nmax)) / (max - min);
    float sum_l = 0, sum_l2 = 0, sum_xl = 0;
    for (int i = 0; i < n; ++i) {
      const int l = std::clamp(round_even(iscale * (x[i] - min)), 0, nmax);
      trial[i] = uint8_t(l);
      const float wl = w[i] * float(l);
      sum_l += wl;
      sum_l2 += wl * float(l);
      sum_xl += wl * x[i];
    }
    const float det = sum_w * sum_l2 - sum_l * sum_l;
    if (!(det > 0)) continue;
    float this_scale = (sum_w * sum_xl - sum_x * sum_l) / det;
    float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / det;
    if (this_min > 0) {
      this_min = 0;
      this_scale = sum_xl / sum_l2;
    }
    float error = 0;
    for (int i = 0; i < n; ++i) error += w[i] * loss(this_scale * float(trial[i]) + this_min - x[i]);
    if (error < best_error) {
      std::copy(trial, trial + n, L);
      best_error = error;
      scale = this_scale;
      min = this_min;
    }
  }
  *min_out = -min;
  return scale;
}

// quantize_row_q4_K_ref / q5_K_ref for one super-block: fit each sub-block,
// quantize the 8 scales and 8 mins to 6 bits against their maxima, then
// requantize every element against the stored (fp16, 6-bit) scale and min.
template <bool kFifthBit>
void quant_k_4_5(const float* x, uint8_t* b) {
  constexpr int nmax = kFifthBit ? 31 : 15;
  constexpr float rmin = kFifthBit ? -0.5f : -1.0f;
  constexpr int nstep = kFifthBit ? 15 : 20;
  uint8_t L[kSuperBlock];
  float scales[8], mins[8], w[32];
  float max_scale = 0, max_min = 0;  // scales and mins are non-negative: the min is subtracted
  for (int s = 0; s < 8; ++s) {
    const float* xs = x + 32 * s;
    float sum_x2 = 0;
    for (int l = 0; l < 32; ++l) sum_x2 += xs[l] * xs[l];
    const float av_x = std::sqrt(sum_x2 / 32);
    for (int l = 0; l < 32; ++l) w[l] = av_x + std::fabs(xs[l]);
    scales[s] = fit_scale_min<32, Loss::squared>(xs, w, nmax, rmin, 0.1f, nstep, L + 32 * s, &mins[s]);
    if (scales[s] > max_scale) max_scale = scales[s];
    if (mins[s] > max_min) max_min = mins[s];
  }
  const float inv_scale = max_scale > 0 ? 63.f / max_scale : 0.f;
  const float inv_min = max_min > 0 ? 63.f / max_min : 0.f;
  uint8_t sc[8], mn[8];
  for (int s = 0; s < 8; ++s) {
    // ggml stores nearest_int's result in a uint8_t before clamping to 63.
    sc[s] = std::min<uint8_t>(63, uint8_t(round_even(inv_scale * scales[s])));
    mn[s] = std::min<uint8_t>(63, uint8_t(round_even(inv_min * mins[s])));
  }
  store_half(b, max_scale / 63.f);
  store_half(b + 2, max_min / 63.f);
  pack_scales_mins(sc, mn, b + 4);

  const float d_super = load_half(b), dmin_super = load_half(b + 2);
  for (int s = 0; s < 8; ++s) {
    const float d = d_super * float(sc[s]);
    if (d == 0.0f) continue;  // keeps the fit's quants, as ggml does
    const float dm = dmin_super * float(mn[s]);
    for (int l = 0; l < 32; ++l) {
      L[32 * s + l] = uint8_t(std::clamp(round_even((x[32 * s + l] + dm) / d), 0, nmax));
    }
  }

  uint8_t* qs = kFifthBit ? b + 48 : b + 16;
  if (kFifthBit) std::memset(b + 16, 0, 32);
  for (int g = 0; g < 4; ++g, qs += 32) {
    for (int l = 0; l < 32; ++l) {
      const int lo = L[64 * g + l], hi = L[64 * g + 32 + l];
      qs[l] = pack_nibbles(lo, hi);
      if (kFifthBit) b[16 + l] |= uint8_t((((lo >> 4) & 1) << (2 * g)) | (((hi >> 4) & 1) << (2 * g + 1)));
    }
  }
}

// ---- Q6_K: 128 bytes ql, 64 bytes qh, 16 int8 scales, fp16 d ----
// Sub-block s (16 elements) is x = d·scales[s]·(q − 32), q of 6 bits. Each
// 128 elements use 64 bytes of ql and 32 of qh: element 128·h + 32·k + l has
// its low 4 bits in ql[64·h + l + 32·(k & 1)] (low nibble for k < 2, high
// otherwise) and its top 2 bits at bit 2k of qh[32·h + l].

void dequant_q6_k(const uint8_t* b, float* y) {
  const uint8_t* ql = b;
  const uint8_t* qh = b + 128;
  const auto* scales = reinterpret_cast<const int8_t*>(b + 192);
  const float d = load_half(b + 208);
  for (int h = 0; h < 2; ++h, ql += 64, qh += 32, scales += 8, y += 128) {
    for (int l = 0; l < 32; ++l) {
      const int sub = l / 16;
      for (int k = 0; k < 4; ++k) {
        const uint8_t low = ql[l + 32 * (k & 1)];
        const int q = ((k < 2 ? low & 0x0f : low >> 4) | (((qh[l] >> (2 * k)) & 3) << 4)) - 32;
        y[32 * k + l] = d * float(scales[sub + 2 * k]) * float(q);
      }
    }
  }
}

// ggml's make_qx_quants with rmse_type 1 and no importance weights: fit x ≈
// scale·(L − nmax) over 16 elements with weights x², trying inverse scales
// −nmax/max and −(nmax + 0.1·i)/max for i in ±1 … ±9, keeping the first best.
// L gets values in [0, 2·nmax).
//
// ggml runs the trials one after another. They depend only on max, so here
// their sums are accumulated side by side (element by element, each trial's
// sums still in ggml's order), which the compiler vectorizes across trials;
// only the choice runs in trial order. Same floats, about 1.6× faster.
float fit_symmetric_scale(const float* x, int nmax, int8_t* L) {
  constexpr int n = 16;
  // Lane 0 is −nmax/max; the rest are the steps, the last repeated as padding
  // to a multiple of the vector width (never chosen).
  constexpr int kTrials = 19, kLanes = 20;
  constexpr int kSteps[kLanes] = {0, -9, -8, -7, -6, -5, -4, -3, -2, -1, 1, 2, 3, 4, 5, 6, 7, 8, 9, 9};
  float max = 0, amax = 0;
  for (int i = 0; i < n; ++i) {
    const float ax = std::fabs(x[i]);
    if (ax > amax) {
      amax = ax;
      max = x[i];
    }
  }
  if (amax < kGroupMaxEps) {
    std::fill(L, L + n, int8_t(0));
    return 0.0f;
  }
  float iscales[kLanes], sumlx[kLanes] = {}, suml2[kLanes] = {};
  iscales[0] = float(-nmax) / max;
  for (int t = 1; t < kLanes; ++t) iscales[t] = -(float(nmax) + 0.1f * float(kSteps[t])) / max;
  auto quant = [&](int t, float v) { return std::clamp(round_even(iscales[t] * v), -nmax, nmax - 1); };
  for (int i = 0; i < n; ++i) {
    const float w = x[i] * x[i];
    for (int t = 0; t < kLanes; ++t) {
      const float l = float(quant(t, x[i]));
      sumlx[t] += w * x[i] * l;
      suml2[t] += w * l * l;
    }
  }
  int chosen = 0;
  float scale = suml2[0] != 0.0f ? sumlx[0] / suml2[0] : 0.0f;
  float best = scale * sumlx[0];
  for (int t = 1; t < kTrials; ++t) {
    if (suml2[t] > 0 && sumlx[t] * sumlx[t] > best * suml2[t]) {
      chosen = t;
      scale = sumlx[t] / suml2[t];
      best = scale * sumlx[t];
    }
  }
  for (int i = 0; i < n; ++i) L[i] = int8_t(nmax + quant(chosen, x[i]));
  return scale;
}

void quant_q6_k(const float* x, uint8_t* b) {
  int8_t L[kSuperBlock];
  float scales[16];
  float max_scale = 0, max_abs_scale = 0;
  for (int s = 0; s < 16; ++s) {
    scales[s] = fit_symmetric_scale(x + 16 * s, 32, L + 16 * s);
    if (std::fabs(scales[s]) > max_abs_scale) {
      max_abs_scale = std::fabs(scales[s]);
      max_scale = scales[s];
    }
  }
  if (max_abs_scale < kGroupMaxEps) {  // all zero
    std::memset(b, 0, 210);
    return;
  }
  const float iscale = -128.f / max_scale;
  store_half(b + 208, 1 / iscale);
  auto* block_scales = reinterpret_cast<int8_t*>(b + 192);
  for (int s = 0; s < 16; ++s) block_scales[s] = int8_t(std::min(127, round_even(iscale * scales[s])));

  const float d_super = load_half(b + 208);
  for (int s = 0; s < 16; ++s) {
    const float d = d_super * float(block_scales[s]);
    if (d == 0.0f) continue;  // keeps the fit's quants, as ggml does
    for (int l = 0; l < 16; ++l) L[16 * s + l] = int8_t(32 + std::clamp(round_even(x[16 * s + l] / d), -32, 31));
  }

  uint8_t* ql = b;
  uint8_t* qh = b + 128;
  for (int h = 0; h < 2; ++h, ql += 64, qh += 32) {
    const int8_t* q = L + 128 * h;
    for (int l = 0; l < 32; ++l) {
      ql[l] = pack_nibbles(q[l], q[l + 64]);
      ql[l + 32] = pack_nibbles(q[l + 32], q[l + 96]);
      qh[l] = uint8_t((q[l] >> 4) | ((q[l + 32] >> 4) << 2) | ((q[l + 64] >> 4) << 4) | ((q[l + 96] >> 4) << 6));
    }
  }
}

// ---- Q2_K: 16 bytes of 4-bit scale/min pairs, 64 bytes of 2-bit quants, fp16 d, dmin ----
// Sub-block s (16 elements) is x = d·(sc[s] & 15)·q − dmin·(sc[s] >> 4).
// Each 128 elements share 32 bytes of qs: element 128·h + 32·j + l has its
// 2 bits at bit 2j of qs[32·h + l]; its sub-block is 8·h + 2·j + l / 16.

// The 2-bit quants (0..3) in that layout; Q3_K's low 2 bits use it too.
void pack_2bit(const uint8_t* L, uint8_t* qs) {
  for (int h = 0; h < 2; ++h, L += 128, qs += 32) {
    for (int l = 0; l < 32; ++l) qs[l] = uint8_t(L[l] | (L[l + 32] << 2) | (L[l + 64] << 4) | (L[l + 96] << 6));
  }
}

void dequant_q2_k(const uint8_t* b, float* y) {
  const uint8_t* scales = b;
  const uint8_t* qs = b + 16;
  const float d = load_half(b + 80), dmin = load_half(b + 82);
  for (int h = 0; h < 2; ++h, qs += 32) {
    for (int j = 0; j < 4; ++j) {
      for (int part = 0; part < 2; ++part) {
        const uint8_t sc = *scales++;
        const float dl = d * float(sc & 0x0f), ml = dmin * float(sc >> 4);
        for (int l = 0; l < 16; ++l) *y++ = dl * float((qs[16 * part + l] >> (2 * j)) & 3) - ml;
      }
    }
  }
}

// quantize_row_q2_K_ref for one super-block: fit each 16-element sub-block by
// weighted absolute error (weights |x|), quantize the 16 scales and 16 mins to
// 4 bits against their maxima, then requantize against the stored ones.
void quant_q2_k(const float* x, uint8_t* b) {
  uint8_t L[kSuperBlock];
  float scales[16], mins[16], w[16];
  float max_scale = 0, max_min = 0;
  for (int s = 0; s < 16; ++s) {
    const float* xs = x + 16 * s;
    for (int l = 0; l < 16; ++l) w[l] = std::fabs(xs[l]);
    scales[s] = fit_scale_min<16, Loss::absolute>(xs, w, 3, -0.5f, 0.1f, 15, L + 16 * s, &mins[s]);
    if (scales[s] > max_scale) max_scale = scales[s];
    if (mins[s] > max_min) max_min = mins[s];
  }
  // As ggml: nearest_int's results go in unclamped, the scale's as the low
  // byte and the min's shifted left by 4 and ORed in.
  uint8_t* sc = b;
  std::memset(sc, 0, 16);
  if (max_scale > 0) {
    const float iscale = 15.f / max_scale;
    for (int s = 0; s < 16; ++s) sc[s] = uint8_t(round_even(iscale * scales[s]));
  }
  if (max_min > 0) {
    const float iscale = 15.f / max_min;
    for (int s = 0; s < 16; ++s) sc[s] = uint8_t(sc[s] | (uint32_t(round_even(iscale * mins[s])) << 4));
  }
  store_half(b + 80, max_scale / 15.f);
  store_half(b + 82, max_min / 15.f);

  const float d_super = load_half(b + 80), dmin_super = load_half(b + 82);
  for (int s = 0; s < 16; ++s) {
    const float d = d_super * float(sc[s] & 0x0f);
    if (d == 0.0f) continue;  // keeps the fit's quants, as ggml does
    const float dm = dmin_super * float(sc[s] >> 4);
    for (int l = 0; l < 16; ++l) L[16 * s + l] = uint8_t(std::clamp(round_even((x[16 * s + l] + dm) / d), 0, 3));
  }
  pack_2bit(L, b + 16);
}

// ---- Q3_K: 32 bytes hmask, 64 bytes of 2-bit quants, 12 bytes of 6-bit scales, fp16 d ----
// Sub-block s (16 elements) is x = d·(sc[s] − 32)·(q − 4), q of 3 bits:
// the low 2 as Q2_K's, the third bit of element e at bit e / 32 of
// hmask[e % 32]. sc[s]'s low 4 bits are the low (s < 8) or high nibble of
// byte s % 8, its top 2 bits at bit 2·(s / 4) of byte 8 + s % 4.

int q3_k_scale(const uint8_t* scales, int s) {
  const int low = (scales[s % 8] >> (4 * (s / 8))) & 0x0f, high = (scales[8 + s % 4] >> (2 * (s / 4))) & 3;
  return (low | (high << 4)) - 32;
}

void dequant_q3_k(const uint8_t* b, float* y) {
  const uint8_t* hmask = b;
  const uint8_t* qs = b + 32;
  const float d = load_half(b + 108);
  for (int h = 0; h < 2; ++h, qs += 32) {
    for (int j = 0; j < 4; ++j) {
      for (int part = 0; part < 2; ++part) {
        const float dl = d * float(q3_k_scale(b + 96, 8 * h + 2 * j + part));
        for (int l = 16 * part; l < 16 * part + 16; ++l) {
          const int high = (hmask[l] >> (4 * h + j)) & 1;
          *y++ = dl * float(((qs[l] >> (2 * j)) & 3) - (high ? 0 : 4));
        }
      }
    }
  }
}

// ggml's make_q3_quants with do_rmse: L = nearest(−nmax/max · x) in
// [−nmax, nmax), then up to 5 passes of coordinate descent on the weighted
// (x²) least-squares fit, each element in turn moved to its best level while
// that improves the fit. Returns the scale; L gets values in [0, 2·nmax)
// (all 0 for a sub-block below GROUP_MAX_EPS).
float fit_q3_scale(const float* x, int8_t* L) {
  constexpr int n = 16, nmax = 4;
  float max = 0, amax = 0;
  for (int i = 0; i < n; ++i) {
    const float ax = std::fabs(x[i]);
    if (ax > amax) {
      amax = ax;
      max = x[i];
    }
  }
  if (amax < kGroupMaxEps) {
    std::fill(L, L + n, int8_t(0));
    return 0.0f;
  }
  const float iscale = float(-nmax) / max;
  float sumlx = 0, suml2 = 0;
  for (int i = 0; i < n; ++i) {
    const int l = std::clamp(round_even(iscale * x[i]), -nmax, nmax - 1);
    L[i] = int8_t(l);
    const float w = x[i] * x[i];
    sumlx += w * x[i] * float(l);
    suml2 += w * float(l) * float(l);
  }
  for (int pass = 0; pass < 5; ++pass) {
    int changed = 0;
    for (int i = 0; i < n; ++i) {
      const float w = x[i] * x[i];
      float slx = sumlx - w * x[i] * float(L[i]);
      if (!(slx > 0)) continue;
      float sl2 = suml2 - w * float(L[i]) * float(L[i]);
      const int l = std::clamp(round_even(x[i] * sl2 / slx), -nmax, nmax - 1);
      if (l == L[i]) continue;
      slx += w * x[i] * float(l);
      sl2 += w * float(l) * float(l);
      if (sl2 > 0 && slx * slx * suml2 > sumlx * sumlx * sl2) {
        L[i] = int8_t(l);
        sumlx = slx;
        suml2 = sl2;
        ++changed;
      }
    }
    if (changed == 0) break;
  }
  for (int i = 0; i < n; ++i) L[i] = int8_t(L[i] + nmax);
  return suml2 > 0 ? sumlx / suml2 : 0.0f;
}

// quantize_row_q3_K_ref for one super-block: fit each 16-element sub-block,
// quantize the 16 scales to 6 bits against the one of largest magnitude
// (d = −max/32, so that one is −32), then requantize against the stored ones.
void quant_q3_k(const float* x, uint8_t* b) {
  int8_t L[kSuperBlock];
  float scales[16];
  float max_scale = 0, amax = 0;
  for (int s = 0; s < 16; ++s) {
    scales[s] = fit_q3_scale(x + 16 * s, L + 16 * s);
    if (std::fabs(scales[s]) > amax) {
      amax = std::fabs(scales[s]);
      max_scale = scales[s];
    }
  }
  std::memset(b, 0, 110);
  uint8_t* packed = b + 96;
  if (max_scale != 0.0f) {
    const float iscale = -32.f / max_scale;
    for (int s = 0; s < 16; ++s) {
      // ggml stores nearest_int's result in an int8_t before clamping.
      const int l = std::clamp(int(int8_t(round_even(iscale * scales[s]))), -32, 31) + 32;
      packed[s % 8] = uint8_t(packed[s % 8] | ((l & 0x0f) << (4 * (s / 8))));
      packed[8 + s % 4] = uint8_t(packed[8 + s % 4] | ((l >> 4) << (2 * (s / 4))));
    }
    store_half(b + 108, 1 / iscale);
  }

  const float d_super = load_half(b + 108);
  for (int s = 0; s < 16; ++s) {
    const float d = d_super * float(q3_k_scale(packed, s));
    if (d == 0.0f) continue;  // keeps the fit's quants, as ggml does
    for (int l = 0; l < 16; ++l) L[16 * s + l] = int8_t(std::clamp(round_even(x[16 * s + l] / d), -4, 3) + 4);
  }

  uint8_t low[kSuperBlock];
  for (int e = 0; e < kSuperBlock; ++e) {
    low[e] = uint8_t(L[e] & 3);
    if (L[e] > 3) b[e % 32] = uint8_t(b[e % 32] | (1 << (e / 32)));
  }
  pack_2bit(low, b + 32);
}

// ---- IQ4_NL, IQ4_XS: 4-bit codes into ggml's kvalues_iq4nl ----
// IQ4_NL is Q4_0's block (fp16 d, 16 bytes of nibbles) with x = d·table[q].
// IQ4_XS: fp16 d, a uint16 of the scales' top 2 bits (bits 2s, 2s + 1),
// 4 bytes of their low nibbles (sub-block s in byte s / 2, low nibble for
// even s), then 8 sub-blocks of IQ4_NL nibbles: x = d·(sc[s] − 32)·table[q].

constexpr int8_t kIq4Values[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

void dequant_iq4_nibbles(float dl, const uint8_t* qs, float* y) {
  for (int j = 0; j < 16; ++j) {
    y[j] = dl * float(kIq4Values[qs[j] & 0x0f]);
    y[j + 16] = dl * float(kIq4Values[qs[j] >> 4]);
  }
}

void dequant_iq4_nl(const uint8_t* b, float* y) { dequant_iq4_nibbles(load_half(b), b + 2, y); }

int iq4_xs_scale(const uint8_t* b, int s) {
  const int high = ((b[2] | (b[3] << 8)) >> (2 * s)) & 3, low = (b[4 + s / 2] >> (4 * (s % 2))) & 0x0f;
  return (low | (high << 4)) - 32;
}

void dequant_iq4_xs(const uint8_t* b, float* y) {
  const float d = load_half(b);
  for (int s = 0; s < 8; ++s) dequant_iq4_nibbles(d * float(iq4_xs_scale(b, s)), b + 8 + 16 * s, y + 32 * s);
}

// ggml's best_index_int8 over the table: the nearest value's index, a tie
// going to the larger value.
int nearest_iq4_index(float x) {
  if (x <= float(kIq4Values[0])) return 0;
  if (x >= float(kIq4Values[15])) return 15;
  int lo = 0, hi = 15;
  while (hi - lo > 1) {
    const int mid = (lo + hi) / 2;
    if (x < float(kIq4Values[mid])) {
      hi = mid;
    } else {
      lo = mid;
    }
  }
  return x - float(kIq4Values[hi - 1]) < float(kIq4Values[hi]) - x ? hi - 1 : hi;
}

// The scale of one 32-element block by ggml's quantize_row_iq4_nl_impl with
// ntry = 7 and no importance weights (w = x²): the least-squares d of the
// codes for d = −max/−127, then of the codes for each inverse scale
// (t − 127)/max, t in [−7, 7], keeping the best fit; 0 for a block below
// GROUP_MAX_EPS. The codes are picked again for the d the caller stores.
float fit_iq4_scale(const float* x) {
  constexpr int ntry = 7;
  float amax = 0, max = 0;
  for (int j = 0; j < 32; ++j) {
    const float ax = std::fabs(x[j]);
    if (ax > amax) {
      amax = ax;
      max = x[j];
    }
  }
  if (amax < kGroupMaxEps) return 0.0f;
  const float table0 = kIq4Values[0];
  float d = -max / table0;
  float id = 1 / d;
  float sumqx = 0, sumq2 = 0;
  for (int j = 0; j < 32; ++j) {
    const float q = kIq4Values[nearest_iq4_index(id * x[j])], w = x[j] * x[j];
    sumqx += w * q * x[j];
    sumq2 += w * q * q;
  }
  d = sumq2 > 0 ? sumqx / sumq2 : 0.0f;
  float best = d * sumqx;
  for (int t = -ntry; t <= ntry; ++t) {
    id = float(t + kIq4Values[0]) / max;
    sumqx = sumq2 = 0;
    for (int j = 0; j < 32; ++j) {
      const float q = kIq4Values[nearest_iq4_index(id * x[j])], w = x[j] * x[j];
      sumqx += w * q * x[j];
      sumq2 += w * q * q;
    }
    if (sumq2 > 0 && sumqx * sumqx > best * sumq2) {
      d = sumqx / sumq2;
      best = d * sumqx;
    }
  }
  return d;
}

void pack_iq4_nibbles(const uint8_t* L, uint8_t* qs) {
  for (int j = 0; j < 16; ++j) qs[j] = pack_nibbles(L[j], L[j + 16]);
}

// IQ4_NL as llama-quantize writes it without an importance matrix
// (quantize_iq4_nl: ntry 7, the codes picked again for the fp32 d). ggml's
// quantize_row_iq4_nl_ref takes no trials and keeps the first fit's codes.
void quant_iq4_nl(const float* x, uint8_t* b) {
  const float d = fit_iq4_scale(x);
  store_half(b, d);
  const float id = d != 0.0f ? 1 / d : 0.0f;
  uint8_t L[32];
  for (int j = 0; j < 32; ++j) L[j] = uint8_t(nearest_iq4_index(id * x[j]));
  pack_iq4_nibbles(L, b + 2);
}

// quantize_row_iq4_xs_ref (quantize_iq4_xs without importance weights) for
// one super-block: fit each block (ntry = 7), quantize the 8 scales to 6 bits
// against the one of largest magnitude (d = −max/32), then recode every block
// against its 6-bit scale times d in fp32, not the stored fp16 d.
void quant_iq4_xs(const float* x, uint8_t* b) {
  uint8_t L[32];
  float scales[8];
  float max_scale = 0, amax_scale = 0;
  for (int s = 0; s < 8; ++s) {
    scales[s] = fit_iq4_scale(x + 32 * s);
    if (std::fabs(scales[s]) > amax_scale) {
      amax_scale = std::fabs(scales[s]);
      max_scale = scales[s];
    }
  }
  const float d = -max_scale / 32;  // −0 for an all-zero super-block: stored as 0x8000
  store_half(b, d);
  const float id = d != 0.0f ? 1 / d : 0.0f;
  uint32_t scales_h = 0;
  std::memset(b + 4, 0, 4);
  for (int s = 0; s < 8; ++s) {
    const int l = std::clamp(round_even(id * scales[s]), -32, 31);
    const float dl = d * float(l);
    const float idl = dl != 0.0f ? 1 / dl : 0.0f;
    for (int j = 0; j < 32; ++j) L[j] = uint8_t(nearest_iq4_index(idl * x[32 * s + j]));
    pack_iq4_nibbles(L, b + 8 + 16 * s);
    b[4 + s / 2] = uint8_t(b[4 + s / 2] | (((l + 32) & 0x0f) << (4 * (s % 2))));
    scales_h |= uint32_t((l + 32) >> 4) << (2 * s);
  }
  b[2] = uint8_t(scales_h & 0xff);
  b[3] = uint8_t(scales_h >> 8);
}

// ---- dispatch ----

struct Codec {
  void (*dequant)(const uint8_t* block, float* y);
  void (*quant)(const float* x, uint8_t* block);
};

Codec codec_of(DType dtype) {
  switch (dtype) {  // no default: -Wswitch names a DType added without its codec
    case DType::Q8_0: return {dequant_q8_0, quant_q8_0};
    case DType::Q4_0: return {dequant_q4_0, quant_q4_0};
    case DType::Q4_1: return {dequant_q4_1, quant_q4_1};
    case DType::Q5_0: return {dequant_q5_0, quant_q5_0};
    case DType::Q5_1: return {dequant_q5_1, quant_q5_1};
    case DType::Q4_K: return {dequant_k_4_5<false>, quant_k_4_5<false>};
    case DType::Q5_K: return {dequant_k_4_5<true>, quant_k_4_5<true>};
    case DType::Q6_K: return {dequant_q6_k, quant_q6_k};
    case DType::Q2_K: return {dequant_q2_k, quant_q2_k};
    case DType::Q3_K: return {dequant_q3_k, quant_q3_k};
    case DType::IQ4_NL: return {dequant_iq4_nl, quant_iq4_nl};
    case DType::IQ4_XS: return {dequant_iq4_xs, quant_iq4_xs};
    case DType::F32:
    case DType::F16:
    case DType::BF16:
    case DType::F64:
    case DType::I64:
    case DType::I32: break;
  }
  return {nullptr, nullptr};  // not a block format: require_block_format refuses it first
}

void require_block_format(DType dtype, const char* what) {
  if (!is_quantized(dtype)) {
    throw Error(ErrorCode::invalid_argument, std::string(what) + ": " + to_string(dtype) +
                                                 " is not a block format (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS)");
  }
}

}  // namespace

std::optional<size_t> stored_bytes(DType dtype, int64_t elements) noexcept {
  const size_t per_block = block_elements(dtype);
  const size_t bytes = block_bytes(dtype);
  if (elements < 0 || bytes == 0 || uint64_t(elements) % per_block != 0) return std::nullopt;
  const uint64_t blocks = uint64_t(elements) / per_block;
  if (blocks > std::numeric_limits<size_t>::max() / bytes) return std::nullopt;
  return size_t(blocks * bytes);
}

void dequantize(DType dtype, std::span<const std::byte> blocks, std::span<float> out) {
  require_block_format(dtype, "dequantize");
  const size_t per_block = block_elements(dtype), bytes = block_bytes(dtype);
  if (out.size() % per_block != 0 || blocks.size() != out.size() / per_block * bytes) {
    throw Error(ErrorCode::shape_mismatch,
                "dequantize " + std::string(to_string(dtype)) + ": " + std::to_string(blocks.size()) +
                    " bytes for " + std::to_string(out.size()) + " elements; " + to_string(dtype) + " stores " +
                    std::to_string(per_block) + " elements in " + std::to_string(bytes) +
                    " bytes, so the elements must be a multiple of " + std::to_string(per_block) +
                    (out.size() % per_block == 0
                         ? " and the bytes exactly " + std::to_string(out.size() / per_block * bytes)
                         : std::string()));
  }
  const auto decode = codec_of(dtype).dequant;
  const auto* in = reinterpret_cast<const uint8_t*>(blocks.data());
  for (size_t i = 0; i < out.size() / per_block; ++i) decode(in + i * bytes, out.data() + i * per_block);
}

std::vector<std::byte> quantize(DType dtype, std::span<const float> values) {
  require_block_format(dtype, "quantize");
  const size_t per_block = block_elements(dtype), bytes = block_bytes(dtype);
  if (values.size() % per_block != 0) {
    throw Error(ErrorCode::invalid_argument, "quantize " + std::string(to_string(dtype)) + ": " +
                                                 std::to_string(values.size()) + " elements are not a multiple of " +
                                                 std::to_string(per_block) + " (its block size)");
  }
  std::vector<std::byte> blocks(values.size() / per_block * bytes);
  const auto encode = codec_of(dtype).quant;
  auto* out = reinterpret_cast<uint8_t*>(blocks.data());
  for (size_t i = 0; i < values.size() / per_block; ++i) encode(values.data() + i * per_block, out + i * bytes);
  return blocks;
}

}  // namespace vkgate
