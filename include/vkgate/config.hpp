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

// How many scores the gate computes: none, one per head at its position, or
// one per channel (for `dense`: one per hidden unit, D per token).
enum class GateKind { none, headwise, elementwise };

// Where the gate acts (the paper's G1–G5, README "Gate positions"):
//   sdpa   G1: on each head's attention output, before o_proj
//   value  G2: on v_proj's output (per KV head), so the cache holds gated values
//   key    G3: on k_proj's output (per KV head), before k_norm and RoPE
//   query  G4: on q_proj's output (per query head), before q_norm and RoPE
//   dense  G5: on o_proj's output (after its bias, before any residual add)
enum class GatePosition { sdpa, value, key, query, dense };
// How the activated score s meets the gated tensor y: y·s or y + s.
enum class GateCombine { multiply, add };
// s = act(x·W_g): sigmoid, silu (x·sigmoid(x)), ns_sigmoid (0.5 + 0.5·sigmoid,
// the paper's non-sparse control) or identity.
enum class GateActivation { sigmoid, silu, ns_sigmoid, identity };
// RoPE's pairs: (i, i + r/2) as HF Llama/Qwen (rotate_half), or (2i, 2i + 1)
// as the complex-number form of GPT-J, GLM and Meta's original checkpoints.
enum class RopeStyle { rotate_half, interleaved };
// RoPE's frequency scaling, transformers' `rope_type` (its ROPE_INIT_FUNCTIONS):
//   none     "default": inv_freq_i = θ^(−2i/r), no scaling
//   linear   inv_freq / factor (position interpolation)
//   dynamic  NTK: θ grows with the sequence length once it passes max_position_embeddings
//   yarn     NTK-by-parts between inv_freq and inv_freq / factor, cos and sin times an attention factor
//   llama3   Llama 3.1's: low frequencies / factor, high ones kept, a smooth ramp between
// (longrope, mrope and the others are refused when config.json asks for them.)
enum class RopeType { none, linear, dynamic, yarn, llama3 };

// The parameters of a scaled RoPE (README "RoPE scaling"). Each
// type reads only its own fields; the others keep their defaults.
struct RopeScaling {
  RopeType type = RopeType::none;
  // linear, dynamic, llama3, yarn: ≥ 1. (yarn without `factor` in config.json:
  // max_position_embeddings / original_max_position_embeddings, as transformers.)
  double factor = 1.0;
  // yarn and llama3: the pre-training context length; 0 stands for
  // BlockConfig::max_position_embeddings (transformers' fallback).
  int original_max_position_embeddings = 0;
  double low_freq_factor = 1.0;   // llama3 (> 0)
  double high_freq_factor = 4.0;  // llama3 (> low_freq_factor)
  double beta_fast = 32.0;        // yarn: the ramp's bounds in rotations (> 0)
  double beta_slow = 1.0;
  // yarn: what cos and sin are multiplied by; 0: derived from factor (0.1·ln(factor) + 1,
  // or with mscale and mscale_all_dim both non-zero the ratio of the two such terms).
  double attention_factor = 0.0;
  double mscale = 0.0;          // yarn (DeepSeek's): 0 = not given
  double mscale_all_dim = 0.0;  // yarn: 0 = not given
  bool truncate = true;         // yarn: round the ramp's bounds outwards to whole dims

  bool operator==(const RopeScaling&) const = default;
};

// Which KV head query head h reads: h / (H/KV) (grouped, HF) or h % KV
// (tiled: the repeat-by-tiling of seed 002's expand/flatten code).
enum class GqaMapping { grouped, tiled };

// Where the gate rows live in the weights (DESIGN.md §3):
//   qwen3_next       q_proj rows per query head: [q_h (Dh) | g_h (gw)]
//   official_grouped q_proj rows per KV group of G = H/KV heads:
//                    [q of the G heads (G·Dh) | gates of the G heads (G·gw)]
//   separate         q_proj holds only queries; gate_proj.weight is
//                    [gate_rows(), D] (the only layout of the non-sdpa positions)
enum class GateLayout { qwen3_next, official_grouped, separate };

// RMSNorm scale form: plain x̂·w, or zero-centred x̂·(1+w) (Qwen3-Next).
enum class NormKind { plain, zero_centered };

const char* to_string(GateKind kind) noexcept;
const char* to_string(GateLayout layout) noexcept;
const char* to_string(NormKind kind) noexcept;
const char* to_string(GatePosition position) noexcept;
const char* to_string(GateCombine combine) noexcept;
const char* to_string(GateActivation activation) noexcept;
const char* to_string(RopeStyle style) noexcept;
const char* to_string(GqaMapping mapping) noexcept;
const char* to_string(RopeType type) noexcept;  // none is "default"

struct BlockConfig {
  int hidden_size = 0;   // D
  int num_heads = 0;     // H, query heads
  int num_kv_heads = 0;  // KV
  int head_dim = 0;      // Dh
  double rms_norm_eps = 1e-6;
  double rope_theta = 10000.0;
  double partial_rotary_factor = 1.0;  // rotary dims = int(Dh · factor)
  RopeScaling rope_scaling;            // none: plain RoPE
  // Qwen3.5's multimodal RoPE sections (rope_parameters.mrope_section, GGUF
  // rope.dimension_sections): which rotary pairs take the t, h and w position.
  // Text positions give all three the token's index, so the RoPE is the
  // plain one above; kept so that a GGUF written of the model carries them.
  std::vector<int> mrope_section;
  // The context length the model declares (config.json's, else its
  // transformers class default: 2048 for llama, 32768 for the others); 0:
  // unknown. Read by dynamic RoPE (where θ starts to grow) and as yarn's and
  // llama3's original_max_position_embeddings when those do not give one.
  int max_position_embeddings = 0;
  GateKind gate_kind = GateKind::elementwise;
  GateLayout gate_layout = GateLayout::qwen3_next;
  GatePosition gate_position = GatePosition::sdpa;
  // The per-head scores are averaged over the heads at the position and the
  // mean gates every head (the paper's head-shared rows).
  bool gate_shared_heads = false;
  GateCombine gate_combine = GateCombine::multiply;
  GateActivation gate_activation = GateActivation::sigmoid;
  RopeStyle rope_style = RopeStyle::rotate_half;
  GqaMapping gqa_mapping = GqaMapping::grouped;
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
  // Whether layer `layer` is full attention (layer_types, full_attention_interval).
  bool is_full_attention(int layer) const;

  // Qwen3-Next-80B-A3B attention: the demo's default shape.
  static BlockConfig qwen3_next_attention();

  // Throws Error(invalid_config) naming the field when the config is impossible.
  void validate() const;

  int group_size() const { return num_heads / num_kv_heads; }  // G = H / KV
  int rotary_dim() const { return static_cast<int>(head_dim * partial_rotary_factor); }
  // yarn's and llama3's pre-training length: rope_scaling's, else max_position_embeddings.
  int rope_original_max_positions() const {
    return rope_scaling.original_max_position_embeddings > 0 ? rope_scaling.original_max_position_embeddings
                                                             : max_position_embeddings;
  }
  // Heads at the gate's position: H (sdpa, query), KV (key, value), 1 (dense).
  int gate_heads() const {
    switch (gate_position) {
      case GatePosition::key:
      case GatePosition::value: return num_kv_heads;
      case GatePosition::dense: return 1;
      default: return num_heads;
    }
  }
  int gate_width() const {  // gw: scores per head at the position (dense: D)
    if (gate_kind == GateKind::none) return 0;
    if (gate_kind == GateKind::headwise) return 1;
    return gate_position == GatePosition::dense ? hidden_size : head_dim;
  }
  int64_t gate_rows() const { return int64_t(gate_heads()) * gate_width(); }  // gate scores per token
  // Rows of q_proj.weight: queries, plus the gates unless they are separate.
  // Products in 64 bits: validate() bounds them, but they are also used to
  // describe a config that failed validation.
  int64_t q_proj_rows() const {
    return int64_t(num_heads) * (head_dim + (gate_layout == GateLayout::separate ? 0 : gate_width()));
  }
  int64_t kv_dim() const { return int64_t(num_kv_heads) * head_dim; }
  int64_t attn_dim() const { return int64_t(num_heads) * head_dim; }  // o_proj input width

  bool operator==(const BlockConfig&) const = default;
};

// Parses a Hugging Face config.json into a BlockConfig (README: "Config keys").
// `source` (the file path) starts every error message. Unknown keys are
// ignored; a known key with a wrong type or an impossible value is an
// Error(invalid_config) naming the key.
BlockConfig parse_config_json(std::string_view json_text, const std::string& source);
// Reads and parses a config.json file (Error(io) naming the path if unreadable).
BlockConfig load_config(const std::string& path);

// Whether `model_type` is of Qwen3-Next's family: qwen3_next, and Qwen3.5's
// qwen3_5_text and qwen3_5_moe_text (the same hybrid stack). Their attention
// presets: the elementwise gate in q_proj's per-head rows, zero-centred
// norms, q/k norms, head_dim 256, partial_rotary_factor 0.25, a full-attention
// layer every 4.
bool qwen3_next_family(std::string_view model_type);

}  // namespace vkgate
