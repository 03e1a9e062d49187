// The safetensors reader and writer: round trips of every dtype and the
// metadata, and malformed files rejected naming the path and the culprit.
#include <doctest/doctest.h>
#include <unistd.h>
#include <bit>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>
#include "test_util.hpp"
#include "vkgate/config.hpp"
#include "vkgate/error.hpp"
#include "vkgate/reference.hpp"
#include "vkgate/safetensors.hpp"
#include "vkgate/weights.hpp"
#include "golden.hpp"

namespace fs = std::filesystem;
using nlohmann::json;
using namespace vkgate;
using test::expect_error;
using test::read_text;
using test::TempDir;
using test::write_text;

// ---- safetensors ----

namespace {


template <typename T>
std::span<const std::byte> as_bytes(const std::vector<T>& v) {
  return std::as_bytes(std::span<const T>(v));
}

void write_raw(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary).write(bytes.data(), std::streamsize(bytes.size()));
}

// A file with the given header text and `data_bytes` zero bytes of data.
std::string raw_file(const std::string& header, size_t data_bytes) {
  std::string out(8, '\0');
  const uint64_t n = header.size();
  std::memcpy(out.data(), &n, 8);
  return out + header + std::string(data_bytes, '\0');
}

void expect_open_error(const std::string& path, ErrorCode code, const std::string& mention) {
  CAPTURE(mention);
  try {
    SafetensorsFile f(path);
    FAIL("opened a malformed file");
  } catch (const Error& e) {
    const std::string msg = e.what();
    CAPTURE(msg);
    CHECK(e.code() == code);
    CHECK(msg.rfind(path, 0) == 0);  // starts with the path
    CHECK(msg.find(mention) != std::string::npos);
  }
}

}  // namespace

TEST_CASE("safetensors: writer and reader round trip every dtype and the metadata") {
  TempDir dir;
  const std::vector<float> f32 = {1.5f, -2.25f, 3.0f, 1e-3f, 65504.0f, -0.0f};
  const std::vector<double> f64 = {0.1, -1e300, 3.0};
  const std::vector<int64_t> i64 = {0, -1, int64_t(1) << 40, std::numeric_limits<int64_t>::max()};
  const std::vector<int32_t> i32 = {7, -7, std::numeric_limits<int32_t>::min()};
  std::vector<uint16_t> f16, bf16;
  for (float v : f32) {
    f16.push_back(float_to_half(v));
    bf16.push_back(float_to_bf16(v));
  }
  const std::string path = dir.file("round_trip.safetensors");
  write_safetensors(path,
                    {{"a.f32", DType::F32, {2, 3}, as_bytes(f32)},
                     {"b.f16", DType::F16, {6}, as_bytes(f16)},
                     {"c.bf16", DType::BF16, {3, 1, 2}, as_bytes(bf16)},
                     {"d.f64", DType::F64, {3}, as_bytes(f64)},
                     {"e.empty", DType::F32, {0, 4}, {}},
                     {"f.i64", DType::I64, {2, 2}, as_bytes(i64)},
                     {"g.i32", DType::I32, {3}, as_bytes(i32)}},
                    {{"format", "pt"}, {"note", "round trip"}});

  // Nothing but the file itself is left behind.
  CHECK(std::distance(fs::directory_iterator(dir.path), fs::directory_iterator()) == 1);

  const SafetensorsFile file(path);
  CHECK(file.path() == path);
  CHECK(file.names() ==
        std::vector<std::string>{"a.f32", "b.f16", "c.bf16", "d.f64", "e.empty", "f.i64", "g.i32"});
  CHECK(file.metadata() ==
        std::map<std::string, std::string>{{"format", "pt"}, {"note", "round trip"}});
  CHECK(file.contains("a.f32"));
  CHECK(!file.contains("zzz"));

  const TensorView& a = file.at("a.f32");
  CHECK(a.dtype == DType::F32);
  CHECK(a.shape == std::vector<int64_t>{2, 3});
  CHECK(a.numel() == 6);
  CHECK(a.to_f32() == f32);
  CHECK(std::memcmp(a.bytes.data(), f32.data(), a.bytes.size()) == 0);

  const TensorView& h = file.at("b.f16");
  CHECK(h.dtype == DType::F16);
  const std::vector<float> h_vals = h.to_f32();
  for (size_t i = 0; i < f32.size(); ++i) CHECK(h_vals[i] == half_to_float(f16[i]));
  CHECK(h_vals[0] == 1.5f);
  CHECK(h_vals[4] == 65504.0f);

  const TensorView& b = file.at("c.bf16");
  CHECK(b.dtype == DType::BF16);
  CHECK(b.shape == std::vector<int64_t>{3, 1, 2});
  const std::vector<double> b_vals = b.to_f64();
  for (size_t i = 0; i < f32.size(); ++i) CHECK(b_vals[i] == double(bf16_to_float(bf16[i])));

  const TensorView& d = file.at("d.f64");
  CHECK(d.dtype == DType::F64);
  CHECK(d.to_f64() == f64);
  CHECK(d.to_f32()[0] == 0.1f);

  CHECK(file.at("e.empty").numel() == 0);
  CHECK(file.at("e.empty").to_f32().empty());

  // Integer tensors (token ids) read exactly through to_i64, and only through it.
  const TensorView& n64 = file.at("f.i64");
  CHECK(n64.dtype == DType::I64);
  CHECK(n64.shape == std::vector<int64_t>{2, 2});
  CHECK(n64.to_i64() == i64);
  CHECK(file.at("g.i32").dtype == DType::I32);
  CHECK(file.at("g.i32").to_i64() == std::vector<int64_t>(i32.begin(), i32.end()));
  for (const char* name : {"f.i64", "g.i32"}) {
    CAPTURE(name);
    for (auto read : {+[](const TensorView& t) { (void)t.to_f32(); },
                      +[](const TensorView& t) { (void)t.to_f64(); }}) {
      try {
        read(file.at(name));
        FAIL("read an integer tensor as floats");
      } catch (const Error& e) {
        CHECK(e.code() == ErrorCode::shape_mismatch);
        CHECK(std::string(e.what()).rfind(path + ": tensor '" + name + "': unsupported dtype", 0) == 0);
      }
    }
  }
  try {
    (void)a.to_i64();
    FAIL("read a float tensor as integers");
  } catch (const Error& e) {
    CHECK(e.code() == ErrorCode::shape_mismatch);
    CHECK(std::string(e.what()) ==
          path + ": tensor 'a.f32' has dtype F32, expected an integer dtype (I64 or I32)");
  }

  // The header is padded so that the data section starts 8-byte aligned.
  std::ifstream in(path, std::ios::binary);
  uint64_t header_len = 0;
  in.read(reinterpret_cast<char*>(&header_len), 8);
  CHECK(header_len % 8 == 0);
}

TEST_CASE("safetensors: reader moves and rejects missing tensors by name") {
  TempDir dir;
  const std::vector<float> v = {1, 2};
  const std::string path = dir.file("m.safetensors");
  write_safetensors(path, {{"w", DType::F32, {2}, as_bytes(v)}});
  SafetensorsFile first(path);
  SafetensorsFile moved(std::move(first));
  CHECK(moved.at("w").to_f32() == v);
  try {
    (void)moved.at("nope.weight");
    FAIL("at() found a tensor that is not there");
  } catch (const Error& e) {
    CHECK(e.code() == ErrorCode::missing_tensor);
    CHECK(std::string(e.what()).rfind(path, 0) == 0);
    CHECK(std::string(e.what()).find("nope.weight") != std::string::npos);
  }
}

TEST_CASE("safetensors: malformed files are rejected with the path and the culprit named") {
  TempDir dir;
  auto make = [&](const std::string& name, const std::string& bytes) {
    const std::string path = dir.file(name);
    write_raw(path, bytes);
    return path;
  };
  const std::string good_entry = R"("x": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]})";

  SUBCASE("missing file") {
    expect_open_error(dir.file("absent.safetensors"), ErrorCode::io, "cannot open");
  }
  SUBCASE("empty file") { expect_open_error(make("empty", ""), ErrorCode::io, "too short"); }
  SUBCASE("truncated before the header length ends") {
    expect_open_error(make("short", std::string(5, '\x10')), ErrorCode::io, "too short");
  }
  SUBCASE("header length beyond the file") {
    std::string bytes = raw_file("{" + good_entry + "}", 8);
    const uint64_t huge = 1u << 20;
    std::memcpy(bytes.data(), &huge, 8);
    expect_open_error(make("long_header", bytes), ErrorCode::io, "header length");
  }
  SUBCASE("header length that overflows") {
    std::string bytes = raw_file("{}", 0);
    const uint64_t huge = ~uint64_t(0) - 3;
    std::memcpy(bytes.data(), &huge, 8);
    expect_open_error(make("overflow_header", bytes), ErrorCode::io, "header length");
  }
  SUBCASE("bad JSON") {
    expect_open_error(make("bad_json", raw_file(R"({"x": {"dtype": "F32",)", 8)), ErrorCode::io,
                      "not valid JSON");
  }
  SUBCASE("header not an object") {
    expect_open_error(make("array", raw_file("[1, 2]", 0)), ErrorCode::io, "not a JSON object");
  }
  SUBCASE("offsets beyond the data section") {
    expect_open_error(make("oob", raw_file("{" + good_entry + "}", 4)), ErrorCode::io, "'x'");
  }
  SUBCASE("begin after end") {
    const std::string h = R"({"x": {"dtype": "F32", "shape": [0], "data_offsets": [8, 4]}})";
    expect_open_error(make("reversed", raw_file(h, 8)), ErrorCode::io, "begin > end");
  }
  SUBCASE("overlapping tensors") {
    const std::string h =
        "{" + good_entry + R"(, "y": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}})";
    expect_open_error(make("overlap", raw_file(h, 12)), ErrorCode::io, "overlap");
  }
  SUBCASE("unknown dtype") {
    const std::string h = R"({"q": {"dtype": "F8_E4M3", "shape": [8], "data_offsets": [0, 8]}})";
    expect_open_error(make("f8", raw_file(h, 8)), ErrorCode::io, "'q': unsupported dtype 'F8_E4M3'");
  }
  SUBCASE("an integer tensor whose byte count disagrees with its shape") {
    const std::string h = R"({"ids": {"dtype": "I64", "shape": [2], "data_offsets": [0, 8]}})";
    expect_open_error(make("i64_short", raw_file(h, 8)), ErrorCode::shape_mismatch, "'ids'");
  }
  SUBCASE("shape disagrees with the byte count") {
    const std::string h = R"({"x": {"dtype": "BF16", "shape": [3], "data_offsets": [0, 8]}})";
    expect_open_error(make("mismatch", raw_file(h, 8)), ErrorCode::shape_mismatch, "'x'");
  }
  SUBCASE("shape that overflows") {
    const std::string h =
        R"({"x": {"dtype": "F64", "shape": [4294967296, 4294967296], "data_offsets": [0, 8]}})";
    expect_open_error(make("huge_shape", raw_file(h, 8)), ErrorCode::shape_mismatch, "'x'");
  }
  SUBCASE("negative dimension") {
    const std::string h = R"({"x": {"dtype": "F32", "shape": [-2], "data_offsets": [0, 8]}})";
    expect_open_error(make("negative", raw_file(h, 8)), ErrorCode::io, "'shape'");
  }
  SUBCASE("missing dtype") {
    const std::string h = R"({"x": {"shape": [2], "data_offsets": [0, 8]}})";
    expect_open_error(make("no_dtype", raw_file(h, 8)), ErrorCode::io, "'dtype'");
  }
  SUBCASE("data_offsets of the wrong form") {
    const std::string h = R"({"x": {"dtype": "F32", "shape": [2], "data_offsets": [0]}})";
    expect_open_error(make("one_offset", raw_file(h, 8)), ErrorCode::io, "'data_offsets'");
  }
  SUBCASE("metadata with a non-string value") {
    const std::string h = R"({"__metadata__": {"step": 3}, )" + good_entry + "}";
    expect_open_error(make("meta", raw_file(h, 8)), ErrorCode::io, "'step'");
  }
  SUBCASE("a golden file cut short") {
    const std::string golden =
        test::golden_dir() + "/g2_gqa_official_headwise.safetensors";
    const std::string cut = dir.file("cut.safetensors");
    fs::copy_file(golden, cut);
    fs::resize_file(cut, fs::file_size(golden) - 100);
    expect_open_error(cut, ErrorCode::io, "run past");
  }
}

TEST_CASE("safetensors: writer validates before it touches the file system") {
  TempDir dir;
  const std::vector<float> v = {1, 2, 3};
  const std::string path = dir.file("w.safetensors");
  auto expect_write_error = [&](const std::vector<TensorToWrite>& tensors, ErrorCode code,
                                const std::string& target = "") {
    const std::string p = target.empty() ? path : target;
    try {
      write_safetensors(p, tensors);
      FAIL("wrote an invalid file");
    } catch (const Error& e) {
      CHECK(e.code() == code);
      CHECK(std::string(e.what()).rfind(p, 0) == 0);
    }
  };
  expect_write_error({{"x", DType::F32, {2}, as_bytes(v)}}, ErrorCode::shape_mismatch);
  expect_write_error({{"x", DType::F32, {3}, as_bytes(v)}, {"x", DType::F32, {3}, as_bytes(v)}},
                     ErrorCode::invalid_argument);
  expect_write_error({{"x", DType::F32, {-3}, as_bytes(v)}}, ErrorCode::invalid_argument);
  expect_write_error({{"__metadata__", DType::F32, {3}, as_bytes(v)}}, ErrorCode::invalid_argument);
  expect_write_error({{"x", DType::F32, {3}, as_bytes(v)}}, ErrorCode::io,
                     dir.file("no_such_dir/w.safetensors"));
  CHECK(fs::is_empty(dir.path));
}
