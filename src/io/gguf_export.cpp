// A model as llama.cpp's convert_hf_to_gguf.py writes it (vkgate/gguf_model.hpp):
// the way back of gguf_model.cpp and gguf_model_tensors.cpp, used by `vkgate
// quantize` and by the tests; gguf_export_tokenizer.cpp writes its tokenizer.json.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <numbers>
#include <string>

#include "io/value_heads.hpp"
#include "nn/storage.hpp"
#include "vkgate/error.hpp"
#include "vkgate/gguf_model.hpp"
#include "vkgate/model.hpp"
#include "vkgate/quant.hpp"

namespace vkgate {

// ---- GgufDraft

void GgufDraft::set(const std::string& key, GgufValue value) {
  for (auto& [k, old] : metadata)
    if (k == key) {
      old = std::move(value);
      return;
    }
  metadata.emplace_back(key, std::move(value));
}

void GgufDraft::erase(const std::string& key) {
  std::erase_if(metadata, [&](const auto& kv) { return kv.first == key; });
}

const GgufValue* GgufDraft::find(const std::string& key) const {
  for (const auto& [k, v] : metadata)
    if (k == key) return &v;
  return nullptr;
}

void GgufDraft::add_tensor(const std::string& name, DType dtype, std::vector<int64_t> shape, std::vector<std::byte> bytes) {
  Tensor t{name, dtype, std::move(shape), std::move(bytes)};
  for (Tensor& old : tensors)
    if (old.name == name) {
      old = std::move(t);
      return;
    }
  tensors.push_back(std::move(t));
}

void GgufDraft::erase_tensor(const std::string& name) {
  std::erase_if(tensors, [&](const Tensor& t) { return t.name == name; });
}

const GgufDraft::Tensor* GgufDraft::find_tensor(const std::string& name) const {
  for (const Tensor& t : tensors)
    if (t.name == name) return &t;
  return nullptr;
}

void GgufDraft::write(const std::string& path) const {
  GgufWriter w;
  for (const auto& [k, v] : metadata) w.set(k, v);
  for (const Tensor& t : tensors) w.add_tensor(t.name, t.dtype, t.shape, t.bytes);
  w.write(path);
}

// ---- the model

uint32_t gguf_file_type(const GgufExportOptions& o) {
  if (o.quant) switch (*o.quant) {
      case DType::Q4_0: return 2;
      case DType::Q4_1: return 3;
      case DType::Q8_0: return 7;
      case DType::Q5_0: return 8;
      case DType::Q5_1: return 9;
      case DType::Q4_K: return 14;  // LLAMA_FTYPE_MOSTLY_Q4_K_S: every quantized tensor Q4_K
      case DType::Q5_K: return 16;  // LLAMA_FTYPE_MOSTLY_Q5_K_S
      case DType::Q6_K: return 18;
      case DType::Q2_K: return 10;
      case DType::Q3_K: return 11;  // LLAMA_FTYPE_MOSTLY_Q3_K_S
      case DType::IQ4_NL: return 25;
      case DType::IQ4_XS: return 30;
      default: break;
    }
  switch (o.float_type) {
    case DType::F32: return 0;
    case DType::BF16: return 32;
    default: return 1;
  }
}

namespace {

constexpr const char* kWhere = "gguf export";

[[noreturn]] void unsupported(const std::string& why) { throw Error(ErrorCode::unsupported, std::string(kWhere) + ": " + why); }

// Hugging Face's names of a layer's tensors (under model.layers.N.) and the converter's (under blk.N.).
const std::map<std::string, std::string>& layer_names() {
  static const std::map<std::string, std::string> names = {
      {"input_layernorm.weight", "attn_norm.weight"},   {"self_attn.q_proj.weight", "attn_q.weight"},
      {"self_attn.q_proj.bias", "attn_q.bias"},         {"self_attn.k_proj.weight", "attn_k.weight"},
      {"self_attn.k_proj.bias", "attn_k.bias"},         {"self_attn.v_proj.weight", "attn_v.weight"},
      {"self_attn.v_proj.bias", "attn_v.bias"},         {"self_attn.o_proj.weight", "attn_output.weight"},
      {"self_attn.o_proj.bias", "attn_output.bias"},    {"self_attn.q_norm.weight", "attn_q_norm.weight"},
      {"self_attn.k_norm.weight", "attn_k_norm.weight"}, {"post_attention_layernorm.weight", "ffn_norm.weight"},
      {"mlp.gate_proj.weight", "ffn_gate.weight"},      {"mlp.gate_proj.bias", "ffn_gate.bias"},
      {"mlp.up_proj.weight", "ffn_up.weight"},          {"mlp.up_proj.bias", "ffn_up.bias"},
      {"mlp.down_proj.weight", "ffn_down.weight"},      {"mlp.down_proj.bias", "ffn_down.bias"},
      {"mlp.gate.weight", "ffn_gate_inp.weight"},
      {"mlp.shared_expert.gate_proj.weight", "ffn_gate_shexp.weight"},
      {"mlp.shared_expert.up_proj.weight", "ffn_up_shexp.weight"},
      {"mlp.shared_expert.down_proj.weight", "ffn_down_shexp.weight"},
      {"mlp.shared_expert_gate.weight", "ffn_gate_inp_shexp.weight"}};
  return names;
}

// general.architecture for a model_type vkgate writes; empty for the others.
std::string architecture(const std::string& type) {
  if (type == "llama" || type == "qwen3") return type;
  if (type == "qwen3_moe") return "qwen3moe";
  if (type == "qwen3_next") return "qwen3next";
  if (type == "qwen3_5_text") return "qwen35";
  if (type == "qwen3_5_moe_text") return "qwen35moe";
  return "";
}

// Qwen3-Next and Qwen3.5: Gated DeltaNet layers beside gated attention, zero-centred norms.
bool hybrid(const ModelConfig& cfg) { return cfg.linear_attention.has_value(); }
// Qwen3.5: the converter tiles the value heads (io/value_heads.hpp).
bool tiles_value_heads(const ModelConfig& cfg) { return value_heads::tiled_in_gguf(cfg.model_type); }

// What the GGUF keys (and llama.cpp) cannot say about `cfg`: refused by name.
void check_expressible(const ModelConfig& cfg) {
  const BlockConfig& a = cfg.attention;
  const std::string& type = cfg.model_type;
  if (architecture(type).empty())
    unsupported("model_type \"" + type + "\": vkgate writes GGUF files of llama, qwen3, qwen3_moe, qwen3_next, "
                "qwen3_5_text and qwen3_5_moe_text models");
  auto refuse = [&](const std::string& what) { unsupported(type + " model with " + what + ": a GGUF file cannot say so"); };
  if (cfg.hidden_act != Activation::silu) refuse(std::string("hidden_act ") + to_string(cfg.hidden_act));
  if (a.gate_position != GatePosition::sdpa) refuse(std::string("gate position ") + to_string(a.gate_position));
  if (hybrid(cfg)) {
    if (a.gate_kind != GateKind::elementwise || a.gate_layout != GateLayout::qwen3_next)
      refuse(std::string("gate ") + to_string(a.gate_kind) + " in layout " + to_string(a.gate_layout));
    if (a.norm_kind != NormKind::zero_centered) refuse("plain norms");
    const GdnConfig& g = *cfg.linear_attention;
    // llama.cpp's loaders take the value head size to be ssm.state_size, the key head size's.
    if (g.value_head_dim != g.key_head_dim)
      refuse("Gated DeltaNet value heads of " + std::to_string(g.value_head_dim) + " and key heads of " +
             std::to_string(g.key_head_dim));
    if (g.separate_projections != tiles_value_heads(cfg))
      refuse(g.separate_projections ? "separate Gated DeltaNet projections" : "fused Gated DeltaNet projections");
    if (g.out_proj_tiled && !tiles_value_heads(cfg)) refuse("out_proj's value heads tiled");
    for (int l = 0; l < cfg.num_hidden_layers; ++l)
      if ((cfg.moe.num_experts > 0) != cfg.sparse_mlp(l))
        refuse((cfg.sparse_mlp(l) ? "sparse" : "dense") + std::string(" layer ") + std::to_string(l) +
               " among the others (llama.cpp reads every MLP of the model one way)");
  } else {
    if (a.gate_kind != GateKind::none && (type != "qwen3" || a.gate_layout != GateLayout::official_grouped))
      refuse(std::string("gate ") + to_string(a.gate_kind) + " in layout " + to_string(a.gate_layout));
    if (a.norm_kind != NormKind::plain) refuse("zero-centred norms");
  }
  if (a.rope_style != RopeStyle::rotate_half) refuse("interleaved RoPE");
  if (a.gqa_mapping != GqaMapping::grouped) refuse("tiled GQA");
  if (a.use_qk_norm != (type != "llama")) refuse(a.use_qk_norm ? "q/k norms" : "no q/k norms");
  if (a.qkv_bias != a.o_bias) refuse("a bias on q/k/v but not on o_proj, or the other way round");
  if (!a.residual || !a.causal) refuse("a block without residual or causal mask");
  const RopeScaling& s = a.rope_scaling;
  if (s.type == RopeType::dynamic) refuse("dynamic RoPE scaling");
  if (s.type == RopeType::yarn && (s.mscale != 0 || s.mscale_all_dim != 0 || !s.truncate))
    refuse("yarn RoPE scaling with mscale, mscale_all_dim or truncate false");
  if (type == "qwen3_moe") {
    if (cfg.moe.shared_expert_intermediate_size > 0) refuse("a shared expert");
    for (int l = 0; l < cfg.num_hidden_layers; ++l)
      if (!cfg.sparse_mlp(l)) refuse("dense layer " + std::to_string(l) + " (decoder_sparse_step, mlp_only_layers)");
  }
}

// The converter's tensor type: F32 for 1-D tensors, norms, biases and routers;
// the block format for the weights quantize_weights takes; else float_type.
DType target_type(const TensorSpec& spec, const std::string& gguf_name, const GgufExportOptions& o) {
  if (spec.shape.size() <= 1 || gguf_name.ends_with("_norm.weight") || !gguf_name.ends_with(".weight") ||
      gguf_name.find("ffn_gate_inp") != std::string::npos || gguf_name.ends_with("ssm_conv1d.weight"))
    return DType::F32;
  if (o.quant && quantizable_weight(spec.name) && spec.shape.size() == 2 &&
      spec.shape[1] % int64_t(block_elements(*o.quant)) == 0)
    return *o.quant;
  return o.float_type;
}

// The tensor's values stored as `dtype` (its own bytes when it already is).
std::vector<std::byte> encoded(const HostTensor& t, DType dtype) {
  if (t.dtype == dtype) return std::vector<std::byte>(t.bytes.begin(), t.bytes.end());
  const std::vector<float> f = nn::to_f32(t);
  if (is_quantized(dtype)) return quantize(dtype, f);
  std::vector<std::byte> out(f.size() * (dtype == DType::F32 ? 4 : 2));
  for (size_t i = 0; i < f.size(); ++i) {
    if (dtype == DType::F32) {
      std::memcpy(out.data() + 4 * i, &f[i], 4);
    } else {
      const uint16_t h = dtype == DType::F16 ? float_to_half(f[i]) : float_to_bf16(f[i]);
      std::memcpy(out.data() + 2 * i, &h, 2);
    }
  }
  return out;
}

// The converter's LlamaModel.permute on whole rows of bytes: per head of
// head_dim rows, the checkpoint's row j·head_dim/2 + i goes to row 2i + j.
std::vector<std::byte> llama_permuted(const std::vector<std::byte>& bytes, int64_t rows, int heads) {
  const int64_t head_dim = rows / heads, half = head_dim / 2;
  const size_t row_bytes = bytes.size() / size_t(rows);
  std::vector<std::byte> out(bytes.size());
  for (int64_t h = 0; h < heads; ++h)
    for (int64_t j = 0; j < 2; ++j)
      for (int64_t i = 0; i < half; ++i)
        std::memcpy(out.data() + size_t(h * head_dim + 2 * i + j) * row_bytes,
                    bytes.data() + size_t(h * head_dim + j * half + i) * row_bytes, row_bytes);
  return out;
}

// transformers' llama3 frequency factors in fp32, as the converter's
// generate_extra_tensors computes rope_freqs.
std::vector<float> llama3_rope_freqs(const RopeScaling& s, double theta, int dims) {
  const double original = s.original_max_position_embeddings;
  std::vector<float> factors;
  for (int i = 0; i < dims; i += 2) {
    const float freq = 1.0f / std::pow(float(theta), float(i) / float(dims));
    const double wavelen = 2 * std::numbers::pi / freq;
    const double low_wavelen = original / s.low_freq_factor, high_wavelen = original / s.high_freq_factor;
    if (wavelen < high_wavelen) factors.push_back(1.0f);
    else if (wavelen > low_wavelen) factors.push_back(float(s.factor));
    else {
      const double smooth = (original / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
      factors.push_back(float(1 / ((1 - smooth) / s.factor + smooth)));
    }
  }
  return factors;
}

// Qwen3NextModel.set_gguf_parameters' keys (and Qwen3.5's RoPE sections).
template <class Key>
void write_hybrid_hparams(GgufDraft& g, const ModelConfig& cfg, Key key) {
  auto u32 = [](int64_t v) { return GgufValue::of_u32(uint32_t(v)); };
  const BlockConfig& a = cfg.attention;
  const GdnConfig& d = *cfg.linear_attention;
  if (cfg.moe.num_experts > 0) g.set(key("expert_shared_feed_forward_length"), u32(cfg.moe.shared_expert_intermediate_size));
  g.set(key("ssm.conv_kernel"), u32(d.conv_kernel));
  g.set(key("ssm.state_size"), u32(d.key_head_dim));
  g.set(key("ssm.group_count"), u32(d.num_key_heads));
  g.set(key("ssm.time_step_rank"), u32(d.num_value_heads));
  g.set(key("ssm.inner_size"), u32(d.value_dim()));
  GgufValue recurrent;
  recurrent.type = GgufType::ARRAY;
  recurrent.element = GgufType::BOOL;
  for (int l = 0; l < cfg.num_hidden_layers; ++l) recurrent.integers.push_back(a.is_full_attention(l) ? 0 : 1);
  g.set(key("attention.recurrent_layers"), recurrent);
  g.set(key("full_attention_interval"), u32(a.full_attention_interval));
  if (tiles_value_heads(cfg)) {
    // llama.cpp requires four; the converter's default where the config names none.
    std::vector<int64_t> sections(a.mrope_section.begin(), a.mrope_section.end());
    if (sections.empty()) sections = {11, 11, 10};
    sections.resize(4, 0);
    g.set(key("rope.dimension_sections"), GgufValue::of_i32s(sections));
  }
}

void write_hparams(GgufDraft& g, const ModelConfig& cfg, const std::string& arch, const GgufExportOptions& o) {
  const BlockConfig& a = cfg.attention;
  auto key = [&](const char* k) { return arch + "." + k; };
  auto u32 = [](int64_t v) { return GgufValue::of_u32(uint32_t(v)); };
  g.set("general.architecture", GgufValue::of_string(arch));
  g.set("general.type", GgufValue::of_string("model"));
  if (!o.name.empty()) g.set("general.name", GgufValue::of_string(o.name));
  if (cfg.model_type == "llama") g.set(key("vocab_size"), u32(cfg.vocab_size));
  g.set(key("block_count"), u32(cfg.num_hidden_layers));
  g.set(key("context_length"), u32(a.max_position_embeddings));
  g.set(key("embedding_length"), u32(a.hidden_size));
  g.set(key("feed_forward_length"), u32(cfg.intermediate_size));
  g.set(key("attention.head_count"), u32(a.num_heads));
  g.set(key("attention.head_count_kv"), u32(a.num_kv_heads));
  const RopeScaling& s = a.rope_scaling;
  if (s.type == RopeType::linear || s.type == RopeType::yarn) {
    g.set(key("rope.scaling.type"), GgufValue::of_string(to_string(s.type)));
    g.set(key("rope.scaling.factor"), GgufValue::of_f32(float(s.factor)));
  }
  if (s.type == RopeType::yarn) {
    if (s.original_max_position_embeddings > 0)
      g.set(key("rope.scaling.original_context_length"), u32(s.original_max_position_embeddings));
    if (s.attention_factor != 0) g.set(key("rope.scaling.yarn_attn_factor"), GgufValue::of_f32(float(s.attention_factor)));
    g.set(key("rope.scaling.yarn_beta_fast"), GgufValue::of_f32(float(s.beta_fast)));
    g.set(key("rope.scaling.yarn_beta_slow"), GgufValue::of_f32(float(s.beta_slow)));
  }
  g.set(key("rope.freq_base"), GgufValue::of_f32(float(a.rope_theta)));
  g.set(key("attention.layer_norm_rms_epsilon"), GgufValue::of_f32(float(a.rms_norm_eps)));
  if (cfg.moe.num_experts > 0) {
    g.set(key("expert_count"), u32(cfg.moe.num_experts));
    g.set(key("expert_used_count"), u32(cfg.moe.num_experts_per_tok));
  }
  g.set(key("attention.key_length"), u32(a.head_dim));
  g.set(key("attention.value_length"), u32(a.head_dim));
  g.set("general.file_type", GgufValue::of_u32(gguf_file_type(o)));
  if (cfg.model_type == "llama" || hybrid(cfg) || a.rotary_dim() != a.head_dim)
    g.set(key("rope.dimension_count"), u32(a.rotary_dim()));
  if (cfg.moe.num_experts > 0) {
    g.set(key("expert_feed_forward_length"), u32(cfg.moe.moe_intermediate_size));
    if (!cfg.moe.norm_topk_prob) g.set(key("expert_weights_norm"), GgufValue::of_bool(false));
  }
  if (hybrid(cfg)) write_hybrid_hparams(g, cfg, key);
  g.set("general.quantization_version", GgufValue::of_u32(2));  // GGML_QUANT_VERSION
  if (!cfg.eos_token_ids.empty()) g.set("tokenizer.ggml.eos_token_id", u32(cfg.eos_token_ids[0]));
}

// fp32 values stored as `dtype`.
std::vector<std::byte> encoded(const std::vector<float>& f, DType dtype) {
  return encoded(HostTensor{DType::F32, {int64_t(f.size())}, std::as_bytes(std::span(f))}, dtype);
}

// A Gated DeltaNet tensor (`bare` under model.layers.N.linear_attn.) as the
// converter writes it (Qwen3NextModel.modify_tensors, and Qwen3.5's
// _LinearAttentionVReorderBase): the inverse of gguf_model_tensors' gdn().
void put_gdn(GgufDraft& g, const ModelConfig& cfg, const std::string& blk, const std::string& bare, const TensorSpec& spec,
             const HostTensor& t, const GgufExportOptions& o) {
  const GdnConfig& d = *cfg.linear_attention;
  const int64_t D = d.hidden_size, dk = d.key_head_dim, dv = d.value_head_dim, keys = d.key_dim(),
                r = d.group_size(), C = d.conv_channels();
  const value_heads::Order order = value_heads::Order::of(d);
  const bool tile = tiles_value_heads(cfg) && !order.identity();
  auto to_tiled = [&](int64_t h) { return order.tiled(h); };
  // `bytes` (rows of `shape`) with the value heads' blocks of `unit` rows
  // from `first` on tiled (unit 0: a tensor not indexed by value head).
  auto tiled_rows = [&](std::vector<std::byte> bytes, const std::vector<int64_t>& shape, int64_t first, int64_t unit) {
    if (!tile || unit == 0) return bytes;
    return value_heads::move_row_blocks(bytes, bytes.size() / size_t(shape[0]), first, unit, order, to_tiled);
  };
  auto put = [&](const std::string& name, std::vector<int64_t> shape, int64_t first, int64_t unit) {
    const DType dtype = target_type(spec, blk + name, o);
    g.add_tensor(blk + name, dtype, shape, tiled_rows(encoded(t, dtype), shape, first, unit));
  };
  if (bare == "in_proj_qkvz.weight") {
    // Per key head j: q_j, k_j, its value heads' v and z rows → [all q | all k | all v] and [all z].
    const DType dtype = target_type(spec, blk + "attn_qkv.weight", o);
    const std::vector<std::byte> bytes = encoded(t, dtype);
    const size_t row = bytes.size() / size_t(spec.shape[0]);
    std::vector<std::byte> parts[4];  // q, k, v, z
    const int64_t sizes[4] = {dk, dk, r * dv, r * dv};
    auto at = bytes.begin();
    for (int64_t j = 0; j < d.num_key_heads; ++j)
      for (int p = 0; p < 4; ++p) {
        parts[p].insert(parts[p].end(), at, at + long(size_t(sizes[p]) * row));
        at += long(size_t(sizes[p]) * row);
      }
    for (int p = 1; p < 3; ++p) parts[0].insert(parts[0].end(), parts[p].begin(), parts[p].end());
    g.add_tensor(blk + "attn_qkv.weight", dtype, {C, D}, std::move(parts[0]));
    g.add_tensor(blk + "attn_gate.weight", dtype, {d.value_dim(), D}, std::move(parts[3]));
  } else if (bare == "in_proj_ba.weight") {
    put("ssm_ba.weight", spec.shape, 0, 0);
  } else if (bare == "in_proj_qkv.weight") {
    put("attn_qkv.weight", spec.shape, 2 * keys, dv);
  } else if (bare == "in_proj_z.weight") {
    put("attn_gate.weight", spec.shape, 0, dv);
  } else if (bare == "in_proj_b.weight" || bare == "in_proj_a.weight") {
    put(bare == "in_proj_b.weight" ? "ssm_beta.weight" : "ssm_alpha.weight", spec.shape, 0, 1);
  } else if (bare == "conv1d.weight") {
    put("ssm_conv1d.weight", {C, int64_t(d.conv_kernel)}, 2 * keys, dv);
  } else if (bare == "A_log") {
    std::vector<float> a = nn::to_f32(t);
    for (float& x : a) x = -std::exp(x);
    g.add_tensor(blk + "ssm_a", DType::F32, spec.shape, tiled_rows(encoded(a, DType::F32), spec.shape, 0, 1));
  } else if (bare == "dt_bias") {
    put("ssm_dt.bias", spec.shape, 0, 1);
  } else if (bare == "norm.weight") {
    put("ssm_norm.weight", spec.shape, 0, 0);  // per value head's element, shared; a plain weight: no 1 + w
  } else if (bare == "out_proj.weight") {
    // Its input columns by value head (already tiled: GdnConfig::out_proj_tiled):
    // whole blocks of the stored format moved as bytes, else (a k-quant block
    // across heads) tiled before encoding.
    const DType dtype = target_type(spec, blk + "ssm_out.weight", o);
    std::vector<std::byte> bytes;
    if (!tile || d.out_proj_tiled) {
      bytes = encoded(t, dtype);
    } else if (dv % int64_t(block_elements(dtype)) == 0) {
      const size_t chunk = size_t(dv) / block_elements(dtype) * block_bytes(dtype);
      bytes = value_heads::move_column_blocks(encoded(t, dtype), chunk, order, to_tiled);
    } else {
      const std::vector<float> f = nn::to_f32(t);
      const std::vector<std::byte> moved =
          value_heads::move_column_blocks(std::as_bytes(std::span(f)), size_t(dv) * sizeof(float), order, to_tiled);
      std::vector<float> tiled(f.size());
      std::memcpy(tiled.data(), moved.data(), moved.size());
      bytes = encoded(tiled, dtype);
    }
    g.add_tensor(blk + "ssm_out.weight", dtype, spec.shape, std::move(bytes));
  } else {
    unsupported("no GGUF tensor is known to hold '" + spec.name + "'");
  }
}

}  // namespace

GgufDraft gguf_export_model(const ModelConfig& cfg, const TensorMap& weights, const GgufExportOptions& o) {
  if (o.float_type != DType::F32 && o.float_type != DType::F16 && o.float_type != DType::BF16)
    throw Error(ErrorCode::invalid_argument, std::string(kWhere) + ": float type " + to_string(o.float_type) +
                                                 " is not F32, F16 or BF16");
  if (o.quant && !is_quantized(*o.quant))
    throw Error(ErrorCode::invalid_argument, std::string(kWhere) + ": " + to_string(*o.quant) + " is not a block format");
  cfg.validate();
  check_expressible(cfg);
  const std::string arch = architecture(cfg.model_type);
  const BlockConfig& a = cfg.attention;
  const bool llama = cfg.model_type == "llama";

  // Every tensor present and of its shape before anything is converted.
  const std::vector<TensorSpec> specs = expected_model_weights(cfg);
  for (const TensorSpec& spec : specs) {
    const auto it = weights.find(spec.name);
    if (it == weights.end())
      throw Error(ErrorCode::missing_tensor, std::string(kWhere) + ": tensor '" + spec.name + "' is missing");
    const HostTensor& t = it->second;
    const bool float_or_blocks = t.dtype == DType::F32 || t.dtype == DType::F16 || t.dtype == DType::BF16 || is_quantized(t.dtype);
    if ((!t.shape.empty() && t.shape != spec.shape) || t.numel() != spec.numel() || !float_or_blocks)
      throw Error(ErrorCode::shape_mismatch, std::string(kWhere) + ": tensor '" + spec.name + "' is " + to_string(t.dtype) +
                                                 " " + shape_text(t.shape) + ", expected F32, F16, BF16 or a block format " +
                                                 shape_text(spec.shape));
  }

  GgufDraft g;
  write_hparams(g, cfg, arch, o);
  if (a.rope_scaling.type == RopeType::llama3) {
    const std::vector<float> f = llama3_rope_freqs(a.rope_scaling, a.rope_theta, a.rotary_dim());
    std::vector<std::byte> bytes(f.size() * 4);
    std::memcpy(bytes.data(), f.data(), bytes.size());
    g.add_tensor("rope_freqs.weight", DType::F32, {int64_t(f.size())}, std::move(bytes));
  }
  auto convert = [&](const TensorSpec& spec, const std::string& name) {
    const DType dtype = target_type(spec, name, o);
    // Qwen3-Next's and Qwen3.5's (1 + w) norms: the converter stores 1 + w (fp32),
    // but for the Gated DeltaNet's own (linear_attn.norm, a plain weight).
    if (hybrid(cfg) && spec.name.ends_with("norm.weight")) {
      std::vector<float> w = nn::to_f32(weights.at(spec.name));
      for (float& x : w) x += 1.0f;
      return std::pair{dtype, encoded(w, dtype)};
    }
    return std::pair{dtype, encoded(weights.at(spec.name), dtype)};
  };
  auto put = [&](const TensorSpec& spec, const std::string& name) {
    auto [dtype, bytes] = convert(spec, name);
    g.add_tensor(name, dtype, spec.shape, std::move(bytes));
  };
  std::map<std::string, const TensorSpec*> by_name;
  for (const TensorSpec& spec : specs) by_name[spec.name] = &spec;
  put(*by_name.at("model.embed_tokens.weight"), "token_embd.weight");
  put(*by_name.at("model.norm.weight"), "output_norm.weight");
  if (!cfg.tie_word_embeddings) put(*by_name.at("lm_head.weight"), "output.weight");

  const int64_t D = a.hidden_size;
  for (int l = 0; l < cfg.num_hidden_layers; ++l) {
    const std::string hf = "model.layers." + std::to_string(l) + ".", blk = "blk." + std::to_string(l) + ".";
    struct Part {
      DType dtype;
      std::vector<int64_t> shape;
      std::vector<std::byte> bytes;
    };
    std::map<std::string, Part> qkv;  // --fuse-qkv: the projections (permuted) by their bare name
    for (const TensorSpec& spec : specs) {
      if (!spec.name.starts_with(hf)) continue;
      const std::string bare = spec.name.substr(hf.size());
      if (bare.starts_with("mlp.experts.")) continue;  // stacked below
      if (bare.starts_with("linear_attn.")) {
        put_gdn(g, cfg, blk, bare.substr(12), spec, weights.at(spec.name), o);
        continue;
      }
      const auto known = layer_names().find(bare);
      if (known == layer_names().end()) unsupported("no GGUF tensor is known to hold '" + spec.name + "'");
      // Qwen3-Next's and Qwen3.5's MLP norm is the converter's ATTN_POST_NORM.
      const std::string name =
          blk + (hybrid(cfg) && bare == "post_attention_layernorm.weight" ? "post_attention_norm.weight" : known->second);
      auto [dtype, bytes] = convert(spec, name);
      const bool q = bare.starts_with("self_attn.q_proj."), k = bare.starts_with("self_attn.k_proj.");
      if (llama && (q || k)) bytes = llama_permuted(bytes, spec.shape[0], q ? a.num_heads : a.num_kv_heads);
      if (o.fuse_qkv && (q || k || bare.starts_with("self_attn.v_proj."))) {
        qkv[bare] = Part{dtype, spec.shape, std::move(bytes)};
        continue;
      }
      g.add_tensor(name, dtype, spec.shape, std::move(bytes));
    }
    for (const char* suffix : {"weight", "bias"}) {
      const std::string qn = std::string("self_attn.q_proj.") + suffix;
      if (!qkv.count(qn)) continue;
      Part all{qkv[qn].dtype, qkv[qn].shape, {}};
      all.shape[0] = 0;
      for (const char* p : {"q", "k", "v"}) {
        Part& part = qkv.at(std::string("self_attn.") + p + "_proj." + suffix);
        if (part.dtype != all.dtype)
          unsupported("layer " + std::to_string(l) + "'s q, k and v projections would be stored as different types");
        all.bytes.insert(all.bytes.end(), part.bytes.begin(), part.bytes.end());
        all.shape[0] += part.shape[0];
      }
      g.add_tensor(blk + "attn_qkv." + suffix, all.dtype, all.shape, std::move(all.bytes));
    }
    if (!cfg.sparse_mlp(l)) continue;
    const int64_t E = cfg.moe.num_experts, Im = cfg.moe.moe_intermediate_size;
    std::map<std::string, std::vector<std::byte>> stacked;
    std::map<std::string, DType> types;
    for (int64_t e = 0; e < E; ++e)
      for (const char* p : {"gate_proj", "up_proj", "down_proj"}) {
        const std::string n = hf + "mlp.experts." + std::to_string(e) + "." + p + ".weight";
        const TensorSpec& spec = *by_name.at(n);
        const std::string stacked_name = blk + "ffn_" + std::string(p).substr(0, std::string(p).find('_')) + "_exps.weight";
        const DType dtype = target_type(spec, stacked_name, o);  // as quantize_weights leaves the expert
        const std::vector<std::byte> bytes = encoded(weights.at(spec.name), dtype);
        stacked[p].insert(stacked[p].end(), bytes.begin(), bytes.end());
        types[p] = dtype;
      }
    g.add_tensor(blk + "ffn_down_exps.weight", types["down_proj"], {E, D, Im}, std::move(stacked["down_proj"]));
    if (o.fuse_gate_up_exps) {
      std::vector<std::byte> fused;  // per expert: its gate rows, then its up rows
      const size_t per = stacked["gate_proj"].size() / size_t(E);
      for (int64_t e = 0; e < E; ++e)
        for (const char* p : {"gate_proj", "up_proj"})
          fused.insert(fused.end(), stacked[p].begin() + long(size_t(e) * per), stacked[p].begin() + long(size_t(e + 1) * per));
      g.add_tensor(blk + "ffn_gate_up_exps.weight", types["gate_proj"], {E, 2 * Im, D}, std::move(fused));
    } else {
      g.add_tensor(blk + "ffn_gate_exps.weight", types["gate_proj"], {E, Im, D}, std::move(stacked["gate_proj"]));
      g.add_tensor(blk + "ffn_up_exps.weight", types["up_proj"], {E, Im, D}, std::move(stacked["up_proj"]));
    }
  }
  return g;
}

}  // namespace vkgate
