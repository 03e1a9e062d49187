#version 450
// GPU-assisted validation's positive control (tests/test_gpuav.cpp): every
// invocation writes one float, so a dispatch of more invocations than the
// bound range holds writes past its end.
layout(local_size_x = 64) in;
layout(std430, binding = 0) buffer Out { float data[]; };
void main() {
  data[gl_GlobalInvocationID.x] = float(gl_GlobalInvocationID.x);  // out of bounds past the range
}
