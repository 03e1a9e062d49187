// The CPU oracle of a GLA layer: the recurrence one token at a time, in
// double, exactly as gla_config.hpp writes it. The GPU computes it in chunks;
// this stays the plain form so that a chunking mistake cannot be shared.
#include "vkgate/reference_gla.hpp"

#include <algorithm>
#include <cmath>
#include <string>

#include "vkgate/error.hpp"

#include "reference/internal.hpp"

namespace vkgate::reference {

namespace {

using internal::bad_argument;
using internal::check_size;
using internal::linear_d;
using internal::rms_norm_d;
using Vec = std::vector<double>;

// Both branches take log1p of a number ≤ 1, so neither overflows for large |x|.
double logsigmoid(double x) { return x < 0 ? x - std::log1p(std::exp(x)) : -std::log1p(std::exp(-x)); }

double swish(double x) { return x / (1.0 + std::exp(-x)); }

double feature(FeatureMap f, double x) {
  switch (f) {
    case FeatureMap::none: return x;
    case FeatureMap::relu: return std::max(0.0, x);
    case FeatureMap::elu_plus_one: return x > 0 ? x + 1.0 : std::exp(x);
  }
  return x;
}

void apply_feature_map(FeatureMap f, Vec& x) {
  for (double& v : x) v = feature(f, v);
}

// x [rows, KV, d] -> [rows, H, d]: query head h reads KV head h / G (grouped).
Vec repeat_kv(const Vec& x, int64_t rows, int64_t heads, int64_t group, int64_t d) {
  const int64_t kv_heads = heads / group;
  Vec y(size_t(rows * heads * d));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t i = 0; i < d; ++i)
        y[size_t((r * heads + h) * d + i)] = x[size_t((r * kv_heads + h / group) * d + i)];
  return y;
}

void check_inputs(const GlaConfig& cfg, const GlaInputs& in, size_t hidden_size) {
  if (in.batch <= 0 || in.tokens <= 0)
    bad_argument("gla_forward", "batch (" + std::to_string(in.batch) + ") and tokens (" +
                                    std::to_string(in.tokens) + ") must be positive");
  check_size("gla_forward", "hidden", hidden_size, {in.batch, in.tokens, cfg.hidden_size});
  if (!in.initial_state.empty())
    check_size("gla_forward", "initial_state", in.initial_state.size(),
               {in.batch, cfg.num_heads, cfg.head_k_dim(), cfg.head_v_dim()});
}

// The forget-gate logits gk [rows, KV·d_k], through the low-rank pair or the single projection.
Vec forget_gate_logits(const GlaConfig& cfg, const GlaForms& forms, const WeightMap& w, const Vec& xn,
                       int64_t rows) {
  const int64_t D = cfg.hidden_size, width = int64_t(cfg.num_kv_heads) * cfg.head_k_dim();
  if (forms.low_rank_dim == 0)
    return linear_d(xn, w.at("gk_proj.weight"), w.at("gk_proj.bias"), rows, width, D);
  const int64_t r = forms.low_rank_dim;
  const Vec low = linear_d(xn, w.at("gk_proj.0.weight"), {}, rows, r, D);
  return linear_d(low, w.at("gk_proj.1.weight"), w.at("gk_proj.1.bias"), rows, width, r);
}

Vec log_forget_gate(const GlaConfig& cfg, const Vec& gk) {
  Vec log_a(gk.size());
  for (size_t i = 0; i < gk.size(); ++i) {
    log_a[i] = logsigmoid(gk[i]) / cfg.gate_logit_normalizer;
    if (cfg.clamp_min) log_a[i] = std::max(log_a[i], *cfg.clamp_min);
  }
  return log_a;
}

// S_t = diag(α_t)·S_{t−1} + k̃_tᵀ v_t and o_t = scale·φ(q_t)·S_t for every
// (batch, head); q, k, v, log_a per query head, [B, T, H, ·]. Fills o_core,
// states and final_state of `r`.
void run_recurrence(const GlaConfig& cfg, std::span<const float> initial_state, bool keep_states, int64_t B,
                    int64_t T, GlaResult& r) {
  const int64_t H = cfg.num_heads, dk = cfg.head_k_dim(), dv = cfg.head_v_dim();
  const double scale = cfg.scale();
  r.o_core.assign(size_t(B * T * H * dv), 0.0);
  r.states.assign(keep_states ? size_t(B * T * H * dk * dv) : 0, 0.0);
  r.final_state.assign(size_t(B * H * dk * dv), 0.0);
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t h = 0; h < H; ++h) {
      double* S = r.final_state.data() + (b * H + h) * dk * dv;  // updated in place, token by token
      if (!initial_state.empty())
        std::copy_n(initial_state.data() + (b * H + h) * dk * dv, dk * dv, S);
      for (int64_t t = 0; t < T; ++t) {
        const int64_t row = (b * T + t) * H + h;
        const double* q = r.q.data() + row * dk;
        const double* k = r.k.data() + row * dk;
        const double* v = r.v.data() + row * dv;
        const double* log_a = r.log_a.data() + row * dk;
        for (int64_t i = 0; i < dk; ++i) {
          // 1 − α as −expm1(log α): exact where α is close to 1, as forget gates mostly are.
          const double k_tilde = cfg.key_coupling == KeyCoupling::convex ? -std::expm1(log_a[i]) * k[i] : k[i];
          const double a = std::exp(log_a[i]);
          for (int64_t j = 0; j < dv; ++j) S[i * dv + j] = a * S[i * dv + j] + k_tilde * v[j];
        }
        if (keep_states) std::copy_n(S, dk * dv, r.states.data() + row * dk * dv);
        double* o = r.o_core.data() + row * dv;
        for (int64_t j = 0; j < dv; ++j) {
          double acc = 0;
          for (int64_t i = 0; i < dk; ++i) acc += q[i] * S[i * dv + j];
          o[j] = scale * acc;
        }
      }
    }
  }
}

}  // namespace

GlaResult gla_forward(const GlaConfig& cfg, const WeightMap& weights, const GlaInputs& in) {
  return internal::gla_forward_d(cfg, weights, Vec(in.hidden.begin(), in.hidden.end()), in);
}

GlaResult internal::gla_forward_d(const GlaConfig& cfg, const WeightMap& weights, std::span<const double> x,
                                  const GlaInputs& in) {
  cfg.validate();
  const GlaForms forms = check_gla_weights(cfg, as_tensors(weights));
  check_inputs(cfg, in, x.size());

  const int64_t B = in.batch, T = in.tokens, rows = B * T;
  const int64_t D = cfg.hidden_size, H = cfg.num_heads, KV = cfg.num_kv_heads, G = cfg.group_size();
  const int64_t dk = cfg.head_k_dim(), dv = cfg.head_v_dim();

  const Vec xn = forms.attn_norm
                     ? rms_norm_d(x, weights.at("attn_norm.weight"), rows, D, cfg.norm_eps, NormKind::plain)
                     : Vec(x.begin(), x.end());

  GlaResult r;
  r.q = linear_d(xn, weights.at("q_proj.weight"), {}, rows, H * dk, D);
  Vec k = linear_d(xn, weights.at("k_proj.weight"), {}, rows, KV * dk, D);
  apply_feature_map(cfg.feature_map, r.q);
  apply_feature_map(cfg.feature_map, k);
  r.k = repeat_kv(k, rows, H, G, dk);
  r.v = repeat_kv(linear_d(xn, weights.at("v_proj.weight"), {}, rows, KV * dv, D), rows, H, G, dv);
  r.log_a = repeat_kv(log_forget_gate(cfg, forget_gate_logits(cfg, forms, weights, xn, rows)), rows, H, G, dk);

  run_recurrence(cfg, in.initial_state, in.keep_states, B, T, r);

  // [B, T, H, d_v] is already o_proj's input layout [B·T, H·d_v].
  Vec y = forms.output_norm.empty()
              ? r.o_core
              : rms_norm_d(r.o_core, weights.at(forms.output_norm), rows * H, dv, cfg.norm_eps, NormKind::plain);
  if (cfg.use_output_gate) {
    const Vec g = linear_d(xn, weights.at("g_proj.weight"), {}, rows, H * dv, D);
    for (size_t i = 0; i < y.size(); ++i) y[i] *= swish(g[i]);
  }
  r.output = linear_d(y, weights.at("o_proj.weight"), {}, rows, D, H * dv);
  return r;
}

}  // namespace vkgate::reference
