#version 450
#extension GL_GOOGLE_include_directive : require
// Variants (the build compiles one SPIR-V module per line: name, then defines):
// variant: embed
// variant: embed_f16 T=F16
// variant: embed_bf16 T=BF16
// variant: embed_blocks BLOCKS
// variant: embed_blocks_f16 BLOCKS X_T=F16
// The embedding gather: x[bt, :] = table[id(bt) − first, :] for the token
// ids of rows first..first+count−1 of the table (a table larger than one
// device buffer is split into row chunks, one dispatch each; ids outside this
// chunk are another dispatch's). Table rows `ld` elements apart, storage T;
// x fp32 [rows, dim]; ids int32 (range-checked on the host).
//
// BLOCKS: the table in one of ggml's block formats as stored (a GGUF's
// token_embd, bytes as in the file: specialization constant 1 is ggml's type
// id, blocks.glsl), rows `ld` bytes apart, the buffer padded by
// ops::qmatmul_padding; the selected rows are dequantized 8 elements at a
// time (dequant8), so only the rows the ids name are expanded. dim is whole
// blocks.
//
// identity (ops::dequantize_rows): no ids, row r of the table into row out0 + r
// of x, stored as X_T (fp16: the weight operand of a tensor-core product).
#include "common.glsl"
#include "storage.glsl"
#ifndef T
#define T F32
#endif
#ifndef X_T
#define X_T F32
#endif

layout(std430, binding = 0) readonly buffer Ids { int ids[]; };
#ifdef BLOCKS
layout(constant_id = 1) const uint FMT = 8;
layout(std430, binding = 1) readonly buffer TableWords { uint table_words[]; };
#define BLOCK_WORD(i) table_words[i]
#define BLOCK_PRECISE precise  // the values of vkgate::dequantize, bit for bit, on any driver
#include "blocks.glsl"
#else
RO(1, table, T)
#endif
RW(2, x, X_T)

#include "params.glsl"
struct Push {
  uint rows, dim, ld, first, count;
  uint identity, out0;
};
PARAMS(Push)

void main() {
  LOAD_PARAMS;
  const uint r = gl_WorkGroupID.x + gl_WorkGroupID.y * gl_NumWorkGroups.x;
  if (r >= p.rows) return;
  const uint row = p.identity != 0u ? r : uint(ids[r]) - p.first;  // wraps past count for ids below first
  if (row >= p.count) return;
  const uint dst = r + p.out0;
#ifdef BLOCKS
  for (uint c = gl_LocalInvocationID.x; c < p.dim / 8u; c += WG) {
    vec4 lo, hi;
    dequant8(row * p.ld, c, lo, hi);
    const uint at = dst * p.dim + 8u * c;
    [[unroll]] for (uint i = 0; i < 4u; ++i) {
      x_st(at + i, lo[i]);
      x_st(at + 4u + i, hi[i]);
    }
  }
#else
  for (uint d = gl_LocalInvocationID.x; d < p.dim; d += WG) x_st(dst * p.dim + d, table_ld(row * p.ld + d));
#endif
}
