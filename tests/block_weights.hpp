// Random weights for a BlockConfig, held as owned vectors plus a WeightMap view.
#pragma once

#include <map>
#include <random>
#include <string>
#include <vector>

#include "vkgate/block.hpp"
#include "vkgate/dtype.hpp"
#include "vkgate/precision.hpp"
#include "vkgate/reference.hpp"
#include "vkgate/weights.hpp"

namespace vkgate::test {

// The reference's inputs for a device forward (hidden states, shape, an
// explicit cache, a mask).
inline reference::Inputs reference_inputs(const ForwardInputs& in) {
  reference::Inputs r;
  r.hidden = in.hidden;
  r.batch = in.batch;
  r.tokens = in.tokens;
  r.past = in.past;
  r.past_key = in.past_key;
  r.past_value = in.past_value;
  r.attention_mask = in.attention_mask;
  return r;
}

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

// Random weights stored as fp16 or bf16 tensors (`tensors`, for the device),
// and the values those hold as floats (`rounded_map`, for the reference).
struct StoredWeights {
  std::map<std::string, std::vector<uint16_t>> bits;
  std::map<std::string, std::vector<float>> rounded;
  TensorMap tensors;
  WeightMap rounded_map;

  StoredWeights(const BlockConfig& cfg, std::mt19937& rng, Precision prec) {
    const bool fp16 = prec == Precision::fp16;
    for (auto& [name, v] : RandomWeights(cfg, rng).data) {
      auto& b = bits[name];
      auto& r = rounded[name];
      for (float x : v) {
        b.push_back(fp16 ? float_to_half(x) : float_to_bf16(x));
        r.push_back(fp16 ? half_to_float(b.back()) : bf16_to_float(b.back()));
      }
      tensors[name] = HostTensor{fp16 ? DType::F16 : DType::BF16, {}, std::as_bytes(std::span(b))};
      rounded_map[name] = r;
    }
  }
  StoredWeights(const StoredWeights&) = delete;  // the maps point into the vectors
};

}  // namespace vkgate::test
