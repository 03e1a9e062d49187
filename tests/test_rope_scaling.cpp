// RoPE scaling (transformers' rope_type: linear, dynamic NTK, yarn, llama3):
// config.json in both spellings (rope_scaling, rope_parameters) and the errors
// naming the key; the inverse frequencies and attention factor of the
// reference and of the host function behind the GPU's cos/sin tables against
// numbers from transformers' formulas; tiny random llama and qwen3 models and
// the block on the device against the double-precision reference with each
// type, dynamic NTK through a prefill and decode steps past
// max_position_embeddings.
#include "doctest.hpp"

#include <cmath>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "block_weights.hpp"
#include "harness.hpp"
#include "model_weights.hpp"
#include "ops/ops.hpp"
#include "test_util.hpp"
#include "vkgate/block.hpp"
#include "vkgate/config.hpp"
#include "vkgate/error.hpp"
#include "vkgate/model.hpp"
#include "vkgate/model_config.hpp"
#include "vkgate/reference.hpp"
#include "vkgate/reference_model.hpp"

namespace test_rope_scaling {

using nlohmann::json;
using namespace vkgate;
using test::expect_error;

namespace {

const std::string kSource = "model/config.json";

// A llama model's config.json (the shape of Llama 3.1 8B's keys, tiny sizes) merged with `patch`.
json llama_config(const json& patch) {
  json j = {{"model_type", "llama"},      {"architectures", {"LlamaForCausalLM"}},
            {"hidden_size", 64},          {"num_attention_heads", 4},
            {"num_key_value_heads", 2},   {"num_hidden_layers", 2},
            {"intermediate_size", 96},    {"vocab_size", 200},
            {"rms_norm_eps", 1e-5},       {"rope_theta", 500000.0},
            {"max_position_embeddings", 131072}};
  j.merge_patch(patch);
  return j;
}

BlockConfig parse_block(const json& j) { return parse_config_json(j.dump(), kSource); }
ModelConfig parse_model(const json& j) { return parse_model_config_json(j.dump(), kSource); }

const json kLlama31 = {{"factor", 8.0},
                       {"low_freq_factor", 1.0},
                       {"high_freq_factor", 4.0},
                       {"original_max_position_embeddings", 8192},
                       {"rope_type", "llama3"}};

// Expected ω_i (by index) and attention factor of one config.
struct Expected {
  const char* name;
  BlockConfig cfg;
  int64_t seq_len;
  std::vector<std::pair<int, double>> inv_freq;
  double attention_factor;
};

BlockConfig rope_block(int head_dim, double theta, RopeScaling s, int max_positions) {
  BlockConfig c;
  c.hidden_size = 64;
  c.num_heads = c.num_kv_heads = 1;
  c.head_dim = head_dim;
  c.rope_theta = theta;
  c.rope_scaling = s;
  c.max_position_embeddings = max_positions;
  return c;
}

RopeScaling scaling(RopeType type, double factor) {
  RopeScaling s;
  s.type = type;
  s.factor = factor;
  return s;
}

// The numbers below were computed once with numpy in float64 by a line-by-line
// transcription of transformers' (v5) modeling_rope_utils.py:
// _compute_linear_scaling_rope_parameters, _compute_dynamic_ntk_parameters,
// _compute_yarn_parameters (get_mscale, find_correction_range with truncate,
// linear_ramp_factor) and _compute_llama3_parameters, printed with repr().
std::vector<Expected> expected_frequencies() {
  std::vector<Expected> e;
  {  // Llama 3.1's rope_scaling: pairs 29..34 are the smoothed middle band.
    RopeScaling s = scaling(RopeType::llama3, 8);
    s.low_freq_factor = 1, s.high_freq_factor = 4, s.original_max_position_embeddings = 8192;
    e.push_back({"llama3 (Llama 3.1: factor 8, low 1, high 4, original 8192, theta 5e5, Dh 128)",
                 rope_block(128, 500000, s, 131072),
                 1,
                 {{0, 1.0},
                  {10, 0.12868737343265052},
                  {29, 0.002166570763503359},
                  {30, 0.0013718935677611381},
                  {32, 0.0005248461609929549},
                  {34, 0.00017850781276799638},
                  {35, 9.556212353964683e-05},
                  {63, 3.068925988914511e-07}},
                 1.0});
  }
  {  // Qwen3's recommended YaRN: the ramp runs over pairs 23..40.
    RopeScaling s = scaling(RopeType::yarn, 4);
    s.original_max_position_embeddings = 32768;
    e.push_back({"yarn (Qwen3: factor 4, original 32768, theta 1e6, Dh 128)",
                 rope_block(128, 1e6, s, 40960),
                 1,
                 {{0, 1.0},
                  {5, 0.3398208328942559},
                  {23, 0.006978305848598663},
                  {24, 0.005375321490790102},
                  {31, 0.0008029597275452302},
                  {39, 6.490394320837028e-05},
                  {40, 4.4456985250973074e-05},
                  {50, 5.133812566142866e-06},
                  {63, 3.102344401879299e-07}},
                 1.138629436111989});
  }
  {  // DeepSeek-style yarn: mscale / mscale_all_dim, beta_fast 16, no truncation (range 6.44..11.26).
    RopeScaling s = scaling(RopeType::yarn, 40);
    s.original_max_position_embeddings = 4096;
    s.mscale = 0.707, s.mscale_all_dim = 1.0, s.beta_fast = 16, s.truncate = false;
    e.push_back({"yarn (factor 40, mscale 0.707 / mscale_all_dim 1, beta_fast 16, truncate false, Dh 32)",
                 rope_block(32, 10000, s, 4096),
                 1,
                 {{0, 1.0},
                  {4, 0.1},
                  {6, 0.03162277660168379},
                  {7, 0.015767787742890733},
                  {8, 0.006842578721835331},
                  {9, 0.002709517279350315},
                  {10, 0.0008835336919916733},
                  {11, 0.00013687041817686795},
                  {12, 2.5e-05},
                  {15, 4.445698525097307e-06}},
                 0.9210423553163399});
  }
  {  // An explicit attention_factor; a tiny original length puts the ramp at pairs 0..1.
    RopeScaling s = scaling(RopeType::yarn, 4);
    s.original_max_position_embeddings = 8, s.attention_factor = 1.5;
    e.push_back({"yarn (factor 4, original 8, attention_factor 1.5, Dh 16)",
                 rope_block(16, 10000, s, 32),
                 1,
                 {{0, 1.0}, {1, 0.07905694150420949}, {2, 0.025}, {7, 7.905694150420948e-05}},
                 1.5});
  }
  e.push_back({"linear (factor 2, Dh 64)",
               rope_block(64, 10000, scaling(RopeType::linear, 2), 4096),
               1,
               {{0, 0.5}, {7, 0.0666760716081662}, {31, 6.66760716081662e-05}},
               1.0});
  e.push_back({"dynamic (factor 2, max 4096) at seq_len 8192",
               rope_block(64, 10000, scaling(RopeType::dynamic, 2), 4096),
               8192,
               {{0, 1.0}, {7, 0.10405499734706541}, {31, 4.445071440544414e-05}},
               1.0});
  e.push_back({"dynamic (factor 2, max 4096) at seq_len 100: unscaled",
               rope_block(64, 10000, scaling(RopeType::dynamic, 2), 4096),
               100,
               {{0, 1.0}, {7, 0.1333521432163324}, {31, 0.0001333521432163324}},
               1.0});
  e.push_back({"dynamic (factor 3, max 8, Dh 16) at seq_len 13",
               rope_block(16, 10000, scaling(RopeType::dynamic, 3), 8),
               13,
               {{0, 1.0}, {1, 0.2719445172349442}, {3, 0.020111336001082718}, {7, 0.00010999226644063929}},
               1.0});
  return e;
}

void check_frequencies(const Expected& e, const std::vector<double>& inv_freq, double attention_factor) {
  CAPTURE(e.name);
  REQUIRE(inv_freq.size() == size_t(e.cfg.rotary_dim() / 2));
  for (const auto& [i, want] : e.inv_freq) {
    CAPTURE(i);
    CHECK(std::abs(inv_freq[size_t(i)] - want) <= 1e-13 * want);
  }
  CHECK(std::abs(attention_factor - e.attention_factor) <= 1e-14);
}

}  // namespace

// ---- config.json ----

TEST_CASE("rope scaling: each type parses from rope_scaling and from rope_parameters") {
  {  // Llama 3.1 as released (transformers < 5): top-level rope_theta, rope_scaling.
    const ModelConfig m = parse_model(llama_config({{"rope_scaling", kLlama31}}));
    const RopeScaling& s = m.attention.rope_scaling;
    CHECK(s.type == RopeType::llama3);
    CHECK(s.factor == 8);
    CHECK(s.low_freq_factor == 1);
    CHECK(s.high_freq_factor == 4);
    CHECK(s.original_max_position_embeddings == 8192);
    CHECK(m.attention.max_position_embeddings == 131072);
    CHECK(m.attention.rope_theta == 500000);
    // transformers >= 5 writes the same under rope_parameters, rope_theta included.
    json moved = llama_config({{"rope_theta", nullptr}, {"rope_parameters", kLlama31}});
    moved["rope_parameters"]["rope_theta"] = 500000.0;
    const ModelConfig v5 = parse_model(moved);
    CHECK(v5.attention.rope_scaling == s);
    CHECK(v5.attention.rope_theta == 500000);
    // Both spellings at once, agreeing.
    json both = llama_config({{"rope_scaling", kLlama31}, {"rope_parameters", kLlama31}});
    CHECK(parse_model(both).attention.rope_scaling == s);
  }
  {  // The older spelling `type` (Llama 2 era): linear and dynamic.
    const BlockConfig lin = parse_block(llama_config({{"rope_scaling", {{"type", "linear"}, {"factor", 2.0}}}}));
    CHECK(lin.rope_scaling.type == RopeType::linear);
    CHECK(lin.rope_scaling.factor == 2);
    const BlockConfig dyn = parse_block(
        llama_config({{"max_position_embeddings", 4096}, {"rope_scaling", {{"type", "dynamic"}, {"factor", 4}}}}));
    CHECK(dyn.rope_scaling.type == RopeType::dynamic);
    CHECK(dyn.rope_scaling.factor == 4);
    CHECK(dyn.max_position_embeddings == 4096);
    const BlockConfig dyn5 = parse_block(llama_config(
        {{"max_position_embeddings", 4096}, {"rope_parameters", {{"rope_type", "dynamic"}, {"factor", 4}}}}));
    CHECK(dyn5.rope_scaling == dyn.rope_scaling);
  }
  {  // Qwen3's YaRN recipe: the factor given wins over max / original (40960 / 32768), as in transformers 5.
    json q = {{"model_type", "qwen3"}, {"hidden_size", 64}, {"num_attention_heads", 4},
              {"num_key_value_heads", 2}, {"head_dim", 16}, {"max_position_embeddings", 40960},
              {"rope_theta", 1000000},
              {"rope_scaling", {{"rope_type", "yarn"}, {"factor", 4.0}, {"original_max_position_embeddings", 32768}}}};
    const BlockConfig c = parse_block(q);
    CHECK(c.rope_scaling.type == RopeType::yarn);
    CHECK(c.rope_scaling.factor == 4);
    CHECK(c.rope_scaling.original_max_position_embeddings == 32768);
    CHECK(c.rope_scaling.beta_fast == 32);
    CHECK(c.rope_scaling.beta_slow == 1);
    CHECK(c.rope_scaling.attention_factor == 0);
    CHECK(c.rope_scaling.truncate);
    // Every optional key, under rope_parameters; beta_fast null means the default.
    q.erase("rope_scaling");
    q["rope_parameters"] = {{"rope_type", "yarn"}, {"factor", 40}, {"original_max_position_embeddings", 4096},
                            {"beta_fast", nullptr}, {"beta_slow", 2}, {"mscale", 0.707}, {"mscale_all_dim", 1},
                            {"attention_factor", 1.25}, {"truncate", false}, {"rope_theta", 1000000}};
    const RopeScaling s = parse_block(q).rope_scaling;
    CHECK(s.factor == 40);
    CHECK(s.beta_fast == 32);
    CHECK(s.beta_slow == 2);
    CHECK(s.mscale == 0.707);
    CHECK(s.mscale_all_dim == 1);
    CHECK(s.attention_factor == 1.25);
    CHECK_FALSE(s.truncate);
    // Without a factor: max / original; without an original: max_position_embeddings stands in.
    q["rope_parameters"] = {{"rope_type", "yarn"}, {"original_max_position_embeddings", 8192}};
    CHECK(parse_block(q).rope_scaling.factor == 5);
    q["rope_parameters"] = {{"rope_type", "yarn"}, {"factor", 2}};
    const BlockConfig fallback = parse_block(q);
    CHECK(fallback.rope_scaling.original_max_position_embeddings == 0);
    CHECK(fallback.rope_original_max_positions() == 40960);
    // Phi-3's top-level original_max_position_embeddings.
    q["original_max_position_embeddings"] = 4096;
    CHECK(parse_block(q).rope_original_max_positions() == 4096);
  }
  {  // "default", null and an object naming no type: no scaling.
    for (const json& none : {json{{"rope_type", "default"}}, json(nullptr), json{{"factor", 8.0}}}) {
      CAPTURE(none.dump());
      CHECK(parse_block(llama_config({{"rope_scaling", none}})).rope_scaling == RopeScaling{});
    }
  }
  // max_position_embeddings absent: transformers' class defaults.
  json llama = llama_config(json::object());
  llama.erase("max_position_embeddings");
  CHECK(parse_block(llama).max_position_embeddings == 2048);
  llama["model_type"] = "qwen3";
  CHECK(parse_block(llama).max_position_embeddings == 32768);
}

TEST_CASE("rope scaling: bad values and unknown types are errors naming the key") {
  struct Bad {
    json patch;
    std::vector<std::string> mentions;
  };
  const json yarn = {{"rope_type", "yarn"}, {"factor", 4.0}, {"original_max_position_embeddings", 32768}};
  auto with = [](json base, const json& patch) {
    base.merge_patch(patch);
    return base;
  };
  const std::vector<Bad> bad = {
      {{{"rope_scaling", {{"rope_type", "longrope"}, {"factor", 4.0}}}},
       {"rope_scaling.rope_type", "\"longrope\"", "default, linear, dynamic, yarn, llama3"}},
      {{{"rope_scaling", {{"type", "mrope"}}}}, {"rope_scaling.type", "\"mrope\"", "default, linear"}},
      {{{"rope_parameters", {{"rope_type", 3}}}}, {"rope_parameters.rope_type", "a string"}},
      {{{"rope_scaling", {{"rope_type", "yarn"}, {"type", "linear"}, {"factor", 2}}}},
       {"rope_scaling.rope_type", "rope_scaling.type", "disagree"}},
      {{{"rope_scaling", "yarn"}}, {"rope_scaling", "an object or null"}},
      {{{"rope_scaling", {{"type", "linear"}, {"factor", 0.5}}}}, {"rope_scaling.factor", "must be a number >= 1"}},
      {{{"rope_scaling", {{"type", "linear"}}}}, {"rope_scaling.factor", "required", "\"linear\""}},
      {{{"rope_scaling", {{"type", "dynamic"}, {"factor", "2"}}}}, {"rope_scaling.factor", "\"2\""}},
      {{{"rope_parameters", with(kLlama31, {{"factor", 0.9}})}}, {"rope_parameters.factor", ">= 1"}},
      {{{"rope_scaling", with(kLlama31, {{"low_freq_factor", nullptr}})}}, {"rope_scaling.low_freq_factor", "required"}},
      {{{"rope_scaling", with(kLlama31, {{"high_freq_factor", 1.0}})}},
       {"rope_scaling.high_freq_factor", "greater than", "rope_scaling.low_freq_factor"}},
      {{{"rope_scaling", with(kLlama31, {{"original_max_position_embeddings", 8192.5}})}},
       {"rope_scaling.original_max_position_embeddings", "a positive integer"}},
      {{{"rope_scaling", with(yarn, {{"factor", 0}})}}, {"rope_scaling.factor", ">= 1"}},
      {{{"rope_scaling", with(yarn, {{"beta_fast", "fast"}})}}, {"rope_scaling.beta_fast"}},
      {{{"rope_scaling", with(yarn, {{"beta_slow", -1}})}}, {"rope_scaling.beta_slow", "positive"}},
      {{{"rope_scaling", with(yarn, {{"attention_factor", 0}})}}, {"rope_scaling.attention_factor", "positive"}},
      {{{"rope_scaling", with(yarn, {{"mscale", -0.5}})}}, {"rope_scaling.mscale", "non-negative"}},
      {{{"rope_scaling", with(yarn, {{"truncate", "yes"}})}}, {"rope_scaling.truncate", "true or false"}},
      {{{"rope_scaling", {{"rope_type", "yarn"}, {"original_max_position_embeddings", 262144}}}},
       {"rope_scaling.factor", "is not given", "131072 / 262144"}},
      {{{"rope_scaling", yarn}, {"rope_parameters", {{"rope_type", "linear"}, {"factor", 4.0}}}},
       {"'rope_scaling'", "disagrees with 'rope_parameters'"}},
      {{{"rope_scaling", yarn}, {"original_max_position_embeddings", 4096}},
       {"original_max_position_embeddings", "4096", "rope_scaling.original_max_position_embeddings", "32768"}},
      {{{"max_position_embeddings", 0}}, {"max_position_embeddings", "a positive integer"}},
      // validate(): dynamic NTK's exponent r/(r − 2) needs more than two rotary dims.
      {{{"head_dim", 16}, {"partial_rotary_factor", 0.125}, {"rope_scaling", {{"type", "dynamic"}, {"factor", 2}}}},
       {"partial_rotary_factor", "2 rotary dims", "dynamic"}},
      {{{"rope_theta", 1}, {"rope_scaling", yarn}}, {"rope_theta", "must not be 1", "yarn"}},
  };
  for (const Bad& b : bad) {
    CAPTURE(b.patch.dump());
    expect_error([&] { parse_block(llama_config(b.patch)); }, ErrorCode::invalid_config, b.mentions);
    std::vector<std::string> mentions = b.mentions;
    mentions.push_back(kSource + ": ");
    expect_error([&] { parse_model(llama_config(b.patch)); }, ErrorCode::invalid_config, mentions);
  }
}

TEST_CASE("rope scaling: validate() refuses impossible hand-built parameters naming the field") {
  BlockConfig base = rope_block(16, 10000, {}, 0);
  struct Bad {
    const char* mention;
    void (*edit)(BlockConfig&);
  };
  const Bad cases[] = {
      {"rope_scaling.factor must be >= 1, got 0.5",
       [](BlockConfig& c) { c.rope_scaling = scaling(RopeType::linear, 0.5); }},
      {"rope_scaling.factor must be >= 1, got nan",
       [](BlockConfig& c) { c.rope_scaling = scaling(RopeType::llama3, std::nan("")); }},
      {"max_position_embeddings must be positive with rope_scaling type 'dynamic'",
       [](BlockConfig& c) { c.rope_scaling = scaling(RopeType::dynamic, 2); }},
      {"rope_scaling.original_max_position_embeddings (or max_position_embeddings) must be given",
       [](BlockConfig& c) { c.rope_scaling = scaling(RopeType::yarn, 2); }},
      {"rope_scaling.original_max_position_embeddings must be positive",
       [](BlockConfig& c) {
         c.rope_scaling = scaling(RopeType::llama3, 2);
         c.rope_scaling.original_max_position_embeddings = -1;
       }},
      {"rope_scaling.high_freq_factor must be greater than low_freq_factor",
       [](BlockConfig& c) {
         c.max_position_embeddings = 64;
         c.rope_scaling = scaling(RopeType::llama3, 2);
         c.rope_scaling.low_freq_factor = 4;
       }},
      {"rope_scaling.beta_fast must be positive",
       [](BlockConfig& c) {
         c.max_position_embeddings = 64;
         c.rope_scaling = scaling(RopeType::yarn, 2);
         c.rope_scaling.beta_fast = 0;
       }},
      {"max_position_embeddings must not be negative", [](BlockConfig& c) { c.max_position_embeddings = -8; }},
  };
  for (const Bad& b : cases) {
    BlockConfig c = base;
    b.edit(c);
    CAPTURE(b.mention);
    expect_error([&] { c.validate(); }, ErrorCode::invalid_config, {b.mention});
    expect_error([&] { reference::rope_frequencies(c, 1); }, ErrorCode::invalid_config, {b.mention});
  }
  // The other types' fields are not read: a default-type config with odd ones is fine.
  base.rope_scaling.factor = 0;
  base.rope_scaling.beta_fast = -1;
  CHECK_NOTHROW(base.validate());
}

// ---- the frequencies ----

TEST_CASE("rope scaling: the reference's and the GPU tables' frequencies against transformers' formulas") {
  for (const Expected& e : expected_frequencies()) {
    const reference::RopeFrequencies r = reference::rope_frequencies(e.cfg, e.seq_len);
    check_frequencies(e, r.inv_freq, r.attention_factor);
    const ops::RopeFrequencies g = ops::rope_frequencies(e.cfg, e.seq_len);
    check_frequencies(e, g.inv_freq, g.attention_factor);
  }
  // Default RoPE: θ^(−2i/r), unchanged by the scaling fields of other types.
  const reference::RopeFrequencies plain = reference::rope_frequencies(rope_block(16, 10000, {}, 8), 100);
  for (size_t i = 0; i < 8; ++i) CHECK(plain.inv_freq[i] == doctest::Approx(std::pow(10000.0, -double(i) / 8)).epsilon(1e-14));
  CHECK(plain.attention_factor == 1);

  // The table holds cos and sin of position·ω times the attention factor, for the step's length.
  Expected yarn = expected_frequencies()[3];
  const std::vector<float> table = ops::rope_table(yarn.cfg, 3, 5);  // positions 5, 6, 7
  const reference::RopeFrequencies f = reference::rope_frequencies(yarn.cfg, 8);
  REQUIRE(table.size() == ops::rope_table_floats(3, 16));
  for (int p = 0; p < 3; ++p)
    for (int i = 0; i < 8; ++i) {
      const double angle = (5 + p) * f.inv_freq[size_t(i)];
      CHECK(table[size_t(p * 8 + i)] == doctest::Approx(1.5 * std::cos(angle)).epsilon(2e-7));
      CHECK(table[size_t(24 + p * 8 + i)] == doctest::Approx(1.5 * std::sin(angle)).epsilon(2e-7));
    }
  // Dynamic: a step's table follows the length the step ends at.
  const BlockConfig dyn = rope_block(16, 10000, scaling(RopeType::dynamic, 3), 8);
  const std::vector<float> last = ops::rope_table(dyn, 1, 12);  // position 12: seq_len 13
  CHECK(last[1] == doctest::Approx(std::cos(12 * 0.2719445172349442)).epsilon(2e-7));
  const std::vector<float> early = ops::rope_table(dyn, 2, 0);  // seq_len 2 ≤ 8: θ unchanged
  CHECK(early[1 * 8 + 1] == doctest::Approx(std::cos(std::pow(10000.0, -1.0 / 8))).epsilon(2e-7));
}

// ---- on the device ----

namespace {

// A tiny model's attention with `s`: the lengths are chosen so that each type
// changes the frequencies of positions < 16 (max_position_embeddings 8 for
// dynamic NTK, pre-training length 16 for llama3 and yarn).
ModelConfig tiny_model(const char* model_type, RopeType type) {
  test::TinyModel t;
  t.model_type = model_type;
  t.gate = std::string(model_type) == "qwen3" ? GateKind::elementwise : GateKind::none;
  ModelConfig m = t.config();
  BlockConfig& a = m.attention;
  a.max_position_embeddings = 8;
  RopeScaling& s = a.rope_scaling;
  s.type = type;
  switch (type) {
    case RopeType::none: break;
    case RopeType::linear: s.factor = 2; break;
    case RopeType::dynamic: s.factor = 3; break;
    case RopeType::llama3:
      s.factor = 8, s.low_freq_factor = 1, s.high_freq_factor = 4, s.original_max_position_embeddings = 16;
      break;
    case RopeType::yarn: s.factor = 4, s.original_max_position_embeddings = 16; break;
  }
  return m;
}

constexpr RopeType kScaled[] = {RopeType::linear, RopeType::dynamic, RopeType::yarn, RopeType::llama3};

}  // namespace

TEST_CASE_FIXTURE(test::GpuTest, "rope scaling: tiny llama and qwen3 models with each type against the reference") {
  for (const char* type : {"llama", "qwen3"}) {
    for (RopeType rope : kScaled) {
      INFO(type << " with rope_scaling " << to_string(rope));
      const ModelConfig cfg = tiny_model(type, rope);
      test::RandomModel m(cfg, rng);
      Model model(ctx, m.cfg, m.tensors, {.ignore_context_limit = true});  // positions past 8 on purpose
      model.set_poison(true);
      const int B = 2, N = 12;
      const auto ids = test::random_ids(rng, size_t(B) * N, m.cfg.vocab_size);
      const auto want = reference::model_forward(m.cfg, m.map, {ids, B, N});
      test::check_close(model.logits(ids, B, N), want.logits, 1e-8);
      // The scaling matters here: without it the reference's logits differ far beyond the bound.
      ModelConfig plain = m.cfg;
      plain.attention.rope_scaling = RopeScaling{};
      const auto unscaled = reference::model_forward(plain, m.map, {ids, B, N});
      std::vector<float> unscaled_f(unscaled.logits.begin(), unscaled.logits.end());
      CHECK(reference::compare(unscaled_f, want.logits).nmse > 1e-5);
    }
  }
}

// Dynamic NTK through a cache: the prefill's positions take θ for its own
// length, each decode step's key keeps the θ of the step that wrote it
// (transformers' dynamic_rope_update), so the steps differ from one full
// forward once the sequence passes max_position_embeddings (8).
TEST_CASE_FIXTURE(test::GpuTest, "rope scaling: dynamic NTK in a prefill and decode steps past max_position_embeddings") {
  for (const char* type : {"llama", "qwen3"}) {
    INFO(type);
    test::RandomModel m(tiny_model(type, RopeType::dynamic), rng);
    Model model(ctx, m.cfg, m.tensors, {.ignore_context_limit = true});  // positions past 8 on purpose
    model.set_poison(true);
    const int B = 2, N = 13, P = 6;  // the prefill within max_position_embeddings, the steps beyond it
    const auto ids = test::random_ids(rng, size_t(B) * N, m.cfg.vocab_size);
    std::vector<int64_t> steps{P};
    steps.insert(steps.end(), N - P, 1);
    const auto stepped = reference::model_forward(m.cfg, m.map, {ids, B, N, steps});
    Sequence seq = model.start(B, N);
    test::check_close(model.extend(seq, test::positions(ids, B, N, 0, P), P),
                      test::positions(stepped.logits, B, N, P - 1), 1e-8);
    for (int t = P; t < N; ++t) {
      CAPTURE(t);
      test::check_close(model.extend(seq, test::positions(ids, B, N, t, 1), 1),
                        test::positions(stepped.logits, B, N, t), 1e-8);
    }
    // One forward of all N tokens rotates every position for length N: not what the steps did.
    const auto whole = reference::model_forward(m.cfg, m.map, {ids, B, N});
    const auto last_whole = test::positions(whole.logits, B, N, N - 1), last_stepped = test::positions(stepped.logits, B, N, N - 1);
    CHECK(reference::compare(std::vector<float>(last_whole.begin(), last_whole.end()), last_stepped).nmse > 1e-8);
    // A prefill of 10 (past 8 at once), then steps: the first step's keys share the prefill's θ.
    seq.truncate(0);
    const std::vector<int64_t> steps2{10, 1, 1};
    const auto ids12 = test::positions(ids, B, N, 0, 12);
    const auto stepped2 = reference::model_forward(m.cfg, m.map, {ids12, B, 12, steps2});
    test::check_close(model.extend(seq, test::positions(ids12, B, 12, 0, 10), 10),
                      test::positions(stepped2.logits, B, 12, 9), 1e-8);
    for (int t = 10; t < 12; ++t)
      test::check_close(model.extend(seq, test::positions(ids12, B, 12, t, 1), 1),
                        test::positions(stepped2.logits, B, 12, t), 1e-8);

    // generate: a prefill and decode steps, as the reference's greedy_generate models them.
    const std::vector<int64_t> prompt(ids.begin(), ids.begin() + 5);
    GenerateOptions o;
    o.max_new_tokens = 7;
    o.stop_at_eos = false;
    CHECK(model.generate(prompt, o).ids == reference::greedy_generate(m.cfg, m.map, prompt, 7, false));
  }
}

TEST_CASE_FIXTURE(test::GpuTest, "rope scaling: the block with each type, with a cache and the device-resident cache") {
  for (RopeType rope : kScaled) {
    INFO(to_string(rope));
    BlockConfig c = tiny_model("qwen3", rope).attention;
    c.residual = false;
    test::RandomWeights w(c, rng);
    GatedAttention block(ctx, c, w.map);
    block.set_poison(true);
    const int B = 1, P = 7, T = 3, D = c.hidden_size, KV = c.num_kv_heads, Dh = c.head_dim;
    const auto x = random(size_t(B * T * D));
    const auto pk = random(size_t(B * KV * P * Dh)), pv = random(size_t(B * KV * P * Dh));
    ForwardInputs in{.hidden = x, .batch = B, .tokens = T, .past = P, .past_key = pk, .past_value = pv};
    const auto want = reference::forward(c, w.map, {x, B, T, P, pk, pv});
    test::check_close(block.run(in).output, want.output, 1e-9);

    // Decode in the resident cache: a prefill of P, then single steps to P + T.
    const auto xs = random(size_t(B * (P + T) * D));
    block.reserve_cache(B, P + T);
    std::vector<float> keys, values;  // the reference's cache, grown as the block's
    for (int at = 0, n = P; at < P + T; at += n, n = 1) {
      CAPTURE(at);
      std::vector<float> xt(xs.begin() + long(at) * D, xs.begin() + long(at + n) * D);
      ForwardInputs step{.hidden = xt, .batch = B, .tokens = n, .use_device_cache = true};
      const auto r = reference::forward(c, w.map, {xt, B, n, at, keys, values});
      test::check_close(block.run(step).output, r.output, 1e-9);
      keys.assign(r.k.begin(), r.k.end());
      values.assign(r.v.begin(), r.v.end());
    }
  }
}

}  // namespace test_rope_scaling
