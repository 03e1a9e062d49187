// Each dispatch's parameters. The recorder writes them per dispatch into a
// read-only storage buffer (set 1, binding 0; std430, the layout of the C++
// mirror in src/ops) that it may rewrite between submissions without
// recording the command buffer again (src/gpu/recorder.hpp). A shader
// declares `struct Push { ... };`, then PARAMS(Push), and starts main() with
// LOAD_PARAMS: one read of the block into the private `p`, which the rest of
// the shader uses.
// A storage buffer, not a uniform buffer: lavapipe compiles a new variant of a
// shader for every distinct value of the uniforms it can inline (loop bounds,
// branch conditions), at dispatch time.
#ifndef VKGATE_PARAMS_GLSL
#define VKGATE_PARAMS_GLSL
#define PARAMS(T) \
  layout(std430, set = 1, binding = 0) restrict readonly buffer ParamsBuffer { T params_in; }; \
  T p;
#define LOAD_PARAMS p = params_in
#endif
