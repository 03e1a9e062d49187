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
    {"matmul", {5, 10 * 4}},
    {"matmul_combine", {4, 7 * 4}},
    {"attention", {3, 19 * 4}},
    {"rmsnorm", {3, 2 * kViewBytes + 6 * 4}},
    {"rope", {3, 2 * kViewBytes + 5 * 4}},
    {"qkv_prepare", {7, 3 * kViewBytes + 10 * 4}},
    {"softmax", {3, 10 * 4}},
    {"gate", {2, kViewBytes + 6 * 4}},
    {"flash_attention", {7, kViewBytes + 13 * 4}},
    {"flash_decode", {7, kViewBytes + 13 * 4}},
    {"flash_coopmat", {7, kViewBytes + 13 * 4}},
    {"matmul_coopmat", {5, 10 * 4}},
    {"matmul_staged", {5, 9 * 4}},
    {"matvec", {5, 12 * 4}},
    {"attention_combine", {3, kViewBytes + 7 * 4}},
    {"copy", {2, 4}},
};

// Bindings whose variable is a sampled buffer image (GLSL samplerBuffer), read
// from the module itself: a variant may read a binding as a texel buffer where
// its source's other variants use a storage buffer.
uint32_t texel_bindings(std::span<const uint32_t> spirv) {
  enum : uint32_t { kDecorate = 71, kTypeImage = 25, kTypeSampledImage = 27, kTypePointer = 32, kVariable = 59 };
  enum : uint32_t { kBinding = 33, kDimBuffer = 5 };
  std::map<uint32_t, uint32_t> binding_of;  // variable id → binding
  std::map<uint32_t, bool> buffer_image;    // type id → is a buffer image (or sampled one, or pointer to one)
  std::vector<uint32_t> variables;
  for (size_t at = 5; at < spirv.size();) {
    const uint32_t words = spirv[at] >> 16, op = spirv[at] & 0xffff;
    if (words == 0 || at + words > spirv.size()) break;
    const uint32_t* w = &spirv[at];
    if (op == kDecorate && words >= 4 && w[2] == kBinding) binding_of[w[1]] = w[3];
    if (op == kTypeImage && words >= 4) buffer_image[w[1]] = w[3] == kDimBuffer;
    if (op == kTypeSampledImage && words >= 3) buffer_image[w[1]] = buffer_image[w[2]];
    if (op == kTypePointer && words >= 4) buffer_image[w[1]] = buffer_image[w[3]];
    if (op == kVariable && words >= 3 && buffer_image[w[1]]) variables.push_back(w[2]);
    at += words;
  }
  uint32_t mask = 0;
  for (uint32_t v : variables)
    if (auto it = binding_of.find(v); it != binding_of.end()) mask |= 1u << it->second;
  return mask;
}

std::map<std::string, ShaderModuleInfo> build_registry() {
  std::map<std::string, ShaderModuleInfo> r;
  for (const Generated& g : kGenerated) {
    const Interface& i = kInterfaces.at(g.source);
    r[g.name] = ShaderModuleInfo{g.name, g.spirv, i.bindings, texel_bindings(g.spirv), i.push_bytes};
  }
  return r;
}

const std::map<std::string, ShaderModuleInfo>& registry() {
  static const std::map<std::string, ShaderModuleInfo> r = build_registry();
  return r;
}

}  // namespace

const ShaderModuleInfo& shader_info(const std::string& name) {
  auto it = registry().find(name);
  if (it == registry().end()) throw Error(ErrorCode::invalid_argument, "no embedded shader named '" + name + "'");
  return it->second;
}

bool has_shader(const std::string& name) { return registry().count(name) != 0; }

}  // namespace vkgate::gpu
