#include "vkgate/weights.hpp"

#include <sstream>

#include "vkgate/error.hpp"

namespace vkgate {

int64_t TensorSpec::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

TensorMap as_tensors(const WeightMap& weights) {
  TensorMap out;
  for (const auto& [name, span] : weights) out[name] = HostTensor{DType::F32, {}, std::as_bytes(span)};
  return out;
}

std::vector<TensorSpec> expected_weights(const BlockConfig& cfg) {
  cfg.validate();
  const int64_t D = cfg.hidden_size, Dh = cfg.head_dim;
  std::vector<TensorSpec> s;
  s.push_back({"input_layernorm.weight", {D}});
  s.push_back({"q_proj.weight", {cfg.q_proj_rows(), D}});
  s.push_back({"k_proj.weight", {cfg.kv_dim(), D}});
  s.push_back({"v_proj.weight", {cfg.kv_dim(), D}});
  s.push_back({"o_proj.weight", {D, cfg.attn_dim()}});
  const bool separate_gate = cfg.gate_layout == GateLayout::separate && cfg.gate_kind != GateKind::none;
  if (separate_gate) s.push_back({"gate_proj.weight", {cfg.gate_rows(), D}});
  if (cfg.qkv_bias) {
    s.push_back({"q_proj.bias", {cfg.q_proj_rows()}});
    s.push_back({"k_proj.bias", {cfg.kv_dim()}});
    s.push_back({"v_proj.bias", {cfg.kv_dim()}});
    if (separate_gate) s.push_back({"gate_proj.bias", {cfg.gate_rows()}});
  }
  if (cfg.o_bias) s.push_back({"o_proj.bias", {D}});
  if (cfg.use_qk_norm) {
    s.push_back({"q_norm.weight", {Dh}});
    s.push_back({"k_norm.weight", {Dh}});
  }
  return s;
}

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string t = "[";
  for (size_t i = 0; i < shape.size(); ++i) t += (i ? ", " : "") + std::to_string(shape[i]);
  return t + "]";
}

void check_weights(const BlockConfig& cfg, const TensorMap& weights) { check_tensors(expected_weights(cfg), weights); }

void check_tensors(const std::vector<TensorSpec>& specs, const TensorMap& weights) {
  for (const TensorSpec& spec : specs) {
    auto it = weights.find(spec.name);
    if (it == weights.end())
      throw Error(ErrorCode::missing_tensor, "weights: tensor '" + spec.name + "' is missing");
    const HostTensor& t = it->second;
    if (t.dtype != DType::F32 && t.dtype != DType::F16 && t.dtype != DType::BF16 && !is_quantized(t.dtype))
      throw Error(ErrorCode::shape_mismatch, "weights: tensor '" + spec.name + "' has dtype " + to_string(t.dtype) +
                                                 ", expected F32, F16, BF16 or a block format");
    const bool shape_ok = (t.shape.empty() || t.shape == spec.shape) && t.numel() == spec.numel();
    if (!shape_ok || t.bytes.size() % block_bytes(t.dtype) != 0) {
      std::ostringstream os;
      os << "weights: tensor '" << spec.name << "' has ";
      if (t.shape.empty()) os << t.numel() << " elements";
      else os << "shape " << shape_text(t.shape);
      os << ", expected shape " << shape_text(spec.shape) << " = " << spec.numel() << " elements";
      throw Error(ErrorCode::shape_mismatch, os.str());
    }
  }
}

void check_weights(const BlockConfig& cfg, const WeightMap& weights) { check_weights(cfg, as_tensors(weights)); }

}  // namespace vkgate
