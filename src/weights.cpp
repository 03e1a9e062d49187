#include "vkgate/weights.hpp"

#include <sstream>

#include "vkgate/error.hpp"

namespace vkgate {

int64_t TensorSpec::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::vector<TensorSpec> expected_weights(const BlockConfig& cfg) {
  const int64_t D = cfg.hidden_size, Dh = cfg.head_dim;
  std::vector<TensorSpec> s;
  s.push_back({"input_layernorm.weight", {D}});
  s.push_back({"q_proj.weight", {cfg.q_proj_rows(), D}});
  s.push_back({"k_proj.weight", {cfg.kv_dim(), D}});
  s.push_back({"v_proj.weight", {cfg.kv_dim(), D}});
  s.push_back({"o_proj.weight", {D, cfg.attn_dim()}});
  const bool separate_gate = cfg.gate_layout == GateLayout::separate && cfg.gate_kind != GateKind::none;
  if (separate_gate) s.push_back({"gate_proj.weight", {int64_t(cfg.num_heads) * cfg.gate_width(), D}});
  if (cfg.qkv_bias) {
    s.push_back({"q_proj.bias", {cfg.q_proj_rows()}});
    s.push_back({"k_proj.bias", {cfg.kv_dim()}});
    s.push_back({"v_proj.bias", {cfg.kv_dim()}});
    if (separate_gate) s.push_back({"gate_proj.bias", {int64_t(cfg.num_heads) * cfg.gate_width()}});
  }
  if (cfg.o_bias) s.push_back({"o_proj.bias", {D}});
  if (cfg.use_qk_norm) {
    s.push_back({"q_norm.weight", {Dh}});
    s.push_back({"k_norm.weight", {Dh}});
  }
  return s;
}

void check_weights(const BlockConfig& cfg, const WeightMap& weights) {
  for (const TensorSpec& spec : expected_weights(cfg)) {
    auto it = weights.find(spec.name);
    if (it == weights.end())
      throw Error(ErrorCode::missing_tensor, "weights: tensor '" + spec.name + "' is missing");
    if (int64_t(it->second.size()) != spec.numel()) {
      std::ostringstream os;
      os << "weights: tensor '" << spec.name << "' has " << it->second.size()
         << " elements, expected shape [";
      for (size_t i = 0; i < spec.shape.size(); ++i) os << (i ? ", " : "") << spec.shape[i];
      os << "] = " << spec.numel();
      throw Error(ErrorCode::shape_mismatch, os.str());
    }
  }
}

}  // namespace vkgate
