// GGUF files (llama.cpp's single-file model format, version 3, little-endian):
// reading one as memory-mapped tensor views plus its metadata, and writing one.
//
// A file is validated completely when opened: the magic and version, every
// key and value (types, lengths, UTF-8 is not checked), every tensor's name,
// rank, dimensions, type and offset, the alignment (general.alignment, 32 when
// absent, a power of two) and that every tensor's bytes lie inside the file
// and do not overlap. A violation is Error(io) naming the file and the key or
// tensor, before anything else happens.
//
// Shapes are row-major as vkgate uses them everywhere ([out, in] for a
// weight): GGUF's dimension list (ne[0] = the contiguous one first) reversed.
//
// Thread safety: a GgufFile is immutable after opening and may be read from
// several threads; its tensor views live as long as the GgufFile.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "vkgate/dtype.hpp"
#include "vkgate/weights.hpp"

namespace vkgate {

// GGUF's metadata value types (gguf_type).
enum class GgufType : uint32_t { U8 = 0, I8 = 1, U16 = 2, I16 = 3, U32 = 4, I32 = 5, F32 = 6, BOOL = 7,
                                 STRING = 8, ARRAY = 9, U64 = 10, I64 = 11, F64 = 12 };
const char* to_string(GgufType type) noexcept;  // "u32", "string", "array", ...

// One metadata value. Scalars: integers and bools in `integer` (a u64 above
// INT64_MAX is held as its bit pattern, i.e. negative, and refused by
// GgufFile::integer()/integers()), floats in `real`, a string in `text`.
// Arrays (type ARRAY, element type `element`; arrays of arrays are refused):
// `integers`, `reals` or `texts` by element type.
struct GgufValue {
  GgufType type = GgufType::U32;
  GgufType element = GgufType::U32;
  int64_t integer = 0;
  double real = 0;
  std::string text;
  std::vector<int64_t> integers;
  std::vector<double> reals;
  std::vector<std::string> texts;

  static GgufValue of_string(std::string s);
  static GgufValue of_u32(uint32_t v);
  static GgufValue of_i32(int32_t v);
  static GgufValue of_u64(uint64_t v);
  static GgufValue of_f32(float v);
  static GgufValue of_bool(bool v);
  static GgufValue of_strings(std::vector<std::string> v);
  static GgufValue of_i32s(std::vector<int64_t> v);
  static GgufValue of_f32s(std::vector<double> v);
};

struct GgufTensor {
  std::string name;
  DType dtype = DType::F32;     // the ggml types vkgate reads (vkgate/quant.hpp)
  std::vector<int64_t> shape;   // row-major: GGUF's ne reversed
  std::span<const std::byte> bytes;
  uint64_t offset = 0;          // from the start of the data section
  HostTensor host() const { return {dtype, shape, bytes}; }
};

class GgufFile {
 public:
  // Maps and validates `path`; Error(io) naming the file and what is wrong.
  // A tensor of a ggml type vkgate does not read (IQ*, TQ*, Q2_K, ...) is
  // refused here with Error(unsupported) naming the tensor and its type.
  static GgufFile open(const std::string& path);

  const std::string& path() const;
  uint32_t version() const;
  uint64_t alignment() const;
  const std::map<std::string, GgufValue>& metadata() const;
  const GgufValue* find(const std::string& key) const;
  bool contains(const std::string& key) const { return find(key) != nullptr; }

  // Typed reads of a key: Error(invalid_config) naming the file and the key
  // when it is absent or holds another type ("... key 'qwen3.block_count' is
  // a string, expected an integer"). integer() takes any integer type,
  // real() floats and integers; the *_or forms return `fallback` when absent.
  std::string string(const std::string& key) const;
  int64_t integer(const std::string& key) const;
  double real(const std::string& key) const;
  bool boolean(const std::string& key) const;
  const std::vector<std::string>& strings(const std::string& key) const;
  const std::vector<int64_t>& integers(const std::string& key) const;
  const std::vector<double>& reals(const std::string& key) const;
  std::optional<std::string> string_or(const std::string& key) const;
  std::optional<int64_t> integer_or(const std::string& key) const;
  std::optional<double> real_or(const std::string& key) const;
  std::optional<bool> boolean_or(const std::string& key) const;

  const std::vector<GgufTensor>& tensors() const;  // in file order
  // Error(missing_tensor) naming the file and the tensor.
  const GgufTensor& tensor(const std::string& name) const;
  const GgufTensor* find_tensor(const std::string& name) const;
  // Every tensor by name, as views (valid while this GgufFile lives).
  TensorMap tensor_map() const;
  // Bytes of all tensors' data (their sum, without padding).
  uint64_t tensor_bytes() const;

 private:
  struct Impl;
  std::shared_ptr<const Impl> impl_;
};

// Builds a GGUF v3 file: metadata in insertion order, then tensor infos and
// the data, each tensor aligned to `alignment` (written as general.alignment
// when not 32). The tensor bytes are only read by write(); they must stay
// alive until then.
class GgufWriter {
 public:
  explicit GgufWriter(uint64_t alignment = 32);
  // Replaces an earlier value of the same key. Error(invalid_argument) naming
  // the key for an empty key, an integer outside its type's range or an array
  // of arrays; general.alignment is accepted only as the u32 of `alignment`
  // (so that a file's metadata can be copied) and written by write().
  void set(const std::string& key, GgufValue value);
  // `bytes` must be exactly stored_bytes(dtype, numel(shape)): Error(shape_mismatch)
  // naming the tensor otherwise, and Error(invalid_argument) for a repeated name.
  void add_tensor(const std::string& name, DType dtype, std::vector<int64_t> shape,
                  std::span<const std::byte> bytes);
  // Writes the file atomically (OutputFile): nothing at `path` on failure.
  void write(const std::string& path) const;

 private:
  uint64_t alignment_;
  std::vector<std::pair<std::string, GgufValue>> metadata_;
  struct Pending {
    std::string name;
    DType dtype;
    std::vector<int64_t> shape;
    std::span<const std::byte> bytes;
  };
  std::vector<Pending> tensors_;
};

}  // namespace vkgate
