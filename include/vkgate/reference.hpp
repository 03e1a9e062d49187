// vkgate::reference — the CPU oracle. Double accumulation, written
// independently of the shaders (different loop orders, no shared code), so it
// can catch their mistakes. Slow by design; meant for tests and the demo.
//
// Thread safety: the functions are pure (no shared state) and may run on any
// number of threads at once; Inputs, Result and Diff are plain values.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "vkgate/config.hpp"
#include "vkgate/weights.hpp"

namespace vkgate::reference {

// ---- single ops (all outputs in double) ----

// Y[m,n] = Σ_k X[m,k]·W[n,k] + b[n]. W in PyTorch [out=n, in=k] layout; b may be empty.
std::vector<double> linear(std::span<const float> x, std::span<const float> w,
                           std::span<const float> b, int64_t m, int64_t n, int64_t k);

// Each of `rows` rows of `dim`: x / sqrt(mean(x²) + eps) · w   (plain)
//                                 x / sqrt(mean(x²) + eps) · (1 + w)  (zero_centered)
std::vector<double> rms_norm(std::span<const float> x, std::span<const float> w, int64_t rows,
                             int64_t dim, double eps, NormKind kind);

// RoPE on x [batch, tokens, heads, head_dim]: token t has position pos0 + t;
// pair i (i < rd/2) rotates by angle pos·θ^(−2i/rd). The pair is dims
// (i, i + rd/2) for rotate_half, (2i, 2i + 1) for interleaved; dims ≥ rotary_dim
// pass through.
std::vector<double> rope(std::span<const float> x, int64_t batch, int64_t tokens, int64_t heads,
                         int64_t head_dim, int64_t rotary_dim, double theta, int64_t pos0,
                         RopeStyle style = RopeStyle::rotate_half);

// Row softmax of scale·scores over the last axis; scores [batch, heads, tokens, keys].
// causal: query t (absolute position keys − tokens + t) sees keys s ≤ that position.
// mask (may be empty): additive, [batch, 1, tokens, keys], broadcast over heads.
// A row with every entry −inf gives all zeros, never NaN.
std::vector<double> softmax(std::span<const float> scores, int64_t batch, int64_t heads,
                            int64_t tokens, int64_t keys, double scale, bool causal,
                            std::span<const float> mask);

// Scaled dot-product attention with GQA: query head h reads KV head h / (H/KV)
// (grouped) or h % KV (tiled). q [B, H, T, Dh], k and v [B, KV, S, Dh] (S ≥ T;
// the last T keys are the new tokens), mask as in softmax. Returns [B, T, H, Dh].
std::vector<double> attention(std::span<const float> q, std::span<const float> k,
                              std::span<const float> v, int64_t batch, int64_t heads,
                              int64_t kv_heads, int64_t tokens, int64_t keys, int64_t head_dim,
                              double scale, bool causal, std::span<const float> mask,
                              GqaMapping mapping = GqaMapping::grouped);

// y [rows, heads·Dh] combined with s = act(g) (y·s or y + s), g [rows, heads·gw];
// gw = 1 (headwise: one score per head) or Dh (elementwise).
std::vector<double> gate(std::span<const float> y, std::span<const float> g, int64_t rows,
                         int64_t heads, int64_t head_dim, int64_t gate_width,
                         GateActivation activation = GateActivation::sigmoid,
                         GateCombine combine = GateCombine::multiply);

// RoPE's inverse frequencies ω_i (i < rotary_dim/2) and the factor cos and
// sin are multiplied by, for cfg.rope_scaling (default, linear, dynamic, yarn,
// llama3) as transformers' ROPE_INIT_FUNCTIONS define them, for a step whose
// last position is seq_len − 1 (only dynamic NTK depends on it: its θ grows
// once seq_len passes max_position_embeddings). Validates cfg.
struct RopeFrequencies {
  std::vector<double> inv_freq;   // [rotary_dim / 2]
  double attention_factor = 1.0;  // yarn's; 1 for the others
};
RopeFrequencies rope_frequencies(const BlockConfig& cfg, int64_t seq_len);

// ---- the whole block ----

struct Inputs {
  std::span<const float> hidden;      // [batch, tokens, D]
  int64_t batch = 1;
  int64_t tokens = 1;
  int64_t past = 0;                   // P: cached positions before the new tokens
  std::span<const float> past_key;    // [batch, KV, P, Dh], after the key gate, k_norm and RoPE
  std::span<const float> past_value;  // [batch, KV, P, Dh], after the value gate
  std::span<const float> attention_mask;  // optional additive [batch, 1, T, P+T]
};

struct Result {
  std::vector<double> output;            // [B, T, D]
  std::vector<double> q;                 // [B, H, T, Dh] after the query gate, q_norm and RoPE
  std::vector<double> k;                 // [B, KV, P+T, Dh] the whole cache (as past_key)
  std::vector<double> v;                 // [B, KV, P+T, Dh] the whole cache (as past_value)
  std::vector<double> sdpa;              // [B, T, H, Dh] before an sdpa gate
  // [B, T, gate_heads(), gw] the activated scores s, before head sharing and
  // combining (empty if no gate); their mean is the stats' gate_mean.
  std::vector<double> gate;
  std::vector<double> gated;             // [B, T, H·Dh] input of o_proj (gated only at sdpa)
  std::vector<double> first_token_attn;  // [H] mean probability on key 0
};

// Runs the block in double precision. Validates cfg and the weights (Error
// naming the tensor) and the input sizes. RoPE takes cfg.rope_scaling's
// frequencies for seq_len = past + tokens (rope_frequencies).
Result forward(const BlockConfig& cfg, const WeightMap& weights, const Inputs& in);

// ---- accuracy metric ----

struct Diff {
  double nmse = 0;     // Σ(a−b)² / Σa², a = reference; +inf if any value is not finite
  double max_abs = 0;  // max |a − b|
  int64_t first_bad = -1;  // index of the first non-finite element of `got`, or −1
};
Diff compare(std::span<const float> got, std::span<const double> want);

}  // namespace vkgate::reference
