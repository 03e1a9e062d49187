// ggml's block formats on the host (vkgate/quant.hpp): the 32-element
// formats and the dispatch here, the k-quants in quant_k.cpp, IQ4_NL and
// IQ4_XS in quant_iq4.cpp (quant_blocks.hpp).
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
// an expression; both are told not to (quant_blocks.hpp).
#include "vkgate/quant.hpp"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <limits>

#include "quant_blocks.hpp"
#include "vkgate/error.hpp"

namespace vkgate {

using namespace quant_blocks;

namespace {

// ---- scalar helpers ----

uint32_t load_u32(const uint8_t* p) {
  return uint32_t(p[0]) | (uint32_t(p[1]) << 8) | (uint32_t(p[2]) << 16) | (uint32_t(p[3]) << 24);
}

void store_u32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = uint8_t(v >> (8 * i));
}

// C's (int8_t)/(uint8_t) conversion of a float as x86-64 compilers emit it:
// truncate to int32 (0x80000000 when NaN or out of range) and keep the low byte.
uint8_t to_byte(float x) {
  if (!(x > -2147483648.f && x < 2147483648.f)) return 0;
  return uint8_t(uint32_t(int32_t(x)));
}
int to_int8(float x) { return int(int8_t(to_byte(x))); }

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

void dequant_q4_0(const uint8_t* b, float* y) {
  const float d = load_half(b);
  for (int j = 0; j < 16; ++j) {
    y[j] = float((b[2 + j] & 0x0f) - 8) * d;
    y[j + 16] = float((b[2 + j] >> 4) - 8) * d;
  }
}

void quant_q4_0(const float* x, uint8_t* b) {
  const float d = signed_absmax(x, 32) / -8;  // the extreme value maps to q = 0 exactly
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
  const float d = signed_absmax(x, 32) / -16;
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
    case DType::Q4_K: return {dequant_q4_k, quant_q4_k};
    case DType::Q5_K: return {dequant_q5_k, quant_q5_k};
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
