// GLA models (model_type "gla") on the device against the double-precision
// reference: the layer's forms (low-rank and single forget gate, fused and
// plain output norm or none, output gate off, GQA and MHA, feature map, convex
// coupling, tied), fp16 and bf16; a prefill and decode steps carrying the
// recurrent state against the full forward, what truncate can and cannot do,
// greedy generation, a chunked prefill handing its states to decode steps,
// statistics, and refused weights.
#include "harness.hpp"
#include "model_check.hpp"
#include "model_weights.hpp"
#include "vkgate/error.hpp"
#include "vkgate/model.hpp"
#include "vkgate/reference_model.hpp"

namespace test_gla_model {

using namespace vkgate;

TEST_CASE_FIXTURE(test::GpuTest, "gla model: logits over the layer's forms, GQA and MHA, tied, batch 2 (fp32 NMSE 1e-8)") {
  test::TinyGla fla;  // fla's default form: low-rank gate, g_norm_swish_gate, GQA 4 over 2
  INFO("low-rank gate, fused norm, GQA");
  test::check_model(*this, fla.config(), 2, 5, Precision::fp32, 1e-8);

  test::TinyGla single;
  single.low_rank = 0;
  single.output_gate = false;
  single.output_norm = "g_norm.weight";
  single.kv_heads = 4;
  single.tied = true;
  INFO("single gate, no output gate, g_norm, MHA, tied");
  test::check_model(*this, single.config(), 2, 3, Precision::fp32, 1e-8);

  test::TinyGla bare;
  bare.output_norm = "";
  bare.kv_heads = 1;
  bare.feature_map = FeatureMap::elu_plus_one;
  bare.coupling = KeyCoupling::convex;
  bare.layers = 1;
  INFO("no output norm, MQA, elu+1, convex coupling, one layer");
  test::check_model(*this, bare.config(), 1, 6, Precision::fp32, 1e-8);
}

TEST_CASE_FIXTURE(test::GpuTest, "gla model: fp16 and bf16 storage (logits NMSE 1e-4 and 1e-3)") {
  if (!vk.info.storage16) return;
  test::TinyGla s;
  s.norm_eps = test::TinyGla::kRoundingSafeEps;
  test::check_model(*this, s.config(), 2, 4, Precision::fp16, 1e-4);
  test::check_model(*this, s.config(), 2, 4, Precision::bf16, 1e-3);
}

TEST_CASE_FIXTURE(test::GpuTest, "gla model: a prefill and decode steps carry the state as the full forward, generate equals the reference") {
  test::TinyGla s;
  test::RandomModel m(s.config(), rng);
  Model model(ctx, m.cfg, m.tensors);
  model.set_poison(true);
  const int B = 2, N = 7, P = 3;
  const auto ids = test::random_ids(rng, size_t(B) * N, m.cfg.vocab_size);
  const auto full = reference::model_forward(m.cfg, m.map, {ids, B, N});
  // The reference's logits of position t of each row; the ids of positions [from, from + count).
  auto last_rows = [&](int t) { return test::positions(full.logits, B, N, t); };
  auto columns = [&](int from, int count) { return test::positions(ids, B, N, from, count); };
  Sequence seq = model.start(B, N);
  const GlaConfig& g = *m.cfg.gla;
  CHECK(model.memory().kv_cache ==
        uint64_t(s.layers) * B * uint64_t(g.num_heads) * uint64_t(g.head_k_dim()) * uint64_t(g.head_v_dim()) * 4);
  test::check_close(model.extend(seq, columns(0, P), P), last_rows(P - 1), 1e-8);
  const size_t recorded = model.recordings();
  for (int t = P; t < N; ++t) {
    CAPTURE(t);
    test::check_close(model.extend(seq, columns(t, 1), 1), last_rows(t), 1e-8);
  }
  CHECK(model.recordings() == recorded + 1);  // the decode step: recorded once, replayed as the state moves on
  CHECK_THROWS_WITH_AS(model.extend(seq, columns(0, 1), 1), doctest::Contains("do not fit"), Error);

  // The state sums every position: it cannot go back to the prefill, only to the start.
  CHECK_THROWS_WITH_AS(seq.truncate(P), doctest::Contains("cannot be rolled back"), Error);
  CHECK(seq.length() == N);
  seq.truncate(N);  // staying put is allowed
  seq.truncate(0);
  CHECK(seq.length() == 0);
  test::check_close(model.extend(seq, columns(0, 2), 2), last_rows(1), 1e-8);
  test::check_close(model.extend(seq, columns(2, 1), 1), last_rows(2), 1e-8);

  const std::vector<int64_t> prompt(ids.begin(), ids.begin() + 4);
  GenerateOptions o;
  o.max_new_tokens = 6;
  o.stop_at_eos = false;
  const GenerateResult r = model.generate(prompt, o);
  CHECK(r.ids == reference::greedy_generate(m.cfg, m.map, prompt, 6, false));
  CHECK(r.step_ms.size() == 5);
}

TEST_CASE_FIXTURE(test::GpuTest, "gla model: statistics hold max_activation only, ids and weights are checked") {
  test::TinyGla s;
  test::RandomModel m(s.config(), rng);
  Model model(ctx, m.cfg, m.tensors);
  const auto ids = test::random_ids(rng, 6, m.cfg.vocab_size);
  const auto want = reference::model_forward(m.cfg, m.map, {ids, 2, 3});
  ModelStats st;
  test::check_close(model.logits(ids, 2, 3, &st), want.logits, 1e-8);
  CHECK(st.layers == s.layers);
  CHECK(st.first_token_attn.empty());  // no attention probabilities
  CHECK(st.gate_mean.empty());         // no sigmoid gate scores
  REQUIRE(st.max_activation.size() == want.max_activation.size());
  for (size_t l = 0; l < st.max_activation.size(); ++l)
    CHECK(st.max_activation[l] == doctest::Approx(want.max_activation[l]).epsilon(1e-5));

  const std::vector<int64_t> bad{3, 5, 50, 7};
  CHECK_THROWS_WITH_AS(model.logits(bad, 2, 2), doctest::Contains("input id 50 at [1, 0]"), Error);
  Sequence seq = model.start(1, 4);
  CHECK_THROWS_WITH_AS(model.extend(seq, std::vector<int64_t>{60}, 1), doctest::Contains("input id 60"), Error);
  CHECK(model.extend(seq, std::vector<int64_t>{ids[0]}, 1).size() == size_t(m.cfg.vocab_size));  // nothing was lost

  TensorMap missing = m.tensors;
  missing.erase("model.layers.1.attn.gk_proj.1.bias");
  CHECK_THROWS_WITH_AS(Model(ctx, m.cfg, missing), doctest::Contains("model.layers.1.attn.gk_proj.1.bias"), Error);
  TensorMap wrong = m.tensors;
  wrong["model.layers.0.attn.k_proj.weight"].shape = {8, 31};
  CHECK_THROWS_WITH_AS(Model(ctx, m.cfg, wrong), doctest::Contains("model.layers.0.attn.k_proj.weight"), Error);
  TensorMap old = m.tensors;  // the API takes fla's current name only (model_tensors maps the older one)
  old["model.embed_tokens.weight"] = old.at("model.embeddings.weight");
  old.erase("model.embeddings.weight");
  CHECK_THROWS_WITH_AS(Model(ctx, m.cfg, old), doctest::Contains("model.embeddings.weight"), Error);
}

TEST_CASE_FIXTURE(test::GpuTest, "gla model: a prompt longer than one step's buffers runs in pieces, the state carried (VKGATE_GLA_SEGMENT_TOKENS)") {
  test::TinyGla s;
  test::RandomModel m(s.config(), rng);
  test::ScopedTuning tuning(ctx);
  tuning->gla_segment_tokens = 2;  // steps of at most 2 tokens: 5 run as 2 + 2 + 1
  Model model(ctx, m.cfg, m.tensors);
  model.set_poison(true);
  const int B = 2, N = 5;
  const auto ids = test::random_ids(rng, size_t(B) * N, m.cfg.vocab_size);
  const auto full = reference::model_forward(m.cfg, m.map, {ids, B, N});
  const std::vector<double> last = test::positions(full.logits, B, N, N - 1);
  Sequence seq = model.start(B, N);
  std::vector<int64_t> bad = ids;
  bad.back() = 99;  // in the last piece: refused before the first piece runs
  CHECK_THROWS_WITH_AS(model.extend(seq, bad, N), doctest::Contains("input id 99 at [1, 4]"), Error);
  CHECK(seq.length() == 0);
  test::check_close(model.extend(seq, ids, N), last, 1e-8);
  CHECK(seq.length() == N);
  // Without a sequence there is no state to carry between pieces.
  CHECK_THROWS_WITH_AS(model.logits(ids, B, N), doctest::Contains("runs a long prompt in pieces"), Error);

  const std::vector<int64_t> prompt(ids.begin(), ids.begin() + N);
  GenerateOptions o;
  o.max_new_tokens = 3;
  o.stop_at_eos = false;
  CHECK(model.generate(prompt, o).ids == reference::greedy_generate(m.cfg, m.map, prompt, 3, false));
}


// From 64 tokens on a step takes the chunked form (VKGATE_GLA_MODE=automatic):
// its final states must be what the decode steps' recurrence continues from.
TEST_CASE_FIXTURE(test::GpuTest, "gla model: a chunked prefill of 70 tokens, then decode steps, equal the full forward") {
  test::TinyGla s;
  test::RandomModel m(s.config(), rng);
  Model model(ctx, m.cfg, m.tensors);
  model.set_poison(true);
  const int N = 72, P = 70;
  const auto ids = test::random_ids(rng, N, m.cfg.vocab_size);
  const auto full = reference::model_forward(m.cfg, m.map, {ids, 1, N});
  test::check_close(model.logits(ids, 1, N), full.logits, 1e-8);
  Sequence seq = model.start(1, N);
  test::check_close(model.extend(seq, test::positions(ids, 1, N, 0, P), P), test::positions(full.logits, 1, N, P - 1),
                    1e-8);
  for (int t = P; t < N; ++t) {
    CAPTURE(t);
    test::check_close(model.extend(seq, test::positions(ids, 1, N, t), 1), test::positions(full.logits, 1, N, t), 1e-8);
  }
}

}  // namespace test_gla_model
