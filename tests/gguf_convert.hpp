// The tests' stand-in for llama.cpp's convert_hf_to_gguf.py: a model's
// tensors (Hugging Face names, fp32 values) and a tokenizer.json written as a
// GGUF file the way the converter lays them out (its names, its metadata
// keys, llama's permuted q/k rows, stacked experts, [PADn] vocabulary
// padding, token types), so that vkgate's GGUF reader can be checked against
// the model or tokenizer it came from.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstring>
#include <optional>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "vkgate/dtype.hpp"
#include "vkgate/gguf.hpp"
#include "vkgate/model_config.hpp"

namespace vkgate::test {

// A GGUF file being assembled: metadata and tensors that a test may still
// change or drop before write().
struct GgufDraft {
  struct Tensor {
    DType dtype;
    std::vector<int64_t> shape;
    std::vector<std::byte> bytes;
  };
  std::vector<std::pair<std::string, GgufValue>> metadata;
  std::map<std::string, Tensor> tensors;

  void set(const std::string& key, GgufValue v) {
    for (auto& [k, old] : metadata)
      if (k == key) {
        old = std::move(v);
        return;
      }
    metadata.emplace_back(key, std::move(v));
  }
  void erase(const std::string& key) {
    std::erase_if(metadata, [&](const auto& kv) { return kv.first == key; });
  }
  // fp32 values stored as F32 or F16.
  void add(const std::string& name, std::vector<int64_t> shape, const std::vector<float>& v, DType dtype) {
    Tensor t{dtype, std::move(shape), {}};
    if (dtype == DType::F16) {
      t.bytes.resize(v.size() * 2);
      for (size_t i = 0; i < v.size(); ++i) {
        const uint16_t h = float_to_half(v[i]);
        std::memcpy(t.bytes.data() + 2 * i, &h, 2);
      }
    } else {
      t.bytes.resize(v.size() * 4);
      std::memcpy(t.bytes.data(), v.data(), t.bytes.size());
    }
    tensors[name] = std::move(t);
  }
  void write(const std::string& path) const {
    GgufWriter w;
    for (const auto& [k, v] : metadata) w.set(k, v);
    for (const auto& [name, t] : tensors) w.add_tensor(name, t.dtype, t.shape, t.bytes);
    w.write(path);
  }
};

// How the converter was run: --outtype f16 (matrices F16, 1-D tensors F32)
// or f32; --fuse-qkv; --fuse-gate-up-exps.
struct ConvertOptions {
  bool f16 = false;
  bool fuse_qkv = false;
  bool fuse_gate_up = false;
};

// The converter's LlamaModel.permute: each head's rows (h, j·hd/2 + i) go to (h, 2i + j).
inline std::vector<float> llama_permute(const std::vector<float>& w, int64_t heads, int64_t rows) {
  const int64_t hd = rows / heads, half = hd / 2, width = int64_t(w.size()) / rows;
  std::vector<float> out(w.size());
  for (int64_t h = 0; h < heads; ++h)
    for (int64_t j = 0; j < 2; ++j)
      for (int64_t i = 0; i < half; ++i)
        std::memcpy(out.data() + (h * hd + 2 * i + j) * width, w.data() + (h * hd + j * half + i) * width,
                    size_t(width) * sizeof(float));
  return out;
}

// Values as fp16 would store them (F16 conversion tests compare against these).
inline void round_to_half(std::vector<float>& v) {
  for (float& x : v) x = half_to_float(float_to_half(x));
}

inline const char* gguf_arch(const ModelConfig& cfg) {
  return cfg.model_type == "qwen3_moe" ? "qwen3moe" : cfg.model_type.c_str();
}

// The model `cfg` with weights `data` (every tensor of expected_model_weights)
// as the converter writes it.
inline GgufDraft convert_model(const ModelConfig& cfg, const std::map<std::string, std::vector<float>>& data,
                               const ConvertOptions& o = {}) {
  GgufDraft g;
  const std::string arch = gguf_arch(cfg);
  const BlockConfig& a = cfg.attention;
  auto key = [&](const std::string& k) { return arch + "." + k; };
  g.set("general.architecture", GgufValue::of_string(arch));
  g.set("general.file_type", GgufValue::of_u32(o.f16 ? 1 : 0));
  if (cfg.model_type == "llama") g.set(key("vocab_size"), GgufValue::of_u32(uint32_t(cfg.vocab_size)));
  g.set(key("block_count"), GgufValue::of_u32(uint32_t(cfg.num_hidden_layers)));
  g.set(key("context_length"), GgufValue::of_u32(uint32_t(a.max_position_embeddings)));
  g.set(key("embedding_length"), GgufValue::of_u32(uint32_t(a.hidden_size)));
  g.set(key("feed_forward_length"), GgufValue::of_u32(uint32_t(cfg.intermediate_size)));
  g.set(key("attention.head_count"), GgufValue::of_u32(uint32_t(a.num_heads)));
  g.set(key("attention.head_count_kv"), GgufValue::of_u32(uint32_t(a.num_kv_heads)));
  g.set(key("rope.freq_base"), GgufValue::of_f32(float(a.rope_theta)));
  g.set(key("attention.layer_norm_rms_epsilon"), GgufValue::of_f32(float(a.rms_norm_eps)));
  if (cfg.moe.num_experts > 0) {
    g.set(key("expert_count"), GgufValue::of_u32(uint32_t(cfg.moe.num_experts)));
    g.set(key("expert_used_count"), GgufValue::of_u32(uint32_t(cfg.moe.num_experts_per_tok)));
  }
  // config.json's head_dim (the tests' configs give it).
  g.set(key("attention.key_length"), GgufValue::of_u32(uint32_t(a.head_dim)));
  g.set(key("attention.value_length"), GgufValue::of_u32(uint32_t(a.head_dim)));
  if (cfg.model_type == "llama") g.set(key("rope.dimension_count"), GgufValue::of_u32(uint32_t(a.head_dim)));
  if (cfg.moe.num_experts > 0)
    g.set(key("expert_feed_forward_length"), GgufValue::of_u32(uint32_t(cfg.moe.moe_intermediate_size)));
  if (!cfg.eos_token_ids.empty())
    g.set("tokenizer.ggml.eos_token_id", GgufValue::of_u32(uint32_t(cfg.eos_token_ids[0])));
  if (a.rope_scaling.type == RopeType::linear || a.rope_scaling.type == RopeType::yarn) {
    g.set(key("rope.scaling.type"), GgufValue::of_string(to_string(a.rope_scaling.type)));
    g.set(key("rope.scaling.factor"), GgufValue::of_f32(float(a.rope_scaling.factor)));
  }
  if (a.rope_scaling.type == RopeType::llama3) {
    // generate_extra_tensors: rope_freqs from the llama3 parameters, in fp32 as torch computes them.
    const RopeScaling& s = a.rope_scaling;
    const double pi = 3.14159265358979323846;
    std::vector<float> factors;
    for (int i = 0; i < a.head_dim; i += 2) {
      const float freq = 1.0f / std::pow(float(a.rope_theta), float(i) / float(a.head_dim));
      const double wavelen = 2 * pi / freq;
      const double lw = s.original_max_position_embeddings / s.low_freq_factor;
      const double hw = s.original_max_position_embeddings / s.high_freq_factor;
      if (wavelen < hw) factors.push_back(1.0f);
      else if (wavelen > lw) factors.push_back(float(s.factor));
      else {
        const double smooth = (s.original_max_position_embeddings / wavelen - s.low_freq_factor) /
                              (s.high_freq_factor - s.low_freq_factor);
        factors.push_back(float(1 / ((1 - smooth) / s.factor + smooth)));
      }
    }
    g.add("rope_freqs.weight", {int64_t(factors.size())}, factors, DType::F32);
  }

  const DType mat = o.f16 ? DType::F16 : DType::F32;
  auto put = [&](const std::string& name, const std::vector<int64_t>& shape, const std::vector<float>& v) {
    g.add(name, shape, v, shape.size() == 1 ? DType::F32 : mat);
  };
  const int64_t D = a.hidden_size;
  put("token_embd.weight", {cfg.vocab_size, D}, data.at("model.embed_tokens.weight"));
  put("output_norm.weight", {D}, data.at("model.norm.weight"));
  if (!cfg.tie_word_embeddings) put("output.weight", {cfg.vocab_size, D}, data.at("lm_head.weight"));
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
      {"mlp.gate.weight", "ffn_gate_inp.weight"}};
  for (int l = 0; l < cfg.num_hidden_layers; ++l) {
    const std::string hf = "model.layers." + std::to_string(l) + ".", blk = "blk." + std::to_string(l) + ".";
    std::map<std::string, std::vector<float>> qkv;  // the projections, permuted, for --fuse-qkv
    std::map<std::string, std::vector<int64_t>> qkv_shape;
    for (const TensorSpec& spec : expected_model_weights(cfg)) {
      if (!spec.name.starts_with(hf)) continue;
      const std::string bare = spec.name.substr(hf.size());
      if (bare.starts_with("mlp.experts.")) continue;  // stacked below
      std::vector<float> v = data.at(spec.name);
      const bool q = bare.starts_with("self_attn.q_proj."), k = bare.starts_with("self_attn.k_proj.");
      if (cfg.model_type == "llama" && (q || k)) v = llama_permute(v, q ? a.num_heads : a.num_kv_heads, spec.shape[0]);
      if (o.fuse_qkv && (q || k || bare.starts_with("self_attn.v_proj."))) {
        qkv[bare] = std::move(v);
        qkv_shape[bare] = spec.shape;
        continue;
      }
      put(blk + names.at(bare), spec.shape, v);
    }
    for (const char* suffix : {"weight", "bias"}) {
      const std::string qn = std::string("self_attn.q_proj.") + suffix;
      if (!qkv.count(qn)) continue;
      std::vector<float> all;
      std::vector<int64_t> shape = qkv_shape[qn];
      shape[0] = 0;
      for (const char* p : {"q", "k", "v"}) {
        const std::string n = std::string("self_attn.") + p + "_proj." + suffix;
        all.insert(all.end(), qkv[n].begin(), qkv[n].end());
        shape[0] += qkv_shape[n][0];
      }
      put(blk + "attn_qkv." + suffix, shape, all);
    }
    if (!cfg.sparse_mlp(l)) continue;
    const int64_t E = cfg.moe.num_experts, Im = cfg.moe.moe_intermediate_size;
    std::map<std::string, std::vector<float>> stacked;
    for (int64_t e = 0; e < E; ++e)
      for (const char* p : {"gate_proj", "up_proj", "down_proj"}) {
        const auto& v = data.at(hf + "mlp.experts." + std::to_string(e) + "." + p + ".weight");
        stacked[p].insert(stacked[p].end(), v.begin(), v.end());
      }
    put(blk + "ffn_down_exps.weight", {E, D, Im}, stacked["down_proj"]);
    if (o.fuse_gate_up) {
      std::vector<float> fused;  // per expert: its gate rows, then its up rows
      const size_t per = size_t(Im * D);
      for (int64_t e = 0; e < E; ++e) {
        fused.insert(fused.end(), stacked["gate_proj"].begin() + long(e * per), stacked["gate_proj"].begin() + long((e + 1) * per));
        fused.insert(fused.end(), stacked["up_proj"].begin() + long(e * per), stacked["up_proj"].begin() + long((e + 1) * per));
      }
      put(blk + "ffn_gate_up_exps.weight", {E, 2 * Im, D}, fused);
    } else {
      put(blk + "ffn_gate_exps.weight", {E, Im, D}, stacked["gate_proj"]);
      put(blk + "ffn_up_exps.weight", {E, Im, D}, stacked["up_proj"]);
    }
  }
  return g;
}

// A tokenizer.json (and its tokenizer_config.json, may be null) as the
// converter's _set_vocab_gpt2 writes it: one token per id up to `vocab_size`
// ([PADn], UNUSED, where the tokenizer has none), added tokens CONTROL when
// special or looking special (<|...|>) and USER_DEFINED otherwise, merges as
// "left right", the special ids of tokenizer_config.json and its
// add_bos_token / add_eos_token when they are booleans.
inline void convert_tokenizer(GgufDraft& g, const nlohmann::json& tok, const nlohmann::json& config, const std::string& pre,
                              int64_t vocab_size) {
  std::map<int64_t, std::string> by_id;
  for (const auto& [text, id] : tok.at("model").at("vocab").items()) by_id[id.get<int64_t>()] = text;
  std::map<int64_t, std::pair<std::string, bool>> added;  // id → (content, special)
  for (const auto& t : tok.at("added_tokens")) {
    by_id[t.at("id").get<int64_t>()] = t.at("content").get<std::string>();
    added[t.at("id").get<int64_t>()] = {t.at("content").get<std::string>(), t.at("special").get<bool>()};
  }
  std::vector<std::string> tokens;
  std::vector<int64_t> types;
  for (int64_t i = 0; i < vocab_size; ++i) {
    const auto it = by_id.find(i);
    if (it == by_id.end()) {
      tokens.push_back("[PAD" + std::to_string(i) + "]");
      types.push_back(5);
    } else if (const auto a = added.find(i); a != added.end()) {
      const std::string& s = a->second.first;
      const bool looks_special = s.starts_with("<|") && s.ends_with("|>");
      tokens.push_back(s);
      types.push_back(a->second.second || looks_special ? 3 : 4);
    } else {
      tokens.push_back(it->second);
      types.push_back(1);
    }
  }
  std::vector<std::string> merges;
  for (const auto& m : tok.at("model").at("merges"))
    merges.push_back(m.is_string() ? m.get<std::string>() : m[0].get<std::string>() + " " + m[1].get<std::string>());
  g.set("tokenizer.ggml.model", GgufValue::of_string("gpt2"));
  g.set("tokenizer.ggml.pre", GgufValue::of_string(pre));
  g.set("tokenizer.ggml.tokens", GgufValue::of_strings(tokens));
  g.set("tokenizer.ggml.token_type", GgufValue::of_i32s(types));
  g.set("tokenizer.ggml.merges", GgufValue::of_strings(merges));
  if (config.is_object()) {
    auto id_of = [&](const nlohmann::json& entry) -> std::optional<int64_t> {
      const std::string content = entry.is_string() ? entry.get<std::string>()
                                  : entry.is_object() ? entry.value("content", "")
                                                      : "";
      for (const auto& [id, a] : added)
        if (!content.empty() && a.first == content) return id;
      return std::nullopt;
    };
    for (const char* typ : {"bos", "eos", "unk", "sep", "pad"}) {
      const std::string name = std::string(typ) + "_token";
      if (config.contains(name))
        if (const auto id = id_of(config[name])) {
          const char* key = std::string(typ) == "pad" ? "tokenizer.ggml.padding_token_id"
                            : std::string(typ) == "unk" ? "tokenizer.ggml.unknown_token_id"
                            : std::string(typ) == "sep" ? "tokenizer.ggml.seperator_token_id"
                                                        : nullptr;
          g.set(key ? key : "tokenizer.ggml." + std::string(typ) + "_token_id", GgufValue::of_u32(uint32_t(*id)));
        }
      const std::string add = "add_" + std::string(typ) + "_token";
      if (config.contains(add) && config[add].is_boolean())
        g.set("tokenizer.ggml." + add, GgufValue::of_bool(config[add].get<bool>()));
    }
  }
}

}  // namespace vkgate::test
