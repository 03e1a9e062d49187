// Input values (issue 5, item 5): NaN and Inf in inputs, weights or a cache
// are refused by name and index (BlockOptions::check_finite, on by default)
// instead of propagating into the output; without the check they do
// propagate (which is why it is on). Extreme but finite inputs — rows of
// 1e-30, rows near the fp32 RMSNorm limit, fully masked rows — give finite
// outputs that match the double-precision reference; rows whose squares
// overflow fp32 are refused with a clear error rather than answered wrongly.
#include <cmath>
#include <limits>

#include "block_weights.hpp"
#include "harness.hpp"
#include "vkgate/block.hpp"
#include "vkgate/dtype.hpp"
#include "vkgate/error.hpp"

namespace test_values {

using namespace vkgate;

namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

std::vector<double> reference_output(const BlockConfig& c, const WeightMap& w, const ForwardInputs& in) {
  return reference::forward(c, w, test::reference_inputs(in)).output;
}

}  // namespace

TEST_CASE_FIXTURE(test::GpuTest, "values: NaN and Inf in hidden_states, the cache and the mask are refused by name and index") {
  const BlockConfig c = test::small_config();
  test::RandomWeights w(c, rng);
  GatedAttention block(ctx, c, w.map);
  const int B = 2, T = 3, P = 2, D = 64, KV = 2, Dh = 16;
  auto x = random(size_t(B) * T * D);
  auto pk = random(size_t(B) * KV * P * Dh), pv = random(size_t(B) * KV * P * Dh);
  auto mask = random(size_t(B) * T * (P + T));
  ForwardInputs in{.batch = B, .tokens = T, .past = P, .past_key = pk, .past_value = pv, .attention_mask = mask};

  auto refused = [&](const std::vector<float>& xs, const char* what) {
    in.hidden = xs;
    try {
      block.run(in);
      FAIL("accepted " << what);
    } catch (const Error& e) {
      CHECK(e.code() == ErrorCode::non_finite);
      return std::string(e.what());
    }
    return std::string();
  };
  SUBCASE("NaN in hidden_states names the tensor, the value and its index") {
    auto bad = x;
    bad[(1 * T + 2) * D + 5] = kNaN;
    const std::string msg = refused(bad, "NaN");
    CHECK(msg == "forward: hidden_states holds NaN at [1, 2, 5]");
  }
  SUBCASE("+Inf and -Inf in hidden_states") {
    auto bad = x;
    bad[7] = kInf;
    CHECK(refused(bad, "+Inf") == "forward: hidden_states holds +Inf at [0, 0, 7]");
    bad[7] = -kInf;
    CHECK(refused(bad, "-Inf") == "forward: hidden_states holds -Inf at [0, 0, 7]");
  }
  SUBCASE("NaN in past_value") {
    pv[(1 * KV + 1) * P * Dh + 1 * Dh + 3] = kNaN;
    CHECK(refused(x, "NaN in the cache") == "forward: past_value holds NaN at [1, 1, 1, 3]");
  }
  SUBCASE("the mask may hold -Inf but not NaN or +Inf") {
    mask[4] = -kInf;
    in.hidden = x;
    CHECK_NOTHROW(block.run(in));
    mask[6] = kInf;
    CHECK_THROWS_WITH_AS(block.run(in), doctest::Contains("attention_mask holds +Inf at [0, 0, 1, 1]"), Error);
    mask[6] = kNaN;
    CHECK_THROWS_WITH_AS(block.run(in), doctest::Contains("attention_mask holds NaN"), Error);
  }
  SUBCASE("a refused forward leaves the block usable") {
    auto bad = x;
    bad[0] = kNaN;
    refused(bad, "NaN");
    in.hidden = x;
    test::check_close(block.run(in).output, reference_output(c, w.map, in));
  }
}

TEST_CASE_FIXTURE(test::GpuTest, "values: NaN or Inf in a weight is refused at construction, naming the weight") {
  const BlockConfig c = test::small_config();
  test::RandomWeights w(c, rng);
  w.data["k_proj.weight"][17] = kNaN;
  w.map["k_proj.weight"] = w.data["k_proj.weight"];
  try {
    GatedAttention block(ctx, c, w.map);
    FAIL("a NaN weight was accepted");
  } catch (const Error& e) {
    CHECK(e.code() == ErrorCode::non_finite);
    CHECK(std::string(e.what()) == "weight 'k_proj.weight' holds NaN at [0, 17]");
  }
  // Stored bf16 weights are checked by bit pattern.
  std::vector<uint16_t> bf(size_t(c.hidden_size), float_to_bf16(1.0f));
  bf[3] = 0x7f80;  // +Inf
  TensorMap tensors = as_tensors(w.map);
  tensors["input_layernorm.weight"] = HostTensor{DType::BF16, {c.hidden_size}, std::as_bytes(std::span(bf))};
  w.data["k_proj.weight"][17] = 0.0f;
  CHECK_THROWS_WITH_AS(GatedAttention(ctx, c, tensors), "weight 'input_layernorm.weight' holds +Inf at [3]", Error);
}

TEST_CASE_FIXTURE(test::GpuTest, "values: with check_finite off, NaN propagates (why the check is on by default)") {
  const BlockConfig c = test::small_config();
  test::RandomWeights w(c, rng);
  BlockOptions opts;
  opts.check_finite = false;
  GatedAttention block(ctx, c, w.map, opts);
  auto x = random(2 * 64);
  x[64 + 3] = kNaN;  // token 1
  const auto y = block.forward(x, 1, 2);
  CHECK(std::isnan(y[64 + 3]));
}

TEST_CASE_FIXTURE(test::GpuTest, "values: fp16 storage refuses finite values beyond its range instead of storing Inf") {
  if (!ctx.device().storage16) {
    MESSAGE("skipped: the device has no 16-bit storage buffers");
    return;
  }
  const BlockConfig c = test::small_config();
  test::RandomWeights w(c, rng);
  w.data["o_proj.weight"][5] = 1e5f;
  w.map["o_proj.weight"] = w.data["o_proj.weight"];
  CHECK_THROWS_WITH_AS(GatedAttention(ctx, c, w.map, BlockOptions{Precision::fp16}),
                       doctest::Contains("weight 'o_proj.weight' holds 100000 at [0, 5], beyond fp16's range"), Error);
  // bf16 has fp32's range: the same weight is fine there.
  if (ctx.device().storage16) CHECK_NOTHROW(GatedAttention(ctx, c, w.map, BlockOptions{Precision::bf16}));
}

TEST_CASE_FIXTURE(test::GpuTest, "values: rows of 1e-30, rows of 1e15 and fully masked rows give finite, correct outputs") {
  BlockConfig c = test::small_config();
  for (bool residual : {false, true}) {
    CAPTURE(residual);
    c.residual = residual;
    test::RandomWeights w(c, rng);
    GatedAttention block(ctx, c, w.map);
    block.set_poison(true);
    const int B = 2, T = 4, D = 64;
    auto x = random(size_t(B) * T * D);
    for (int d = 0; d < D; ++d) {
      x[size_t(0 * D + d)] *= 1e-30f;        // b 0, t 0: tiny (squares underflow fp32)
      x[size_t((1 * T + 2) * D + d)] *= 1e15f;  // b 1, t 2: huge, squares 1e30 still fit fp32
    }
    std::vector<float> mask(size_t(B) * T * T, 0.0f);
    for (int s = 0; s < T; ++s) mask[size_t((0 * T + 1) * T + s)] = -kInf;  // b 0, query 1: every key masked
    for (int s = 0; s < T; ++s) mask[size_t((1 * T + 3) * T + s)] = -1e30f;  // b 1, query 3: huge but finite
    ForwardInputs in{.hidden = x, .batch = B, .tokens = T, .attention_mask = mask};
    const auto y = block.run(in).output;
    const auto want = reference_output(c, w.map, in);
    test::check_close(y, want);
    // The fully masked query attends to nothing: its attention output is zero,
    // so without residual and biases its output row is exactly zero.
    if (!residual)
      for (int d = 0; d < D; ++d) CHECK(y[size_t(1 * D + d)] == 0.0f);
  }
}

TEST_CASE_FIXTURE(test::GpuTest, "values: a row whose squares overflow fp32 (1e30) is refused, not answered with zeros") {
  const BlockConfig c = test::small_config();
  test::RandomWeights w(c, rng);
  GatedAttention block(ctx, c, w.map);
  auto x = random(3 * 64);
  for (int d = 0; d < 64; ++d) x[size_t(64 + d)] = (d % 2 ? 1e30f : -1e30f);
  try {
    block.forward(x, 1, 3);
    FAIL("a 1e30 row was accepted");
  } catch (const Error& e) {
    CHECK(e.code() == ErrorCode::unsupported);
    CHECK(std::string(e.what()).find("forward: hidden_states row [0, 1] has a root mean square of 1e+30") == 0);
  }
  // Without the check the device computes RMSNorm from Inf and returns a finite but wrong row.
  BlockOptions off;
  off.check_finite = false;
  GatedAttention unchecked(ctx, c, w.map, off);
  const auto y = unchecked.forward(x, 1, 3);
  reference::Inputs r{.hidden = x, .batch = 1, .tokens = 3};
  const auto want = reference::forward(c, w.map, r).output;
  double row_err = 0;
  for (int d = 0; d < 64; ++d) row_err = std::max(row_err, std::abs(double(y[size_t(64 + d)]) - want[size_t(64 + d)]));
  MESSAGE("unchecked 1e30 row: max abs error " << row_err);
}

TEST_CASE_FIXTURE(test::GpuTest, "values: an output that overflows is refused although every input is finite") {
  // Constant inputs make every attention output 1, so o_proj's sums are
  // exactly 64 · 1e37 > FLT_MAX.
  BlockConfig c = test::small_config();
  c.gate_kind = GateKind::none;
  c.use_qk_norm = false;
  test::RandomWeights w(c, rng);
  std::fill(w.data["input_layernorm.weight"].begin(), w.data["input_layernorm.weight"].end(), 0.0f);  // (1 + 0)
  std::fill(w.data["v_proj.weight"].begin(), w.data["v_proj.weight"].end(), 1.0f / 64);
  std::fill(w.data["o_proj.weight"].begin(), w.data["o_proj.weight"].end(), 1e37f);
  for (auto& [name, v] : w.data) w.map[name] = v;
  GatedAttention block(ctx, c, w.map);
  try {
    block.forward(std::vector<float>(2 * 64, 1.0f), 1, 2);
    FAIL("an overflowing output was returned");
  } catch (const Error& e) {
    CHECK(e.code() == ErrorCode::non_finite);
    CHECK(std::string(e.what()).find("forward: the output holds +Inf at [0, 0, 0]") == 0);
    CHECK(std::string(e.what()).find("the inputs and weights are finite") != std::string::npos);
  }
}

}  // namespace test_values
