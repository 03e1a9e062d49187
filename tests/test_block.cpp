// The whole block against the CPU reference: MHA/GQA/MQA × no/headwise/
// elementwise gate × causal/bidirectional, plus the conventions of real checkpoints.
#include <cmath>
#include <limits>

#include "block_weights.hpp"
#include "harness.hpp"
#include "vkgate/block.hpp"
#include "vkgate/dtype.hpp"
#include "vkgate/error.hpp"
#include "golden.hpp"

namespace test_block {

using namespace vkgate;

namespace {

struct Heads {
  const char* name;
  int heads, kv_heads;
};

void run_block(test::GpuTest& t, const BlockConfig& cfg, int batch, int tokens) {
  test::RandomWeights w(cfg, t.rng);
  GatedAttention block(t.ctx, cfg, w.map);
  block.set_poison(true);
  const auto x = t.random(size_t(batch) * tokens * cfg.hidden_size);
  const auto got = block.forward(x, batch, tokens);
  reference::Inputs in{.hidden = x, .batch = batch, .tokens = tokens};
  test::check_close(got, reference::forward(cfg, w.map, in).output);
}

BlockConfig small(const Heads& h, GateKind gate, bool causal) {
  BlockConfig c;
  c.hidden_size = 96;
  c.num_heads = h.heads;
  c.num_kv_heads = h.kv_heads;
  c.head_dim = 32;
  c.gate_kind = gate;
  c.causal = causal;
  c.partial_rotary_factor = 0.5;
  c.rope_theta = 1e6;
  return c;
}

}  // namespace

TEST_CASE_FIXTURE(test::GpuTest, "block: MHA/GQA/MQA × none/headwise/elementwise × causal/bidirectional") {
  const Heads heads[] = {{"MHA", 4, 4}, {"GQA", 6, 2}, {"MQA", 4, 1}};
  for (const Heads& h : heads)
    for (GateKind gate : {GateKind::none, GateKind::headwise, GateKind::elementwise})
      for (bool causal : {true, false}) {
        CAPTURE(h.name);
        INFO("gate = " << std::string(to_string(gate)));
        CAPTURE(causal);
        run_block(*this, small(h, gate, causal), 2, 7);
      }
}

TEST_CASE_FIXTURE(test::GpuTest, "block: every gate layout, norm kind, biases, residual, batch 3, T = 1") {
  for (GateLayout layout : {GateLayout::qwen3_next, GateLayout::official_grouped, GateLayout::separate})
    for (GateKind gate : {GateKind::headwise, GateKind::elementwise}) {
      INFO("layout = " << std::string(to_string(layout)));
      INFO("gate = " << std::string(to_string(gate)));
      BlockConfig c = small({"GQA", 6, 2}, gate, true);
      c.gate_layout = layout;
      c.norm_kind = layout == GateLayout::qwen3_next ? NormKind::zero_centered : NormKind::plain;
      c.qkv_bias = c.o_bias = layout == GateLayout::official_grouped;
      c.use_qk_norm = layout != GateLayout::separate;
      c.residual = layout == GateLayout::separate;
      run_block(*this, c, 3, 5);
      run_block(*this, c, 1, 1);
    }
}

TEST_CASE_FIXTURE(test::GpuTest, "block: head_dim 64/80/128/256 with full and partial rotary") {
  for (int Dh : {64, 80, 128, 256}) {
    CAPTURE(Dh);
    BlockConfig c = small({"GQA", 4, 2}, GateKind::elementwise, true);
    c.head_dim = Dh;
    c.partial_rotary_factor = Dh == 80 ? 1.0 : 0.25;
    c.norm_kind = NormKind::zero_centered;
    run_block(*this, c, 1, 6);
  }
}

TEST_CASE_FIXTURE(test::GpuTest, "block: replaying a recorded shape gives identical results") {
  BlockConfig c = small({"GQA", 4, 2}, GateKind::elementwise, true);
  test::RandomWeights w(c, rng);
  GatedAttention block(ctx, c, w.map);
  const auto x1 = random(2 * 5 * 96), x2 = random(3 * 96);
  const auto a = block.forward(x1, 2, 5);
  const auto b = block.forward(x2, 1, 3);
  const auto a2 = block.forward(x1, 2, 5);
  CHECK(block.recorded_shapes() == 2);
  CHECK(std::memcmp(a.data(), a2.data(), a.size() * 4) == 0);
  reference::Inputs in{.hidden = x2, .batch = 1, .tokens = 3};
  test::check_close(b, reference::forward(c, w.map, in).output);
  CHECK(!block.last_timings().empty());
  // replay (what vkgate bench times) resubmits the last forward and leaves
  // the next one's results as they were.
  block.replay(2);
  CHECK(!block.last_timings().empty());
  const auto a3 = block.forward(x1, 2, 5);
  CHECK(std::memcmp(a.data(), a3.data(), a.size() * 4) == 0);
  GatedAttention fresh(ctx, c, w.map);
  CHECK_THROWS_WITH_AS(fresh.replay(1), doctest::Contains("no forward"), Error);
}

// Kernel choices are decided once: the VKGATE_* switches are read when a
// Context is made, and a block keeps the choices of its Context when it was
// made. A switch set later reaches neither an existing plan (set_poison
// records it again) nor a new one on that Context; a new Context takes it.
// Seen in the dispatch labels: the switch sends attention to the other kernel
// (GPUs fuse it by default, CPU drivers run it unfused).
TEST_CASE_FIXTURE(test::GpuTest, "block: a switch set later changes new Contexts' plans, never an existing plan's") {
  BlockConfig c = small({"GQA", 4, 2}, GateKind::elementwise, true);
  test::RandomWeights w(c, rng);
  const auto x = random(2 * 96);
  reference::Inputs in{.hidden = x, .tokens = 2};
  const auto want = reference::forward(c, w.map, in).output;
  auto fused = [](const GatedAttention& b) {
    bool flash = false;
    for (const StageTime& t : b.last_timings()) flash = flash || t.stage.starts_with("flash_attention");
    return flash;
  };
  GatedAttention block(ctx, c, w.map);
  test::check_close(block.forward(x, 1, 2), want);
  REQUIRE(!block.last_timings().empty());
  const bool was_fused = fused(block);
  // To the other kernel: fused off, or fused on and preferred (also on CPU drivers).
  test::ScopedEnv fused_switch("VKGATE_DISABLE_FUSED", was_fused ? "1" : "");
  test::ScopedEnv cpu_switch("VKGATE_DISABLE_CPU_ATTENTION", was_fused ? "" : "1");
  block.set_poison(true);  // re-records the plan
  test::check_close(block.forward(x, 1, 2), want);
  CHECK(fused(block) == was_fused);
  CHECK(block.recorded_shapes() == 1);
  GatedAttention same_context(ctx, c, w.map);
  same_context.forward(x, 1, 2);
  CHECK(fused(same_context) == was_fused);

  ContextOptions o;
  o.validation = true;
  o.timestamps = true;
  o.device = ctx.device().name;
  Context fresh(o);
  GatedAttention switched(fresh, c, w.map);
  test::check_close(switched.forward(x, 1, 2), want);
  CHECK(fused(switched) != was_fused);
  CHECK(fresh.validation_messages() == 0);
}

TEST_CASE_FIXTURE(test::GpuTest, "block: bad weights and shapes are clear errors") {
  BlockConfig c = small({"GQA", 4, 2}, GateKind::elementwise, true);
  test::RandomWeights w(c, rng);
  WeightMap missing = w.map;
  missing.erase("k_norm.weight");
  CHECK_THROWS_WITH_AS(GatedAttention(ctx, c, missing), doctest::Contains("k_norm.weight"), Error);
  WeightMap wrong = w.map;
  wrong["o_proj.weight"] = std::span<const float>(w.data["o_proj.weight"]).subspan(1);
  CHECK_THROWS_WITH_AS(GatedAttention(ctx, c, wrong), doctest::Contains("o_proj.weight"), Error);
  BlockConfig bad = c;
  bad.num_kv_heads = 3;
  CHECK_THROWS_WITH_AS(GatedAttention(ctx, bad, w.map), doctest::Contains("num_key_value_heads"), Error);
  GatedAttention block(ctx, c, w.map);
  CHECK_THROWS_AS(block.forward(random(96), 1, 2), Error);
  CHECK_THROWS_AS(block.forward({}, 1, 0), Error);
}

// Every config validate() refuses, built by hand as a library user would (no
// config file to catch it first): each is Error(invalid_config) naming the key,
// from every public entry that takes a config, before anything is derived from
// it. The layout is official_grouped, whose row layout divides by the KV heads.
TEST_CASE_FIXTURE(test::GpuTest, "block: every config validate() refuses is an Error at construction, never a signal") {
  BlockConfig base = small({"GQA", 4, 2}, GateKind::headwise, true);
  base.gate_layout = GateLayout::official_grouped;
  test::RandomWeights w(base, rng);
  const double nan = std::numeric_limits<double>::quiet_NaN();
  struct Bad {
    const char* key;
    void (*edit)(BlockConfig&, double);
  };
  const Bad cases[] = {
      {"hidden_size", [](BlockConfig& c, double) { c.hidden_size = 0; }},
      {"hidden_size", [](BlockConfig& c, double) { c.hidden_size = -96; }},
      {"num_attention_heads", [](BlockConfig& c, double) { c.num_heads = 0; }},
      {"num_key_value_heads", [](BlockConfig& c, double) { c.num_kv_heads = 0; }},
      {"num_key_value_heads", [](BlockConfig& c, double) { c.num_kv_heads = -2; }},
      {"num_attention_heads", [](BlockConfig& c, double) { c.num_kv_heads = 3; }},
      {"head_dim", [](BlockConfig& c, double) { c.head_dim = 0; }},
      {"head_dim", [](BlockConfig& c, double) { c.head_dim = 1025; }},
      {"rms_norm_eps", [](BlockConfig& c, double) { c.rms_norm_eps = 0; }},
      {"rms_norm_eps", [](BlockConfig& c, double n) { c.rms_norm_eps = n; }},
      {"rope_theta", [](BlockConfig& c, double) { c.rope_theta = -1; }},
      {"rope_theta", [](BlockConfig& c, double n) { c.rope_theta = n; }},
      {"partial_rotary_factor", [](BlockConfig& c, double) { c.partial_rotary_factor = 1.5; }},
      {"partial_rotary_factor", [](BlockConfig& c, double n) { c.partial_rotary_factor = n; }},
      {"partial_rotary_factor", [](BlockConfig& c, double) { c.head_dim = 6, c.partial_rotary_factor = 0.5; }},
      {"num_attention_heads", [](BlockConfig& c, double) { c.num_heads = 1 << 20, c.num_kv_heads = 1, c.head_dim = 1024; }},
      {"hidden_size", [](BlockConfig& c, double) { c.hidden_size = (1 << 24) + 1; }},
      {"num_hidden_layers", [](BlockConfig& c, double) { c.num_hidden_layers = 1000000000; }},
      {"rope_scaling.factor", [](BlockConfig& c, double n) { c.rope_scaling.type = RopeType::linear, c.rope_scaling.factor = n; }},
      {"max_position_embeddings", [](BlockConfig& c, double) { c.rope_scaling.type = RopeType::dynamic, c.rope_scaling.factor = 2; }},
      {"rope_scaling.high_freq_factor", [](BlockConfig& c, double) {
         c.max_position_embeddings = 64, c.rope_scaling.type = RopeType::llama3, c.rope_scaling.factor = 8;
         c.rope_scaling.high_freq_factor = 0.5;
       }},
  };
  for (const Bad& b : cases) {
    BlockConfig c = base;
    b.edit(c, nan);
    INFO("key " << std::string(b.key));
    INFO("heads " << c.num_heads << "/" << c.num_kv_heads << ", head_dim " << c.head_dim << ", hidden " << c.hidden_size);
    auto refused = [&](auto&& build) {
      try {
        build();
        CHECK_MESSAGE(false, "accepted");
      } catch (const Error& e) {
        CHECK(e.code() == ErrorCode::invalid_config);
        CHECK_MESSAGE(std::string(e.what()).find(b.key) != std::string::npos, std::string(e.what()));
      }
    };
    refused([&] { GatedAttention(ctx, c, w.map); });
    refused([&] { GatedAttention(ctx, c, as_tensors(w.map), BlockOptions{Precision::bf16}); });
    refused([&] { GatedAttention(ctx, c, WeightMap{}); });
    refused([&] { expected_weights(c); });
    refused([&] { check_weights(c, w.map); });
    const std::vector<float> x(96, 0.5f);
    refused([&] { reference::forward(c, w.map, reference::Inputs{x, 1, 1}); });
  }
}


TEST_CASE_FIXTURE(test::GpuTest, "block: golden cases from an independent implementation (no cache)") {
  for (const char* name : {"g1_gqa_qwen3next_partial", "g2_gqa_official_headwise", "g3_mqa_separate_bidir_residual"}) {
    CAPTURE(name);
    test::Golden g(name);
    const auto& x = g.f32("hidden_states");
    GatedAttention block(ctx, g.cfg, g.weights);
    block.set_poison(true);
    const auto got = block.forward(x, int(g.dim("hidden_states", 0)), int(g.dim("hidden_states", 1)));
    const auto& want = g.f32("output");
    test::check_close(got, std::vector<double>(want.begin(), want.end()));
  }
}

TEST_CASE_FIXTURE(test::GpuTest, "block: golden g4, one token after an 11-token cache") {
  test::Golden g("g4_decode_qwen3next_cache");
  GatedAttention block(ctx, g.cfg, g.weights);
  block.set_poison(true);
  ForwardInputs in{.hidden = g.f32("hidden_states"), .batch = int(g.dim("hidden_states", 0)),
                   .tokens = int(g.dim("hidden_states", 1)), .past = int(g.dim("past_key", 2)),
                   .past_key = g.f32("past_key"), .past_value = g.f32("past_value")};
  const auto& want = g.f32("output");
  test::check_close(block.run(in).output, std::vector<double>(want.begin(), want.end()));
}


TEST_CASE_FIXTURE(test::GpuTest, "block: KV cache — chunked prefill and decode equal the full sequence") {
  BlockConfig c = small({"GQA", 6, 2}, GateKind::elementwise, true);
  c.norm_kind = NormKind::zero_centered;
  test::RandomWeights w(c, rng);
  GatedAttention block(ctx, c, w.map);
  block.set_poison(true);
  const size_t B = 2, N = 9, D = 96, KV = 2, Dh = 32;
  const auto x = random(B * N * D);
  reference::Inputs rin{.hidden = x, .batch = B, .tokens = N};
  const auto full = reference::forward(c, w.map, rin);

  // Steps of 5 (prefill), 3 (chunk) and 1 (decode) tokens, carrying the cache.
  std::vector<float> key, value;
  size_t past = 0;
  for (size_t step : {5, 3, 1}) {
    CAPTURE(past);
    std::vector<float> xs;
    for (size_t b = 0; b < B; ++b)
      xs.insert(xs.end(), x.begin() + long((b * N + past) * D), x.begin() + long((b * N + past + step) * D));
    ForwardInputs in{.hidden = xs, .batch = int(B), .tokens = int(step), .past = int(past), .past_key = key,
                     .past_value = value, .want_cache = true};
    auto out = block.run(in);
    std::vector<double> want;
    for (size_t b = 0; b < B; ++b)
      want.insert(want.end(), full.output.begin() + long((b * N + past) * D),
                  full.output.begin() + long((b * N + past + step) * D));
    test::check_close(out.output, want);
    past += step;
    REQUIRE(out.present_key.size() == B * KV * past * Dh);
    key = std::move(out.present_key);
    value = std::move(out.present_value);
  }
  test::check_close(key, full.k);
  test::check_close(value, full.v);
}

TEST_CASE_FIXTURE(test::GpuTest, "block: additive mask, including a fully masked row, and stats") {
  BlockConfig c = small({"GQA", 4, 2}, GateKind::headwise, true);
  test::RandomWeights w(c, rng);
  GatedAttention block(ctx, c, w.map);
  block.set_poison(true);
  const int B = 2, T = 4, P = 3, S = P + T;
  const auto x = random(size_t(B) * T * 96);
  const auto pk = random(size_t(B) * 2 * P * 32), pv = random(size_t(B) * 2 * P * 32);
  auto mask = random(size_t(B) * T * S);
  for (size_t i = 0; i < mask.size(); i += 5) mask[i] = -std::numeric_limits<float>::infinity();
  for (int s = 0; s < S; ++s) mask[size_t(S + s)] = -std::numeric_limits<float>::infinity();  // b 0, query 1
  ForwardInputs in{.hidden = x, .batch = B, .tokens = T, .past = P, .past_key = pk, .past_value = pv,
                   .attention_mask = mask, .want_stats = true};
  const auto out = block.run(in);
  reference::Inputs rin{.hidden = x, .batch = B, .tokens = T, .past = P, .past_key = pk, .past_value = pv,
                        .attention_mask = mask};
  const auto want = reference::forward(c, w.map, rin);
  test::check_close(out.output, want.output);
  REQUIRE(out.stats.has_value());
  double gate_mean = 0, below = 0;
  for (double g : want.gate) {
    gate_mean += g / double(want.gate.size());
    below += (g < 0.1) / double(want.gate.size());
  }
  CHECK(out.stats->gate_mean == doctest::Approx(gate_mean).epsilon(1e-5));
  // A score within rounding of 0.1 may fall either side: allow one element.
  CHECK(std::abs(out.stats->gate_frac_below_0_1 - below) <= 1.0 / double(want.gate.size()) + 1e-12);
  REQUIRE(out.stats->first_token_attn.size() == want.first_token_attn.size());
  for (size_t h = 0; h < want.first_token_attn.size(); ++h)
    CHECK(out.stats->first_token_attn[h] == doctest::Approx(want.first_token_attn[h]).epsilon(1e-5));
}

TEST_CASE_FIXTURE(test::GpuTest, "block: fp16 and bf16 storage with fp32 accumulation (DESIGN.md §4 bounds)") {
  if (!ctx.device().storage16) {
    MESSAGE("skipped: the device has no 16-bit storage buffers");
    return;
  }
  for (Precision prec : {Precision::fp16, Precision::bf16}) {
    INFO("prec = " << std::string(to_string(prec)));
    const double bound = prec == Precision::fp16 ? 1e-5 : 1e-4;
    BlockConfig c = small({"GQA", 6, 2}, GateKind::elementwise, true);
    c.norm_kind = NormKind::zero_centered;
    c.residual = true;
    // Weights given as stored bf16/fp16 tensors: the reference sees exactly those values.
    const test::StoredWeights w(c, rng, prec);
    GatedAttention block(ctx, c, w.tensors, BlockOptions{prec});
    block.set_poison(true);
    const int B = 2, T = 3, P = 4;
    const auto x = random(size_t(B) * T * 96), pk = random(size_t(B) * 2 * P * 32), pv = random(size_t(B) * 2 * P * 32);
    ForwardInputs in{.hidden = x, .batch = B, .tokens = T, .past = P, .past_key = pk, .past_value = pv,
                     .want_cache = true};
    const auto out = block.run(in);
    reference::Inputs rin{.hidden = x, .batch = B, .tokens = T, .past = P, .past_key = pk, .past_value = pv};
    const auto want = reference::forward(c, w.rounded_map, rin);
    test::check_close(out.output, want.output, bound);
    test::check_close(out.present_key, want.k, bound);
    test::check_close(out.present_value, want.v, bound);
  }
}

TEST_CASE_FIXTURE(test::GpuTest, "block: device-resident cache — prefill, decode steps and a loaded cache") {
  BlockConfig c = small({"GQA", 6, 2}, GateKind::elementwise, true);
  c.norm_kind = NormKind::zero_centered;
  test::RandomWeights w(c, rng);
  GatedAttention block(ctx, c, w.map);
  block.set_poison(true);
  const size_t B = 2, N = 8, D = 96;
  const auto x = random(B * N * D);
  reference::Inputs rin{.hidden = x, .batch = B, .tokens = N};
  const auto full = reference::forward(c, w.map, rin);
  auto tokens = [&](size_t from, size_t count) {
    std::vector<float> xs;
    std::vector<double> want;
    for (size_t b = 0; b < B; ++b) {
      xs.insert(xs.end(), x.begin() + long((b * N + from) * D), x.begin() + long((b * N + from + count) * D));
      want.insert(want.end(), full.output.begin() + long((b * N + from) * D),
                  full.output.begin() + long((b * N + from + count) * D));
    }
    return std::pair{xs, want};
  };
  auto step = [&](size_t from, size_t count) {
    auto [xs, want] = tokens(from, count);
    ForwardInputs in{.hidden = xs, .batch = int(B), .tokens = int(count), .use_device_cache = true};
    test::check_close(block.run(in).output, want);
  };
  block.reserve_cache(int(B), int(N));
  step(0, 5);  // prefill
  for (size_t t = 5; t < N; ++t) step(t, 1);  // decode: recorded once, replayed at each length
  CHECK(block.cache_length() == int(N));
  CHECK(block.recorded_shapes() == 2);
  CHECK(block.recordings() == 2);
  ForwardInputs over;
  const auto one = tokens(0, 1).first;
  over.hidden = one;
  over.batch = int(B);
  over.use_device_cache = true;
  CHECK_THROWS_WITH_AS(block.run(over), doctest::Contains("do not fit"), Error);

  // A cache loaded from the host (the reference's first 6 positions), then two decode steps.
  const size_t KV = 2, Dh = 32, L = 6;
  std::vector<float> key, value;
  for (size_t bk = 0; bk < B * KV; ++bk)
    for (size_t i = 0; i < L * Dh; ++i) {
      key.push_back(float(full.k[bk * N * Dh + i]));
      value.push_back(float(full.v[bk * N * Dh + i]));
    }
  block.load_cache(key, value, int(B), int(L), int(N));
  step(6, 1);
  step(7, 1);
}

// Statistics of a resident-cache step read the probabilities the step wrote:
// rows of past + tokens keys (the plan is keyed by past = −1, so the stride
// must come from the step's own past). They equal those of the same step with
// the cache passed in explicitly, and the reference's.
TEST_CASE_FIXTURE(test::GpuTest, "block: statistics with the device-resident cache equal the explicit cache's") {
  BlockConfig c = small({"GQA", 6, 2}, GateKind::elementwise, true);
  test::RandomWeights w(c, rng);
  GatedAttention resident(ctx, c, w.map), explicit_cache(ctx, c, w.map);
  const size_t B = 2, N = 7, D = 96, KV = 2, Dh = 32;
  const auto x = random(B * N * D);
  auto rows = [&](size_t from, size_t count) {
    std::vector<float> xs;
    for (size_t b = 0; b < B; ++b)
      xs.insert(xs.end(), x.begin() + long((b * N + from) * D), x.begin() + long((b * N + from + count) * D));
    return xs;
  };
  reference::Inputs rin{.hidden = x, .batch = B, .tokens = N};
  const auto full = reference::forward(c, w.map, rin);

  resident.reserve_cache(int(B), int(N));
  std::vector<float> key, value;
  size_t past = 0;
  for (size_t step : {5, 1, 1}) {
    CAPTURE(past);
    const auto xs = rows(past, step);
    ForwardInputs in{.hidden = xs, .batch = int(B), .tokens = int(step), .want_stats = true, .use_device_cache = true};
    const ForwardOutputs r = resident.run(in);
    in.use_device_cache = false;
    in.past = int(past);
    in.past_key = key;
    in.past_value = value;
    in.want_cache = true;
    ForwardOutputs e = explicit_cache.run(in);
    // The same step (the resident plan's score rows are its capacity apart,
    // which may pick the other softmax variant: equal up to rounding).
    test::check_close(r.output, std::vector<double>(e.output.begin(), e.output.end()), 1e-12);

    // The reference's step over its own cache of the first `past` positions.
    std::vector<float> rk, rv;
    for (size_t bk = 0; bk < B * KV; ++bk)
      for (size_t i = 0; i < past * Dh; ++i) {
        rk.push_back(float(full.k[bk * N * Dh + i]));
        rv.push_back(float(full.v[bk * N * Dh + i]));
      }
    reference::Inputs sin{.hidden = xs, .batch = B, .tokens = int64_t(step), .past = int64_t(past), .past_key = rk,
                          .past_value = rv};
    const auto want = reference::forward(c, w.map, sin);
    REQUIRE(r.stats);
    REQUIRE(e.stats);
    REQUIRE(r.stats->first_token_attn.size() == want.first_token_attn.size());
    for (size_t h = 0; h < want.first_token_attn.size(); ++h) {
      CAPTURE(h);
      CHECK(r.stats->first_token_attn[h] == doctest::Approx(e.stats->first_token_attn[h]).epsilon(1e-6));
      CHECK(std::abs(r.stats->first_token_attn[h] - want.first_token_attn[h]) < 1e-5);
    }
    CHECK(r.stats->gate_mean == doctest::Approx(e.stats->gate_mean).epsilon(1e-6));
    key = std::move(e.present_key);
    value = std::move(e.present_value);
    past += step;
  }
}

}  // namespace test_block
