// vkgate::reference for whole models: the MLP, the pre-norm decoder layer, the
// model and greedy decoding, in double precision throughout (the residual
// stream is never rounded to float between layers). Written independently of
// the GPU path, like the block's oracle (reference.hpp), whose attention it
// builds on. Slow by design: for tests and the CLI's checks on tiny models.
//
// Thread safety: the functions are pure and may run on any number of threads
// at once; the structs are plain values.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "vkgate/model_config.hpp"
#include "vkgate/weights.hpp"

namespace vkgate::reference {

// act(x) in double: silu x·σ(x), gelu x·Φ(x) (erf), gelu_tanh
// 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))), sigmoid σ(x).
double activation(Activation a, double x);

// down(act(gate(x)) ⊙ up(x)) for `rows` rows of x [rows, D]; gate_w and up_w
// [I, D], down_w [D, I] (PyTorch [out, in]); biases may be empty. Returns
// [rows, D]. Error(invalid_argument) names a tensor of the wrong size.
std::vector<double> mlp(std::span<const double> x, int64_t rows, int64_t hidden, int64_t intermediate,
                        Activation act, std::span<const float> gate_w, std::span<const float> up_w,
                        std::span<const float> down_w, std::span<const float> gate_b = {},
                        std::span<const float> up_b = {}, std::span<const float> down_b = {});

struct ModelInputs {
  std::span<const int64_t> ids;  // [batch, tokens], each in [0, vocab_size)
  int64_t batch = 1;
  int64_t tokens = 1;
  // How the sequence was fed to a cached model: the token counts of its steps
  // (a prefill, then decode steps), summing to `tokens`; empty: one step. Only
  // dynamic NTK RoPE depends on it: each step's positions are rotated with the
  // frequencies for the length that step ended at (transformers' dynamic_rope_update),
  // and the keys in the cache keep them.
  std::span<const int64_t> steps;
};

struct ModelResult {
  std::vector<double> logits;  // [B, T, V]
  // L + 1 entries of [B, T, D]: [0] the embeddings, [i] the output of layer i−1
  // (the residual stream after its MLP's residual add). The final norm is not applied.
  std::vector<std::vector<double>> hidden_states;
  std::vector<double> final_norm;  // [B, T, D]: model.norm of the last hidden state, lm_head's input
  // Per layer, as the block defines them (reference.hpp), for the layers with
  // softmax attention (attention_layers; a GLA or Gated DeltaNet layer has no
  // attention probabilities and no sigmoid gate scores).
  std::vector<int> attention_layers;
  std::vector<double> first_token_attn;  // [L_attn, H]: probability on key 0, mean over batch and queries
  std::vector<double> max_activation;    // [L]: max |x| of the residual stream after the layer
  std::vector<double> gate_mean;         // [L_attn]: mean sigmoid gate score; empty for a model without a gate
  // [L_moe, E] for the layers with a sparse MLP (ModelConfig::moe_layers): the
  // fraction of the tokens routed to each expert (each row sums to k).
  std::vector<double> expert_load;
};

// The whole model on token ids (no cache: every position attends causally to
// the ones before it; a GLA model's layers start from a zero state). `weights` holds fp32 views keyed by full Hugging Face
// name (expected_model_weights(cfg)). Validates cfg, the weights (Error naming
// the tensor) and the ids (Error(invalid_argument) naming the first id out of
// range, with its position).
ModelResult model_forward(const ModelConfig& cfg, const WeightMap& weights, const ModelInputs& in);

// Greedy decoding of one sequence: the arg-max (lowest index on ties) of the
// last position's logits, appended and fed back, `max_new_tokens` times or
// until an id of cfg.eos_token_ids is emitted (it is included) when
// stop_at_eos. Each step recomputes the whole sequence, with the RoPE a cached
// generation has (the prompt as one step, then one step per token: `steps`).
// Returns the new ids.
std::vector<int64_t> greedy_generate(const ModelConfig& cfg, const WeightMap& weights,
                                     std::span<const int64_t> prompt, int max_new_tokens,
                                     bool stop_at_eos = true);

}  // namespace vkgate::reference
