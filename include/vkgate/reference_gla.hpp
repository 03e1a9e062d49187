// vkgate::reference — the CPU oracle of one gated linear attention (GLA)
// layer (include/vkgate/gla_config.hpp gives the equations). Double precision,
// the plain token-by-token recurrence, written from the equations and sharing
// no code with the GPU path (DESIGN.md §2).
//
// Thread safety: as reference.hpp — pure functions on plain values.
#pragma once

#include <span>
#include <vector>

#include "vkgate/gla_config.hpp"
#include "vkgate/weights.hpp"

namespace vkgate::reference {

struct GlaInputs {
  std::span<const float> hidden;         // [batch, tokens, D]
  int batch = 1;
  int tokens = 1;
  std::span<const float> initial_state;  // [batch, H, d_k, d_v], or empty: zeros
  // Keep S_t after every token in GlaResult::states: T·H·d_k·d_v doubles per
  // sequence (17 GB at T 4096 with the bench's shape), so only on request.
  bool keep_states = false;
};

struct GlaResult {
  std::vector<double> output;       // [B, T, D]
  std::vector<double> final_state;  // [B, H, d_k, d_v]
  // Per query head: k, v and log_a of KV head h / G, repeated over the group.
  std::vector<double> q, k;         // [B, T, H, d_k] after φ
  std::vector<double> v;            // [B, T, H, d_v]
  std::vector<double> log_a;        // [B, T, H, d_k] after the normalizer and clamp_min
  std::vector<double> o_core;       // [B, T, H, d_v] scale·φ(q_t)·S_t, before the norm and the gate
  std::vector<double> states;       // [B, T, H, d_k, d_v] S_t after each token (GlaInputs::keep_states), else empty
};

// Runs the layer. Validates cfg, the weights (check_gla_weights: Error naming
// the tensor) and the input sizes (Error(invalid_argument) naming the input).
GlaResult gla_forward(const GlaConfig& cfg, const WeightMap& weights, const GlaInputs& in);

}  // namespace vkgate::reference

// For the model oracle (as src/reference/internal.hpp's forward_d): the hidden
// states come in double, so that a residual stream is never rounded to float
// between layers.
namespace vkgate::reference::internal {

// gla_forward() with the hidden states [in.batch, in.tokens, D] given by `x`,
// which takes the place of in.hidden (not read).
GlaResult gla_forward_d(const GlaConfig& cfg, const WeightMap& weights, std::span<const double> x,
                        const GlaInputs& in);

}  // namespace vkgate::reference::internal
