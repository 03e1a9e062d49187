// The whole-model CPU oracle (reference_model.hpp) and whole-model config
// parsing (model_config.hpp): the wave-2 golden qwen3 model tensor by tensor
// and its greedy ids, the MLP by hand, structural identities on random
// llama-style models, and every config error naming the file and the key.
// CPU only.
#include "doctest.hpp"
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "test_util.hpp"
#include "golden.hpp"
#include "vkgate/checkpoint.hpp"
#include "vkgate/config.hpp"
#include "vkgate/error.hpp"
#include "vkgate/model_config.hpp"
#include "vkgate/reference.hpp"
#include "vkgate/reference_gla.hpp"
#include "vkgate/reference_model.hpp"
#include "vkgate/safetensors.hpp"
#include "vkgate/weights.hpp"

namespace test_model_reference {

namespace fs = std::filesystem;
using nlohmann::json;
using namespace vkgate;
using test::max_abs_diff;
using test::expect_error;
using test::read_text;
using test::TempDir;
using test::write_text;
using reference::ModelInputs;
using reference::ModelResult;

namespace {

const std::string kSource = "model/config.json";


using test::w1_dir;

// A model's weights as fp32, keyed by full name (expected_model_weights order), owning their storage.
struct Weights {
  std::map<std::string, std::vector<float>> store;
  WeightMap map;
  void set(const std::string& name, std::vector<float> values) {
    map[name] = store[name] = std::move(values);
  }
};

// The w1 golden model: config from its directory, weights from model.safetensors.
struct GoldenModel {
  ModelConfig cfg = load_model_config(w1_dir());
  SafetensorsFile file{w1_dir() + "/model.safetensors"};
  Weights w;
  GoldenModel() {
    for (const TensorSpec& spec : expected_model_weights(cfg)) w.set(spec.name, file.at(spec.name).to_f32());
  }
};

// Random weights in [-0.5, 0.5] for every tensor of `cfg`.
Weights random_weights(const ModelConfig& cfg, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-0.5f, 0.5f);
  Weights w;
  for (const TensorSpec& spec : expected_model_weights(cfg)) {
    std::vector<float> v(size_t(spec.numel()));
    for (float& x : v) x = dist(rng);
    w.set(spec.name, std::move(v));
  }
  return w;
}

std::vector<int64_t> random_ids(size_t n, int64_t vocab, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int64_t> dist(0, vocab - 1);
  std::vector<int64_t> ids(n);
  for (int64_t& id : ids) id = dist(rng);
  return ids;
}

// A tiny Llama: GQA 4 → 2, attention_bias and mlp_bias, `layers` layers.
json llama_json(int layers = 1) {
  return {{"model_type", "llama"}, {"hidden_size", 16},      {"num_attention_heads", 4},
          {"num_key_value_heads", 2}, {"num_hidden_layers", layers}, {"intermediate_size", 24},
          {"vocab_size", 40},        {"attention_bias", true}, {"mlp_bias", true},
          {"rms_norm_eps", 1e-5},    {"rope_theta", 500000.0}, {"eos_token_id", 2}};
}

// The smallest qwen3 config.json: every optional key left to its default.
json qwen3_json() {
  return {{"model_type", "qwen3"},      {"hidden_size", 64},     {"num_attention_heads", 4},
          {"num_hidden_layers", 2},      {"intermediate_size", 96}, {"vocab_size", 200}};
}

ModelConfig parse_model(const json& j) { return parse_model_config_json(j.dump(), kSource); }

// A tiny fla GLA model: D 64, H 4 over KV 2 (d_k 8, d_v 16), the default low-rank forget gate (r 16).
json gla_json(int layers = 2) {
  return {{"model_type", "gla"},   {"hidden_size", 64},      {"num_hidden_layers", layers},
          {"num_heads", 4},        {"num_kv_heads", 2},      {"expand_k", 0.5},
          {"expand_v", 1},         {"hidden_act", "swish"},  {"norm_eps", 1e-5},
          {"vocab_size", 100},     {"intermediate_size", 96}, {"eos_token_id", 2},
          {"tie_word_embeddings", false}};
}

// Plain RMSNorm x̂·w of rows of `dim` doubles, written out here as the check of the oracle's.
std::vector<double> rms_norm_by_hand(const std::vector<double>& x, std::span<const float> w, size_t dim, double eps) {
  std::vector<double> y(x.size());
  for (size_t r = 0; r < x.size() / dim; ++r) {
    double ss = 0;
    for (size_t i = 0; i < dim; ++i) ss += x[r * dim + i] * x[r * dim + i];
    for (size_t i = 0; i < dim; ++i) y[r * dim + i] = x[r * dim + i] / std::sqrt(ss / double(dim) + eps) * w[i];
  }
  return y;
}



}  // namespace

// ---- the golden model ----

TEST_CASE("model reference: the w1 golden qwen3 model reproduces every expected tensor") {
  GoldenModel g;
  const SafetensorsFile input(w1_dir() + "/input.safetensors");
  const SafetensorsFile expected(w1_dir() + "/expected.safetensors");
  const TensorView& ids = input.at("input_ids");
  REQUIRE(ids.dtype == DType::I64);
  REQUIRE(ids.shape.size() == 2);
  const std::vector<int64_t> id_values = ids.to_i64();
  const ModelResult r = reference::model_forward(g.cfg, g.w.map, {id_values, ids.shape[0], ids.shape[1]});

  const size_t L = size_t(g.cfg.num_hidden_layers);
  REQUIRE(r.hidden_states.size() == L + 1);
  std::map<std::string, const std::vector<double>*> ours = {
      {"logits", &r.logits},
      {"stats.first_token_attn", &r.first_token_attn},
      {"stats.max_activation", &r.max_activation},
      {"stats.gate_mean", &r.gate_mean},
      {"debug.final_norm", &r.final_norm}};
  for (size_t i = 0; i <= L; ++i) ours["debug.hidden_states." + std::to_string(i)] = &r.hidden_states[i];
  CHECK(ours.size() == expected.names().size());  // every expected tensor is checked
  for (const auto& [name, got] : ours) {
    CAPTURE(name);
    const TensorView& want = expected.at(name);
    REQUIRE(int64_t(got->size()) == want.numel());
    // The golden values are float64 results stored as F32: the metric is normalised by ours.
    const reference::Diff d = reference::compare(want.to_f32(), *got);
    CAPTURE(d.max_abs);
    CHECK(d.nmse <= 1e-10);
  }
}

TEST_CASE("model reference: greedy decoding of the w1 golden model gives the reference's ids") {
  GoldenModel g;
  const json gen = json::parse(test::read_file_text(w1_dir() + "/generate.json"));
  const auto prompt = gen.at("prompt_ids").get<std::vector<int64_t>>();
  const auto want = gen.at("generated").get<std::vector<int64_t>>();
  const int steps = gen.at("max_new_tokens").get<int>();
  CHECK(reference::greedy_generate(g.cfg, g.w.map, prompt, steps) == want);

  // An eos id ends the generation after it is emitted, unless stop_at_eos is off.
  g.cfg.eos_token_ids = {want.at(2)};
  CHECK(reference::greedy_generate(g.cfg, g.w.map, prompt, steps) ==
        std::vector<int64_t>(want.begin(), want.begin() + 3));
  CHECK(reference::greedy_generate(g.cfg, g.w.map, prompt, steps, false) == want);
  CHECK(reference::greedy_generate(g.cfg, g.w.map, prompt, 0).empty());
  expect_error([&] { reference::greedy_generate(g.cfg, g.w.map, {}, 1); }, ErrorCode::invalid_argument,
               {"greedy_generate", "prompt is empty"});
}

// ---- the MLP ----

TEST_CASE("model reference: the MLP against hand-computed values for each activation") {
  // x = [1, -2]; gate rows pick g = [1, -1], up rows give u = [2, 2];
  // y = down · (act(g) ⊙ u) = [2·act(1) + act(-1), -2·act(-1)].
  const std::vector<double> x = {1, -2};
  const std::vector<float> gate_w = {1, 0, 0, 0.5f}, up_w = {2, 0, 0, -1}, down_w = {1, 0.5f, 0, -1};
  struct Case {
    Activation act;
    double at_1, at_minus_1;  // act(1), act(-1), from the formulas in double (Python's math)
    double y0, y1;
  };
  const Case cases[] = {
      {Activation::silu, 0.7310585786300049, -0.2689414213699951, 1.1931757358900148, 0.5378828427399902},
      {Activation::gelu, 0.8413447460685429, -0.15865525393145707, 1.5240342382056289, 0.31731050786291415},
      {Activation::gelu_tanh, 0.8411919906082768, -0.15880800939172324, 1.5235759718248303, 0.3176160187834465},
      {Activation::sigmoid, 0.7310585786300049, 0.2689414213699951, 1.7310585786300048, -0.5378828427399902},
  };
  for (const Case& c : cases) {
    CAPTURE(to_string(c.act));
    CHECK(reference::activation(c.act, 1.0) == doctest::Approx(c.at_1).epsilon(1e-15));
    CHECK(reference::activation(c.act, -1.0) == doctest::Approx(c.at_minus_1).epsilon(1e-15));
    const std::vector<double> y = reference::mlp(x, 1, 2, 2, c.act, gate_w, up_w, down_w);
    REQUIRE(y.size() == 2);
    CHECK(y[0] == doctest::Approx(c.y0).epsilon(1e-15));
    CHECK(y[1] == doctest::Approx(c.y1).epsilon(1e-15));
  }
  CHECK(reference::activation(Activation::silu, 0.0) == 0.0);
  CHECK(reference::activation(Activation::silu, -1000.0) == 0.0);  // no NaN where exp overflows
  CHECK(reference::activation(Activation::sigmoid, -1000.0) == 0.0);
}

TEST_CASE("model reference: the MLP with biases, and its size errors name the tensor") {
  // Zero gate weights: g = gate_b = [1, -1]; u = [x0 + 3, 1] = [4, 1];
  // y = [act(1)·4 + act(-1)·1 + 0.25, 2·act(1)·4 - 0.5] with silu.
  const std::vector<double> x = {1, -2};
  const std::vector<float> gate_w = {0, 0, 0, 0}, up_w = {1, 0, 0, 0}, down_w = {1, 1, 2, 0};
  const std::vector<float> gate_b = {1, -1}, up_b = {3, 1}, down_b = {0.25f, -0.5f};
  const std::vector<double> y =
      reference::mlp(x, 1, 2, 2, Activation::silu, gate_w, up_w, down_w, gate_b, up_b, down_b);
  CHECK(y[0] == doctest::Approx(2.9052928931500244).epsilon(1e-15));
  CHECK(y[1] == doctest::Approx(5.348468629040039).epsilon(1e-15));

  const std::vector<float> short_w = {1, 2, 3};
  expect_error([&] { reference::mlp(x, 1, 2, 2, Activation::silu, gate_w, short_w, down_w); },
               ErrorCode::invalid_argument, {"reference::mlp", "'up_w' has 3 elements, expected [2, 2]"});
  expect_error([&] { reference::mlp(x, 1, 2, 2, Activation::gelu, gate_w, up_w, down_w, {}, {}, short_w); },
               ErrorCode::invalid_argument, {"'down_b'"});
  expect_error([&] { reference::mlp(x, 2, 2, 2, Activation::gelu, gate_w, up_w, down_w); },
               ErrorCode::invalid_argument, {"'x'"});
}

// ---- structural identities on random llama-style models ----

TEST_CASE("model reference: one llama layer is embedding, block, MLP, norm and lm_head composed") {
  const ModelConfig cfg = parse_model(llama_json());
  REQUIRE(cfg.attention.qkv_bias);
  REQUIRE(cfg.mlp_bias);
  const Weights w = random_weights(cfg, 11);
  const int64_t B = 2, T = 5, D = cfg.hidden_size(), V = cfg.vocab_size;
  const std::vector<int64_t> ids = random_ids(size_t(B * T), V, 12);
  const ModelResult r = reference::model_forward(cfg, w.map, {ids, B, T});

  // By hand from the public ops: the embedding rows are floats, so the block runs on them exactly.
  const std::vector<float>& table = w.store.at("model.embed_tokens.weight");
  std::vector<float> x;
  for (int64_t id : ids) x.insert(x.end(), table.begin() + id * D, table.begin() + (id + 1) * D);
  WeightMap block;
  for (const auto& [name, t] : layer_attention_tensors(cfg, as_tensors(w.map), 0))
    block[name] = {reinterpret_cast<const float*>(t.bytes.data()), t.bytes.size() / sizeof(float)};
  const reference::Result att = reference::forward(cfg.attention, block, {.hidden = x, .batch = B, .tokens = T});
  const double eps = cfg.attention.rms_norm_eps;
  const std::vector<double> hn =
      rms_norm_by_hand(att.output, w.map.at("model.layers.0.post_attention_layernorm.weight"), size_t(D), eps);
  const auto& m = w.map;
  std::vector<double> out = reference::mlp(
      hn, B * T, D, cfg.intermediate_size, cfg.hidden_act, m.at("model.layers.0.mlp.gate_proj.weight"),
      m.at("model.layers.0.mlp.up_proj.weight"), m.at("model.layers.0.mlp.down_proj.weight"),
      m.at("model.layers.0.mlp.gate_proj.bias"), m.at("model.layers.0.mlp.up_proj.bias"),
      m.at("model.layers.0.mlp.down_proj.bias"));
  for (size_t i = 0; i < out.size(); ++i) out[i] += att.output[i];
  const std::vector<double> fn = rms_norm_by_hand(out, m.at("model.norm.weight"), size_t(D), eps);
  std::vector<double> logits(size_t(B * T * V));
  for (int64_t row = 0; row < B * T; ++row)
    for (int64_t v = 0; v < V; ++v)
      for (int64_t d = 0; d < D; ++d)
        logits[size_t(row * V + v)] += fn[size_t(row * D + d)] * m.at("lm_head.weight")[size_t(v * D + d)];

  CHECK(r.hidden_states.at(0) == std::vector<double>(x.begin(), x.end()));
  CHECK(max_abs_diff(r.hidden_states.at(1), out) <= 1e-13);
  CHECK(max_abs_diff(r.final_norm, fn) <= 1e-13);
  CHECK(max_abs_diff(r.logits, logits) <= 1e-12);
  CHECK(r.first_token_attn == att.first_token_attn);
  double max_abs = 0;
  for (double v : r.hidden_states[1]) max_abs = std::max(max_abs, std::abs(v));
  CHECK(r.max_activation == std::vector<double>{max_abs});
  CHECK(r.gate_mean.empty());  // llama has no gate
}

TEST_CASE("model reference: tied embeddings are lm_head, layers compose") {
  json j = llama_json(2);
  const ModelConfig untied = parse_model(j);
  j["tie_word_embeddings"] = true;
  const ModelConfig tied = parse_model(j);
  Weights w = random_weights(untied, 21);
  w.set("lm_head.weight", w.store.at("model.embed_tokens.weight"));
  WeightMap without_head = w.map;
  without_head.erase("lm_head.weight");
  const std::vector<int64_t> ids = random_ids(6, untied.vocab_size, 22);
  const ModelResult a = reference::model_forward(untied, w.map, {ids, 1, 6});
  const ModelResult b = reference::model_forward(tied, without_head, {ids, 1, 6});
  CHECK(a.logits == b.logits);
  expect_error([&] { reference::model_forward(untied, without_head, {ids, 1, 6}); }, ErrorCode::missing_tensor,
               {"'lm_head.weight'"});

  // The first layer of a two-layer model is a one-layer model's only layer.
  const ModelResult one = reference::model_forward(parse_model(llama_json(1)), w.map, {ids, 2, 3});
  const ModelResult two = reference::model_forward(untied, w.map, {ids, 2, 3});
  CHECK(one.hidden_states.at(1) == two.hidden_states.at(1));
  CHECK(two.max_activation.size() == 2);
  CHECK(two.first_token_attn.size() == 2 * 4);
}

TEST_CASE("model reference: bad ids and weights are errors naming the id or the tensor") {
  const ModelConfig cfg = parse_model(llama_json());
  Weights w = random_weights(cfg, 31);
  std::vector<int64_t> ids = random_ids(6, cfg.vocab_size, 32);
  ids[4] = 40;
  expect_error([&] { reference::model_forward(cfg, w.map, {ids, 2, 3}); }, ErrorCode::invalid_argument,
               {"input id 40 at [1, 1]", "vocab_size 40"});
  ids[4] = 0;
  expect_error([&] { reference::model_forward(cfg, w.map, {ids, 2, 2}); }, ErrorCode::invalid_argument, {"'ids'"});

  WeightMap missing = w.map;
  missing.erase("model.layers.0.mlp.down_proj.bias");
  expect_error([&] { reference::model_forward(cfg, missing, {ids, 2, 3}); }, ErrorCode::missing_tensor,
               {"'model.layers.0.mlp.down_proj.bias'"});
  WeightMap short_map = w.map;
  short_map["model.layers.0.self_attn.o_proj.bias"] = std::span(w.store.at("model.norm.weight")).first(3);
  expect_error([&] { reference::model_forward(cfg, short_map, {ids, 2, 3}); }, ErrorCode::shape_mismatch,
               {"'model.layers.0.self_attn.o_proj.bias' has 3 elements, expected shape [16]"});
}

// ---- config.json of a whole model ----

TEST_CASE("model config: qwen3 defaults and keys") {
  const ModelConfig c = parse_model(qwen3_json());
  CHECK(c.model_type == "qwen3");
  CHECK(c.attention.head_dim == 128);  // Qwen3Config's default, not hidden / heads
  CHECK(c.attention.num_kv_heads == 4);
  CHECK(c.attention.use_qk_norm);
  CHECK(c.attention.gate_kind == GateKind::none);
  CHECK(c.attention.gate_layout == GateLayout::official_grouped);
  CHECK(c.attention.norm_kind == NormKind::plain);
  CHECK_FALSE(c.attention.qkv_bias);
  CHECK(c.attention.rotary_dim() == 128);
  CHECK(c.attention.residual);
  CHECK(c.attention.causal);
  CHECK(c.num_hidden_layers == 2);
  CHECK(c.intermediate_size == 96);
  CHECK(c.vocab_size == 200);
  CHECK(c.hidden_act == Activation::silu);
  CHECK_FALSE(c.mlp_bias);
  CHECK_FALSE(c.tie_word_embeddings);
  CHECK(c.eos_token_ids.empty());

  json j = qwen3_json();
  j.update({{"use_qk_norm", false}, {"headwise_attn_output_gate", true}, {"qkv_bias", true},
            {"hidden_act", "gelu_pytorch_tanh"}, {"eos_token_id", json::array({3, 199})}, {"head_dim", 16},
            {"mlp_bias", true}, {"layer_types", json::array({"full_attention", "full_attention"})}});
  const ModelConfig k = parse_model(j);
  CHECK_FALSE(k.attention.use_qk_norm);
  CHECK(k.attention.gate_kind == GateKind::headwise);
  CHECK(k.attention.q_proj_rows() == 4 * (16 + 1));
  CHECK(k.attention.qkv_bias);
  CHECK(k.attention.o_bias);  // the paper's qkv_bias puts a bias on o_proj too
  CHECK(k.hidden_act == Activation::gelu_tanh);
  CHECK(k.eos_token_ids == std::vector<int64_t>{3, 199});
  CHECK_FALSE(k.mlp_bias);  // Qwen3MLP has no bias, whatever the key says
  j["attention_bias"] = true;
  j.erase("qkv_bias");
  CHECK(parse_model(j).attention.o_bias);
}

TEST_CASE("model config: llama defaults and keys") {
  json j = llama_json();
  j.erase("attention_bias");
  j.erase("mlp_bias");
  j["headwise_attn_output_gate"] = true;  // not a Llama key: LlamaAttention has no gate
  const ModelConfig c = parse_model(j);
  CHECK(c.attention.head_dim == 4);  // hidden / heads
  CHECK_FALSE(c.attention.use_qk_norm);
  CHECK(c.attention.gate_kind == GateKind::none);
  CHECK_FALSE(c.attention.qkv_bias);
  CHECK_FALSE(c.attention.o_bias);
  CHECK_FALSE(c.mlp_bias);
  CHECK(c.attention.rope_theta == 500000.0);
  CHECK(c.attention.rms_norm_eps == 1e-5);
  CHECK(c.eos_token_ids == std::vector<int64_t>{2});
  const ModelConfig b = parse_model(llama_json());
  CHECK(b.attention.qkv_bias);
  CHECK(b.attention.o_bias);
  CHECK(b.mlp_bias);
}

TEST_CASE("model config: the block parser reads the same attention as the model parser") {
  json gated = qwen3_json();
  gated.update({{"head_dim", 16}, {"elementwise_attn_output_gate", true}, {"attention_bias", true}});
  for (const std::string& text : {qwen3_json().dump(), gated.dump(), llama_json().dump(),
                                  test::read_file_text(w1_dir() + "/config.json")}) {
    CAPTURE(text);
    const BlockConfig a = parse_config_json(text, kSource);
    const BlockConfig m = parse_model_config_json(text, kSource).attention;
    CHECK(a.hidden_size == m.hidden_size);
    CHECK(a.num_heads == m.num_heads);
    CHECK(a.num_kv_heads == m.num_kv_heads);
    CHECK(a.head_dim == m.head_dim);
    CHECK(a.rope_theta == m.rope_theta);
    CHECK(a.gate_kind == m.gate_kind);
    CHECK(a.gate_layout == m.gate_layout);
    CHECK(a.norm_kind == m.norm_kind);
    CHECK(a.use_qk_norm == m.use_qk_norm);
    CHECK(a.qkv_bias == m.qkv_bias);
    CHECK(a.o_bias == m.o_bias);
    CHECK(a.num_hidden_layers == m.num_hidden_layers);
    CHECK_FALSE(a.residual);  // `vkgate run` returns the block's own output; the model adds x
  }
}

TEST_CASE("model config: errors name the file and the key") {
  struct Bad {
    json patch;  // merged into qwen3_json(); null removes a key
    const char* mention;
  };
  const Bad bad[] = {
      {{{"model_type", "mistral"}}, R"(key 'model_type' is "mistral")"},
      {{{"model_type", "qwen2"}}, R"(key 'model_type' is "qwen2")"},
      {{{"model_type", "qwen3_next"}}, "key 'linear_num_key_heads' is required"},
      {{{"model_type", nullptr}}, "key 'model_type' is required"},
      {{{"hidden_act", "relu"}}, R"(key 'hidden_act' must be one of silu, gelu, gelu_pytorch_tanh, sigmoid, got "relu")"},
      {{{"rope_scaling", {{"rope_type", "longrope"}, {"factor", 4.0}}}}, "key 'rope_scaling.rope_type' is \"longrope\""},
      {{{"rope_scaling", {{"rope_type", "linear"}}}}, "key 'rope_scaling.factor' is required"},
      {{{"intermediate_size", nullptr}}, "key 'intermediate_size' is required"},
      {{{"vocab_size", nullptr}}, "key 'vocab_size' is required"},
      {{{"num_hidden_layers", nullptr}}, "key 'num_hidden_layers' is required"},
      {{{"hidden_size", nullptr}}, "key 'hidden_size' is required"},
      {{{"vocab_size", 1 << 25}}, "key 'vocab_size' must be in 1..16777216"},
      {{{"num_hidden_layers", 1000000000}}, "key 'num_hidden_layers' must be in 1..4096, got 1000000000"},
      {{{"hidden_size", 1000000000}}, "key 'hidden_size' must be in 1..16777216, got 1000000000"},
      {{{"num_attention_heads", 1 << 30}}, "key 'num_attention_heads' must be in 1..16777216"},
      {{{"num_key_value_heads", 1 << 30}}, "key 'num_key_value_heads' must be in 1..16777216"},
      {{{"intermediate_size", 1 << 30}}, "key 'intermediate_size' must be in 1..16777216"},
      {{{"eos_token_id", 200}}, "key 'eos_token_id' holds 200, outside [0, vocab_size 200)"},
      {{{"eos_token_id", {1, -1}}}, "key 'eos_token_id' holds -1"},
      {{{"eos_token_id", "</s>"}}, "key 'eos_token_id' must be an integer or a list of integers"},
      {{{"eos_token_id", {1, 2.5}}}, "key 'eos_token_id' must be an integer or a list of integers"},
      {{{"mlp_bias", "yes"}}, "key 'mlp_bias'"},
      {{{"tie_word_embeddings", 0}}, "key 'tie_word_embeddings'"},
      {{{"use_sliding_window", true}}, "key 'use_sliding_window' is true"},
      {{{"layer_types", json::array({"full_attention", "sliding_attention"})}}, "key 'layer_types': layer 1 is a 'sliding_attention' layer"},
      {{{"full_attention_interval", 2}}, "key 'full_attention_interval': layer 0"},
  };
  for (const Bad& b : bad) {
    json j = qwen3_json();
    j.merge_patch(b.patch);
    CAPTURE(j.dump());
    expect_error([&] { parse_model(j); }, ErrorCode::invalid_config, {kSource + ": ", b.mention});
  }
  expect_error([] { parse_model_config_json("{\"model_type\": ", kSource); }, ErrorCode::invalid_config,
               {kSource, "not valid JSON"});
}

TEST_CASE("model config: validate() refuses what a model cannot be") {
  const ModelConfig good = parse_model(qwen3_json());
  auto refuse = [&](const std::function<void(ModelConfig&)>& change, const std::string& mention) {
    ModelConfig c = good;
    change(c);
    expect_error([&] { c.validate(); }, ErrorCode::invalid_config, {mention});
    expect_error([&] { expected_model_weights(c); }, ErrorCode::invalid_config, {mention});
  };
  refuse([](ModelConfig& c) { c.attention.residual = false; }, "key 'residual' must be true");
  refuse([](ModelConfig& c) { c.attention.causal = false; }, "key 'causal' must be true");
  refuse([](ModelConfig& c) { c.num_hidden_layers = 0; }, "key 'num_hidden_layers'");
  refuse([](ModelConfig& c) { c.intermediate_size = -1; }, "key 'intermediate_size'");
  refuse([](ModelConfig& c) { c.eos_token_ids = {7, 200}; }, "key 'eos_token_id' holds 200");
  refuse([](ModelConfig& c) { c.attention.num_kv_heads = 3; }, "num_key_value_heads");
}

TEST_CASE("model config: load_model_config reads generation_config.json's eos") {
  const ModelConfig golden = load_model_config(w1_dir());
  CHECK(golden.eos_token_ids == std::vector<int64_t>{199});
  CHECK(golden.attention.gate_kind == GateKind::elementwise);
  CHECK(golden.attention.head_dim == 16);

  TempDir dir;
  json config = qwen3_json();
  config["eos_token_id"] = 5;
  dir.write("config.json", config.dump());
  CHECK(load_model_config(dir.path.string()).eos_token_ids == std::vector<int64_t>{5});
  dir.write("generation_config.json", R"({"eos_token_id": [7, 8], "do_sample": false})");
  CHECK(load_model_config(dir.path.string()).eos_token_ids == std::vector<int64_t>{7, 8});
  dir.write("generation_config.json", R"({"eos_token_id": null, "temperature": 0.7})");
  CHECK(load_model_config(dir.path.string()).eos_token_ids == std::vector<int64_t>{5});
  const std::string gen = dir.write("generation_config.json", R"({"eos_token_id": 300})");
  expect_error([&] { load_model_config(dir.path.string()); }, ErrorCode::invalid_config,
               {gen + ": key 'eos_token_id' holds 300"});
  dir.write("generation_config.json", "{");
  expect_error([&] { load_model_config(dir.path.string()); }, ErrorCode::invalid_config, {gen, "not valid JSON"});
  expect_error([&] { load_model_config((dir.path / "config.json").string()); }, ErrorCode::io, {"not a directory"});
  fs::remove(dir.path / "config.json");
  expect_error([&] { load_model_config(dir.path.string()); }, ErrorCode::io, {"config.json", "cannot open"});
}

// ---- tensor names and shapes ----

TEST_CASE("model config: expected_model_weights is exactly the golden qwen3 checkpoint") {
  const ModelConfig cfg = load_model_config(w1_dir());
  const SafetensorsFile file(w1_dir() + "/model.safetensors");
  std::set<std::string> names;
  for (const TensorSpec& spec : expected_model_weights(cfg)) {
    CAPTURE(spec.name);
    REQUIRE(file.contains(spec.name));
    CHECK(file.at(spec.name).shape == spec.shape);
    names.insert(spec.name);
  }
  CHECK(names.size() == file.names().size());
  CHECK(file.at("model.layers.1.self_attn.q_proj.weight").shape == std::vector<int64_t>{4 * 16 * 2, 64});
}

TEST_CASE("model config: expected_model_weights for ungated and tied qwen3 and for llama with biases") {
  auto names_of = [](const ModelConfig& c) {
    std::map<std::string, std::vector<int64_t>> m;
    for (const TensorSpec& s : expected_model_weights(c)) m[s.name] = s.shape;
    return m;
  };
  json q = qwen3_json();
  q.update({{"head_dim", 16}, {"num_key_value_heads", 2}, {"tie_word_embeddings", true}});
  const auto tied = names_of(parse_model(q));
  CHECK(tied.size() == 1 + 2 * 11 + 1);  // no lm_head
  CHECK(tied.at("model.embed_tokens.weight") == std::vector<int64_t>{200, 64});
  CHECK(tied.at("model.layers.1.self_attn.q_proj.weight") == std::vector<int64_t>{64, 64});  // no gate rows
  CHECK(tied.at("model.layers.1.self_attn.k_norm.weight") == std::vector<int64_t>{16});
  CHECK(tied.at("model.layers.0.mlp.down_proj.weight") == std::vector<int64_t>{64, 96});
  CHECK(tied.count("lm_head.weight") == 0);
  q["tie_word_embeddings"] = false;
  q["headwise_attn_output_gate"] = true;
  const auto gated = names_of(parse_model(q));
  CHECK(gated.at("lm_head.weight") == std::vector<int64_t>{200, 64});
  CHECK(gated.at("model.layers.0.self_attn.q_proj.weight") == std::vector<int64_t>{4 * 17, 64});

  std::vector<std::string> llama;
  for (const TensorSpec& s : expected_model_weights(parse_model(llama_json()))) llama.push_back(s.name);
  const std::string p = "model.layers.0.";
  CHECK(llama == std::vector<std::string>{
                     "model.embed_tokens.weight", p + "input_layernorm.weight", p + "self_attn.q_proj.weight",
                     p + "self_attn.k_proj.weight", p + "self_attn.v_proj.weight", p + "self_attn.o_proj.weight",
                     p + "self_attn.q_proj.bias", p + "self_attn.k_proj.bias", p + "self_attn.v_proj.bias",
                     p + "self_attn.o_proj.bias", p + "post_attention_layernorm.weight", p + "mlp.gate_proj.weight",
                     p + "mlp.up_proj.weight", p + "mlp.down_proj.weight", p + "mlp.gate_proj.bias",
                     p + "mlp.up_proj.bias", p + "mlp.down_proj.bias", "model.norm.weight", "lm_head.weight"});
}

TEST_CASE("model config: layer_attention_tensors views a layer under bare names") {
  const ModelConfig cfg = load_model_config(w1_dir());
  const SafetensorsFile file(w1_dir() + "/model.safetensors");
  TensorMap model;
  for (const std::string& name : file.names()) {
    const TensorView& t = file.at(name);
    model[name] = HostTensor{t.dtype, t.shape, t.bytes};
  }
  const TensorMap layer1 = layer_attention_tensors(cfg, model, 1);
  CHECK(layer1.size() == expected_weights(cfg.attention).size());
  CHECK(layer1.at("input_layernorm.weight").bytes.data() ==
        file.at("model.layers.1.input_layernorm.weight").bytes.data());  // a view, not a copy
  CHECK(layer1.at("k_norm.weight").bytes.data() == file.at("model.layers.1.self_attn.k_norm.weight").bytes.data());
  CHECK_NOTHROW(check_weights(cfg.attention, layer1));

  model.erase("model.layers.1.self_attn.k_norm.weight");
  expect_error([&] { layer_attention_tensors(cfg, model, 1); }, ErrorCode::missing_tensor,
               {"'model.layers.1.self_attn.k_norm.weight'"});
  CHECK_NOTHROW(layer_attention_tensors(cfg, model, 0));
  expect_error([&] { layer_attention_tensors(cfg, model, 2); }, ErrorCode::invalid_argument,
               {"layer 2 is out of range", "0..1"});
}

// ---- GLA models (model_type "gla", fla's layout) ----

namespace {

// The GLA model's logits [B·T, V] composed here from its pieces: the embedding
// rows, per layer h = x + gla(attn_norm(x)) (the layer oracle, fed fla's
// tensor names by hand) and x = h + mlp(mlp_norm(h)), then lm_head(norm(x)).
std::vector<double> gla_logits_by_hand(const ModelConfig& cfg, const Weights& w, const std::vector<int64_t>& ids,
                                       int batch, int tokens) {
  const size_t D = 64, V = 100, rows = ids.size();
  const double eps = 1e-5;
  const std::vector<float>& table = w.store.at("model.embeddings.weight");
  std::vector<double> x;
  for (int64_t id : ids) x.insert(x.end(), table.begin() + id * int64_t(D), table.begin() + (id + 1) * int64_t(D));
  for (int i = 0; i < cfg.num_hidden_layers; ++i) {
    const std::string prefix = "model.layers." + std::to_string(i) + ".";
    WeightMap bare{{"attn_norm.weight", w.map.at(prefix + "attn_norm.weight")}};
    for (const char* name : {"q_proj.weight", "k_proj.weight", "v_proj.weight", "g_proj.weight", "gk_proj.0.weight",
                             "gk_proj.1.weight", "gk_proj.1.bias", "g_norm_swish_gate.weight", "o_proj.weight"})
      bare[name] = w.map.at(prefix + "attn." + name);
    reference::GlaInputs in;
    in.batch = batch;
    in.tokens = tokens;
    const std::vector<double> att = reference::internal::gla_forward_d(*cfg.gla, bare, x, in).output;
    std::vector<double> h(x.size());
    for (size_t j = 0; j < h.size(); ++j) h[j] = x[j] + att[j];
    const std::vector<double> m =
        reference::mlp(rms_norm_by_hand(h, w.map.at(prefix + "mlp_norm.weight"), D, eps), int64_t(rows), 64, 96,
                       Activation::silu, w.map.at(prefix + "mlp.gate_proj.weight"),
                       w.map.at(prefix + "mlp.up_proj.weight"), w.map.at(prefix + "mlp.down_proj.weight"));
    for (size_t j = 0; j < h.size(); ++j) x[j] = h[j] + m[j];
  }
  const std::vector<double> xn = rms_norm_by_hand(x, w.map.at("model.norm.weight"), D, eps);
  const std::span<const float> head =
      cfg.tie_word_embeddings ? w.map.at("model.embeddings.weight") : w.map.at("lm_head.weight");
  std::vector<double> logits(rows * V);
  for (size_t r = 0; r < rows; ++r)
    for (size_t v = 0; v < V; ++v) {
      double acc = 0;
      for (size_t d = 0; d < D; ++d) acc += xn[r * D + d] * double(head[v * D + d]);
      logits[r * V + v] = acc;
    }
  return logits;
}

}  // namespace

TEST_CASE("gla model reference: logits are embedding, GLA layers, MLPs, norm and lm_head composed") {
  for (const bool tied : {false, true}) {
    CAPTURE(tied);
    json j = gla_json();
    j["tie_word_embeddings"] = tied;
    const ModelConfig cfg = parse_model(j);
    const Weights w = random_weights(cfg, tied ? 41 : 42);
    const std::vector<int64_t> ids = random_ids(10, cfg.vocab_size, 43);
    const ModelResult r = reference::model_forward(cfg, w.map, {ids, 2, 5});
    CHECK(max_abs_diff(r.logits, gla_logits_by_hand(cfg, w, ids, 2, 5)) < 1e-10);
    CHECK(r.hidden_states.size() == 3);
    CHECK(r.max_activation.size() == 2);
    CHECK(r.max_activation[1] > 0);
    // No attention probabilities and no sigmoid gate in a GLA layer.
    CHECK(r.first_token_attn.empty());
    CHECK(r.gate_mean.empty());

    // Each sequence of a batch carries its own state: batched rows are the sequences run alone.
    const ModelResult second = reference::model_forward(cfg, w.map, {std::span(ids).subspan(5), 1, 5});
    CHECK(std::equal(second.logits.begin(), second.logits.end(), r.logits.begin() + 5 * 100));
  }
}

TEST_CASE("gla model reference: tied is lm_head = embeddings, and the first layer is a one-layer model's") {
  const ModelConfig untied = parse_model(gla_json());
  json j = gla_json();
  j["tie_word_embeddings"] = true;
  const ModelConfig tied = parse_model(j);
  Weights w = random_weights(untied, 51);
  w.set("lm_head.weight", w.store.at("model.embeddings.weight"));
  WeightMap without_head = w.map;
  without_head.erase("lm_head.weight");
  const std::vector<int64_t> ids = random_ids(6, untied.vocab_size, 52);
  CHECK(reference::model_forward(untied, w.map, {ids, 1, 6}).logits ==
        reference::model_forward(tied, without_head, {ids, 1, 6}).logits);
  const ModelResult one = reference::model_forward(parse_model(gla_json(1)), w.map, {ids, 2, 3});
  const ModelResult two = reference::model_forward(untied, w.map, {ids, 2, 3});
  CHECK(one.hidden_states.at(1) == two.hidden_states.at(1));

  WeightMap missing = w.map;
  missing.erase("model.layers.1.attn.gk_proj.1.bias");
  expect_error([&] { reference::model_forward(untied, missing, {ids, 2, 3}); }, ErrorCode::missing_tensor,
               {"'model.layers.1.attn.gk_proj.1.bias'"});
}

TEST_CASE("gla model reference: greedy decoding feeds back the arg-max and stops at eos") {
  const ModelConfig cfg = parse_model(gla_json());
  const Weights w = random_weights(cfg, 61);
  const std::vector<int64_t> prompt = random_ids(4, cfg.vocab_size, 62);
  const std::vector<int64_t> out = reference::greedy_generate(cfg, w.map, prompt, 5, false);
  REQUIRE(out.size() == 5);
  std::vector<int64_t> ids = prompt;
  for (int64_t next : out) {
    const ModelResult r = reference::model_forward(cfg, w.map, {ids, 1, int64_t(ids.size())});
    const auto last = r.logits.end() - cfg.vocab_size;
    CHECK(std::max_element(last, r.logits.end()) - last == next);
    ids.push_back(next);
  }
  ModelConfig stop = cfg;
  stop.eos_token_ids = {out[1]};
  const std::vector<int64_t> stopped = reference::greedy_generate(stop, w.map, prompt, 5);
  CHECK(stopped.size() <= 2);
  CHECK(stopped.back() == out[1]);
}

TEST_CASE("gla model reference: config keys, fla's defaults and the forms they decide") {
  const ModelConfig m = parse_model(gla_json());
  CHECK(m.model_type == "gla");
  REQUIRE(m.gla);
  CHECK(m.gla->hidden_size == 64);
  CHECK(m.gla->num_heads == 4);
  CHECK(m.gla->num_kv_heads == 2);
  CHECK(m.gla->head_k_dim() == 8);
  CHECK(m.gla->head_v_dim() == 16);
  CHECK(m.hidden_size() == 64);
  CHECK(m.norm_eps() == 1e-5);
  CHECK(m.norm_kind() == NormKind::plain);
  CHECK(m.hidden_act == Activation::silu);  // swish
  CHECK(m.intermediate_size == 96);
  CHECK(m.vocab_size == 100);
  CHECK(m.eos_token_ids == std::vector<int64_t>{2});
  CHECK(m.gla_forms.low_rank_dim == 16);
  CHECK(m.gla_forms.output_norm == "g_norm_swish_gate.weight");
  CHECK(m.gla_forms.attn_norm);
  CHECK(!parse_model(qwen3_json()).gla);

  // fla's GLAMLP: int(D · hidden_ratio · 2/3), rounded up to a multiple of 256.
  auto inter = [](int hidden, std::optional<double> ratio) {
    json j = gla_json();
    j.erase("intermediate_size");
    j["hidden_size"] = hidden;
    if (ratio) j["hidden_ratio"] = *ratio;
    return parse_model(j).intermediate_size;
  };
  CHECK(inter(64, {}) == 256);     // 170 -> 256
  CHECK(inter(1024, {}) == 2816);  // 2730 -> 2816
  CHECK(inter(384, 2.0) == 512);   // already a multiple
  CHECK(inter(2048, 3.5) == 4864);  // 4778 -> 4864

  json j = gla_json();
  j["gate_low_rank_dim"] = 8;
  j["use_output_gate"] = false;
  const ModelConfig no_gate = parse_model(j);
  CHECK(no_gate.gla_forms.low_rank_dim == 8);
  CHECK(no_gate.gla_forms.output_norm == "g_norm.weight");
  j = gla_json();
  j["fuse_norm"] = false;
  CHECK(parse_model(j).gla_forms.output_norm == "g_norm.weight");
  // fla fuses the norm into the gate only for gate_fn spelled "swish"; silu is the same function.
  j = gla_json();
  j["hidden_act"] = "silu";
  const ModelConfig silu = parse_model(j);
  CHECK(silu.hidden_act == Activation::silu);
  CHECK(silu.gla_forms.output_norm == "g_norm.weight");
  j.erase("hidden_act");
  CHECK(parse_model(j).gla_forms.output_norm == "g_norm_swish_gate.weight");
}

TEST_CASE("gla model reference: refused configs name the file and the key") {
  auto refused = [](const char* key, const json& value, const std::vector<std::string>& mentions) {
    json j = gla_json();
    if (value.is_null()) j.erase(key);
    else j[key] = value;
    const std::string key_name = key;
    CAPTURE(key_name);
    std::vector<std::string> all{kSource};
    all.insert(all.end(), mentions.begin(), mentions.end());
    expect_error([&] { parse_model(j); }, ErrorCode::invalid_config, all);
  };
  refused("use_short_conv", true, {"use_short_conv"});
  refused("use_gv", true, {"use_gv"});
  refused("use_gk", false, {"use_gk"});
  refused("elementwise_affine", false, {"elementwise_affine"});
  refused("attn", json{{"layers", {1}}, {"num_heads", 4}}, {"attn"});
  refused("hidden_act", "relu", {"hidden_act"});
  refused("hidden_act", "gelu", {"hidden_act", "swish"});
  refused("vocab_size", nullptr, {"vocab_size"});
  refused("num_hidden_layers", 0, {"num_hidden_layers"});
  refused("gate_low_rank_dim", 0, {"gate_low_rank_dim"});
  refused("hidden_ratio", -1, {"hidden_ratio"});
  refused("expand_k", 0.3, {"expand_k"});
  refused("eos_token_id", 100, {"eos_token_id", "vocab_size 100"});
  refused("model_type", "rwkv7", {"model_type", "\"gla\""});
}

TEST_CASE("gla model reference: expected weights are fla's names") {
  const ModelConfig cfg = parse_model(gla_json());
  const std::vector<TensorSpec> specs = expected_model_weights(cfg);
  const std::vector<std::pair<std::string, std::vector<int64_t>>> first{
      {"model.embeddings.weight", {100, 64}},
      {"model.layers.0.attn_norm.weight", {64}},
      {"model.layers.0.attn.q_proj.weight", {32, 64}},
      {"model.layers.0.attn.k_proj.weight", {16, 64}},
      {"model.layers.0.attn.v_proj.weight", {32, 64}},
      {"model.layers.0.attn.g_proj.weight", {64, 64}},
      {"model.layers.0.attn.gk_proj.0.weight", {16, 64}},
      {"model.layers.0.attn.gk_proj.1.weight", {16, 16}},
      {"model.layers.0.attn.gk_proj.1.bias", {16}},
      {"model.layers.0.attn.g_norm_swish_gate.weight", {16}},
      {"model.layers.0.attn.o_proj.weight", {64, 64}},
      {"model.layers.0.mlp_norm.weight", {64}},
      {"model.layers.0.mlp.gate_proj.weight", {96, 64}},
      {"model.layers.0.mlp.up_proj.weight", {96, 64}},
      {"model.layers.0.mlp.down_proj.weight", {64, 96}},
  };
  REQUIRE(specs.size() == 1 + 2 * (first.size() - 1) + 2);
  for (size_t i = 0; i < first.size(); ++i) {
    CHECK(specs[i].name == first[i].first);
    CHECK(specs[i].shape == first[i].second);
  }
  CHECK(specs[first.size()].name == "model.layers.1.attn_norm.weight");
  CHECK(specs[specs.size() - 2].name == "model.norm.weight");
  CHECK(specs.back().name == "lm_head.weight");
  CHECK(layer_gla_name(3, "attn_norm.weight") == "model.layers.3.attn_norm.weight");
  CHECK(layer_gla_name(3, "o_proj.weight") == "model.layers.3.attn.o_proj.weight");

  json j = gla_json();
  j["tie_word_embeddings"] = true;
  j["use_output_gate"] = false;
  const std::vector<TensorSpec> tied = expected_model_weights(parse_model(j));
  CHECK(tied.back().name == "model.norm.weight");
  std::set<std::string> names;
  for (const TensorSpec& t : tied) names.insert(t.name);
  CHECK(names.count("model.layers.1.attn.g_norm.weight") == 1);
  CHECK(names.count("model.layers.1.attn.g_proj.weight") == 0);

  expect_error([&] { layer_attention_tensors(cfg, {}, 0); }, ErrorCode::invalid_argument, {"gla"});
}

TEST_CASE("gla model reference: model_tensors reads the older model.embed_tokens.weight as model.embeddings.weight") {
  const ModelConfig cfg = parse_model(gla_json(1));
  const Weights w = random_weights(cfg, 71);
  TempDir dir;
  auto write = [&](const std::string& file, const std::string& embed_name) {
    std::vector<TensorToWrite> tensors;
    for (const TensorSpec& spec : expected_model_weights(cfg)) {
      const std::vector<float>& v = w.store.at(spec.name);
      tensors.push_back({spec.name == "model.embeddings.weight" ? embed_name : spec.name, DType::F32, spec.shape,
                         std::as_bytes(std::span(v))});
    }
    const std::string path = (dir.path / file).string();
    write_safetensors(path, tensors);
    return path;
  };
  for (const char* name : {"model.embeddings.weight", "model.embed_tokens.weight"}) {
    CAPTURE(name);
    const Checkpoint ckpt(write(std::string(name) + ".safetensors", name));
    const TensorMap t = model_tensors(ckpt, cfg);
    CHECK(t.size() == expected_model_weights(cfg).size());
    REQUIRE(t.count("model.embeddings.weight") == 1);
    CHECK(t.count("model.embed_tokens.weight") == 0);
    CHECK(t.at("model.embeddings.weight").shape == std::vector<int64_t>{100, 64});
  }
  const Checkpoint neither(write("neither.safetensors", "model.wte.weight"));
  expect_error([&] { model_tensors(neither, cfg); }, ErrorCode::missing_tensor, {"'model.embeddings.weight'"});
}

}  // namespace test_model_reference
