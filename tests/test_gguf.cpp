// The GGUF reader and writer: round trips of every value type, arrays and
// tensor dtype at two alignments, a file written by llama.cpp's gguf-py
// (tests/data/gguf), every malformed header rejected with Error naming the
// file and the key or tensor (built by corrupting a valid file's bytes), and
// a writer that leaves nothing behind when it fails.
#include "doctest.hpp"

#include <bit>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "test_util.hpp"
#include "vkgate/dtype.hpp"
#include "vkgate/error.hpp"
#include "vkgate/gguf.hpp"

namespace test_gguf {

namespace fs = std::filesystem;
using namespace vkgate;
using test::expect_error;
using test::read_text;
using test::TempDir;
using test::write_text;

namespace {

constexpr DType kEveryDType[] = {DType::F32,  DType::F16,  DType::BF16, DType::Q8_0,   DType::Q4_0,
                                 DType::Q4_1, DType::Q5_0, DType::Q5_1, DType::Q2_K,   DType::Q3_K,
                                 DType::Q4_K, DType::Q5_K, DType::Q6_K, DType::IQ4_NL, DType::IQ4_XS};

// Arbitrary bytes of the size `shape` of `dtype` takes (the reader never looks inside).
std::vector<std::byte> random_bytes(DType dtype, const std::vector<int64_t>& shape, uint32_t seed) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  std::vector<std::byte> out(size_t(n) / block_elements(dtype) * block_bytes(dtype));
  std::mt19937 rng(seed);
  for (std::byte& b : out) b = std::byte(rng() & 0xff);
  return out;
}

GgufValue scalar(GgufType type, int64_t integer, double real = 0) {
  GgufValue v;
  v.type = type;
  v.integer = integer;
  v.real = real;
  return v;
}

GgufValue array_of(GgufType element, std::vector<int64_t> integers, std::vector<double> reals = {}) {
  GgufValue v;
  v.type = GgufType::ARRAY;
  v.element = element;
  v.integers = std::move(integers);
  v.reals = std::move(reals);
  return v;
}

bool same_value(const GgufValue& a, const GgufValue& b) {
  if (a.type != b.type) return false;
  if (a.type == GgufType::ARRAY)
    return a.element == b.element && a.integers == b.integers && a.reals == b.reals && a.texts == b.texts;
  return a.integer == b.integer && a.real == b.real && a.text == b.text;
}

// Expects GgufFile::open(path) to throw Error(code) whose message starts with
// the path and contains every one of `mentions`.
void expect_open_error(const std::string& path, ErrorCode code, const std::vector<std::string>& mentions) {
  try {
    (void)GgufFile::open(path);
    FAIL("opened a malformed file");
  } catch (const Error& e) {
    const std::string msg = e.what();
    CAPTURE(msg);
    CHECK(to_string(e.code()) == std::string(to_string(code)));
    CHECK(msg.rfind(path + ": ", 0) == 0);
    for (const std::string& m : mentions) {
      CAPTURE(m);
      CHECK(msg.find(m) != std::string::npos);
    }
  }
}

template <typename T>
void poke(std::string& bytes, size_t at, T value) {
  REQUIRE(at + sizeof value <= bytes.size());
  std::memcpy(bytes.data() + at, &value, sizeof value);
}

// Where the bytes after a length-prefixed string `s` start (the string must occur once).
size_t after(const std::string& bytes, const std::string& s) {
  const size_t at = bytes.find(s);
  REQUIRE(at != std::string::npos);
  REQUIRE(bytes.find(s, at + 1) == std::string::npos);
  uint64_t n;
  std::memcpy(&n, bytes.data() + at - 8, 8);
  REQUIRE(n == s.size());
  return at + s.size();
}

// A small valid file whose fields the malformed cases corrupt: keys "test.k"
// (u32), "test.s" (string), "test.arr" (strings), "test.a1", "test.a2" (u32);
// tensors "tensor.one" (F32 [3, 4]), "tensor.two" (Q8_0 [2, 64]).
struct Sample {
  std::vector<std::byte> one = random_bytes(DType::F32, {3, 4}, 1);
  std::vector<std::byte> two = random_bytes(DType::Q8_0, {2, 64}, 2);
  std::string bytes;

  explicit Sample(const TempDir& dir, uint64_t alignment = 32) {
    GgufWriter w(alignment);
    w.set("test.k", GgufValue::of_u32(7));
    w.set("test.s", GgufValue::of_string("hello"));
    w.set("test.arr", GgufValue::of_strings({"x", "yy"}));
    w.set("test.a1", GgufValue::of_u32(1));
    w.set("test.a2", GgufValue::of_u32(2));
    w.add_tensor("tensor.one", DType::F32, {3, 4}, one);
    w.add_tensor("tensor.two", DType::Q8_0, {2, 64}, two);
    const std::string path = dir.file("sample.gguf");
    w.write(path);
    bytes = read_text(path);
    REQUIRE_NOTHROW(GgufFile::open(path));
  }
};

}  // namespace

TEST_CASE("gguf: writer and reader round trip every value type, arrays and every dtype, aligned to 32 and 64") {
  for (uint64_t alignment : {32, 64}) {
    CAPTURE(alignment);
    TempDir dir;
    std::vector<std::pair<std::string, GgufValue>> values = {
        {"v.u8", scalar(GgufType::U8, 255)},
        {"v.i8", scalar(GgufType::I8, -128)},
        {"v.u16", scalar(GgufType::U16, 65535)},
        {"v.i16", scalar(GgufType::I16, -32768)},
        {"v.u32", GgufValue::of_u32(4000000000u)},
        {"v.i32", GgufValue::of_i32(-2000000000)},
        {"v.f32", GgufValue::of_f32(-1.5f)},
        {"v.bool", GgufValue::of_bool(true)},
        {"v.string", GgufValue::of_string(std::string("with\0nul and \xc3\xa9", 15))},
        {"v.empty_string", GgufValue::of_string("")},
        {"v.u64", GgufValue::of_u64(std::numeric_limits<uint64_t>::max())},
        {"v.i64", scalar(GgufType::I64, std::numeric_limits<int64_t>::min())},
        {"v.f64", scalar(GgufType::F64, 0, 1.0 / 3.0)},
        {"a.strings", GgufValue::of_strings({"a", "", "bcd"})},
        {"a.i32s", GgufValue::of_i32s({1, -2, INT32_MAX, INT32_MIN})},
        {"a.f32s", GgufValue::of_f32s({0.5, -0.25, 1e30})},
        {"a.u8s", array_of(GgufType::U8, {0, 255})},
        {"a.i8s", array_of(GgufType::I8, {-128, 127})},
        {"a.u16s", array_of(GgufType::U16, {65535})},
        {"a.i16s", array_of(GgufType::I16, {-32768, 1})},
        {"a.u32s", array_of(GgufType::U32, {4294967295})},
        {"a.u64s", array_of(GgufType::U64, {0, 1, -1})},
        {"a.i64s", array_of(GgufType::I64, {INT64_MIN, INT64_MAX})},
        {"a.f64s", array_of(GgufType::F64, {}, {1e300, -0.0})},
        {"a.bools", array_of(GgufType::BOOL, {1, 0, 1})},
        {"a.empty", GgufValue::of_strings({})},
    };
    struct T {
      std::string name;
      DType dtype;
      std::vector<int64_t> shape;
      std::vector<std::byte> bytes;
    };
    std::vector<T> tensors;
    uint32_t seed = 0;
    for (DType d : kEveryDType) {
      const int64_t row = int64_t(block_elements(d)) * 2;
      tensors.push_back({std::string("t.") + to_string(d), d, {3, row}, {}});
    }
    tensors.push_back({"t.vector", DType::F32, {5}, {}});  // 20 bytes: not a multiple of the alignment
    tensors.push_back({"t.cube", DType::F16, {2, 3, 4}, {}});
    tensors.push_back({"t.four", DType::Q4_K, {1, 2, 1, 256}, {}});
    for (T& t : tensors) t.bytes = random_bytes(t.dtype, t.shape, ++seed);

    GgufWriter w(alignment);
    for (const auto& [k, v] : values) w.set(k, v);
    w.set("v.u8", scalar(GgufType::U8, 254));  // replaced, not added
    values[0].second.integer = 254;
    for (const T& t : tensors) w.add_tensor(t.name, t.dtype, t.shape, t.bytes);
    const std::string path = dir.file("round_trip.gguf");
    w.write(path);
    CHECK(std::distance(fs::directory_iterator(dir.path), fs::directory_iterator()) == 1);

    const GgufFile f = GgufFile::open(path);
    CHECK(f.path() == path);
    CHECK(f.version() == 3);
    CHECK(f.alignment() == alignment);
    // general.alignment only when it is not the default.
    CHECK(f.metadata().size() == values.size() + (alignment == 32 ? 0 : 1));
    CHECK(f.contains("general.alignment") == (alignment != 32));
    if (alignment != 32) CHECK(f.integer("general.alignment") == int64_t(alignment));
    for (const auto& kv : values) {
      const std::string& k = kv.first;  // not a structured binding: CAPTURE's lambda needs clang 16 for one
      const GgufValue& v = kv.second;
      CAPTURE(k);
      const GgufValue* got = f.find(k);
      REQUIRE(got != nullptr);
      if (v.type == GgufType::F32 || (v.type == GgufType::ARRAY && v.element == GgufType::F32)) {
        // f32 values come back as the float they were stored as.
        GgufValue expect = v;
        expect.real = double(float(v.real));
        for (double& r : expect.reals) r = double(float(r));
        CHECK(same_value(*got, expect));
      } else {
        CHECK(same_value(*got, v));
      }
    }

    REQUIRE(f.tensors().size() == tensors.size());
    uint64_t total = 0, padded = 0;
    const std::byte* data = f.tensors()[0].bytes.data() - f.tensors()[0].offset;  // the data section
    for (size_t i = 0; i < tensors.size(); ++i) {
      const T& want = tensors[i];
      const GgufTensor& got = f.tensors()[i];
      CAPTURE(want.name);
      CHECK(got.name == want.name);
      CHECK(got.dtype == want.dtype);
      CHECK(got.shape == want.shape);
      CHECK(got.offset == padded);  // in order, each at the next multiple of the alignment
      CHECK(got.bytes.data() == data + got.offset);
      REQUIRE(got.bytes.size() == want.bytes.size());
      CHECK(std::memcmp(got.bytes.data(), want.bytes.data(), want.bytes.size()) == 0);
      CHECK(&f.tensor(want.name) == &got);
      CHECK(f.find_tensor(want.name) == &got);
      const HostTensor h = got.host();
      CHECK(h.dtype == want.dtype);
      CHECK(h.shape == want.shape);
      total += want.bytes.size();
      padded += (want.bytes.size() + alignment - 1) / alignment * alignment;
    }
    CHECK(f.tensor_bytes() == total);
    const TensorMap map = f.tensor_map();
    CHECK(map.size() == tensors.size());
    CHECK(map.at("t.Q6_K").dtype == DType::Q6_K);
    CHECK(map.at("t.Q6_K").numel() == 3 * 512);
    CHECK(f.find_tensor("nope") == nullptr);
    expect_error([&] { (void)f.tensor("nope"); }, ErrorCode::missing_tensor, {path, "'nope'"});

    // The file ends with the last tensor's padding; the header and every
    // tensor are padded with zeros to the alignment.
    const std::string bytes = read_text(path);
    REQUIRE(bytes.size() >= padded);
    const size_t data_start = bytes.size() - size_t(padded);
    CHECK(data_start % alignment == 0);
    for (size_t i = 0; i < tensors.size(); ++i) {
      const GgufTensor& t = f.tensors()[i];
      const size_t end = data_start + size_t(t.offset) + t.bytes.size();
      const size_t next = i + 1 < tensors.size() ? data_start + size_t(f.tensors()[i + 1].offset) : bytes.size();
      CHECK(std::memcmp(bytes.data() + data_start + t.offset, t.bytes.data(), t.bytes.size()) == 0);
      CHECK(bytes.substr(end, next - end) == std::string(next - end, '\0'));
    }

    // A copy shares the mapping; the views outlive the original object.
    const GgufFile copy = f;
    CHECK(copy.tensors()[0].bytes.data() == f.tensors()[0].bytes.data());
  }
}

TEST_CASE("gguf: typed getters convert what they may and name the file and the key otherwise") {
  TempDir dir;
  GgufWriter w;
  w.set("k.name", GgufValue::of_string("qwen3"));
  w.set("k.count", GgufValue::of_u32(28));
  w.set("k.neg", scalar(GgufType::I8, -3));
  w.set("k.eps", GgufValue::of_f32(0.5f));
  w.set("k.flag", GgufValue::of_bool(false));
  w.set("k.big", GgufValue::of_u64(uint64_t(1) << 63));
  w.set("k.small", GgufValue::of_u64(5));
  w.set("k.tokens", GgufValue::of_strings({"a", "b"}));
  w.set("k.ids", GgufValue::of_i32s({4, 5}));
  w.set("k.bigs", array_of(GgufType::U64, {1, -1}));
  w.set("k.scores", GgufValue::of_f32s({0.25}));
  const std::string path = dir.file("getters.gguf");
  w.write(path);
  const GgufFile f = GgufFile::open(path);

  CHECK(f.string("k.name") == "qwen3");
  CHECK(f.integer("k.count") == 28);
  CHECK(f.integer("k.neg") == -3);
  CHECK(f.integer("k.small") == 5);
  CHECK(f.real("k.eps") == 0.5);
  CHECK(f.real("k.count") == 28.0);  // an integer read as a number
  CHECK(f.real("k.big") == 9223372036854775808.0);
  CHECK(f.boolean("k.flag") == false);
  CHECK(f.strings("k.tokens") == std::vector<std::string>{"a", "b"});
  CHECK(f.integers("k.ids") == std::vector<int64_t>{4, 5});
  CHECK(f.reals("k.scores") == std::vector<double>{0.25});
  CHECK(f.string_or("k.name") == std::optional<std::string>("qwen3"));
  CHECK(f.string_or("absent") == std::nullopt);
  CHECK(f.integer_or("absent") == std::nullopt);
  CHECK(f.real_or("absent") == std::nullopt);
  CHECK(f.boolean_or("absent") == std::nullopt);
  CHECK(f.integer_or("k.count") == std::optional<int64_t>(28));
  CHECK(f.boolean_or("k.flag") == std::optional<bool>(false));
  CHECK(f.find("k.big")->integer == std::numeric_limits<int64_t>::min());  // the u64's bit pattern

  const ErrorCode c = ErrorCode::invalid_config;
  expect_error([&] { (void)f.integer("k.name"); }, c, {path + ": key 'k.name' is a string, expected an integer"});
  expect_error([&] { (void)f.string("k.count"); }, c, {path + ": key 'k.count' is a u32, expected a string"});
  expect_error([&] { (void)f.string("absent"); }, c, {path + ": key 'absent' is missing"});
  expect_error([&] { (void)f.integer("k.eps"); }, c, {path, "'k.eps'", "an f32"});
  expect_error([&] { (void)f.boolean("k.count"); }, c, {path, "'k.count'", "expected a bool"});
  expect_error([&] { (void)f.real("k.tokens"); }, c, {path, "'k.tokens'", "an array of string"});
  expect_error([&] { (void)f.strings("k.ids"); }, c, {path, "'k.ids'", "an array of i32", "expected an array of strings"});
  expect_error([&] { (void)f.integers("k.tokens"); }, c, {path, "'k.tokens'"});
  expect_error([&] { (void)f.reals("k.ids"); }, c, {path, "'k.ids'"});
  expect_error([&] { (void)f.integer("k.big"); }, c, {path, "'k.big'", "9223372036854775808"});
  expect_error([&] { (void)f.integers("k.bigs"); }, c, {path, "'k.bigs'", "18446744073709551615"});
  expect_error([&] { (void)f.integer_or("k.name"); }, c, {path, "'k.name'"});  // present with another type
  expect_error([&] { (void)f.boolean_or("k.name"); }, c, {path, "'k.name'"});
}

TEST_CASE("gguf: a file written by llama.cpp's gguf-py reads as gguf-py reads it (tests/data/gguf)") {
  const std::string dir = std::string(VKGATE_TEST_DATA_DIR) + "/gguf/";
  const std::string path = dir + "gguf_py_small.gguf";
  const nlohmann::json want = nlohmann::json::parse(read_text(dir + "gguf_py_small.json"));
  const GgufFile f = GgufFile::open(path);
  CHECK(f.version() == want["version"].get<uint32_t>());
  CHECK(f.alignment() == want["alignment"].get<uint64_t>());
  CHECK(fs::file_size(path) == want["file_bytes"].get<uint64_t>());

  REQUIRE(f.metadata().size() == want["metadata"].size());
  for (const auto& item : want["metadata"].items()) {
    const std::string key = item.key();
    const nlohmann::json& entry = item.value();
    CAPTURE(key);
    const GgufValue* v = f.find(key);
    REQUIRE(v != nullptr);
    CHECK(std::string(to_string(v->type)) == entry["type"].get<std::string>());
    const nlohmann::json& value = entry["value"];
    if (v->type == GgufType::ARRAY) {
      CHECK(std::string(to_string(v->element)) == entry["element"].get<std::string>());
      for (size_t i = 0; i < value.size(); ++i) {
        CAPTURE(i);
        switch (v->element) {
          case GgufType::STRING: CHECK(v->texts.at(i) == value[i].get<std::string>()); break;
          case GgufType::F32: case GgufType::F64: CHECK(v->reals.at(i) == value[i].get<double>()); break;
          case GgufType::BOOL: CHECK(v->integers.at(i) == int64_t(value[i].get<bool>())); break;
          default: CHECK(v->integers.at(i) == value[i].get<int64_t>()); break;
        }
      }
      const size_t n = v->element == GgufType::STRING ? v->texts.size()
                       : (v->element == GgufType::F32 || v->element == GgufType::F64) ? v->reals.size()
                                                                                         : v->integers.size();
      CHECK(n == value.size());
    } else if (v->type == GgufType::STRING) {
      CHECK(f.string(key) == value.get<std::string>());
    } else if (v->type == GgufType::BOOL) {
      CHECK(f.boolean(key) == value.get<bool>());
    } else if (v->type == GgufType::F32 || v->type == GgufType::F64) {
      CHECK(f.real(key) == value.get<double>());
    } else if (v->type == GgufType::U64) {
      CHECK(std::bit_cast<uint64_t>(v->integer) == value.get<uint64_t>());
    } else {
      CHECK(f.integer(key) == value.get<int64_t>());
    }
  }
  CHECK(f.string("general.architecture") == "vkgate_test");
  CHECK(f.integer("qwen3.block_count") == 2);
  expect_error([&] { (void)f.integer("test.u64"); }, ErrorCode::invalid_config, {path, "'test.u64'"});

  REQUIRE(f.tensors().size() == want["tensors"].size());
  for (size_t i = 0; i < f.tensors().size(); ++i) {
    const nlohmann::json& w = want["tensors"][i];
    const GgufTensor& t = f.tensors()[i];
    CAPTURE(t.name);
    CHECK(t.name == w["name"].get<std::string>());
    CHECK(std::string(to_string(t.dtype)) == w["dtype"].get<std::string>());
    CHECK(t.shape == w["shape"].get<std::vector<int64_t>>());
    CHECK(t.offset == w["offset"].get<uint64_t>());
    CHECK(t.bytes.size() == w["nbytes"].get<size_t>());
    uint64_t sum = 0;
    for (std::byte b : t.bytes) sum += uint64_t(b);
    CHECK(sum == w["byte_sum"].get<uint64_t>());
    if (w.contains("values")) {
      const auto values = w["values"].get<std::vector<double>>();
      for (size_t j = 0; j < values.size(); ++j) {
        double got;
        if (t.dtype == DType::F32) {
          float x;
          std::memcpy(&x, t.bytes.data() + 4 * j, 4);
          got = x;
        } else {
          uint16_t x;
          std::memcpy(&x, t.bytes.data() + 2 * j, 2);
          got = half_to_float(x);
        }
        CHECK(got == values[j]);
      }
    }
  }
  CHECK(f.tensor("cube").shape == std::vector<int64_t>{2, 3, 4});
  CHECK(f.tensor("q8_0.weight").dtype == DType::Q8_0);
  CHECK(f.tensor("q4_0.weight").dtype == DType::Q4_0);
}

TEST_CASE("gguf: a file cut short anywhere is Error(io) naming it, never a crash") {
  TempDir dir;
  const std::string path = dir.file("cut.gguf");
  for (const std::string& source : {std::string(VKGATE_TEST_DATA_DIR) + "/gguf/gguf_py_small.gguf", std::string()}) {
    std::string bytes;
    if (source.empty()) {
      const Sample s(dir, 64);
      bytes = s.bytes;
    } else {
      bytes = read_text(source);
    }
    write_text(path, bytes);
    // Only the padding after the last tensor may go: the data section is the
    // file's tail, the tensors in order, each padded to the alignment.
    size_t end = 0;
    {
      const GgufFile f = GgufFile::open(path);
      const GgufTensor& last = f.tensors().back();
      const uint64_t padded_end = (last.offset + last.bytes.size() + f.alignment() - 1) / f.alignment() * f.alignment();
      end = size_t(bytes.size() - padded_end + last.offset + last.bytes.size());
    }
    for (size_t n = 0; n < bytes.size(); ++n) {
      CAPTURE(n);
      write_text(path, bytes.substr(0, n));
      if (n >= end) {
        CHECK_NOTHROW(GgufFile::open(path));
        continue;
      }
      try {
        (void)GgufFile::open(path);
        FAIL("opened a truncated file");
      } catch (const Error& e) {
        CHECK(e.code() == ErrorCode::io);
        CHECK(std::string(e.what()).rfind(path + ": ", 0) == 0);
      }
    }
  }
}

TEST_CASE("gguf: malformed headers are Error naming the file and the key or tensor") {
  TempDir dir;
  const Sample s(dir);
  const std::string path = dir.file("bad.gguf");
  const ErrorCode io = ErrorCode::io;
  // Runs one corruption of the sample's bytes.
  auto bad = [&](auto corrupt, ErrorCode code, const std::vector<std::string>& mentions) {
    std::string b = s.bytes;
    corrupt(b);
    write_text(path, b);
    expect_open_error(path, code, mentions);
  };
  const size_t k = after(s.bytes, "test.k");        // u32 type, then the value
  const size_t str = after(s.bytes, "test.s");      // type, u64 length, bytes
  const size_t arr = after(s.bytes, "test.arr");    // type, element type, u64 count
  const size_t one = after(s.bytes, "tensor.one");  // n_dims 2, ne[0] 4, ne[1] 3, type, offset
  const size_t two = after(s.bytes, "tensor.two");  // n_dims 2, ne[0] 64, ne[1] 2, type 8, offset

  SUBCASE("magic, version and counts") {
    bad([](std::string& b) { b[0] = 'X'; }, io, {"not a GGUF file"});
    bad([](std::string& b) { poke<uint32_t>(b, 4, 2); }, io, {"version 2", "version 3 only"});
    bad([](std::string& b) { poke<uint32_t>(b, 4, 1); }, io, {"version 1"});
    bad([](std::string& b) { poke<uint32_t>(b, 4, 4); }, io, {"version 4"});
    bad([](std::string& b) { poke<uint32_t>(b, 4, 0x03000000u); }, io, {"big-endian"});
    bad([](std::string& b) { poke<uint64_t>(b, 8, uint64_t(1) << 60); }, io, {"tensor count 1152921504606846976"});
    bad([](std::string& b) { poke<uint64_t>(b, 16, uint64_t(1) << 60); }, io, {"key count 1152921504606846976"});
    bad([](std::string& b) { poke<uint64_t>(b, 16, ~uint64_t(0)); }, io, {"key count"});
    bad([](std::string& b) { poke<uint64_t>(b, 16, 6); }, io, {});  // one key too many: "tensor.one" read as a key
  }
  SUBCASE("keys and values") {
    bad([&](std::string& b) { poke<uint32_t>(b, k, 13); }, io, {"key 'test.k'", "unknown value type 13"});
    bad([&](std::string& b) { poke<uint32_t>(b, k, 0xffffffffu); }, io, {"key 'test.k'", "unknown value type"});
    bad([&](std::string& b) { poke<uint64_t>(b, str + 4, uint64_t(1) << 40); }, io, {"key 'test.s'", "string of 1099511627776 bytes"});
    bad([&](std::string& b) { poke<uint64_t>(b, str + 4, ~uint64_t(0)); }, io, {"key 'test.s'", "past the end"});
    bad([&](std::string& b) { poke<uint64_t>(b, arr + 8, uint64_t(1) << 60); }, io, {"key 'test.arr'", "array of 1152921504606846976 string values"});
    bad([&](std::string& b) { poke<uint64_t>(b, arr + 8, ~uint64_t(0)); }, io, {"key 'test.arr'", "cannot fit"});
    bad([&](std::string& b) { poke<uint32_t>(b, arr + 4, 4); poke<uint64_t>(b, arr + 8, uint64_t(1) << 62); }, io,
        {"key 'test.arr'", "array of 4611686018427387904 u32 values"});
    bad([&](std::string& b) { poke<uint32_t>(b, arr + 4, 9); }, io, {"key 'test.arr'", "array of arrays"});
    bad([&](std::string& b) { poke<uint32_t>(b, arr + 4, 77); }, io, {"key 'test.arr'", "unknown array element type 77"});
    bad([&](std::string& b) { b[after(b, "test.a2") - 1] = '1'; }, io, {"key 'test.a1'", "appears twice"});
    bad([&](std::string& b) { poke<uint64_t>(b, 24, 0); }, io, {"key 0 of 5", "empty"});
  }
  SUBCASE("general.alignment") {
    TempDir d64;
    const Sample s64(d64, 64);
    const size_t a = after(s64.bytes, "general.alignment");
    auto bad64 = [&](auto corrupt, const std::vector<std::string>& mentions) {
      std::string b = s64.bytes;
      corrupt(b);
      write_text(path, b);
      expect_open_error(path, io, mentions);
    };
    bad64([&](std::string& b) { poke<uint32_t>(b, a + 4, 48); }, {"key 'general.alignment'", "48 is not a power of two"});
    bad64([&](std::string& b) { poke<uint32_t>(b, a + 4, 0); }, {"key 'general.alignment'", "0 is not a power of two"});
    bad64([&](std::string& b) { poke<uint32_t>(b, a, 5); }, {"key 'general.alignment'", "is an i32, expected a u32"});
    // 64 read as 32: the second tensor's offset (64) stays aligned, the data section moves.
    std::string b = s64.bytes;
    poke<uint32_t>(b, a + 4, 128);
    write_text(path, b);
    expect_open_error(path, io, {"tensor 'tensor.two'", "offset 64 is not a multiple of the alignment 128"});
  }
  SUBCASE("tensor infos") {
    bad([&](std::string& b) { b.replace(two - 3, 3, "one"); }, io, {"tensor 'tensor.one'", "appears twice"});
    bad([&](std::string& b) { poke<uint32_t>(b, one, 0); }, io, {"tensor 'tensor.one'", "0 dimensions"});
    bad([&](std::string& b) { poke<uint32_t>(b, one, 5); }, io, {"tensor 'tensor.one'", "5 dimensions"});
    bad([&](std::string& b) { poke<uint32_t>(b, one, 0x40000000u); }, io, {"tensor 'tensor.one'", "dimensions"});
    bad([&](std::string& b) { poke<uint64_t>(b, one + 4, 0); }, io, {"tensor 'tensor.one'", "dimension 0 is 0"});
    bad([&](std::string& b) { poke<int64_t>(b, one + 12, -3); }, io, {"tensor 'tensor.one'", "dimension 1 is -3"});
    bad([&](std::string& b) { poke<uint64_t>(b, one + 4, uint64_t(1) << 32); poke<uint64_t>(b, one + 12, uint64_t(1) << 32); },
        io, {"tensor 'tensor.one'", "too many elements"});
    bad([&](std::string& b) { poke<uint64_t>(b, one + 4, uint64_t(1) << 40); }, io,
        {"tensor 'tensor.one'", "[3, 1099511627776] of F32 needs more bytes than the"});
    bad([&](std::string& b) { poke<uint64_t>(b, two + 4, 48); }, io,
        {"tensor 'tensor.two'", "rows of 48 elements are not a whole number of Q8_0 blocks of 32"});
    bad([&](std::string& b) { poke<uint32_t>(b, one + 20, 21); }, ErrorCode::unsupported,
        {"tensor 'tensor.one' has type iq3_s, which vkgate does not read (it reads F32, F16, BF16, Q8_0, Q4_0, Q4_1, "
         "Q5_0, Q5_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS)"});
    bad([&](std::string& b) { poke<uint32_t>(b, one + 20, 16); }, ErrorCode::unsupported, {"tensor 'tensor.one'", "iq2_xxs"});
    bad([&](std::string& b) { poke<uint32_t>(b, one + 20, 39); }, ErrorCode::unsupported, {"tensor 'tensor.one'", "mxfp4"});
    bad([&](std::string& b) { poke<uint32_t>(b, one + 20, 26); }, ErrorCode::unsupported, {"tensor 'tensor.one' has type i32"});
    bad([&](std::string& b) { poke<uint32_t>(b, one + 20, 28); }, ErrorCode::unsupported, {"tensor 'tensor.one' has type f64"});
    bad([&](std::string& b) { poke<uint32_t>(b, one + 20, 4000); }, ErrorCode::unsupported, {"tensor 'tensor.one'", "type 4000"});
    bad([&](std::string& b) { poke<uint64_t>(b, two - 10 - 8, 0); }, io, {"tensor 1 of 2", "empty"});
  }
  SUBCASE("tensor offsets") {
    bad([&](std::string& b) { poke<uint64_t>(b, two + 24, 16); }, io,
        {"tensor 'tensor.two'", "offset 16 is not a multiple of the alignment 32"});
    bad([&](std::string& b) { poke<uint64_t>(b, two + 24, uint64_t(1) << 40); }, io,
        {"tensor 'tensor.two'", "its 136 bytes at offset 1099511627776 run past the end"});
    bad([&](std::string& b) { poke<uint64_t>(b, two + 24, ~uint64_t(31)); }, io, {"tensor 'tensor.two'", "run past the end"});
    bad([&](std::string& b) { poke<uint64_t>(b, two + 24, 96); }, io, {"tensor 'tensor.two'", "run past the end of the 224-byte data section"});
    bad([&](std::string& b) { poke<uint64_t>(b, two + 24, 0); }, io, {"tensors 'tensor.one' and 'tensor.two' overlap"});
    bad([&](std::string& b) { poke<uint64_t>(b, one + 24, 64); poke<uint64_t>(b, two + 24, 32); }, io,
        {"tensors 'tensor.two' and 'tensor.one' overlap"});
  }
  SUBCASE("files that are not GGUF at all") {
    write_text(path, "");
    expect_open_error(path, io, {"not a GGUF file"});
    write_text(path, "GGUF");
    expect_open_error(path, io, {"the file ends early"});
    expect_open_error(dir.file("absent.gguf"), io, {"cannot open"});
    expect_open_error(dir.path.string(), io, {"not a regular file"});
  }
}

TEST_CASE("gguf: writer refuses bad tensors and values and leaves no file when it fails") {
  TempDir dir;
  const auto q8 = random_bytes(DType::Q8_0, {2, 64}, 3);
  GgufWriter w;
  w.add_tensor("ok", DType::Q8_0, {2, 64}, q8);
  expect_error([&] { w.add_tensor("short", DType::Q8_0, {2, 64}, std::span(q8).first(q8.size() - 1)); },
               ErrorCode::shape_mismatch, {"'short'", "135 bytes", "needs 136"});
  expect_error([&] { w.add_tensor("rows", DType::Q8_0, {2, 48}, q8); }, ErrorCode::shape_mismatch,
               {"'rows'", "not a whole number of Q8_0 blocks"});
  expect_error([&] { w.add_tensor("ok", DType::Q8_0, {2, 64}, q8); }, ErrorCode::invalid_argument, {"'ok'", "twice"});
  expect_error([&] { w.add_tensor("f64", DType::F64, {17}, q8); }, ErrorCode::invalid_argument, {"'f64'", "F64"});
  expect_error([&] { w.add_tensor("scalar", DType::F32, {}, {}); }, ErrorCode::invalid_argument, {"'scalar'"});
  expect_error([&] { w.add_tensor("five", DType::F32, {1, 1, 1, 1, 34}, q8); }, ErrorCode::invalid_argument, {"'five'"});
  expect_error([&] { w.add_tensor("zero", DType::F32, {0, 4}, {}); }, ErrorCode::invalid_argument, {"'zero'"});
  expect_error([&] { w.set("k", scalar(GgufType::U8, 256)); }, ErrorCode::invalid_argument, {"'k'", "256", "u8"});
  expect_error([&] { w.set("k", array_of(GgufType::I16, {1, 40000})); }, ErrorCode::invalid_argument, {"'k'", "40000"});
  expect_error([&] { w.set("k", GgufValue::of_i32s({int64_t(1) << 31})); }, ErrorCode::invalid_argument, {"'k'"});
  expect_error([&] { w.set("k", array_of(GgufType::ARRAY, {})); }, ErrorCode::invalid_argument, {"'k'"});
  expect_error([&] { w.set("k", scalar(GgufType(13), 0)); }, ErrorCode::invalid_argument, {"'k'", "13"});
  expect_error([&] { w.set("", GgufValue::of_u32(1)); }, ErrorCode::invalid_argument, {"empty"});
  expect_error([&] { w.set("general.alignment", GgufValue::of_u32(64)); }, ErrorCode::invalid_argument,
               {"'general.alignment'", "32"});
  CHECK_NOTHROW(w.set("general.alignment", GgufValue::of_u32(32)));  // a copied file's own: agrees
  expect_error([] { GgufWriter bad(48); }, ErrorCode::invalid_argument, {"48"});
  expect_error([] { GgufWriter bad(0); }, ErrorCode::invalid_argument, {"0"});

  // Write failures: a missing directory, a directory; nothing appears.
  expect_error([&] { w.write(dir.file("missing/x.gguf")); }, ErrorCode::io, {dir.file("missing/x.gguf")});
  fs::create_directory(dir.file("sub"));
  expect_error([&] { w.write(dir.file("sub")); }, ErrorCode::io, {dir.file("sub")});
  CHECK(std::distance(fs::directory_iterator(dir.path), fs::directory_iterator()) == 1);
  CHECK(fs::is_empty(dir.file("sub")));

  // What was refused left the writer as it was: it still writes the one good tensor.
  const std::string path = dir.file("ok.gguf");
  w.write(path);
  const GgufFile f = GgufFile::open(path);
  REQUIRE(f.tensors().size() == 1);
  CHECK(f.tensors()[0].name == "ok");
  CHECK(f.metadata().empty());

  // An existing file is replaced whole, or kept when the write fails.
  const std::string before = read_text(path);
  GgufWriter empty;
  empty.set("only", GgufValue::of_bool(true));
  empty.write(path);
  CHECK(GgufFile::open(path).tensors().empty());
  CHECK(GgufFile::open(path).boolean("only"));
  CHECK(read_text(path) != before);
}

}  // namespace test_gguf
