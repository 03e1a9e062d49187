#version 450
#extension GL_GOOGLE_include_directive : require
// variant: moe_route
// The sparse MoE's routing, on the device so that a step needs no host round
// trip: for every token t of `rows`, the top k of the router's E logits
// (lowest index first among equal ones), their softmax probabilities over all
// E (renormalised over the k when norm_topk), then the (token, slot) entries
// grouped per expert by a counting sort:
//
//   choice[t·k + j]  expert of slot j          weight[t·k + j]  its weight
//   pos[t·k + j]     the entry's row in expert order (experts ascending)
//   rows[p]          the token of row p        count[e], load[e] = count[e] / rows
//   tiles            word 0 the tile count, then per tile (expert, first row,
//                    end row, 0): each expert's rows cut into runs of `tile_rows`
//   dispatch         per buffer s of `shard_experts` experts, the workgroup counts
//                    of the two grouped GEMMs over its tiles: {gx_up, n_s, 1, 0,
//                    gx_down, n_s, 1, 0} (vkCmdDispatchIndirect)
//
// The grouped GEMMs (moe_matmul.comp) take one tile per workgroup. One
// workgroup does it all: its phases meet at barriers, and real steps have few
// tokens × E logits (a 4096-token prefill with 512 experts: 2M).
// Within an expert, the order of its rows follows the atomics; nothing
// downstream depends on it (each row is computed alone, moe_combine.comp sums
// a token's slots in slot order).
#include "common.glsl"

layout(std430, binding = 0) readonly buffer Logits { float logits[]; };  // [rows, ld] fp32
layout(std430, binding = 1) coherent buffer Route { uint route[]; };
layout(std430, binding = 2) coherent buffer Tiles { uint tiles[]; };
layout(std430, binding = 3) writeonly buffer Dispatch { uint dispatch[]; };

#include "params.glsl"
struct Push {
  uint rows, experts, k, ld;  // ld: the logits' row stride (E, or E + 1 with the shared expert's gate)
  uint norm_topk, tile_rows;
  uint off_weight, off_pos, off_rows, off_count, off_cursor, off_load;  // word offsets into route
  uint shards, shard_experts, gx_up, gx_down;
};
PARAMS(Push)

// Whether logit (v, e) ranks before (best, at): larger first, then lower index.
bool before(float v, uint e, float best, uint at) { return v > best || (v == best && e < at); }

void main() {
  LOAD_PARAMS;
  const uint tid = gl_LocalInvocationID.x;
  for (uint e = tid; e < p.experts; e += WG) {
    route[p.off_count + e] = 0;
    route[p.off_cursor + e] = 0;
  }
  memoryBarrierBuffer();
  barrier();

  // The top k of each token's logits, in k passes: pass j takes the best
  // logit ranking after pass j − 1's.
  for (uint t = tid; t < p.rows; t += WG) {
    const uint row = t * p.ld;
    float top = logits[row];
    for (uint e = 1; e < p.experts; ++e) top = max(top, logits[row + e]);
    float sum = 0.0;
    for (uint e = 0; e < p.experts; ++e) sum += exp(logits[row + e] - top);
    float prev = uintBitsToFloat(0x7f800000u);  // +inf: every logit ranks after it
    uint prev_at = 0;
    float chosen = 0.0;
    for (uint j = 0; j < p.k; ++j) {
      float best = uintBitsToFloat(0xff800000u);
      uint at = p.experts;
      for (uint e = 0; e < p.experts; ++e) {
        const float v = logits[row + e];
        if (before(prev, prev_at, v, e) && (at == p.experts || before(v, e, best, at))) {
          best = v;
          at = e;
        }
      }
      if (at == p.experts) at = j;  // NaN logits: any distinct expert, its weight NaN below
      const float prob = exp(best - top) / sum;
      route[t * p.k + j] = at;
      route[p.off_weight + t * p.k + j] = floatBitsToUint(prob);
      chosen += prob;
      atomicAdd(route[p.off_count + at], 1u);
      prev = best;
      prev_at = at;
    }
    if (p.norm_topk != 0)
      for (uint j = 0; j < p.k; ++j) {
        const uint i = p.off_weight + t * p.k + j;
        route[i] = floatBitsToUint(uintBitsToFloat(route[i]) / chosen);
      }
  }
  memoryBarrierBuffer();
  barrier();

  // Each expert's first row (the cursor the scatter advances) and its tiles.
  if (tid == 0) {
    uint start = 0, n = 0, shard_first = 0;
    for (uint e = 0; e < p.experts; ++e) {
      const uint c = route[p.off_count + e];
      route[p.off_cursor + e] = start;
      route[p.off_load + e] = floatBitsToUint(float(c) / float(p.rows));
      for (uint r = 0; r < c; r += p.tile_rows, ++n) {
        tiles[4 + 4 * n] = e;
        tiles[5 + 4 * n] = start + r;
        tiles[6 + 4 * n] = start + min(c, r + p.tile_rows);
        tiles[7 + 4 * n] = 0;
      }
      start += c;
      if ((e + 1) % p.shard_experts == 0 || e + 1 == p.experts) {  // the last expert of buffer s
        const uint s = e / p.shard_experts;
        dispatch[8 * s] = p.gx_up;
        dispatch[8 * s + 4] = p.gx_down;
        dispatch[8 * s + 1] = dispatch[8 * s + 5] = n - shard_first;
        dispatch[8 * s + 2] = dispatch[8 * s + 6] = 1;
        dispatch[8 * s + 3] = dispatch[8 * s + 7] = 0;
        shard_first = n;
      }
    }
    tiles[0] = n;
  }
  memoryBarrierBuffer();
  barrier();

  for (uint i = tid; i < p.rows * p.k; i += WG) {
    const uint row = atomicAdd(route[p.off_cursor + route[i]], 1u);
    route[p.off_pos + i] = row;
    route[p.off_rows + row] = i / p.k;
  }
}
