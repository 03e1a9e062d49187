// Host-side weights and shapes the block expects, by Hugging Face name.
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "vkgate/config.hpp"

namespace vkgate {

// Weights as fp32 spans in PyTorch [out, in] layout, keyed by Hugging Face
// name without a layer prefix: "q_proj.weight", "input_layernorm.weight", ...
// The spans are only read during the call they are passed to.
using WeightMap = std::map<std::string, std::span<const float>>;

struct TensorSpec {
  std::string name;
  std::vector<int64_t> shape;
  int64_t numel() const;
};

// Every tensor the config needs, with its expected shape.
std::vector<TensorSpec> expected_weights(const BlockConfig& cfg);

// Throws Error(missing_tensor / shape_mismatch) naming the first tensor that is
// absent or whose element count differs from the expected shape.
void check_weights(const BlockConfig& cfg, const WeightMap& weights);

}  // namespace vkgate
