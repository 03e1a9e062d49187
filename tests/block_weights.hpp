// Random weights for a BlockConfig, held as owned vectors plus a WeightMap view.
#pragma once

#include <map>
#include <random>
#include <string>
#include <vector>

#include "vkgate/weights.hpp"

namespace vkgate::test {

// A small GQA block (64 wide, 4 heads over 2 KV heads of 16, half rotary,
// zero-centred norms) for tests that need a block, not a particular one.
inline BlockConfig small_config() {
  BlockConfig c;
  c.hidden_size = 64;
  c.num_heads = 4;
  c.num_kv_heads = 2;
  c.head_dim = 16;
  c.partial_rotary_factor = 0.5;
  c.norm_kind = NormKind::zero_centered;
  return c;
}

struct RandomWeights {
  std::map<std::string, std::vector<float>> data;
  WeightMap map;

  RandomWeights(const BlockConfig& cfg, std::mt19937& rng) {
    for (const TensorSpec& spec : expected_weights(cfg)) {
      // Linear weights ~ N(0, 1/in) keep activations O(1); norm weights near
      // their identity values; biases small.
      const bool norm = spec.name.find("norm") != std::string::npos;
      const bool bias = spec.name.find(".bias") != std::string::npos;
      const double sd = norm ? 0.2 : bias ? 0.1 : 1.0 / std::sqrt(double(spec.shape.back()));
      std::normal_distribution<float> dist(norm && cfg.norm_kind == NormKind::plain ? 1.0f : 0.0f, float(sd));
      auto& v = data[spec.name];
      v.resize(size_t(spec.numel()));
      for (float& x : v) x = dist(rng);
    }
    for (auto& [name, v] : data) map[name] = v;
  }
};

}  // namespace vkgate::test
