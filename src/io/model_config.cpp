// config.json -> ModelConfig, and the names and shapes of a whole model's tensors.
//
// The attention block is read by the block's parser (config_json.cpp), presets
// and all, so that a model and `vkgate run --layer N` can never disagree about
// a layer; this file adds the keys of the model around it.
#include "vkgate/model_config.hpp"

#include <algorithm>
#include <array>
#include <climits>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "io/config_limits.hpp"
#include "io/json_keys.hpp"
#include "vkgate/error.hpp"

namespace vkgate {

const char* to_string(Activation a) noexcept {
  switch (a) {
    case Activation::silu: return "silu";
    case Activation::gelu: return "gelu";
    case Activation::gelu_tanh: return "gelu_pytorch_tanh";
    case Activation::sigmoid: return "sigmoid";
  }
  return "?";
}

namespace {

using nlohmann::json;

constexpr std::array kActivations{Activation::silu, Activation::gelu, Activation::gelu_tanh,
                                  Activation::sigmoid};

// lm_head's and the MLP's rows are matmul rows, bounded as the attention's are.
void check_rows(const char* key, int value) { limits::check_range(key, value, 1, limits::kMaxRows); }

// model_type decides the presets; vkgate's models are those whose transformers classes it
// matches, and fla's GLA. Anything else (mistral, qwen2, ...) differs in some convention.
std::string read_model_type(const KeyReader& r) {
  constexpr const char* kTypes =
      "\"qwen3\", \"llama\", \"gla\", \"qwen3_next\", \"qwen3_moe\", \"qwen3_5\" (\"qwen3_5_text\") or \"qwen3_5_moe\" "
      "(\"qwen3_5_moe_text\")";
  const std::optional<std::string> type = r.string("model_type");
  if (!type) r.fail(std::string("key 'model_type' is required: ") + kTypes);
  if (*type != "qwen3" && *type != "llama" && *type != "gla" && *type != "qwen3_moe" && !qwen3_next_family(*type))
    r.fail("key 'model_type' is " + json(*type).dump() + ": vkgate's models are " + kTypes);
  return *type;
}

bool experts_count(double x) { return x >= 0 && x <= double(limits::kMaxExperts) && x == std::floor(x); }

// The sparse MoE keys (MoeConfig), with transformers' class defaults:
// Qwen3NextConfig 512 experts of 512, top 10, a shared expert of 512,
// norm_topk_prob true; Qwen3MoeConfig 128 experts of 768, top 8, no shared
// expert, norm_topk_prob false. Both: decoder_sparse_step 1, mlp_only_layers [].
MoeConfig read_moe(const KeyReader& r, const std::string& type, int layers) {
  const bool next = type != "qwen3_moe";  // qwen3_next, qwen3_5_moe_text
  MoeConfig m;
  m.num_experts = int(r.number("num_experts", experts_count, "an integer in [0, 65536]").value_or(next ? 512 : 128));
  m.num_experts_per_tok = r.positive_int("num_experts_per_tok").value_or(next ? 10 : 8);
  m.moe_intermediate_size = r.positive_int("moe_intermediate_size").value_or(next ? 512 : 768);
  if (next) {
    m.shared_expert_intermediate_size =
        int(r.number("shared_expert_intermediate_size", experts_count, "an integer in [0, 65536]").value_or(512));
  } else if (r.find("shared_expert_intermediate_size")) {
    r.fail("key 'shared_expert_intermediate_size' is set: a qwen3_moe model has no shared expert");
  }
  m.norm_topk_prob = r.boolean("norm_topk_prob").value_or(next);
  m.decoder_sparse_step = r.positive_int("decoder_sparse_step").value_or(1);
  if (const json* v = r.find("mlp_only_layers")) {
    if (!v->is_array()) r.wrong("mlp_only_layers", "a list of layer indices", *v);
    for (const json& x : *v) {
      if (!x.is_number_integer() || x.get<int64_t>() < 0 || x.get<int64_t>() >= layers)
        r.fail("key 'mlp_only_layers' is " + v->dump() + ": expected a list of layer indices in [0, num_hidden_layers " +
               std::to_string(layers) + ")");
      m.mlp_only_layers.push_back(int(x.get<int64_t>()));
    }
  }
  return m;
}

// eos_token_id: one id or a list of ids (HF writes both); null or absent: none.
std::vector<int64_t> read_eos(const KeyReader& r) {
  const json* v = r.find("eos_token_id");
  if (!v) return {};
  auto id = [&](const json& x) {
    const bool fits = x.is_number_integer() &&
                      !(x.is_number_unsigned() && x.get<uint64_t>() > uint64_t(std::numeric_limits<int64_t>::max()));
    if (!fits) r.wrong("eos_token_id", "an integer or a list of integers", *v);
    return x.get<int64_t>();
  };
  if (!v->is_array()) return {id(*v)};
  std::vector<int64_t> ids;
  for (const json& x : *v) ids.push_back(id(x));
  return ids;
}

// A model runs every layer as full causal attention: a sliding-window or
// linear-attention layer would be computed wrongly without a word, so such a
// config is refused naming the key that says so.
void check_full_attention(const KeyReader& r, const BlockConfig& a) {
  if (r.boolean("use_sliding_window").value_or(false))
    r.fail("key 'use_sliding_window' is true: vkgate runs full attention in every layer (no sliding window)");
  // Neither key: every layer is full attention (and the loop below would be long for nothing).
  if (a.layer_types.empty() && a.full_attention_interval <= 1) return;
  const std::string key = a.layer_types.empty() ? "full_attention_interval" : "layer_types";
  for (int layer = 0; layer < a.num_hidden_layers; ++layer) {
    try {
      a.check_layer(layer);
    } catch (const Error& e) {
      r.fail("key '" + key + "': " + e.what() + " (a model runs full attention in every layer)");
    }
  }
}

// fla's GLAMLP: with intermediate_size null, int(D · hidden_ratio · 2/3) rounded up to a multiple of 256.
int gla_intermediate_size(const KeyReader& r, int hidden_size) {
  // Checked even when intermediate_size makes it unused, as fla's GLAConfig holds both.
  const double ratio =
      r.number("hidden_ratio", [](double x) { return x > 0 && std::isfinite(x); }, "a positive number").value_or(4);
  if (const std::optional<int> given = r.positive_int("intermediate_size")) return *given;
  const double raw = std::floor(double(hidden_size) * ratio * 2 / 3);
  const double rounded = 256 * std::ceil(raw / 256);
  if (!(rounded >= 1 && rounded <= double(limits::kMaxRows)))
    r.fail("key 'hidden_ratio' gives intermediate_size " + std::to_string(rounded) + ", outside 1.." +
           std::to_string(limits::kMaxRows));
  return int(rounded);
}

// The keys of fla's GLAConfig around the mixer (parse_gla_config_json reads the mixer's).
void read_gla_model(const KeyReader& r, std::string_view json_text, const std::string& source, ModelConfig& m) {
  m.gla = parse_gla_config_json(json_text, source);
  const GlaConfig& g = *m.gla;
  m.intermediate_size = gla_intermediate_size(r, g.hidden_size);
  // fla passes hidden_act to each layer as its output gate's function too, and
  // vkgate's GLA gate is swish: swish (fla's default) or silu, the same function.
  const std::string act = r.string("hidden_act").value_or("swish");
  if (act != "swish" && act != "silu")
    r.fail("key 'hidden_act' is " + json(act).dump() +
           ": a GLA model's MLP and output gate are \"swish\" (or \"silu\"), the only gate vkgate's GLA has");
  m.hidden_act = Activation::silu;
  if (!r.boolean("elementwise_affine").value_or(true))
    r.fail("key 'elementwise_affine' is false: vkgate's GLA models have a weight in every norm");
  if (const json* attn = r.find("attn"); attn && !attn->is_null())
    r.fail("key 'attn' is set: a hybrid of GLA and softmax-attention layers is not supported");
  m.gla_forms.low_rank_dim = r.positive_int("gate_low_rank_dim").value_or(16);
  // fla fuses the norm and the gate into g_norm_swish_gate only for gate_fn spelled "swish"
  // with fuse_norm and the output gate; otherwise the layer holds g_norm (same arithmetic).
  const bool fused = act == "swish" && g.use_output_gate && r.boolean("fuse_norm").value_or(true);
  m.gla_forms.output_norm = fused ? "g_norm_swish_gate.weight" : "g_norm.weight";
  m.gla_forms.attn_norm = true;
}

}  // namespace

void ModelConfig::validate() const {
  if (gla) {
    gla->validate();
    // 0 and "" are forms of the GLA layer that fla's models never build; a
    // ModelConfig made in code may still ask for them (config.json cannot).
    if (gla_forms.low_rank_dim != 0) check_rows("gate_low_rank_dim", gla_forms.low_rank_dim);
    if (!gla_forms.output_norm.empty() && gla_forms.output_norm != "g_norm_swish_gate.weight" &&
        gla_forms.output_norm != "g_norm.weight")
      limits::bad_key("fuse_norm", "must give the output norm g_norm_swish_gate.weight, g_norm.weight or none");
    if (!gla_forms.attn_norm) limits::bad_key("attn_norm", "must be present: a GLA model's layer normalizes its input");
  } else {
    attention.validate();
  }
  if (linear_attention) {
    linear_attention->validate();
    if (linear_attention->hidden_size != attention.hidden_size)
      limits::bad_key("hidden_size", "differs between the Gated DeltaNet layers (" +
                                         std::to_string(linear_attention->hidden_size) + ") and the attention layers (" +
                                         std::to_string(attention.hidden_size) + ")");
  }
  limits::check_range("num_hidden_layers", num_hidden_layers, 1, limits::kMaxLayers);
  check_rows("intermediate_size", intermediate_size);
  if (moe.num_experts > 0) {
    if (gla) limits::bad_key("num_experts", "must be 0 in a GLA model");
    limits::check_range("num_experts", moe.num_experts, 1, limits::kMaxExperts);
    if (moe.num_experts_per_tok < 1 || moe.num_experts_per_tok > moe.num_experts)
      limits::bad_key("num_experts_per_tok", "is " + std::to_string(moe.num_experts_per_tok) +
                                                 ": must be in [1, num_experts " + std::to_string(moe.num_experts) + "]");
    check_rows("moe_intermediate_size", moe.moe_intermediate_size);
    if (moe.shared_expert_intermediate_size != 0)
      check_rows("shared_expert_intermediate_size", moe.shared_expert_intermediate_size);
    limits::check_range("decoder_sparse_step", moe.decoder_sparse_step, 1, INT_MAX);
    for (int l : moe.mlp_only_layers)
      if (l < 0 || l >= num_hidden_layers)
        limits::bad_key("mlp_only_layers", "holds " + std::to_string(l) + ", outside [0, num_hidden_layers " +
                                               std::to_string(num_hidden_layers) + ")");
  }
  check_rows("vocab_size", vocab_size);
  // A decoder layer adds its input back (h = x + attn(norm(x))) and never sees later tokens.
  if (!gla && !attention.residual) limits::bad_key("residual", "must be true in a model: each layer adds its input back");
  if (!gla && !attention.causal) limits::bad_key("causal", "must be true in a model: a decoder attends to earlier tokens only");
  for (int64_t id : eos_token_ids)
    if (id < 0 || id >= vocab_size)
      limits::bad_key("eos_token_id", "holds " + std::to_string(id) + ", outside [0, vocab_size " +
                                          std::to_string(vocab_size) + ")");
}

int ModelConfig::context_limit() const {
  if (gla) return 0;
  const BlockConfig& a = attention;
  const RopeScaling& r = a.rope_scaling;
  double limit = a.max_position_embeddings;
  if (r.type == RopeType::linear || r.type == RopeType::dynamic) limit *= r.factor;
  if (r.type == RopeType::yarn) limit = std::max(limit, r.factor * a.rope_original_max_positions());
  return int(std::min(limit, double(INT_MAX)));
}

ModelConfig parse_model_config_json(std::string_view json_text, const std::string& source) {
  const json root = parse_json_object(json_text, source);
  const KeyReader r(root, source);
  // Qwen3_5ForConditionalGeneration's config: the text model's keys under
  // text_config (tie_word_embeddings and eos_token_id may sit at the top),
  // its tensors under model.language_model.; the vision tower is not run.
  if (const std::optional<std::string> t = r.string("model_type"); t && (*t == "qwen3_5" || *t == "qwen3_5_moe")) {
    const json* text = r.find("text_config");
    if (!text || !text->is_object())
      r.fail("key 'text_config' is required for model_type \"" + *t + "\": an object holding the text model's keys");
    json merged = *text;
    for (const char* key : {"tie_word_embeddings", "eos_token_id"})
      if (!merged.contains(key) && root.contains(key)) merged[key] = root[key];
    if (!merged.contains("model_type")) merged["model_type"] = *t + "_text";
    const std::string text_type = merged["model_type"].is_string() ? merged["model_type"].get<std::string>() : "";
    if (text_type != *t + "_text")
      r.fail("key 'text_config.model_type' is " + merged["model_type"].dump() + ": expected \"" + *t + "_text\"");
    ModelConfig m = parse_model_config_json(merged.dump(), source + " text_config");
    m.checkpoint_prefix = "model.language_model.";
    return m;
  }
  ModelConfig m;
  m.model_type = read_model_type(r);
  if (m.model_type == "gla") {
    read_gla_model(r, json_text, source, m);
    m.num_hidden_layers = r.required_positive_int("num_hidden_layers");
    m.vocab_size = r.required_positive_int("vocab_size");
    m.tie_word_embeddings = r.boolean("tie_word_embeddings").value_or(false);
    m.eos_token_ids = read_eos(r);
    validate_as(source, [&] { m.validate(); });
    return m;
  }
  m.attention = block_config_from_json(root, source);
  m.attention.residual = true;
  m.attention.causal = true;
  m.num_hidden_layers = r.required_positive_int("num_hidden_layers");
  m.intermediate_size = r.required_positive_int("intermediate_size");
  m.vocab_size = r.required_positive_int("vocab_size");
  m.hidden_act = r.enumeration("hidden_act", kActivations).value_or(Activation::silu);
  // Read (and type-checked) for both, applied as transformers does: Qwen3MLP has no bias.
  const bool mlp_bias = r.boolean("mlp_bias").value_or(false);
  m.mlp_bias = m.model_type == "llama" && mlp_bias;
  m.tie_word_embeddings = r.boolean("tie_word_embeddings").value_or(false);
  m.eos_token_ids = read_eos(r);
  if (qwen3_next_family(m.model_type)) {
    m.linear_attention = parse_gdn_config_json(json_text, source);
  } else {
    check_full_attention(r, m.attention);
  }
  if (m.model_type == "qwen3_next" || m.model_type == "qwen3_moe" || m.model_type == "qwen3_5_moe_text")
    m.moe = read_moe(r, m.model_type, m.num_hidden_layers);
  validate_as(source, [&] { m.validate(); });
  return m;
}

ModelConfig load_model_config(const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    throw Error(ErrorCode::io, dir + ": not a directory (expected a model directory holding config.json)");
  const std::string config_path = (fs::path(dir) / "config.json").string();
  ModelConfig m = parse_model_config_json(read_config_text(config_path), config_path);

  // transformers' generate() takes its eos from generation_config.json when the file gives one.
  const std::string gen_path = (fs::path(dir) / "generation_config.json").string();
  if (!fs::exists(gen_path, ec)) return m;
  const json gen = parse_json_object(read_config_text(gen_path), gen_path);
  const KeyReader r(gen, gen_path);
  if (r.find("eos_token_id")) {
    m.eos_token_ids = read_eos(r);
    validate_as(gen_path, [&] { m.validate(); });
  }
  return m;
}

std::string layer_tensor_name(int layer, const std::string& name) {
  return "model.layers." + std::to_string(layer) + "." + name;
}

std::string layer_attention_name(int layer, const std::string& bare) {
  return layer_tensor_name(layer, bare == "input_layernorm.weight" ? bare : "self_attn." + bare);
}

std::string layer_gla_name(int layer, const std::string& bare) {
  return layer_tensor_name(layer, bare == "attn_norm.weight" ? bare : "attn." + bare);
}

bool MoeConfig::sparse(int layer) const {
  return num_experts > 0 && (int64_t(layer) + 1) % decoder_sparse_step == 0 &&
         std::find(mlp_only_layers.begin(), mlp_only_layers.end(), layer) == mlp_only_layers.end();
}

std::vector<int> ModelConfig::moe_layers() const {
  std::vector<int> out;
  for (int l = 0; l < num_hidden_layers; ++l)
    if (sparse_mlp(l)) out.push_back(l);
  return out;
}

std::vector<TensorSpec> mlp_weights(const ModelConfig& cfg, int layer) {
  const int64_t D = cfg.hidden_size();
  auto swiglu = [&](std::vector<TensorSpec>& s, const std::string& prefix, int64_t width) {
    s.push_back({prefix + "gate_proj.weight", {width, D}});
    s.push_back({prefix + "up_proj.weight", {width, D}});
    s.push_back({prefix + "down_proj.weight", {D, width}});
  };
  std::vector<TensorSpec> s{{cfg.mlp_norm_name(), {D}}};
  if (!cfg.sparse_mlp(layer)) {
    const int64_t I = cfg.intermediate_size;
    swiglu(s, "mlp.", I);
    if (cfg.mlp_bias) {
      s.push_back({"mlp.gate_proj.bias", {I}});
      s.push_back({"mlp.up_proj.bias", {I}});
      s.push_back({"mlp.down_proj.bias", {D}});
    }
    return s;
  }
  const MoeConfig& m = cfg.moe;
  s.push_back({"mlp.gate.weight", {m.num_experts, D}});
  for (int e = 0; e < m.num_experts; ++e) swiglu(s, "mlp.experts." + std::to_string(e) + ".", m.moe_intermediate_size);
  if (m.shared_expert_intermediate_size > 0) {
    swiglu(s, "mlp.shared_expert.", m.shared_expert_intermediate_size);
    s.push_back({"mlp.shared_expert_gate.weight", {1, D}});
  }
  return s;
}

MixerConfig ModelConfig::mixer(int layer) const {
  if (gla) return GlaMixer{*gla, gla_forms};
  if (linear_attention && !attention.is_full_attention(layer)) return GdnMixer{*linear_attention, attention.norm_kind};
  return attention;
}

std::vector<TensorSpec> mixer_weights(const MixerConfig& m) {
  if (const GlaMixer* g = std::get_if<GlaMixer>(&m)) return gla_expected_weights(g->config, g->forms);
  if (const GdnMixer* g = std::get_if<GdnMixer>(&m)) {
    std::vector<TensorSpec> s = gdn_expected_weights(g->config);
    if (g->input_norm) s.insert(s.begin(), {"input_layernorm.weight", {g->config.hidden_size}});
    return s;
  }
  return expected_weights(std::get<BlockConfig>(m));
}

std::string mixer_tensor_name(const MixerConfig& m, int layer, const std::string& bare) {
  if (std::holds_alternative<GlaMixer>(m)) return layer_gla_name(layer, bare);
  if (std::holds_alternative<GdnMixer>(m))
    return layer_tensor_name(layer, bare == "input_layernorm.weight" ? bare : "linear_attn." + bare);
  return layer_attention_name(layer, bare);
}

std::vector<TensorSpec> expected_model_weights(const ModelConfig& cfg) {
  cfg.validate();
  const int64_t D = cfg.hidden_size(), V = cfg.vocab_size;
  std::vector<TensorSpec> s{{cfg.embedding_name(), {V, D}}};
  for (int i = 0; i < cfg.num_hidden_layers; ++i) {
    const MixerConfig mixer = cfg.mixer(i);
    for (const TensorSpec& t : mixer_weights(mixer)) s.push_back({mixer_tensor_name(mixer, i, t.name), t.shape});
    for (const TensorSpec& t : mlp_weights(cfg, i)) s.push_back({layer_tensor_name(i, t.name), t.shape});
  }
  s.push_back({"model.norm.weight", {D}});
  if (!cfg.tie_word_embeddings) s.push_back({"lm_head.weight", {V, D}});
  return s;
}

TensorMap layer_attention_tensors(const ModelConfig& cfg, const TensorMap& model, int layer) {
  cfg.validate();
  if (layer < 0 || layer >= cfg.num_hidden_layers)
    throw Error(ErrorCode::invalid_argument, "layer " + std::to_string(layer) + " is out of range: the model has " +
                                                 std::to_string(cfg.num_hidden_layers) + " layers, 0.." +
                                                 std::to_string(cfg.num_hidden_layers - 1));
  if (!std::holds_alternative<BlockConfig>(cfg.mixer(layer)))
    throw Error(ErrorCode::invalid_argument, "model_type " + cfg.model_type + ": layer " + std::to_string(layer) +
                                                 " is not an attention block");
  TensorMap out;
  for (const TensorSpec& spec : expected_weights(cfg.attention)) {
    const std::string full = layer_attention_name(layer, spec.name);
    const auto it = model.find(full);
    if (it == model.end()) throw Error(ErrorCode::missing_tensor, "weights: tensor '" + full + "' is missing");
    out[spec.name] = it->second;
  }
  return out;
}

}  // namespace vkgate
