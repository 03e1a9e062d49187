// Tests of the GLA layer's config, weight forms and CPU oracle: against the
// independent golden case, against hand-computed numbers, and by properties
// the GPU path relies on (GQA as duplicated KV heads, chunked = whole sequence).
#include "doctest.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "random_floats.hpp"
#include "vkgate/error.hpp"
#include "vkgate/gla_config.hpp"
#include "vkgate/reference.hpp"
#include "vkgate/reference_gla.hpp"
#include "vkgate/safetensors.hpp"
#include "vkgate/weights.hpp"
#include "golden.hpp"
#include "test_util.hpp"

namespace test_gla_reference {

using namespace vkgate;
using test::nmse;
using test::max_abs_diff;
using reference::GlaInputs;
using reference::GlaResult;
using test::expect_error;

namespace {

using Vec = std::vector<double>;

constexpr double kGoldenNmse = 1e-12;
// Two runs that do the same double arithmetic, or the same up to a float-rounded state.
constexpr double kSame = 1e-13;
constexpr double kStateRoundedNmse = 1e-12;

const std::string kGoldenName = "wave2/w3_gla_fla_gqa_T5_state";

std::string golden_path(const std::string& ext) { return test::golden_dir() + "/" + kGoldenName + ext; }

using test::random_floats;

// x [B, T, width] -> tokens [from, from + count).
template <class T>
std::vector<T> token_slice(const std::vector<T>& x, int64_t B, int64_t tokens, int64_t width, int64_t from,
                           int64_t count) {
  std::vector<T> out;
  for (int64_t b = 0; b < B; ++b) {
    const auto first = x.begin() + (b * tokens + from) * width;
    out.insert(out.end(), first, first + count * width);
  }
  return out;
}

double sigmoid(double x) { return 1 / (1 + std::exp(-x)); }

// D = 16; with H = 2: d_k = 4, d_v = 8.
GlaConfig small_config(int heads, int kv_heads) {
  GlaConfig c;
  c.hidden_size = 16;
  c.num_heads = heads;
  c.num_kv_heads = kv_heads;
  return c;
}

const GlaForms kFullForms{3, "g_norm_swish_gate.weight", true};  // low-rank gate, both norms

// A layer's weights, owned, random in [-0.5, 0.5] (norm weights around 1).
struct GlaWeights {
  std::map<std::string, std::vector<float>> data;

  GlaWeights(const GlaConfig& cfg, const GlaForms& forms, unsigned seed) {
    for (const TensorSpec& spec : gla_expected_weights(cfg, forms)) {
      const bool norm = spec.name.ends_with("norm.weight") || spec.name.ends_with("gate.weight");
      data[spec.name] = random_floats(size_t(spec.numel()), seed++, norm ? 0.5f : -0.5f, norm ? 1.5f : 0.5f);
    }
  }
  WeightMap map() const {
    WeightMap m;
    for (const auto& [name, v] : data) m[name] = v;
    return m;
  }
  // As a checkpoint gives them: with their shapes.
  TensorMap tensors(const GlaConfig& cfg, const GlaForms& forms) const {
    TensorMap t = as_tensors(map());
    for (const TensorSpec& spec : gla_expected_weights(cfg, forms)) t.at(spec.name).shape = spec.shape;
    return t;
  }
};

GlaResult run(const GlaConfig& cfg, const WeightMap& w, const std::vector<float>& hidden, int B, int T,
              std::span<const float> initial = {}) {
  GlaInputs in;
  in.hidden = hidden;
  in.batch = B;
  in.tokens = T;
  in.initial_state = initial;
  in.keep_states = true;
  return reference::gla_forward(cfg, w, in);
}

std::vector<float> random_hidden(const GlaConfig& cfg, int B, int T, unsigned seed) {
  return random_floats(size_t(B * T * cfg.hidden_size), seed);
}

std::vector<float> random_state(const GlaConfig& cfg, int B, unsigned seed) {
  return random_floats(size_t(B * cfg.num_heads * cfg.head_k_dim() * cfg.head_v_dim()), seed);
}

void check_same(const char* what, const Vec& got, const Vec& want, double tolerance = kSame) {
  CAPTURE(what);
  CHECK(max_abs_diff(got, want) <= tolerance);
}

}  // namespace

// ---- the golden case ----

TEST_CASE("gla reference: golden w3, fla layer with GQA 2->1, low-rank gate and a carried state") {
  const GlaConfig cfg = load_gla_config(golden_path(".json"));
  const nlohmann::json meta = nlohmann::json::parse(test::read_file_text(golden_path(".json")));
  CHECK(cfg.head_k_dim() == meta.at("head_k_dim").get<int>());
  CHECK(cfg.head_v_dim() == meta.at("head_v_dim").get<int>());
  CHECK(cfg.scale() == doctest::Approx(meta.at("scale_used").get<double>()).epsilon(1e-15));

  const SafetensorsFile file(golden_path(".safetensors"));
  std::map<std::string, std::vector<float>> floats;
  WeightMap weights;  // every tensor of the file: the layer ignores the inputs and expected values
  TensorMap shaped;
  for (const std::string& name : file.names()) {
    const TensorView& t = file.at(name);
    weights[name] = floats[name] = t.to_f32();
    shaped[name] = HostTensor{t.dtype, t.shape, t.bytes};
  }
  const GlaForms forms = check_gla_weights(cfg, shaped);
  CHECK(forms.low_rank_dim == 16);
  CHECK(forms.output_norm == "g_norm_swish_gate.weight");
  CHECK_FALSE(forms.attn_norm);

  const std::vector<int64_t>& shape = file.at("hidden_states").shape;
  const GlaResult r = run(cfg, weights, floats.at("hidden_states"), int(shape.at(0)), int(shape.at(1)),
                          floats.at("initial_state"));
  const std::pair<const char*, const Vec*> expected[] = {
      {"output", &r.output},     {"final_state", &r.final_state}, {"debug.q", &r.q},
      {"debug.k", &r.k},         {"debug.v", &r.v},               {"debug.log_a", &r.log_a},
      {"debug.o_core", &r.o_core}, {"debug.states", &r.states}};
  for (const auto& [tensor, ours] : expected) {
    const std::string name = tensor;
    const reference::Diff d = reference::compare(floats.at(name), *ours);
    INFO(name << ": NMSE " << d.nmse << ", max |diff| " << d.max_abs);
    CHECK(d.first_bad == -1);
    CHECK(d.nmse <= kGoldenNmse);
  }
}

// ---- config ----

TEST_CASE("gla reference: config keys, defaults and aliases") {
  const std::string text = test::read_file_text(golden_path(".json"));
  CHECK(is_gla_config_json(text, "w3.json"));
  const GlaConfig g = parse_gla_config_json(text, "w3.json");
  CHECK(g.hidden_size == 32);
  CHECK(g.num_heads == 2);
  CHECK(g.num_kv_heads == 1);
  CHECK(g.feature_map == FeatureMap::none);
  CHECK(g.use_output_gate);
  CHECK(g.gate_logit_normalizer == 16);
  CHECK_FALSE(g.clamp_min);
  CHECK(g.key_coupling == KeyCoupling::none);
  CHECK_FALSE(g.gla_scale);

  const GlaConfig d = parse_gla_config_json(R"({"hidden_size": 64, "num_heads": 4})", "d.json");
  CHECK(d.num_kv_heads == 4);
  CHECK(d.head_k_dim() == 8);
  CHECK(d.head_v_dim() == 16);
  CHECK(d.scale() == doctest::Approx(1 / std::sqrt(8.0)));
  CHECK(d.gate_logit_normalizer == 16);
  CHECK(d.norm_eps == 1e-6);

  const GlaConfig hf = parse_gla_config_json(
      R"({"model_type": "gla", "hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2,
          "feature_map": "elu_plus_one", "gla_key_coupling": "convex", "clamp_min": -0.25,
          "gla_scale": 0.125, "use_output_gate": false})",
      "hf.json");
  CHECK(hf.num_heads == 4);
  CHECK(hf.num_kv_heads == 2);
  CHECK(hf.group_size() == 2);
  CHECK(hf.feature_map == FeatureMap::elu_plus_one);
  CHECK(hf.key_coupling == KeyCoupling::convex);
  CHECK(hf.clamp_min == -0.25);
  CHECK(hf.scale() == 0.125);
  CHECK_FALSE(hf.use_output_gate);

  for (const char* map : {R"("none")", "null", R"("relu")"}) {
    const GlaConfig f = parse_gla_config_json(
        std::string(R"({"hidden_size": 64, "num_heads": 4, "feature_map": )") + map + "}", "f.json");
    CHECK(std::string(to_string(f.feature_map)) == (std::string(map) == R"("relu")" ? "relu" : "none"));
  }

  CHECK_FALSE(is_gla_config_json(R"({"model_type": "qwen3", "mixer": "attention"})", "q.json"));
  CHECK(is_gla_config_json(R"({"model_type": "gla"})", "m.json"));
  expect_error([] { is_gla_config_json("{", "broken.json"); }, ErrorCode::invalid_config,
               {"broken.json", "not valid JSON"});
}

TEST_CASE("gla reference: a bad config is an error naming the key") {
  struct Bad {
    const char* json;
    const char* key;
    const char* also;
  };
  const Bad cases[] = {
      {R"({"hidden_size": 30, "num_heads": 4})", "expand_k", "not divisible"},
      {R"({"hidden_size": 32, "num_heads": 4, "expand_v": 0.3})", "expand_v", "not divisible"},
      {R"({"hidden_size": 32, "num_heads": 4, "num_kv_heads": 3})", "num_kv_heads", "divide"},
      {R"({"hidden_size": 32, "num_heads": 4, "feature_map": "tanh"})", "feature_map", "elu_plus_one"},
      {R"({"hidden_size": 32, "num_heads": 4, "gla_key_coupling": "x"})", "gla_key_coupling", "convex"},
      {R"({"hidden_size": 32, "num_heads": 4, "clamp_min": 0.5})", "clamp_min", "0.5"},
      {R"({"hidden_size": 32, "num_heads": 4, "gla_scale": 0})", "gla_scale", "positive"},
      {R"({"hidden_size": 32, "num_heads": 4, "use_short_conv": true})", "use_short_conv", "convolution"},
      {R"({"hidden_size": 32, "num_heads": 4, "use_gv": true})", "use_gv", "value forget gate"},
      {R"({"hidden_size": 32, "num_heads": 4, "use_gk": false})", "use_gk", "key forget gate"},
      {R"({"hidden_size": 32, "num_heads": 4, "norm_eps": 0})", "norm_eps", "positive"},
      {R"({"hidden_size": 32, "num_heads": 4, "gate_logit_normalizer": -1})", "gate_logit_normalizer", "-1"},
      {R"({"hidden_size": 32, "num_heads": 4, "expand_k": "big"})", "expand_k", "big"},
      {R"({"hidden_size": 4096, "num_heads": 1, "expand_k": 1})", "expand_k", "512"},
      {R"({"hidden_size": 1000000000, "num_heads": 4})", "hidden_size", "must be in 1..16777216"},
      {R"({"hidden_size": 32, "num_heads": 1073741824})", "num_heads", "must be in 1..16777216"},
      {R"({"hidden_size": 32, "num_heads": 4, "use_output_gate": 1})", "use_output_gate", "true or false"},
      {R"({"mixer": "attention", "hidden_size": 32, "num_heads": 4})", "mixer", "attention"},
      {R"({"num_heads": 4})", "hidden_size", "required"},
      {R"({"hidden_size": 32})", "num_heads", "required"},
      {R"({"hidden_size": 32, "num_heads": 4, "num_attention_heads": 8})", "num_heads", "num_attention_heads"},
  };
  for (const Bad& c : cases) {
    CAPTURE(c.json);
    expect_error([&] { parse_gla_config_json(c.json, "cfg.json"); }, ErrorCode::invalid_config,
                 {"cfg.json: ", c.key, c.also});
  }

  GlaConfig direct = small_config(2, 1);
  direct.clamp_min = 0.1;
  expect_error([&] { direct.validate(); }, ErrorCode::invalid_config, {"config: clamp_min"});
  direct = small_config(0, 1);
  expect_error([&] { direct.validate(); }, ErrorCode::invalid_config, {"config: key 'num_heads' must be in 1.."});

  test::TempDir dir;
  expect_error([&] { load_gla_config(dir.file("absent.json")); }, ErrorCode::io, {"absent.json"});
  expect_error([&] { load_gla_config(dir.path.string()); }, ErrorCode::io, {"directory"});
}

// ---- weight forms ----

TEST_CASE("gla reference: weight forms, and missing or misshapen tensors named") {
  const GlaConfig cfg = small_config(2, 1);
  const GlaWeights full(cfg, kFullForms, 1);

  SUBCASE("low-rank gate, both norms: read from the tensors, with or without shapes") {
    for (const TensorMap& t : {full.tensors(cfg, kFullForms), as_tensors(full.map())}) {
      const GlaForms f = check_gla_weights(cfg, t);
      CHECK(f.low_rank_dim == 3);
      CHECK(f.output_norm == "g_norm_swish_gate.weight");
      CHECK(f.attn_norm);
    }
  }
  SUBCASE("neither forget-gate form") {
    TensorMap t = full.tensors(cfg, kFullForms);
    for (const char* name : {"gk_proj.0.weight", "gk_proj.1.weight", "gk_proj.1.bias"}) t.erase(name);
    expect_error([&] { gla_forms(cfg, t); }, ErrorCode::missing_tensor, {"'gk_proj.weight'", "gk_proj.0.weight"});
  }
  SUBCASE("a half-present low-rank gate names its absent tensor") {
    TensorMap t = full.tensors(cfg, kFullForms);
    t.erase("gk_proj.1.bias");
    expect_error([&] { gla_forms(cfg, t); }, ErrorCode::missing_tensor, {"'gk_proj.1.bias'"});
  }
  SUBCASE("gk_proj.0.weight not [r, D]") {
    TensorMap t = full.tensors(cfg, kFullForms);
    t.at("gk_proj.0.weight").shape = {16, 3};
    expect_error([&] { gla_forms(cfg, t); }, ErrorCode::shape_mismatch, {"'gk_proj.0.weight'", "[16, 3]"});
    const std::vector<float> odd(3 * 16 + 1);
    t.at("gk_proj.0.weight") = HostTensor{DType::F32, {}, std::as_bytes(std::span<const float>(odd))};
    expect_error([&] { gla_forms(cfg, t); }, ErrorCode::shape_mismatch, {"'gk_proj.0.weight'", "49 elements"});
  }
  SUBCASE("a wrong shape or dtype names the tensor") {
    TensorMap t = full.tensors(cfg, kFullForms);
    t.at("o_proj.weight").shape = {8, 32};
    expect_error([&] { check_gla_weights(cfg, t); }, ErrorCode::shape_mismatch,
                 {"'o_proj.weight'", "[8, 32]", "[16, 16]"});
    t = full.tensors(cfg, kFullForms);
    t.at("k_proj.weight").dtype = DType::I32;
    expect_error([&] { check_gla_weights(cfg, t); }, ErrorCode::shape_mismatch, {"'k_proj.weight'", "dtype"});
    t = full.tensors(cfg, kFullForms);
    t.erase("g_proj.weight");
    expect_error([&] { check_gla_weights(cfg, t); }, ErrorCode::missing_tensor, {"'g_proj.weight'"});
  }
  SUBCASE("the single gate, g_norm.weight, no attn_norm") {
    const GlaForms forms{0, "g_norm.weight", false};
    const GlaWeights w(cfg, forms, 2);
    const GlaForms f = check_gla_weights(cfg, w.tensors(cfg, forms));
    CHECK(f.low_rank_dim == 0);
    CHECK(f.output_norm == "g_norm.weight");
    CHECK_FALSE(f.attn_norm);
    TensorMap t = w.tensors(cfg, forms);
    t.erase("gk_proj.bias");
    expect_error([&] { gla_forms(cfg, t); }, ErrorCode::missing_tensor, {"'gk_proj.bias'"});
  }
  SUBCASE("both output norms: fla's fused swish-gate norm is the one read") {
    TensorMap t = full.tensors(cfg, kFullForms);
    t["g_norm.weight"] = t.at("g_norm_swish_gate.weight");
    CHECK(gla_forms(cfg, t).output_norm == "g_norm_swish_gate.weight");
  }
  SUBCASE("no output gate: no g_proj") {
    GlaConfig no_gate = cfg;
    no_gate.use_output_gate = false;
    for (const TensorSpec& s : gla_expected_weights(no_gate, kFullForms)) CHECK(s.name != "g_proj.weight");
  }
}

// ---- the output stage: norm and gate are independent ----

namespace {

// Each row of `dim`: x / sqrt(mean(x²) + eps) · w.
Vec rms_norm(const Vec& x, std::span<const float> w, int64_t dim, double eps) {
  Vec y(x.size());
  for (size_t at = 0; at < x.size(); at += size_t(dim)) {
    double sum_sq = 0;
    for (int64_t i = 0; i < dim; ++i) sum_sq += x[at + size_t(i)] * x[at + size_t(i)];
    const double inv_rms = 1 / std::sqrt(sum_sq / double(dim) + eps);
    for (int64_t i = 0; i < dim; ++i) y[at + size_t(i)] = x[at + size_t(i)] * inv_rms * w[size_t(i)];
  }
  return y;
}

// o_proj · y for y [rows, H·d_v].
Vec project_out(const GlaConfig& cfg, const WeightMap& w, const Vec& y, int64_t rows) {
  const int64_t D = cfg.hidden_size, width = int64_t(cfg.num_heads) * cfg.head_v_dim();
  const std::span<const float> o = w.at("o_proj.weight");
  Vec out(size_t(rows * D), 0.0);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t n = 0; n < D; ++n)
      for (int64_t i = 0; i < width; ++i) out[size_t(r * D + n)] += o[size_t(n * width + i)] * y[size_t(r * width + i)];
  return out;
}

}  // namespace

TEST_CASE("gla reference: output norm and swish gate, each optional") {
  const int B = 1, T = 3;
  for (const bool gate : {false, true}) {
    for (const char* norm : {"", "g_norm.weight"}) {
      CAPTURE(gate);
      CAPTURE(norm);
      GlaConfig cfg = small_config(2, 2);
      cfg.use_output_gate = gate;
      const GlaForms forms{0, norm, false};
      const GlaWeights w(cfg, forms, 3);
      const std::vector<float> x = random_hidden(cfg, B, T, 4);
      const GlaResult r = run(cfg, w.map(), x, B, T);

      const int64_t rows = B * T, dv = cfg.head_v_dim(), width = cfg.num_heads * dv;
      Vec y = r.o_core;
      if (*norm) y = rms_norm(y, w.data.at(norm), dv, cfg.norm_eps);
      if (gate) {
        const Vec g = reference::linear(x, w.data.at("g_proj.weight"), {}, rows, width, cfg.hidden_size);
        for (size_t i = 0; i < y.size(); ++i) y[i] *= g[i] * sigmoid(g[i]);
      }
      CHECK(nmse(r.output, project_out(cfg, w.map(), y, rows)) <= 1e-24);
    }
  }
}

// ---- properties ----

TEST_CASE("gla reference: the recurrence on a hand-computed case, with and without convex coupling") {
  // D = d_k = d_v = 2, one head, identity projections: q = k = v = x_t and gk = x_t + b.
  GlaConfig cfg;
  cfg.hidden_size = 2;
  cfg.num_heads = cfg.num_kv_heads = 1;
  cfg.expand_k = cfg.expand_v = 1;
  cfg.use_output_gate = false;
  cfg.gate_logit_normalizer = 2;
  cfg.gla_scale = 0.5;
  const std::vector<float> identity{1, 0, 0, 1}, bias{0.5f, -1.0f};
  const WeightMap w{{"q_proj.weight", identity}, {"k_proj.weight", identity}, {"v_proj.weight", identity},
                    {"o_proj.weight", identity}, {"gk_proj.weight", identity}, {"gk_proj.bias", bias}};
  const std::vector<float> x{0.3f, -0.7f, 1.2f, 0.4f};
  const std::vector<float> s0{0.1f, 0.2f, -0.3f, 0.4f};

  for (const KeyCoupling coupling : {KeyCoupling::none, KeyCoupling::convex}) {
    CAPTURE(to_string(coupling));
    cfg.key_coupling = coupling;
    const GlaResult r = run(cfg, w, x, 1, 2, s0);

    double S[2][2] = {{s0[0], s0[1]}, {s0[2], s0[3]}};
    for (int t = 0; t < 2; ++t) {
      const double xt[2] = {x[size_t(2 * t)], x[size_t(2 * t + 1)]};
      for (int i = 0; i < 2; ++i) {
        // α = exp(logsigmoid(gk)/N) = σ(gk)^(1/N)
        const double sig = sigmoid(xt[i] + bias[size_t(i)]);
        const double alpha = std::pow(sig, 1.0 / cfg.gate_logit_normalizer);
        CHECK(r.log_a[size_t(2 * t + i)] == doctest::Approx(std::log(sig) / 2).epsilon(1e-14));
        const double k = coupling == KeyCoupling::convex ? (1 - alpha) * xt[i] : xt[i];
        for (int j = 0; j < 2; ++j) S[i][j] = alpha * S[i][j] + k * xt[j];
      }
      for (int i = 0; i < 2; ++i)
        for (int j = 0; j < 2; ++j) CHECK(r.states[size_t(4 * t + 2 * i + j)] == doctest::Approx(S[i][j]).epsilon(1e-14));
      for (int j = 0; j < 2; ++j) {
        const double o = 0.5 * (xt[0] * S[0][j] + xt[1] * S[1][j]);
        CHECK(r.o_core[size_t(2 * t + j)] == doctest::Approx(o).epsilon(1e-14));
        CHECK(r.output[size_t(2 * t + j)] == doctest::Approx(o).epsilon(1e-14));
      }
    }
    for (int i = 0; i < 4; ++i) CHECK(r.final_state[size_t(i)] == r.states[size_t(4 + i)]);
  }
}

namespace {

// A tensor of KV heads' contiguous blocks (rows of k_proj, v_proj, gk_proj.1 and
// its bias) rewritten for H = KV·G heads: head h gets KV head h / G's block.
std::vector<float> per_query_head(const std::vector<float>& x, int kv_heads, int group) {
  const auto block = std::ptrdiff_t(x.size()) / kv_heads;
  std::vector<float> y;
  for (int h = 0; h < kv_heads * group; ++h) {
    const auto first = x.begin() + (h / group) * block;
    y.insert(y.end(), first, first + block);
  }
  return y;
}

}  // namespace

TEST_CASE("gla reference: GQA KV=1 H=2 (and KV=2 H=4) equals KV=H with k, v and gk rows duplicated") {
  const int B = 2, T = 3;
  for (const auto& [heads, kv_heads] : {std::pair{2, 1}, std::pair{4, 2}}) {
    CAPTURE(heads);
    CAPTURE(kv_heads);
    const GlaConfig grouped = small_config(heads, kv_heads), full = small_config(heads, heads);
    const GlaWeights w(grouped, kFullForms, 5);
    GlaWeights dup = w;
    for (const char* name : {"k_proj.weight", "v_proj.weight", "gk_proj.1.weight", "gk_proj.1.bias"})
      dup.data.at(name) = per_query_head(w.data.at(name), kv_heads, grouped.group_size());
    const std::vector<float> x = random_hidden(grouped, B, T, 6), s0 = random_state(grouped, B, 7);
    const GlaResult a = run(grouped, w.map(), x, B, T, s0), b = run(full, dup.map(), x, B, T, s0);
    check_same("output", a.output, b.output);
    check_same("final_state", a.final_state, b.final_state);
    check_same("states", a.states, b.states);
    check_same("k", a.k, b.k);
    check_same("v", a.v, b.v);
    check_same("log_a", a.log_a, b.log_a);
  }
}

TEST_CASE("gla reference: 7 tokens at once equal 3 then 4 carrying the final state") {
  const int B = 2, T = 7, T1 = 3, T2 = T - T1;
  for (const KeyCoupling coupling : {KeyCoupling::none, KeyCoupling::convex}) {
    CAPTURE(to_string(coupling));
    GlaConfig cfg = small_config(2, 1);
    cfg.key_coupling = coupling;
    cfg.feature_map = FeatureMap::elu_plus_one;
    const GlaWeights w(cfg, kFullForms, 8);
    const std::vector<float> x = random_hidden(cfg, B, T, 9), s0 = random_state(cfg, B, 10);
    const int64_t D = cfg.hidden_size, H = cfg.num_heads, state = H * cfg.head_k_dim() * cfg.head_v_dim();

    const GlaResult whole = run(cfg, w.map(), x, B, T, s0);
    const GlaResult first = run(cfg, w.map(), token_slice(x, B, T, D, 0, T1), B, T1, s0);
    // The step mode keeps the state in float between calls.
    const std::vector<float> carried(first.final_state.begin(), first.final_state.end());
    const GlaResult rest = run(cfg, w.map(), token_slice(x, B, T, D, T1, T2), B, T2, carried);

    check_same("first output", first.output, token_slice(whole.output, B, T, D, 0, T1), 0);
    check_same("first states", first.states, token_slice(whole.states, B, T, state, 0, T1), 0);
    CHECK(nmse(rest.output, token_slice(whole.output, B, T, D, T1, T2)) <= kStateRoundedNmse);
    CHECK(nmse(rest.states, token_slice(whole.states, B, T, state, T1, T2)) <= kStateRoundedNmse);
    CHECK(nmse(rest.final_state, whole.final_state) <= kStateRoundedNmse);
  }
}

TEST_CASE("gla reference: feature maps relu and elu_plus_one on q and k") {
  const int B = 1, T = 3;
  for (const FeatureMap map : {FeatureMap::relu, FeatureMap::elu_plus_one}) {
    CAPTURE(to_string(map));
    GlaConfig cfg = small_config(2, 1);
    cfg.feature_map = map;
    const GlaForms forms{0, "", false};  // q = x·q_projᵀ exactly
    const GlaWeights w(cfg, forms, 11);
    const std::vector<float> x = random_hidden(cfg, B, T, 12);
    const GlaResult r = run(cfg, w.map(), x, B, T);

    const int64_t rows = B * T, H = cfg.num_heads, dk = cfg.head_k_dim(), dv = cfg.head_v_dim();
    auto phi = [&](double v) { return map == FeatureMap::relu ? std::max(v, 0.0) : v > 0 ? v + 1 : std::exp(v); };
    const Vec q = reference::linear(x, w.data.at("q_proj.weight"), {}, rows, H * dk, cfg.hidden_size);
    const Vec k = reference::linear(x, w.data.at("k_proj.weight"), {}, rows, dk, cfg.hidden_size);
    int zeros = 0;
    for (size_t i = 0; i < q.size(); ++i) {
      CHECK(r.q[i] == phi(q[i]));
      CHECK(r.q[i] >= 0);
      zeros += r.q[i] == 0;
    }
    // relu clips some of the random projections; elu+1 never reaches zero.
    CHECK((map == FeatureMap::relu ? zeros > 0 : zeros == 0));
    for (int64_t row = 0; row < rows; ++row)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t i = 0; i < dk; ++i) CHECK(r.k[size_t((row * H + h) * dk + i)] == phi(k[size_t(row * dk + i)]));

    // From a zero state the first token sees only itself: o = scale·(φ(q)·φ(k))·v.
    for (int64_t h = 0; h < H; ++h) {
      double qk = 0;
      for (int64_t i = 0; i < dk; ++i) qk += r.q[size_t(h * dk + i)] * r.k[size_t(h * dk + i)];
      for (int64_t j = 0; j < dv; ++j)
        CHECK(r.o_core[size_t(h * dv + j)] ==
              doctest::Approx(cfg.scale() * qk * r.v[size_t(h * dv + j)]).epsilon(1e-13));
    }
  }
}

TEST_CASE("gla reference: clamp_min floors log α where it bites and nowhere else") {
  const int B = 1, T = 4;
  GlaConfig cfg = small_config(2, 1);
  cfg.gate_logit_normalizer = 1;
  const GlaWeights w(cfg, kFullForms, 13);
  const std::vector<float> x = random_hidden(cfg, B, T, 14);
  const GlaResult free = run(cfg, w.map(), x, B, T);

  Vec sorted = free.log_a;
  std::sort(sorted.begin(), sorted.end());
  // The median as the floor: about half the entries below it are clamped.
  cfg.clamp_min = sorted[sorted.size() / 2];
  const GlaResult clamped = run(cfg, w.map(), x, B, T);

  size_t n_clamped = 0;
  for (size_t i = 0; i < free.log_a.size(); ++i) {
    CHECK(clamped.log_a[i] >= *cfg.clamp_min);
    CHECK(clamped.log_a[i] == std::max(free.log_a[i], *cfg.clamp_min));
    n_clamped += free.log_a[i] < *cfg.clamp_min;
  }
  CHECK(n_clamped > 0);
  CHECK(n_clamped < free.log_a.size());
  CHECK(max_abs_diff(free.output, clamped.output) > 1e-6);
}

TEST_CASE("gla reference: input sizes are checked, naming the input") {
  const GlaConfig cfg = small_config(2, 1);
  const GlaWeights w(cfg, kFullForms, 15);
  const std::vector<float> x = random_hidden(cfg, 1, 2, 16);
  expect_error([&] { run(cfg, w.map(), x, 1, 3); }, ErrorCode::invalid_argument, {"'hidden'", "[1, 3, 16]"});
  expect_error([&] { run(cfg, w.map(), x, 1, 2, std::vector<float>(7)); }, ErrorCode::invalid_argument,
               {"'initial_state'", "[1, 2, 4, 8]"});
  expect_error([&] { run(cfg, w.map(), x, 0, 2); }, ErrorCode::invalid_argument, {"batch"});
  WeightMap missing = w.map();
  missing.erase("o_proj.weight");
  expect_error([&] { run(cfg, missing, x, 1, 2); }, ErrorCode::missing_tensor, {"'o_proj.weight'"});
}

}  // namespace test_gla_reference
