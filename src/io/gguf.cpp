// GGUF v3 files (include/vkgate/gguf.hpp): a reader that maps the file and
// validates every count, length and offset against its size before trusting
// it, and a writer that builds the header in memory and writes through
// OutputFile.
#include "vkgate/gguf.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <limits>
#include <set>
#include <utility>

#include "vkgate/error.hpp"
#include "vkgate/output_file.hpp"
#include "vkgate/quant.hpp"

static_assert(std::endian::native == std::endian::little, "GGUF is read in place as little-endian");

namespace vkgate {

namespace {

constexpr uint32_t kVersion = 3;
constexpr uint64_t kDefaultAlignment = 32;
constexpr uint32_t kMaxDims = 4;  // GGML_MAX_DIMS
const char* const kAlignmentKey = "general.alignment";
const char* const kReadable = "F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K";

// The tensor types vkgate reads from and writes to GGUF. ggml's I32, I64 and
// F64 have DTypes too, but no model weight is stored so.
bool gguf_dtype(DType d) { return d == DType::F32 || d == DType::F16 || d == DType::BF16 || is_quantized(d); }

bool valid_type(uint32_t t) { return t <= uint32_t(GgufType::F64); }
bool is_integer_type(GgufType t) {
  switch (t) {
    case GgufType::U8: case GgufType::I8: case GgufType::U16: case GgufType::I16:
    case GgufType::U32: case GgufType::I32: case GgufType::U64: case GgufType::I64:
      return true;
    default:
      return false;
  }
}
bool is_float_type(GgufType t) { return t == GgufType::F32 || t == GgufType::F64; }

// Bytes of one value of a fixed-size type; 0 for string and array.
uint64_t scalar_size(GgufType t) {
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
std::pair<int64_t, int64_t> integer_range(GgufType t) {
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

uint64_t align_up(uint64_t n, uint64_t alignment) { return (n + alignment - 1) / alignment * alignment; }

std::string shape_string(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

// "a string", "an array of u32": what a value is, for messages.
std::string describe(const GgufValue& v) {
  if (v.type == GgufType::ARRAY) return std::string("an array of ") + to_string(v.element);
  const std::string t = to_string(v.type);
  return (t[0] == 'i' || t[0] == 'f' ? "an " : "a ") + t;
}

// Closes a descriptor on every path out of a scope.
class FileDescriptor {
 public:
  explicit FileDescriptor(int fd) : fd_(fd) {}
  ~FileDescriptor() {
    if (fd_ >= 0) ::close(fd_);
  }
  FileDescriptor(const FileDescriptor&) = delete;
  FileDescriptor& operator=(const FileDescriptor&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

std::string errno_text() { return std::strerror(errno); }

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
  void* map = nullptr;
  size_t map_size = 0;

  Impl() = default;
  Impl(const Impl&) = delete;
  Impl& operator=(const Impl&) = delete;
  ~Impl() {
    if (map) ::munmap(map, map_size);
  }
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
      fail("shape " + shape_string(t.shape) + " of " + to_string(t.dtype) + " needs more bytes than the " +
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
  FileDescriptor fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) throw Error(ErrorCode::io, path + ": cannot open: " + errno_text());
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) throw Error(ErrorCode::io, path + ": cannot stat: " + errno_text());
  if (!S_ISREG(st.st_mode)) throw Error(ErrorCode::io, path + ": not a regular file");
  // mmap of zero bytes fails; the parser reports such a file as too short.
  if (st.st_size > 0) {
    void* map = ::mmap(nullptr, size_t(st.st_size), PROT_READ, MAP_PRIVATE, fd.get(), 0);
    if (map == MAP_FAILED) throw Error(ErrorCode::io, path + ": cannot mmap: " + errno_text());
    impl->map = map;
    impl->map_size = size_t(st.st_size);
  }
  Parser(*impl, {static_cast<const std::byte*>(impl->map), impl->map_size}).parse();
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

// ---- writing ----

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
    fail(ErrorCode::invalid_argument, "shape " + shape_string(shape) + " must have 1 to 4 dimensions");
  int64_t numel = 1;
  for (int64_t d : shape) {
    if (d <= 0) fail(ErrorCode::invalid_argument, "shape " + shape_string(shape) + " has a dimension that is not positive");
    if (numel > INT64_MAX / d) fail(ErrorCode::invalid_argument, "shape " + shape_string(shape) + " has too many elements");
    numel *= d;
  }
  if (shape.back() % int64_t(block_elements(dtype)) != 0)
    fail(ErrorCode::shape_mismatch, "rows of " + std::to_string(shape.back()) + " elements are not a whole number of " +
                                        to_string(dtype) + " blocks of " + std::to_string(block_elements(dtype)));
  const std::optional<size_t> expected = stored_bytes(dtype, numel);
  if (!expected || *expected != bytes.size())
    fail(ErrorCode::shape_mismatch, "has " + std::to_string(bytes.size()) + " bytes, its shape " + shape_string(shape) +
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
