// The paper's whole design space on the device block against the CPU
// reference: gate positions G1–G5, headwise/elementwise, head-shared,
// multiplicative/additive, every activation; interleaved RoPE and tiled GQA;
// the value and key gates with a KV cache. The test names start with
// "block:" so that every kernel-switch suite (tests/CMakeLists.txt) runs them
// again on the other paths: fused flash kernels, a pass per op, split K,
// the emulated tensor-core kernels.
#include <cmath>
#include <numeric>
#include <string>

#include "block_weights.hpp"
#include "golden.hpp"
#include "harness.hpp"
#include "vkgate/block.hpp"
#include "vkgate/error.hpp"

namespace test_gate_variants {

using namespace vkgate;

namespace {

// 48 wide, heads of 16, half rotary, q/k norm: small enough for every suite.
BlockConfig variant(GatePosition at, GateKind kind, int heads = 4, int kv_heads = 2) {
  BlockConfig c;
  c.hidden_size = 48;
  c.num_heads = heads;
  c.num_kv_heads = kv_heads;
  c.head_dim = 16;
  c.partial_rotary_factor = 0.5;
  c.gate_position = at;
  c.gate_kind = kind;
  c.gate_layout = GateLayout::separate;
  c.norm_kind = NormKind::plain;
  return c;
}

std::string describe(const BlockConfig& c) {
  return std::string(to_string(c.gate_position)) + " " + to_string(c.gate_kind) +
         (c.gate_shared_heads ? " shared" : "") + " " + to_string(c.gate_combine) + " " +
         to_string(c.gate_activation) + " H" + std::to_string(c.num_heads) + "/KV" + std::to_string(c.num_kv_heads) +
         " " + to_string(c.rope_style) + " " + to_string(c.gqa_mapping);
}

double mean(const std::vector<double>& v) { return std::accumulate(v.begin(), v.end(), 0.0) / double(v.size()); }

// One forward with statistics, against the reference's output and gate mean.
void check_variant(test::GpuTest& t, const BlockConfig& c, int batch, int tokens) {
  INFO(describe(c));
  test::RandomWeights w(c, t.rng);
  GatedAttention block(t.ctx, c, w.map);
  block.set_poison(true);
  const auto x = t.random(size_t(batch) * tokens * c.hidden_size);
  ForwardInputs in{.hidden = x, .batch = batch, .tokens = tokens, .want_stats = true};
  const auto out = block.run(in);
  const auto want = reference::forward(c, w.map, test::reference_inputs(in));
  test::check_close(out.output, want.output);
  REQUIRE(out.stats.has_value());
  if (c.gate_kind == GateKind::none) return;
  REQUIRE(want.gate.size() == size_t(batch) * tokens * size_t(c.gate_rows()));
  CHECK(out.stats->gate_mean == doctest::Approx(mean(want.gate)).epsilon(1e-5));
}

}  // namespace

TEST_CASE_FIXTURE(test::GpuTest, "block: gate positions G1–G5 × kind × shared heads × combine × activation") {
  using P = GatePosition;
  using K = GateKind;
  using A = GateActivation;
  struct Row {
    P at;
    K kind;
    bool shared;
    GateCombine combine;
    A act;
    int heads, kv_heads;
  };
  constexpr auto mul = GateCombine::multiply, add = GateCombine::add;
  // Every position × kind at least once, each combine and activation at
  // several positions, shared heads at sdpa, value, key and query, over MHA,
  // GQA and MQA.
  const Row rows[] = {
      {P::sdpa, K::elementwise, false, mul, A::sigmoid, 4, 2},     {P::sdpa, K::headwise, false, mul, A::sigmoid, 4, 4},
      {P::sdpa, K::headwise, true, mul, A::sigmoid, 4, 2},         {P::sdpa, K::elementwise, true, mul, A::ns_sigmoid, 4, 1},
      {P::sdpa, K::elementwise, false, add, A::silu, 4, 2},        {P::sdpa, K::elementwise, false, mul, A::silu, 4, 2},
      {P::value, K::elementwise, false, mul, A::sigmoid, 4, 2},    {P::value, K::headwise, false, mul, A::sigmoid, 4, 1},
      {P::value, K::headwise, true, mul, A::sigmoid, 4, 4},        {P::value, K::elementwise, true, add, A::identity, 4, 2},
      {P::key, K::elementwise, false, mul, A::sigmoid, 4, 2},      {P::key, K::headwise, false, add, A::silu, 4, 4},
      {P::key, K::elementwise, true, mul, A::ns_sigmoid, 4, 2},    {P::query, K::elementwise, false, mul, A::sigmoid, 4, 2},
      {P::query, K::headwise, false, add, A::identity, 4, 1},      {P::query, K::elementwise, true, mul, A::silu, 4, 4},
      {P::dense, K::elementwise, false, mul, A::sigmoid, 4, 2},    {P::dense, K::elementwise, false, add, A::ns_sigmoid, 4, 1},
      {P::dense, K::elementwise, false, mul, A::identity, 4, 4},   {P::sdpa, K::none, false, mul, A::sigmoid, 4, 2},
  };
  for (const Row& r : rows) {
    BlockConfig c = variant(r.at, r.kind, r.heads, r.kv_heads);
    c.gate_shared_heads = r.shared;
    c.gate_combine = r.combine;
    c.gate_activation = r.act;
    check_variant(*this, c, 2, 5);
  }
}

TEST_CASE_FIXTURE(test::GpuTest, "block: gate positions with biases, residual, no q/k norm, T = 1") {
  for (GatePosition at : {GatePosition::value, GatePosition::key, GatePosition::query, GatePosition::dense}) {
    BlockConfig c = variant(at, GateKind::elementwise);
    c.qkv_bias = c.o_bias = true;  // gate_proj.bias too
    c.residual = true;
    c.use_qk_norm = at == GatePosition::dense;
    check_variant(*this, c, 2, 3);
    check_variant(*this, c, 1, 1);
  }
}

TEST_CASE_FIXTURE(test::GpuTest, "block: interleaved RoPE with full and partial rotary, tiled GQA") {
  for (double rotary : {1.0, 0.5})
    for (GqaMapping gqa : {GqaMapping::grouped, GqaMapping::tiled}) {
      BlockConfig c = variant(GatePosition::sdpa, GateKind::elementwise, 6, 2);
      c.gate_layout = GateLayout::qwen3_next;
      c.partial_rotary_factor = rotary;
      c.rope_style = RopeStyle::interleaved;
      c.gqa_mapping = gqa;
      check_variant(*this, c, 2, 6);
      check_variant(*this, c, 1, 1);
    }
  // Tiled GQA with a head-shared value gate and the rotate-half pairs.
  BlockConfig c = variant(GatePosition::value, GateKind::headwise, 8, 2);
  c.gqa_mapping = GqaMapping::tiled;
  c.gate_shared_heads = true;
  check_variant(*this, c, 2, 4);
}

// Prefill then decode steps against the full sequence: the caches hold gated
// values (G2) and gated, normed, rotated keys (G3), and a step gates only its
// own tokens. Both the explicit cache and the device-resident one.
TEST_CASE_FIXTURE(test::GpuTest, "block: value and key gates with a KV cache — steps equal the full sequence") {
  for (GatePosition at : {GatePosition::value, GatePosition::key, GatePosition::query})
    for (bool resident : {false, true}) {
      BlockConfig c = variant(at, at == GatePosition::key ? GateKind::headwise : GateKind::elementwise, 4, 2);
      c.rope_style = at == GatePosition::key ? RopeStyle::interleaved : RopeStyle::rotate_half;
      INFO(describe(c));
      CAPTURE(resident);
      test::RandomWeights w(c, rng);
      GatedAttention block(ctx, c, w.map);
      block.set_poison(true);
      const size_t B = 2, N = 8, D = 48, KV = 2, Dh = 16;
      if (resident) block.reserve_cache(int(B), int(N));
      const auto x = random(B * N * D);
      ForwardInputs whole{.hidden = x, .batch = int(B), .tokens = int(N)};
      const auto full = reference::forward(c, w.map, test::reference_inputs(whole));
      std::vector<float> key, value;
      size_t past = 0;
      for (size_t step : {5, 1, 2}) {
        CAPTURE(past);
        std::vector<float> xs;
        std::vector<double> want;
        for (size_t b = 0; b < B; ++b) {
          xs.insert(xs.end(), x.begin() + long((b * N + past) * D), x.begin() + long((b * N + past + step) * D));
          want.insert(want.end(), full.output.begin() + long((b * N + past) * D),
                      full.output.begin() + long((b * N + past + step) * D));
        }
        ForwardInputs in{.hidden = xs, .batch = int(B), .tokens = int(step)};
        if (resident) {
          in.use_device_cache = true;
        } else {
          in.past = int(past);
          in.past_key = key;
          in.past_value = value;
          in.want_cache = true;
        }
        auto out = block.run(in);
        test::check_close(out.output, want);
        past += step;
        if (resident) continue;
        REQUIRE(out.present_key.size() == B * KV * past * Dh);
        key = std::move(out.present_key);
        value = std::move(out.present_value);
      }
      if (resident) continue;
      test::check_close(key, full.k);
      test::check_close(value, full.v);
    }
}

TEST_CASE_FIXTURE(test::GpuTest, "block: golden w2, a G2 value gate decoding 2 tokens after a 6-token cache") {
  test::Golden g("wave2/w2_value_gate_gqa_cache");
  CHECK(g.cfg.gate_position == GatePosition::value);
  GatedAttention block(ctx, g.cfg, g.weights);
  block.set_poison(true);
  ForwardInputs in{.hidden = g.f32("hidden_states"), .batch = int(g.dim("hidden_states", 0)),
                   .tokens = int(g.dim("hidden_states", 1)), .past = int(g.dim("past_key", 2)),
                   .past_key = g.f32("past_key"), .past_value = g.f32("past_value"), .want_cache = true,
                   .want_stats = true};
  const auto out = block.run(in);
  auto wide = [&](const char* name) {
    const auto& v = g.f32(name);
    return std::vector<double>(v.begin(), v.end());
  };
  test::check_close(out.output, wide("output"));
  test::check_close(out.present_key, wide("present_key"));
  test::check_close(out.present_value, wide("present_value"));
  CHECK(out.stats->gate_mean == doctest::Approx(g.f32("stats.gate_mean").at(0)).epsilon(1e-5));
}

TEST_CASE_FIXTURE(test::GpuTest, "block: gate variants in fp16 and bf16 storage (DESIGN.md §4 bounds)") {
  if (!ctx.device().storage16) {
    MESSAGE("skipped: the device has no 16-bit storage buffers");
    return;
  }
  for (Precision prec : {Precision::fp16, Precision::bf16})
    for (GatePosition at : {GatePosition::value, GatePosition::query, GatePosition::dense}) {
      INFO("prec = " << std::string(to_string(prec)));
      BlockConfig c = variant(at, GateKind::elementwise);
      c.gate_activation = at == GatePosition::dense ? GateActivation::ns_sigmoid : GateActivation::sigmoid;
      c.residual = true;
      INFO(describe(c));
      const test::StoredWeights w(c, rng, prec);
      GatedAttention block(ctx, c, w.tensors, BlockOptions{prec});
      block.set_poison(true);
      const int B = 2, T = 3, P = 2;
      const auto x = random(size_t(B) * T * 48), pk = random(size_t(B) * 2 * P * 16),
                 pv = random(size_t(B) * 2 * P * 16);
      ForwardInputs in{.hidden = x, .batch = B, .tokens = T, .past = P, .past_key = pk, .past_value = pv};
      test::check_close(block.run(in).output, reference::forward(c, w.rounded_map, test::reference_inputs(in)).output,
                        prec == Precision::fp16 ? 1e-5 : 1e-4);
    }
}

TEST_CASE("config: bad gate combinations and values are errors naming the key, before any device") {
  auto parse = [](const std::string& extra) {
    return parse_config_json(R"({"hidden_size": 48, "num_attention_heads": 4, "num_key_value_heads": 2,
                                  "head_dim": 16, "gate_kind": "elementwise")" + extra + "}",
                             "cfg.json");
  };
  const auto c = parse(R"(, "gate_position": "value", "gate_layout": "separate", "gate_shared_heads": true,
                          "gate_combine": "add", "gate_activation": "ns_sigmoid", "rope_style": "interleaved",
                          "gqa_mapping": "tiled")");
  CHECK(c.gate_position == GatePosition::value);
  CHECK(c.gate_shared_heads);
  CHECK(c.gate_combine == GateCombine::add);
  CHECK(c.gate_activation == GateActivation::ns_sigmoid);
  CHECK(c.rope_style == RopeStyle::interleaved);
  CHECK(c.gqa_mapping == GqaMapping::tiled);
  CHECK(c.gate_rows() == 2 * 16);
  const std::pair<const char*, const char*> bad[] = {
      {R"(, "gate_position": "dense", "gate_layout": "separate", "gate_kind": "headwise")", "gate_kind"},
      {R"(, "gate_position": "value", "gate_layout": "official_grouped")", "gate_layout"},
      {R"(, "gate_position": "key")", "gate_layout"},  // qwen3_next, the default layout
      {R"(, "gate_position": "dense", "gate_layout": "separate", "gate_shared_heads": true)", "gate_shared_heads"},
      {R"(, "gate_position": "values")", "gate_position"},
      {R"(, "gate_combine": "sum")", "gate_combine"},
      {R"(, "gate_activation": "tanh")", "gate_activation"},
      {R"(, "gate_shared_heads": "yes")", "gate_shared_heads"},
      {R"(, "rope_style": "neox")", "rope_style"},
      {R"(, "gqa_mapping": "interleaved")", "gqa_mapping"},
  };
  for (const auto& [text, key] : bad) {
    CAPTURE(text);
    CHECK_THROWS_WITH_AS(parse(text), doctest::Contains(key), Error);
  }
}

TEST_CASE_FIXTURE(test::GpuTest, "block: a gate_proj of the wrong shape is an error naming the tensor") {
  for (GatePosition at : {GatePosition::value, GatePosition::dense}) {
    const BlockConfig c = variant(at, GateKind::elementwise);
    test::RandomWeights w(c, rng);
    // The sdpa position's shape, [H·Dh, D], where this position wants another.
    std::vector<float> wrong(size_t(c.num_heads + 1) * c.head_dim * c.hidden_size);
    w.map["gate_proj.weight"] = wrong;
    CHECK_THROWS_WITH_AS(GatedAttention(ctx, c, w.map), doctest::Contains("gate_proj.weight"), Error);
    w.map.erase("gate_proj.weight");
    CHECK_THROWS_WITH_AS(GatedAttention(ctx, c, w.map), doctest::Contains("gate_proj.weight"), Error);
  }
}

}  // namespace test_gate_variants
