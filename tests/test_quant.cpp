// ggml's block formats on the host (vkgate/quant.hpp): dequantize() against
// double-precision references written here from the format descriptions,
// quantize() round trips within each format's error bound, byte-exact
// agreement with ggml and gguf-py (tests/data/quant, README.md there), and
// the small API around them (sizes, spellings, ggml type ids, errors).
#include "doctest.hpp"

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <limits>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "test_util.hpp"
#include "vkgate/dtype.hpp"
#include "vkgate/error.hpp"
#include "vkgate/quant.hpp"

namespace test_quant {

using namespace vkgate;
using test::expect_error;

namespace {

constexpr DType kFormats[] = {DType::Q8_0, DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1,   DType::Q4_K,
                              DType::Q5_K, DType::Q6_K, DType::Q2_K, DType::Q3_K, DType::IQ4_NL, DType::IQ4_XS};

using Bytes = std::vector<uint8_t>;

std::span<const std::byte> as_bytes(const Bytes& b) { return std::as_bytes(std::span<const uint8_t>(b)); }

Bytes to_bytes(const std::vector<std::byte>& b) {
  Bytes out(b.size());
  std::memcpy(out.data(), b.data(), b.size());
  return out;
}

std::vector<float> dequantized(DType dtype, const Bytes& blocks) {
  std::vector<float> out(blocks.size() / block_bytes(dtype) * block_elements(dtype));
  dequantize(dtype, as_bytes(blocks), out);
  return out;
}

// ---- independent references: the formats as described, in double precision ----

// An IEEE binary16 value, decoded here rather than with vkgate::half_to_float.
double half_at(const Bytes& b, size_t offset) {
  const unsigned h = b[offset] | (b[offset + 1] << 8);
  const int exponent = (h >> 10) & 31, mantissa = h & 1023;
  REQUIRE(exponent != 31);  // the blocks built here hold finite scales
  const double magnitude = exponent == 0 ? std::ldexp(mantissa, -24) : std::ldexp(1024 + mantissa, exponent - 25);
  return (h & 0x8000) ? -magnitude : magnitude;
}

// Element i (0..31) of a 32-element block's nibbles at `qs`: byte i in the low
// nibble for the first 16, byte i − 16 in the high nibble for the rest.
int nibble32(const Bytes& b, size_t qs, int i) { return i < 16 ? b[qs + i] & 15 : b[qs + i - 16] >> 4; }

// Bit i of the little-endian uint32 at `offset`.
int bit32(const Bytes& b, size_t offset, int i) { return (b[offset + i / 8] >> (i % 8)) & 1; }

// ggml's kvalues_iq4nl: the 16 values an IQ4 code stands for.
constexpr int kIq4Table[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

// Q2_K's and Q3_K's 2-bit quant of element i (0..255) from the 64 bytes at
// `qs`: each 128 elements use 32 bytes, the element 32·j + l of them (j < 4)
// sitting in bits 2j, 2j+1 of byte l.
int two_bits(const Bytes& b, size_t qs, int i) {
  return (b[qs + 32 * (i / 128) + i % 32] >> (2 * ((i % 128) / 32))) & 3;
}

// Q3_K's sub-block s scale (6 bits, stored + 32) from the 12 bytes at `at`:
// its low 4 bits in byte s mod 8 (low nibble for s < 8, high for the rest),
// its top 2 bits in byte 8 + s mod 4 at bit 2·(s div 4).
int q3_scale(const Bytes& b, size_t at, int s) {
  const int low = s < 8 ? b[at + s] % 16 : b[at + s - 8] / 16;
  const int top = (b[at + 8 + s % 4] >> (2 * (s / 4))) % 4;
  return low + 16 * top - 32;
}

// IQ4_XS's sub-block s scale (6 bits, stored + 32): the low 4 bits in byte
// s div 2 of scales_l (bytes 4..7; low nibble for even s), the top 2 bits in
// bits 2s, 2s+1 of the little-endian uint16 scales_h (bytes 2, 3).
int iq4_xs_scale(const Bytes& b, int s) {
  const int low = s % 2 == 0 ? b[4 + s / 2] % 16 : b[4 + s / 2] / 16;
  const int top = ((b[2] + 256 * b[3]) >> (2 * s)) % 4;
  return low + 16 * top - 32;
}

// Sub-block s's 6-bit scale and min from the 12 packed bytes at `at`: s < 4
// sit in the low 6 bits of bytes s and s + 4; s ≥ 4 have their low 4 bits in
// byte s + 4 (scale low nibble, min high nibble) and their top 2 bits in the
// top bits of bytes s − 4 (scale) and s (min).
std::pair<int, int> scale_min6(const Bytes& b, size_t at, int s) {
  if (s < 4) return {b[at + s] % 64, b[at + s + 4] % 64};
  return {b[at + s + 4] % 16 + 16 * (b[at + s - 4] / 64), b[at + s + 4] / 16 + 16 * (b[at + s] / 64)};
}

// The values of the block at `b` (one block of `dtype`), exactly.
std::vector<double> reference_block(DType dtype, const Bytes& b) {
  const int n = int(block_elements(dtype));
  std::vector<double> y(n);
  for (int i = 0; i < n; ++i) {
    switch (dtype) {
      case DType::Q8_0: y[i] = half_at(b, 0) * int8_t(b[2 + i]); break;
      case DType::Q4_0: y[i] = half_at(b, 0) * (nibble32(b, 2, i) - 8); break;
      case DType::Q4_1: y[i] = half_at(b, 0) * nibble32(b, 4, i) + half_at(b, 2); break;
      case DType::Q5_0: y[i] = half_at(b, 0) * (nibble32(b, 6, i) + 16 * bit32(b, 2, i) - 16); break;
      case DType::Q5_1: y[i] = half_at(b, 0) * (nibble32(b, 8, i) + 16 * bit32(b, 4, i)) + half_at(b, 2); break;
      case DType::Q4_K:
      case DType::Q5_K: {
        // 64 elements per 32 bytes of nibbles: low nibbles first, then high.
        const int s = i / 32;
        const size_t qs = dtype == DType::Q4_K ? 16 : 48;
        const uint8_t byte = b[qs + 32 * (i / 64) + i % 32];
        int q = (s % 2 == 0) ? byte & 15 : byte >> 4;
        if (dtype == DType::Q5_K) q += 16 * ((b[16 + i % 32] >> s) & 1);  // bit s of qh[i mod 32]
        const auto [sc, mn] = scale_min6(b, 4, s);
        y[i] = half_at(b, 0) * sc * q - half_at(b, 2) * mn;
        break;
      }
      case DType::Q6_K: {
        // Per 128 elements: 64 bytes of ql, 32 of qh. Quarter k of the 128
        // takes ql[l] (k = 0, 2) or ql[l + 32] (k = 1, 3), low nibble for
        // k < 2, and bits 2k, 2k+1 of qh[l].
        const int h = i / 128, k = (i % 128) / 32, l = i % 32;
        const uint8_t low = b[64 * h + l + 32 * (k % 2)];
        const int q = (k < 2 ? low & 15 : low >> 4) + 16 * ((b[128 + 32 * h + l] >> (2 * k)) & 3);
        y[i] = half_at(b, 208) * int8_t(b[192 + i / 16]) * (q - 32);
        break;
      }
      case DType::Q2_K: {
        // Byte s (sub-block s of 16 elements): scale in the low nibble, min in the high one.
        const int s = i / 16;
        y[i] = half_at(b, 80) * (b[s] % 16) * two_bits(b, 16, i) - half_at(b, 82) * (b[s] / 16);
        break;
      }
      case DType::Q3_K: {
        // 3-bit q = low 2 bits + 4·(bit i div 32 of hmask[i mod 32]), stored offset by 4.
        const int q = two_bits(b, 32, i) + 4 * ((b[i % 32] >> (i / 32)) & 1) - 4;
        y[i] = half_at(b, 108) * q3_scale(b, 96, i / 16) * q;
        break;
      }
      case DType::IQ4_NL: y[i] = half_at(b, 0) * kIq4Table[nibble32(b, 2, i)]; break;
      case DType::IQ4_XS: {
        const int s = i / 32;
        y[i] = half_at(b, 0) * iq4_xs_scale(b, s) * kIq4Table[nibble32(b, 8 + 16 * s, i % 32)];
        break;
      }
      default: FAIL("not a block format");
    }
  }
  return y;
}

// Byte offsets of a format's fp16 fields (scales and mins).
std::vector<size_t> half_fields(DType dtype) {
  switch (dtype) {
    case DType::Q4_1:
    case DType::Q5_1:
    case DType::Q4_K:
    case DType::Q5_K: return {0, 2};
    case DType::Q6_K: return {208};
    case DType::Q2_K: return {80, 82};
    case DType::Q3_K: return {108};
    default: return {0};  // Q8_0, Q4_0, Q5_0, IQ4_NL, IQ4_XS
  }
}

void put_half(Bytes& b, size_t offset, uint16_t h) {
  b[offset] = uint8_t(h & 0xff);
  b[offset + 1] = uint8_t(h >> 8);
}

// Every element of `blocks` dequantized equals the reference rounded once to
// fp32: each format's products of fp16 scales and small integers are exact in
// double, and ggml's fp32 arithmetic rounds the exact value once (the
// products d·q, d·sc·q of Q8_0…Q5_K, Q2_K, Q3_K and the IQ4 forms are exact in
// fp32, IQ4_XS's d·sc·table[q] just so: 11 + 6 + 7 bits; Q6_K's d·sc·q and the
// final "+ m" / "− dmin·mn" round once).
void check_against_reference(DType dtype, const Bytes& blocks) {
  const std::vector<float> got = dequantized(dtype, blocks);
  const size_t bb = block_bytes(dtype), be = block_elements(dtype);
  for (size_t k = 0; k * bb < blocks.size(); ++k) {
    const Bytes block(blocks.begin() + long(k * bb), blocks.begin() + long((k + 1) * bb));
    const std::vector<double> want = reference_block(dtype, block);
    for (size_t i = 0; i < be; ++i) {
      const float expected = float(want[i]);
      if (std::bit_cast<uint32_t>(got[k * be + i]) != std::bit_cast<uint32_t>(expected)) {
        INFO("dtype " << std::string(to_string(dtype)));
        CAPTURE(k);
        CAPTURE(i);
        CHECK(got[k * be + i] == expected);
        return;
      }
    }
  }
}

// ---- inputs for the round trips ----

// A row of `blocks` 32-element blocks of assorted kinds: normal values of
// scales from 1e-3 to 300, an all-zero block, a block with one huge outlier,
// all-positive, all-negative and constant blocks.
std::vector<float> mixed_row(uint32_t seed, int blocks) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal;
  std::uniform_real_distribution<float> uniform(0.0f, 1.0f);
  std::vector<float> x;
  for (int b = 0; b < blocks; ++b) {
    const int kind = (b == 3) ? 1 : (b == 5) ? 2 : int(rng() % 7);
    const float scale = std::exp(uniform(rng) * 12.6f - 6.9f);  // 1e-3 … 300
    for (int i = 0; i < 32; ++i) {
      float v = 0;
      switch (kind) {
        case 1: v = 0; break;                                     // all zero
        case 2: v = i == 11 ? 5000.0f : normal(rng); break;       // one huge outlier
        case 3: v = scale * uniform(rng); break;                  // all positive
        case 4: v = -scale * (1 + uniform(rng)); break;           // all negative
        case 5: v = 0.5f * scale; break;                          // constant
        default: v = scale * normal(rng); break;
      }
      x.push_back(v);
    }
  }
  return x;
}

// The largest |x − x̂| the format allows for element i of a block, given the
// block's inputs `x` and its stored bytes `b`:
// - Q8_0, Q4_0, Q5_0 quantize x/d with d (fp32) = absmax/127, max/−8,
//   max/−16 (max: the signed value of largest magnitude) and store d in fp16:
//   |x − q·d| ≤ d/2 (Q4_0/Q5_0: up to d for x/d above 7.5/15.5, which clamps
//   to 7/15), plus |q|·|d − d₁₆| for the stored scale.
// - Q4_1, Q5_1: d = (max − min)/15 or 31, m = min: ≤ d/2 + qmax·|d − d₁₆| + |min − m₁₆|.
// - the k-quants store each sub-block's grid d₁₆·sc·q − dmin₁₆·mn (Q6_K:
//   d₁₆·sc·(q − 32); Q3_K: d₁₆·sc·q, q in [−4, 3]) and put every element on
//   the nearest point of it: |x − x̂| ≤ the distance to that nearest point
//   (≤ half a step inside the grid).
// - IQ4_NL and IQ4_XS code each element against the nearest point of
//   dl·table, where dl = d (IQ4_NL) or d·sc with d in fp32; the block stores
//   d₁₆, within half an fp16 ulp of d (δ). Each code moves by at most
//   |sc|·δ·|table[q]|, the grid's nearest point by at most |sc|·δ·127:
//   |x − x̂| ≤ the distance from x to d₁₆·sc·table plus |sc|·δ·(127 + |table[q]|)
//   (sc = 1 for IQ4_NL).
// - An IQ4 block (sub-block) below ggml's GROUP_MAX_EPS (1e-15) stores d = 0 (sc = 0).
// Each bound has a relative slack of 1e-5 for the fp32 rounding on the way.
std::vector<double> error_bounds(DType dtype, const float* x, const Bytes& b) {
  const int n = int(block_elements(dtype));
  std::vector<double> bound(n);
  double amax = 0, max = 0, lo = x[0], hi = x[0];
  for (int i = 0; i < n; ++i) {
    if (std::fabs(x[i]) > amax) amax = std::fabs(x[i]), max = x[i];
    lo = std::min<double>(lo, x[i]);
    hi = std::max<double>(hi, x[i]);
  }
  auto symmetric = [&](double d, int qmax, double clamp_above) {
    const double d16 = half_at(b, 0);
    for (int i = 0; i < n; ++i) {
      const double steps = d != 0 ? x[i] / d : 0;
      bound[i] = std::fabs(d) * (steps > clamp_above ? 1.0 : 0.5) + qmax * std::fabs(d - d16);
    }
  };
  auto asymmetric = [&](int qmax) {
    const double d = float(float(hi - lo) / float(qmax));
    for (int i = 0; i < n; ++i) {
      bound[i] = d / 2 + qmax * std::fabs(d - half_at(b, 0)) + std::fabs(lo - half_at(b, 2));
    }
  };
  // The nearest point of the grid {step·q + offset : q in [qlo, qhi]}.
  auto grid = [&](int first, int count, double step, double offset, int qlo, int qhi) {
    for (int i = first; i < first + count; ++i) {
      const double q = step != 0 ? std::clamp(std::round((x[i] - offset) / step), double(qlo), double(qhi)) : qlo;
      bound[i] = std::fabs(x[i] - (step * q + offset));
    }
  };
  // The distance from v to the nearest point of step·table.
  auto table_distance = [](double v, double step) {
    double best = std::numeric_limits<double>::infinity();
    for (int t : kIq4Table) best = std::min(best, std::fabs(v - step * t));
    return best;
  };
  switch (dtype) {
    case DType::Q8_0: symmetric(float(float(amax) / 127), 127, 1e9); break;
    case DType::Q4_0: symmetric(float(float(max) / -8), 8, 7.5); break;
    case DType::Q5_0: symmetric(float(float(max) / -16), 16, 15.5); break;
    case DType::Q4_1: asymmetric(15); break;
    case DType::Q5_1: asymmetric(31); break;
    case DType::Q4_K:
    case DType::Q5_K:
      for (int s = 0; s < 8; ++s) {
        const auto [sc, mn] = scale_min6(b, 4, s);
        grid(32 * s, 32, half_at(b, 0) * sc, -half_at(b, 2) * mn, 0, dtype == DType::Q4_K ? 15 : 31);
      }
      break;
    case DType::Q6_K:
      for (int s = 0; s < 16; ++s) grid(16 * s, 16, half_at(b, 208) * int8_t(b[192 + s]), 0, -32, 31);
      break;
    case DType::Q2_K:
      for (int s = 0; s < 16; ++s) grid(16 * s, 16, half_at(b, 80) * (b[s] % 16), -half_at(b, 82) * (b[s] / 16), 0, 3);
      break;
    case DType::Q3_K:
      for (int s = 0; s < 16; ++s) grid(16 * s, 16, half_at(b, 108) * q3_scale(b, 96, s), 0, -4, 3);
      break;
    case DType::IQ4_NL:
    case DType::IQ4_XS: {
      const bool xs = dtype == DType::IQ4_XS;
      const double d16 = half_at(b, 0), delta = std::max(std::fabs(d16) * 0x1p-11, 0x1p-25);
      for (int i = 0; i < n; ++i) {
        const int sc = xs ? iq4_xs_scale(b, i / 32) : 1, q = xs ? nibble32(b, 8 + 16 * (i / 32), i % 32) : nibble32(b, 2, i);
        bound[i] = table_distance(x[i], d16 * sc) + std::abs(sc) * delta * (127 + std::abs(kIq4Table[q]));
      }
      break;
    }
    default: FAIL("not a block format");
  }
  for (int i = 0; i < n; ++i) bound[i] = bound[i] * (1 + 1e-5) + 1e-5 * std::fabs(x[i]) + 1e-30;
  return bound;
}

Bytes read_fixture(const std::string& name) {
  const std::string path = std::string(VKGATE_TEST_DATA_DIR) + "/quant/" + name;
  std::ifstream in(path, std::ios::binary);
  INFO("fixture " << path << " (tests/data/quant/README.md)");
  REQUIRE(in);
  return Bytes(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

std::vector<float> floats_of(const Bytes& b) {
  std::vector<float> out(b.size() / 4);
  std::memcpy(out.data(), b.data(), out.size() * 4);
  return out;
}

// The large generated row of tests/data/quant/generated.txt, as the
// generator script computes it (README.md there): xorshift32, 32-element
// blocks of eight kinds at power-of-two scales 2^-14 … 2^6, each value exact
// in double and rounded once to fp32.
std::vector<float> generated_row(uint32_t seed, size_t n) {
  uint32_t state = seed;
  auto next = [&] {
    state ^= state << 13;
    state ^= state >> 17;
    state ^= state << 5;
    return state;
  };
  std::vector<float> out;
  out.reserve(n);
  for (size_t b = 0; b < n / 32; ++b) {
    const uint32_t kind = next() % 8;
    const int e = int(next() % 21) - 14;
    const uint32_t hot = next() % 32;
    for (uint32_t i = 0; i < 32; ++i) {
      int64_t s = -2 * (int64_t(1) << 24);
      for (int k = 0; k < 4; ++k) s += next() >> 8;
      double v;
      if (kind <= 3) {
        v = std::ldexp(double(s), e - 24);  // bell-shaped
      } else if (kind == 4) {
        v = std::ldexp(double(next() >> 8), e - 24);  // all positive
      } else if (kind == 5) {
        v = std::ldexp(double(s), e - 24 + (next() % 16 == 0 ? 8 : 0));  // outliers
      } else if (kind == 6) {
        v = std::ldexp(double(int(next() % 33) - 16), e - 1);  // a grid: ties
      } else {
        v = i == hot ? std::ldexp(double(s), e - 24) : 0.0;  // one non-zero
      }
      out.push_back(float(v));
    }
  }
  return out;
}

uint64_t fnv1a64(const void* data, size_t size) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (size_t i = 0; i < size; ++i) h = (h ^ static_cast<const uint8_t*>(data)[i]) * 0x100000001b3ull;
  return h;
}

std::string hex64(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

std::string lower(const char* s) {
  std::string out(s);
  for (char& c : out) c = char(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

}  // namespace

TEST_CASE("quant: block sizes and stored bytes follow ggml's block structs") {
  const std::pair<DType, std::pair<size_t, size_t>> expected[] = {
      {DType::Q8_0, {32, 34}},   {DType::Q4_0, {32, 18}},   {DType::Q4_1, {32, 20}},   {DType::Q5_0, {32, 22}},
      {DType::Q5_1, {32, 24}},   {DType::Q4_K, {256, 144}}, {DType::Q5_K, {256, 176}}, {DType::Q6_K, {256, 210}},
      {DType::Q2_K, {256, 84}},  {DType::Q3_K, {256, 110}}, {DType::IQ4_NL, {32, 18}},  {DType::IQ4_XS, {256, 136}},
  };
  for (const auto& entry : expected) {  // no structured bindings: INFO captures in a lambda
    const DType dtype = entry.first;
    const auto sizes = entry.second;
    INFO("dtype " << std::string(to_string(dtype)));
    CHECK(block_elements(dtype) == sizes.first);
    CHECK(block_bytes(dtype) == sizes.second);
    CHECK(stored_bytes(dtype, 0) == size_t(0));
    CHECK(stored_bytes(dtype, int64_t(3 * sizes.first)) == 3 * sizes.second);
    CHECK(!stored_bytes(dtype, int64_t(sizes.first) + 1));
    CHECK(!stored_bytes(dtype, -int64_t(sizes.first)));
  }
  CHECK(stored_bytes(DType::F32, 7) == size_t(28));
  CHECK(stored_bytes(DType::BF16, 3) == size_t(6));
}

TEST_CASE("quant: dequantize equals a double-precision reference of each format, random and extreme blocks") {
  std::mt19937 rng(7);
  for (DType dtype : kFormats) {
    INFO("dtype " << std::string(to_string(dtype)));
    const size_t bb = block_bytes(dtype);
    Bytes blocks;
    // Random blocks: every quant pattern, any finite fp16 scale of either
    // sign (normal, subnormal, zero), every 6-bit and int8 sub-block scale.
    for (int k = 0; k < 64; ++k) {
      Bytes b(bb);
      for (uint8_t& v : b) v = uint8_t(rng());
      for (size_t f : half_fields(dtype)) {
        uint16_t h;
        do h = uint16_t(rng()); while (((h >> 10) & 31) == 31);
        put_half(b, f, h);
      }
      blocks.insert(blocks.end(), b.begin(), b.end());
    }
    // Extreme blocks: all quants 0 and all bits set, with the largest fp16
    // scale, the smallest subnormal one, negative ones and zero.
    for (uint8_t fill : {uint8_t(0x00), uint8_t(0xff), uint8_t(0x88), uint8_t(0x0f)}) {
      for (uint16_t h : {uint16_t(0x7bff), uint16_t(0xfbff), uint16_t(0x0001), uint16_t(0x8000), uint16_t(0x3c00)}) {
        Bytes b(bb, fill);
        const std::vector<size_t> fields = half_fields(dtype);
        for (size_t f : fields) put_half(b, f, h);
        if (fields.size() == 2) put_half(b, fields[1], uint16_t(h ^ 0x8000));  // min of the other sign
        blocks.insert(blocks.end(), b.begin(), b.end());
      }
    }
    check_against_reference(dtype, blocks);
  }
}

TEST_CASE("quant: hand-built blocks dequantize to the values their layout describes") {
  // Q4_0, d = −0.5: nibbles j and j + 16 of byte j.
  Bytes q4(18, 0);
  put_half(q4, 0, 0xb800);  // −0.5
  q4[2] = 0xf0;             // element 0: q = 0 → 4.0; element 16: q = 15 → −3.5
  q4[3] = 0x88;             // elements 1 and 17: q = 8 → 0
  std::vector<float> y = dequantized(DType::Q4_0, q4);
  CHECK(y[0] == 4.0f);
  CHECK(y[16] == -3.5f);
  CHECK(y[1] == 0.0f);
  CHECK(y[17] == 0.0f);
  CHECK(y[2] == 4.0f);  // byte 0 → q = 0

  // Q5_1, d = 0.25, m = −1: the fifth bit of element 31 is bit 31 of qh.
  Bytes q5(24, 0);
  put_half(q5, 0, 0x3400);
  put_half(q5, 2, 0xbc00);
  q5[7] = 0x80;   // qh bit 31
  q5[23] = 0xf0;  // byte 15 high nibble: element 31's low bits = 15
  y = dequantized(DType::Q5_1, q5);
  CHECK(y[31] == 0.25f * 31 - 1);
  CHECK(y[15] == -1.0f);

  // Q6_K, d = 2, sub-block scale −3 for elements 16..31 (the second int8).
  Bytes q6(210, 0);
  put_half(q6, 208, 0x4000);
  q6[192 + 1] = uint8_t(int8_t(-3));
  q6[20] = 0x0f;        // element 20: low 4 bits 15
  q6[128 + 20] = 0x03;  // element 20: top 2 bits 3 → q = 63
  y = dequantized(DType::Q6_K, q6);
  CHECK(y[20] == 2.0f * -3 * (63 - 32));
  CHECK(y[21] == 2.0f * -3 * -32);
  CHECK(y[0] == 0.0f);  // scale 0

  // Q4_K: d = 1, dmin = 0.5; sub-block 5 (elements 160..191, high nibbles of
  // bytes 128..159 of the nibbles) has scale 0b110101 = 53 and min 0b101010 = 42.
  Bytes qk(144, 0);
  put_half(qk, 0, 0x3c00);
  put_half(qk, 2, 0x3800);
  qk[4 + 9] = 0x05 | 0xa0;  // byte 9: scale 5 low bits 0101, min 5 low bits 1010
  qk[4 + 1] = 0xc0;         // scale 5 top bits 11
  qk[4 + 5] = 0x80;         // min 5 top bits 10
  qk[16 + 64 + 7] = 0x90;   // element 160 + 7: q = 9
  y = dequantized(DType::Q4_K, qk);
  CHECK(y[167] == 53.0f * 9 - 0.5f * 42);
  CHECK(y[160] == -0.5f * 42);
  CHECK(y[128 + 7] == 0.0f);  // sub-block 4: scale 0, min 0

  // Q2_K: d = 0.5, dmin = 0.25. Sub-block 5 (elements 80..95: the third
  // 32 of the first 128, second half) has scale 3 and min 4; element 83 is
  // bits 4-5 of qs[19]. Sub-block 13 (element 211 = 128 + 2·32 + 19) has
  // scale 15, min 0; its 2 bits are bits 4-5 of qs[32 + 19].
  Bytes q2(84, 0);
  put_half(q2, 80, 0x3800);
  put_half(q2, 82, 0x3400);
  q2[5] = 0x43;
  q2[13] = 0x0f;
  q2[16 + 19] = 0x30;       // q = 3 for element 83 (19 and 51, bits 0-3, stay 0)
  q2[16 + 32 + 19] = 0x20;  // q = 2 for element 211
  y = dequantized(DType::Q2_K, q2);
  CHECK(y[83] == 0.5f * 3 * 3 - 0.25f * 4);
  CHECK(y[80] == -1.0f);
  CHECK(y[19] == 0.0f);
  CHECK(y[211] == 0.5f * 15 * 2);

  // Q3_K: d = 2. Sub-block 9 (elements 144..159) stores 29 = 0b01'1101
  // (scale −3): low bits in the high nibble of byte 1 of the scales, top
  // bits at bits 4-5 of their byte 9. Element 150 (the second 128, l = 22):
  // low bits 01 in qs[32 + 22], hmask[22] bit 150 / 32 = 4 set: q = 1.
  Bytes q3(110, 0);
  put_half(q3, 108, 0x4000);
  q3[96 + 1] = 0xd0;
  q3[96 + 9] = 0x10;
  q3[32 + 32 + 22] = 0x01;
  q3[22] = 0x10;
  y = dequantized(DType::Q3_K, q3);
  CHECK(y[150] == 2.0f * -3 * 1);
  CHECK(y[151] == 2.0f * -3 * -4);  // hmask bit clear: q = 0 − 4
  CHECK(y[0] == 2.0f * -32 * -4);   // stored scale 0 is −32

  // IQ4_NL, d = 0.5: byte 3 of the codes holds elements 3 (low nibble) and 19.
  Bytes nl(18, 0);
  put_half(nl, 0, 0x3800);
  nl[2 + 3] = 0x9f;
  y = dequantized(DType::IQ4_NL, nl);
  CHECK(y[3] == 0.5f * 113);
  CHECK(y[19] == 0.5f * 13);
  CHECK(y[0] == 0.5f * -127);

  // IQ4_XS, d = 0.25: sub-block 5 stores 39 = 0b10'0111 (scale 7), low bits
  // in the high nibble of scales_l[2], top bits at bits 10-11 of scales_h.
  // Element 180 = 5·32 + 20: high nibble of the sub-block's code byte 4.
  Bytes xs(136, 0);
  put_half(xs, 0, 0x3400);
  xs[4 + 2] = 0x70;
  xs[3] = 0x08;
  xs[8 + 16 * 5 + 4] = 0xe0;
  y = dequantized(DType::IQ4_XS, xs);
  CHECK(y[180] == 0.25f * 7 * 89);
  CHECK(y[164] == 0.25f * 7 * -127);
  CHECK(y[0] == 0.25f * -32 * -127);
}

TEST_CASE("quant: round trips stay within each format's error bound") {
  for (DType dtype : kFormats) {
    INFO("dtype " << std::string(to_string(dtype)));
    for (uint32_t seed : {1u, 2u, 3u, 4u, 5u}) {
      const std::vector<float> x = mixed_row(seed, 64);  // 2048 elements: whole blocks of every format
      const Bytes q = to_bytes(quantize(dtype, x));
      REQUIRE(q.size() == *stored_bytes(dtype, int64_t(x.size())));
      const std::vector<float> y = dequantized(dtype, q);
      const size_t be = block_elements(dtype), bb = block_bytes(dtype);
      int failures = 0;
      for (size_t k = 0; k < x.size() / be; ++k) {
        const Bytes block(q.begin() + long(k * bb), q.begin() + long((k + 1) * bb));
        const std::vector<double> bound = error_bounds(dtype, x.data() + k * be, block);
        for (size_t i = 0; i < be && failures < 5; ++i) {
          const double err = std::fabs(double(x[k * be + i]) - y[k * be + i]);
          if (!(err <= bound[i])) {
            ++failures;
            CAPTURE(k);
            CAPTURE(i);
            CAPTURE(x[k * be + i]);
            CAPTURE(y[k * be + i]);
            CHECK(err <= bound[i]);
          }
        }
      }
      // The all-zero block (block 3, elements 96..127) comes back as zeros.
      for (size_t i = 96; i < 128; ++i) CHECK(y[i] == 0.0f);
    }
  }
}

TEST_CASE("quant: normal data round trips with the relative RMS error of the format's step") {
  // In 32 normal samples the largest magnitude is about 2.4σ and the range
  // about 4.2σ (in 16, Q2_K's and Q3_K's sub-blocks: 2.1σ and 3.5σ), so a
  // grid step is about 2.4σ/(levels/2) for the symmetric formats and
  // 4.2σ/(levels − 1) for those with a min; rounding to it leaves step/√12.
  // The IQ4 tables' 16 levels span about twice the largest magnitude, as
  // Q4_0's do. Bounds: that estimate with a 25% margin (the k-quants' and
  // the IQ4 forms' fitted scales do better than their plain step).
  const double k = 1.25 / std::sqrt(12.0);
  const std::pair<DType, double> bounds[] = {
      {DType::Q8_0, k * 2.4 / 127}, {DType::Q4_0, k * 2.4 / 8},  {DType::Q4_1, k * 4.2 / 15},
      {DType::Q5_0, k * 2.4 / 16},  {DType::Q5_1, k * 4.2 / 31}, {DType::Q4_K, k * 4.2 / 15},
      {DType::Q5_K, k * 4.2 / 31},  {DType::Q6_K, k * 2.4 / 32}, {DType::Q2_K, k * 3.5 / 3},
      {DType::Q3_K, k * 2.1 / 4},   {DType::IQ4_NL, k * 2.4 / 8}, {DType::IQ4_XS, k * 2.4 / 8},
  };
  std::mt19937 rng(11);
  std::normal_distribution<float> normal;
  std::vector<float> x(8192);
  for (float& v : x) v = normal(rng);
  for (const auto& entry : bounds) {
    const DType dtype = entry.first;
    const double bound = entry.second;
    INFO("dtype " << std::string(to_string(dtype)));
    const std::vector<float> y = dequantized(dtype, to_bytes(quantize(dtype, x)));
    double err2 = 0, x2 = 0;
    for (size_t i = 0; i < x.size(); ++i) {
      err2 += (double(x[i]) - y[i]) * (double(x[i]) - y[i]);
      x2 += double(x[i]) * x[i];
    }
    const double relative = std::sqrt(err2 / x2);
    CAPTURE(relative);
    CHECK(relative <= bound);
    CHECK(relative > 0);
  }
}

TEST_CASE("quant: quantize matches ggml's reference quantizers byte for byte (tests/data/quant)") {
  const std::vector<float> x = floats_of(read_fixture("input.f32"));
  REQUIRE(x.size() == 1024);
  for (DType dtype : kFormats) {
    const std::string name = lower(to_string(dtype));
    CAPTURE(name);
    const Bytes want = read_fixture(name + ".q");
    const Bytes got = to_bytes(quantize(dtype, x));
    REQUIRE(got.size() == want.size());
    size_t differing = 0, first = got.size();
    for (size_t i = 0; i < got.size(); ++i) {
      if (got[i] != want[i]) {
        ++differing;
        first = std::min(first, i);
      }
    }
    CAPTURE(first);
    CHECK(differing == 0);
  }
}

TEST_CASE("quant: dequantize matches gguf-py's bit for bit (tests/data/quant)") {
  for (DType dtype : kFormats) {
    for (const char* suffix : {"", ".random"}) {
      const std::string name = lower(to_string(dtype)) + suffix;
      CAPTURE(name);
      const Bytes blocks = read_fixture(name + ".q");
      const std::vector<float> want = floats_of(read_fixture(name + ".f32"));
      const std::vector<float> got = dequantized(dtype, blocks);
      REQUIRE(got.size() == want.size());
      size_t differing = 0;
      for (size_t i = 0; i < got.size(); ++i) differing += std::bit_cast<uint32_t>(got[i]) != std::bit_cast<uint32_t>(want[i]);
      CHECK(differing == 0);
    }
  }
}

TEST_CASE("quant: a large generated row quantizes and dequantizes to ggml's and gguf-py's hashes") {
  // 65536 values (2048 blocks of 32, 256 of 256) of every kind the generator
  // makes; the hashes in generated.txt are of ggml's quantized bytes and of
  // gguf-py's dequantized values.
  const Bytes text = read_fixture("generated.txt");
  std::istringstream in(std::string(text.begin(), text.end()));
  std::string line, name, want_q, want_y;
  std::getline(in, line);  // comment
  unsigned long long seed = 0;
  size_t n = 0;
  REQUIRE(std::sscanf(line.c_str(), "# generated_row(%llu, %zu)", &seed, &n) == 2);
  const std::vector<float> x = generated_row(uint32_t(seed), n);
  in >> name >> want_q;
  REQUIRE(name == "input");
  REQUIRE(hex64(fnv1a64(x.data(), x.size() * 4)) == want_q);  // the generator agrees with the script
  int formats = 0;
  while (in >> name >> want_q >> want_y) {
    CAPTURE(name);
    const std::optional<DType> dtype = parse_quant(name);
    REQUIRE(dtype);
    const Bytes q = to_bytes(quantize(*dtype, x));
    CHECK(hex64(fnv1a64(q.data(), q.size())) == want_q);
    const std::vector<float> y = dequantized(*dtype, q);
    CHECK(hex64(fnv1a64(y.data(), y.size() * 4)) == want_y);
    ++formats;
  }
  CHECK(formats == int(std::size(kFormats)));
}

TEST_CASE("quant: non-finite inputs quantize without undefined behaviour") {
  // ggml gives such blocks no meaning; the point is that quantize() runs
  // (clean under -fsanitize=undefined) and fills whole blocks.
  std::vector<float> x(512, 1.0f);
  x[3] = std::numeric_limits<float>::quiet_NaN();
  x[40] = std::numeric_limits<float>::infinity();
  x[300] = -std::numeric_limits<float>::infinity();
  x[301] = 1e-40f;
  for (DType dtype : kFormats) {
    INFO("dtype " << std::string(to_string(dtype)));
    const std::vector<std::byte> q = quantize(dtype, x);
    CHECK(q.size() == *stored_bytes(dtype, 512));
  }
}

TEST_CASE("quant: IQ4 blocks below ggml's GROUP_MAX_EPS encode as ggml's quantizers leave them") {
  // An IQ4_NL block below it stores d = +0 and every code 8 (the table's 1,
  // the nearest to 0·x), whatever the blocks around it hold.
  std::vector<float> x(96, 0.0f);
  for (int i = 0; i < 32; ++i) x[32 + i] = float(i - 13);
  x[64] = 1e-16f;
  const Bytes nl = to_bytes(quantize(DType::IQ4_NL, x));
  Bytes zero_block(18, 0x88);
  zero_block[0] = zero_block[1] = 0x00;
  CHECK(Bytes(nl.begin(), nl.begin() + 18) == zero_block);
  CHECK(Bytes(nl.begin() + 36, nl.end()) == zero_block);
  CHECK(half_at(nl, 18) != 0.0);

  // An all-zero IQ4_XS super-block: d = −0/32 (fp16 0x8000), every scale
  // stored as 32 (scale 0; top bits 0b10) and every code 8, the table's 1.
  const Bytes xs = to_bytes(quantize(DType::IQ4_XS, std::vector<float>(256, 0.0f)));
  Bytes want(136, 0x88);
  want[0] = 0x00;
  want[1] = 0x80;
  want[2] = want[3] = 0xaa;
  want[4] = want[5] = want[6] = want[7] = 0x00;
  CHECK(xs == want);
}

TEST_CASE("quant: parse_quant reads the --quant spellings, case-insensitively") {
  CHECK(parse_quant("q8_0") == DType::Q8_0);
  CHECK(parse_quant("Q4_0") == DType::Q4_0);
  CHECK(parse_quant("q4_1") == DType::Q4_1);
  CHECK(parse_quant("q5_0") == DType::Q5_0);
  CHECK(parse_quant("Q5_1") == DType::Q5_1);
  CHECK(parse_quant("q4_K") == DType::Q4_K);
  CHECK(parse_quant("Q5_K") == DType::Q5_K);
  CHECK(parse_quant("q6_k") == DType::Q6_K);
  CHECK(parse_quant("q2_K") == DType::Q2_K);
  CHECK(parse_quant("Q3_K") == DType::Q3_K);
  CHECK(parse_quant("iq4_nl") == DType::IQ4_NL);
  CHECK(parse_quant("IQ4_xs") == DType::IQ4_XS);
  for (const char* bad : {"", "q4", "q4_0 ", "f16", "q3_k_m", "iq4", "iq4_x", "iq2_xxs", "q8_0x"}) {
    INFO("spelling \"" << std::string(bad) << "\"");
    CHECK(!parse_quant(bad));
  }
  for (DType dtype : kFormats) CHECK(parse_quant(to_string(dtype)) == dtype);
  CHECK(std::string(to_string(DType::Q2_K)) == "Q2_K");
  CHECK(std::string(to_string(DType::Q3_K)) == "Q3_K");
  CHECK(std::string(to_string(DType::IQ4_NL)) == "IQ4_NL");
  CHECK(std::string(to_string(DType::IQ4_XS)) == "IQ4_XS");
}

TEST_CASE("quant: ggml type ids map both ways and every ggml id has its name") {
  const std::pair<uint32_t, DType> ids[] = {
      {0, DType::F32},   {1, DType::F16},   {2, DType::Q4_0},  {3, DType::Q4_1},  {6, DType::Q5_0},
      {7, DType::Q5_1},  {8, DType::Q8_0},  {10, DType::Q2_K}, {11, DType::Q3_K}, {12, DType::Q4_K},
      {13, DType::Q5_K}, {14, DType::Q6_K}, {20, DType::IQ4_NL}, {23, DType::IQ4_XS}, {30, DType::BF16},
  };
  for (const auto& entry : ids) {
    const uint32_t id = entry.first;
    const DType dtype = entry.second;
    CAPTURE(id);
    CHECK(dtype_from_ggml(id) == dtype);
    CHECK(ggml_type_of(dtype) == id);
  }
  for (uint32_t unread :
       {9u, 15u, 16u, 17u, 18u, 19u, 21u, 22u, 24u, 25u, 29u, 34u, 35u, 39u, 40u, 41u, 42u, 43u, 1000u}) {
    CAPTURE(unread);
    CHECK(!dtype_from_ggml(unread));
  }
  CHECK(ggml_type_name(12) == "q4_K");
  CHECK(ggml_type_name(23) == "iq4_xs");
  CHECK(ggml_type_name(16) == "iq2_xxs");
  CHECK(ggml_type_name(30) == "bf16");
  CHECK(ggml_type_name(35) == "tq2_0");
  CHECK(ggml_type_name(39) == "mxfp4");
  CHECK(ggml_type_name(42) == "q2_0");
  CHECK(ggml_type_name(43) == "type 43");
  CHECK(ggml_type_name(4000000000u) == "type 4000000000");
  for (uint32_t id = 0; id < 43; ++id) CHECK(ggml_type_name(id).rfind("type ", 0) != 0);
}

TEST_CASE("quant: sizes that are not whole blocks and plain dtypes are rejected naming the problem") {
  const std::vector<float> x(40, 1.0f);
  expect_error([&] { quantize(DType::Q8_0, x); }, ErrorCode::invalid_argument, {"Q8_0", "40", "32"});
  expect_error([&] { quantize(DType::Q4_K, std::span<const float>(x).first(32)); }, ErrorCode::invalid_argument,
               {"Q4_K", "32", "256"});
  expect_error([&] { quantize(DType::IQ4_XS, std::span<const float>(x).first(32)); }, ErrorCode::invalid_argument,
               {"IQ4_XS", "32", "256"});
  expect_error([&] { quantize(DType::F16, x); }, ErrorCode::invalid_argument, {"F16", "not a block format"});

  const Bytes blocks(34 * 2, 0);
  std::vector<float> out(96);
  expect_error([&] { dequantize(DType::Q8_0, as_bytes(blocks), out); }, ErrorCode::shape_mismatch,
               {"Q8_0", "68 bytes", "96 elements", "102"});
  std::vector<float> ragged(50);
  expect_error([&] { dequantize(DType::Q8_0, as_bytes(blocks), ragged); }, ErrorCode::shape_mismatch,
               {"Q8_0", "50 elements", "multiple of 32"});
  std::vector<float> super_block(256);
  expect_error([&] { dequantize(DType::Q2_K, as_bytes(blocks), super_block); }, ErrorCode::shape_mismatch,
               {"Q2_K", "68 bytes", "256 elements", "84"});
  expect_error([&] { dequantize(DType::BF16, as_bytes(blocks), out); }, ErrorCode::invalid_argument,
               {"BF16", "not a block format"});
  std::vector<float> empty;
  dequantize(DType::Q6_K, {}, empty);  // nothing to do is fine
  CHECK(quantize(DType::Q6_K, {}).empty());
}

}  // namespace test_quant
