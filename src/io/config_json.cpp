// config.json -> BlockConfig, and which layers of a model are full attention.
//
// Resolution order: Hugging Face keys, then the model_type preset (DESIGN.md §3),
// then vkgate's own keys (gate_kind, gate_layout, gate_position, gate_shared_heads,
// gate_combine, gate_activation, rope_style, gqa_mapping, norm_kind, use_qk_norm,
// causal, residual), which override the preset. The presets are transformers' own
// classes: qwen3_next (Qwen3NextConfig), qwen3 (Qwen3Config + the paper's gate
// flags), llama (LlamaConfig); any other model_type reads like qwen3.
#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "vkgate/config.hpp"

#include "io/config_limits.hpp"
#include "io/json_keys.hpp"
#include "vkgate/error.hpp"

namespace vkgate {

namespace {

using nlohmann::json;

constexpr std::array kRopeTypes{RopeType::none, RopeType::linear, RopeType::dynamic, RopeType::yarn,
                               RopeType::llama3};

std::string rope_type_list() {
  std::string list;
  for (RopeType t : kRopeTypes) list += std::string(list.empty() ? "" : ", ") + to_string(t);
  return list;
}

bool at_least_one(double x) { return x >= 1; }
bool non_negative(double x) { return x >= 0; }

// One rope_scaling / rope_parameters object (`key`) as transformers reads it:
// the type from `rope_type` or its older spelling `type` (absent: default),
// then the keys that type reads, each checked and named on error. nullopt when
// the object names no type (rope_parameters holding only rope_theta): it then
// says nothing about scaling. `max_positions` is the model's
// max_position_embeddings, yarn's default for a missing factor.
std::optional<RopeScaling> read_rope_object(const KeyReader& r, const char* key, const json& object,
                                            int max_positions) {
  if (!object.is_object()) r.wrong(key, "an object or null", object);
  const KeyReader o(object, r.source(), r.name(key) + ".");
  const std::optional<std::string> rope_type = o.string("rope_type"), type = o.string("type");
  if (rope_type && type && *rope_type != *type)
    o.fail("keys '" + o.name("rope_type") + "' (" + json(*rope_type).dump() + ") and '" + o.name("type") + "' (" +
           json(*type).dump() + ") disagree");
  if (!rope_type && !type) return std::nullopt;
  const char* type_key = rope_type ? "rope_type" : "type";
  const std::string name = rope_type ? *rope_type : *type;
  RopeScaling s;
  const auto known = std::find_if(kRopeTypes.begin(), kRopeTypes.end(),
                                  [&](RopeType t) { return name == to_string(t); });
  if (known == kRopeTypes.end())
    o.fail("key '" + o.name(type_key) + "' is " + json(name).dump() + ": vkgate implements the RoPE types " +
           rope_type_list());
  s.type = *known;
  if (s.type == RopeType::none) return s;

  auto required = [&](const char* k, bool (*in_range)(double), const char* expected) {
    const std::optional<double> v = o.number(k, in_range, expected);
    if (!v) o.fail("key '" + o.name(k) + "' is required with rope_type " + json(name).dump() + " (" + expected + ")");
    return *v;
  };
  const std::optional<double> factor = o.number("factor", at_least_one, "a number >= 1");
  if (s.type == RopeType::yarn || s.type == RopeType::llama3)
    s.original_max_position_embeddings = o.positive_int("original_max_position_embeddings").value_or(0);
  switch (s.type) {
    case RopeType::none: break;
    case RopeType::linear:
    case RopeType::dynamic: s.factor = required("factor", at_least_one, "a number >= 1"); break;
    case RopeType::llama3:
      s.factor = required("factor", at_least_one, "a number >= 1");
      s.low_freq_factor = required("low_freq_factor", limits::positive, "a positive number");
      s.high_freq_factor = required("high_freq_factor", limits::positive, "a positive number");
      if (!(s.high_freq_factor > s.low_freq_factor))
        o.fail("key '" + o.name("high_freq_factor") + "' (" + json(s.high_freq_factor).dump() +
               ") must be greater than '" + o.name("low_freq_factor") + "' (" + json(s.low_freq_factor).dump() + ")");
      break;
    case RopeType::yarn: {
      // transformers 5 uses the factor given (some 4.x releases took the ratio of the two lengths
      // whenever original_max_position_embeddings was given); without one, that ratio.
      const int original = s.original_max_position_embeddings > 0 ? s.original_max_position_embeddings : max_positions;
      s.factor = factor ? *factor : double(max_positions) / double(original);
      if (!factor && !(s.factor >= 1))
        o.fail("key '" + o.name("factor") + "' is not given and max_position_embeddings / " +
               "original_max_position_embeddings = " + std::to_string(max_positions) + " / " +
               std::to_string(original) + " is below 1");
      // transformers reads `beta_fast or 32`: null (and 0) mean the default.
      s.beta_fast = o.number("beta_fast", non_negative, "a positive number").value_or(0);
      s.beta_slow = o.number("beta_slow", non_negative, "a positive number").value_or(0);
      if (s.beta_fast == 0) s.beta_fast = 32;
      if (s.beta_slow == 0) s.beta_slow = 1;
      s.attention_factor = o.number("attention_factor", limits::positive, "a positive number").value_or(0);
      s.mscale = o.number("mscale", non_negative, "a non-negative number").value_or(0);
      s.mscale_all_dim = o.number("mscale_all_dim", non_negative, "a non-negative number").value_or(0);
      s.truncate = o.boolean("truncate").value_or(true);
      break;
    }
  }
  return s;
}

// The RoPE scaling of the config: rope_scaling (transformers < 5) or rope_parameters
// (transformers >= 5); both naming a type and disagreeing is an error, as for rope_theta.
RopeScaling read_rope_scaling(const KeyReader& r, int max_positions) {
  std::optional<RopeScaling> scaling, parameters;
  if (const json* p = r.find("rope_parameters")) parameters = read_rope_object(r, "rope_parameters", *p, max_positions);
  if (const json* p = r.find("rope_scaling")) scaling = read_rope_object(r, "rope_scaling", *p, max_positions);
  if (scaling && parameters && !(*scaling == *parameters))
    r.fail("key 'rope_scaling' (" + r.find("rope_scaling")->dump() + ") disagrees with 'rope_parameters' (" +
           r.find("rope_parameters")->dump() + ")");
  RopeScaling s = scaling ? *scaling : parameters ? *parameters : RopeScaling{};
  // Phi-3's configs keep the pre-training length at the top level; transformers prefers it.
  if (const std::optional<int> top = r.positive_int("original_max_position_embeddings");
      top && (s.type == RopeType::yarn || s.type == RopeType::llama3)) {
    const char* nested = scaling ? "rope_scaling" : "rope_parameters";
    if (s.original_max_position_embeddings > 0 && s.original_max_position_embeddings != *top)
      r.fail("key 'original_max_position_embeddings' (" + std::to_string(*top) + ") disagrees with '" +
             std::string(nested) + ".original_max_position_embeddings' (" +
             std::to_string(s.original_max_position_embeddings) + ")");
    s.original_max_position_embeddings = *top;
  }
  return s;
}

// transformers' class defaults of max_position_embeddings: LlamaConfig 2048,
// Qwen3Config and Qwen3NextConfig 32768.
int default_max_positions(const BlockConfig& c) { return c.model_type == "llama" ? 2048 : 32768; }

// A RoPE parameter that may sit at the top level (older configs) or under rope_parameters
// (transformers >= 5). Both present and different is an error: either choice could be the
// stale one, and a wrong theta gives plausible but wrong outputs.
std::optional<double> rope_value(const KeyReader& top, const std::optional<KeyReader>& nested,
                                 const char* key, bool (*in_range)(double), const char* expected) {
  const std::optional<double> a = top.number(key, in_range, expected);
  const std::optional<double> b = nested ? nested->number(key, in_range, expected) : std::nullopt;
  if (a && b && *a != *b)
    top.fail("key '" + top.name(key) + "' (" + json(*a).dump() + ") disagrees with '" +
             nested->name(key) + "' (" + json(*b).dump() + ")");
  return a ? a : b;
}

bool unit_interval(double x) { return x >= 0 && x <= 1; }

constexpr std::array kGateKinds{GateKind::none, GateKind::headwise, GateKind::elementwise};
constexpr std::array kGateLayouts{GateLayout::qwen3_next, GateLayout::official_grouped,
                                  GateLayout::separate};
constexpr std::array kNormKinds{NormKind::plain, NormKind::zero_centered};
constexpr std::array kGatePositions{GatePosition::sdpa, GatePosition::value, GatePosition::key, GatePosition::query,
                                    GatePosition::dense};
constexpr std::array kGateCombines{GateCombine::multiply, GateCombine::add};
constexpr std::array kGateActivations{GateActivation::sigmoid, GateActivation::silu, GateActivation::ns_sigmoid,
                                      GateActivation::identity};
constexpr std::array kRopeStyles{RopeStyle::rotate_half, RopeStyle::interleaved};
constexpr std::array kGqaMappings{GqaMapping::grouped, GqaMapping::tiled};

// Qwen3-Next's rule (transformers' Qwen3NextConfig): layer i is full attention iff
// (i + 1) % full_attention_interval == 0, else linear attention (Gated DeltaNet).
std::string layer_type(const BlockConfig& c, int layer) {
  if (size_t(layer) < c.layer_types.size()) return c.layer_types[size_t(layer)];
  if (c.full_attention_interval > 0)
    return (int64_t(layer) + 1) % c.full_attention_interval == 0 ? "full_attention" : "linear_attention";
  return "full_attention";
}

// HF's head_dim when the key is absent: Qwen3Config's default is 128 whatever
// the hidden size; Llama (and the others) take hidden_size / num_attention_heads.
int default_head_dim(const KeyReader& r, const BlockConfig& c) {
  if (c.model_type == "qwen3" || c.model_type == "qwen3_moe") return 128;
  if (qwen3_next_family(c.model_type)) return 256;  // Qwen3NextConfig's default
  if (c.hidden_size % c.num_heads != 0)
    r.fail("hidden_size (" + std::to_string(c.hidden_size) +
           ") is not divisible by num_attention_heads (" + std::to_string(c.num_heads) +
           ") and key 'head_dim' is not given");
  return c.hidden_size / c.num_heads;
}

// The gate, norms and layer pattern each model_type's transformers class hard-codes.
void apply_preset(const KeyReader& r, BlockConfig& c) {
  const bool headwise = r.boolean("headwise_attn_output_gate").value_or(false);
  const bool elementwise = r.boolean("elementwise_attn_output_gate").value_or(false);
  c.gate_layout = GateLayout::official_grouped;
  c.norm_kind = NormKind::plain;
  if (qwen3_next_family(c.model_type)) {
    // transformers' Qwen3NextAttention ignores the paper's flags: its gate is always elementwise.
    c.gate_kind = GateKind::elementwise;
    c.gate_layout = GateLayout::qwen3_next;
    c.norm_kind = NormKind::zero_centered;
    c.use_qk_norm = true;
    c.full_attention_interval = 4;  // Qwen3NextConfig's default
  } else if (c.model_type == "llama") {
    // LlamaAttention has neither q/k norm nor a gate, and reads neither flag.
    c.gate_kind = GateKind::none;
    c.use_qk_norm = false;
  } else if (c.model_type == "qwen3_moe") {
    // Qwen3MoeAttention: Qwen3's q/k norms, no gate, neither flag read.
    c.gate_kind = GateKind::none;
    c.use_qk_norm = true;
  } else {
    if (headwise && elementwise)
      r.fail("keys 'headwise_attn_output_gate' and 'elementwise_attn_output_gate' are both "
             "true; a model has one kind of gate");
    c.gate_kind = headwise ? GateKind::headwise : elementwise ? GateKind::elementwise : GateKind::none;
    c.use_qk_norm = true;  // Qwen3 (which the paper's code builds on) always has q_norm/k_norm
  }
}

}  // namespace

bool qwen3_next_family(std::string_view model_type) {
  return model_type == "qwen3_next" || model_type == "qwen3_5_text" || model_type == "qwen3_5_moe_text";
}

BlockConfig block_config_from_json(const json& root, const std::string& source) {
  const KeyReader r(root, source);
  BlockConfig c;
  c.model_type = r.string("model_type").value_or("");

  c.hidden_size = r.required_positive_int("hidden_size");
  c.num_heads = r.required_positive_int("num_attention_heads");
  c.num_kv_heads = r.positive_int("num_key_value_heads").value_or(c.num_heads);
  c.head_dim = r.positive_int("head_dim").value_or(0);
  if (c.head_dim == 0) c.head_dim = default_head_dim(r, c);
  c.rms_norm_eps = r.number("rms_norm_eps", limits::positive, "a positive number").value_or(c.rms_norm_eps);

  c.max_position_embeddings = r.positive_int("max_position_embeddings").value_or(default_max_positions(c));
  std::optional<KeyReader> rope_params;
  if (const json* p = r.find("rope_parameters")) {
    if (!p->is_object()) r.wrong("rope_parameters", "an object or null", *p);
    rope_params.emplace(*p, source, "rope_parameters.");
  }
  c.rope_scaling = read_rope_scaling(r, c.max_position_embeddings);
  c.rope_theta = rope_value(r, rope_params, "rope_theta", limits::positive, "a positive number")
                     .value_or(c.rope_theta);
  c.partial_rotary_factor =
      rope_value(r, rope_params, "partial_rotary_factor", unit_interval, "a number in [0, 1]")
          .value_or(qwen3_next_family(c.model_type) ? 0.25 : c.partial_rotary_factor);  // Qwen3NextConfig's default
  if (const json* sections = rope_params ? rope_params->find("mrope_section") : nullptr) {
    auto pairs = [](const json& x) { return x.is_number_integer() && x.get<int64_t>() >= 0 && x.get<int64_t>() <= 65536; };
    if (!sections->is_array() || !std::all_of(sections->begin(), sections->end(), pairs))
      rope_params->wrong("mrope_section", "a list of rotary pair counts", *sections);
    for (const json& x : *sections) c.mrope_section.push_back(int(x.get<int64_t>()));
  }

  // transformers' Qwen3/Qwen3-Next put attention_bias on q, k, v and o; the paper's code
  // puts qkv_bias on o_proj too (DESIGN.md §3). So either key means bias on all four.
  const bool attention_bias = r.boolean("attention_bias").value_or(false);
  const bool qkv_bias = r.boolean("qkv_bias").value_or(false);
  c.qkv_bias = c.o_bias = attention_bias || qkv_bias;

  apply_preset(r, c);

  c.gate_kind = r.enumeration("gate_kind", kGateKinds).value_or(c.gate_kind);
  c.gate_layout = r.enumeration("gate_layout", kGateLayouts).value_or(c.gate_layout);
  c.norm_kind = r.enumeration("norm_kind", kNormKinds).value_or(c.norm_kind);
  c.gate_position = r.enumeration("gate_position", kGatePositions).value_or(c.gate_position);
  c.gate_shared_heads = r.boolean("gate_shared_heads").value_or(false);
  c.gate_combine = r.enumeration("gate_combine", kGateCombines).value_or(c.gate_combine);
  c.gate_activation = r.enumeration("gate_activation", kGateActivations).value_or(c.gate_activation);
  c.rope_style = r.enumeration("rope_style", kRopeStyles).value_or(c.rope_style);
  c.gqa_mapping = r.enumeration("gqa_mapping", kGqaMappings).value_or(c.gqa_mapping);
  c.use_qk_norm = r.boolean("use_qk_norm").value_or(c.use_qk_norm);
  c.causal = r.boolean("causal").value_or(true);
  c.residual = r.boolean("residual").value_or(false);

  c.num_hidden_layers = r.positive_int("num_hidden_layers").value_or(0);
  c.full_attention_interval = r.positive_int("full_attention_interval").value_or(c.full_attention_interval);
  if (const json* types = r.find("layer_types")) {
    if (!types->is_array()) r.wrong("layer_types", "an array of strings", *types);
    for (const json& t : *types) {
      if (!t.is_string()) r.wrong("layer_types", "an array of strings", *types);
      c.layer_types.push_back(t.get<std::string>());
    }
    if (c.num_hidden_layers > 0 && c.layer_types.size() != size_t(c.num_hidden_layers))
      r.fail("key 'layer_types' has " + std::to_string(c.layer_types.size()) +
             " entries but num_hidden_layers is " + std::to_string(c.num_hidden_layers));
    // layer_types is what check_layer uses; an interval saying otherwise means one of them is stale.
    if (r.find("full_attention_interval")) {
      for (size_t i = 0; i < c.layer_types.size(); ++i) {
        const bool full = c.layer_types[i] == "full_attention";
        if (full != ((i + 1) % size_t(c.full_attention_interval) == 0))
          r.fail("key 'layer_types' says layer " + std::to_string(i) + " is '" +
                 c.layer_types[i] + "' but full_attention_interval " +
                 std::to_string(c.full_attention_interval) + " says otherwise");
      }
    }
  }

  validate_as(source, [&] { c.validate(); });
  return c;
}

BlockConfig parse_config_json(std::string_view json_text, const std::string& source) {
  return block_config_from_json(parse_json_object(json_text, source), source);
}

std::string read_config_text(const std::string& path) {
  if (std::filesystem::is_directory(path))
    throw Error(ErrorCode::io, path + ": is a directory, expected a config.json file");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(ErrorCode::io, path + ": cannot open: " + std::strerror(errno));
  std::string text{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  if (in.bad()) throw Error(ErrorCode::io, path + ": cannot read: " + std::strerror(errno));
  return text;
}

BlockConfig load_config(const std::string& path) { return parse_config_json(read_config_text(path), path); }

bool BlockConfig::is_full_attention(int layer) const { return layer_type(*this, layer) == "full_attention"; }

void BlockConfig::check_layer(int layer) const {
  // num_hidden_layers may be absent while layer_types still tells the count.
  const int n = num_hidden_layers > 0 ? num_hidden_layers : int(layer_types.size());
  if (layer < 0 || (n > 0 && layer >= n))
    throw Error(ErrorCode::invalid_argument,
                "layer " + std::to_string(layer) + " is out of range: " +
                    (n > 0 ? "the model has " + std::to_string(n) + " layers, 0.." +
                                 std::to_string(n - 1)
                           : std::string("layers are numbered from 0")));
  const std::string type = layer_type(*this, layer);
  if (type == "full_attention") return;

  // The full-attention layers: the first 8, then "..." and the last one when the count is known.
  // Computed, not scanned, for the interval: num_hidden_layers is whatever the file says.
  std::vector<int64_t> full;  // the first 9 (64-bit: a huge interval must not overflow)
  int64_t last = -1;
  if (!layer_types.empty()) {
    for (size_t i = 0; i < layer_types.size(); ++i) {
      if (layer_types[i] != "full_attention") continue;
      if (full.size() < 9) full.push_back(int64_t(i));
      last = int64_t(i);
    }
  } else {
    const int64_t k = full_attention_interval;
    for (int64_t i = k - 1; full.size() < 9 && (n <= 0 || i < n); i += k) full.push_back(i);
    if (n > 0) last = n / k * k - 1;
  }
  std::string list;
  for (size_t i = 0; i < full.size() && i < 8; ++i)
    list += (i ? ", " : "") + std::to_string(full[i]);
  if (n <= 0) list += ", ...";
  else if (full.size() == 9) list += (last == full[8] ? ", " : ", ..., ") + std::to_string(last);

  std::string message = "layer " + std::to_string(layer) + " is a '" + type + "' layer";
  if (type == "linear_attention" && qwen3_next_family(model_type)) message += " (Gated DeltaNet)";
  message += ", not full attention; ";
  message += full.empty() ? "the model has no full-attention layers"
                          : "the full-attention layers are " + list;
  throw Error(ErrorCode::invalid_argument, message);
}

}  // namespace vkgate
