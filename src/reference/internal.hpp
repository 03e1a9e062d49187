// Internal: the double-precision entries of the block's CPU oracle
// (reference.cpp) that the whole-model oracle (reference_model.cpp) builds on.
// They take activations already in double, so that a model's residual stream
// is never rounded to float between layers. Part of the reference: nothing
// here is shared with the GPU path.
#pragma once

#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <span>
#include <string>
#include <vector>

#include "vkgate/config.hpp"
#include "vkgate/reference.hpp"
#include "vkgate/weights.hpp"

namespace vkgate::reference::internal {

inline double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

// The tensor `name` of `w` when present, else an empty span (no bias).
std::span<const float> bias_or_empty(const WeightMap& w, bool present, const std::string& name);

// Throws Error(invalid_argument) "reference::OP: WHY".
[[noreturn]] void bad_argument(const char* op, const std::string& why);

// Throws Error(invalid_argument) "reference::OP: 'TENSOR' has N elements,
// expected [dims] = M" unless `got` is the product of `dims`.
void check_size(const char* op, const char* tensor, size_t got, std::initializer_list<int64_t> dims);

// linear() and rms_norm() on double x; sizes are the caller's to check.
std::vector<double> linear_d(std::span<const double> x, std::span<const float> w,
                             std::span<const float> b, int64_t m, int64_t n, int64_t k);
std::vector<double> rms_norm_d(std::span<const double> x, std::span<const float> w, int64_t rows,
                               int64_t dim, double eps, NormKind kind);

// forward() with the hidden states [in.batch, in.tokens, D] given in double by
// `hidden`, which takes the place of in.hidden (not read). Validates like forward().
// rope_lengths (empty, or one per token): the sequence length whose RoPE
// frequencies each token takes (dynamic NTK's), instead of past + tokens for
// all: a sequence fed in several steps, each step's positions rotated for the
// length that step ended at.
Result forward_d(const BlockConfig& cfg, const WeightMap& weights, std::span<const double> hidden,
                 const Inputs& in, std::span<const int64_t> rope_lengths = {});

}  // namespace vkgate::reference::internal
