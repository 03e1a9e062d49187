// safetensors I/O: a memory-mapped, validating reader with zero-copy views,
// an atomic writer (vkgate/output_file.hpp), and the fp16/bf16 <-> fp32 conversions checkpoints need.
//
// Format (https://github.com/huggingface/safetensors): u64 little-endian header
// length N, N bytes of JSON {name: {dtype, shape, data_offsets: [begin, end]},
// "__metadata__": {string: string}}, then the data section; offsets are
// relative to the start of the data section. Only little-endian hosts.
//
// Thread safety: a SafetensorsFile is immutable after construction — its const
// members may be called from several threads at once; moving or destroying it
// is not concurrent with other use. write_safetensors calls on different paths
// may run concurrently. Malformed files are rejected with an Error, never a
// crash (fuzzed: fuzz/fuzz_safetensors.cpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "vkgate/dtype.hpp"

namespace vkgate {

// One tensor of an open file. `bytes` points into the mapping and lives as long
// as the SafetensorsFile it came from; it need not be aligned to the element
// size, so read it through to_f32/to_f64/to_i64 (or memcpy), not by casting.
struct TensorView {
  std::string name;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  std::span<const std::byte> bytes;
  std::string file;  // the path it was read from (set by SafetensorsFile); starts error messages

  int64_t numel() const;
  // The floating-point dtypes; an integer tensor (I64, I32) is refused with
  // Error(shape_mismatch) naming the file and the tensor.
  std::vector<float> to_f32() const;   // F64 values are rounded to nearest
  std::vector<double> to_f64() const;  // exact for every floating-point dtype
  // I64 and I32 (token ids); any other dtype is refused with
  // Error(shape_mismatch) naming the file and the tensor.
  std::vector<int64_t> to_i64() const;
};

// A safetensors file mapped read-only. The constructor validates the whole
// header (sizes, JSON structure, dtypes, offsets inside the data section and
// not overlapping, byte counts matching shapes) and throws Error(io) — or
// Error(shape_mismatch) when a tensor's byte count disagrees with its shape —
// with a message starting with the file path and naming the tensor or key.
class SafetensorsFile {
 public:
  explicit SafetensorsFile(const std::string& path);
  ~SafetensorsFile();
  SafetensorsFile(SafetensorsFile&& other) noexcept;
  SafetensorsFile& operator=(SafetensorsFile&& other) noexcept;
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::string& path() const { return path_; }
  bool contains(const std::string& name) const { return tensors_.count(name) != 0; }
  // Throws Error(missing_tensor) naming the file and the tensor.
  const TensorView& at(const std::string& name) const;
  std::vector<std::string> names() const;  // sorted
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

 private:
  void unmap() noexcept;

  std::string path_;
  void* map_ = nullptr;
  size_t map_size_ = 0;
  std::map<std::string, TensorView> tensors_;
  std::map<std::string, std::string> metadata_;
};

struct TensorToWrite {
  std::string name;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  std::span<const std::byte> bytes;  // numel(shape) · dtype_size(dtype) bytes, little-endian
};

// Writes the tensors, in the given order and packed back to back, with the
// header padded by spaces to a multiple of 8 bytes, through OutputFile
// (vkgate/output_file.hpp): a regular file (or none) at `path` is replaced
// atomically — it appears complete or not at all (temporary file in the same
// directory, fsync, rename; removed on SIGINT, SIGTERM, SIGHUP), keeping an
// existing file's mode, and a read-only one is refused; a symbolic link's
// target is replaced; a FIFO or device is written directly; "-" is standard
// output. Throws Error(shape_mismatch) when a tensor's byte count does not
// match its shape, Error(invalid_argument) for a duplicate or reserved name
// or a negative dimension (both before the file system is touched),
// Error(io) when writing fails; each message starts with the path.
void write_safetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

}  // namespace vkgate
