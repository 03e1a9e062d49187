#version 450
#extension GL_GOOGLE_include_directive : require
// Variants (the build compiles one SPIR-V module per line: name, then defines):
// variant: softmax
// variant: softmax_sg ONE_SUBGROUP TEXEL
// variant: softmax_sg4 ONE_SUBGROUP TEXEL VEC4
// Row softmax of scale·s over `keys` entries, in place, one workgroup per row.
// Rows are (batch, head, query t) of a [B, H, T, S] score tensor whose rows
// are `ld` ≥ S floats apart (a plan whose keys grow from step to step keeps
// the stride of its capacity). Query t sits at absolute position past + t
// (past = S − T, plus the chunk's first query when the rows are a chunk of
// the queries); with `causal` it sees keys s ≤ past + t. An optional additive
// mask [B, 1, mask_tokens, S], rows also `ld` apart, is broadcast over heads;
// row t reads its mask row mask_first + t.
// A row whose every entry is −inf (fully masked) is written as zeros: the
// max would be −inf and exp(−inf − (−inf)) is NaN.
// Three passes over the row (max, sum, write), each recomputing exp from the
// scores, so that the only writes are the final ones: the TEXEL variant (CPU
// drivers) reads the scores through a texel view of the same buffer (binding
// 2), which then never sees a value this shader wrote. VEC4 (with TEXEL, for
// rows a multiple of 4 floats apart) reads RGBA32F texels and stores vec4s (on
// llvmpipe every store is a loop over the lanes, so 4 floats per store cut
// that loop 4×), and finds max and sum in one online pass: two passes.
#include "common.glsl"
#include "reduce.glsl"
#include "storage.glsl"

#ifdef VEC4
layout(std430, binding = 0) writeonly buffer s4_buf { vec4 s4[]; };
layout(binding = 1) uniform samplerBuffer mask4;
layout(binding = 2) uniform samplerBuffer score4;
#else
RW(0, s, F32)
IN(1, mask, F32)
#ifdef TEXEL
TEXEL_RO(2, score, F32)
#else
float score_ld(uint i) { return s_ld(i); }
#endif
#endif

#include "params.glsl"
struct Push {
  uint rows, keys, tokens, heads, past;
  uint causal, has_mask;
  float scale;
  uint mask_tokens, mask_first;
  uint ld;  // floats between rows of the scores and of the mask
};
PARAMS(Push)

#ifdef VEC4
// A specialization constant, not the push constant: llvmpipe executes both
// sides of every branch, so a run-time test would still fetch the mask.
layout(constant_id = 1) const bool HAS_MASK = false;

// Entries 4j..4j+3 of the row; those at or past `visible` are −inf (and
// never read from beyond it: j may be one past the last visible vec4).
vec4 masked_score4(uint base4, uint mrow4, uint j, uint visible) {
  const uint f = min(j, (visible - 1) / 4);
  vec4 v = texelFetch(score4, int(base4 + f)) * p.scale;
  if (HAS_MASK) v += texelFetch(mask4, int(mrow4 + f));
  const bvec4 hidden = greaterThanEqual(uvec4(4 * j) + uvec4(0, 1, 2, 3), uvec4(visible));
  return mix(v, vec4(-1.0 / 0.0), hidden);
}

float max4(vec4 v) { return max(max(v.x, v.y), max(v.z, v.w)); }

void main() {
  LOAD_PARAMS;
  const uint row = gl_WorkGroupID.x + gl_WorkGroupID.y * gl_NumWorkGroups.x;
  if (row >= p.rows) return;
  const uint t = row % p.tokens;
  const uint b = row / (p.tokens * p.heads);
  const uint keys4 = (p.keys + 3) / 4;  // the vec4s the row's keys touch
  const uint base4 = row * (p.ld / 4);
  const uint mrow4 = (b * p.mask_tokens + p.mask_first + t) * (p.ld / 4);
  const uint tid = gl_LocalInvocationID.x;

  const uint visible = p.causal != 0 ? min(p.keys, p.past + t + 1) : p.keys;
  const uint visible4 = (visible + 3) / 4;
  // One pass for max and sum (online: the sum is rescaled when the max grows).
  float m = -1.0 / 0.0, sm = 0.0;
  // Four vec4s a step, so the rescaling exp is paid once per 16 scores.
  for (uint j = 4 * tid; j < visible4; j += 4 * WG) {
    const vec4 v0 = masked_score4(base4, mrow4, j, visible);
    const vec4 v1 = masked_score4(base4, mrow4, j + 1, visible);
    const vec4 v2 = masked_score4(base4, mrow4, j + 2, visible);
    const vec4 v3 = masked_score4(base4, mrow4, j + 3, visible);
    const float mn = max(m, max(max(max4(v0), max4(v1)), max(max4(v2), max4(v3))));
    const vec4 e = exp(v0 - mn) + exp(v1 - mn) + exp(v2 - mn) + exp(v3 - mn);
    // While mn is −inf (no finite score yet in this lane), e is NaN: keep sm 0.
    sm = isinf(mn) ? 0.0 : sm * exp(m - mn) + (e.x + e.y + e.z + e.w);
    m = mn;
  }
  const float mx = wg_max(m);

  if (isinf(mx) && mx < 0.0) {
    for (uint j = tid; j < keys4; j += WG) s4[base4 + j] = vec4(0.0);
    return;
  }
  const float inv = 1.0 / wg_sum(isinf(m) ? 0.0 : sm * exp(m - mx));
  for (uint j = tid; j < visible4; j += WG) s4[base4 + j] = exp(masked_score4(base4, mrow4, j, visible) - mx) * inv;
  for (uint j = visible4 + tid; j < keys4; j += WG) s4[base4 + j] = vec4(0.0);
}
#else
float masked_score(uint base, uint mrow, uint k) {
  float v = score_ld(base + k) * p.scale;
  if (p.has_mask != 0) v += mask_ld(mrow + k);
  return v;
}

void main() {
  LOAD_PARAMS;
  const uint row = gl_WorkGroupID.x + gl_WorkGroupID.y * gl_NumWorkGroups.x;
  if (row >= p.rows) return;  // the grid is split in 2-D past 65535 groups
  const uint t = row % p.tokens;
  const uint b = row / (p.tokens * p.heads);
  const uint base = row * p.ld;
  const uint mrow = (b * p.mask_tokens + p.mask_first + t) * p.ld;
  const uint tid = gl_LocalInvocationID.x;

  // Causal: keys past `visible` are −inf, so they are skipped, not computed.
  const uint visible = p.causal != 0 ? min(p.keys, p.past + t + 1) : p.keys;
  float mx = -1.0 / 0.0;
  for (uint k = tid; k < visible; k += WG) mx = max(mx, masked_score(base, mrow, k));
  mx = wg_max(mx);

  if (isinf(mx) && mx < 0.0) {
    for (uint k = tid; k < p.keys; k += WG) s_st(base + k, 0.0);
    return;
  }
  float sum = 0.0;
  for (uint k = tid; k < visible; k += WG) sum += exp(masked_score(base, mrow, k) - mx);
  const float inv = 1.0 / wg_sum(sum);
  for (uint k = tid; k < visible; k += WG) s_st(base + k, exp(masked_score(base, mrow, k) - mx) * inv);
  for (uint k = visible + tid; k < p.keys; k += WG) s_st(base + k, 0.0);
}
#endif
