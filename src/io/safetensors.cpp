#include "vkgate/safetensors.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <utility>

#include "io/mapped_file.hpp"
#include "vkgate/error.hpp"
#include "vkgate/output_file.hpp"

static_assert(std::endian::native == std::endian::little,
              "safetensors data is little-endian and is read in place");

namespace vkgate {

// ---- reading ----

namespace {

using nlohmann::json;

std::optional<DType> parse_dtype(const std::string& name) {
  for (DType d : {DType::F32, DType::F16, DType::BF16, DType::F64, DType::I64, DType::I32})
    if (name == to_string(d)) return d;
  return std::nullopt;
}


// Reads a JSON array of non-negative integers that fit int64_t.
std::optional<std::vector<uint64_t>> unsigned_array(const json& value) {
  if (!value.is_array()) return std::nullopt;
  std::vector<uint64_t> out;
  for (const json& v : value) {
    if (!v.is_number_unsigned()) return std::nullopt;
    const auto n = v.get<uint64_t>();
    if (n > uint64_t(std::numeric_limits<int64_t>::max())) return std::nullopt;
    out.push_back(n);
  }
  return out;
}

// Product of dims times elem_size, or nullopt on uint64 overflow.
std::optional<uint64_t> byte_count(const std::vector<uint64_t>& dims, uint64_t elem_size) {
  uint64_t n = elem_size;
  for (uint64_t d : dims) {
    if (d != 0 && n > std::numeric_limits<uint64_t>::max() / d) return std::nullopt;
    n *= d;
  }
  return n;
}

}  // namespace

int64_t TensorView::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

namespace {

// "FILE: tensor 'NAME'" (the file when the view came from one), for error messages.
std::string tensor_text(const TensorView& t) {
  return (t.file.empty() ? "" : t.file + ": ") + "tensor '" + t.name + "'";
}

// Element i of a floating-point view, as double; memcpy because the mapping gives no alignment.
double element(const TensorView& t, size_t i) {
  const std::byte* p = t.bytes.data() + i * dtype_size(t.dtype);
  switch (t.dtype) {
    case DType::F32: {
      float v;
      std::memcpy(&v, p, sizeof v);
      return v;
    }
    case DType::F64: {
      double v;
      std::memcpy(&v, p, sizeof v);
      return v;
    }
    case DType::F16:
    case DType::BF16: {
      uint16_t v;
      std::memcpy(&v, p, sizeof v);
      return t.dtype == DType::F16 ? half_to_float(v) : bf16_to_float(v);
    }
    default:
      break;  // integers are refused by require_floating before any element is read; block formats never come from a safetensors file
  }
  return 0;
}

// Token ids read as floats would pass silently as (wrong) activations.
void require_floating(const TensorView& t) {
  if (is_integer(t.dtype))
    throw Error(ErrorCode::shape_mismatch, tensor_text(t) + ": unsupported dtype '" + to_string(t.dtype) +
                                               "' for floating-point values (an integer tensor: read it with to_i64)");
}

}  // namespace

std::vector<float> TensorView::to_f32() const {
  require_floating(*this);
  std::vector<float> out(static_cast<size_t>(numel()));
  for (size_t i = 0; i < out.size(); ++i) out[i] = float(element(*this, i));
  return out;
}

std::vector<double> TensorView::to_f64() const {
  require_floating(*this);
  std::vector<double> out(static_cast<size_t>(numel()));
  for (size_t i = 0; i < out.size(); ++i) out[i] = element(*this, i);
  return out;
}

std::vector<int64_t> TensorView::to_i64() const {
  if (!is_integer(dtype))
    throw Error(ErrorCode::shape_mismatch,
                tensor_text(*this) + " has dtype " + to_string(dtype) + ", expected an integer dtype (I64 or I32)");
  std::vector<int64_t> out(static_cast<size_t>(numel()));
  for (size_t i = 0; i < out.size(); ++i) {
    if (dtype == DType::I64) {
      std::memcpy(&out[i], bytes.data() + i * 8, 8);
    } else {
      int32_t v;
      std::memcpy(&v, bytes.data() + i * 4, 4);
      out[i] = v;
    }
  }
  return out;
}

namespace {

// Parses and validates the header of a mapped file; every message starts with the path.
class HeaderParser {
 public:
  HeaderParser(const std::string& path, std::span<const std::byte> file)
      : path_(path), file_(file) {}

  void parse(std::map<std::string, TensorView>& tensors,
             std::map<std::string, std::string>& metadata) {
    if (file_.size() < 8)
      fail(ErrorCode::io, "file is " + std::to_string(file_.size()) +
                              " bytes, too short for the 8-byte header length");
    uint64_t header_len;
    std::memcpy(&header_len, file_.data(), 8);
    if (header_len > file_.size() - 8)
      fail(ErrorCode::io, "header length " + std::to_string(header_len) + " exceeds the " +
                              std::to_string(file_.size() - 8) + " bytes after it");
    const auto* text = reinterpret_cast<const char*>(file_.data() + 8);
    const json header = json::parse(text, text + header_len, nullptr, /*allow_exceptions=*/false);
    if (header.is_discarded()) fail(ErrorCode::io, "header is not valid JSON");
    if (!header.is_object()) fail(ErrorCode::io, "header is not a JSON object");
    data_ = file_.subspan(8 + header_len);

    for (const auto& [key, value] : header.items()) {
      if (key == "__metadata__")
        metadata = parse_metadata(value);
      else
        tensors.emplace(key, parse_tensor(key, value));
    }
    check_no_overlap(tensors);
  }

 private:
  [[noreturn]] void fail(ErrorCode code, const std::string& message) const {
    throw Error(code, path_ + ": " + message);
  }
  [[noreturn]] void fail_tensor(ErrorCode code, const std::string& name,
                                const std::string& message) const {
    fail(code, "tensor '" + name + "': " + message);
  }

  std::map<std::string, std::string> parse_metadata(const json& value) const {
    if (!value.is_object()) fail(ErrorCode::io, "__metadata__ is not a JSON object");
    std::map<std::string, std::string> out;
    for (const auto& [key, v] : value.items()) {
      if (!v.is_string()) fail(ErrorCode::io, "__metadata__ key '" + key + "' is not a string");
      out.emplace(key, v.get<std::string>());
    }
    return out;
  }

  TensorView parse_tensor(const std::string& name, const json& entry) const {
    if (!entry.is_object()) fail_tensor(ErrorCode::io, name, "entry is not a JSON object");
    const auto dtype_it = entry.find("dtype");
    if (dtype_it == entry.end() || !dtype_it->is_string())
      fail_tensor(ErrorCode::io, name, "'dtype' is missing or not a string");
    const std::string dtype_name = dtype_it->get<std::string>();
    const std::optional<DType> dtype = parse_dtype(dtype_name);
    if (!dtype)
      fail_tensor(ErrorCode::io, name,
                  "unsupported dtype '" + dtype_name + "' (vkgate reads F32, F16, BF16, F64, I64, I32)");

    const auto shape_it = entry.find("shape");
    const auto shape = shape_it == entry.end() ? std::nullopt : unsigned_array(*shape_it);
    if (!shape)
      fail_tensor(ErrorCode::io, name,
                  "'shape' is missing or not an array of non-negative integers");

    const auto offsets_it = entry.find("data_offsets");
    const auto offsets = offsets_it == entry.end() ? std::nullopt : unsigned_array(*offsets_it);
    if (!offsets || offsets->size() != 2)
      fail_tensor(ErrorCode::io, name,
                  "'data_offsets' is missing or not two non-negative integers");
    const uint64_t begin = (*offsets)[0], end = (*offsets)[1];
    const std::string range = std::string("[").append(std::to_string(begin)).append(", ").append(std::to_string(end)) + ")";
    if (begin > end) fail_tensor(ErrorCode::io, name, "data_offsets " + range + " has begin > end");
    if (end > data_.size())
      fail_tensor(ErrorCode::io, name,
                  "data_offsets " + range + " run past the " + std::to_string(data_.size()) +
                      "-byte data section");

    const std::optional<uint64_t> expected = byte_count(*shape, dtype_size(*dtype));
    if (!expected || *expected != end - begin)
      fail_tensor(ErrorCode::shape_mismatch, name,
                  std::string("shape ") + shape_it->dump() + " of " + dtype_name + " needs " +
                      (expected ? std::to_string(*expected) : "too many") +
                      " bytes but data_offsets " + range + " hold " + std::to_string(end - begin));

    TensorView view;
    view.name = name;
    view.dtype = *dtype;
    view.shape.assign(shape->begin(), shape->end());
    view.bytes = data_.subspan(begin, end - begin);
    view.file = path_;
    return view;
  }

  void check_no_overlap(const std::map<std::string, TensorView>& tensors) const {
    std::vector<const TensorView*> by_start;
    for (const auto& [name, view] : tensors)
      if (!view.bytes.empty()) by_start.push_back(&view);
    std::sort(by_start.begin(), by_start.end(), [](const TensorView* a, const TensorView* b) {
      return a->bytes.data() < b->bytes.data();
    });
    for (size_t i = 1; i < by_start.size(); ++i) {
      const TensorView& prev = *by_start[i - 1];
      const TensorView& next = *by_start[i];
      if (next.bytes.data() < prev.bytes.data() + prev.bytes.size())
        fail(ErrorCode::io, "tensors '" + prev.name + "' and '" + next.name + "' overlap");
    }
  }

  const std::string& path_;
  std::span<const std::byte> file_;
  std::span<const std::byte> data_;
};

}  // namespace

SafetensorsFile::SafetensorsFile(const std::string& path) : path_(path) {
  const Mapping m = map_file(path);
  map_ = m.data;
  map_size_ = m.size;
  try {
    HeaderParser(path_, {static_cast<const std::byte*>(map_), map_size_})
        .parse(tensors_, metadata_);
  } catch (...) {
    unmap();
    throw;
  }
}

SafetensorsFile::~SafetensorsFile() { unmap(); }

SafetensorsFile::SafetensorsFile(SafetensorsFile&& other) noexcept
    : path_(std::move(other.path_)),
      map_(std::exchange(other.map_, nullptr)),
      map_size_(std::exchange(other.map_size_, 0)),
      tensors_(std::move(other.tensors_)),
      metadata_(std::move(other.metadata_)) {}

SafetensorsFile& SafetensorsFile::operator=(SafetensorsFile&& other) noexcept {
  if (this != &other) {
    unmap();
    path_ = std::move(other.path_);
    map_ = std::exchange(other.map_, nullptr);
    map_size_ = std::exchange(other.map_size_, 0);
    tensors_ = std::move(other.tensors_);
    metadata_ = std::move(other.metadata_);
  }
  return *this;
}

void SafetensorsFile::unmap() noexcept {
  Mapping m{map_, map_size_};
  unmap_file(m);
  map_ = nullptr;
  map_size_ = 0;
}

const TensorView& SafetensorsFile::at(const std::string& name) const {
  const auto it = tensors_.find(name);
  if (it == tensors_.end())
    throw Error(ErrorCode::missing_tensor, path_ + ": tensor '" + name + "' not found");
  return it->second;
}

std::vector<std::string> SafetensorsFile::names() const {
  std::vector<std::string> out;
  for (const auto& entry : tensors_) out.push_back(entry.first);
  return out;
}

// ---- writing ----

namespace {

std::string build_header(const std::string& path, const std::vector<TensorToWrite>& tensors,
                         const std::map<std::string, std::string>& metadata) {
  auto fail = [&](ErrorCode code, const std::string& message) {
    throw Error(code, path + ": " + message);
  };
  // ordered_json keeps the tensors in data order, which makes the file easy to read.
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::set<std::string> seen;
  uint64_t offset = 0;
  for (const TensorToWrite& t : tensors) {
    if (t.name == "__metadata__")
      fail(ErrorCode::invalid_argument, "'__metadata__' is not a tensor name");
    if (!seen.insert(t.name).second)
      fail(ErrorCode::invalid_argument, "tensor '" + t.name + "' appears twice");
    std::vector<uint64_t> dims;
    for (int64_t d : t.shape) {
      if (d < 0)
        fail(ErrorCode::invalid_argument, "tensor '" + t.name + "' has a negative dimension");
      dims.push_back(uint64_t(d));
    }
    const std::optional<uint64_t> expected = byte_count(dims, dtype_size(t.dtype));
    if (!expected || *expected != t.bytes.size())
      fail(ErrorCode::shape_mismatch, "tensor '" + t.name + "' has " +
                                          std::to_string(t.bytes.size()) + " bytes, its shape of " +
                                          to_string(t.dtype) + " needs " +
                                          (expected ? std::to_string(*expected) : "too many"));
    header[t.name] = {{"dtype", to_string(t.dtype)},
                      {"shape", t.shape},
                      {"data_offsets", {offset, offset + t.bytes.size()}}};
    offset += t.bytes.size();
  }
  std::string text;
  try {
    text = header.dump();
  } catch (const nlohmann::json::exception& e) {  // names or metadata that are not UTF-8
    fail(ErrorCode::invalid_argument, std::string("cannot encode the header: ") + e.what());
  }
  // Padding keeps the data section 8-byte aligned, as the format recommends.
  text.append((8 - text.size() % 8) % 8, ' ');
  return text;
}

}  // namespace

void write_safetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  const std::string header = build_header(path, tensors, metadata);
  const uint64_t header_len = header.size();
  OutputFile file(path);
  file.write(std::as_bytes(std::span(&header_len, 1)));
  file.write(header);
  for (const TensorToWrite& t : tensors) file.write(t.bytes);
  file.commit();
}

}  // namespace vkgate
