#version 450
#extension GL_GOOGLE_include_directive : require
// Variants (the build compiles one SPIR-V module per line: name, then defines):
// variant: flash_decode_prep
// variant: flash_decode_prep_f16 T=F16
// variant: flash_decode_prep_bf16 T=BF16
// flash_decode.glsl with qkv_prepare.comp's work folded in (PREPARE, described
// there). A source of its own: its three more bindings (11) would otherwise be
// every flash_decode variant's, beyond some devices' 8 storage buffers a stage.
#define PREPARE
#include "flash_decode.glsl"
