// GGUF's writer (include/vkgate/gguf.hpp): the header built in memory, then
// the tensors, each aligned, written through OutputFile.
#include <cstring>

#include "io/gguf_format.hpp"
#include "vkgate/error.hpp"
#include "vkgate/gguf.hpp"
#include "vkgate/output_file.hpp"

namespace vkgate {

using namespace gguf_format;

namespace {

void put(std::string& out, const void* p, size_t n) { out.append(static_cast<const char*>(p), n); }
template <typename T>
void put(std::string& out, T v) {
  put(out, &v, sizeof v);
}
void put_string(std::string& out, const std::string& s) {
  put<uint64_t>(out, s.size());
  out += s;
}

void put_scalar(std::string& out, GgufType t, int64_t integer, double real) {
  switch (t) {
    case GgufType::U8: case GgufType::BOOL: put<uint8_t>(out, uint8_t(integer)); break;
    case GgufType::I8: put<int8_t>(out, int8_t(integer)); break;
    case GgufType::U16: put<uint16_t>(out, uint16_t(integer)); break;
    case GgufType::I16: put<int16_t>(out, int16_t(integer)); break;
    case GgufType::U32: put<uint32_t>(out, uint32_t(integer)); break;
    case GgufType::I32: put<int32_t>(out, int32_t(integer)); break;
    case GgufType::U64: case GgufType::I64: put<int64_t>(out, integer); break;
    case GgufType::F32: put<float>(out, float(real)); break;
    case GgufType::F64: put<double>(out, real); break;
    default: break;  // refused by check_value
  }
}

void put_value(std::string& out, const GgufValue& v) {
  put<uint32_t>(out, uint32_t(v.type));
  if (v.type == GgufType::STRING) {
    put_string(out, v.text);
  } else if (v.type == GgufType::ARRAY) {
    put<uint32_t>(out, uint32_t(v.element));
    if (v.element == GgufType::STRING) {
      put<uint64_t>(out, v.texts.size());
      for (const std::string& s : v.texts) put_string(out, s);
    } else if (is_float_type(v.element)) {
      put<uint64_t>(out, v.reals.size());
      for (double r : v.reals) put_scalar(out, v.element, 0, r);
    } else {
      put<uint64_t>(out, v.integers.size());
      for (int64_t x : v.integers) put_scalar(out, v.element, x, 0);
    }
  } else {
    put_scalar(out, v.type, v.integer, v.real);
  }
}

// A value the writer can store as it is: a known type, integers in the range
// of theirs, no array of arrays.
void check_value(const std::string& key, const GgufValue& v) {
  auto fail = [&](const std::string& what) {
    throw Error(ErrorCode::invalid_argument, "GGUF key '" + key + "': " + what);
  };
  if (!valid_type(uint32_t(v.type))) fail("unknown value type " + std::to_string(uint32_t(v.type)));
  const bool array = v.type == GgufType::ARRAY;
  const GgufType t = array ? v.element : v.type;
  if (array && (!valid_type(uint32_t(t)) || t == GgufType::ARRAY))
    fail("an array's elements must be of a scalar type or strings");
  if (!is_integer_type(t) && t != GgufType::BOOL) return;
  // Plain variables, not a structured binding: clang 14 cannot capture one.
  const int64_t lo = integer_range(t).first, hi = integer_range(t).second;
  auto check = [&](int64_t x) {
    if (x < lo || x > hi)
      fail("the value " + std::to_string(x) + " does not fit in a " + to_string(t) + " (" + std::to_string(lo) +
           " to " + std::to_string(hi) + ")");
  };
  if (array)
    for (int64_t x : v.integers) check(x);
  else
    check(v.integer);
}

}  // namespace

GgufWriter::GgufWriter(uint64_t alignment) : alignment_(alignment) {
  if (alignment == 0 || !std::has_single_bit(alignment) || alignment > UINT32_MAX)
    throw Error(ErrorCode::invalid_argument,
                "GGUF alignment " + std::to_string(alignment) + " is not a power of two that fits in a u32");
}

void GgufWriter::set(const std::string& key, GgufValue value) {
  if (key.empty()) throw Error(ErrorCode::invalid_argument, "GGUF key: the key is empty");
  // The alignment is the constructor's, written by write(); a copy of a
  // file's metadata may carry it, and then it must agree with the data.
  if (key == kAlignmentKey) {
    if (value.type != GgufType::U32 || uint64_t(value.integer) != alignment_)
      throw Error(ErrorCode::invalid_argument,
                  std::string("GGUF key '") + kAlignmentKey + "' must be the u32 " + std::to_string(alignment_) +
                      " this GgufWriter aligns to (pass another alignment to its constructor)");
    return;
  }
  check_value(key, value);
  for (auto& [k, v] : metadata_)
    if (k == key) {
      v = std::move(value);
      return;
    }
  metadata_.emplace_back(key, std::move(value));
}

void GgufWriter::add_tensor(const std::string& name, DType dtype, std::vector<int64_t> shape,
                            std::span<const std::byte> bytes) {
  auto fail = [&](ErrorCode code, const std::string& what) {
    throw Error(code, "GGUF tensor '" + name + "': " + what);
  };
  if (name.empty()) fail(ErrorCode::invalid_argument, "the name is empty");
  for (const Pending& t : tensors_)
    if (t.name == name) fail(ErrorCode::invalid_argument, "added twice");
  if (!gguf_dtype(dtype))
    fail(ErrorCode::invalid_argument, std::string("dtype ") + to_string(dtype) + " is not one vkgate writes to GGUF (" +
                                          kReadable + ")");
  if (shape.empty() || shape.size() > kMaxDims)
    fail(ErrorCode::invalid_argument, "shape " + shape_text(shape) + " must have 1 to 4 dimensions");
  int64_t numel = 1;
  for (int64_t d : shape) {
    if (d <= 0) fail(ErrorCode::invalid_argument, "shape " + shape_text(shape) + " has a dimension that is not positive");
    if (numel > INT64_MAX / d) fail(ErrorCode::invalid_argument, "shape " + shape_text(shape) + " has too many elements");
    numel *= d;
  }
  if (shape.back() % int64_t(block_elements(dtype)) != 0)
    fail(ErrorCode::shape_mismatch, "rows of " + std::to_string(shape.back()) + " elements are not a whole number of " +
                                        to_string(dtype) + " blocks of " + std::to_string(block_elements(dtype)));
  const std::optional<size_t> expected = stored_bytes(dtype, numel);
  if (!expected || *expected != bytes.size())
    fail(ErrorCode::shape_mismatch, "has " + std::to_string(bytes.size()) + " bytes, its shape " + shape_text(shape) +
                                        " of " + to_string(dtype) + " needs " +
                                        (expected ? std::to_string(*expected) : "too many"));
  tensors_.push_back({name, dtype, std::move(shape), bytes});
}

void GgufWriter::write(const std::string& path) const {
  std::string header;
  put(header, "GGUF", 4);
  put<uint32_t>(header, kVersion);
  put<uint64_t>(header, tensors_.size());
  put<uint64_t>(header, metadata_.size() + (alignment_ != kDefaultAlignment ? 1 : 0));
  if (alignment_ != kDefaultAlignment) {
    put_string(header, kAlignmentKey);
    put_value(header, GgufValue::of_u32(uint32_t(alignment_)));
  }
  for (const auto& [key, value] : metadata_) {
    put_string(header, key);
    put_value(header, value);
  }
  uint64_t offset = 0;
  for (const Pending& t : tensors_) {
    put_string(header, t.name);
    put<uint32_t>(header, uint32_t(t.shape.size()));
    for (auto d = t.shape.rbegin(); d != t.shape.rend(); ++d) put<uint64_t>(header, uint64_t(*d));
    put<uint32_t>(header, ggml_type_of(t.dtype));
    put<uint64_t>(header, offset);
    offset += align_up(t.bytes.size(), alignment_);
  }
  header.resize(size_t(align_up(header.size(), alignment_)), '\0');

  const std::string zeros(size_t(alignment_), '\0');
  OutputFile file(path);
  file.write(header);
  for (const Pending& t : tensors_) {
    file.write(t.bytes);
    // Padding after every tensor, the last included, as llama.cpp writes it.
    file.write(std::string_view(zeros).substr(0, size_t(align_up(t.bytes.size(), alignment_) - t.bytes.size())));
  }
  file.commit();
}

}  // namespace vkgate
