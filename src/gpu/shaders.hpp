// Internal: the SPIR-V modules compiled from shaders/ at build time and
// embedded in the library; the library never reads shader files at run time.
// A module is named after its source plus its storage-type variant
// ("matmul", "matmul_f16_y32", ...; each shader lists its variants in `// variant:` lines).
#pragma once

#include <cstdint>
#include <span>
#include <vector>
#include <string>

namespace vkgate::gpu {

struct ShaderModuleInfo {
  std::string name;
  std::span<const uint32_t> spirv;
  // Read from the SPIR-V (shaders.cpp), never kept by hand:
  uint32_t bindings;        // descriptors of set 0 at bindings 0..n−1: storage buffers, except
  uint32_t texel_bindings;  // the bits set here: uniform texel buffers (samplerBuffer)
  uint32_t param_bytes;     // size of the parameter block (set 1, binding 0; shaders/params.glsl)
  std::vector<uint32_t> counts;  // descriptors at each binding: 1, or the length of an array of them
};

// Error(invalid_argument) if no module has that name.
const ShaderModuleInfo& shader_info(const std::string& name);
// Whether this build embeds that module (optional variants depend on the
// shader compiler, e.g. GL_KHR_cooperative_matrix).
bool has_shader(const std::string& name);

}  // namespace vkgate::gpu
