#include "gpu/shaders.hpp"

#include <algorithm>
#include <functional>
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

// The interface of a module, read from its SPIR-V, so that a shader's bindings
// and parameter block are written once, in the shader:
//   bindings        descriptors of set 0 at bindings 0..n−1 (n = the highest + 1)
//   texel_bindings  those whose variable is a sampled buffer image (GLSL
//                   samplerBuffer): a variant may read a binding as a texel
//                   buffer where its source's other variants use a storage buffer
//   counts          descriptors at each binding: 1, or an array's length
//   param_bytes     the size of the parameter block at set 1, binding 0
//                   (params.glsl): the end of its last member, from the members'
//                   Offset (and arrays' ArrayStride) decorations
struct Interface {
  uint32_t bindings = 0, texel_bindings = 0, param_bytes = 0;
  std::map<uint32_t, uint32_t> counts;  // binding → array length, where it is an array
};

Interface reflect(const std::string& name, std::span<const uint32_t> spirv) {
  enum : uint32_t {
    kTypeInt = 21, kTypeFloat = 22, kTypeVector = 23, kTypeImage = 25, kTypeSampledImage = 27, kTypeArray = 28,
    kTypeStruct = 30, kTypePointer = 32, kConstant = 43, kVariable = 59, kDecorate = 71, kMemberDecorate = 72
  };
  enum : uint32_t { kArrayStride = 6, kBinding = 33, kDescriptorSet = 34, kOffset = 35, kDimBuffer = 5 };
  std::map<uint32_t, uint32_t> binding_of, set_of;           // variable id → binding / set
  std::map<uint32_t, bool> buffer_image;                     // type id → (pointer to) a buffer image
  std::map<uint32_t, uint32_t> scalar_bytes;                 // int/float type id → bytes
  std::map<uint32_t, std::pair<uint32_t, uint32_t>> vector;  // type id → (component type, count)
  std::map<uint32_t, std::vector<uint32_t>> members;         // struct id → member type ids
  std::map<uint32_t, std::map<uint32_t, uint32_t>> offsets;  // struct id → member → Offset
  std::map<uint32_t, uint32_t> pointee;                      // pointer type id → type id
  std::map<uint32_t, std::pair<uint32_t, uint32_t>> array;   // type id → (element type, length constant id)
  std::map<uint32_t, uint32_t> constant, array_stride;       // id → 32-bit constant value / ArrayStride
  std::vector<std::pair<uint32_t, uint32_t>> variables;      // (pointer type id, variable id)
  for (size_t at = 5; at < spirv.size();) {
    const uint32_t words = spirv[at] >> 16, op = spirv[at] & 0xffff;
    if (words == 0 || at + words > spirv.size()) break;
    const uint32_t* w = &spirv[at];
    if (op == kDecorate && words >= 4 && w[2] == kBinding) binding_of[w[1]] = w[3];
    if (op == kDecorate && words >= 4 && w[2] == kDescriptorSet) set_of[w[1]] = w[3];
    if (op == kDecorate && words >= 4 && w[2] == kArrayStride) array_stride[w[1]] = w[3];
    if (op == kConstant && words == 4) constant[w[2]] = w[3];
    if (op == kTypeArray && words >= 4) {
      array[w[1]] = {w[2], w[3]};
      buffer_image[w[1]] = buffer_image[w[2]];
    }
    if (op == kMemberDecorate && words >= 5 && w[3] == kOffset) offsets[w[1]][w[2]] = w[4];
    if ((op == kTypeInt || op == kTypeFloat) && words >= 3) scalar_bytes[w[1]] = w[2] / 8;
    if (op == kTypeVector && words >= 4) vector[w[1]] = {w[2], w[3]};
    if (op == kTypeStruct) members[w[1]] = std::vector<uint32_t>(w + 2, w + words);
    if (op == kTypeImage && words >= 4) buffer_image[w[1]] = w[3] == kDimBuffer;
    if (op == kTypeSampledImage && words >= 3) buffer_image[w[1]] = buffer_image[w[2]];
    if (op == kTypePointer && words >= 4) {
      buffer_image[w[1]] = buffer_image[w[3]];
      pointee[w[1]] = w[3];
    }
    if (op == kVariable && words >= 3) variables.push_back({w[1], w[2]});
    at += words;
  }
  auto fail = [&](const std::string& why) {
    return Error(ErrorCode::invalid_argument, "shader '" + name + "': " + why);
  };
  auto length = [&](const std::pair<uint32_t, uint32_t>& a) {
    const auto n = constant.find(a.second);
    if (n == constant.end()) throw fail("an array whose length is not a 32-bit constant");
    return n->second;
  };
  // Bytes of a parameter member: scalars, vectors, arrays and structs of them.
  std::function<uint32_t(uint32_t)> size_of = [&](uint32_t type) -> uint32_t {
    if (auto s = scalar_bytes.find(type); s != scalar_bytes.end()) return s->second;
    if (auto a = array.find(type); a != array.end()) return length(a->second) * array_stride[type];
    if (auto v = vector.find(type); v != vector.end()) return v->second.second * size_of(v->second.first);
    if (auto m = members.find(type); m != members.end()) {
      uint32_t end = 0;
      for (uint32_t i = 0; i < m->second.size(); ++i) end = std::max(end, offsets[type][i] + size_of(m->second[i]));
      return end;
    }
    throw fail("its parameter block holds a type other than scalars, vectors, arrays and structs");
  };
  Interface r;
  for (const auto& [type, id] : variables) {
    const auto binding = binding_of.find(id), set = set_of.find(id);
    if (binding == binding_of.end() || set == set_of.end()) continue;
    if (set->second == 0) {
      r.bindings = std::max(r.bindings, binding->second + 1);
      if (buffer_image[type]) r.texel_bindings |= 1u << binding->second;
      if (auto a = array.find(pointee.at(type)); a != array.end()) r.counts[binding->second] = length(a->second);
    } else if (set->second == 1 && binding->second == 0) {
      r.param_bytes = size_of(pointee.at(type));
    } else {
      throw fail("a descriptor at set " + std::to_string(set->second) + ", binding " +
                 std::to_string(binding->second) + " (only set 0 and the parameters at set 1, binding 0)");
    }
  }
  return r;
}

// Every variant of a source takes the same bindings (the host binds them all),
// though a variant may not declare one it does not read (softmax's texel view
// of the scores): the count is the source's widest.
std::map<std::string, ShaderModuleInfo> build_registry() {
  std::map<std::string, Interface> found;
  std::map<std::string, uint32_t> source_bindings;
  for (const Generated& g : kGenerated) {
    const Interface i = reflect(g.name, g.spirv);
    found[g.name] = i;
    source_bindings[g.source] = std::max(source_bindings[g.source], i.bindings);
  }
  std::map<std::string, ShaderModuleInfo> r;
  for (const Generated& g : kGenerated) {
    const Interface& i = found[g.name];
    std::vector<uint32_t> counts(source_bindings[g.source], 1);
    for (const auto& [binding, n] : i.counts) counts[binding] = n;
    r[g.name] = ShaderModuleInfo{g.name, g.spirv, source_bindings[g.source], i.texel_bindings, i.param_bytes,
                                 std::move(counts)};
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
