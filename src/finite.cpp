#include "finite.hpp"

#include <cmath>
#include <cstring>
#include <limits>

#include "vkgate/dtype.hpp"
#include "vkgate/error.hpp"
#include "vkgate/quant.hpp"

namespace vkgate::detail {

namespace {

std::string value_text(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.6g", v);
  return buf;
}

[[noreturn]] void fail(ErrorCode code, const std::string& what, const std::string& holds, int64_t flat,
                       const std::vector<int64_t>& shape, const std::string& why) {
  throw Error(code, what + " holds " + holds + " at " + index_text(flat, shape) + why);
}


// Element i of a stored tensor as double.
double element(const HostTensor& t, size_t i) {
  const std::byte* p = t.bytes.data();
  switch (t.dtype) {
    case DType::F32: { float f; std::memcpy(&f, p + 4 * i, 4); return f; }
    case DType::F64: { double d; std::memcpy(&d, p + 8 * i, 8); return d; }
    case DType::F16: { uint16_t h; std::memcpy(&h, p + 2 * i, 2); return half_to_float(h); }
    case DType::BF16: { uint16_t h; std::memcpy(&h, p + 2 * i, 2); return bf16_to_float(h); }
    case DType::I64: { int64_t v; std::memcpy(&v, p + 8 * i, 8); return double(v); }
    case DType::I32: { int32_t v; std::memcpy(&v, p + 4 * i, 4); return v; }
    default: break;  // block formats: checked after dequantizing
  }
  return 0;
}

constexpr double kHalfMax = 65504.0;
// Values that round to fp16's largest finite value; beyond this they become Inf.
constexpr double kHalfLimit = 65520.0;

}  // namespace

std::string index_text(int64_t flat, const std::vector<int64_t>& shape) {
  std::vector<int64_t> idx(shape.size());
  int64_t rest = flat;
  for (size_t k = shape.size(); k-- > 0;) {
    const int64_t d = shape[k] > 0 ? shape[k] : 1;
    idx[k] = rest % d;
    rest /= d;
  }
  if (shape.empty()) idx.push_back(flat);
  std::string s = "[";
  for (size_t k = 0; k < idx.size(); ++k) s += (k ? ", " : "") + std::to_string(idx[k]);
  return s + "]";
}

void require_finite(std::span<const float> values, const std::string& what, const std::vector<int64_t>& shape,
                    bool allow_negative_inf) {
  for (size_t i = 0; i < values.size(); ++i) {
    const float v = values[i];
    if (std::isfinite(v) || (allow_negative_inf && v < 0 && std::isinf(v))) continue;
    fail(ErrorCode::non_finite, what, value_text(v), int64_t(i), shape,
         allow_negative_inf ? " (only -Inf, a masked position, is allowed)" : "");
  }
}

void require_finite(const HostTensor& t, const std::string& what, const std::vector<int64_t>& shape) {
  const size_t n = size_t(t.numel());
  for (size_t i = 0; i < n; ++i) {
    const double v = element(t, i);
    if (!std::isfinite(v)) fail(ErrorCode::non_finite, what, value_text(v), int64_t(i), shape, "");
  }
}

void require_fp16_range(std::span<const float> values, const std::string& what, const std::vector<int64_t>& shape) {
  for (size_t i = 0; i < values.size(); ++i)
    if (std::fabs(double(values[i])) >= kHalfLimit && std::isfinite(values[i]))
      fail(ErrorCode::non_finite, what, value_text(values[i]), int64_t(i), shape,
           ", beyond fp16's range (largest finite value 65504): it would be stored as Inf; use fp32 or bf16");
}

void require_usable_weight(const HostTensor& t, const TensorSpec& spec, Precision precision) {
  if (is_quantized(t.dtype)) {  // its values are what the device computes with
    std::vector<float> values(size_t(t.numel()));
    dequantize(t.dtype, t.bytes, values);
    require_usable_weight(HostTensor{DType::F32, t.shape, std::as_bytes(std::span(values))}, spec, precision);
    return;
  }
  const std::string what = "weight '" + spec.name + "'";
  require_finite(t, what, spec.shape);
  if (precision == Precision::fp16) require_fp16_range(t, what, spec.shape);
}

void require_fp16_range(const HostTensor& t, const std::string& what, const std::vector<int64_t>& shape) {
  if (t.dtype == DType::F16) return;  // already representable
  const size_t n = size_t(t.numel());
  for (size_t i = 0; i < n; ++i) {
    const double v = element(t, i);
    if (std::fabs(v) >= kHalfLimit && std::isfinite(v))
      fail(ErrorCode::non_finite, what, value_text(v), int64_t(i), shape,
           ", beyond fp16's range (largest finite value " + value_text(kHalfMax) +
               "): it would be stored as Inf; use fp32 or bf16");
  }
}

void require_norm_in_range(std::span<const float> values, size_t dim, const std::string& what,
                           const std::vector<int64_t>& shape) {
  if (dim == 0) return;
  // Half of FLT_MAX leaves room for the device's summation order.
  const double limit = 0.5 * double(std::numeric_limits<float>::max());
  for (size_t row = 0; row * dim < values.size(); ++row) {
    double ss = 0;
    for (size_t d = 0; d < dim; ++d) ss += double(values[row * dim + d]) * double(values[row * dim + d]);
    if (ss > limit) {
      const std::vector<int64_t> rows(shape.begin(), shape.end() - (shape.empty() ? 0 : 1));
      throw Error(ErrorCode::unsupported,
                  what + " row " + index_text(int64_t(row), rows) + " has a root mean square of " +
                      value_text(std::sqrt(ss / double(dim))) +
                      ": its sum of squares overflows fp32, so RMSNorm would be computed from Inf; scale the "
                      "input down (RMSNorm does not depend on the scale)");
    }
  }
}

}  // namespace vkgate::detail
