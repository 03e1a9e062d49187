#version 450
#extension GL_GOOGLE_include_directive : require
// Row softmax of scale·s over `keys` entries, in place, one workgroup per row.
// Rows are (batch, head, query t) of a [B, H, T, S] score tensor. Query t sits
// at absolute position past + t (past = S − T, plus the chunk's first query
// when the rows are a chunk of the queries); with `causal` it sees keys
// s ≤ past + t. An optional additive mask [B, 1, mask_tokens, S] is
// broadcast over heads; row t reads its mask row mask_first + t.
// A row whose every entry is −inf (fully masked) is written as zeros: the
// max would be −inf and exp(−inf − (−inf)) is NaN.
// Three passes over the row (max, sum, write), each recomputing exp from the
// scores, so that the only writes are the final ones: the TEXEL variant (CPU
// drivers) reads the scores through a texel view of the same buffer (binding
// 2), which then never sees a value this shader wrote.
#include "common.glsl"
#include "reduce.glsl"
#include "storage.glsl"

RW(0, s, F32)
IN(1, mask, F32)
#ifdef TEXEL
TEXEL_RO(2, score, F32)
#else
float score_ld(uint i) { return s_ld(i); }
#endif

layout(push_constant) uniform Push {
  uint rows, keys, tokens, heads, past;
  uint causal, has_mask;
  float scale;
  uint mask_tokens, mask_first;
} p;

float masked_score(uint base, uint mrow, uint k) {
  float v = score_ld(base + k) * p.scale;
  if (p.has_mask != 0) v += mask_ld(mrow + k);
  return v;
}

void main() {
  const uint row = gl_WorkGroupID.x + gl_WorkGroupID.y * gl_NumWorkGroups.x;
  if (row >= p.rows) return;  // the grid is split in 2-D past 65535 groups
  const uint t = row % p.tokens;
  const uint b = row / (p.tokens * p.heads);
  const uint base = row * p.keys;
  const uint mrow = (b * p.mask_tokens + p.mask_first + t) * p.keys;
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
