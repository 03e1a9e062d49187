// GGUF v3 files (include/vkgate/gguf.hpp): a reader that maps the file and
// validates every count, length and offset against its size before trusting
// it, and a writer that builds the header in memory and writes through
// OutputFile.
#include "vkgate/gguf.hpp"

#include <algorithm>
#include <bit>
#include <cstring>
#include <limits>
#include <set>
#include <utility>

#include "io/gguf_format.hpp"
#include "io/mapped_file.hpp"
#include "vkgate/error.hpp"
#include "vkgate/output_file.hpp"
#include "vkgate/quant.hpp"

static_assert(std::endian::native == std::endian::little, "GGUF is read in place as little-endian");

namespace vkgate {

using namespace gguf_format;

namespace {



// "a string", "an array of u32": what a value is, for messages.
std::string describe(const GgufValue& v) {
  if (v.type == GgufType::ARRAY) return std::string("an array of ") + to_string(v.element);
  const std::string t = to_string(v.type);
  return (t[0] == 'i' || t[0] == 'f' ? "an " : "a ") + t;
}


}  // namespace

const char* to_string(GgufType type) noexcept {
  switch (type) {
    case GgufType::U8: return "u8";
    case GgufType::I8: return "i8";
    case GgufType::U16: return "u16";
    case GgufType::I16: return "i16";
    case GgufType::U32: return "u32";
    case GgufType::I32: return "i32";
    case GgufType::F32: return "f32";
    case GgufType::BOOL: return "bool";
    case GgufType::STRING: return "string";
    case GgufType::ARRAY: return "array";
    case GgufType::U64: return "u64";
    case GgufType::I64: return "i64";
    case GgufType::F64: return "f64";
  }
  return "?";
}

// ---- values ----

GgufValue GgufValue::of_string(std::string s) {
  GgufValue v;
  v.type = GgufType::STRING;
  v.text = std::move(s);
  return v;
}
GgufValue GgufValue::of_u32(uint32_t x) {
  GgufValue v;
  v.type = GgufType::U32;
  v.integer = x;
  return v;
}
GgufValue GgufValue::of_i32(int32_t x) {
  GgufValue v;
  v.type = GgufType::I32;
  v.integer = x;
  return v;
}
GgufValue GgufValue::of_u64(uint64_t x) {
  GgufValue v;
  v.type = GgufType::U64;
  v.integer = std::bit_cast<int64_t>(x);
  return v;
}
GgufValue GgufValue::of_f32(float x) {
  GgufValue v;
  v.type = GgufType::F32;
  v.real = x;
  return v;
}
GgufValue GgufValue::of_bool(bool x) {
  GgufValue v;
  v.type = GgufType::BOOL;
  v.integer = x ? 1 : 0;
  return v;
}
GgufValue GgufValue::of_strings(std::vector<std::string> x) {
  GgufValue v;
  v.type = GgufType::ARRAY;
  v.element = GgufType::STRING;
  v.texts = std::move(x);
  return v;
}
GgufValue GgufValue::of_i32s(std::vector<int64_t> x) {
  GgufValue v;
  v.type = GgufType::ARRAY;
  v.element = GgufType::I32;
  v.integers = std::move(x);
  return v;
}
GgufValue GgufValue::of_f32s(std::vector<double> x) {
  GgufValue v;
  v.type = GgufType::ARRAY;
  v.element = GgufType::F32;
  v.reals = std::move(x);
  return v;
}

// ---- reading ----

namespace gguf_detail {

// What a file holds; GgufFile::Impl adds the mapping's lifetime. A named
// namespace because the private Impl cannot be named by the parser.
struct Contents {
  std::string path;
  uint32_t version = kVersion;
  uint64_t alignment = kDefaultAlignment;
  uint64_t tensor_bytes = 0;
  std::map<std::string, GgufValue> metadata;
  std::vector<GgufTensor> tensors;
  std::map<std::string, size_t> by_name;  // index into tensors
};

}  // namespace gguf_detail

struct GgufFile::Impl : gguf_detail::Contents {
  Mapping map;

  Impl() = default;
  Impl(const Impl&) = delete;
  Impl& operator=(const Impl&) = delete;
  ~Impl() { unmap_file(map); }
};

namespace {

// Reads the header of a mapped file front to back. Every read checks the
// bytes left first; every count is checked against the bytes left before
// anything proportional to it is allocated. `where_` names what is being read
// ("key 'general.name'", "tensor 'x'") for the messages.
class Parser {
 public:
  Parser(gguf_detail::Contents& out, std::span<const std::byte> file) : out_(out), file_(file) {}

  void parse() {
    where_ = "the header";
    if (file_.size() < 4 || std::memcmp(file_.data(), "GGUF", 4) != 0)
      fail("not a GGUF file (it does not start with the magic \"GGUF\")");
    pos_ = 4;
    out_.version = u32();
    if (out_.version == 0x03000000u)  // 3 with its bytes reversed
      fail("a big-endian GGUF file (version 3 byte-swapped); vkgate reads little-endian ones only");
    if (out_.version != kVersion)
      fail("GGUF version " + std::to_string(out_.version) +
           (out_.version == 1 || out_.version == 2 ? " is an old format" : " is unknown") +
           "; vkgate reads version 3 only (convert it with a current llama.cpp)");
    const uint64_t n_tensors = u64();
    const uint64_t n_kv = u64();
    // The smallest key is 13 bytes (length, type, one byte of value); the
    // smallest tensor info 32 (name length, n_dims, one dimension, type, offset).
    if (n_kv > remaining() / 13)
      fail("the key count " + std::to_string(n_kv) + " cannot fit in the " + std::to_string(remaining()) +
           " bytes after the header");
    if (n_tensors > remaining() / 32)
      fail("the tensor count " + std::to_string(n_tensors) + " cannot fit in the " + std::to_string(remaining()) +
           " bytes after the header");

    for (uint64_t i = 0; i < n_kv; ++i) read_kv(i, n_kv);
    read_alignment();
    for (uint64_t i = 0; i < n_tensors; ++i) read_tensor_info(i, n_tensors);

    // The data section starts at the next multiple of the alignment.
    const uint64_t data_start = align_up(pos_, out_.alignment);
    if (n_tensors > 0 && data_start > file_.size()) {
      where_ = "the data section";
      fail("starts at byte " + std::to_string(data_start) + ", past the end of the " +
           std::to_string(file_.size()) + "-byte file");
    }
    const uint64_t data_size = data_start <= file_.size() ? file_.size() - data_start : 0;
    for (GgufTensor& t : out_.tensors) {
      where_ = "tensor '" + t.name + "'";
      const uint64_t size = t.bytes.size();  // the expected size, set by read_tensor_info
      if (t.offset % out_.alignment != 0)
        fail("offset " + std::to_string(t.offset) + " is not a multiple of the alignment " +
             std::to_string(out_.alignment));
      if (t.offset > data_size || size > data_size - t.offset)
        fail("its " + std::to_string(size) + " bytes at offset " + std::to_string(t.offset) +
             " run past the end of the " + std::to_string(data_size) + "-byte data section");
      t.bytes = file_.subspan(data_start + t.offset, size);
      out_.tensor_bytes += size;
    }
    check_no_overlap();
  }

 private:
  [[noreturn]] void fail(const std::string& message, ErrorCode code = ErrorCode::io) const {
    throw Error(code, out_.path + ": " + where_ + ": " + message);
  }

  uint64_t remaining() const { return file_.size() - pos_; }

  // `n` bytes at the cursor, which then moves past them.
  const std::byte* take(uint64_t n) {
    if (n > remaining())
      fail("the file ends early: " + std::to_string(n) + " bytes needed at offset " + std::to_string(pos_) +
           ", the file has " + std::to_string(file_.size()));
    const std::byte* p = file_.data() + pos_;
    pos_ += n;
    return p;
  }
  template <typename T>
  T scalar() {
    T v;
    std::memcpy(&v, take(sizeof v), sizeof v);
    return v;
  }
  uint32_t u32() { return scalar<uint32_t>(); }
  uint64_t u64() { return scalar<uint64_t>(); }
  std::string string() {
    const uint64_t n = u64();
    if (n > remaining())
      fail("a string of " + std::to_string(n) + " bytes at offset " + std::to_string(pos_) +
           " runs past the end of the " + std::to_string(file_.size()) + "-byte file");
    const auto* p = reinterpret_cast<const char*>(take(n));
    return std::string(p, size_t(n));
  }

  GgufType value_type(const char* what) {
    const uint32_t t = u32();
    if (!valid_type(t)) fail("unknown " + std::string(what) + " " + std::to_string(t) + " (GGUF's are 0 to 12)");
    return GgufType(t);
  }

  // One scalar of type `t` into `integer` or `real` form.
  void read_scalar(GgufType t, int64_t& integer, double& real) {
    switch (t) {
      case GgufType::U8: integer = scalar<uint8_t>(); break;
      case GgufType::I8: integer = scalar<int8_t>(); break;
      case GgufType::U16: integer = scalar<uint16_t>(); break;
      case GgufType::I16: integer = scalar<int16_t>(); break;
      case GgufType::U32: integer = scalar<uint32_t>(); break;
      case GgufType::I32: integer = scalar<int32_t>(); break;
      case GgufType::U64: integer = std::bit_cast<int64_t>(scalar<uint64_t>()); break;
      case GgufType::I64: integer = scalar<int64_t>(); break;
      case GgufType::BOOL: integer = scalar<uint8_t>() != 0; break;  // as ggml reads it
      case GgufType::F32: real = scalar<float>(); break;
      case GgufType::F64: real = scalar<double>(); break;
      default: fail("internal: not a scalar type");
    }
  }

  void read_kv(uint64_t i, uint64_t n) {
    where_ = "key " + std::to_string(i) + " of " + std::to_string(n);
    std::string key = string();
    if (key.empty()) fail("the key is empty");
    where_ = "key '" + key + "'";
    if (out_.metadata.count(key)) fail("appears twice");
    GgufValue v;
    v.type = value_type("value type");
    if (v.type == GgufType::STRING) {
      v.text = string();
    } else if (v.type == GgufType::ARRAY) {
      v.element = value_type("array element type");
      if (v.element == GgufType::ARRAY) fail("is an array of arrays, which GGUF does not allow");
      const uint64_t count = u64();
      // Every string takes at least its 8-byte length.
      const uint64_t least = v.element == GgufType::STRING ? 8 : scalar_size(v.element);
      if (count > remaining() / least)
        fail("an array of " + std::to_string(count) + " " + to_string(v.element) + " values cannot fit in the " +
             std::to_string(remaining()) + " bytes left in the file");
      if (v.element == GgufType::STRING) {
        v.texts.reserve(size_t(count));
        for (uint64_t j = 0; j < count; ++j) v.texts.push_back(string());
      } else if (is_float_type(v.element)) {
        v.reals.resize(size_t(count));
        int64_t unused = 0;
        for (double& r : v.reals) read_scalar(v.element, unused, r);
      } else {
        v.integers.resize(size_t(count));
        double unused = 0;
        for (int64_t& x : v.integers) read_scalar(v.element, x, unused);
      }
    } else {
      read_scalar(v.type, v.integer, v.real);
    }
    out_.metadata.emplace(std::move(key), std::move(v));
  }

  void read_alignment() {
    const auto it = out_.metadata.find(kAlignmentKey);
    if (it == out_.metadata.end()) return;
    where_ = std::string("key '") + kAlignmentKey + "'";
    const GgufValue& v = it->second;
    if (v.type != GgufType::U32) fail("is " + describe(v) + ", expected a u32");
    if (v.integer == 0 || !std::has_single_bit(uint64_t(v.integer)))
      fail("the alignment " + std::to_string(v.integer) + " is not a power of two");
    out_.alignment = uint64_t(v.integer);
  }

  void read_tensor_info(uint64_t i, uint64_t n) {
    where_ = "tensor " + std::to_string(i) + " of " + std::to_string(n);
    GgufTensor t;
    t.name = string();
    if (t.name.empty()) fail("the tensor name is empty");
    where_ = "tensor '" + t.name + "'";
    if (out_.by_name.count(t.name)) fail("appears twice");
    const uint32_t n_dims = u32();
    if (n_dims == 0 || n_dims > kMaxDims)
      fail("has " + std::to_string(n_dims) + " dimensions; GGUF allows 1 to " + std::to_string(kMaxDims));
    std::vector<int64_t> ne(n_dims);
    uint64_t numel = 1;
    for (uint32_t d = 0; d < n_dims; ++d) {
      const uint64_t dim = u64();
      if (dim == 0 || dim > uint64_t(INT64_MAX))
        fail("dimension " + std::to_string(d) + " is " + std::to_string(int64_t(dim)) + "; it must be positive");
      if (numel > uint64_t(INT64_MAX) / dim) fail("has too many elements (more than 2^63 - 1)");
      numel *= dim;
      ne[d] = int64_t(dim);
    }
    t.shape.assign(ne.rbegin(), ne.rend());
    const uint32_t ggml_type = u32();
    const std::optional<DType> dtype = dtype_from_ggml(ggml_type);
    if (!dtype || !gguf_dtype(*dtype))
      throw Error(ErrorCode::unsupported, out_.path + ": tensor '" + t.name + "' has type " +
                                              ggml_type_name(ggml_type) + ", which vkgate does not read (it reads " +
                                              kReadable + ")");
    t.dtype = *dtype;
    const uint64_t block = block_elements(t.dtype);
    if (uint64_t(ne[0]) % block != 0)
      fail("its rows of " + std::to_string(ne[0]) + " elements are not a whole number of " + to_string(t.dtype) +
           " blocks of " + std::to_string(block));
    const uint64_t blocks = numel / block;
    if (blocks > std::numeric_limits<uint64_t>::max() / block_bytes(t.dtype) ||
        blocks * block_bytes(t.dtype) > file_.size())
      fail("shape " + shape_text(t.shape) + " of " + to_string(t.dtype) + " needs more bytes than the " +
           std::to_string(file_.size()) + "-byte file holds");
    t.offset = u64();
    // Only the size for now: parse() places the view once the data section is known.
    t.bytes = std::span<const std::byte>(file_.data(), size_t(blocks * block_bytes(t.dtype)));
    out_.by_name.emplace(t.name, out_.tensors.size());
    out_.tensors.push_back(std::move(t));
  }

  void check_no_overlap() {
    std::vector<const GgufTensor*> by_start;
    for (const GgufTensor& t : out_.tensors) by_start.push_back(&t);
    std::stable_sort(by_start.begin(), by_start.end(),
              [](const GgufTensor* a, const GgufTensor* b) { return a->offset < b->offset; });
    for (size_t i = 1; i < by_start.size(); ++i) {
      const GgufTensor& prev = *by_start[i - 1];
      const GgufTensor& next = *by_start[i];
      if (next.offset < prev.offset + prev.bytes.size()) {
        where_ = "tensors '" + prev.name + "' and '" + next.name + "' overlap";
        fail("bytes [" + std::to_string(prev.offset) + ", " + std::to_string(prev.offset + prev.bytes.size()) +
             ") and [" + std::to_string(next.offset) + ", " + std::to_string(next.offset + next.bytes.size()) +
             ") of the data section");
      }
    }
  }

  gguf_detail::Contents& out_;
  std::span<const std::byte> file_;
  uint64_t pos_ = 0;
  std::string where_;
};

}  // namespace

GgufFile GgufFile::open(const std::string& path) {
  auto impl = std::make_shared<Impl>();
  impl->path = path;
  impl->map = map_file(path);
  Parser(*impl, {static_cast<const std::byte*>(impl->map.data), impl->map.size}).parse();
  GgufFile f;
  f.impl_ = std::move(impl);
  return f;
}

const std::string& GgufFile::path() const { return impl_->path; }
uint32_t GgufFile::version() const { return impl_->version; }
uint64_t GgufFile::alignment() const { return impl_->alignment; }
const std::map<std::string, GgufValue>& GgufFile::metadata() const { return impl_->metadata; }

const GgufValue* GgufFile::find(const std::string& key) const {
  const auto it = impl_->metadata.find(key);
  return it == impl_->metadata.end() ? nullptr : &it->second;
}

namespace {

[[noreturn]] void key_error(const std::string& path, const std::string& key, const std::string& what) {
  throw Error(ErrorCode::invalid_config, path + ": key '" + key + "' " + what);
}

const GgufValue& need(const GgufFile& f, const std::string& key) {
  const GgufValue* v = f.find(key);
  if (!v) key_error(f.path(), key, "is missing");
  return *v;
}

void expect(const GgufFile& f, const std::string& key, const GgufValue& v, bool ok, const char* wanted) {
  if (!ok) key_error(f.path(), key, "is " + describe(v) + ", expected " + wanted);
}

// A u64 above INT64_MAX is held as its (negative) bit pattern.
void check_u64(const GgufFile& f, const std::string& key, GgufType t, int64_t x) {
  if (t == GgufType::U64 && x < 0)
    key_error(f.path(), key, "holds the u64 value " + std::to_string(std::bit_cast<uint64_t>(x)) +
                                 ", larger than vkgate reads (2^63 - 1)");
}

}  // namespace

std::string GgufFile::string(const std::string& key) const {
  const GgufValue& v = need(*this, key);
  expect(*this, key, v, v.type == GgufType::STRING, "a string");
  return v.text;
}

int64_t GgufFile::integer(const std::string& key) const {
  const GgufValue& v = need(*this, key);
  expect(*this, key, v, is_integer_type(v.type), "an integer");
  check_u64(*this, key, v.type, v.integer);
  return v.integer;
}

double GgufFile::real(const std::string& key) const {
  const GgufValue& v = need(*this, key);
  expect(*this, key, v, is_float_type(v.type) || is_integer_type(v.type), "a number");
  if (is_float_type(v.type)) return v.real;
  return v.type == GgufType::U64 ? double(std::bit_cast<uint64_t>(v.integer)) : double(v.integer);
}

bool GgufFile::boolean(const std::string& key) const {
  const GgufValue& v = need(*this, key);
  expect(*this, key, v, v.type == GgufType::BOOL, "a bool");
  return v.integer != 0;
}

const std::vector<std::string>& GgufFile::strings(const std::string& key) const {
  const GgufValue& v = need(*this, key);
  expect(*this, key, v, v.type == GgufType::ARRAY && v.element == GgufType::STRING, "an array of strings");
  return v.texts;
}

const std::vector<int64_t>& GgufFile::integers(const std::string& key) const {
  const GgufValue& v = need(*this, key);
  expect(*this, key, v, v.type == GgufType::ARRAY && is_integer_type(v.element), "an array of integers");
  for (int64_t x : v.integers) check_u64(*this, key, v.element, x);
  return v.integers;
}

const std::vector<double>& GgufFile::reals(const std::string& key) const {
  const GgufValue& v = need(*this, key);
  expect(*this, key, v, v.type == GgufType::ARRAY && is_float_type(v.element), "an array of f32 or f64");
  return v.reals;
}

std::optional<std::string> GgufFile::string_or(const std::string& key) const {
  if (!contains(key)) return std::nullopt;
  return string(key);
}
std::optional<int64_t> GgufFile::integer_or(const std::string& key) const {
  if (!contains(key)) return std::nullopt;
  return integer(key);
}
std::optional<double> GgufFile::real_or(const std::string& key) const {
  if (!contains(key)) return std::nullopt;
  return real(key);
}
std::optional<bool> GgufFile::boolean_or(const std::string& key) const {
  if (!contains(key)) return std::nullopt;
  return boolean(key);
}

const std::vector<GgufTensor>& GgufFile::tensors() const { return impl_->tensors; }

const GgufTensor* GgufFile::find_tensor(const std::string& name) const {
  const auto it = impl_->by_name.find(name);
  return it == impl_->by_name.end() ? nullptr : &impl_->tensors[it->second];
}

const GgufTensor& GgufFile::tensor(const std::string& name) const {
  const GgufTensor* t = find_tensor(name);
  if (!t) throw Error(ErrorCode::missing_tensor, impl_->path + ": tensor '" + name + "' not found");
  return *t;
}

TensorMap GgufFile::tensor_map() const {
  TensorMap out;
  for (const GgufTensor& t : impl_->tensors) out.emplace(t.name, t.host());
  return out;
}

uint64_t GgufFile::tensor_bytes() const { return impl_->tensor_bytes; }

}  // namespace vkgate
