// BlockConfig: the shape and conventions of one gated-attention block.
//
// Thread safety: BlockConfig is a plain value; its const members and the
// parsing functions have no shared state and may run on any thread. A malformed
// config.json is rejected with an Error, never a crash (fuzzed:
// fuzz/fuzz_config.cpp).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace vkgate {

// Where the gate multiplies the SDPA output: not at all, one scalar per head,
// or one value per channel of each head.
enum class GateKind { none, headwise, elementwise };

// Where the gate rows live in the weights (DESIGN.md §3):
//   qwen3_next       q_proj rows per query head: [q_h (Dh) | g_h (gw)]
//   official_grouped q_proj rows per KV group of G = H/KV heads:
//                    [q of the G heads (G·Dh) | gates of the G heads (G·gw)]
//   separate         q_proj holds only queries; gate_proj.weight is [H·gw, D]
enum class GateLayout { qwen3_next, official_grouped, separate };

// RMSNorm scale form: plain x̂·w, or zero-centred x̂·(1+w) (Qwen3-Next).
enum class NormKind { plain, zero_centered };

const char* to_string(GateKind kind) noexcept;
const char* to_string(GateLayout layout) noexcept;
const char* to_string(NormKind kind) noexcept;

struct BlockConfig {
  int hidden_size = 0;   // D
  int num_heads = 0;     // H, query heads
  int num_kv_heads = 0;  // KV
  int head_dim = 0;      // Dh
  double rms_norm_eps = 1e-6;
  double rope_theta = 10000.0;
  double partial_rotary_factor = 1.0;  // rotary dims = int(Dh · factor)
  GateKind gate_kind = GateKind::elementwise;
  GateLayout gate_layout = GateLayout::qwen3_next;
  NormKind norm_kind = NormKind::plain;  // input_layernorm, q_norm and k_norm
  bool use_qk_norm = true;
  bool qkv_bias = false;  // q_proj/k_proj/v_proj (and gate_proj) carry .bias
  bool o_bias = false;    // o_proj carries .bias
  bool causal = true;
  bool residual = false;  // output = x + block(x)

  // Which layers of the model are full (gated) attention; the others (Qwen3-Next's
  // Gated DeltaNet layers) are not vkgate's. From config.json's `layer_types`
  // (e.g. "full_attention" / "linear_attention") or `full_attention_interval`
  // (every k-th layer: layers k−1, 2k−1, ...); neither: every layer.
  int num_hidden_layers = 0;  // 0: unknown
  std::vector<std::string> layer_types;
  int full_attention_interval = 0;
  std::string model_type;

  // Throws Error(invalid_argument) saying why `layer` cannot be run: out of
  // range, or not a full-attention layer (naming its type and the valid layers).
  void check_layer(int layer) const;

  // Qwen3-Next-80B-A3B attention: the demo's default shape.
  static BlockConfig qwen3_next_attention();

  // Throws Error(invalid_config) naming the field when the config is impossible.
  void validate() const;

  int group_size() const { return num_heads / num_kv_heads; }  // G = H / KV
  int rotary_dim() const { return static_cast<int>(head_dim * partial_rotary_factor); }
  int gate_width() const {  // gw: values of gate per head
    return gate_kind == GateKind::none ? 0 : gate_kind == GateKind::headwise ? 1 : head_dim;
  }
  // Rows of q_proj.weight: queries, plus the gates unless they are separate.
  // Products in 64 bits: validate() bounds them, but they are also used to
  // describe a config that failed validation.
  int64_t q_proj_rows() const {
    return int64_t(num_heads) * (head_dim + (gate_layout == GateLayout::separate ? 0 : gate_width()));
  }
  int64_t kv_dim() const { return int64_t(num_kv_heads) * head_dim; }
  int64_t attn_dim() const { return int64_t(num_heads) * head_dim; }  // o_proj input width
};

// Parses a Hugging Face config.json into a BlockConfig (README: "Config keys").
// `source` (the file path) starts every error message. Unknown keys are
// ignored; a known key with a wrong type or an impossible value is an
// Error(invalid_config) naming the key.
BlockConfig parse_config_json(std::string_view json_text, const std::string& source);
// Reads and parses a config.json file (Error(io) naming the path if unreadable).
BlockConfig load_config(const std::string& path);

}  // namespace vkgate
