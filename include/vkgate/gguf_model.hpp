// Whole models from GGUF files (llama.cpp's format, as its converter
// convert_hf_to_gguf.py writes them): the ModelConfig from the file's
// metadata and the tensors under their Hugging Face names, so that a GGUF
// model runs on the same code as a checkpoint directory.
//
//   vkgate::Model model = vkgate::Model::load(ctx, "Qwen3-0.6B-F16.gguf");
//   vkgate::Tokenizer tok = vkgate::Tokenizer::load("Qwen3-0.6B-F16.gguf");
//
// Architectures (general.architecture → model_type): llama → llama,
// qwen3 → qwen3, qwen3moe → qwen3_moe. Keys read, under "<arch>.":
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
//   expert_count, expert_used_count, expert_feed_forward_length   qwen3moe (required)
//   expert_weights_norm                                   qwen3moe: norm_topk_prob (default true: llama.cpp
//                                                         always normalises qwen3moe's top-k weights)
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
// q, k and v. Norm weights are stored as the checkpoint has them for these
// architectures (the converter adds 1 only for other ones).
//
// Everything is checked before anything goes to a device: Error(invalid_config)
// names the file and the key (an unknown architecture: the file, it and the
// ones vkgate reads), Error(missing_tensor) / Error(shape_mismatch) the file,
// the GGUF tensor and the Hugging Face name it stands for.
//
// Thread safety: pure functions of an immutable GgufFile.
#pragma once

#include <cstddef>
#include <string>
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

// Bytes that some returned tensors view (the un-permuted q/k rows of llama);
// must outlive the TensorMap.
using TensorBuffers = std::vector<std::vector<std::byte>>;

// Every tensor of expected_model_weights(cfg) under its Hugging Face name,
// viewing the file (or `copies`), each checked: present, its shape, and a
// dtype a weight may have (F32, F16, BF16 or one of ggml's block formats).
TensorMap gguf_model_tensors(const GgufFile& file, const ModelConfig& cfg, TensorBuffers& copies);

}  // namespace vkgate
