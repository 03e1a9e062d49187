// `vkgate run` end to end, as a child process: cases for every gate layout,
// gate kind, norm, rotary, cache and mask (and a subset in fp16/bf16) written
// with the library's safetensors writer and compared with the CPU reference; a
// sharded Qwen3-Next checkpoint directory read by layer; and a table of
// malformed inputs, each of which must exit 1 or 2 with a message naming the
// problem and leave no output file behind. Every child runs with
// VKGATE_VALIDATION=1 and must print no validation message.
#ifdef VKGATE_CLI

#include "doctest.hpp"

#include <cmath>
#include <filesystem>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "block_weights.hpp"
#include "cli_harness.hpp"
#include "vkgate/block.hpp"
#include "vkgate/config.hpp"
#include "vkgate/dtype.hpp"
#include "vkgate/reference.hpp"
#include "vkgate/safetensors.hpp"
#include "vkgate/weights.hpp"

namespace test_cli {

namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using namespace vkgate;

using namespace vkgate::cli_test;

// The weights of `cfg` stored as `dtype`: added to `file` (under `prefix` +
// name, the norm under `norm_prefix`), with the values the reference sees.
struct StoredWeights {
  std::map<std::string, std::vector<float>> values;
  WeightMap map;
};
StoredWeights add_weights(FileBuilder& file, const BlockConfig& cfg, std::mt19937& rng, DType dtype,
                          const std::string& prefix = "", const std::string& norm_prefix = "") {
  test::RandomWeights w(cfg, rng);
  StoredWeights s;
  for (const TensorSpec& spec : expected_weights(cfg)) {
    const std::string full = (spec.name == "input_layernorm.weight" ? norm_prefix : prefix) + spec.name;
    s.values[spec.name] = file.add(full, spec.shape, w.data.at(spec.name), dtype);
  }
  for (auto& [name, v] : s.values) s.map[name] = v;
  return s;
}

// ---- checking an output file against the reference ----

double nmse_bound(Precision p) { return p == Precision::fp32 ? 1e-9 : p == Precision::fp16 ? 1e-5 : 1e-4; }

void check_tensor(const SafetensorsFile& f, const std::string& name, const std::vector<int64_t>& shape,
                  const std::vector<double>& want, double bound) {
  INFO("tensor " << name);
  REQUIRE(f.contains(name));
  const TensorView& t = f.at(name);
  CHECK(t.dtype == DType::F32);
  REQUIRE(t.shape == shape);
  const auto got = t.to_f32();
  REQUIRE(got.size() == want.size());
  const reference::Diff d = reference::compare(got, want);
  INFO("nmse = " << d.nmse << ", max abs = " << d.max_abs << ", first non-finite at " << d.first_bad);
  CHECK(d.first_bad == -1);
  CHECK(d.nmse <= bound);
}

struct Expect {
  const BlockConfig* cfg;
  int64_t B, T, P;  // P < 0: no cache
  bool stats;
  Precision precision;
};

// The output file: exactly the expected tensors, each matching the reference.
void check_output(const std::string& path, const Expect& e, const reference::Result& want) {
  REQUIRE_MESSAGE(fs::exists(path), "no output file " << path);
  const SafetensorsFile f(path);
  const BlockConfig& c = *e.cfg;
  const double bound = nmse_bound(e.precision);
  const bool gate = c.gate_kind != GateKind::none;

  std::set<std::string> names{"output"};
  if (e.P >= 0) names.insert({"present_key", "present_value"});
  if (e.stats) {
    names.insert("stats.first_token_attn");
    if (gate) names.insert({"stats.gate_mean", "stats.gate_frac_below_0.1"});
  }
  const auto got_names = f.names();
  CHECK(std::set<std::string>(got_names.begin(), got_names.end()) == names);
  CHECK(f.metadata().count("producer") == 1);
  if (f.metadata().count("precision")) CHECK(f.metadata().at("precision") == to_string(e.precision));

  check_tensor(f, "output", {e.B, e.T, c.hidden_size}, want.output, bound);
  if (e.P >= 0) {
    const std::vector<int64_t> kv{e.B, c.num_kv_heads, e.P + e.T, c.head_dim};
    check_tensor(f, "present_key", kv, want.k, bound);
    check_tensor(f, "present_value", kv, want.v, bound);
  }
  if (!e.stats) return;
  // Statistics are loose checks: they summarise, so exactness is not the point.
  const double tol = e.precision == Precision::fp32 ? 1e-4 : 2e-2;
  REQUIRE(f.contains("stats.first_token_attn"));
  const auto fta = f.at("stats.first_token_attn").to_f64();
  REQUIRE(fta.size() == want.first_token_attn.size());
  CHECK(f.at("stats.first_token_attn").shape == std::vector<int64_t>{c.num_heads});
  for (size_t h = 0; h < fta.size(); ++h) {
    CAPTURE(h);
    CHECK(std::abs(fta[h] - want.first_token_attn[h]) <= tol);
  }
  if (!gate) return;
  double mean = 0, below = 0;
  for (double g : want.gate) {
    mean += g / double(want.gate.size());
    below += (g < 0.1) / double(want.gate.size());
  }
  REQUIRE(f.contains("stats.gate_mean"));
  REQUIRE(f.contains("stats.gate_frac_below_0.1"));
  CHECK(f.at("stats.gate_mean").shape.empty());
  const double gm = f.at("stats.gate_mean").to_f64().at(0);
  const double gf = f.at("stats.gate_frac_below_0.1").to_f64().at(0);
  CHECK(std::abs(gm - mean) <= tol);
  CHECK(std::abs(gf - below) <= tol + 2.0 / double(want.gate.size()));
}

// ---- the generated cases ----

enum class Where { input_file, weights_file, directory };

struct Case {
  std::string name;
  json config;      // written as config.json
  BlockConfig cfg;  // what the test expects it to mean: the reference runs this
  int batch = 1, tokens = 1, past = -1;  // past < 0: no cache
  bool mask = false, stats = false;
  Precision precision = Precision::fp32;
  DType weights = DType::F32, inputs = DType::F32;
  Where where = Where::input_file;
};

std::vector<Case> block_cases() {
  std::vector<Case> cases;
  {  // Qwen3-Next preset: elementwise gate in q_proj per head, zero-centred norms, partial rotary.
    Case k{"qwen3_next preset, GQA 4/2, rotary 0.25, stats"};
    k.config = {{"model_type", "qwen3_next"}, {"architectures", {"Qwen3NextForCausalLM"}},
                {"hidden_size", 64}, {"num_attention_heads", 4}, {"num_key_value_heads", 2},
                {"head_dim", 32}, {"partial_rotary_factor", 0.25}, {"rope_theta", 1e7},
                {"rms_norm_eps", 1e-6}, {"attention_bias", false}, {"torch_dtype", "bfloat16"},
                {"vocab_size", 151936}, {"linear_num_value_heads", 32}};
    k.cfg = qwen3_next(shape(64, 4, 2, 32));
    k.cfg.partial_rotary_factor = 0.25;
    k.cfg.rope_theta = 1e7;
    k.batch = 2, k.tokens = 5, k.stats = true;
    cases.push_back(k);
  }
  {  // Decode step after a cache, with mask, biases and residual; read from a directory.
    Case k{"qwen3_next MQA 4/1, attention_bias, residual, decode T=1 after P=6, mask, directory"};
    k.config = {{"model_type", "qwen3_next"}, {"hidden_size", 64}, {"num_attention_heads", 4},
                {"num_key_value_heads", 1}, {"head_dim", 16}, {"partial_rotary_factor", 0.5},
                {"rope_theta", 1e6}, {"rms_norm_eps", 1e-5}, {"attention_bias", true},
                {"residual", true}};
    k.cfg = qwen3_next(shape(64, 4, 1, 16));
    k.cfg.partial_rotary_factor = 0.5;
    k.cfg.rope_theta = 1e6;
    k.cfg.rms_norm_eps = 1e-5;
    k.cfg.qkv_bias = k.cfg.o_bias = true;
    k.cfg.residual = true;
    k.batch = 2, k.tokens = 1, k.past = 6, k.mask = true, k.stats = true;
    k.where = Where::directory;
    cases.push_back(k);
  }
  {  // The paper's code: headwise gate grouped per KV group, qkv_bias on q/k/v/o, head_dim
     // absent: Qwen3Config's default 128 (not hidden / heads).
    Case k{"qwen3 + headwise_attn_output_gate: official_grouped headwise, qkv_bias, GQA 6/2, mask"};
    k.config = {{"model_type", "qwen3"}, {"hidden_size", 96}, {"num_attention_heads", 6},
                {"num_key_value_heads", 2}, {"headwise_attn_output_gate", true}, {"qkv_bias", true},
                {"head_dim", nullptr}, {"rope_scaling", nullptr}, {"rms_norm_eps", 1e-6}};
    k.cfg = qwen3(shape(96, 6, 2, 128), GateKind::headwise);
    k.cfg.qkv_bias = k.cfg.o_bias = true;
    k.batch = 1, k.tokens = 7, k.mask = true, k.stats = true;
    cases.push_back(k);
  }
  {  // Elementwise grouped gate, bidirectional, cache; RoPE keys under rope_parameters.
    Case k{"qwen3 + elementwise_attn_output_gate: official_grouped elementwise, bidirectional, cache P=3"};
    k.config = {{"model_type", "qwen3"}, {"hidden_size", 64}, {"num_attention_heads", 4},
                {"num_key_value_heads", 2}, {"head_dim", 32}, {"elementwise_attn_output_gate", true},
                {"causal", false},
                {"rope_parameters", {{"rope_type", "default"}, {"rope_theta", 5e5}, {"partial_rotary_factor", 0.5}}}};
    k.cfg = qwen3(shape(64, 4, 2, 32), GateKind::elementwise);
    k.cfg.causal = false;
    k.cfg.rope_theta = 5e5;
    k.cfg.partial_rotary_factor = 0.5;
    k.batch = 2, k.tokens = 4, k.past = 3;
    cases.push_back(k);
  }
  {  // YaRN under rope_parameters (transformers >= 5), partial rotary, after a cache.
    Case k{"qwen3 + rope_parameters yarn (factor 4, original 16), rotary 0.5, cache P=5"};
    k.config = {{"model_type", "qwen3"}, {"hidden_size", 64}, {"num_attention_heads", 4},
                {"num_key_value_heads", 2}, {"head_dim", 16}, {"max_position_embeddings", 64},
                {"rope_parameters", {{"rope_type", "yarn"}, {"factor", 4.0}, {"original_max_position_embeddings", 16},
                                     {"rope_theta", 1e4}, {"partial_rotary_factor", 0.5}}}};
    k.cfg = qwen3(shape(64, 4, 2, 16), GateKind::none);
    k.cfg.rope_theta = 1e4;
    k.cfg.partial_rotary_factor = 0.5;
    k.cfg.rope_scaling.type = RopeType::yarn;
    k.cfg.rope_scaling.factor = 4;
    k.cfg.rope_scaling.original_max_position_embeddings = 16;
    k.batch = 1, k.tokens = 3, k.past = 5;
    cases.push_back(k);
  }
  {  // Dynamic NTK (rope_scaling, `type`): the block's positions 3..5 end past max_position_embeddings 4.
    Case k{"llama + rope_scaling dynamic (factor 2, max_position_embeddings 4), cache P=3"};
    k.config = {{"model_type", "llama"}, {"hidden_size", 64}, {"num_attention_heads", 4},
                {"num_key_value_heads", 2}, {"max_position_embeddings", 4}, {"rope_theta", 1e4},
                {"rope_scaling", {{"type", "dynamic"}, {"factor", 2.0}}}};
    k.cfg = qwen3(shape(64, 4, 2, 16), GateKind::none);
    k.cfg.use_qk_norm = false;
    k.cfg.rope_theta = 1e4;
    k.cfg.max_position_embeddings = 4;
    k.cfg.rope_scaling.type = RopeType::dynamic;
    k.cfg.rope_scaling.factor = 2;
    k.batch = 2, k.tokens = 3, k.past = 3;
    cases.push_back(k);
  }
  {  // Separate gate_proj, headwise; no q/k norm; no rotary; MQA; residual; inputs in the weights file.
    Case k{"separate headwise, no qk norm, no rotary, MQA 4/1, residual, input = weights file"};
    k.config = {{"model_type", "qwen3"}, {"hidden_size", 128}, {"num_attention_heads", 4},
                {"num_key_value_heads", 1}, {"head_dim", 32}, {"gate_kind", "headwise"},
                {"gate_layout", "separate"}, {"use_qk_norm", false}, {"partial_rotary_factor", 0.0},
                {"residual", true}};
    k.cfg = qwen3(shape(128, 4, 1, 32), GateKind::headwise);
    k.cfg.gate_layout = GateLayout::separate;
    k.cfg.use_qk_norm = false;
    k.cfg.partial_rotary_factor = 0.0;
    k.cfg.residual = true;
    k.batch = 1, k.tokens = 8;
    k.where = Where::weights_file;
    cases.push_back(k);
  }
  {  // Separate gate_proj, elementwise, with gate_proj.bias; zero-centred; MHA; head_dim 64.
    Case k{"separate elementwise, zero-centred, attention_bias, MHA 2/2, head_dim 64, cache + mask"};
    k.config = {{"model_type", "qwen3"}, {"hidden_size", 128}, {"num_attention_heads", 2},
                {"num_key_value_heads", 2}, {"head_dim", 64}, {"gate_kind", "elementwise"},
                {"gate_layout", "separate"}, {"norm_kind", "zero_centered"}, {"attention_bias", true},
                {"rope_theta", 1e4}};
    k.cfg = qwen3(shape(128, 2, 2, 64), GateKind::elementwise);
    k.cfg.gate_layout = GateLayout::separate;
    k.cfg.norm_kind = NormKind::zero_centered;
    k.cfg.qkv_bias = k.cfg.o_bias = true;
    k.batch = 1, k.tokens = 3, k.past = 4, k.mask = true, k.stats = true;
    cases.push_back(k);
  }
  {  // Overrides on top of the qwen3_next preset: headwise, plain norm, no q/k norm, bidirectional.
    Case k{"qwen3_next layout, headwise, plain norm, no qk norm, bidirectional (overrides)"};
    k.config = {{"model_type", "qwen3_next"}, {"hidden_size", 64}, {"num_attention_heads", 4},
                {"num_key_value_heads", 4}, {"head_dim", 16}, {"partial_rotary_factor", 1.0},
                {"gate_kind", "headwise"}, {"norm_kind", "plain"}, {"use_qk_norm", false},
                {"causal", false}};
    k.cfg = qwen3_next(shape(64, 4, 4, 16));
    k.cfg.gate_kind = GateKind::headwise;
    k.cfg.norm_kind = NormKind::plain;
    k.cfg.use_qk_norm = false;
    k.cfg.causal = false;
    k.batch = 2, k.tokens = 4;
    cases.push_back(k);
  }
  {  // An empty cache (P = 0) still returns present_key/present_value: the new tokens' keys.
    Case k{"official_grouped elementwise, zero-centred override, GQA 6/3, empty cache P=0"};
    k.config = {{"model_type", "qwen3"}, {"hidden_size", 96}, {"num_attention_heads", 6},
                {"num_key_value_heads", 3}, {"head_dim", 32}, {"elementwise_attn_output_gate", true},
                {"norm_kind", "zero_centered"}, {"rope_theta", 1e6}, {"partial_rotary_factor", 0.25}};
    k.cfg = qwen3(shape(96, 6, 3, 32), GateKind::elementwise);
    k.cfg.norm_kind = NormKind::zero_centered;
    k.cfg.rope_theta = 1e6;
    k.cfg.partial_rotary_factor = 0.25;
    k.batch = 1, k.tokens = 5, k.past = 0;
    cases.push_back(k);
  }
  {  // No gate (qwen3 without the paper's flags); inputs in F64; stats without gate statistics.
    Case k{"qwen3 without gate flags: no gate, bidirectional, cache + mask, F64 inputs, stats"};
    k.config = {{"model_type", "qwen3"}, {"hidden_size", 64}, {"num_attention_heads", 4},
                {"num_key_value_heads", 2}, {"head_dim", 16}, {"causal", false},
                {"headwise_attn_output_gate", false}};
    k.cfg = qwen3(shape(64, 4, 2, 16), GateKind::none);
    k.cfg.causal = false;
    k.batch = 2, k.tokens = 3, k.past = 2, k.mask = true, k.stats = true;
    k.inputs = DType::F64;
    cases.push_back(k);
  }
  {  // gate_kind none with the separate layout needs no gate_proj; odd head count; Qwen3NextConfig's head_dim.
    Case k{"gate_kind none + separate layout (no gate_proj), 5/1 heads, head_dim 256 by default, rotary 0.25"};
    k.config = {{"model_type", "qwen3_next"}, {"hidden_size", 80}, {"num_attention_heads", 5},
                {"num_key_value_heads", 1}, {"partial_rotary_factor", 0.25}, {"gate_kind", "none"},
                {"gate_layout", "separate"}};
    k.cfg = qwen3_next(shape(80, 5, 1, 256));
    k.cfg.partial_rotary_factor = 0.25;
    k.cfg.gate_kind = GateKind::none;
    k.cfg.gate_layout = GateLayout::separate;
    k.batch = 1, k.tokens = 2;
    cases.push_back(k);
  }
  {  // Headwise gate in the Qwen3-Next per-head layout, with a cache and a mask.
    Case k{"qwen3_next layout, headwise, GQA 6/2, prefill T=2 after P=5, mask, stats"};
    k.config = {{"model_type", "qwen3_next"}, {"hidden_size", 96}, {"num_attention_heads", 6},
                {"num_key_value_heads", 2}, {"head_dim", 16}, {"partial_rotary_factor", 0.25},
                {"gate_kind", "headwise"}, {"rope_theta", 1e4}};
    k.cfg = qwen3_next(shape(96, 6, 2, 16));
    k.cfg.gate_kind = GateKind::headwise;
    k.cfg.partial_rotary_factor = 0.25;
    k.cfg.rope_theta = 1e4;
    k.batch = 2, k.tokens = 2, k.past = 5, k.mask = true, k.stats = true;
    cases.push_back(k);
  }
  {  // fp16 storage: F16 weights and inputs.
    Case k{"fp16: qwen3_next preset, F16 weights and inputs, cache + mask, stats"};
    k.config = {{"model_type", "qwen3_next"}, {"hidden_size", 64}, {"num_attention_heads", 4},
                {"num_key_value_heads", 2}, {"head_dim", 32}, {"partial_rotary_factor", 0.25},
                {"rope_theta", 1e7}};
    k.cfg = qwen3_next(shape(64, 4, 2, 32));
    k.cfg.partial_rotary_factor = 0.25;
    k.cfg.rope_theta = 1e7;
    k.batch = 2, k.tokens = 3, k.past = 2, k.mask = true, k.stats = true;
    k.precision = Precision::fp16;
    k.weights = k.inputs = DType::F16;
    cases.push_back(k);
  }
  {  // bf16 storage: BF16 weights, F32 inputs, the paper's headwise grouped layout.
    Case k{"bf16: official_grouped headwise, BF16 weights, qkv_bias, cache, stats"};
    k.config = {{"model_type", "qwen3"}, {"hidden_size", 96}, {"num_attention_heads", 6},
                {"num_key_value_heads", 2}, {"head_dim", 16}, {"headwise_attn_output_gate", true},
                {"qkv_bias", true}};
    k.cfg = qwen3(shape(96, 6, 2, 16), GateKind::headwise);
    k.cfg.qkv_bias = k.cfg.o_bias = true;
    k.batch = 1, k.tokens = 4, k.past = 3, k.stats = true;
    k.precision = Precision::bf16;
    k.weights = DType::BF16;
    cases.push_back(k);
  }
  {  // fp16 storage of F32 weights (converted on upload), separate elementwise gate, residual.
    Case k{"fp16: separate elementwise, F32 weights converted on upload, residual, mask"};
    k.config = {{"model_type", "qwen3"}, {"hidden_size", 64}, {"num_attention_heads", 4},
                {"num_key_value_heads", 2}, {"head_dim", 16}, {"gate_kind", "elementwise"},
                {"gate_layout", "separate"}, {"residual", true}};
    k.cfg = qwen3(shape(64, 4, 2, 16), GateKind::elementwise);
    k.cfg.gate_layout = GateLayout::separate;
    k.cfg.residual = true;
    k.batch = 2, k.tokens = 4, k.mask = true;
    k.precision = Precision::fp16;
    cases.push_back(k);
  }
  {  // bf16 storage of everything: separate headwise gate, BF16 weights and inputs, cache + mask.
    Case k{"bf16: separate headwise, BF16 weights and inputs, MQA 4/1, cache + mask, bidirectional"};
    k.config = {{"model_type", "qwen3"}, {"hidden_size", 64}, {"num_attention_heads", 4},
                {"num_key_value_heads", 1}, {"head_dim", 32}, {"gate_kind", "headwise"},
                {"gate_layout", "separate"}, {"causal", false}, {"partial_rotary_factor", 0.5}};
    k.cfg = qwen3(shape(64, 4, 1, 32), GateKind::headwise);
    k.cfg.gate_layout = GateLayout::separate;
    k.cfg.causal = false;
    k.cfg.partial_rotary_factor = 0.5;
    k.batch = 2, k.tokens = 3, k.past = 2, k.mask = true, k.stats = true;
    k.precision = Precision::bf16;
    k.weights = k.inputs = DType::BF16;
    cases.push_back(k);
  }
  {  // fp16 storage with the paper's elementwise grouped layout, decode after a cache, residual.
    Case k{"fp16: official_grouped elementwise, F16 weights, residual, decode T=1 after P=7"};
    k.config = {{"model_type", "qwen3"}, {"hidden_size", 128}, {"num_attention_heads", 4},
                {"num_key_value_heads", 2}, {"head_dim", 32}, {"elementwise_attn_output_gate", true},
                {"residual", true}, {"rope_theta", 1e6}};
    k.cfg = qwen3(shape(128, 4, 2, 32), GateKind::elementwise);
    k.cfg.residual = true;
    k.cfg.rope_theta = 1e6;
    k.batch = 1, k.tokens = 1, k.past = 7;
    k.precision = Precision::fp16;
    k.weights = DType::F16;
    cases.push_back(k);
  }
  return cases;
}

// The config the parser builds from the case's config.json must be the one the
// test meant (a mismatch here explains an accuracy failure below).
void check_parsed(const Case& k, const std::string& config_path) {
  const BlockConfig p = load_config(config_path);
  const BlockConfig& c = k.cfg;
  CHECK(p.hidden_size == c.hidden_size);
  CHECK(p.num_heads == c.num_heads);
  CHECK(p.num_kv_heads == c.num_kv_heads);
  CHECK(p.head_dim == c.head_dim);
  CHECK(p.rms_norm_eps == c.rms_norm_eps);
  CHECK(p.rope_theta == c.rope_theta);
  CHECK(p.partial_rotary_factor == c.partial_rotary_factor);
  CHECK(p.gate_kind == c.gate_kind);
  CHECK(p.gate_layout == c.gate_layout);
  CHECK(p.norm_kind == c.norm_kind);
  CHECK(p.use_qk_norm == c.use_qk_norm);
  CHECK(p.qkv_bias == c.qkv_bias);
  CHECK(p.o_bias == c.o_bias);
  CHECK(p.causal == c.causal);
  CHECK(p.residual == c.residual);
  CHECK(p.gate_position == c.gate_position);
  CHECK(p.gate_shared_heads == c.gate_shared_heads);
  CHECK(p.gate_combine == c.gate_combine);
  CHECK(p.gate_activation == c.gate_activation);
  CHECK(p.rope_style == c.rope_style);
  CHECK(p.gqa_mapping == c.gqa_mapping);
  CHECK(p.rope_scaling == c.rope_scaling);
  if (c.rope_scaling.type == RopeType::dynamic) CHECK(p.max_position_embeddings == c.max_position_embeddings);
}

// The gating rows of the paper's Table 1 and the NS-sigmoid control, each as
// the config keys that select it (README "Gate positions and variants"), on a
// qwen3 block of GQA 4/2 heads of 16; the value and key rows decode after a
// cache, every row reports statistics. Two of the seeds' conventions ride
// along: interleaved RoPE and tiled GQA.
std::vector<Case> table1_cases() {
  struct Row {
    const char* name;
    GatePosition at;
    GateKind kind;
    bool shared;
    GateCombine combine;
    GateActivation act;
  };
  using P = GatePosition;
  using K = GateKind;
  using A = GateActivation;
  constexpr auto mul = GateCombine::multiply, add = GateCombine::add;
  const Row rows[] = {
      {"G1 SDPA elementwise", P::sdpa, K::elementwise, false, mul, A::sigmoid},
      {"G2 value elementwise", P::value, K::elementwise, false, mul, A::sigmoid},
      {"G3 key elementwise", P::key, K::elementwise, false, mul, A::sigmoid},
      {"G4 query elementwise", P::query, K::elementwise, false, mul, A::sigmoid},
      {"G5 dense elementwise", P::dense, K::elementwise, false, mul, A::sigmoid},
      {"G1 SDPA headwise", P::sdpa, K::headwise, false, mul, A::sigmoid},
      {"G2 value headwise", P::value, K::headwise, false, mul, A::sigmoid},
      {"G1 SDPA head-shared", P::sdpa, K::elementwise, true, mul, A::sigmoid},
      {"G2 value head-shared", P::value, K::elementwise, true, mul, A::sigmoid},
      {"G1 SDPA additive SiLU", P::sdpa, K::elementwise, false, add, A::silu},
      {"G1 SDPA multiplicative SiLU", P::sdpa, K::elementwise, false, mul, A::silu},
      {"G1 SDPA NS-sigmoid", P::sdpa, K::elementwise, false, mul, A::ns_sigmoid},
  };
  std::vector<Case> cases;
  for (const Row& r : rows) {
    Case k{std::string("Table 1: ") + r.name};
    k.config = {{"model_type", "qwen3"}, {"hidden_size", 64}, {"num_attention_heads", 4},
                {"num_key_value_heads", 2}, {"head_dim", 16}, {"gate_kind", to_string(r.kind)},
                {"gate_layout", "separate"}, {"gate_position", to_string(r.at)},
                {"gate_shared_heads", r.shared}, {"gate_combine", to_string(r.combine)},
                {"gate_activation", to_string(r.act)}};
    k.cfg = qwen3(shape(64, 4, 2, 16), r.kind);
    k.cfg.gate_layout = GateLayout::separate;
    k.cfg.gate_position = r.at;
    k.cfg.gate_shared_heads = r.shared;
    k.cfg.gate_combine = r.combine;
    k.cfg.gate_activation = r.act;
    k.batch = 2, k.tokens = 3, k.stats = true;
    if (r.at == P::value || r.at == P::key) k.past = 4;
    cases.push_back(k);
  }
  cases[1].config["rope_style"] = "interleaved";
  cases[1].cfg.rope_style = RopeStyle::interleaved;
  cases[2].config["gqa_mapping"] = "tiled";
  cases[2].cfg.gqa_mapping = GqaMapping::tiled;
  return cases;
}

// Everything a case needs after its child has run: the files and the reference.
struct Prepared {
  std::vector<std::string> args;
  std::string output;
  reference::Result want;
};

Prepared prepare(const Case& k, const TempDir& dir, int index, std::mt19937& rng) {
  const std::string base = "case" + std::to_string(index);
  const fs::path root = dir.path / base;
  fs::create_directories(root);
  const BlockConfig& c = k.cfg;
  const int64_t B = k.batch, T = k.tokens, P = std::max(k.past, 0), D = c.hidden_size, KV = c.num_kv_heads,
                Dh = c.head_dim;

  FileBuilder wfile, ifile;
  const StoredWeights w = add_weights(wfile, c, rng, k.weights);
  FileBuilder& inputs = k.where == Where::weights_file ? wfile : ifile;
  const auto hidden = inputs.add("hidden_states", {B, T, D}, random_vec(rng, size_t(B * T * D)), k.inputs);
  std::vector<float> pk, pv, mask;
  if (k.past >= 0) {
    pk = inputs.add("past_key", {B, KV, P, Dh}, random_vec(rng, size_t(B * KV * P * Dh)), k.inputs);
    pv = inputs.add("past_value", {B, KV, P, Dh}, random_vec(rng, size_t(B * KV * P * Dh)), k.inputs);
  }
  if (k.mask) mask = inputs.add("attention_mask", {B, 1, T, P + T}, random_mask(rng, size_t(B * T * (P + T))), k.inputs);

  Prepared p;
  std::string weights_path, config_path = (root / "config.json").string();
  write_text(config_path, k.config.dump(2));
  if (k.where == Where::directory) {
    wfile.write((root / "model.safetensors").string());
    weights_path = root.string();
  } else {
    weights_path = (root / "weights.safetensors").string();
    wfile.write(weights_path);
  }
  const std::string input_path = k.where == Where::weights_file ? weights_path : (root / "input.safetensors").string();
  if (k.where != Where::weights_file) ifile.write(input_path);
  p.output = (root / "out.safetensors").string();

  p.args = {"run", "--weights", weights_path, "--input", input_path, "--output", p.output};
  if (k.where != Where::directory) p.args.insert(p.args.end(), {"--config", config_path});
  if (k.precision != Precision::fp32) p.args.insert(p.args.end(), {"--precision", to_string(k.precision)});
  if (k.stats) p.args.push_back("--stats");
  for (const auto& a : device_args()) p.args.push_back(a);

  reference::Inputs in{.hidden = hidden, .batch = B, .tokens = T, .past = P, .past_key = pk, .past_value = pv,
                       .attention_mask = mask};
  p.want = reference::forward(c, w.map, in);
  check_parsed(k, config_path);
  return p;
}

void run_cases(const std::vector<Case>& cases) {
  const uint32_t seed = std::random_device{}();
  std::mt19937 rng(seed);
  TempDir dir("cases");
  std::vector<Prepared> prepared;
  std::vector<std::vector<std::string>> jobs;
  for (size_t i = 0; i < cases.size(); ++i) {
    CAPTURE(cases[i].name);
    prepared.push_back(prepare(cases[i], dir, int(i), rng));
    jobs.push_back(prepared.back().args);
  }
  const auto results = run_all(jobs, dir.path);
  for (size_t i = 0; i < cases.size(); ++i) {
    const Case& k = cases[i];
    const CliResult& r = results[i];
    CAPTURE(k.name);
    INFO("command: " << r.command);
    INFO("stderr: " << r.err);
    check_clean_exit(r);
    CHECK(r.code == 0);
    if (r.code != 0) continue;
    CHECK(r.out.find(" -> " + prepared[i].output) != std::string::npos);
    check_output(prepared[i].output, {&k.cfg, k.batch, k.tokens, k.past, k.stats, k.precision}, prepared[i].want);
  }
}

}  // namespace

TEST_CASE("cli: every gate layout, gate kind, norm, rotary, bias, cache and mask against the reference") {
  std::vector<Case> cases;
  for (const Case& k : block_cases())
    if (k.precision == Precision::fp32) cases.push_back(k);
  run_cases(cases);
}

TEST_CASE("cli: the paper's Table 1 gating rows and NS-sigmoid from config files against the reference") {
  run_cases(table1_cases());
}

TEST_CASE("cli: fp16 and bf16 storage against the reference (DESIGN.md §4 bounds)") {
  std::vector<Case> cases;
  for (const Case& k : block_cases())
    if (k.precision != Precision::fp32) cases.push_back(k);
  run_cases(cases);
}

TEST_CASE("cli: a sharded Qwen3-Next checkpoint directory: layer 3 in bf16 and fp32, layer 2 refused") {
  const uint32_t seed = std::random_device{}();
  std::mt19937 rng(seed);
  TempDir dir("ckpt");
  const fs::path model = dir.path / "Qwen3-Next-tiny";
  fs::create_directories(model);

  const json config = {{"architectures", {"Qwen3NextForCausalLM"}},
                       {"model_type", "qwen3_next"},
                       {"hidden_size", 64},
                       {"intermediate_size", 128},
                       {"num_hidden_layers", 8},
                       {"full_attention_interval", 4},
                       {"num_attention_heads", 4},
                       {"num_key_value_heads", 2},
                       {"head_dim", 32},
                       {"partial_rotary_factor", 0.25},
                       {"rope_theta", 10000000},
                       {"rope_scaling", nullptr},
                       {"rms_norm_eps", 1e-6},
                       {"attention_bias", false},
                       {"linear_num_key_heads", 2},
                       {"linear_num_value_heads", 4},
                       {"num_experts", 8},
                       {"torch_dtype", "bfloat16"},
                       {"vocab_size", 32}};
  write_text(model / "config.json", config.dump(2));
  BlockConfig c = qwen3_next(shape(64, 4, 2, 32));
  c.partial_rotary_factor = 0.25;
  c.rope_theta = 1e7;

  // Shard 1: embeddings, layer 2's Gated DeltaNet tensors, layer 3's norm and q_proj.
  // Shard 2: the rest of layer 3's attention and unrelated tensors.
  FileBuilder shard1, shard2, all;
  const StoredWeights w = add_weights(all, c, rng, DType::BF16, "model.layers.3.self_attn.", "model.layers.3.");
  for (const TensorToWrite& t : all.tensors) {
    const bool first = t.name == "model.layers.3.input_layernorm.weight" || t.name.ends_with("q_proj.weight");
    (first ? shard1 : shard2).tensors.push_back(t);
  }
  std::vector<float> unrelated = random_vec(rng, 32 * 64);
  shard1.add("model.embed_tokens.weight", {32, 64}, unrelated, DType::BF16);
  shard1.add("model.layers.2.linear_attn.in_proj_qkvz.weight", {24, 64}, std::span(unrelated).first(24 * 64), DType::BF16);
  shard1.add("model.layers.2.linear_attn.A_log", {4}, std::span(unrelated).first(4), DType::F32);
  shard1.add("model.layers.2.input_layernorm.weight", {64}, std::span(unrelated).first(64), DType::BF16);
  shard2.add("model.layers.3.post_attention_layernorm.weight", {64}, std::span(unrelated).first(64), DType::BF16);
  shard2.add("model.norm.weight", {64}, std::span(unrelated).last(64), DType::BF16);
  const std::string s1 = "model-00001-of-00002.safetensors", s2 = "model-00002-of-00002.safetensors";
  shard1.write((model / s1).string());
  shard2.write((model / s2).string());
  json index = {{"metadata", {{"total_size", shard1.total_bytes() + shard2.total_bytes()}}}, {"weight_map", json::object()}};
  for (const auto& t : shard1.tensors) index["weight_map"][t.name] = s1;
  for (const auto& t : shard2.tensors) index["weight_map"][t.name] = s2;
  write_text(model / "model.safetensors.index.json", index.dump(2));

  const int64_t B = 1, T = 4, P = 3, D = 64, KV = 2, Dh = 32;
  FileBuilder ifile;
  const auto hidden = ifile.add("hidden_states", {B, T, D}, random_vec(rng, size_t(B * T * D)), DType::BF16);
  const auto pk = ifile.add("past_key", {B, KV, P, Dh}, random_vec(rng, size_t(B * KV * P * Dh)), DType::F32);
  const auto pv = ifile.add("past_value", {B, KV, P, Dh}, random_vec(rng, size_t(B * KV * P * Dh)), DType::F32);
  const std::string input = dir / "input.safetensors";
  ifile.write(input);
  reference::Inputs in{.hidden = hidden, .batch = B, .tokens = T, .past = P, .past_key = pk, .past_value = pv};
  const reference::Result want = reference::forward(c, w.map, in);

  const std::string out_bf16 = dir / "out_bf16.safetensors", out_fp32 = dir / "out_fp32.safetensors",
                    out_l2 = dir / "out_l2.safetensors", out_l9 = dir / "out_l9.safetensors";
  auto args = [&](const std::string& layer, const std::string& out, std::vector<std::string> extra) {
    std::vector<std::string> a{"run", "--weights", model.string(), "--layer", layer, "--input", input, "--output", out};
    a.insert(a.end(), extra.begin(), extra.end());
    for (const auto& d : device_args()) a.push_back(d);
    return a;
  };
  const auto results = run_all({args("3", out_bf16, {"--precision", "bf16"}), args("3", out_fp32, {"--stats"}),
                                args("2", out_l2, {}), args("9", out_l9, {})},
                               dir.path);
  for (const auto& r : results) check_clean_exit(r);
  {
    INFO("stderr: " << results[0].err);
    CHECK(results[0].code == 0);
    CHECK(results[0].out.find("layer 3") != std::string::npos);
    if (results[0].code == 0) check_output(out_bf16, {&c, B, T, P, false, Precision::bf16}, want);
  }
  {
    // The reference saw the bf16 values exactly, so fp32 storage holds the fp32 bound.
    INFO("stderr: " << results[1].err);
    CHECK(results[1].code == 0);
    if (results[1].code == 0) check_output(out_fp32, {&c, B, T, P, true, Precision::fp32}, want);
  }
  {
    const CliResult& r = results[2];
    INFO("stderr: " << r.err);
    CHECK(r.code == 1);
    CHECK(r.err.find("layer 2") != std::string::npos);
    CHECK(r.err.find("not full attention") != std::string::npos);
    CHECK(r.err.find("Gated DeltaNet") != std::string::npos);
    CHECK(r.err.find("3, 7") != std::string::npos);  // the full-attention layers
    CHECK(!fs::exists(out_l2));
  }
  {
    const CliResult& r = results[3];
    INFO("stderr: " << r.err);
    CHECK(r.code == 1);
    CHECK(r.err.find("layer 9 is out of range") != std::string::npos);
    CHECK(!fs::exists(out_l9));
  }
}

TEST_CASE("cli: --help, no arguments and unknown commands") {
  TempDir dir("usage");
  const auto help = run_cli({"run", "--help"}, dir.path);
  check_clean_exit(help);
  CHECK(help.code == 0);
  CHECK(help.out.find("usage: vkgate run") != std::string::npos);
  CHECK(help.out.find("Exit codes") != std::string::npos);
  const auto none = run_cli({}, dir.path);
  check_clean_exit(none);
  CHECK(none.code == 2);
  CHECK(none.err.find("usage: vkgate") != std::string::npos);
  const auto unknown = run_cli({"frobnicate"}, dir.path);
  check_clean_exit(unknown);
  CHECK(unknown.code == 2);
  CHECK(unknown.err.find("unknown command 'frobnicate'") != std::string::npos);
}

// The README's way to validate from the environment: the loader warns that
// VK_INSTANCE_LAYERS added a layer, and that notice must not read as a
// validation message; anything the layer itself says still fails the test.
TEST_CASE("cli: the demo with validation enabled from the environment passes and prints no validation message") {
  TempDir dir("demo_env");
  std::vector<std::string> args{"demo", "--tokens", "3", "--batch", "2"};
  for (const auto& a : device_args()) args.push_back(a);
  const auto r = run_cli(args, dir.path,
                         {"VK_INSTANCE_LAYERS=VK_LAYER_KHRONOS_validation",
                          "VK_LAYER_ENABLES=VK_VALIDATION_FEATURE_ENABLE_SYNCHRONIZATION_VALIDATION_EXT"});
  check_clean_exit(r);
  CHECK(r.code == 0);
  CHECK(r.err.empty());
  CHECK(r.out.find("tolerance 1e-9: PASS") != std::string::npos);
}

}  // namespace test_cli
#endif  // VKGATE_CLI
