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
