// Whole models on the device against the double-precision reference: the
// golden qwen3 checkpoint (logits, statistics, greedy ids), qwen3 baseline /
// headwise / elementwise and llama with biases, tied and untied, GQA and MQA,
// batch > 1, fp16 and bf16; a prefill and replayed decode steps against the
// full forward; vocabularies split across buffers.
#include <cmath>

#include "golden.hpp"
#include "harness.hpp"
#include "model_check.hpp"
#include "model_weights.hpp"
#include "vkgate/error.hpp"
#include "vkgate/model.hpp"
#include "vkgate/reference_model.hpp"

namespace test_model {

using namespace vkgate;

namespace {

using test::w1_dir;

}  // namespace

TEST_CASE_FIXTURE(test::GpuTest, "model: golden w1 (qwen3, elementwise gate): logits, statistics and greedy ids") {
  Model model = Model::load(ctx, w1_dir());
  model.set_poison(true);
  const SafetensorsFile input(w1_dir() + "/input.safetensors"), expected(w1_dir() + "/expected.safetensors");
  const TensorView& ids_view = input.at("input_ids");
  const auto ids = ids_view.to_i64();
  const int B = int(ids_view.shape[0]), T = int(ids_view.shape[1]);
  ModelStats stats;
  const auto logits = model.logits(ids, B, T, &stats);
  const auto want = expected.at("logits").to_f64();
  test::check_close(logits, want, 1e-8);
  auto close = [](const std::vector<double>& got, const std::vector<double>& ref, double abs, double rel) {
    REQUIRE(got.size() == ref.size());
    for (size_t i = 0; i < got.size(); ++i) {
      CAPTURE(i);
      CHECK(std::abs(got[i] - ref[i]) <= abs + rel * std::abs(ref[i]));
    }
  };
  close(stats.first_token_attn, expected.at("stats.first_token_attn").to_f64(), 1e-4, 0);
  close(stats.gate_mean, expected.at("stats.gate_mean").to_f64(), 1e-4, 0);
  close(stats.max_activation, expected.at("stats.max_activation").to_f64(), 0, 1e-4);

  const auto gen = nlohmann::json::parse(test::read_file_text(w1_dir() + "/generate.json"));
  const auto prompt = gen.at("prompt_ids").get<std::vector<int64_t>>();
  GenerateOptions o;
  o.max_new_tokens = gen.at("max_new_tokens").get<int>();
  CHECK(model.generate(prompt, o).ids == gen.at("generated").get<std::vector<int64_t>>());
}

TEST_CASE_FIXTURE(test::GpuTest, "model: qwen3 baseline/headwise/elementwise, llama with biases, tied, GQA/MQA, batch 2") {
  for (GateKind gate : {GateKind::none, GateKind::headwise, GateKind::elementwise}) {
    INFO("qwen3 gate " << std::string(to_string(gate)));
    test::TinyModel s;
    s.gate = gate;
    test::check_model(*this, s.config(), 2, 5, Precision::fp32, 1e-8);
  }
  test::TinyModel llama;
  llama.model_type = "llama";
  llama.bias = true;
  llama.tied = true;
  llama.kv_heads = 1;  // MQA
  llama.act = Activation::gelu;
  INFO("llama, biases, tied, MQA, gelu");
  test::check_model(*this, llama.config(), 2, 3, Precision::fp32, 1e-8);
  llama.act = Activation::gelu_tanh;
  llama.kv_heads = 4;  // MHA
  test::check_model(*this, llama.config(), 1, 1, Precision::fp32, 1e-8);
  test::TinyModel sig;
  sig.act = Activation::sigmoid;
  sig.layers = 1;
  test::check_model(*this, sig.config(), 1, 4, Precision::fp32, 1e-8);
}

TEST_CASE_FIXTURE(test::GpuTest, "model: fp16 and bf16 storage (logits NMSE 1e-4 and 1e-3)") {
  if (!vk.info.storage16) return;
  test::TinyModel s;
  s.gate = GateKind::elementwise;
  test::check_model(*this, s.config(), 2, 4, Precision::fp16, 1e-4);
  test::check_model(*this, s.config(), 2, 4, Precision::bf16, 1e-3);
}

TEST_CASE_FIXTURE(test::GpuTest, "model: a prefill and replayed decode steps equal the full forward, generate equals the reference") {
  test::TinyModel s;
  s.gate = GateKind::headwise;
  test::RandomModel m(s.config(), rng);
  Model model(ctx, m.cfg, m.tensors);
  const int B = 2, N = 9, P = 4;
  const auto ids = test::random_ids(rng, size_t(B) * N, m.cfg.vocab_size);
  const auto full = reference::model_forward(m.cfg, m.map, {ids, B, N});
  // The reference's logits of position t of each row; the ids of positions [from, from + count).
  auto last_rows = [&](int t) { return test::positions(full.logits, B, N, t); };
  auto columns = [&](int from, int count) { return test::positions(ids, B, N, from, count); };
  Sequence seq = model.start(B, N);
  test::check_close(model.extend(seq, columns(0, P), P), last_rows(P - 1), 1e-8);
  const size_t recorded = model.recordings();
  for (int t = P; t < N; ++t) {
    CAPTURE(t);
    test::check_close(model.extend(seq, columns(t, 1), 1), last_rows(t), 1e-8);
  }
  CHECK(seq.length() == N);
  CHECK(model.recordings() == recorded + 1);  // the decode step: recorded once, replayed at each length
  CHECK_THROWS_WITH_AS(model.extend(seq, columns(0, 1), 1), doctest::Contains("do not fit"), Error);
  seq.truncate(P);  // redo the steps from the prefill
  test::check_close(model.extend(seq, columns(P, 1), 1), last_rows(P), 1e-8);

  const std::vector<int64_t> prompt(ids.begin(), ids.begin() + 5);
  GenerateOptions o;
  o.max_new_tokens = 8;
  o.stop_at_eos = false;
  std::vector<int64_t> streamed;
  o.on_token = [&](int64_t id) {
    streamed.push_back(id);
    return true;
  };
  const GenerateResult r = model.generate(prompt, o);
  CHECK(r.ids == reference::greedy_generate(m.cfg, m.map, prompt, 8, false));
  CHECK(streamed == r.ids);
  CHECK(r.step_ms.size() == 7);
}

// The paper's G2 in every layer: model.layers.{i}.self_attn.gate_proj gates the
// values, so the cache of each layer holds gated values; decode steps must
// equal the whole sequence, and generation the reference's.
TEST_CASE_FIXTURE(test::GpuTest, "model: a qwen3 model with a G2 value gate: logits, cached decode, generate, gate_mean") {
  test::TinyModel s;
  s.gate = GateKind::elementwise;
  s.gate_position = GatePosition::value;
  test::RandomModel m(s.config(), rng);
  CHECK(m.map.count("model.layers.1.self_attn.gate_proj.weight") == 1);
  Model model(ctx, m.cfg, m.tensors);
  model.set_poison(true);
  const int N = 7, P = 4;
  const auto ids = test::random_ids(rng, N, m.cfg.vocab_size);
  const auto full = reference::model_forward(m.cfg, m.map, {ids, 1, N});
  const size_t V = size_t(m.cfg.vocab_size);
  auto row = [&](int t) { return std::vector<double>(full.logits.begin() + long(t * V), full.logits.begin() + long((t + 1) * V)); };
  Sequence seq = model.start(1, N);
  test::check_close(model.extend(seq, std::vector<int64_t>(ids.begin(), ids.begin() + P), P), row(P - 1), 1e-8);
  for (int t = P; t < N; ++t) {
    CAPTURE(t);
    test::check_close(model.extend(seq, std::span(&ids[size_t(t)], 1), 1), row(t), 1e-8);
  }
  ModelStats st;
  model.logits(ids, 1, N, &st);
  REQUIRE(st.gate_mean.size() == full.gate_mean.size());
  for (size_t l = 0; l < st.gate_mean.size(); ++l) CHECK(st.gate_mean[l] == doctest::Approx(full.gate_mean[l]).epsilon(1e-5));
  GenerateOptions o;
  o.max_new_tokens = 5;
  o.stop_at_eos = false;
  const std::vector<int64_t> prompt(ids.begin(), ids.begin() + 3);
  CHECK(model.generate(prompt, o).ids == reference::greedy_generate(m.cfg, m.map, prompt, 5, false));
}

TEST_CASE_FIXTURE(test::GpuTest, "model: embedding and lm_head split across buffers give the same logits") {
  test::TinyModel s;
  s.vocab = 61;
  for (bool tied : {false, true}) {
    CAPTURE(tied);
    s.tied = tied;
    test::RandomModel m(s.config(), rng);
    const auto ids = test::random_ids(rng, 6, m.cfg.vocab_size);
    const auto want = reference::model_forward(m.cfg, m.map, {ids, 2, 3});
    test::ScopedTuning tuning(ctx);
    tuning->vocab_chunk_rows = 16;  // chunks of 16, 16, 16 and 13 rows
    Model model(ctx, m.cfg, m.tensors);
    model.set_poison(true);
    test::check_close(model.logits(ids, 2, 3), want.logits, 1e-8);
  }
}

TEST_CASE_FIXTURE(test::GpuTest, "model: ids out of range and misshapen weights are errors naming them") {
  test::TinyModel s;
  test::RandomModel m(s.config(), rng);
  Model model(ctx, m.cfg, m.tensors);
  const std::vector<int64_t> bad{3, 5, 200, 7};
  CHECK_THROWS_WITH_AS(model.logits(bad, 2, 2), doctest::Contains("input id 200 at [1, 0]"), Error);
  const std::vector<int64_t> negative{-1};
  CHECK_THROWS_WITH_AS(model.logits(negative, 1, 1), doctest::Contains("input id -1 at [0, 0]"), Error);
  CHECK_THROWS_AS(model.logits(bad, 3, 2), Error);
  TensorMap wrong = m.tensors;
  wrong["model.layers.1.mlp.up_proj.weight"].shape = {95, 64};
  CHECK_THROWS_WITH_AS(Model(ctx, m.cfg, wrong), doctest::Contains("model.layers.1.mlp.up_proj.weight"), Error);
  TensorMap missing = m.tensors;
  missing.erase("model.norm.weight");
  CHECK_THROWS_WITH_AS(Model(ctx, m.cfg, missing), doctest::Contains("model.norm.weight"), Error);
}

}  // namespace test_model
