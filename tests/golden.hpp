// The golden cases of ../shared/golden: config, weights and expected tensors
// from an independent float64 implementation.
#pragma once

#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "vkgate/config.hpp"
#include "vkgate/safetensors.hpp"
#include "vkgate/weights.hpp"

#ifndef VKGATE_GOLDEN_DIR
#error "VKGATE_GOLDEN_DIR must name the directory of the golden cases"
#endif

namespace vkgate::test {

using nlohmann::json;

// A stand-in for the real config.json parser: just the keys the golden files use.
inline BlockConfig config_from_json(const json& j) {
  BlockConfig c;
  c.hidden_size = j.at("hidden_size").get<int>();
  c.num_heads = j.at("num_attention_heads").get<int>();
  c.num_kv_heads = j.at("num_key_value_heads").get<int>();
  c.head_dim = j.at("head_dim").get<int>();
  c.rms_norm_eps = j.at("rms_norm_eps").get<double>();
  c.rope_theta = j.at("rope_theta").get<double>();
  c.partial_rotary_factor = j.at("partial_rotary_factor").get<double>();
  const std::string gate_kind = j.at("gate_kind").get<std::string>();
  c.gate_kind = gate_kind == "none"       ? GateKind::none
                : gate_kind == "headwise" ? GateKind::headwise
                                          : GateKind::elementwise;
  const std::string layout = j.at("gate_layout").get<std::string>();
  c.gate_layout = layout == "qwen3_next"         ? GateLayout::qwen3_next
                  : layout == "official_grouped" ? GateLayout::official_grouped
                                                 : GateLayout::separate;
  c.norm_kind = j.at("norm_kind").get<std::string>() == "zero_centered" ? NormKind::zero_centered
                                                                        : NormKind::plain;
  c.use_qk_norm = j.at("use_qk_norm").get<bool>();
  c.causal = j.at("causal").get<bool>();
  c.residual = j.at("residual").get<bool>();
  // Both conventions put the bias on o_proj too (DESIGN.md §3).
  const bool bias = j.value("attention_bias", false) || j.value("qkv_bias", false);
  c.qkv_bias = c.o_bias = bias;
  return c;
}

struct Golden {
  json meta;
  BlockConfig cfg;
  SafetensorsFile file;
  std::map<std::string, std::vector<float>> floats;  // owns what `weights` points to
  WeightMap weights;

  explicit Golden(const std::string& name)
      : meta(json::parse(std::ifstream(std::string(VKGATE_GOLDEN_DIR) + "/" + name + ".json"))),
        cfg(config_from_json(meta)),
        file(std::string(VKGATE_GOLDEN_DIR) + "/" + name + ".safetensors") {
    for (const TensorSpec& spec : expected_weights(cfg)) weights[spec.name] = f32(spec.name);
  }

  const std::vector<float>& f32(const std::string& name) {
    auto it = floats.find(name);
    if (it == floats.end()) it = floats.emplace(name, file.at(name).to_f32()).first;
    return it->second;
  }
  int64_t dim(const std::string& tensor, size_t axis) const {
    return file.at(tensor).shape.at(axis);
  }
};

}  // namespace vkgate::test
