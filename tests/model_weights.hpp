// Random whole models for the GPU tests: a ModelConfig by the numbers, and
// weights for it held as owned vectors plus the TensorMap / WeightMap views
// the Model and the reference take.
#pragma once

#include <cmath>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "vkgate/model_config.hpp"
#include "vkgate/weights.hpp"

namespace vkgate::test {

struct TinyModel {
  const char* model_type = "qwen3";
  int hidden = 64, heads = 4, kv_heads = 2, head_dim = 16, layers = 2, inter = 96, vocab = 200;
  GateKind gate = GateKind::none;
  GatePosition gate_position = GatePosition::sdpa;  // other positions read gate_proj (separate layout)
  bool tied = false, bias = false;  // bias: attention_bias (and mlp_bias for llama)
  Activation act = Activation::silu;

  ModelConfig config() const {
    ModelConfig m;
    m.model_type = model_type;
    BlockConfig& a = m.attention;
    a.hidden_size = hidden;
    a.num_heads = heads;
    a.num_kv_heads = kv_heads;
    a.head_dim = head_dim;
    a.rope_theta = 10000.0;
    a.gate_kind = gate;
    a.gate_position = gate_position;
    a.gate_layout = gate_position == GatePosition::sdpa ? GateLayout::official_grouped : GateLayout::separate;
    a.norm_kind = NormKind::plain;
    a.use_qk_norm = std::string(model_type) == "qwen3";
    a.qkv_bias = a.o_bias = bias;
    a.residual = true;
    a.causal = true;
    a.num_hidden_layers = layers;
    m.num_hidden_layers = layers;
    m.intermediate_size = inter;
    m.vocab_size = vocab;
    m.hidden_act = act;
    m.mlp_bias = bias && std::string(model_type) == "llama";
    m.tie_word_embeddings = tied;
    m.eos_token_ids = {1};
    return m;
  }
};

// A tiny fla GLA model (model_type "gla"): d_k = int(D·expand_k)/H, d_v =
// int(D·expand_v)/H. low_rank 0 and output_norm "" are the layer's forms that
// only a ModelConfig made in code asks for (the single gk_proj, no norm).
struct TinyGla {
  int hidden = 32, heads = 4, kv_heads = 2, layers = 2, inter = 48, vocab = 50;
  double expand_k = 0.5, expand_v = 1.0, norm_eps = 1e-5;
  // The per-head output RMSNorm maps a near-zero head output (o_0 = scale·(q·k)·v
  // with q·k ≈ 0) to ±v/rms(v): a 16-bit rounding of q or k can flip that whole
  // head. With norm_eps 1e-5, 7% of these tiny random models (d_k 4) miss the
  // bf16 bound by that alone (rounding only the weights to bf16 in the double
  // reference moved the logits by NMSE up to 2.8e-3); an eps of 0.1, still far
  // below a head's typical mean square, keeps such heads small, so the fp16/bf16
  // bounds measure the storage (bf16 worst 5.3e-4 in 30 draws).
  static constexpr double kRoundingSafeEps = 0.1;
  int low_rank = 4;
  bool output_gate = true, tied = false;
  std::string output_norm = "g_norm_swish_gate.weight";
  FeatureMap feature_map = FeatureMap::none;
  KeyCoupling coupling = KeyCoupling::none;

  ModelConfig config() const {
    ModelConfig m;
    m.model_type = "gla";
    GlaConfig g;
    g.hidden_size = hidden;
    g.num_heads = heads;
    g.num_kv_heads = kv_heads;
    g.expand_k = expand_k;
    g.expand_v = expand_v;
    g.use_output_gate = output_gate;
    g.feature_map = feature_map;
    g.key_coupling = coupling;
    g.norm_eps = norm_eps;
    m.gla = g;
    m.gla_forms = {low_rank, output_norm, true};
    m.num_hidden_layers = layers;
    m.intermediate_size = inter;
    m.vocab_size = vocab;
    m.tie_word_embeddings = tied;
    m.eos_token_ids = {1};
    return m;
  }
};

struct RandomModel {
  ModelConfig cfg;
  std::map<std::string, std::vector<float>> data;
  WeightMap map;
  TensorMap tensors;

  RandomModel(const ModelConfig& c, std::mt19937& rng) : cfg(c) {
    for (const TensorSpec& spec : expected_model_weights(cfg)) {
      // Linear weights ~ N(0, 1/in) keep activations O(1); norm weights near
      // 1 (plain RMSNorm); biases small; embeddings O(1).
      const bool norm = spec.name.find("norm") != std::string::npos;
      const bool bias = spec.name.find(".bias") != std::string::npos;
      const bool embed = spec.name == cfg.embedding_name();
      const double sd = norm ? 0.2 : bias ? 0.1 : embed ? 1.0 : 1.0 / std::sqrt(double(spec.shape.back()));
      // A zero-centred norm (x̂·(1 + w): qwen3_next's, except the Gated DeltaNet's
      // output norm) has its weights near 0, as trained ones are; near 1 each
      // would double its input and sharpen every softmax after it.
      const bool zero_centered = norm && cfg.norm_kind() == NormKind::zero_centered &&
                                 spec.name.find("linear_attn.") == std::string::npos;
      std::normal_distribution<float> dist(norm && !zero_centered ? 1.0f : 0.0f, float(sd));
      auto& v = data[spec.name];
      v.resize(size_t(spec.numel()));
      for (float& x : v) x = dist(rng);
    }
    for (auto& [name, v] : data) map[name] = v;
    tensors = as_tensors(map);
  }
};

// Positions [from, from + count) of each of `batch` rows of v [batch, tokens,
// width] (width = v.size() / (batch·tokens)): a step's ids, or the logits a
// step returns.
template <typename T>
std::vector<T> positions(const std::vector<T>& v, int batch, int tokens, int from, int count = 1) {
  const size_t width = v.size() / (size_t(batch) * size_t(tokens));
  std::vector<T> out;
  for (int b = 0; b < batch; ++b) {
    const auto row = v.begin() + long((size_t(b) * size_t(tokens) + size_t(from)) * width);
    out.insert(out.end(), row, row + long(size_t(count) * width));
  }
  return out;
}

inline std::vector<int64_t> random_ids(std::mt19937& rng, size_t n, int vocab) {
  std::uniform_int_distribution<int64_t> dist(0, vocab - 1);
  std::vector<int64_t> ids(n);
  for (int64_t& id : ids) id = dist(rng);
  return ids;
}

// A tiny Qwen3-Next config.json with dense MLPs: four layers, every second
// full attention (GDN, attention, GDN, attention).
inline nlohmann::json tiny_qwen3_next_json() {
  return {{"model_type", "qwen3_next"}, {"hidden_size", 32}, {"num_attention_heads", 2},
          {"num_key_value_heads", 1}, {"head_dim", 16}, {"intermediate_size", 48},
          {"num_hidden_layers", 4}, {"vocab_size", 60}, {"full_attention_interval", 2},
          {"linear_num_key_heads", 2}, {"linear_num_value_heads", 4}, {"linear_key_head_dim", 8},
          {"linear_value_head_dim", 6}, {"linear_conv_kernel_dim", 3}, {"num_experts", 0},
          {"rms_norm_eps", 1e-6}, {"rope_theta", 10000.0}, {"eos_token_id", 1}};
}

}  // namespace vkgate::test
