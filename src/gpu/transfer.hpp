// Internal: one-off host↔device copies through staging buffers, for weights,
// tables and tests. Each call submits and waits.
#pragma once

#include <cstddef>

#include "gpu/memory.hpp"

namespace vkgate::gpu {

void upload(Context::Impl& ctx, const Buffer& dst, const void* data, size_t bytes);
void download(Context::Impl& ctx, const Buffer& src, void* data, size_t bytes);

}  // namespace vkgate::gpu
