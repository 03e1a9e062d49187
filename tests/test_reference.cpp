// Tests of the CPU oracle (against the independent golden cases and against
// hand-checkable single-op cases) and of the safetensors reader/writer.
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

#include "vkgate/config.hpp"
#include "vkgate/error.hpp"
#include "vkgate/reference.hpp"
#include "vkgate/safetensors.hpp"
#include "vkgate/weights.hpp"
#include "golden.hpp"

namespace fs = std::filesystem;
using nlohmann::json;
using namespace vkgate;
using test::Golden;

namespace {

constexpr double kGoldenNmse = 1e-12;
constexpr float kInf = std::numeric_limits<float>::infinity();

std::vector<float> random_floats(size_t n, unsigned seed, float lo = -1, float hi = 1) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

double max_abs_diff(const std::vector<double>& a, const std::vector<double>& b) {
  REQUIRE(a.size() == b.size());
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::abs(a[i] - b[i]));
  return m;
}

// ---- golden cases ----

// x [B, N, S, Dh] -> positions [from, from + count) of the sequence axis.
std::vector<double> seq_slice(const std::vector<double>& x, int64_t B, int64_t N, int64_t S,
                              int64_t Dh, int64_t from, int64_t count) {
  std::vector<double> out;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t n = 0; n < N; ++n)
      for (int64_t s = from; s < from + count; ++s)
        for (int64_t d = 0; d < Dh; ++d) out.push_back(x[size_t(((b * N + n) * S + s) * Dh + d)]);
  return out;
}

void expect_close(const std::string& what, std::span<const float> golden,
                  const std::vector<double>& ours) {
  CAPTURE(what);
  REQUIRE(golden.size() == ours.size());
  const reference::Diff d = reference::compare(golden, ours);
  INFO(what << ": NMSE " << d.nmse << ", max |diff| " << d.max_abs);
  CHECK(d.first_bad == -1);
  CHECK(d.nmse <= kGoldenNmse);
}

void check_golden_case(const std::string& name) {
  CAPTURE(name);
  Golden g(name);
  const int64_t B = g.dim("hidden_states", 0), T = g.dim("hidden_states", 1);
  const int64_t P = g.meta.at("past_length").get<int64_t>();
  reference::Inputs in;
  in.hidden = g.f32("hidden_states");
  in.batch = B;
  in.tokens = T;
  in.past = P;
  if (P > 0) {
    in.past_key = g.f32("past_key");
    in.past_value = g.f32("past_value");
  }
  const reference::Result r = reference::forward(g.cfg, g.weights, in);

  const int64_t KV = g.cfg.num_kv_heads, Dh = g.cfg.head_dim;
  expect_close(name + " output", g.f32("output"), r.output);
  expect_close(name + " debug.q", g.f32("debug.q"), r.q);
  // The golden k/v hold only the new tokens; ours hold the whole cache.
  expect_close(name + " debug.k", g.f32("debug.k"), seq_slice(r.k, B, KV, P + T, Dh, P, T));
  expect_close(name + " debug.v", g.f32("debug.v"), seq_slice(r.v, B, KV, P + T, Dh, P, T));
  expect_close(name + " debug.sdpa", g.f32("debug.sdpa"), r.sdpa);
  expect_close(name + " debug.gate", g.f32("debug.gate"), r.gate);
  expect_close(name + " debug.gated", g.f32("debug.gated"), r.gated);
  expect_close(name + " stats.first_token_attn", g.f32("stats.first_token_attn"),
               r.first_token_attn);
}

}  // namespace

TEST_CASE("golden g1: Qwen3-Next rows, zero-centred norms, partial RoPE, GQA 4->2") {
  check_golden_case("g1_gqa_qwen3next_partial");
}

TEST_CASE("golden g2: official grouped rows, headwise gate, plain norms, GQA 6->3") {
  check_golden_case("g2_gqa_official_headwise");
}

TEST_CASE("golden g3: separate gate_proj, no qk-norm, bidirectional, residual, MQA") {
  check_golden_case("g3_mqa_separate_bidir_residual");
}

TEST_CASE("golden g4: one token after an 11-token cache") {
  check_golden_case("g4_decode_qwen3next_cache");
}

TEST_CASE("golden g4: the prefix reproduces the cache it ships with") {
  Golden g("g4_decode_qwen3next_cache");
  const TensorView& prefix = g.file.at("prefix_hidden_states");
  const int64_t B = prefix.shape[0], P = prefix.shape[1];
  reference::Inputs in;
  in.hidden = g.f32("prefix_hidden_states");
  in.batch = B;
  in.tokens = P;
  const reference::Result r = reference::forward(g.cfg, g.weights, in);
  expect_close("past_key", g.f32("past_key"), r.k);
  expect_close("past_value", g.f32("past_value"), r.v);
}

TEST_CASE("golden inputs are rejected when sizes are wrong") {
  Golden g("g1_gqa_qwen3next_partial");
  reference::Inputs in;
  in.hidden = g.f32("hidden_states");
  in.batch = 2;
  in.tokens = 8;  // the file holds 9
  try {
    reference::forward(g.cfg, g.weights, in);
    FAIL("forward accepted a hidden_states of the wrong size");
  } catch (const Error& e) {
    CHECK(e.code() == ErrorCode::invalid_argument);
    CHECK(std::string(e.what()).find("hidden") != std::string::npos);
  }
  WeightMap missing = g.weights;
  missing.erase("k_norm.weight");
  in.tokens = 9;
  try {
    reference::forward(g.cfg, missing, in);
    FAIL("forward accepted weights without k_norm.weight");
  } catch (const Error& e) {
    CHECK(e.code() == ErrorCode::missing_tensor);
    CHECK(std::string(e.what()).find("k_norm.weight") != std::string::npos);
  }
}

// ---- single ops ----

TEST_CASE("linear: X·Wᵀ + b on a hand-checked case") {
  const std::vector<float> x = {1, 2, 3, 4, 5, 6};            // [2, 3]
  const std::vector<float> w = {1, 0, -1, 0.5f, 0.5f, 0.5f};  // [2, 3]
  const std::vector<float> b = {10, -1};
  CHECK(reference::linear(x, w, b, 2, 2, 3) == std::vector<double>{8, 2, 8, 6.5});
  CHECK(reference::linear(x, w, {}, 2, 2, 3) == std::vector<double>{-2, 3, -2, 7.5});
  CHECK_THROWS_AS(reference::linear(x, w, b, 2, 2, 2), Error);
}

TEST_CASE("rms_norm: plain x̂·w versus zero-centred x̂·(1+w)") {
  const std::vector<float> x = {3, 4};
  const std::vector<float> w = {1, 2};
  const double eps = 1e-6, inv_rms = 1.0 / std::sqrt(12.5 + eps);
  const std::vector<double> plain = reference::rms_norm(x, w, 1, 2, eps, NormKind::plain);
  const std::vector<double> centred = reference::rms_norm(x, w, 1, 2, eps, NormKind::zero_centered);
  CHECK(plain[0] == doctest::Approx(3 * inv_rms * 1).epsilon(1e-15));
  CHECK(plain[1] == doctest::Approx(4 * inv_rms * 2).epsilon(1e-15));
  CHECK(centred[0] == doctest::Approx(3 * inv_rms * 2).epsilon(1e-15));
  CHECK(centred[1] == doctest::Approx(4 * inv_rms * 3).epsilon(1e-15));
}

TEST_CASE(
    "rope: rotary_dim 0 is the identity, rotation keeps pair norms, angle is pos·θ^(−2i/rd)") {
  const int64_t B = 2, T = 3, H = 2, Dh = 8;
  const std::vector<float> x = random_floats(size_t(B * T * H * Dh), 1);
  const std::vector<double> same = reference::rope(x, B, T, H, Dh, 0, 10000.0, 5);
  CHECK(same == std::vector<double>(x.begin(), x.end()));

  const int64_t rd = 4, half = rd / 2;
  const std::vector<double> y = reference::rope(x, B, T, H, Dh, rd, 10000.0, 5);
  for (int64_t row = 0; row < B * T * H; ++row) {
    for (int64_t i = 0; i < half; ++i) {
      const double a = x[size_t(row * Dh + i)], b = x[size_t(row * Dh + i + half)];
      const double c = y[size_t(row * Dh + i)], d = y[size_t(row * Dh + i + half)];
      CHECK(c * c + d * d == doctest::Approx(a * a + b * b).epsilon(1e-14));
    }
    for (int64_t i = rd; i < Dh; ++i)
      CHECK(y[size_t(row * Dh + i)] == double(x[size_t(row * Dh + i)]));
  }

  // Dh = rd = 4, θ = 100: pair (0, 2) turns by pos rad, pair (1, 3) by pos·100^(−1/2).
  const std::vector<float> e = {1, 1, 0, 0,   // token 0, position 3: both pairs (1, 0)
                                0, 0, 1, 0};  // token 1, position 4: pair (0, 2) is (0, 1)
  const std::vector<double> r = reference::rope(e, 1, 2, 1, 4, 4, 100.0, 3);
  CHECK(r[0] == doctest::Approx(std::cos(3.0)).epsilon(1e-15));
  CHECK(r[2] == doctest::Approx(std::sin(3.0)).epsilon(1e-15));
  CHECK(r[1] == doctest::Approx(std::cos(0.3)).epsilon(1e-15));
  CHECK(r[3] == doctest::Approx(std::sin(0.3)).epsilon(1e-15));
  CHECK(r[4] == doctest::Approx(-std::sin(4.0)).epsilon(1e-15));
  CHECK(r[6] == doctest::Approx(std::cos(4.0)).epsilon(1e-15));
  CHECK(r[5] == 0.0);
  CHECK(r[7] == 0.0);
}

TEST_CASE("softmax: rows sum to one, causal entries are zero, fully masked rows are zero") {
  const int64_t B = 2, H = 3, T = 4, S = 6;
  const std::vector<float> scores = random_floats(size_t(B * H * T * S), 2, -5, 5);
  const std::vector<double> p = reference::softmax(scores, B, H, T, S, 0.5, true, {});
  for (int64_t row = 0; row < B * H * T; ++row) {
    const int64_t t = row % T;
    double sum = 0;
    for (int64_t s = 0; s < S; ++s) {
      const double v = p[size_t(row * S + s)];
      if (s > S - T + t) CHECK(v == 0.0);
      sum += v;
    }
    CHECK(sum == doctest::Approx(1.0).epsilon(1e-14));
  }

  std::vector<float> mask(size_t(B * T * S), 0.0f);
  for (int64_t s = 0; s < S; ++s) mask[size_t((1 * T + 2) * S + s)] = -kInf;  // batch 1, query 2
  const std::vector<double> q = reference::softmax(scores, B, H, T, S, 0.5, false, mask);
  for (int64_t h = 0; h < H; ++h) {
    for (int64_t s = 0; s < S; ++s) {
      const double v = q[size_t(((1 * H + h) * T + 2) * S + s)];
      CHECK(!std::isnan(v));
      CHECK(v == 0.0);
    }
  }
}

TEST_CASE("attention equals the composition of scores, softmax and P·V, with GQA") {
  const int64_t B = 2, H = 4, KV = 2, T = 3, S = 5, Dh = 4;
  // Quarter-integers keep every product and sum exact in float, so the scores
  // handed to softmax below are exactly the ones attention() forms itself.
  auto quarters = [](size_t n, unsigned seed) {
    std::vector<float> v = random_floats(n, seed, -8, 8);
    for (float& x : v) x = std::round(x) / 4;
    return v;
  };
  const std::vector<float> q = quarters(size_t(B * H * T * Dh), 3);
  const std::vector<float> k = quarters(size_t(B * KV * S * Dh), 4);
  const std::vector<float> v = quarters(size_t(B * KV * S * Dh), 5);
  const std::vector<float> mask = random_floats(size_t(B * T * S), 6, -2, 0);
  const double scale = 0.5;

  std::vector<float> scores(size_t(B * H * T * S));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t t = 0; t < T; ++t)
        for (int64_t s = 0; s < S; ++s) {
          float dot = 0;
          for (int64_t d = 0; d < Dh; ++d)
            dot += q[size_t(((b * H + h) * T + t) * Dh + d)] *
                   k[size_t(((b * KV + h / 2) * S + s) * Dh + d)];
          scores[size_t(((b * H + h) * T + t) * S + s)] = dot;
        }
  const std::vector<double> p = reference::softmax(scores, B, H, T, S, scale, true, mask);
  std::vector<double> want(size_t(B * T * H * Dh), 0.0);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t t = 0; t < T; ++t)
        for (int64_t d = 0; d < Dh; ++d)
          for (int64_t s = 0; s < S; ++s)
            want[size_t(((b * T + t) * H + h) * Dh + d)] +=
                p[size_t(((b * H + h) * T + t) * S + s)] *
                v[size_t(((b * KV + h / 2) * S + s) * Dh + d)];

  const std::vector<double> got =
      reference::attention(q, k, v, B, H, KV, T, S, Dh, scale, true, mask);
  CHECK(max_abs_diff(got, want) <= 1e-14);
}

TEST_CASE("gate: headwise equals elementwise with the score repeated per channel") {
  const int64_t rows = 3, H = 2, Dh = 4;
  const std::vector<float> y = random_floats(size_t(rows * H * Dh), 7);
  const std::vector<float> g = random_floats(size_t(rows * H), 8, -4, 4);
  std::vector<float> g_wide;
  for (float s : g) g_wide.insert(g_wide.end(), size_t(Dh), s);
  const std::vector<double> head = reference::gate(y, g, rows, H, Dh, 1);
  CHECK(head == reference::gate(y, g_wide, rows, H, Dh, Dh));
  CHECK(head[0] == doctest::Approx(y[0] / (1 + std::exp(-double(g[0])))).epsilon(1e-15));
  CHECK_THROWS_AS(reference::gate(y, g, rows, H, Dh, 2), Error);
}

TEST_CASE("compare: NMSE, non-finite values, all-zero reference") {
  const std::vector<double> want = {1, 2, 2};
  const std::vector<float> got = {1, 2, 3};
  reference::Diff d = reference::compare(got, want);
  CHECK(d.nmse == doctest::Approx(1.0 / 9.0));
  CHECK(d.max_abs == 1.0);
  CHECK(d.first_bad == -1);

  const std::vector<float> nan = {1, std::numeric_limits<float>::quiet_NaN(), kInf};
  d = reference::compare(nan, want);
  CHECK(std::isinf(d.nmse));
  CHECK(d.first_bad == 1);

  const std::vector<double> zero = {0, 0, 0};
  CHECK(reference::compare(got, zero).nmse == 14.0);
  CHECK_THROWS_AS(reference::compare(got, std::vector<double>{1.0}), Error);
}

// ---- 16-bit floats ----

TEST_CASE("fp16 conversions: exact round trip and ties to even") {
  CHECK(float_to_half(1.0f) == 0x3c00);
  CHECK(float_to_half(-2.0f) == 0xc000);
  CHECK(float_to_half(65504.0f) == 0x7bff);
  CHECK(float_to_half(65519.0f) == 0x7bff);
  CHECK(float_to_half(65520.0f) == 0x7c00);
  CHECK(float_to_half(std::ldexp(1.0f, -24)) == 0x0001);
  CHECK(float_to_half(std::ldexp(1.0f, -25)) == 0x0000);  // tie to even zero
  CHECK(float_to_half(std::ldexp(1.5f, -25)) == 0x0001);
  CHECK(float_to_half(std::ldexp(1.0f, -14) - std::ldexp(1.0f, -26)) ==
        0x0400);  // rounds up to normal
  CHECK(std::isnan(half_to_float(float_to_half(std::numeric_limits<float>::quiet_NaN()))));
  CHECK(half_to_float(0x0001) == std::ldexp(1.0f, -24));

  // Every non-NaN half survives half -> float -> half, and the exact midpoint
  // between neighbours rounds to the one with an even mantissa.
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const auto bits = uint16_t(h);
    if ((bits & 0x7c00) == 0x7c00 && (bits & 0x3ff)) continue;
    REQUIRE(float_to_half(half_to_float(bits)) == bits);
    if ((bits & 0x7fff) < 0x7bff) {
      const auto next = uint16_t(bits + 1);
      const float mid = (half_to_float(bits) + half_to_float(next)) / 2;  // exact in float
      REQUIRE(float_to_half(mid) == ((bits & 1) ? next : bits));
      REQUIRE(float_to_half(std::nextafter(mid, 0.0f)) == bits);
      REQUIRE(float_to_half(std::nextafter(mid, 2 * mid)) == next);
    }
  }
}

TEST_CASE("bf16 conversions: exact round trip and ties to even") {
  CHECK(float_to_bf16(1.0f) == 0x3f80);
  CHECK(float_to_bf16(std::bit_cast<float>(0x3f808000u)) == 0x3f80);  // tie, even stays
  CHECK(float_to_bf16(std::bit_cast<float>(0x3f818000u)) == 0x3f82);  // tie, odd rounds up
  CHECK(float_to_bf16(std::bit_cast<float>(0x3f808001u)) == 0x3f81);
  CHECK(float_to_bf16(std::numeric_limits<float>::max()) == 0x7f80);  // overflows to inf
  CHECK(std::isnan(bf16_to_float(float_to_bf16(std::numeric_limits<float>::quiet_NaN()))));
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const auto bits = uint16_t(h);
    if ((bits & 0x7f80) == 0x7f80 && (bits & 0x7f)) continue;
    REQUIRE(float_to_bf16(bf16_to_float(bits)) == bits);
  }
}

// ---- safetensors ----

namespace {

// A fresh directory under the system temp dir, removed with everything in it.
struct TempDir {
  fs::path path;
  TempDir() {
    static int counter = 0;
    path = fs::temp_directory_path() /
           ("vkgate_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    fs::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::string file(const std::string& name) const { return (path / name).string(); }
};

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
