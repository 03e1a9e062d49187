#include "nn/storage.hpp"

#include <cstring>

#include "gpu/transfer.hpp"
#include "vkgate/dtype.hpp"
#include "vkgate/error.hpp"
#include "vkgate/quant.hpp"

namespace vkgate::nn {

Storage storage_of(Precision p) {
  return p == Precision::fp16 ? Storage::f16 : p == Precision::bf16 ? Storage::bf16 : Storage::f32;
}

void encode(std::span<const float> v, Storage s, void* dst) {
  if (s == Storage::f32) {
    std::memcpy(dst, v.data(), v.size_bytes());
    return;
  }
  auto* out = static_cast<uint16_t*>(dst);
  for (size_t i = 0; i < v.size(); ++i) out[i] = s == Storage::f16 ? float_to_half(v[i]) : float_to_bf16(v[i]);
}

std::vector<float> decode(const void* src, size_t n, Storage s) {
  std::vector<float> out(n);
  if (s == Storage::f32) {
    std::memcpy(out.data(), src, n * 4);
    return out;
  }
  const auto* in = static_cast<const uint16_t*>(src);
  for (size_t i = 0; i < n; ++i) out[i] = s == Storage::f16 ? half_to_float(in[i]) : bf16_to_float(in[i]);
  return out;
}

std::vector<float> to_f32(const HostTensor& t) {
  const size_t n = size_t(t.numel());
  std::vector<float> out(n);
  if (is_quantized(t.dtype)) {
    dequantize(t.dtype, t.bytes, out);
    return out;
  }
  const std::byte* p = t.bytes.data();
  for (size_t i = 0; i < n; ++i) {
    uint16_t h;
    switch (t.dtype) {
      case DType::F32: std::memcpy(&out[i], p + 4 * i, 4); break;
      case DType::F16: std::memcpy(&h, p + 2 * i, 2); out[i] = half_to_float(h); break;
      case DType::BF16: std::memcpy(&h, p + 2 * i, 2); out[i] = bf16_to_float(h); break;
      case DType::F64: { double d; std::memcpy(&d, p + 8 * i, 8); out[i] = float(d); break; }
      default:  // check_weights refuses integer weights before any upload; block formats take nn::QuantWeight
        throw Error(ErrorCode::shape_mismatch, std::string("a weight of dtype ") + to_string(t.dtype));
    }
  }
  return out;
}

std::vector<std::byte> stored(const HostTensor& t, Storage s) {
  const bool same = (s == Storage::f32 && t.dtype == DType::F32) || (s == Storage::f16 && t.dtype == DType::F16) ||
                    (s == Storage::bf16 && t.dtype == DType::BF16);
  if (same) return std::vector<std::byte>(t.bytes.begin(), t.bytes.end());
  const std::vector<float> f = to_f32(t);
  std::vector<std::byte> out(f.size() * ops::element_bytes(s));
  encode(f, s, out.data());
  return out;
}

std::vector<std::byte> concat(std::initializer_list<std::vector<std::byte>> parts) {
  std::vector<std::byte> out;
  for (const auto& p : parts) out.insert(out.end(), p.begin(), p.end());
  return out;
}

uint32_t nan_word(Storage s) {
  return s == Storage::f32 ? 0x7fc00000u : s == Storage::f16 ? 0x7e007e00u : 0x7fc07fc0u;
}

Buffer allocate(Context::Impl& vk, size_t elements, Storage s, MemoryKind kind, const std::string& name) {
  return vk.allocator->allocate(elements * ops::element_bytes(s), kind, name);
}

Buffer upload(Context::Impl& vk, const std::vector<std::byte>& bytes, const std::string& name) {
  Buffer b = vk.allocator->allocate(bytes.size(), MemoryKind::device, name);
  gpu::upload(vk, b, bytes.data(), bytes.size());
  return b;
}

}  // namespace vkgate::nn
