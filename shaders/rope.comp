#version 450
#extension GL_GOOGLE_include_directive : require
// Variants (the build compiles one SPIR-V module per line: name, then defines):
// variant: rope
// variant: rope_f16 T=F16
// variant: rope_bf16 T=BF16
// RoPE on the first `rotary` dims of each head, the rest copied. Rotate-half
// pairs (a, b) = (i, i + r/2), or interleaved pairs (2i, 2i + 1):
//   y[a] = x[a]·cos_i − x[b]·sin_i
//   y[b] = x[b]·cos_i + x[a]·sin_i                  (i < r/2)
// cos/sin come from a table built on the host in double precision
// (cos at [t·r/2 + i], sin after all cosines), because Vulkan only
// guarantees ~2⁻¹¹ for the shader's own sin/cos. With rotary = 0 this is a
// strided copy, which is how values are moved into [B, KV, S, Dh].
// Each thread reads both elements of its pair before writing, so in place is safe.
// Storage type: T for x and y; the table is fp32.
#include "common.glsl"
#include "storage.glsl"
#ifndef T
#define T F32
#endif

RO(0, x, T)
RO(1, table, F32)
RW(2, y, T)

#include "params.glsl"
struct Push {
  View in_view;
  View out_view;
  uint tokens, heads, dim, rotary;
  uint count;  // rows · (dim − rotary/2): one thread per pair or passed-through element
  uint interleaved;
};
PARAMS(Push)

void main() {
  LOAD_PARAMS;
  const uint gid = gl_GlobalInvocationID.x + gl_GlobalInvocationID.y * gl_NumWorkGroups.x * WG;
  if (gid >= p.count) return;
  const uint half_r = p.rotary / 2;
  const uint per_row = p.dim - half_r;
  const uint row = gid / per_row, i = gid - row * per_row;
  const uint bt = row / p.heads, h = row - bt * p.heads;
  const uint src = view_offset(p.in_view, p.tokens, bt, h, 0);
  const uint dst = view_offset(p.out_view, p.tokens, bt, h, 0);
  if (i < half_r) {
    const uint t = bt % p.tokens;
    const float c = table_ld(t * half_r + i);
    const float s = table_ld(p.tokens * half_r + t * half_r + i);
    const uint a = p.interleaved != 0 ? 2 * i : i, b = p.interleaved != 0 ? 2 * i + 1 : i + half_r;
    const float x0 = x_ld(src + a), x1 = x_ld(src + b);
    y_st(dst + a, x0 * c - x1 * s);
    y_st(dst + b, x1 * c + x0 * s);
  } else {
    const uint d = i + half_r;  // dims rotary..dim−1
    y_st(dst + d, x_ld(src + d));
  }
}
