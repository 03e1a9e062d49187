// Tests of the CPU oracle (against the independent golden cases and against
// hand-checkable single-op cases) and of the safetensors reader/writer.
#include "doctest.hpp"
#include <unistd.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <numeric>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "random_floats.hpp"
#include "vkgate/config.hpp"
#include "vkgate/error.hpp"
#include "vkgate/reference.hpp"
#include "vkgate/safetensors.hpp"
#include "vkgate/weights.hpp"
#include "block_weights.hpp"
#include "golden.hpp"
#include "test_util.hpp"

namespace test_reference {

namespace fs = std::filesystem;
using nlohmann::json;
using namespace vkgate;
using test::nmse;
using test::max_abs_diff;
using test::Golden;

namespace {

constexpr double kGoldenNmse = 1e-12;
constexpr float kInf = std::numeric_limits<float>::infinity();

using test::random_floats;

// ---- golden cases ----

// x [B, N, S, Dh] -> positions [from, from + count) of the sequence axis.
template <class T>
std::vector<T> seq_slice(const std::vector<T>& x, int64_t B, int64_t N, int64_t S, int64_t Dh,
                         int64_t from, int64_t count) {
  std::vector<T> out;
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

// forward() on a golden case's hidden_states after its cache (if any).
reference::Result run_golden(Golden& g) {
  reference::Inputs in{.hidden = g.f32("hidden_states"), .batch = g.dim("hidden_states", 0),
                       .tokens = g.dim("hidden_states", 1), .past = g.meta.at("past_length").get<int64_t>()};
  if (in.past > 0) {
    in.past_key = g.f32("past_key");
    in.past_value = g.f32("past_value");
  }
  return reference::forward(g.cfg, g.weights, in);
}

// The tensors every golden block case carries: output, q, the new k and v, sdpa, first_token_attn.
void check_block_tensors(const std::string& name, Golden& g, const reference::Result& r) {
  const int64_t B = g.dim("hidden_states", 0), T = g.dim("hidden_states", 1);
  const int64_t P = g.meta.at("past_length").get<int64_t>();
  const int64_t KV = g.cfg.num_kv_heads, Dh = g.cfg.head_dim;
  expect_close(name + " output", g.f32("output"), r.output);
  expect_close(name + " debug.q", g.f32("debug.q"), r.q);
  // The golden k/v hold only the new tokens; ours hold the whole cache.
  expect_close(name + " debug.k", g.f32("debug.k"), seq_slice(r.k, B, KV, P + T, Dh, P, T));
  expect_close(name + " debug.v", g.f32("debug.v"), seq_slice(r.v, B, KV, P + T, Dh, P, T));
  expect_close(name + " debug.sdpa", g.f32("debug.sdpa"), r.sdpa);
  expect_close(name + " stats.first_token_attn", g.f32("stats.first_token_attn"),
               r.first_token_attn);
}

void check_golden_case(const std::string& name) {
  CAPTURE(name);
  Golden g(name);
  const reference::Result r = run_golden(g);
  check_block_tensors(name, g, r);
  expect_close(name + " debug.gate", g.f32("debug.gate"), r.gate);
  expect_close(name + " debug.gated", g.f32("debug.gated"), r.gated);
}

double mean(const std::vector<double>& x) {
  double sum = 0;
  for (double v : x) sum += v;
  return sum / double(x.size());
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
  reference::Inputs in{.hidden = g.f32("prefix_hidden_states"), .batch = B, .tokens = P};
  const reference::Result r = reference::forward(g.cfg, g.weights, in);
  expect_close("past_key", g.f32("past_key"), r.k);
  expect_close("past_value", g.f32("past_value"), r.v);
}

TEST_CASE("golden w2: value gate over GQA 4->2, two tokens after a 6-token cache") {
  const std::string name = "wave2/w2_value_gate_gqa_cache";
  Golden g(name);
  REQUIRE(g.cfg.gate_position == GatePosition::value);
  const reference::Result r = run_golden(g);
  check_block_tensors(name, g, r);
  expect_close(name + " present_key", g.f32("present_key"), r.k);
  expect_close(name + " present_value", g.f32("present_value"), r.v);
  expect_close(name + " debug.gate_scores", g.f32("debug.gate_scores"), r.gate);
  expect_close(name + " stats.gate_mean", g.f32("stats.gate_mean"), {mean(r.gate)});
}

TEST_CASE("golden w2: the whole 8-token sequence without a cache ends in the same two tokens") {
  Golden g("wave2/w2_value_gate_gqa_cache");
  const int64_t B = g.dim("hidden_states", 0), T = g.dim("hidden_states", 1);
  const int64_t P = g.dim("prefix_hidden_states", 1), D = g.cfg.hidden_size;
  std::vector<float> all;
  for (int64_t b = 0; b < B; ++b) {
    const float* prefix = g.f32("prefix_hidden_states").data() + b * P * D;
    const float* fresh = g.f32("hidden_states").data() + b * T * D;
    all.insert(all.end(), prefix, prefix + P * D);
    all.insert(all.end(), fresh, fresh + T * D);
  }
  reference::Inputs in{.hidden = all, .batch = B, .tokens = P + T};
  const reference::Result r = reference::forward(g.cfg, g.weights, in);
  expect_close("present_key", g.f32("present_key"), r.k);
  expect_close("present_value", g.f32("present_value"), r.v);
  // output [B, P+T, D] viewed as [B, 1, P+T, D]: its last T tokens.
  expect_close("output", g.f32("output"), seq_slice(r.output, B, 1, P + T, D, P, T));
}

TEST_CASE("golden inputs are rejected when sizes are wrong") {
  Golden g("g1_gqa_qwen3next_partial");
  reference::Inputs in{.hidden = g.f32("hidden_states"), .batch = 2};
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

  // Interleaved: pair (0, 1) turns by pos rad, pair (2, 3) by pos·100^(−1/2).
  const std::vector<float> f = {1, 0, 1, 0};
  const std::vector<double> ri =
      reference::rope(f, 1, 1, 1, 4, 4, 100.0, 3, RopeStyle::interleaved);
  CHECK(ri[0] == doctest::Approx(std::cos(3.0)).epsilon(1e-15));
  CHECK(ri[1] == doctest::Approx(std::sin(3.0)).epsilon(1e-15));
  CHECK(ri[2] == doctest::Approx(std::cos(0.3)).epsilon(1e-15));
  CHECK(ri[3] == doctest::Approx(std::sin(0.3)).epsilon(1e-15));
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
  const double y0 = y[0], g0 = g[0], sig = 1 / (1 + std::exp(-g0));
  CHECK(head[0] == doctest::Approx(y0 * sig).epsilon(1e-15));
  CHECK_THROWS_AS(reference::gate(y, g, rows, H, Dh, 2), Error);

  auto first = [&](GateActivation act, GateCombine combine) {
    return reference::gate(y, g, rows, H, Dh, 1, act, combine)[0];
  };
  CHECK(first(GateActivation::silu, GateCombine::add) ==
        doctest::Approx(y0 + g0 * sig).epsilon(1e-15));
  CHECK(first(GateActivation::ns_sigmoid, GateCombine::multiply) ==
        doctest::Approx(y0 * (0.5 + 0.5 * sig)).epsilon(1e-15));
  CHECK(first(GateActivation::identity, GateCombine::multiply) ==
        doctest::Approx(y0 * g0).epsilon(1e-15));
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

// ---- the block's gate positions, activations, combines, RoPE styles and GQA mappings ----
//
// Each property relates two blocks whose weights differ by a transformation
// the semantics fix the effect of, so the semantics are pinned down without
// being restated.

namespace {

using Tensors = std::map<std::string, std::vector<float>>;

constexpr int64_t kB = 2, kT = 5;
constexpr GatePosition kPositions[] = {GatePosition::sdpa, GatePosition::value, GatePosition::key,
                                       GatePosition::query, GatePosition::dense};
constexpr GateActivation kActivations[] = {GateActivation::sigmoid, GateActivation::silu,
                                           GateActivation::ns_sigmoid, GateActivation::identity};

// D 40, H 4 over KV 2 heads of 8, plain norms, gate rows in gate_proj.
BlockConfig tiny_config() {
  BlockConfig c;
  c.hidden_size = 40;
  c.num_heads = 4;
  c.num_kv_heads = 2;
  c.head_dim = 8;
  c.norm_kind = NormKind::plain;
  c.gate_layout = GateLayout::separate;
  return c;
}

Tensors random_tensors(const BlockConfig& cfg, unsigned seed) {
  std::mt19937 rng(seed);
  return test::RandomWeights(cfg, rng).data;
}

std::vector<float> block_input(const BlockConfig& cfg, unsigned seed) {
  return random_floats(size_t(kB * kT * cfg.hidden_size), seed);
}

reference::Result run(const BlockConfig& cfg, const Tensors& w, const reference::Inputs& in) {
  WeightMap view;
  for (const auto& [name, v] : w) view[name] = v;
  return reference::forward(cfg, view, in);
}

// kB sequences of x's tokens, no cache.
reference::Result run(const BlockConfig& cfg, const Tensors& w, std::span<const float> x) {
  reference::Inputs in{.hidden = x, .batch = kB, .tokens = int64_t(x.size()) / (kB * cfg.hidden_size)};
  return run(cfg, w, in);
}

// `blocks` blocks of `width`: entry i of block b comes from entry within[i] of
// block outer[b] (an empty map is the identity).
std::vector<int64_t> blockwise(int64_t blocks, int64_t width, const std::vector<int64_t>& outer,
                               const std::vector<int64_t>& within) {
  std::vector<int64_t> src;
  for (int64_t b = 0; b < blocks; ++b)
    for (int64_t i = 0; i < width; ++i)
      src.push_back((outer.empty() ? b : outer[size_t(b)]) * width +
                    (within.empty() ? i : within[size_t(i)]));
  return src;
}

// w [rows, cols] with row r taken from row_src[r] and column c from col_src[c] (empty: identity).
template <class T>
std::vector<T> permuted(const std::vector<T>& w, int64_t rows, int64_t cols,
                        const std::vector<int64_t>& row_src, const std::vector<int64_t>& col_src) {
  std::vector<T> out(w.size());
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c)
      out[size_t(r * cols + c)] = w[size_t((row_src.empty() ? r : row_src[size_t(r)]) * cols +
                                           (col_src.empty() ? c : col_src[size_t(c)]))];
  return out;
}

// The activations, written out again.
double activated(double z, GateActivation activation) {
  const double sig = 1 / (1 + std::exp(-z));
  switch (activation) {
    case GateActivation::sigmoid: return sig;
    case GateActivation::silu: return z * sig;
    case GateActivation::ns_sigmoid: return 0.5 + 0.5 * sig;
    case GateActivation::identity: return z;
  }
  return std::nan("");
}

// With gate_proj.weight zero, every token's logits are gate_proj.bias, so the
// scores are constants; the ungated block equals cfg's once those scores (their
// head mean, if shared) are folded into the weights around the gated tensor.
Tensors fold_constant_gate(const BlockConfig& cfg, Tensors w) {
  const int64_t heads = cfg.gate_heads(), gw = cfg.gate_width(), Dh = cfg.head_dim;
  const std::vector<float>& logits = w.at("gate_proj.bias");
  auto score = [&](int64_t head, int64_t channel) {  // the score that meets (head, channel)
    const int64_t j = gw == 1 ? 0 : channel;
    auto of_head = [&](int64_t n) {
      return activated(logits[size_t(n * gw + j)], cfg.gate_activation);
    };
    if (!cfg.gate_shared_heads) return of_head(head);
    double sum = 0;
    for (int64_t n = 0; n < heads; ++n) sum += of_head(n);
    return sum / double(heads);
  };
  const bool multiply = cfg.gate_combine == GateCombine::multiply;
  std::vector<float>& o = w["o_proj.weight"];
  std::vector<float>& o_bias = w["o_proj.bias"];
  if (cfg.gate_position == GatePosition::sdpa) {
    // o_proj·(y∘s) scales o_proj's columns; o_proj·(y + s) adds o_proj·s to its bias.
    const int64_t cols = cfg.attn_dim();
    for (int64_t i = 0; i < cfg.hidden_size; ++i) {
      double added = 0;
      for (int64_t c = 0; c < cols; ++c) {
        float& oic = o[size_t(i * cols + c)];
        const double s = score(c / Dh, c % Dh);
        if (multiply) oic = float(oic * s);
        else added += oic * s;
      }
      o_bias[size_t(i)] = float(o_bias[size_t(i)] + added);
    }
    return w;
  }
  // Elsewhere the gate meets a projection's output rows: scale them or add to their bias.
  const char* proj = cfg.gate_position == GatePosition::query ? "q_proj"
                     : cfg.gate_position == GatePosition::key ? "k_proj"
                     : cfg.gate_position == GatePosition::value ? "v_proj"
                                                                 : "o_proj";
  const int64_t width = cfg.gate_position == GatePosition::dense ? cfg.hidden_size : Dh;
  std::vector<float>& weight = w[std::string(proj) + ".weight"];
  std::vector<float>& bias = w[std::string(proj) + ".bias"];
  const int64_t in = int64_t(weight.size()) / (heads * width);
  for (int64_t row = 0; row < heads * width; ++row) {
    const double s = score(row / width, row % width);
    if (multiply) {
      for (int64_t c = 0; c < in; ++c) {
        float& wrc = weight[size_t(row * in + c)];
        wrc = float(wrc * s);
      }
      bias[size_t(row)] = float(bias[size_t(row)] * s);
    } else {
      bias[size_t(row)] = float(bias[size_t(row)] + s);
    }
  }
  return w;
}

// The tensor a gate at `position` acts on, as forward() reports it.
const std::vector<double>& gated_tensor(const reference::Result& r, GatePosition position) {
  switch (position) {
    case GatePosition::query: return r.q;
    case GatePosition::key: return r.k;
    case GatePosition::value: return r.v;
    case GatePosition::dense: return r.output;
    case GatePosition::sdpa: break;
  }
  return r.gated;
}

std::vector<float> to_floats(const std::vector<double>& x) { return {x.begin(), x.end()}; }

}  // namespace

TEST_CASE("reference block: interleaved RoPE is rotate-half RoPE with each head's q/k dims permuted") {
  for (const double factor : {1.0, 0.5}) {
    CAPTURE(factor);
    BlockConfig inter = tiny_config();
    inter.partial_rotary_factor = factor;
    inter.rope_style = RopeStyle::interleaved;
    inter.qkv_bias = true;
    const Tensors w = random_tensors(inter, 11);
    const int64_t D = inter.hidden_size, H = inter.num_heads, KV = inter.num_kv_heads;
    const int64_t Dh = inter.head_dim, half = inter.rotary_dim() / 2;
    // Rotate-half dims (i, i + rd/2) take the interleaved pair (2i, 2i + 1); the rest stay.
    std::vector<int64_t> dims(static_cast<size_t>(Dh));
    std::iota(dims.begin(), dims.end(), 0);
    for (int64_t i = 0; i < half; ++i) {
      dims[size_t(i)] = 2 * i;
      dims[size_t(i + half)] = 2 * i + 1;
    }
    BlockConfig halves = inter;
    halves.rope_style = RopeStyle::rotate_half;
    Tensors wh = w;
    for (const auto& [p, heads] : {std::pair<std::string, int64_t>{"q", H}, {"k", KV}}) {
      const std::vector<int64_t> rows = blockwise(heads, Dh, {}, dims);
      wh[p + "_proj.weight"] = permuted(w.at(p + "_proj.weight"), heads * Dh, D, rows, {});
      wh[p + "_proj.bias"] = permuted(w.at(p + "_proj.bias"), heads * Dh, 1, rows, {});
      wh[p + "_norm.weight"] = permuted(w.at(p + "_norm.weight"), Dh, 1, dims, {});
    }
    const std::vector<float> x = block_input(inter, 12);
    const reference::Result a = run(inter, w, x), b = run(halves, wh, x);
    CHECK(max_abs_diff(b.output, a.output) <= 1e-12);
    CHECK(max_abs_diff(b.q, permuted(a.q, kB * H * kT, Dh, {}, dims)) <= 1e-12);
    CHECK(max_abs_diff(b.k, permuted(a.k, kB * KV * kT, Dh, {}, dims)) <= 1e-12);
    CHECK(max_abs_diff(run(halves, w, x).output, a.output) > 1e-3);  // the style matters
  }
}

TEST_CASE("reference block: tiled GQA is grouped GQA with the query heads permuted") {
  BlockConfig tiled = tiny_config();
  tiled.gqa_mapping = GqaMapping::tiled;
  tiled.gate_layout = GateLayout::qwen3_next;  // each head's gate rows follow its query rows
  tiled.qkv_bias = true;
  const Tensors w = random_tensors(tiled, 21);
  const int64_t D = tiled.hidden_size, H = tiled.num_heads, KV = tiled.num_kv_heads;
  const int64_t Dh = tiled.head_dim, G = tiled.group_size(), q_rows = Dh + tiled.gate_width();
  // Grouped head h reads KV head h / G, as tiled head sigma[h] does.
  std::vector<int64_t> sigma;
  for (int64_t h = 0; h < H; ++h) sigma.push_back((h % G) * KV + h / G);
  BlockConfig grouped = tiled;
  grouped.gqa_mapping = GqaMapping::grouped;
  Tensors wg = w;
  const std::vector<int64_t> rows = blockwise(H, q_rows, sigma, {});
  wg["q_proj.weight"] = permuted(w.at("q_proj.weight"), H * q_rows, D, rows, {});
  wg["q_proj.bias"] = permuted(w.at("q_proj.bias"), H * q_rows, 1, rows, {});
  wg["o_proj.weight"] = permuted(w.at("o_proj.weight"), D, H * Dh, {}, blockwise(H, Dh, sigma, {}));
  const std::vector<float> x = block_input(tiled, 22);
  const reference::Result a = run(tiled, w, x), b = run(grouped, wg, x);
  CHECK(max_abs_diff(b.output, a.output) <= 1e-12);
  CHECK(max_abs_diff(b.first_token_attn, permuted(a.first_token_attn, H, 1, sigma, {})) <= 1e-15);
  CHECK(max_abs_diff(run(grouped, w, x).output, a.output) > 1e-3);  // the mapping matters
}

TEST_CASE("reference block: zero identity gate logits: multiply zeroes the gated tensor, add is a no-op") {
  for (const GatePosition position : kPositions) {
    for (const GateKind kind : {GateKind::headwise, GateKind::elementwise}) {
      if (position == GatePosition::dense && kind == GateKind::headwise) continue;
      INFO(to_string(position) << " " << to_string(kind));
      BlockConfig cfg = tiny_config();
      cfg.gate_position = position;
      cfg.gate_kind = kind;
      cfg.gate_activation = GateActivation::identity;
      Tensors w = random_tensors(cfg, 31);
      std::vector<float>& gate_w = w.at("gate_proj.weight");
      std::fill(gate_w.begin(), gate_w.end(), 0.0f);
      BlockConfig ungated = cfg;
      ungated.gate_kind = GateKind::none;
      const std::vector<float> x = block_input(cfg, 32);
      const reference::Result base = run(ungated, w, x);

      cfg.gate_combine = GateCombine::add;
      const reference::Result added = run(cfg, w, x);
      CHECK(added.output == base.output);
      CHECK(added.k == base.k);
      CHECK(added.v == base.v);
      CHECK(added.gate == std::vector<double>(size_t(kB * kT * cfg.gate_rows()), 0.0));

      cfg.gate_combine = GateCombine::multiply;
      const reference::Result multiplied = run(cfg, w, x);
      const std::vector<double>& y = gated_tensor(multiplied, position);
      CHECK(y == std::vector<double>(y.size(), 0.0));
    }
  }
}

TEST_CASE("reference block: q_norm and k_norm cancel a headwise multiply gate on the query or key") {
  for (const GatePosition position : {GatePosition::query, GatePosition::key}) {
    INFO(to_string(position));
    BlockConfig cfg = tiny_config();
    cfg.gate_position = position;
    cfg.gate_kind = GateKind::headwise;
    const Tensors w = random_tensors(cfg, 41);
    BlockConfig ungated = cfg;
    ungated.gate_kind = GateKind::none;
    const std::vector<float> x = block_input(cfg, 42);
    // Only eps keeps it from exact: RMSNorm(s·y) = y / sqrt(mean(y²) + eps/s²).
    CHECK(nmse(run(cfg, w, x).output, run(ungated, w, x).output) < 1e-6);
    cfg.use_qk_norm = ungated.use_qk_norm = false;  // now the scale reaches the scores
    CHECK(nmse(run(cfg, w, x).output, run(ungated, w, x).output) > 1e-4);
  }
}

TEST_CASE("reference block: a constant gate folds into the weights (activations, combines, shared heads)") {
  for (const GatePosition position : kPositions) {
    for (const GateKind kind : {GateKind::headwise, GateKind::elementwise}) {
      for (const bool shared : {false, true}) {
        if (position == GatePosition::dense && (kind == GateKind::headwise || shared)) continue;
        for (const GateActivation activation : kActivations) {
          for (const GateCombine combine : {GateCombine::multiply, GateCombine::add}) {
            INFO(to_string(position) << " " << to_string(kind) << (shared ? " shared " : " ")
                                     << to_string(activation) << " " << to_string(combine));
            BlockConfig cfg = tiny_config();
            cfg.gate_position = position;
            cfg.gate_kind = kind;
            cfg.gate_shared_heads = shared;
            cfg.gate_activation = activation;
            cfg.gate_combine = combine;
            cfg.qkv_bias = cfg.o_bias = cfg.residual = true;
            Tensors w = random_tensors(cfg, 51);
            std::vector<float>& gate_w = w.at("gate_proj.weight");
            std::fill(gate_w.begin(), gate_w.end(), 0.0f);
            const std::vector<float> logits = random_floats(size_t(cfg.gate_rows()), 52, -3, 3);
            w.at("gate_proj.bias") = logits;
            BlockConfig ungated = cfg;
            ungated.gate_kind = GateKind::none;
            const std::vector<float> x = block_input(cfg, 53);
            const reference::Result r = run(cfg, w, x);
            const reference::Result want = run(ungated, fold_constant_gate(cfg, w), x);
            CHECK(nmse(r.output, want.output) < 1e-12);
            CHECK(nmse(r.k, want.k) < 1e-12);
            CHECK(nmse(r.v, want.v) < 1e-12);
            // Result::gate holds every token's scores before the head mean.
            std::vector<double> scores;
            for (int64_t row = 0; row < kB * kT; ++row)
              for (const float z : logits) scores.push_back(activated(z, activation));
            CHECK(max_abs_diff(r.gate, scores) <= 1e-15);
          }
        }
      }
    }
  }
}

TEST_CASE("reference block: prefill then cached decode equals the whole sequence, at every gate position") {
  for (const GatePosition position : kPositions) {
    INFO(to_string(position));
    BlockConfig cfg = tiny_config();
    cfg.num_kv_heads = 1;
    cfg.gate_position = position;
    cfg.gate_shared_heads = position != GatePosition::dense;
    cfg.rope_style = RopeStyle::interleaved;
    cfg.partial_rotary_factor = 0.5;
    const Tensors w = random_tensors(cfg, 61);
    const std::vector<float> x = block_input(cfg, 62);
    const int64_t D = cfg.hidden_size, P = 3, T = kT - P;
    const reference::Result whole = run(cfg, w, x);
    const reference::Result prefill = run(cfg, w, seq_slice(x, kB, 1, kT, D, 0, P));

    const std::vector<float> fresh = seq_slice(x, kB, 1, kT, D, P, T);
    const std::vector<float> past_key = to_floats(prefill.k), past_value = to_floats(prefill.v);
    reference::Inputs in{.hidden = fresh, .batch = kB, .tokens = T, .past = P, .past_key = past_key,
                         .past_value = past_value};
    const reference::Result step = run(cfg, w, in);
    CHECK(nmse(step.output, seq_slice(whole.output, kB, 1, kT, D, P, T)) < 1e-12);
    CHECK(nmse(step.k, whole.k) < 1e-12);
    CHECK(nmse(step.v, whole.v) < 1e-12);
  }
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

}  // namespace test_reference
