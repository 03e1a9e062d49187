// GdnConfig: validation, config.json parsing, and the tensors a Gated DeltaNet
// layer reads. Key names are Hugging Face's (Qwen3NextConfig's linear_* keys).
#include "vkgate/gdn_config.hpp"

#include <cmath>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "io/config_limits.hpp"
#include "io/json_keys.hpp"
#include "vkgate/error.hpp"

namespace vkgate {

namespace {

// A value head's state is dk × dv fp32 and the recurrent kernel keeps a column
// of it (dk floats) per invocation in shared memory; Qwen3-Next uses 128 × 128.
constexpr int kMaxKeyHeadDim = 512;
constexpr int kMaxValueHeadDim = 1024;
// causal-conv1d (the kernel transformers calls) takes widths 2 to 4; the conv
// state holds K − 1 inputs per channel, so K = 1 would make it empty.
constexpr int kMaxConvKernel = 16;
// One sequence's state, nv·dk·dv floats, is indexed with 32 bits.
constexpr int64_t kMaxStateFloats = (int64_t(1) << 31) - 1;

}  // namespace

void GdnConfig::validate() const {
  limits::check_range("hidden_size", hidden_size, 1, limits::kMaxRows);
  limits::check_range("linear_num_key_heads", num_key_heads, 1, limits::kMaxRows);
  limits::check_range("linear_num_value_heads", num_value_heads, 1, limits::kMaxRows);
  if (num_value_heads % num_key_heads != 0)
    limits::bad_key("linear_num_value_heads", std::string("(") + std::to_string(num_value_heads) +
                                                  ") must be a multiple of linear_num_key_heads (" +
                                                  std::to_string(num_key_heads) + ")");
  limits::check_range("linear_key_head_dim", key_head_dim, 1, kMaxKeyHeadDim);
  limits::check_range("linear_value_head_dim", value_head_dim, 1, kMaxValueHeadDim);
  limits::check_range("linear_conv_kernel_dim", conv_kernel, 2, kMaxConvKernel);
  // The widest tensor row: in_proj_qkvz's output (C is smaller).
  const int64_t rows = 2 * int64_t(num_key_heads) * key_head_dim + 2 * int64_t(num_value_heads) * value_head_dim;
  if (rows > limits::kMaxRows)
    limits::bad_key("linear_num_value_heads", "gives in_proj_qkvz 2·nk·dk + 2·nv·dv = " + std::to_string(rows) +
                                                  " rows, more than " + std::to_string(limits::kMaxRows));
  const int64_t state = int64_t(num_value_heads) * key_head_dim * value_head_dim;
  if (state > kMaxStateFloats)
    limits::bad_key("linear_num_value_heads", "gives a state of nv·dk·dv = " + std::to_string(state) +
                                                  " floats per sequence, more than " +
                                                  std::to_string(kMaxStateFloats));
  if (!(rms_norm_eps > 0) || !std::isfinite(rms_norm_eps))
    limits::bad_key("rms_norm_eps", "must be positive, got " + limits::number_text(rms_norm_eps));
}

GdnConfig GdnConfig::qwen3_next() {
  GdnConfig c;
  c.hidden_size = 2048;
  c.num_key_heads = 16;
  c.num_value_heads = 32;
  c.key_head_dim = 128;
  c.value_head_dim = 128;
  c.conv_kernel = 4;
  c.rms_norm_eps = 1e-6;
  return c;
}

// ---- config.json ----

namespace {

using nlohmann::json;

constexpr const char* kMixer = "gated_deltanet";

bool names_gdn(const json& root) {
  const auto it = root.find("mixer");
  return it != root.end() && *it == kMixer;
}

}  // namespace

GdnConfig parse_gdn_config_json(std::string_view json_text, const std::string& source) {
  const json root = parse_json_object(json_text, source);
  const KeyReader r(root, source);
  // A layer of another kind must not be read as Gated DeltaNet.
  const std::optional<std::string> mixer = r.string("mixer");
  if (mixer && *mixer != kMixer)
    r.fail("key 'mixer' is \"" + *mixer + "\": not a Gated DeltaNet layer (expected \"" + kMixer + "\")");

  GdnConfig c;
  c.hidden_size = r.required_positive_int("hidden_size");
  c.num_key_heads = r.required_positive_int("linear_num_key_heads");
  c.num_value_heads = r.required_positive_int("linear_num_value_heads");
  c.key_head_dim = r.required_positive_int("linear_key_head_dim");
  c.value_head_dim = r.required_positive_int("linear_value_head_dim");
  c.conv_kernel = r.positive_int("linear_conv_kernel_dim").value_or(c.conv_kernel);
  c.rms_norm_eps = r.number("rms_norm_eps", limits::positive, "a positive number").value_or(c.rms_norm_eps);
  const std::optional<std::string> type = r.string("model_type");
  c.separate_projections = type && (*type == "qwen3_5_text" || *type == "qwen3_5_moe_text");
  const std::optional<std::string> act = r.string("hidden_act");
  if (act && *act != "silu" && *act != "swish")
    r.fail("key 'hidden_act' is \"" + *act + "\": the Gated DeltaNet layer's conv and gate take only \"silu\"");

  validate_as(source, [&] { c.validate(); });
  return c;
}

GdnConfig load_gdn_config(const std::string& path) { return parse_gdn_config_json(read_config_text(path), path); }

bool is_gdn_config_json(std::string_view json_text, const std::string& source) {
  return names_gdn(parse_json_object(json_text, source));
}

// ---- weights ----

std::vector<TensorSpec> gdn_expected_weights(const GdnConfig& cfg) {
  cfg.validate();
  const int64_t D = cfg.hidden_size, nv = cfg.num_value_heads, dv = cfg.value_head_dim;
  std::vector<TensorSpec> s;
  if (cfg.separate_projections)
    s = {{"in_proj_qkv.weight", {cfg.conv_channels(), D}},
         {"in_proj_z.weight", {nv * dv, D}},
         {"in_proj_b.weight", {nv, D}},
         {"in_proj_a.weight", {nv, D}}};
  else
    s = {{"in_proj_qkvz.weight", {cfg.qkvz_rows(), D}}, {"in_proj_ba.weight", {2 * nv, D}}};
  s.insert(s.end(), {{"conv1d.weight", {cfg.conv_channels(), 1, cfg.conv_kernel}},
                     {"A_log", {nv}},
                     {"dt_bias", {nv}},
                     {"norm.weight", {dv}},
                     {"out_proj.weight", {D, nv * dv}}});
  return s;
}

void check_gdn_weights(const GdnConfig& cfg, const TensorMap& weights) {
  check_tensors(gdn_expected_weights(cfg), weights);
}

}  // namespace vkgate
