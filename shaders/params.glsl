// Each dispatch's parameters: a uniform block (set 1, binding 0, std140)
// that the recorder fills per dispatch and can rewrite between submissions
// without recording the command buffer again (src/gpu/recorder.hpp). The
// host mirrors in src/ops keep nested structs (View) 16-byte aligned, as
// std140 lays them out.
#ifndef VKGATE_PARAMS_GLSL
#define VKGATE_PARAMS_GLSL
#define PARAMS layout(std140, set = 1, binding = 0) uniform
#endif
