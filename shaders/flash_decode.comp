#version 450
#extension GL_GOOGLE_include_directive : require
// Variants (the build compiles one SPIR-V module per line: name, then defines):
// variant: flash_decode
// variant: flash_decode_f16 T=F16
// variant: flash_decode_bf16 T=BF16
// The kernel is flash_decode.glsl, which says what it does.
#include "flash_decode.glsl"
