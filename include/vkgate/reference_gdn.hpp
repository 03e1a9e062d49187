// vkgate::reference — the CPU oracle of one Gated DeltaNet layer
// (include/vkgate/gdn_config.hpp gives the equations). Double precision, the
// plain token-by-token delta rule, written from the equations and sharing no
// code with the GPU path (DESIGN.md §2).
//
// Thread safety: as reference.hpp — pure functions on plain values.
#pragma once

#include <span>
#include <vector>

#include "vkgate/gdn_config.hpp"
#include "vkgate/weights.hpp"

namespace vkgate::reference {

struct GdnInputs {
  std::span<const float> hidden;         // [batch, tokens, D]
  int batch = 1;
  int tokens = 1;
  std::span<const float> conv_state;     // [batch, C, K−1], oldest first, or empty: zeros
  std::span<const float> initial_state;  // [batch, nv, dk, dv], or empty: zeros
  bool keep_debug = false;               // fill GdnResult's intermediates
};

struct GdnResult {
  std::vector<double> output;            // [B, T, D]
  std::vector<double> final_state;       // [B, nv, dk, dv]
  std::vector<double> final_conv_state;  // [B, C, K−1]: the last K−1 inputs of the conv, oldest first
  // With GdnInputs::keep_debug (else empty), named as the golden files' debug.*:
  std::vector<double> mixed_qkv;   // [B, T, C] the conv's input [q | k | v], key-head-major
  std::vector<double> conv_silu;   // [B, T, C] after the causal conv and SiLU
  std::vector<double> z;           // [B, T, nv, dv]
  std::vector<double> b, a;        // [B, T, nv]
  std::vector<double> q_scaled;    // [B, T, nv, dk] l2-normalised, ·dk^-0.5, repeated over value heads
  std::vector<double> k_normed;    // [B, T, nv, dk] l2-normalised, repeated over value heads
  std::vector<double> v;           // [B, T, nv, dv]
  std::vector<double> g, beta;     // [B, T, nv] log decay (≤ 0) and sigmoid(b)
  std::vector<double> core;        // [B, T, nv, dv] the delta rule's output o = Sᵀq
  std::vector<double> gated_norm;  // [B, T, nv, dv] RMSNorm(o)·norm.weight·silu(z)
};

// Runs the layer. Validates cfg, the weights (check_gdn_weights: Error naming
// the tensor) and the input sizes (Error(invalid_argument) naming the input).
GdnResult gdn_forward(const GdnConfig& cfg, const WeightMap& weights, const GdnInputs& in);

}  // namespace vkgate::reference

// For a model oracle: the hidden states come in double, so that a residual
// stream is never rounded to float between layers.
namespace vkgate::reference::internal {

// gdn_forward() with the hidden states [in.batch, in.tokens, D] given by `x`,
// which takes the place of in.hidden (not read).
GdnResult gdn_forward_d(const GdnConfig& cfg, const WeightMap& weights, std::span<const double> x,
                        const GdnInputs& in);

}  // namespace vkgate::reference::internal
