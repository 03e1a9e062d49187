// Precision: the device storage type of weights and activations, shared by
// the block (block.hpp) and whole models (model.hpp).
//
// Thread safety: a plain value; to_string may be called from any thread.
#pragma once

namespace vkgate {

// Device storage type of weights and activations; arithmetic is always fp32
// (softmax and RMSNorm statistics included).
enum class Precision { fp32, fp16, bf16 };
const char* to_string(Precision p) noexcept;  // "fp32", "fp16", "bf16"

}  // namespace vkgate
