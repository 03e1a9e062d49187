// Internal: tensors on the device in the activation storage type — the host
// side of conversions (weights at upload, activations that cross the API)
// and the buffers the modules allocate.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <span>
#include <string>
#include <vector>

#include "gpu/context_impl.hpp"
#include "gpu/memory.hpp"
#include "ops/ops.hpp"
#include "vkgate/precision.hpp"
#include "vkgate/weights.hpp"

namespace vkgate::nn {

using gpu::Buffer;
using gpu::MemoryKind;
using ops::Storage;

Storage storage_of(Precision p);

// fp32 values as `s` elements at dst, and back.
void encode(std::span<const float> v, Storage s, void* dst);
std::vector<float> decode(const void* src, size_t n, Storage s);

// A weight's values as fp32 (F32, F16, BF16 or F64 as stored; a block format dequantized).
std::vector<float> to_f32(const HostTensor& t);
// A weight in storage `s`: its bytes as they are when the dtype already
// matches (a bf16 checkpoint run in bf16 is never converted), else via fp32.
std::vector<std::byte> stored(const HostTensor& t, Storage s);
std::vector<std::byte> concat(std::initializer_list<std::vector<std::byte>> parts);

// A 32-bit word whose every element of storage `s` is NaN (poisoning).
uint32_t nan_word(Storage s);

// Device memory of `elements` elements of `s`, and a device buffer holding `bytes`.
Buffer allocate(Context::Impl& vk, size_t elements, Storage s, MemoryKind kind, const std::string& name);
Buffer upload(Context::Impl& vk, const std::vector<std::byte>& bytes, const std::string& name);

}  // namespace vkgate::nn
