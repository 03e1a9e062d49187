// Qwen3-Next models (model_type "qwen3_next") with dense MLPs: Gated DeltaNet
// and gated-attention layers side by side (issue 27's hybrid stack). The config parser's defaults and refusals;
// on the device against the double-precision reference: logits, a prefill and
// decode steps carrying both kinds of cache, truncate's rule, statistics of
// the attention layers, greedy generation. (The sparse MoE: test_moe_model.cpp.)
#include <cmath>
#include <nlohmann/json.hpp>

#include "golden.hpp"
#include "harness.hpp"
#include "model_check.hpp"
#include "model_weights.hpp"
#include "test_util.hpp"
#include "vkgate/error.hpp"
#include "vkgate/model.hpp"
#include "vkgate/model_config.hpp"
#include "vkgate/reference_model.hpp"
#include "vkgate/safetensors.hpp"

namespace test_qwen3_next_model {

using namespace vkgate;
using nlohmann::json;

namespace {

json tiny_config() { return test::tiny_qwen3_next_json(); }

ModelConfig parse(const json& j) { return parse_model_config_json(j.dump(), "config.json"); }

}  // namespace

TEST_CASE("qwen3_next model config: the layer kinds, Qwen3NextConfig's defaults, zero-centred norms") {
  const ModelConfig c = parse(tiny_config());
  REQUIRE(c.linear_attention.has_value());
  for (int i = 0; i < 4; ++i) {
    CAPTURE(i);
    const MixerConfig m = c.mixer(i);
    if (i % 2 == 1) {
      CHECK(std::holds_alternative<BlockConfig>(m));
    } else {
      REQUIRE(std::holds_alternative<GdnMixer>(m));
      CHECK(std::get<GdnMixer>(m).input_norm == NormKind::zero_centered);
      CHECK(std::get<GdnMixer>(m).config.num_value_heads == 4);
    }
  }
  CHECK(c.norm_kind() == NormKind::zero_centered);
  CHECK(c.attention.gate_kind == GateKind::elementwise);
  CHECK(c.attention.partial_rotary_factor == 0.25);
  json j = tiny_config();
  j.erase("head_dim");
  j.erase("full_attention_interval");
  j["layer_types"] = {"linear_attention", "full_attention", "full_attention", "linear_attention"};
  const ModelConfig d = parse(j);
  CHECK(d.attention.head_dim == 256);
  CHECK(std::holds_alternative<BlockConfig>(d.mixer(2)));
  CHECK(std::holds_alternative<GdnMixer>(d.mixer(3)));
  const std::vector<TensorSpec> names = expected_model_weights(c);
  auto has = [&](const std::string& n) {
    return std::any_of(names.begin(), names.end(), [&](const TensorSpec& s) { return s.name == n; });
  };
  CHECK(has("model.layers.0.linear_attn.in_proj_qkvz.weight"));
  CHECK(has("model.layers.0.input_layernorm.weight"));
  CHECK(has("model.layers.1.self_attn.q_proj.weight"));
  CHECK(!has("model.layers.1.linear_attn.A_log"));
}

TEST_CASE("qwen3_next model config: dense layers, a missing linear key, an impossible head split refused naming the key") {
  json j = tiny_config();
  j.erase("num_experts");  // Qwen3NextConfig's default: 512 experts in every layer
  CHECK(parse(j).moe_layers() == std::vector<int>{0, 1, 2, 3});
  j["num_experts"] = 8;
  j["num_experts_per_tok"] = 2;
  j["mlp_only_layers"] = {0, 1, 2, 3};
  CHECK(parse(j).moe_layers().empty());
  j["decoder_sparse_step"] = 8;  // (i + 1) % 8 == 0 for no layer of 4
  j["mlp_only_layers"] = json::array();
  CHECK(parse(j).moe_layers().empty());
  j = tiny_config();
  j.erase("linear_key_head_dim");
  test::expect_error([&] { parse(j); }, ErrorCode::invalid_config, {"linear_key_head_dim"});
  j = tiny_config();
  j["linear_num_value_heads"] = 3;
  test::expect_error([&] { parse(j); }, ErrorCode::invalid_config, {"linear_num_value_heads"});
}

TEST_CASE_FIXTURE(test::GpuTest, "qwen3_next model: logits, statistics, a prefill and decode steps over both kinds of "
                                 "cache, truncate, greedy generation") {
  const test::RandomModel m(parse(tiny_config()), rng);
  Model model(ctx, m.cfg, m.tensors);
  const int B = 2, N = 9, P = 5;
  const auto ids = test::random_ids(rng, size_t(B) * N, m.cfg.vocab_size);
  const auto full = reference::model_forward(m.cfg, m.map, {ids, B, N});
  ModelStats stats;
  test::check_close(model.logits(ids, B, N, &stats), full.logits, 1e-8);
  // The attention layers' rows only: the Gated DeltaNet layers (0, 2) have
  // neither attention probabilities nor a sigmoid gate.
  CHECK(stats.attention_layers == std::vector<int>{1, 3});
  CHECK(full.attention_layers == std::vector<int>{1, 3});
  REQUIRE(stats.first_token_attn.size() == 2 * 2);
  REQUIRE(full.first_token_attn.size() == 2 * 2);
  REQUIRE(stats.gate_mean.size() == 2);
  CHECK(stats.max_activation.size() == 4);
  CHECK(stats.moe_layers.empty());
  for (size_t i = 0; i < 2; ++i) {
    CHECK(stats.gate_mean[i] == doctest::Approx(full.gate_mean[i]).epsilon(1e-5));
    for (size_t h = 0; h < 2; ++h)
      CHECK(std::abs(stats.first_token_attn[2 * i + h] - full.first_token_attn[2 * i + h]) <= 1e-5);
  }

  auto last_rows = [&](int t) { return test::positions(full.logits, B, N, t); };
  auto columns = [&](int from, int count) { return test::positions(ids, B, N, from, count); };
  Sequence seq = model.start(B, N);
  test::check_close(model.extend(seq, columns(0, P), P), last_rows(P - 1), 1e-8);
  for (int t = P; t < N; ++t) {
    CAPTURE(t);
    test::check_close(model.extend(seq, columns(t, 1), 1), last_rows(t), 1e-8);
  }
  // The Gated DeltaNet states sum every position: no going back to position P.
  CHECK_THROWS_AS(seq.truncate(P), Error);
  seq.truncate(0);
  test::check_close(model.extend(seq, columns(0, P), P), last_rows(P - 1), 1e-8);

  const std::vector<int64_t> prompt(ids.begin(), ids.begin() + 4);
  GenerateOptions o;
  o.max_new_tokens = 6;
  o.stop_at_eos = false;
  CHECK(model.generate(prompt, o).ids == reference::greedy_generate(m.cfg, m.map, prompt, 6, false));
}

namespace {
std::string qwen3_5_dir() { return test::golden_dir() + "/wave3/models/qwen3_5_tiny_vlm_form"; }
}  // namespace

TEST_CASE("qwen3_5 model config: the text_config of Qwen3_5ForConditionalGeneration, Gated DeltaNet's separate "
          "projections, its RoPE sections, refusals naming the key") {
  const ModelConfig c = load_model_config(qwen3_5_dir());
  CHECK(c.model_type == "qwen3_5_text");
  CHECK(c.checkpoint_prefix == "model.language_model.");
  CHECK(c.tie_word_embeddings);
  CHECK(c.eos_token_ids == std::vector<int64_t>{255});  // from the top level
  REQUIRE(c.linear_attention.has_value());
  CHECK(c.linear_attention->separate_projections);
  CHECK(c.moe.num_experts == 0);
  CHECK(c.attention.partial_rotary_factor == 0.25);
  CHECK(c.attention.mrope_section == std::vector<int>{2, 1, 1});  // kept for GGUF; moot for text
  CHECK(c.attention.gate_kind == GateKind::elementwise);
  CHECK(c.norm_kind() == NormKind::zero_centered);
  CHECK(std::holds_alternative<GdnMixer>(c.mixer(0)));
  CHECK(std::holds_alternative<BlockConfig>(c.mixer(3)));
  const std::vector<TensorSpec> names = expected_model_weights(c);
  CHECK(std::any_of(names.begin(), names.end(),
                    [](const TensorSpec& s) { return s.name == "model.layers.0.linear_attn.in_proj_qkv.weight"; }));
  json j = json::parse(test::read_file_text(qwen3_5_dir() + "/config.json"));
  j.erase("text_config");
  test::expect_error([&] { parse(j); }, ErrorCode::invalid_config, {"config.json", "text_config"});
  j = json::parse(test::read_file_text(qwen3_5_dir() + "/config.json"));
  j["text_config"]["model_type"] = "qwen3_next";
  test::expect_error([&] { parse(j); }, ErrorCode::invalid_config, {"text_config.model_type"});
  j = json::parse(test::read_file_text(qwen3_5_dir() + "/config.json"));
  j["text_config"]["rope_parameters"]["mrope_section"] = {2, -1, 1};
  test::expect_error([&] { parse(j); }, ErrorCode::invalid_config, {"rope_parameters.mrope_section"});
}

TEST_CASE_FIXTURE(test::GpuTest, "qwen3_5 model: the golden wave-3 checkpoint in its multimodal form (logits in fp32 "
                                 "and fp16, max_activation, greedy ids), a random text-only model") {
  const std::string dir = qwen3_5_dir();
  const SafetensorsFile input(dir + "/input.safetensors"), expected(dir + "/expected.safetensors");
  const auto ids = input.at("input_ids").to_i64();
  const int T = int(ids.size());
  for (Precision p : {Precision::fp32, Precision::fp16}) {
    if (p != Precision::fp32 && !vk.info.storage16) continue;
    INFO(to_string(p));
    Model model = Model::load(ctx, dir, {p});
    model.set_poison(true);
    ModelStats stats;
    test::check_close(model.logits(ids, 1, T, &stats), expected.at("logits").to_f64(), p == Precision::fp32 ? 1e-8 : 1e-4);
    if (p != Precision::fp32) continue;
    const auto max_act = expected.at("stats.max_activation").to_f64();
    REQUIRE(stats.max_activation.size() == max_act.size());
    for (size_t l = 0; l < max_act.size(); ++l) CHECK(stats.max_activation[l] == doctest::Approx(max_act[l]).epsilon(1e-4));
    CHECK(stats.attention_layers == std::vector<int>{3});
    const json gen = json::parse(test::read_file_text(dir + "/generate.json"));
    GenerateOptions o;
    o.max_new_tokens = gen.at("max_new_tokens").get<int>();
    CHECK(model.generate(gen.at("prompt_ids").get<std::vector<int64_t>>(), o).ids ==
          gen.at("generated").get<std::vector<int64_t>>());
  }
  json text = tiny_config();
  text["model_type"] = "qwen3_5_text";
  text.erase("num_experts");
  const ModelConfig cfg = parse(text);
  REQUIRE(cfg.linear_attention->separate_projections);
  test::check_model(*this, cfg, 2, 5, Precision::fp32, 1e-8);
}

}  // namespace test_qwen3_next_model
