// IQ4_NL and IQ4_XS of vkgate/quant.hpp: 4-bit codes into a 16-value
// table (quant_blocks.hpp; quant.cpp on matching ggml bit for bit).
#include <algorithm>
#include <cmath>
#include <cstring>

#include "quant_blocks.hpp"

// The codecs' helpers share their namespace; quant_blocks.hpp declares only the codecs.
namespace vkgate::quant_blocks {

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
  const float max = signed_absmax(x, 32);
  if (std::fabs(max) < kGroupMaxEps) return 0.0f;
  // Σ w·q·x and Σ w·q² over the codes for inverse scale id.
  float sumqx, sumq2;
  auto fit = [&](float id) {
    sumqx = sumq2 = 0;
    for (int j = 0; j < 32; ++j) {
      const float q = kIq4Values[nearest_iq4_index(id * x[j])], w = x[j] * x[j];
      sumqx += w * q * x[j];
      sumq2 += w * q * q;
    }
  };
  fit(1 / (-max / float(kIq4Values[0])));
  float d = sumq2 > 0 ? sumqx / sumq2 : 0.0f;
  float best = d * sumqx;
  for (int t = -ntry; t <= ntry; ++t) {
    fit(float(t + kIq4Values[0]) / max);
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
  for (int s = 0; s < 8; ++s) scales[s] = fit_iq4_scale(x + 32 * s);
  const float max_scale = signed_absmax(scales, 8);
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

}  // namespace vkgate::quant_blocks
