// ModelConfig: the shape and conventions of a whole decoder-only model
// (Hugging Face `config.json`, `model_type` "qwen3" — the paper's released
// checkpoints, with the official gate flags — "llama", "gla": fla's GLA
// models, whose layers are gated linear attention, "qwen3_next": Gated
// DeltaNet and gated attention layers with sparse MoE MLPs, or "qwen3_moe"),
// and the names and shapes of its tensors.
//
//   input_ids ─> embed_tokens ─> [ layer 0 … L−1 ] ─> norm ─> lm_head ─> logits
//   layer:  h = x + attn(input_layernorm(x));  out = h + mlp(post_attention_layernorm(h))
//   mlp:    down( act(gate(x)) ⊙ up(x) ), or the sparse mixture of experts (MoeConfig)
//   gla:    embeddings, and h = x + attn(attn_norm(x)); out = h + mlp(mlp_norm(h))
//           with attn a GLA layer (gla_config.hpp); every norm plain RMSNorm with norm_eps
//
// Thread safety: ModelConfig is a plain value; the parsing functions have no
// shared state and may run on any thread. A malformed config.json is rejected
// with an Error naming the file and the key, never a crash.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <optional>
#include <variant>

#include "vkgate/config.hpp"
#include "vkgate/gdn_config.hpp"
#include "vkgate/gla_config.hpp"
#include "vkgate/weights.hpp"

namespace vkgate {

// The MLP's activation (`hidden_act`): silu (SwiGLU: Qwen3, Llama), gelu (the
// exact erf form), gelu_pytorch_tanh (the tanh approximation), sigmoid (seed
// 002's GLU).
enum class Activation { silu, gelu, gelu_tanh, sigmoid };
const char* to_string(Activation a) noexcept;  // the config.json spelling

// A GLA layer: its config and the forms of its tensors.
struct GlaMixer {
  GlaConfig config;
  GlaForms forms;
  bool operator==(const GlaMixer&) const = default;
};
// A Gated DeltaNet layer (Qwen3-Next's linear attention), with the layer's
// input RMSNorm (input_layernorm.weight beside it) when it has one: a model's
// layer does, a layer file does not.
struct GdnMixer {
  GdnConfig config;
  std::optional<NormKind> input_norm;
  bool operator==(const GdnMixer&) const = default;
};
// One layer's token mixer, chosen per layer (ModelConfig::mixer): gated
// softmax attention (the block), gated linear attention or Gated DeltaNet. A
// new kind is one more alternative here, its nn/ module and one line of
// nn::make_mixer.
using MixerConfig = std::variant<BlockConfig, GlaMixer, GdnMixer>;

// The mixer's tensors under their bare names (expected_weights,
// gla_expected_weights), and where a layer keeps them: attention under
// model.layers.{i}.self_attn. (its norm model.layers.{i}.input_layernorm.weight),
// GLA under model.layers.{i}.attn. (attn_norm.weight beside it), Gated
// DeltaNet under model.layers.{i}.linear_attn. (input_layernorm.weight beside it).
std::vector<TensorSpec> mixer_weights(const MixerConfig& m);
std::string mixer_tensor_name(const MixerConfig& m, int layer, const std::string& bare);

// The sparse mixture-of-experts MLP of Qwen3-Next and Qwen3-MoE (config.json's
// keys as transformers writes them):
//
//   p = softmax(x̂·W_routerᵀ) over E experts (fp32);  S = the top k of p
//   w_e = p_e (/ Σ_S p when norm_topk_prob);  out = Σ_S w_e·SwiGLU_e(x̂)
//           (+ σ(x̂·shared_expert_gateᵀ)·SwiGLU_shared(x̂) with a shared expert)
//
// Layer i has it when num_experts > 0, i is not in mlp_only_layers and
// (i + 1) % decoder_sparse_step == 0; the other layers keep the dense MLP of
// intermediate_size.
struct MoeConfig {
  int num_experts = 0;                      // E; 0: every layer dense
  int num_experts_per_tok = 0;              // k, in [1, E]
  int moe_intermediate_size = 0;            // each expert's SwiGLU width
  int shared_expert_intermediate_size = 0;  // 0: no shared expert (qwen3_moe)
  bool norm_topk_prob = false;
  int decoder_sparse_step = 1;
  std::vector<int> mlp_only_layers;
  bool sparse(int layer) const;
  bool operator==(const MoeConfig&) const = default;
};

struct ModelConfig {
  // "qwen3", "llama", "gla", "qwen3_next", "qwen3_moe", "qwen3_5_text" or
  // "qwen3_5_moe_text" (a qwen3_5 / qwen3_5_moe config.json's text_config)
  std::string model_type;
  // Every layer's attention: residual = true (the layer adds x), causal.
  // Its norm fields (norm_kind, rms_norm_eps) are the model's RMSNorms too.
  // Unused (default) when gla is set.
  BlockConfig attention;
  // Set iff model_type is "gla": every layer's mixer instead of `attention`;
  // its norm_eps is every norm's of the model.
  std::optional<GlaConfig> gla;
  // The forms of every GLA layer's tensors, decided by the config (fla builds
  // them so): low_rank_dim = gate_low_rank_dim (fla's gk_proj is always the
  // low-rank pair), output_norm g_norm_swish_gate.weight when use_output_gate,
  // fuse_norm (default true) and hidden_act spelled "swish", else g_norm.weight;
  // attn_norm true. Made in code (never from config.json, as fla has neither),
  // low_rank_dim 0 asks for the single gk_proj.weight/.bias and output_norm ""
  // for no output norm.
  GlaForms gla_forms;
  // Set iff model_type is of qwen3_next_family(): the Gated DeltaNet of every layer
  // that attention.is_full_attention() says is not full attention (its
  // input_layernorm is the model's norm kind); the others run `attention`.
  std::optional<GdnConfig> linear_attention;
  // qwen3_next, qwen3_moe and qwen3_5_moe_text: the sparse layers' MLP (num_experts 0: none).
  MoeConfig moe;
  // Where the checkpoint keeps the text model's tensors named model.* here:
  // "" (model.*), or "model.language_model." for Qwen3_5ForConditionalGeneration
  // (model_type qwen3_5 / qwen3_5_moe, whose model.visual.* vision tower is not run).
  std::string checkpoint_prefix;
  int num_hidden_layers = 0;  // L
  int intermediate_size = 0;  // I: the dense MLPs' width
  int vocab_size = 0;         // V
  Activation hidden_act = Activation::silu;
  bool mlp_bias = false;  // gate_proj, up_proj and down_proj carry .bias
  // lm_head reuses model.embed_tokens.weight (no lm_head.weight tensor).
  bool tie_word_embeddings = false;
  // Generation stops after any of these (config.json's eos_token_id, or
  // generation_config.json's where that file gives one); may be empty.
  std::vector<int64_t> eos_token_ids;

  // Throws Error(invalid_config) naming the key when the config is impossible
  // (attention.validate() included).
  void validate() const;
  // Layer `layer`'s token mixer: the attention block, GLA for model_type gla,
  // Gated DeltaNet for qwen3_next's linear-attention layers.
  MixerConfig mixer(int layer) const;
  int hidden_size() const { return gla ? gla->hidden_size : attention.hidden_size; }
  // The model's RMSNorms (each layer's MLP norm, model.norm): gla: plain with norm_eps.
  double norm_eps() const { return gla ? gla->norm_eps : attention.rms_norm_eps; }
  NormKind norm_kind() const { return gla ? NormKind::plain : attention.norm_kind; }
  // model.embeddings.weight (gla) or model.embed_tokens.weight.
  const char* embedding_name() const { return gla ? "model.embeddings.weight" : "model.embed_tokens.weight"; }
  // The most positions one sequence may hold (ModelOptions::ignore_context_limit
  // lifts it): attention.max_position_embeddings, or the length a RoPE scaling
  // reaches — factor × it for linear and dynamic, for yarn factor ×
  // original_max_position_embeddings when that is longer (as vLLM derives a
  // model's max_model_len; llama3 configs already give the scaled length).
  // 0: none (a GLA model has no positions; a config made in code without a length).
  int context_limit() const;
  // Whether layer `layer`'s MLP is the sparse mixture of experts.
  bool sparse_mlp(int layer) const { return moe.sparse(layer); }
  // The layers with a sparse MLP, in order (ModelStats::moe_layers).
  std::vector<int> moe_layers() const;
  // The bare name of a layer's MLP norm: mlp_norm.weight (gla) or post_attention_layernorm.weight.
  const char* mlp_norm_name() const { return gla ? "mlp_norm.weight" : "post_attention_layernorm.weight"; }
};

// Parses a Hugging Face config.json of a whole model. `source` (the file
// path) starts every error message. Keys (README "Models"):
//   model_type            "qwen3", "llama", "gla", "qwen3_next", "qwen3_moe", "qwen3_5_text",
//                         "qwen3_5_moe_text" (anything else: an error naming the key); "qwen3_5"
//                         and "qwen3_5_moe" (Qwen3_5ForConditionalGeneration) read text_config
//                         as the model (checkpoint_prefix "model.language_model.")
//   hidden_size, num_attention_heads, num_hidden_layers, intermediate_size, vocab_size  (required)
//   num_key_value_heads   default num_attention_heads
//   head_dim              default 128 for qwen3 and qwen3_moe, 256 for qwen3_next, hidden/heads for llama
//   rms_norm_eps, rope_theta, rope_scaling / rope_parameters (default, linear, dynamic,
//                         yarn, llama3), max_position_embeddings: as the block reads them
//   hidden_act            silu | gelu | gelu_pytorch_tanh | sigmoid (default silu)
//   attention_bias / qkv_bias   bias on q, k, v and o
//   mlp_bias              llama: bias on gate, up and down (default false); Qwen3's
//                         MLP has none (transformers' Qwen3MLP ignores the key too)
//   headwise_attn_output_gate / elementwise_attn_output_gate  (qwen3; the gate rows
//                         sit in q_proj grouped per KV head: GateLayout::official_grouped)
//   use_qk_norm           qwen3 only, default true; llama has no q/k norm
//   tie_word_embeddings   default false (HF's Qwen3Config and LlamaConfig)
//   eos_token_id          an integer or a list of integers, each in [0, vocab_size)
//   num_experts, num_experts_per_tok, moe_intermediate_size, shared_expert_intermediate_size,
//   norm_topk_prob, decoder_sparse_step, mlp_only_layers   qwen3_next and qwen3_moe: MoeConfig
//                         (defaults: transformers' Qwen3NextConfig / Qwen3MoeConfig)
//   use_sliding_window    must be false or absent; layer_types (when given) must be all
//                         "full_attention": a model runs full causal attention in every layer
// model_type "gla" (fla's GLAConfig) instead: the mixer keys as
// parse_gla_config_json reads them (num_heads, num_kv_heads, expand_k, ...,
// norm_eps), num_hidden_layers and vocab_size (required), intermediate_size
// (default fla's: int(hidden_size · hidden_ratio · 2/3) rounded up to a
// multiple of 256, hidden_ratio default 4), hidden_act (swish, fla's default,
// or silu: also the layers' output gate, so nothing else), gate_low_rank_dim (default 16), fuse_norm (default true: the
// forms above), tie_word_embeddings, eos_token_id; refused: use_short_conv,
// use_gv, use_gk false (as the layer), elementwise_affine false (norms
// without weights), and a non-null attn (a hybrid with softmax-attention layers).
// The attention is read by parse_config_json (the block's presets, vkgate's own
// keys included), so `vkgate run --layer N` reads the same block; then
// attention.residual and attention.causal are set.
ModelConfig parse_model_config_json(std::string_view json_text, const std::string& source);
// Reads `dir`/config.json, and `dir`/generation_config.json when present (its
// eos_token_id replaces config.json's). Errors name the file.
ModelConfig load_model_config(const std::string& dir);

// Every tensor of the model with its full Hugging Face name and shape, in
// order: model.embed_tokens.weight [V, D]; per layer i the attention block's
// tensors as expected_weights(cfg.attention) lists them, under
// layer_attention_name (model.layers.{i}.input_layernorm.weight [D],
// .self_attn.{q,k,v,o}_proj.weight, their .bias, .self_attn.{q,k}_norm.weight
// [Dh] when use_qk_norm), then .post_attention_layernorm.weight [D],
// .mlp.{gate,up}_proj.weight [I, D], .mlp.down_proj.weight [D, I], and when
// mlp_bias .mlp.{gate,up}_proj.bias [I], .mlp.down_proj.bias [D];
// model.norm.weight [D]; lm_head.weight [V, D] unless tie_word_embeddings.
// gla: model.embeddings.weight [V, D]; per layer gla_expected_weights(*gla,
// gla_forms) under layer_gla_name (model.layers.{i}.attn_norm.weight,
// .attn.q_proj.weight, ...), then .mlp_norm.weight and the MLP as above (no
// bias); model.norm.weight; lm_head.weight unless tied. (model_tensors reads
// an older file's model.embed_tokens.weight under model.embeddings.weight.)
// Validates cfg first.
// A sparse layer (ModelConfig::sparse_mlp) holds instead of mlp.{gate,up,down}_proj:
// .mlp.gate.weight [E, D] (the router), .mlp.experts.{e}.{gate,up}_proj.weight
// [Im, D] and .down_proj.weight [D, Im] for each expert e, and with a shared
// expert .mlp.shared_expert.{gate,up,down}_proj.weight and
// .mlp.shared_expert_gate.weight [1, D]. (model_tensors also reads the fused
// .mlp.experts.gate_up_proj [E, 2·Im, D] and .mlp.experts.down_proj [E, D, Im]
// under the per-expert names.)
std::vector<TensorSpec> expected_model_weights(const ModelConfig& cfg);
// Layer `layer`'s MLP tensors as expected_model_weights lists them, under
// names relative to "model.layers.{layer}." (post_attention_layernorm.weight, mlp.…).
std::vector<TensorSpec> mlp_weights(const ModelConfig& cfg, int layer);

// "model.layers.{layer}." + name, e.g. layer_tensor_name(2, "mlp.up_proj.weight").
std::string layer_tensor_name(int layer, const std::string& name);
// The full name of the attention block's tensor `bare` (a name of
// expected_weights(cfg.attention)) in layer `layer`: input_layernorm.weight
// sits beside the layer's self_attn, the others under it
// (model.layers.{layer}.self_attn.q_proj.weight, ...).
std::string layer_attention_name(int layer, const std::string& bare);

// The GLA layer's tensor `bare` (a name of gla_expected_weights) in layer
// `layer`: attn_norm.weight sits beside the layer's attn, the others under it.
std::string layer_gla_name(int layer, const std::string& bare);

// The attention block's tensors of layer `layer` under their bare names
// ("q_proj.weight", ..., "input_layernorm.weight"), as expected_weights(cfg.attention)
// lists them, viewed from a map of full names (no copy). Error(missing_tensor)
// names the full tensor name; Error(invalid_argument) a layer outside
// [0, num_hidden_layers), Error(invalid_argument) a gla model (no attention
// block). Validates cfg first.
TensorMap layer_attention_tensors(const ModelConfig& cfg, const TensorMap& model, int layer);

}  // namespace vkgate
