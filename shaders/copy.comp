#version 450
#extension GL_GOOGLE_include_directive : require
// dst[i] = src[i] over `count` vec4s, grid-stride: the bandwidth yardstick of
// `vkgate bench --peak` beside vkCmdCopyBuffer, since a copy command may take
// a path (copy engine, driver blit) that shaders do not.
#include "common.glsl"

layout(std430, binding = 0) readonly buffer Src { vec4 src[]; };
layout(std430, binding = 1) writeonly buffer Dst { vec4 dst[]; };

layout(push_constant) uniform Push {
  uint count;
} p;

void main() {
  const uint stride = gl_NumWorkGroups.x * WG;
  for (uint i = gl_GlobalInvocationID.x; i < p.count; i += stride) dst[i] = src[i];
}
