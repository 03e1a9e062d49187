#version 450
#extension GL_GOOGLE_include_directive : require
// Variants (the build compiles one SPIR-V module per line: name, then defines):
// variant: copy
// variant: copy_texel TEXEL
// dst[i] = src[i] over `count` vec4s, grid-stride: the bandwidth yardstick of
// `vkgate bench --peak` beside vkCmdCopyBuffer, since a copy command may take
// a path (copy engine, driver blit) that shaders do not. The TEXEL variant
// (CPU drivers) reads through an RGBA32F texel view, as the CPU kernels do:
// on llvmpipe that is 3.4× the storage-buffer copy.
#include "common.glsl"

#ifdef TEXEL
layout(binding = 0) uniform samplerBuffer src_tex;
vec4 src_ld(uint i) { return texelFetch(src_tex, int(i)); }
#else
layout(std430, binding = 0) readonly buffer Src { vec4 src[]; };
vec4 src_ld(uint i) { return src[i]; }
#endif
layout(std430, binding = 1) writeonly buffer Dst { vec4 dst[]; };

#include "params.glsl"
struct Push {
  uint count;
};
PARAMS(Push)

void main() {
  LOAD_PARAMS;
  const uint stride = gl_NumWorkGroups.x * WG;
  for (uint i = gl_GlobalInvocationID.x; i < p.count; i += stride) dst[i] = src_ld(i);
}
