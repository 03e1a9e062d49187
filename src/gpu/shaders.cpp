#include "gpu/shaders.hpp"

#include <map>
#include <vector>

#include "vkgate/error.hpp"

// Generated at build time: glslangValidator --vn headers and their table.
#include "shader_includes.inc"

namespace vkgate::gpu {

namespace {

struct Generated {
  const char* name;
  const char* source;
  std::span<const uint32_t> spirv;
};
const Generated kGenerated[] = {
#include "shader_entries.inc"
};

// Interface of each source: bindings and push-constant bytes, mirroring the
// `Push` blocks in the shaders (a mismatch is caught by the validation layer).
struct Interface {
  uint32_t bindings, push_bytes;
};
constexpr uint32_t kViewBytes = 6 * 4;
const std::map<std::string, Interface> kInterfaces = {
    {"matmul", {5, 9 * 4}},
    {"attention", {3, 15 * 4}},
    {"rmsnorm", {3, 2 * kViewBytes + 6 * 4}},
    {"rope", {3, 2 * kViewBytes + 5 * 4}},
    {"softmax", {2, 8 * 4}},
    {"gate", {2, kViewBytes + 5 * 4}},
    {"flash_attention", {7, kViewBytes + 13 * 4}},
    {"matmul_coopmat", {5, 9 * 4}},
    {"matvec", {5, 9 * 4}},
    {"attention_combine", {3, kViewBytes + 7 * 4}},
};

std::map<std::string, ShaderModuleInfo> build_registry() {
  std::map<std::string, ShaderModuleInfo> r;
  for (const Generated& g : kGenerated) {
    const Interface& i = kInterfaces.at(g.source);
    r[g.name] = ShaderModuleInfo{g.name, g.spirv, i.bindings, i.push_bytes};
  }
  return r;
}

}  // namespace

const ShaderModuleInfo& shader_info(const std::string& name) {
  static const std::map<std::string, ShaderModuleInfo> registry = build_registry();
  auto it = registry.find(name);
  if (it == registry.end()) throw Error(ErrorCode::invalid_argument, "no embedded shader named '" + name + "'");
  return it->second;
}

}  // namespace vkgate::gpu
