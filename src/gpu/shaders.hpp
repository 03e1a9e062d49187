// Internal: the SPIR-V modules compiled from shaders/ at build time and
// embedded in the library; the library never reads shader files at run time.
#pragma once

#include <cstdint>
#include <span>

namespace vkgate::gpu {

enum class Shader { matmul, attention, rmsnorm, rope, softmax, gate };

struct ShaderModuleInfo {
  const char* name;
  std::span<const uint32_t> spirv;
  uint32_t bindings;     // storage buffers at bindings 0..n−1
  uint32_t push_bytes;   // size of the push-constant block
};

const ShaderModuleInfo& shader_info(Shader s);

}  // namespace vkgate::gpu
