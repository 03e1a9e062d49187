#include "vkgate/config.hpp"

#include <cmath>
#include <sstream>
#include <string>

#include "io/config_limits.hpp"
#include "vkgate/error.hpp"

namespace vkgate {

const char* to_string(GateKind kind) noexcept {
  switch (kind) {
    case GateKind::none: return "none";
    case GateKind::headwise: return "headwise";
    case GateKind::elementwise: return "elementwise";
  }
  return "?";
}

const char* to_string(GateLayout layout) noexcept {
  switch (layout) {
    case GateLayout::qwen3_next: return "qwen3_next";
    case GateLayout::official_grouped: return "official_grouped";
    case GateLayout::separate: return "separate";
  }
  return "?";
}

const char* to_string(NormKind kind) noexcept {
  switch (kind) {
    case NormKind::plain: return "plain";
    case NormKind::zero_centered: return "zero_centered";
  }
  return "?";
}

const char* to_string(GatePosition position) noexcept {
  switch (position) {
    case GatePosition::sdpa: return "sdpa";
    case GatePosition::value: return "value";
    case GatePosition::key: return "key";
    case GatePosition::query: return "query";
    case GatePosition::dense: return "dense";
  }
  return "?";
}

const char* to_string(GateCombine combine) noexcept {
  return combine == GateCombine::multiply ? "multiply" : "add";
}

const char* to_string(GateActivation activation) noexcept {
  switch (activation) {
    case GateActivation::sigmoid: return "sigmoid";
    case GateActivation::silu: return "silu";
    case GateActivation::ns_sigmoid: return "ns_sigmoid";
    case GateActivation::identity: return "identity";
  }
  return "?";
}

const char* to_string(RopeStyle style) noexcept {
  return style == RopeStyle::rotate_half ? "rotate_half" : "interleaved";
}

const char* to_string(GqaMapping mapping) noexcept { return mapping == GqaMapping::grouped ? "grouped" : "tiled"; }

const char* to_string(RopeType type) noexcept {
  switch (type) {
    case RopeType::none: return "default";
    case RopeType::linear: return "linear";
    case RopeType::dynamic: return "dynamic";
    case RopeType::yarn: return "yarn";
    case RopeType::llama3: return "llama3";
  }
  return "?";
}

BlockConfig BlockConfig::qwen3_next_attention() {
  BlockConfig c;
  c.hidden_size = 2048;
  c.num_heads = 16;
  c.num_kv_heads = 2;
  c.head_dim = 256;
  c.rms_norm_eps = 1e-6;
  c.rope_theta = 10000000.0;
  c.partial_rotary_factor = 0.25;
  c.gate_kind = GateKind::elementwise;
  c.gate_layout = GateLayout::qwen3_next;
  c.norm_kind = NormKind::zero_centered;
  c.use_qk_norm = true;
  return c;
}

namespace {
std::string exact_text(double x) {
  std::ostringstream s;
  s.precision(17);
  s << x;
  return s.str();
}

// The fields of c.rope_scaling its type reads, and what they need of the rest of the config.
void validate_rope_scaling(const BlockConfig& c) {
  const RopeScaling& s = c.rope_scaling;
  if (s.type == RopeType::none) return;
  const std::string with = std::string(" with rope_scaling type '") + to_string(s.type) + "'";
  auto check = [&](const char* field, double value, bool ok, const char* expected) {
    if (!(std::isfinite(value) && ok))
      limits::bad(std::string("rope_scaling.") + field, std::string("must be ") + expected + ", got " + exact_text(value));
  };
  check("factor", s.factor, s.factor >= 1, ">= 1");
  switch (s.type) {
    case RopeType::none:
    case RopeType::linear: break;
    case RopeType::dynamic:
      if (c.max_position_embeddings <= 0)
        limits::bad("max_position_embeddings", "must be positive" + with + " (its θ grows past that length), got " +
                                                   std::to_string(c.max_position_embeddings));
      // θ' = θ·(...)^(r/(r−2)): undefined for two rotary dims.
      if (c.rotary_dim() == 2) limits::bad("partial_rotary_factor", "gives 2 rotary dims, too few" + with);
      break;
    case RopeType::yarn:
    case RopeType::llama3:
      if (s.original_max_position_embeddings < 0)
        limits::bad("rope_scaling.original_max_position_embeddings",
                    "must be positive, got " + std::to_string(s.original_max_position_embeddings));
      if (c.rope_original_max_positions() <= 0)
        limits::bad("rope_scaling.original_max_position_embeddings", "(or max_position_embeddings) must be given" + with);
      if (s.type == RopeType::llama3) {
        check("low_freq_factor", s.low_freq_factor, s.low_freq_factor > 0, "positive");
        check("high_freq_factor", s.high_freq_factor, s.high_freq_factor > s.low_freq_factor,
              ("greater than low_freq_factor (" + exact_text(s.low_freq_factor) + ")").c_str());
      } else {
        check("beta_fast", s.beta_fast, s.beta_fast > 0, "positive");
        check("beta_slow", s.beta_slow, s.beta_slow > 0, "positive");
        check("attention_factor", s.attention_factor, s.attention_factor >= 0, "positive (or 0: derived from factor)");
        check("mscale", s.mscale, s.mscale >= 0, "non-negative");
        check("mscale_all_dim", s.mscale_all_dim, s.mscale_all_dim >= 0, "non-negative");
        // The ramp's bounds divide by ln θ.
        if (c.rope_theta == 1) limits::bad("rope_theta", "must not be 1" + with + " (its correction range divides by ln θ)");
      }
      break;
  }
}
}  // namespace

void BlockConfig::validate() const {
  // Each size is bounded on its own first, so that the message names the key that is wrong.
  limits::check_range("hidden_size", hidden_size, 1, limits::kMaxRows);
  limits::check_range("num_attention_heads", num_heads, 1, limits::kMaxRows);
  limits::check_range("num_key_value_heads", num_kv_heads, 1, limits::kMaxRows);
  if (num_hidden_layers != 0) limits::check_range("num_hidden_layers", num_hidden_layers, 1, limits::kMaxLayers);
  if (num_heads % num_kv_heads != 0)
    limits::bad("num_attention_heads", std::string("(") + std::to_string(num_heads) +
                                           ") must be divisible by num_key_value_heads (" +
                                           std::to_string(num_kv_heads) + ")");
  if (head_dim <= 0 || head_dim > 1024)
    limits::bad("head_dim", "must be in 1..1024, got " + std::to_string(head_dim));
  if (!(rms_norm_eps > 0)) limits::bad("rms_norm_eps", "must be positive");
  if (!(rope_theta > 0 && std::isfinite(rope_theta))) limits::bad("rope_theta", "must be positive");
  if (!(partial_rotary_factor >= 0 && partial_rotary_factor <= 1))
    limits::bad("partial_rotary_factor", "must be in [0, 1]");
  if (q_proj_rows() > limits::kMaxRows || attn_dim() > limits::kMaxRows)
    limits::bad("num_attention_heads", "× head_dim (" + std::to_string(q_proj_rows()) + " q_proj rows) is too large");
  if (gate_kind != GateKind::none) {
    const std::string where = std::string("with gate_position '") + to_string(gate_position) + "'";
    if (gate_position != GatePosition::sdpa && gate_layout != GateLayout::separate)
      limits::bad("gate_layout", std::string("'") + to_string(gate_layout) + "' cannot be used " + where +
                                     ": only 'sdpa' gate rows sit in q_proj; the other positions read "
                                     "gate_proj.weight (gate_layout 'separate')");
    if (gate_position == GatePosition::dense && gate_kind != GateKind::elementwise)
      limits::bad("gate_kind", std::string("'") + to_string(gate_kind) + "' cannot be used " + where +
                                   ": the dense gate is elementwise only (one score per hidden unit)");
    if (gate_position == GatePosition::dense && gate_shared_heads)
      limits::bad("gate_shared_heads", "cannot be true " + where + ": the dense gate has no heads to share over");
  }
  if (rotary_dim() % 2 != 0)
    limits::bad("partial_rotary_factor", "gives an odd rotary dimension " + std::to_string(rotary_dim()) +
                                             " (head_dim " + std::to_string(head_dim) + ")");
  if (max_position_embeddings < 0)
    limits::bad("max_position_embeddings", "must not be negative, got " + std::to_string(max_position_embeddings));
  validate_rope_scaling(*this);
}

}  // namespace vkgate
