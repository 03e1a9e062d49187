// Sparse mixture-of-experts models (issue 27): the wave-3 golden qwen3_next and
// qwen3_moe checkpoints (logits in every precision, statistics, greedy ids),
// and random tiny models against the double-precision reference: k from 1 to
// E, norm_topk_prob on and off, dense and sparse layers mixed, the shared
// expert, batch > 1, prefill + decode steps == the full forward, the expert
// load statistics, the fused expert tensors, and the config's refusals.
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "golden.hpp"
#include "harness.hpp"
#include "model_check.hpp"
#include "model_weights.hpp"
#include "test_util.hpp"
#include "vkgate/checkpoint.hpp"
#include "vkgate/error.hpp"
#include "vkgate/model.hpp"
#include "vkgate/reference_model.hpp"
#include "vkgate/safetensors.hpp"

namespace test_moe_model {

using namespace vkgate;
using nlohmann::json;

namespace {

std::string wave3(const std::string& name) { return test::golden_dir() + "/wave3/models/" + name; }

ModelConfig parse(const json& j) { return parse_model_config_json(j.dump(), "config.json"); }

// A tiny qwen3_moe: 2 layers, 6 experts of 24, top 2.
json tiny_moe_json() {
  return {{"model_type", "qwen3_moe"}, {"hidden_size", 32}, {"num_attention_heads", 2},
          {"num_key_value_heads", 1}, {"head_dim", 16}, {"intermediate_size", 40},
          {"num_hidden_layers", 2}, {"vocab_size", 60}, {"num_experts", 6},
          {"num_experts_per_tok", 2}, {"moe_intermediate_size", 24}, {"rms_norm_eps", 1e-6},
          {"rope_theta", 10000.0}, {"eos_token_id", 1}};
}

// A tiny qwen3_next with sparse layers and a shared expert.
json tiny_next_json() {
  json j = test::tiny_qwen3_next_json();
  j["num_experts"] = 5;
  j["num_experts_per_tok"] = 2;
  j["moe_intermediate_size"] = 16;
  j["shared_expert_intermediate_size"] = 20;
  return j;
}

// The golden case `name`: logits at `precision` within `nmse`, max_activation,
// first_token_attn where the case has it, and the greedy ids (fp32).
void check_golden(test::GpuTest& t, const std::string& name, Precision precision, double nmse) {
  INFO(name << " " << to_string(precision));
  const std::string dir = wave3(name);
  Model model = Model::load(t.ctx, dir, {precision});
  model.set_poison(true);
  const SafetensorsFile input(dir + "/input.safetensors"), expected(dir + "/expected.safetensors");
  const TensorView& ids_view = input.at("input_ids");
  const auto ids = ids_view.to_i64();
  const int B = int(ids_view.shape[0]), T = int(ids_view.shape[1]);
  ModelStats stats;
  test::check_close(model.logits(ids, B, T, &stats), expected.at("logits").to_f64(), nmse);
  if (precision != Precision::fp32) return;
  const auto max_act = expected.at("stats.max_activation").to_f64();
  REQUIRE(stats.max_activation.size() == max_act.size());
  for (size_t l = 0; l < max_act.size(); ++l) CHECK(stats.max_activation[l] == doctest::Approx(max_act[l]).epsilon(1e-4));
  if (expected.contains("stats.first_token_attn")) {
    const auto fta = expected.at("stats.first_token_attn").to_f64();
    REQUIRE(stats.first_token_attn.size() == fta.size());
    for (size_t i = 0; i < fta.size(); ++i) CHECK(std::abs(stats.first_token_attn[i] - fta[i]) <= 1e-4);
  }
  CHECK(stats.moe_layers.size() == size_t(model.config().num_hidden_layers));
  const auto gen = json::parse(test::read_file_text(dir + "/generate.json"));
  GenerateOptions o;
  o.max_new_tokens = gen.at("max_new_tokens").get<int>();
  CHECK(model.generate(gen.at("prompt_ids").get<std::vector<int64_t>>(), o).ids ==
        gen.at("generated").get<std::vector<int64_t>>());
}

}  // namespace

TEST_CASE("moe config: qwen3_moe and qwen3_next defaults, the sparse layers, refusals naming the key") {
  const ModelConfig moe = parse(tiny_moe_json());
  CHECK(moe.moe.num_experts == 6);
  CHECK(!moe.moe.norm_topk_prob);  // Qwen3MoeConfig's default
  CHECK(moe.moe.shared_expert_intermediate_size == 0);
  CHECK(moe.attention.gate_kind == GateKind::none);
  CHECK(moe.attention.use_qk_norm);
  CHECK(moe.norm_kind() == NormKind::plain);
  CHECK(moe.moe_layers() == std::vector<int>{0, 1});
  json j = tiny_moe_json();
  j.erase("head_dim");
  CHECK(parse(j).attention.head_dim == 128);
  j = tiny_moe_json();
  j["decoder_sparse_step"] = 2;
  CHECK(parse(j).moe_layers() == std::vector<int>{1});
  j["decoder_sparse_step"] = 1;
  j["mlp_only_layers"] = {1};
  CHECK(parse(j).moe_layers() == std::vector<int>{0});
  const std::vector<TensorSpec> names = expected_model_weights(parse(j));
  auto has = [&](const std::string& n) {
    return std::any_of(names.begin(), names.end(), [&](const TensorSpec& s) { return s.name == n; });
  };
  CHECK(has("model.layers.0.mlp.experts.5.down_proj.weight"));
  CHECK(has("model.layers.0.mlp.gate.weight"));
  CHECK(!has("model.layers.0.mlp.up_proj.weight"));
  CHECK(has("model.layers.1.mlp.up_proj.weight"));

  const ModelConfig next = parse(tiny_next_json());
  CHECK(next.moe.norm_topk_prob);  // Qwen3NextConfig's default
  CHECK(next.moe.shared_expert_intermediate_size == 20);
  json n = tiny_next_json();
  n.erase("num_experts");
  n.erase("num_experts_per_tok");
  CHECK(parse(n).moe.num_experts == 512);
  CHECK(parse(n).moe.num_experts_per_tok == 10);

  j = tiny_moe_json();
  j["num_experts_per_tok"] = 7;
  test::expect_error([&] { parse(j); }, ErrorCode::invalid_config, {"config.json", "num_experts_per_tok", "7"});
  j = tiny_moe_json();
  j["mlp_only_layers"] = {2};
  test::expect_error([&] { parse(j); }, ErrorCode::invalid_config, {"config.json", "mlp_only_layers"});
  j = tiny_moe_json();
  j["num_experts"] = -1;
  test::expect_error([&] { parse(j); }, ErrorCode::invalid_config, {"num_experts"});
  j = tiny_moe_json();
  j["shared_expert_intermediate_size"] = 8;
  test::expect_error([&] { parse(j); }, ErrorCode::invalid_config, {"shared_expert_intermediate_size", "qwen3_moe"});
}

// bf16 at 1e-2, not the 1e-3 of dense models: routing is discontinuous, and
// bf16's rounding (2^-9) moves a router logit past its neighbour's for some
// tokens of these cases (their generator checked fp32 only): qwen3_moe_tiny
// swaps one expert of one token in 24 (that token's NMSE 0.14, the others'
// ~1e-4; 5.3e-3 overall), qwen3_next_tiny measures 3.2e-3. fp16 keeps every
// choice. The random models below meet 1e-3 in bf16 where no choice flips.
TEST_CASE_FIXTURE(test::GpuTest, "moe model: golden wave-3 qwen3_next and qwen3_moe in fp32, fp16 and bf16") {
  for (const char* name : {"qwen3_next_tiny", "qwen3_moe_tiny"}) {
    check_golden(*this, name, Precision::fp32, 1e-8);
    if (!vk.info.storage16) continue;
    check_golden(*this, name, Precision::fp16, 1e-4);
    check_golden(*this, name, Precision::bf16, 1e-2);
  }
}

TEST_CASE_FIXTURE(test::GpuTest, "moe model: k from 1 to E, norm_topk_prob on and off, dense and sparse layers, "
                                 "shared expert, batch 2") {
  for (int k : {1, 2, 6}) {
    for (bool norm : {false, true}) {
      INFO("qwen3_moe k " << k << " norm_topk_prob " << norm);
      json j = tiny_moe_json();
      j["num_experts_per_tok"] = k;
      j["norm_topk_prob"] = norm;
      test::check_model(*this, parse(j), 2, 5, Precision::fp32, 1e-8);
    }
  }
  json j = tiny_moe_json();
  j["mlp_only_layers"] = {0};
  j["tie_word_embeddings"] = true;
  INFO("a dense layer 0, tied embeddings");
  test::check_model(*this, parse(j), 1, 3, Precision::fp32, 1e-8);
  INFO("qwen3_next with a shared expert, decoder_sparse_step 2");
  json n = tiny_next_json();
  n["decoder_sparse_step"] = 2;
  test::check_model(*this, parse(n), 2, 4, Precision::fp32, 1e-8);
  // More tokens than the rows form takes: the tiled grouped GEMM.
  test::check_model(*this, parse(tiny_next_json()), 2, 7, Precision::fp32, 1e-8);
  // More experts than moe_route.comp keeps in shared memory (1024), ranked
  // by the workgroup (6 tokens) and by a lane per token (10).
  json wide = tiny_moe_json();
  wide["num_experts"] = 1100;
  wide["num_experts_per_tok"] = 4;
  wide["moe_intermediate_size"] = 8;
  INFO("qwen3_moe with 1100 experts");
  test::check_model(*this, parse(wide), 2, 3, Precision::fp32, 1e-8);
  test::check_model(*this, parse(wide), 2, 5, Precision::fp32, 1e-8);
}

TEST_CASE_FIXTURE(test::GpuTest, "moe model: expert load, prefill + decode steps == the full forward, greedy generate") {
  const test::RandomModel m(parse(tiny_next_json()), rng);
  Model model(ctx, m.cfg, m.tensors);
  model.set_poison(true);
  const int B = 2, N = 8, P = 5;
  const auto ids = test::random_ids(rng, size_t(B) * N, m.cfg.vocab_size);
  const auto full = reference::model_forward(m.cfg, m.map, {ids, B, N});
  ModelStats stats;
  test::check_close(model.logits(ids, B, N, &stats), full.logits, 1e-8);
  CHECK(stats.moe_layers == std::vector<int>{0, 1, 2, 3});
  CHECK(stats.experts == 5);
  REQUIRE(stats.expert_load.size() == full.expert_load.size());
  for (size_t i = 0; i < full.expert_load.size(); ++i) CHECK(stats.expert_load[i] == doctest::Approx(full.expert_load[i]));
  for (int l = 0; l < 4; ++l) {
    double sum = 0;
    for (int e = 0; e < 5; ++e) sum += stats.expert_load[size_t(l * 5 + e)];
    CHECK(sum == doctest::Approx(2.0));  // each token picks k experts
  }
  CHECK(stats.attention_layers == std::vector<int>{1, 3});
  CHECK(stats.attention_layers == full.attention_layers);
  REQUIRE(stats.first_token_attn.size() == 2 * 2);
  REQUIRE(stats.gate_mean.size() == 2);
  for (size_t i = 0; i < 2; ++i) CHECK(stats.gate_mean[i] == doctest::Approx(full.gate_mean[i]).epsilon(1e-5));

  auto last_rows = [&](int t) { return test::positions(full.logits, B, N, t); };
  auto columns = [&](int from, int count) { return test::positions(ids, B, N, from, count); };
  Sequence seq = model.start(B, N);
  test::check_close(model.extend(seq, columns(0, P), P), last_rows(P - 1), 1e-8);
  for (int t = P; t < N; ++t) {
    CAPTURE(t);
    test::check_close(model.extend(seq, columns(t, 1), 1), last_rows(t), 1e-8);
  }
  const std::vector<int64_t> prompt(ids.begin(), ids.begin() + 4);
  GenerateOptions o;
  o.max_new_tokens = 5;
  o.stop_at_eos = false;
  CHECK(model.generate(prompt, o).ids == reference::greedy_generate(m.cfg, m.map, prompt, 5, false));
}

// Expert choices are discontinuous: fp16 or bf16 rounding upstream moves a
// router logit past its neighbour's for a token now and then (on fresh random
// inputs, about one token-layer in tens at bf16), and that token's output is
// then another function. So the random models in reduced precision route each
// token to every expert (k = E: the weights still come from the softmax,
// renormalised, but no choice can flip); the golden cases above, whose
// inputs are fixed, keep every choice at fp16. A random qwen3_next in bf16
// reaches 1.4e-3 with dense MLPs too (its Gated DeltaNet layers): fp16 for
// it, bf16 for qwen3_moe.
TEST_CASE_FIXTURE(test::GpuTest, "moe model: fp16 and bf16 storage, the experts split across buffers") {
  if (!vk.info.storage16) return;
  json next = tiny_next_json(), moe = tiny_moe_json();
  next["num_experts_per_tok"] = 5;
  moe["num_experts_per_tok"] = 6;
  moe["norm_topk_prob"] = true;
  test::check_model(*this, parse(next), 2, 5, Precision::fp16, 1e-4);
  test::ScopedTuning tuning(ctx);
  tuning->moe_shard_experts = 2;  // experts 0-1, 2-3, 4-5
  test::check_model(*this, parse(moe), 1, 9, Precision::bf16, 1e-3);
  test::check_model(*this, parse(tiny_next_json()), 2, 1, Precision::fp32, 1e-8);
}

}  // namespace test_moe_model
