// Whole models from GGUF files (llama.cpp's format, as its converter
// convert_hf_to_gguf.py writes them): the ModelConfig from the file's
// metadata and the tensors under their Hugging Face names, so that a GGUF
// model runs on the same code as a checkpoint directory.
//
//   vkgate::Model model = vkgate::Model::load(ctx, "Qwen3-0.6B-F16.gguf");
//   vkgate::Tokenizer tok = vkgate::Tokenizer::load("Qwen3-0.6B-F16.gguf");
//
// Architectures (general.architecture → model_type): llama → llama,
// qwen3 → qwen3, qwen3moe → qwen3_moe, qwen3next → qwen3_next, qwen35 →
// qwen3_5_text, qwen35moe → qwen3_5_moe_text. Keys read, under "<arch>.":
//   block_count, context_length, embedding_length, attention.head_count,
//   attention.layer_norm_rms_epsilon                      required
//   feed_forward_length                                   required (qwen3moe: default expert_feed_forward_length)
//   attention.head_count_kv                               default head_count
//   attention.key_length / value_length                   head_dim (default embedding_length / head_count, as llama.cpp)
//   rope.dimension_count                                  rotary dims (partial_rotary_factor; default head_dim)
//   rope.freq_base                                        default 10000 (llama.cpp's)
//   rope.scaling.type (none, linear, yarn), .factor, .original_context_length,
//   .yarn_beta_fast, .yarn_beta_slow, .yarn_attn_factor   RoPE scaling; llama's Llama-3 scaling
//                                                         comes as the tensor rope_freqs (read back into llama3 parameters)
//   expert_count, expert_used_count, expert_feed_forward_length   qwen3moe, qwen3next, qwen35moe (required)
//   expert_weights_norm                                   those: norm_topk_prob (default true:
//                                                         llama.cpp always normalises their top-k weights)
//   expert_weights_scale                                  when present, 0 or 1 (vkgate does not scale routed weights)
//   qwen3next, qwen35, qwen35moe (Qwen3-Next, Qwen3.5; qwen3next's and qwen35moe's
//   every layer's MLP sparse, as llama.cpp reads them):
//   expert_shared_feed_forward_length                     the shared expert (absent: feed_forward_length, as
//                                                         llama.cpp; 0: none)
//   ssm.state_size, ssm.group_count, ssm.time_step_rank,  the Gated DeltaNet layers: dk, nk, nv, nv·dv, K
//   ssm.inner_size, ssm.conv_kernel                       (required)
//   attention.recurrent_layers (one bool per block),      which layers are Gated DeltaNet (layer_types);
//   full_attention_interval (default 4)                   without the array, every interval-th layer is attention
//   nextn_predict_layers                                  multi-token-prediction blocks after the model's: not run
//   vocab_size                                            when present, must equal token_embd's rows
//   tokenizer.ggml.eos_token_id, eot_token_id, eom_token_id   eos_token_ids (each ends a generation, as in llama.cpp)
// From the tensors: vocab_size = token_embd's rows; tie_word_embeddings when
// there is no output.weight; attention and MLP biases when blk.0 has them; a
// qwen3 attn_q with H·(Dh+1) or 2·H·Dh rows is the paper's headwise or
// elementwise gate (official_grouped rows, as in the released checkpoints).
//
// Tensor layouts the converter changes, undone here: llama's attn_q and
// attn_k (weights and biases) have each head's rows permuted for ggml's
// adjacent-pair RoPE (LlamaModel.permute); their inverse is applied (a copy,
// whole rows of bytes, so block formats too). The experts of a qwen3moe layer
// are stacked ffn_{gate,up,down}_exps [E, ·, ·] (or fused ffn_gate_up_exps
// [E, 2·Im, D]) and read as per-expert views; a fused attn_qkv is split into
// q, k and v. Norm weights are stored as the checkpoint has them for llama,
// qwen3 and qwen3moe. qwen3next (the converter's Qwen3NextModel.modify_tensors):
// every "*norm.weight" but the Gated DeltaNet's linear_attn.norm is stored
// as 1 + w (Qwen3NextRMSNorm's scale) and read back as w; A_log as
// ssm_a = −exp(A_log), read back as log(−ssm_a); dt_bias as ssm_dt.bias;
// conv1d [C, 1, K] squeezed to ssm_conv1d [C, K]; in_proj_qkvz (per key head
// q, k, v, z) split into attn_qkv ([all q | all k | all v]) and attn_gate
// ([all z]), interleaved back into in_proj_qkvz (whole rows copied) when the
// two share a dtype in every layer, else read apart as
// GdnConfig::separate_projections (in_proj_qkv, in_proj_z, and ssm_ba's b
// and a rows as in_proj_b and in_proj_a); an older converter's ssm_in is
// in_proj_qkvz itself; in_proj_ba is ssm_ba unchanged; the attention's q_proj
// (each head's query then its gate) is attn_q unchanged;
// post_attention_layernorm is post_attention_norm; the shared expert
// ffn_{gate,up,down}_shexp and its gate ffn_gate_inp_shexp ([1, D] or [D]).
// qwen35 and qwen35moe as qwen3next, with the projections apart as the
// checkpoint has them (in_proj_qkv → attn_qkv, in_proj_z → attn_gate,
// in_proj_b → ssm_beta, in_proj_a → ssm_alpha: GdnConfig::separate_projections),
// and their value heads reordered (_LinearAttentionVReorderBase): grouped by
// key head in the checkpoint (value head j·r + i reads key head j), tiled in
// the file (position i·nk + j), in the v rows of attn_qkv and the conv,
// attn_gate's, ssm_beta's and ssm_alpha's rows, ssm_a, ssm_dt and ssm_out's
// column blocks. They are put back in grouped order as whole rows of bytes,
// and ssm_out's columns as whole blocks where a value head is whole blocks of
// its format; where some layer's ssm_out has blocks across heads (a k-quant
// block of 256 over heads of 128) every ssm_out stays as stored and
// GdnConfig::out_proj_tiled says so (the layer writes its heads tiled).
//
// Everything is checked before anything goes to a device: Error(invalid_config)
// names the file and the key (an unknown architecture: the file, it and the
// ones vkgate reads), Error(missing_tensor) / Error(shape_mismatch) the file,
// the GGUF tensor and the Hugging Face name it stands for.
//
// Writing (gguf_export_model, gguf_export_tokenizer) is the converter's way
// back: a model's Hugging Face tensors and config, and its tokenizer.json, as
// convert_hf_to_gguf.py lays them out (the names, keys, llama's q/k row
// permutation and stacked experts above), with the tensor types of its
// --outtype or of a block format, so that llama.cpp loads the file and
// gguf_model_tensors reads back the tensors it came from (`vkgate quantize`).
//
// Thread safety: pure functions of an immutable GgufFile; a GgufDraft is a
// plain value.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "vkgate/gguf.hpp"
#include "vkgate/model_config.hpp"
#include "vkgate/weights.hpp"

namespace vkgate {

// True for a path that is not a directory and whose name ends in ".gguf"
// (present or not: GgufFile::open then says what is wrong), or for a regular
// file whose first four bytes are "GGUF".
bool is_gguf_file(const std::string& path);

// The model's config from the file's metadata and tensor shapes (above).
ModelConfig gguf_model_config(const GgufFile& file);

// Bytes that some returned tensors view (the un-permuted q/k rows of llama;
// qwen3next's norms, A_log and regathered Gated DeltaNet projection rows,
// qwen35's value heads in order again);
// must outlive the TensorMap.
using TensorBuffers = std::vector<std::vector<std::byte>>;

// Every tensor of expected_model_weights(cfg) under its Hugging Face name,
// viewing the file (or `copies`), each checked: present, its shape, and a
// dtype a weight may have (F32, F16, BF16 or one of ggml's block formats).
TensorMap gguf_model_tensors(const GgufFile& file, const ModelConfig& cfg, TensorBuffers& copies);

// ---- writing ----

// A GGUF file being assembled: metadata and tensors (owned bytes) in file
// order, which may still be changed before write().
struct GgufDraft {
  struct Tensor {
    std::string name;
    DType dtype = DType::F32;
    std::vector<int64_t> shape;  // row-major, as GgufTensor
    std::vector<std::byte> bytes;
  };
  std::vector<std::pair<std::string, GgufValue>> metadata;
  std::vector<Tensor> tensors;

  // Replaces an earlier value of the key (keeping its place), else appends.
  void set(const std::string& key, GgufValue value);
  void erase(const std::string& key);
  const GgufValue* find(const std::string& key) const;
  // Replaces a tensor of the same name (keeping its place), else appends.
  void add_tensor(const std::string& name, DType dtype, std::vector<int64_t> shape, std::vector<std::byte> bytes);
  void erase_tensor(const std::string& name);
  const Tensor* find_tensor(const std::string& name) const;
  // Through GgufWriter: checked, written atomically (nothing at `path` on failure).
  void write(const std::string& path) const;
};

struct GgufExportOptions {
  // The block format of the weights ModelOptions::quant would quantize
  // (quantizable_weight: projections and an untied lm_head, 2-D, rows of
  // whole blocks), by ggml's reference quantizers; nullopt: none.
  std::optional<DType> quant;
  // Every other matrix (embeddings, rows that are not whole blocks, stacked
  // experts): F16, BF16 or F32. 1-D tensors, norms, biases and MoE routers
  // are F32 whatever this says, as the converter writes them.
  DType float_type = DType::F16;
  // The converter's --fuse-qkv (one attn_qkv per layer) and
  // --fuse-gate-up-exps (one ffn_gate_up_exps per MoE layer).
  bool fuse_qkv = false;
  bool fuse_gate_up_exps = false;
  // general.name (the converter takes the model directory's name); empty: not written.
  std::string name;
};

// llama.cpp's enum llama_ftype for a file of these options, written as
// general.file_type: F32 0, F16 1, Q4_0 2, Q4_1 3, Q8_0 7, Q5_0 8, Q5_1 9,
// Q2_K 10, Q3_K 11 (Q3_K_S), Q4_K 14 (Q4_K_S), Q5_K 16 (Q5_K_S), Q6_K 18,
// IQ4_NL 25, IQ4_XS 30, BF16 32.
uint32_t gguf_file_type(const GgufExportOptions& options);

// The model (`cfg`: llama, qwen3, qwen3_moe, qwen3_next, qwen3_5_text and
// qwen3_5_moe_text, whose Gated DeltaNet value heads must be as large as
// its key heads, as llama.cpp's loaders take them; `weights`
// holding every tensor of expected_model_weights(cfg) in any float or block
// dtype) as the converter writes it: general.* and <arch>.* keys,
// general.quantization_version 2, tokenizer.ggml.eos_token_id from
// cfg.eos_token_ids, and the tensors under their GGUF names in the types of
// `options`. Error(unsupported) names another model type or a config the
// GGUF keys cannot express (a gate position other than sdpa, dynamic RoPE
// scaling, ...), Error(missing_tensor) / Error(shape_mismatch) a tensor, and
// Error(invalid_argument) a float_type or quant that is not one.
GgufDraft gguf_export_model(const ModelConfig& cfg, const TensorMap& weights, const GgufExportOptions& options = {});

// The tokenizer.ggml.* keys of a byte-level BPE tokenizer.json, as the
// converter's _set_vocab_gpt2 writes them: one token per id up to
// `vocab_size` (the model's rows; "[PADn]", UNUSED, where the tokenizer has
// none), added tokens CONTROL when special or looking special ("<|...|>")
// and USER_DEFINED otherwise, merges as "left right", the bos/eos/unk/sep/pad
// ids and add_bos_token/add_eos_token of the tokenizer_config.json beside it
// (when there is one). `pre` names the pre-tokenizer (tokenizer.ggml.pre);
// empty: the family whose pre-tokenizer and normalizer the file has
// ("qwen2", "qwen35", "llama-bpe", "gpt-2"), else Error(unsupported) naming the file.
// Errors name the file and the key.
void gguf_export_tokenizer(GgufDraft& draft, const std::string& tokenizer_json, int64_t vocab_size,
                           const std::string& pre = "");

}  // namespace vkgate
