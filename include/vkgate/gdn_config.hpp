// GdnConfig: the shape of one Gated DeltaNet layer, exactly as Hugging Face
// transformers' Qwen3NextGatedDeltaNet (Qwen3-Next's linear-attention layers).
//
// With nk key heads, nv value heads (r = nv / nk value heads per key head),
// head dims dk and dv, conv kernel K, C = 2·nk·dk + nv·dv channels:
//   in_proj_qkvz [2·nk·dk + 2·nv·dv, D] gives per key head j, in this order,
//       [q_j (dk) | k_j (dk) | v of value heads j·r..j·r+r−1 (r·dv) | z of the same (r·dv)]
//   in_proj_ba   [2·nv, D] gives per key head j  [b (r) | a (r)]
//   mixed = [all q | all k | all v] (C channels, key-head-major)
//       → causal depthwise conv (conv1d.weight [C, 1, K], no bias; left-padded
//         with the conv state: the previous K−1 inputs, zeros at the start) → SiLU
//   q, k ← x·rsqrt(Σx² + 1e-6) per head; q ·= dk^-0.5; both repeated over the
//       r value heads of their key head (value head h reads key head h / r)
//   β = sigmoid(b), g = −exp(A_log)·softplus(a + dt_bias)      (A_log, dt_bias [nv])
//   per value head, state S [dk, dv] (fp32 on the device):
//       S ← e^g·S;  u = β·(v − Sᵀk);  S ← S + k·uᵀ;  o = Sᵀq
//   y = RMSNorm(o)·norm.weight·silu(z) per value head (plain weight, eps
//       rms_norm_eps; norm.weight [dv]), then out_proj.weight [D, nv·dv].
//
// Qwen3.5's layer (separate_projections) is the same function with its input
// projections apart and ungrouped: in_proj_qkv [C, D] gives mixed directly
// ([all q | all k | all v]), in_proj_z [nv·dv, D], in_proj_b and in_proj_a
// [nv, D], each in value-head order.
//
// Thread safety: a plain value, as BlockConfig.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "vkgate/weights.hpp"

namespace vkgate {

struct GdnConfig {
  int hidden_size = 0;      // D
  int num_key_heads = 0;    // nk   (linear_num_key_heads)
  int num_value_heads = 0;  // nv   (linear_num_value_heads), a multiple of nk
  int key_head_dim = 0;     // dk   (linear_key_head_dim)
  int value_head_dim = 0;   // dv   (linear_value_head_dim)
  int conv_kernel = 4;      // K    (linear_conv_kernel_dim)
  double rms_norm_eps = 1e-6;
  // Qwen3.5's in_proj_qkv / in_proj_z / in_proj_b / in_proj_a instead of
  // in_proj_qkvz and in_proj_ba (model_type qwen3_5_text, qwen3_5_moe_text).
  bool separate_projections = false;
  // out_proj.weight's input columns hold the value heads in llama.cpp's tiled
  // order (value head g = j·r + i at column block i·nk + j), so the layer
  // writes its output heads in that order. Set by read_gguf_model for a
  // Qwen3.5 file whose out_proj blocks span value heads (Q4_K's 256 across
  // heads of 128), so that it is uploaded as stored; a file whose blocks
  // fit a head gets its columns put back in grouped order instead.
  bool out_proj_tiled = false;

  // Throws Error(invalid_config) naming the key when the config is impossible
  // or so large that an index of some tensor would not fit 32 bits.
  void validate() const;

  int group_size() const { return num_value_heads / num_key_heads; }  // r
  int key_dim() const { return num_key_heads * key_head_dim; }        // nk·dk
  int value_dim() const { return num_value_heads * value_head_dim; }  // nv·dv
  int conv_channels() const { return 2 * key_dim() + value_dim(); }   // C
  int qkvz_rows() const { return 2 * key_dim() + 2 * value_dim(); }   // in_proj_qkvz's rows
  int qkvz_group() const { return qkvz_rows() / num_key_heads; }      // its rows per key head

  // Qwen3-Next-80B-A3B's layer: hidden 2048, nk 16, nv 32, dk = dv = 128, K 4.
  static GdnConfig qwen3_next();
  bool operator==(const GdnConfig&) const = default;
};

// Parses a Gated DeltaNet layer's config.json (`"mixer": "gated_deltanet"`)
// with Hugging Face's key names: hidden_size, linear_num_key_heads,
// linear_num_value_heads, linear_key_head_dim, linear_value_head_dim (all
// required), linear_conv_kernel_dim (default 4), rms_norm_eps (default 1e-6),
// hidden_act (only "silu"). `source` starts every error message; a known key
// with a wrong type or value is an Error(invalid_config) naming it.
GdnConfig parse_gdn_config_json(std::string_view json_text, const std::string& source);
GdnConfig load_gdn_config(const std::string& path);
// Whether a config.json describes a Gated DeltaNet layer: `"mixer": "gated_deltanet"`.
bool is_gdn_config_json(std::string_view json_text, const std::string& source);

// Every tensor the layer reads (bare names), with its shape:
//   in_proj_qkvz.weight [2·nk·dk + 2·nv·dv, D], in_proj_ba.weight [2·nv, D],
//   conv1d.weight [C, 1, K], A_log [nv], dt_bias [nv], norm.weight [dv],
//   out_proj.weight [D, nv·dv].
std::vector<TensorSpec> gdn_expected_weights(const GdnConfig& cfg);
// Each expected tensor present with its shape and a float dtype (the checks and
// messages of check_weights: Error(missing_tensor / shape_mismatch) naming it).
void check_gdn_weights(const GdnConfig& cfg, const TensorMap& weights);

}  // namespace vkgate
