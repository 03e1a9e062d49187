// Internal: what the GGUF reader (gguf.cpp) and writer (gguf_writer.cpp)
// share: the format's constants and its value types' sizes and ranges.
#pragma once

#include <cstdint>
#include <limits>
#include <utility>

#include "vkgate/gguf.hpp"
#include "vkgate/quant.hpp"

namespace vkgate::gguf_format {

constexpr uint32_t kVersion = 3;
constexpr uint64_t kDefaultAlignment = 32;
constexpr uint32_t kMaxDims = 4;  // GGML_MAX_DIMS
inline const char* const kAlignmentKey = "general.alignment";
inline const char* const kReadable = "F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS";

// The tensor types vkgate reads from and writes to GGUF. ggml's I32, I64 and
// F64 have DTypes too, but no model weight is stored so.
inline bool gguf_dtype(DType d) { return d == DType::F32 || d == DType::F16 || d == DType::BF16 || is_quantized(d); }

inline bool valid_type(uint32_t t) { return t <= uint32_t(GgufType::F64); }
inline bool is_integer_type(GgufType t) {
  switch (t) {
    case GgufType::U8: case GgufType::I8: case GgufType::U16: case GgufType::I16:
    case GgufType::U32: case GgufType::I32: case GgufType::U64: case GgufType::I64:
      return true;
    default:
      return false;
  }
}
inline bool is_float_type(GgufType t) { return t == GgufType::F32 || t == GgufType::F64; }

// Bytes of one value of a fixed-size type; 0 for string and array.
inline uint64_t scalar_size(GgufType t) {
  switch (t) {
    case GgufType::U8: case GgufType::I8: case GgufType::BOOL: return 1;
    case GgufType::U16: case GgufType::I16: return 2;
    case GgufType::U32: case GgufType::I32: case GgufType::F32: return 4;
    case GgufType::U64: case GgufType::I64: case GgufType::F64: return 8;
    default: return 0;
  }
}

// The range an integer type holds, as int64 (U64 is kept as its bit pattern,
// so any int64 is a valid U64).
inline std::pair<int64_t, int64_t> integer_range(GgufType t) {
  switch (t) {
    case GgufType::U8: return {0, 255};
    case GgufType::I8: return {-128, 127};
    case GgufType::U16: return {0, 65535};
    case GgufType::I16: return {-32768, 32767};
    case GgufType::U32: return {0, int64_t(UINT32_MAX)};
    case GgufType::I32: return {INT32_MIN, INT32_MAX};
    case GgufType::BOOL: return {0, 1};
    default: return {INT64_MIN, INT64_MAX};
  }
}

inline uint64_t align_up(uint64_t n, uint64_t alignment) { return (n + alignment - 1) / alignment * alignment; }

}  // namespace vkgate::gguf_format
