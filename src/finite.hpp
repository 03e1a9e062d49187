// Internal: the checks behind BlockOptions::check_finite — NaN and Inf in
// inputs, weights and outputs, values beyond a 16-bit storage type's range,
// and rows whose fp32 RMSNorm statistics would overflow.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "vkgate/precision.hpp"
#include "vkgate/weights.hpp"

namespace vkgate::detail {

// "[1, 0, 17]": a flat element index as a multi-index of `shape` (or "[17]").
std::string index_text(int64_t flat, const std::vector<int64_t>& shape);

// Throws Error(non_finite) "WHAT holds NaN at [i, j, k]" for the first NaN or
// ±Inf element (with allow_negative_inf, −Inf is allowed: a masked position).
void require_finite(std::span<const float> values, const std::string& what, const std::vector<int64_t>& shape,
                    bool allow_negative_inf = false);
// The same for a stored tensor (F32, F16, BF16, F64); `shape` (the expected
// shape, since a HostTensor's own may be empty) for the index in the message.
void require_finite(const HostTensor& t, const std::string& what, const std::vector<int64_t>& shape);

// Throws Error(non_finite) when a finite value of `values` becomes ±Inf when
// stored as fp16 (|x| ≥ 65520, which rounds past fp16's largest value 65504).
void require_fp16_range(std::span<const float> values, const std::string& what, const std::vector<int64_t>& shape);
void require_fp16_range(const HostTensor& t, const std::string& what, const std::vector<int64_t>& shape);

// A weight a layer or model is about to upload, named "weight 'NAME'": finite,
// and within fp16's range when `precision` stores it as fp16.
void require_usable_weight(const HostTensor& t, const TensorSpec& spec, Precision precision);

// Throws Error(unsupported) when a row of `rows` × `dim` values has a sum of
// squares beyond what fp32 holds: the device's RMSNorm statistics would be
// Inf and the row would come out as zeros, a finite but wrong answer.
void require_norm_in_range(std::span<const float> values, size_t dim, const std::string& what,
                           const std::vector<int64_t>& shape);

}  // namespace vkgate::detail
