// The k-quants of vkgate/quant.hpp, one super-block of 256 per call:
// Q4_K, Q5_K, Q6_K, Q2_K, Q3_K, with ggml's fitting of sub-block scales
// (quant_blocks.hpp; quant.cpp on matching ggml bit for bit).
#include <algorithm>
#include <cmath>
#include <cstring>

#include "quant_blocks.hpp"

// The codecs' helpers share their namespace; quant_blocks.hpp declares only the codecs.
namespace vkgate::quant_blocks {

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
  const float max = signed_absmax(x, n);
  if (std::fabs(max) < kGroupMaxEps) {
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
  for (int s = 0; s < 16; ++s) scales[s] = fit_symmetric_scale(x + 16 * s, 32, L + 16 * s);
  const float max_scale = signed_absmax(scales, 16);
  if (std::fabs(max_scale) < kGroupMaxEps) {  // all zero
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
  const float max = signed_absmax(x, n);
  if (std::fabs(max) < kGroupMaxEps) {
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
  for (int s = 0; s < 16; ++s) scales[s] = fit_q3_scale(x + 16 * s, L + 16 * s);
  const float max_scale = signed_absmax(scales, 16);
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
void dequant_q4_k(const uint8_t* b, float* y) { dequant_k_4_5<false>(b, y); }
void quant_q4_k(const float* x, uint8_t* b) { quant_k_4_5<false>(x, b); }
void dequant_q5_k(const uint8_t* b, float* y) { dequant_k_4_5<true>(b, y); }
void quant_q5_k(const float* x, uint8_t* b) { quant_k_4_5<true>(x, b); }

}  // namespace vkgate::quant_blocks
