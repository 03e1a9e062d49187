// GlaConfig: validation, config.json parsing, and the tensors a GLA layer reads.
//
// Key names follow fla's GLAConfig (num_heads, num_kv_heads, expand_k, ...),
// with the Hugging Face spellings of the head counts accepted as well, so a
// config written either way reads the same.
#include "vkgate/gla_config.hpp"

#include <array>
#include <cmath>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "io/config_limits.hpp"
#include "io/json_keys.hpp"
#include "vkgate/error.hpp"

namespace vkgate {

const char* to_string(FeatureMap f) noexcept {
  switch (f) {
    case FeatureMap::none: return "none";
    case FeatureMap::relu: return "relu";
    case FeatureMap::elu_plus_one: return "elu_plus_one";
  }
  return "?";
}

const char* to_string(KeyCoupling c) noexcept { return c == KeyCoupling::none ? "none" : "convex"; }

namespace {

constexpr double kMaxRows = double(limits::kMaxRows);
// The state of one head is d_k × d_v. Released GLA models use d_k ≤ 256 and
// d_v ≤ 512; the bounds leave room while keeping one head's state small.
constexpr int kMaxHeadKDim = 512;
constexpr int kMaxHeadVDim = 1024;

// int(D·expand) must split evenly over the heads into a head dimension in 1..max_dim
// (fla computes the key and value widths this way, truncating).
void check_head_width(const char* key, const char* dim, double expand, int hidden_size,
                      int num_heads, int max_dim) {
  if (!(expand > 0) || !std::isfinite(expand)) limits::bad(key, "must be positive, got " + limits::number_text(expand));
  const double width = double(hidden_size) * expand;
  if (width > kMaxRows)
    limits::bad(key, "× hidden_size (" + limits::number_text(width) + " rows) is too large");
  const int w = int(width);
  if (w % num_heads != 0)
    limits::bad(key, std::string("gives ") + dim + " not divisible by num_heads: int(hidden_size · " + key + ") = " +
                         std::to_string(w) + " is not divisible by num_heads (" + std::to_string(num_heads) + ")");
  const int d = w / num_heads;
  if (d < 1 || d > max_dim)
    limits::bad(key, std::string("gives ") + dim + " = " + std::to_string(d) + ", which must be in 1.." +
                         std::to_string(max_dim));
}

}  // namespace

void GlaConfig::validate() const {
  limits::check_range("hidden_size", hidden_size, 1, limits::kMaxRows);
  limits::check_range("num_heads", num_heads, 1, limits::kMaxRows);
  limits::check_range("num_kv_heads", num_kv_heads, 1, limits::kMaxRows);
  if (num_heads % num_kv_heads != 0)
    limits::bad("num_kv_heads", "(" + std::to_string(num_kv_heads) + ") must divide num_heads (" +
                                    std::to_string(num_heads) + ")");
  check_head_width("expand_k", "d_k", expand_k, hidden_size, num_heads, kMaxHeadKDim);
  check_head_width("expand_v", "d_v", expand_v, hidden_size, num_heads, kMaxHeadVDim);
  if (!(gate_logit_normalizer > 0) || !std::isfinite(gate_logit_normalizer))
    limits::bad("gate_logit_normalizer", "must be positive, got " + limits::number_text(gate_logit_normalizer));
  // log α = logsigmoid(·)/normalizer is never positive: a positive floor would make α > 1.
  if (clamp_min && !(*clamp_min <= 0))
    limits::bad("clamp_min", "must be ≤ 0 (it bounds log α, which is ≤ 0), got " + limits::number_text(*clamp_min));
  if (!(norm_eps > 0)) limits::bad("norm_eps", "must be positive, got " + limits::number_text(norm_eps));
  if (gla_scale && (!(*gla_scale > 0) || !std::isfinite(*gla_scale)))
    limits::bad("gla_scale", "must be positive, got " + limits::number_text(*gla_scale));
}

double GlaConfig::scale() const { return gla_scale ? *gla_scale : 1.0 / std::sqrt(double(head_k_dim())); }

// ---- config.json ----

namespace {

using nlohmann::json;

bool non_positive(double x) { return x <= 0; }

constexpr std::array kFeatureMaps{FeatureMap::none, FeatureMap::relu, FeatureMap::elu_plus_one};
constexpr std::array kKeyCouplings{KeyCoupling::none, KeyCoupling::convex};

bool names_gla(const json& root, const char* key) {
  const auto it = root.find(key);
  return it != root.end() && *it == "gla";
}

// A positive integer under fla's key or its Hugging Face alias; both present
// and different is an error, since either could be the stale one.
std::optional<int> aliased_int(const KeyReader& r, const char* key, const char* alias) {
  const std::optional<int> a = r.positive_int(key), b = r.positive_int(alias);
  if (a && b && *a != *b)
    r.fail("key '" + r.name(key) + "' (" + std::to_string(*a) + ") disagrees with '" + r.name(alias) + "' (" +
           std::to_string(*b) + ")");
  return a ? a : b;
}

// A layer of another kind (a hybrid model's attention layer, say) must not be read as GLA.
void check_mixer(const KeyReader& r, const json& root) {
  const std::optional<std::string> mixer = r.string("mixer");
  if (mixer && *mixer != "gla" && !names_gla(root, "model_type"))
    r.fail("key 'mixer' is \"" + *mixer + "\": not a GLA layer (expected \"gla\")");
}

}  // namespace

GlaConfig parse_gla_config_json(std::string_view json_text, const std::string& source) {
  const json root = parse_json_object(json_text, source);
  const KeyReader r(root, source);
  check_mixer(r, root);

  GlaConfig c;
  c.hidden_size = r.required_positive_int("hidden_size");
  const std::optional<int> heads = aliased_int(r, "num_heads", "num_attention_heads");
  if (!heads) r.fail("key 'num_heads' is required (a positive integer)");
  c.num_heads = *heads;
  c.num_kv_heads = aliased_int(r, "num_kv_heads", "num_key_value_heads").value_or(c.num_heads);
  c.expand_k = r.number("expand_k", limits::positive, "a positive number").value_or(c.expand_k);
  c.expand_v = r.number("expand_v", limits::positive, "a positive number").value_or(c.expand_v);
  // JSON null (fla's default) reads as absent: no feature map.
  c.feature_map = r.enumeration("feature_map", kFeatureMaps).value_or(FeatureMap::none);
  c.use_output_gate = r.boolean("use_output_gate").value_or(c.use_output_gate);
  c.gate_logit_normalizer =
      r.number("gate_logit_normalizer", limits::positive, "a positive number").value_or(c.gate_logit_normalizer);
  c.clamp_min = r.number("clamp_min", non_positive, "null or a number ≤ 0");
  c.norm_eps = r.number("norm_eps", limits::positive, "a positive number").value_or(c.norm_eps);
  c.key_coupling = r.enumeration("gla_key_coupling", kKeyCouplings).value_or(KeyCoupling::none);
  c.gla_scale = r.number("gla_scale", limits::positive, "null or a positive number");
  // fla's GLA options vkgate does not implement: read as plain GLA they would
  // give wrong outputs without a word.
  if (r.boolean("use_short_conv").value_or(false))
    r.fail("key 'use_short_conv' is true: vkgate's GLA has no short convolution on q, k and v");
  if (r.boolean("use_gv").value_or(false)) r.fail("key 'use_gv' is true: vkgate's GLA has no value forget gate");
  if (!r.boolean("use_gk").value_or(true)) r.fail("key 'use_gk' is false: vkgate's GLA always has the key forget gate");

  validate_as(source, [&] { c.validate(); });
  return c;
}

GlaConfig load_gla_config(const std::string& path) { return parse_gla_config_json(read_config_text(path), path); }

bool is_gla_config_json(std::string_view json_text, const std::string& source) {
  const json root = parse_json_object(json_text, source);
  return names_gla(root, "mixer") || names_gla(root, "model_type");
}

// ---- weights ----

namespace {

constexpr const char* kLowRankIn = "gk_proj.0.weight";

[[noreturn]] void missing(const std::string& what) {
  throw Error(ErrorCode::missing_tensor, "weights: tensor " + what + " is missing");
}

// r of gk_proj.0.weight [r, D]; a tensor without a shape (fp32 spans) gives r by its size.
int low_rank_dim(const HostTensor& t, int64_t D) {
  const int64_t n = t.numel();
  const bool ok = t.shape.empty() ? n >= D && n % D == 0 && n / D <= int64_t(kMaxRows)
                                  : t.shape.size() == 2 && t.shape[1] == D && t.shape[0] >= 1 &&
                                        t.shape[0] <= int64_t(kMaxRows);
  if (!ok) {
    std::ostringstream os;
    os << "weights: tensor '" << kLowRankIn << "' has ";
    if (t.shape.empty()) os << n << " elements";
    else os << "shape " << shape_text(t.shape);
    os << ", expected [r, " << D << "] (the low-rank forget gate's first projection, 1 ≤ r ≤ 2^24)";
    throw Error(ErrorCode::shape_mismatch, os.str());
  }
  return int(t.shape.empty() ? n / D : t.shape[0]);
}

}  // namespace

GlaForms gla_forms(const GlaConfig& cfg, const TensorMap& weights) {
  cfg.validate();
  auto has = [&](const char* name) { return weights.count(name) != 0; };
  GlaForms f;
  // A half-present form is reported by its first absent tensor rather than
  // falling back to the other form, which would hide the checkpoint's mistake.
  if (has(kLowRankIn)) {
    f.low_rank_dim = low_rank_dim(weights.at(kLowRankIn), cfg.hidden_size);
    for (const char* name : {"gk_proj.1.weight", "gk_proj.1.bias"})
      if (!has(name)) missing(std::string("'") + name + "' (the low-rank forget gate has '" + kLowRankIn + "')");
  } else {
    if (!has("gk_proj.weight")) missing("'gk_proj.weight' (or 'gk_proj.0.weight' and 'gk_proj.1.weight')");
    if (!has("gk_proj.bias")) missing("'gk_proj.bias'");
  }
  f.output_norm = has("g_norm_swish_gate.weight") ? "g_norm_swish_gate.weight"
                  : has("g_norm.weight")          ? "g_norm.weight"
                                                  : "";
  f.attn_norm = has("attn_norm.weight");
  return f;
}

std::vector<TensorSpec> gla_expected_weights(const GlaConfig& cfg, const GlaForms& forms) {
  cfg.validate();
  const int64_t D = cfg.hidden_size, H = cfg.num_heads, KV = cfg.num_kv_heads;
  const int64_t dk = cfg.head_k_dim(), dv = cfg.head_v_dim(), r = forms.low_rank_dim;
  std::vector<TensorSpec> s;
  if (forms.attn_norm) s.push_back({"attn_norm.weight", {D}});
  s.push_back({"q_proj.weight", {H * dk, D}});
  s.push_back({"k_proj.weight", {KV * dk, D}});
  s.push_back({"v_proj.weight", {KV * dv, D}});
  if (cfg.use_output_gate) s.push_back({"g_proj.weight", {H * dv, D}});
  if (r > 0) {
    s.push_back({"gk_proj.0.weight", {r, D}});
    s.push_back({"gk_proj.1.weight", {KV * dk, r}});
    s.push_back({"gk_proj.1.bias", {KV * dk}});
  } else {
    s.push_back({"gk_proj.weight", {KV * dk, D}});
    s.push_back({"gk_proj.bias", {KV * dk}});
  }
  if (!forms.output_norm.empty()) s.push_back({forms.output_norm, {dv}});
  s.push_back({"o_proj.weight", {D, H * dv}});
  return s;
}

// The checks and messages of check_weights (weights.cpp), over the GLA layer's list.
GlaForms check_gla_weights(const GlaConfig& cfg, const TensorMap& weights) {
  const GlaForms forms = gla_forms(cfg, weights);
  check_tensors(gla_expected_weights(cfg, forms), weights);
  return forms;
}

}  // namespace vkgate
