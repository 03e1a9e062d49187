// The CPU oracle of whole models: the MLP, the pre-norm decoder layer, the
// model and greedy decoding. The residual stream stays in double from the
// embeddings to the logits; each layer's attention is the block's oracle
// (reference.cpp), or a GLA model's layer the GLA oracle (reference_gla.cpp),
// run on double hidden states. Shares no code with the GPU path.
#include "vkgate/reference_model.hpp"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <string>

#include "vkgate/error.hpp"
#include "vkgate/reference.hpp"
#include "vkgate/reference_gdn.hpp"
#include "vkgate/reference_gla.hpp"

#include "reference/internal.hpp"

namespace vkgate::reference {

using internal::bad_argument;
using internal::bias_or_empty;
using internal::check_size;
using internal::linear_d;
using internal::rms_norm_d;

namespace {

using Vec = std::vector<double>;

// Every tensor of the model present, with its element count (the spans carry
// no shape); the errors name the full tensor.
void check_model_weights(const ModelConfig& cfg, const WeightMap& weights) {
  for (const TensorSpec& spec : expected_model_weights(cfg)) {
    const auto it = weights.find(spec.name);
    if (it == weights.end())
      throw Error(ErrorCode::missing_tensor, "weights: tensor '" + spec.name + "' is missing");
    if (int64_t(it->second.size()) != spec.numel())
      throw Error(ErrorCode::shape_mismatch, "weights: tensor '" + spec.name + "' has " +
                                                 std::to_string(it->second.size()) + " elements, expected shape " +
                                                 shape_text(spec.shape) + " = " + std::to_string(spec.numel()) +
                                                 " elements");
  }
}

// Rows of the embedding table for ids [B, T]; the first id out of range is named with its position.
Vec embed(const ModelConfig& cfg, std::span<const float> table, const ModelInputs& in) {
  const int64_t D = cfg.hidden_size(), V = cfg.vocab_size;
  Vec x;
  x.reserve(in.ids.size() * size_t(D));
  for (size_t i = 0; i < in.ids.size(); ++i) {
    const int64_t id = in.ids[i];
    if (id < 0 || id >= V)
      bad_argument("model_forward", "input id " + std::to_string(id) + " at [" +
                                        std::to_string(int64_t(i) / in.tokens) + ", " +
                                        std::to_string(int64_t(i) % in.tokens) + "] is outside [0, vocab_size " +
                                        std::to_string(V) + ")");
    x.insert(x.end(), table.begin() + id * D, table.begin() + (id + 1) * D);
  }
  return x;
}

double mean(const Vec& v) {
  double sum = 0;
  for (double x : v) sum += x;
  return sum / double(v.size());
}

double max_abs(const Vec& v) {
  double m = 0;
  for (double x : v) m = std::max(m, std::abs(x));
  return m;
}

// The sparse MoE on the normed rows xn [rows, D] (MoeConfig): the router's
// softmax over every expert, the top k (the lowest index first among equal
// probabilities), renormalised with norm_topk_prob, each chosen expert's
// SwiGLU weighted, plus the shared expert times σ(x̂·shared_expert_gate).
// Sets `load` [E] to each expert's share of the rows.
Vec sparse_mlp(const ModelConfig& cfg, const WeightMap& weights, int layer, const Vec& xn, int64_t rows,
               std::vector<double>& load) {
  const MoeConfig& m = cfg.moe;
  const int64_t D = cfg.hidden_size(), E = m.num_experts, Im = m.moe_intermediate_size;
  auto w = [&](const std::string& name) { return weights.at(layer_tensor_name(layer, name)); };
  const Vec logits = linear_d(xn, w("mlp.gate.weight"), {}, rows, E, D);
  Vec out(size_t(rows * D), 0.0);
  load.assign(size_t(E), 0.0);
  for (int64_t r = 0; r < rows; ++r) {
    const auto row = logits.begin() + r * E;
    const double top = *std::max_element(row, row + E);
    Vec p(static_cast<size_t>(E));
    double sum = 0;
    for (int64_t e = 0; e < E; ++e) sum += p[size_t(e)] = std::exp(row[e] - top);
    for (double& v : p) v /= sum;
    std::vector<int64_t> order(static_cast<size_t>(E));
    for (int64_t e = 0; e < E; ++e) order[size_t(e)] = e;
    std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return p[size_t(a)] > p[size_t(b)]; });
    order.resize(size_t(m.num_experts_per_tok));
    double chosen = 0;
    for (int64_t e : order) chosen += p[size_t(e)];
    const Vec x_row(xn.begin() + r * D, xn.begin() + (r + 1) * D);
    for (int64_t e : order) {
      const std::string name = "mlp.experts." + std::to_string(e) + ".";
      const double weight = m.norm_topk_prob ? p[size_t(e)] / chosen : p[size_t(e)];
      const Vec y = mlp(x_row, 1, D, Im, cfg.hidden_act, w(name + "gate_proj.weight"), w(name + "up_proj.weight"),
                        w(name + "down_proj.weight"));
      for (int64_t d = 0; d < D; ++d) out[size_t(r * D + d)] += weight * y[size_t(d)];
      load[size_t(e)] += 1.0 / double(rows);
    }
  }
  if (m.shared_expert_intermediate_size > 0) {
    const Vec shared = mlp(xn, rows, D, m.shared_expert_intermediate_size, cfg.hidden_act,
                           w("mlp.shared_expert.gate_proj.weight"), w("mlp.shared_expert.up_proj.weight"),
                           w("mlp.shared_expert.down_proj.weight"));
    const Vec gate = linear_d(xn, w("mlp.shared_expert_gate.weight"), {}, rows, 1, D);
    for (int64_t r = 0; r < rows; ++r) {
      const double s = 1.0 / (1.0 + std::exp(-gate[size_t(r)]));
      for (int64_t d = 0; d < D; ++d) out[size_t(r * D + d)] += s * shared[size_t(r * D + d)];
    }
  }
  return out;
}

// h + mlp(norm(h)) for the residual stream h [rows, D] after layer `layer`'s
// mixer; a sparse layer's expert shares are appended to `expert_load`.
Vec mlp_residual(const ModelConfig& cfg, const WeightMap& weights, int layer, const Vec& h, int64_t rows,
                 std::vector<double>& expert_load) {
  const int64_t D = cfg.hidden_size(), I = cfg.intermediate_size;
  const Vec hn = rms_norm_d(h, weights.at(layer_tensor_name(layer, cfg.mlp_norm_name())), rows, D, cfg.norm_eps(),
                            cfg.norm_kind());
  if (cfg.sparse_mlp(layer)) {
    std::vector<double> load;
    Vec out = sparse_mlp(cfg, weights, layer, hn, rows, load);
    expert_load.insert(expert_load.end(), load.begin(), load.end());
    for (size_t i = 0; i < out.size(); ++i) out[i] += h[i];
    return out;
  }
  auto w = [&](const char* name) { return weights.at(layer_tensor_name(layer, name)); };
  auto b = [&](const char* name) { return bias_or_empty(weights, cfg.mlp_bias, layer_tensor_name(layer, name)); };
  Vec out = mlp(hn, rows, D, I, cfg.hidden_act, w("mlp.gate_proj.weight"), w("mlp.up_proj.weight"),
                w("mlp.down_proj.weight"), b("mlp.gate_proj.bias"), b("mlp.up_proj.bias"), b("mlp.down_proj.bias"));
  for (size_t i = 0; i < out.size(); ++i) out[i] += h[i];
  return out;
}

// Layer `layer`'s mixer tensors under their bare names.
WeightMap mixer_view(const MixerConfig& mixer, const WeightMap& weights, int layer) {
  WeightMap bare;
  for (const TensorSpec& spec : mixer_weights(mixer))
    bare[spec.name] = weights.at(mixer_tensor_name(mixer, layer, spec.name));
  return bare;
}

// h = x + mixer(norm(x)) of one layer on the residual stream x [B, T, D], each
// kind by its own oracle: the block's (with its residual; its statistics
// appended to `r`), or GLA's from a zero state (gla_forward_d applies attn_norm).
struct MixerResidual {
  const WeightMap& bare;
  const Vec& x;
  const ModelInputs& in;
  std::span<const int64_t> rope_lengths;
  ModelResult& r;

  Vec operator()(const BlockConfig& a) const {
    Inputs block_in;
    block_in.batch = in.batch;
    block_in.tokens = in.tokens;
    const Result att = internal::forward_d(a, bare, x, block_in, rope_lengths);
    r.first_token_attn.insert(r.first_token_attn.end(), att.first_token_attn.begin(), att.first_token_attn.end());
    if (a.gate_kind != GateKind::none) r.gate_mean.push_back(mean(att.gate));
    return att.output;
  }
  Vec operator()(const GdnMixer& g) const {
    const int64_t rows = in.batch * in.tokens, D = g.config.hidden_size;
    GdnInputs gdn_in;
    gdn_in.batch = int(in.batch);
    gdn_in.tokens = int(in.tokens);
    const Vec xn = g.input_norm ? rms_norm_d(x, bare.at("input_layernorm.weight"), rows, D, g.config.rms_norm_eps,
                                             *g.input_norm)
                                : x;
    Vec h = internal::gdn_forward_d(g.config, bare, xn, gdn_in).output;
    for (size_t i = 0; i < h.size(); ++i) h[i] += x[i];
    return h;
  }
  Vec operator()(const GlaMixer& g) const {
    GlaInputs gla_in;
    gla_in.batch = int(in.batch);
    gla_in.tokens = int(in.tokens);
    Vec h = internal::gla_forward_d(g.config, bare, x, gla_in).output;
    for (size_t i = 0; i < h.size(); ++i) h[i] += x[i];
    return h;
  }
};

}  // namespace

double activation(Activation a, double x) {
  switch (a) {
    case Activation::silu: return x / (1.0 + std::exp(-x));
    // Written as erfc and as 2σ(2u) rather than 1 + erf and 1 + tanh(u), which
    // cancel for negative x even in double.
    case Activation::gelu: return 0.5 * x * std::erfc(-x / std::numbers::sqrt2);
    case Activation::gelu_tanh: {
      const double u = std::sqrt(2.0 / std::numbers::pi) * (x + 0.044715 * x * x * x);
      return x / (1.0 + std::exp(-2.0 * u));
    }
    case Activation::sigmoid: return internal::sigmoid(x);
  }
  return 0;  // not reached: every Activation is handled above
}

std::vector<double> mlp(std::span<const double> x, int64_t rows, int64_t hidden, int64_t intermediate,
                        Activation act, std::span<const float> gate_w, std::span<const float> up_w,
                        std::span<const float> down_w, std::span<const float> gate_b,
                        std::span<const float> up_b, std::span<const float> down_b) {
  check_size("mlp", "x", x.size(), {rows, hidden});
  check_size("mlp", "gate_w", gate_w.size(), {intermediate, hidden});
  check_size("mlp", "up_w", up_w.size(), {intermediate, hidden});
  check_size("mlp", "down_w", down_w.size(), {hidden, intermediate});
  if (!gate_b.empty()) check_size("mlp", "gate_b", gate_b.size(), {intermediate});
  if (!up_b.empty()) check_size("mlp", "up_b", up_b.size(), {intermediate});
  if (!down_b.empty()) check_size("mlp", "down_b", down_b.size(), {hidden});

  Vec g = linear_d(x, gate_w, gate_b, rows, intermediate, hidden);
  const Vec u = linear_d(x, up_w, up_b, rows, intermediate, hidden);
  for (size_t i = 0; i < g.size(); ++i) g[i] = activation(act, g[i]) * u[i];
  return linear_d(g, down_w, down_b, rows, hidden, intermediate);
}

ModelResult model_forward(const ModelConfig& cfg, const WeightMap& weights, const ModelInputs& in) {
  check_model_weights(cfg, weights);  // validates cfg first
  if (in.batch <= 0 || in.tokens <= 0)
    bad_argument("model_forward", "batch (" + std::to_string(in.batch) + ") and tokens (" +
                                      std::to_string(in.tokens) + ") must be positive");
  check_size("model_forward", "ids", in.ids.size(), {in.batch, in.tokens});
  // Each position's RoPE length: the end of the step that fed it.
  std::vector<int64_t> rope_lengths;
  if (!in.steps.empty()) {
    int64_t end = 0;
    for (int64_t n : in.steps) {
      if (n <= 0 || n > in.tokens - end)
        bad_argument("model_forward", "steps must be positive token counts summing to tokens (" +
                                          std::to_string(in.tokens) + ")");
      end += n;
      rope_lengths.insert(rope_lengths.end(), size_t(n), end);
    }
    if (end != in.tokens)
      bad_argument("model_forward", "steps sum to " + std::to_string(end) + ", not to tokens (" +
                                        std::to_string(in.tokens) + ")");
  }

  const int64_t rows = in.batch * in.tokens, D = cfg.hidden_size();
  ModelResult r;
  r.hidden_states.push_back(embed(cfg, weights.at(cfg.embedding_name()), in));
  // Each layer's attention statistics (none for a GLA or Gated DeltaNet layer).
  std::vector<ModelResult> layer_stats(size_t(cfg.num_hidden_layers));
  for (int layer = 0; layer < cfg.num_hidden_layers; ++layer) {
    // h = x + mixer(norm(x)), then h + mlp(norm(h))
    const MixerConfig mixer = cfg.mixer(layer);
    const WeightMap bare = mixer_view(mixer, weights, layer);
    const Vec h = std::visit(MixerResidual{bare, r.hidden_states.back(), in, rope_lengths, layer_stats[size_t(layer)]},
                             mixer);
    Vec next = mlp_residual(cfg, weights, layer, h, rows, r.expert_load);
    r.max_activation.push_back(max_abs(next));
    r.hidden_states.push_back(std::move(next));
  }
  for (int layer = 0; layer < cfg.num_hidden_layers; ++layer) {
    const ModelResult& s = layer_stats[size_t(layer)];
    if (s.first_token_attn.empty()) continue;
    r.attention_layers.push_back(layer);
    r.first_token_attn.insert(r.first_token_attn.end(), s.first_token_attn.begin(), s.first_token_attn.end());
    r.gate_mean.insert(r.gate_mean.end(), s.gate_mean.begin(), s.gate_mean.end());
  }
  r.final_norm = rms_norm_d(r.hidden_states.back(), weights.at("model.norm.weight"), rows, D, cfg.norm_eps(),
                            cfg.norm_kind());
  const char* head = cfg.tie_word_embeddings ? cfg.embedding_name() : "lm_head.weight";
  r.logits = linear_d(r.final_norm, weights.at(head), {}, rows, cfg.vocab_size, D);
  return r;
}

std::vector<int64_t> greedy_generate(const ModelConfig& cfg, const WeightMap& weights,
                                     std::span<const int64_t> prompt, int max_new_tokens, bool stop_at_eos) {
  if (prompt.empty()) bad_argument("greedy_generate", "the prompt is empty");
  if (max_new_tokens < 0)
    bad_argument("greedy_generate", "max_new_tokens (" + std::to_string(max_new_tokens) + ") is negative");
  std::vector<int64_t> ids(prompt.begin(), prompt.end()), generated;
  std::vector<int64_t> steps{int64_t(prompt.size())};  // as a cached generation feeds the model
  const auto& eos = cfg.eos_token_ids;
  for (int step = 0; step < max_new_tokens; ++step) {
    const ModelResult r = model_forward(cfg, weights, {ids, 1, int64_t(ids.size()), steps});
    steps.push_back(1);
    const auto last = r.logits.end() - cfg.vocab_size;
    // max_element returns the first of equal maxima: the lowest id on ties, as torch.argmax.
    const int64_t next = std::max_element(last, r.logits.end()) - last;
    generated.push_back(next);
    ids.push_back(next);
    if (stop_at_eos && std::find(eos.begin(), eos.end(), next) != eos.end()) break;
  }
  return generated;
}

}  // namespace vkgate::reference
