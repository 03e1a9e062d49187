// Host-side weights and the shapes the block expects, by Hugging Face name.
//
// Thread safety: the functions only read their arguments and may run on any
// thread; a WeightMap or TensorMap may be read by several threads at once (the
// data it views must stay alive and unchanged meanwhile).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "vkgate/config.hpp"
#include "vkgate/dtype.hpp"

namespace vkgate {

// Weights as fp32 spans in PyTorch [out, in] layout, keyed by Hugging Face
// name without a layer prefix: "q_proj.weight", "input_layernorm.weight", ...
// The spans are only read during the call they are passed to.
using WeightMap = std::map<std::string, std::span<const float>>;

// A tensor as stored (F32, F16, BF16, or a block format for weights), e.g. a
// view into a memory-mapped checkpoint: the block uploads it without
// converting it to fp32 on the host.
struct HostTensor {
  DType dtype = DType::F32;
  std::vector<int64_t> shape;  // may be empty: then only the element count is checked
  std::span<const std::byte> bytes;
  int64_t numel() const { return int64_t(bytes.size() / block_bytes(dtype) * block_elements(dtype)); }
};
using TensorMap = std::map<std::string, HostTensor>;

// Views of fp32 spans as F32 HostTensors (no copy).
TensorMap as_tensors(const WeightMap& weights);

// "[8192, 2048]": a shape as error messages print it.
std::string shape_text(const std::vector<int64_t>& shape);

struct TensorSpec {
  std::string name;
  std::vector<int64_t> shape;
  int64_t numel() const;
};

// Every tensor the config needs, with its expected shape. Validates cfg first
// (Error(invalid_config)): shapes are only computed from a possible config.
std::vector<TensorSpec> expected_weights(const BlockConfig& cfg);

// Throws Error(invalid_config) for an impossible cfg, then Error(missing_tensor
// / shape_mismatch) naming the first tensor that is absent, has the wrong shape
// or element count, or a dtype other than F32/F16/BF16 or a block format.
void check_weights(const BlockConfig& cfg, const TensorMap& weights);
void check_weights(const BlockConfig& cfg, const WeightMap& weights);
// Each of `specs` present in `weights` with its shape and a float dtype (the
// messages of check_weights).
void check_tensors(const std::vector<TensorSpec>& specs, const TensorMap& weights);

}  // namespace vkgate
