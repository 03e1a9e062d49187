// GlaConfig: the shape and conventions of one gated linear attention (GLA)
// layer, fla's GatedLinearAttention with the seed's convex coupling as an
// option (README "Gated linear attention").
//
// Per head, d_k = head_k_dim(), d_v = head_v_dim():
//   log α_t = logsigmoid(gk_t) / gate_logit_normalizer   (then ≥ clamp_min when set)
//   k̃_t    = φ(k_t)                (key coupling none, fla)
//          = (1 − α_t) ⊙ φ(k_t)     (convex: S_t = α ⊙ S_{t−1} + (1 − α) ⊙ φ(k)ᵀv)
//   S_t    = diag(α_t) · S_{t−1} + k̃_tᵀ v_t      state [d_k, d_v] per query head
//   o_t    = scale · φ(q_t) · S_t
// then RMSNorm(o_t)·w per head when an output-norm weight is present, times
// swish(g_t) when use_output_gate, then o_proj. Heads of a KV group share k,
// v and the forget gate (as GQA) and keep their own state.
//
// Thread safety: a plain value, as BlockConfig.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "vkgate/weights.hpp"

namespace vkgate {

enum class FeatureMap { none, relu, elu_plus_one };  // φ on q and k
enum class KeyCoupling { none, convex };

const char* to_string(FeatureMap f) noexcept;
const char* to_string(KeyCoupling c) noexcept;

struct GlaConfig {
  int hidden_size = 0;    // D
  int num_heads = 0;      // H
  int num_kv_heads = 0;   // KV (0 in a parsed config never: defaults to H)
  double expand_k = 0.5;
  double expand_v = 1.0;
  FeatureMap feature_map = FeatureMap::none;
  bool use_output_gate = true;
  double gate_logit_normalizer = 16;
  std::optional<double> clamp_min;
  double norm_eps = 1e-6;
  KeyCoupling key_coupling = KeyCoupling::none;  // key gla_key_coupling
  std::optional<double> gla_scale;               // absent: d_k^-0.5

  // Throws Error(invalid_config) naming the key when the config is impossible
  // (e.g. int(D·expand_k) not divisible by num_heads).
  void validate() const;

  int head_k_dim() const { return int(double(hidden_size) * expand_k) / num_heads; }  // fla's int(D·expand_k) / H
  int head_v_dim() const { return int(double(hidden_size) * expand_v) / num_heads; }
  int group_size() const { return num_heads / num_kv_heads; }
  double scale() const;  // gla_scale, or d_k^-0.5

  bool operator==(const GlaConfig&) const = default;
};

// Parses a GLA layer's config.json (`"mixer": "gla"`) or a `model_type: "gla"`
// model's: the keys above under their config names (`gla_key_coupling`,
// `gla_scale`; fla's `num_heads`, `num_kv_heads`, ...). `source` starts every
// error message; a known key with a wrong type or value is an
// Error(invalid_config) naming it.
GlaConfig parse_gla_config_json(std::string_view json_text, const std::string& source);
GlaConfig load_gla_config(const std::string& path);
// Whether a config.json describes a GLA layer or model: `"mixer": "gla"` or `model_type: "gla"`.
bool is_gla_config_json(std::string_view json_text, const std::string& source);

// The optional forms a layer's weights take, read from which tensors exist.
struct GlaForms {
  int low_rank_dim = 0;     // r of gk_proj.0/gk_proj.1; 0: the single gk_proj
  std::string output_norm;  // "g_norm_swish_gate.weight", "g_norm.weight", or "" (no norm)
  bool attn_norm = false;   // attn_norm.weight [D], applied to the input first
  bool operator==(const GlaForms&) const = default;
};
// The forms of the tensors in `weights` (bare names): Error(missing_tensor)
// naming what is missing when neither forget-gate form is complete,
// Error(shape_mismatch) when gk_proj.0.weight is not [r, D].
GlaForms gla_forms(const GlaConfig& cfg, const TensorMap& weights);
// Every tensor the layer reads in `forms`, with its shape.
std::vector<TensorSpec> gla_expected_weights(const GlaConfig& cfg, const GlaForms& forms);
// gla_forms, then each expected tensor present with its shape and a float dtype
// (errors as check_weights).
GlaForms check_gla_weights(const GlaConfig& cfg, const TensorMap& weights);

}  // namespace vkgate
