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
// workgroup does it all, its phases meeting at barriers, and every phase is
// spread over its lanes: a step of up to RANK_ROWS tokens ranks each token's
// logits with the whole workgroup, more tokens take a lane each; the
// experts' first rows and tiles come from a scan of each lane's run of
// experts. (One lane's serial passes over the E logits and experts took 66 µs
// of a decode step's layer at 64 experts on an H200, 2026-11-28.)
// Within an expert, the order of its rows follows the atomics; nothing
// downstream depends on it (each row is computed alone, moe_combine.comp sums
// a token's slots in slot order).
#include "common.glsl"

layout(std430, binding = 0) readonly buffer Logits { float logits[]; };  // [rows, ld] fp32
layout(std430, binding = 1) coherent buffer Route { uint route[]; };
layout(std430, binding = 2) coherent buffer Tiles { uint tiles[]; };
layout(std430, binding = 3) coherent buffer Dispatch { uint dispatch[]; };

#include "params.glsl"
struct Push {
  uint rows, experts, k, ld;  // ld: the logits' row stride (E, or E + 1 with the shared expert's gate)
  uint norm_topk, tile_rows;
  uint off_weight, off_pos, off_rows, off_count, off_cursor, off_load;  // word offsets into route
  uint shards, shard_experts, gx_up, gx_down;
};
PARAMS(Push)

const uint RANK_ROWS = 8;      // tokens ranked by the whole workgroup, one after another
const uint SHARED_LOGITS = 1024;  // a ranked token's first logits kept in shared memory
shared float s_logit[SHARED_LOGITS];
shared float s_red[WG];
shared uint s_scan_rows[WG], s_scan_tiles[WG];
shared float s_chosen;

// Whether logit (v, e) ranks before (best, at): larger first, then lower index.
bool before(float v, uint e, float best, uint at) { return v > best || (v == best && e < at); }

// The workgroup's max (or sum) of each lane's v; WG is a power of two.
float reduce(float v, bool take_max) {
  const uint tid = gl_LocalInvocationID.x;
  s_red[tid] = v;
  barrier();
  for (uint half_ = WG / 2; half_ > 0; half_ /= 2) {
    if (tid < half_) s_red[tid] = take_max ? max(s_red[tid], s_red[tid + half_]) : s_red[tid] + s_red[tid + half_];
    barrier();
  }
  const float r = s_red[0];
  barrier();
  return r;
}

// The workgroup's inclusive scan of each lane's (rows, tiles).
void scan(uint rows, uint n) {
  const uint tid = gl_LocalInvocationID.x;
  s_scan_rows[tid] = rows;
  s_scan_tiles[tid] = n;
  barrier();
  for (uint off = 1; off < WG; off *= 2) {
    const uint a = tid >= off ? s_scan_rows[tid - off] : 0u, b = tid >= off ? s_scan_tiles[tid - off] : 0u;
    barrier();
    s_scan_rows[tid] += a;
    s_scan_tiles[tid] += b;
    barrier();
  }
}

float logit(uint t, uint e) { return e < SHARED_LOGITS ? s_logit[e] : logits[t * p.ld + e]; }

void main() {
  LOAD_PARAMS;
  const uint tid = gl_LocalInvocationID.x;
  for (uint e = tid; e < p.experts; e += WG) {
    route[p.off_count + e] = 0;
    route[p.off_cursor + e] = 0;
  }
  for (uint s = tid; s < p.shards; s += WG) {
    dispatch[8 * s] = p.gx_up;
    dispatch[8 * s + 4] = p.gx_down;
    dispatch[8 * s + 1] = dispatch[8 * s + 5] = 0;
    dispatch[8 * s + 2] = dispatch[8 * s + 6] = 1;
    dispatch[8 * s + 3] = dispatch[8 * s + 7] = 0;
  }
  memoryBarrierBuffer();
  barrier();

  if (p.rows <= RANK_ROWS) {
    // Each token's top k by rank: expert e takes slot j when j experts rank
    // before it. NaN logits rank after every number, by index, so that each
    // slot has one expert (its weight NaN, as the sum is).
    for (uint t = 0; t < p.rows; ++t) {
      float top = uintBitsToFloat(0xff800000u);
      for (uint e = tid; e < p.experts; e += WG) {
        const float v = logits[t * p.ld + e];
        if (e < SHARED_LOGITS) s_logit[e] = v;
        top = max(top, v);
      }
      top = reduce(top, true);
      float part = 0.0;
      for (uint e = tid; e < p.experts; e += WG) part += exp(logit(t, e) - top);
      const float sum = reduce(part, false);
      for (uint e = tid; e < p.experts; e += WG) {
        const float v = logit(t, e);
        const bool v_nan = isnan(v);
        uint rank = 0;
        for (uint o = 0; o < p.experts && rank < p.k; ++o) {
          const float w = logit(t, o);
          rank += (v_nan ? !isnan(w) || o < e : before(w, o, v, e)) ? 1u : 0u;
        }
        if (rank < p.k) {
          route[t * p.k + rank] = e;
          route[p.off_weight + t * p.k + rank] = floatBitsToUint(exp(v - top) / sum);
          atomicAdd(route[p.off_count + e], 1u);
        }
      }
      memoryBarrierBuffer();
      barrier();
      if (p.norm_topk != 0) {
        if (tid == 0) {  // in slot order, as a lane's passes below sum them
          float chosen = 0.0;
          for (uint j = 0; j < p.k; ++j) chosen += uintBitsToFloat(route[p.off_weight + t * p.k + j]);
          s_chosen = chosen;
        }
        barrier();
        for (uint j = tid; j < p.k; j += WG) {
          const uint i = p.off_weight + t * p.k + j;
          route[i] = floatBitsToUint(uintBitsToFloat(route[i]) / s_chosen);
        }
      }
      barrier();  // s_logit is the next token's
    }
  } else {
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
  }
  memoryBarrierBuffer();
  barrier();

  // Each expert's first row (the cursor the scatter advances) and its tiles:
  // lane i takes a run of experts, and the scan of the runs' rows and tiles
  // gives each run's start. Each buffer's tiles are summed by atomics.
  const uint per = (p.experts + WG - 1) / WG, first = min(tid * per, p.experts), end = min(first + per, p.experts);
  uint rows = 0, n = 0;
  for (uint e = first; e < end; ++e) {
    const uint c = route[p.off_count + e];
    rows += c;
    n += (c + p.tile_rows - 1) / p.tile_rows;
  }
  scan(rows, n);
  uint start = s_scan_rows[tid] - rows;
  n = s_scan_tiles[tid] - n;
  for (uint e = first; e < end; ++e) {
    const uint c = route[p.off_count + e];
    route[p.off_cursor + e] = start;
    route[p.off_load + e] = floatBitsToUint(float(c) / float(p.rows));
    const uint n0 = n;
    for (uint r = 0; r < c; r += p.tile_rows, ++n) {
      tiles[4 + 4 * n] = e;
      tiles[5 + 4 * n] = start + r;
      tiles[6 + 4 * n] = start + min(c, r + p.tile_rows);
      tiles[7 + 4 * n] = 0;
    }
    if (n > n0) atomicAdd(dispatch[8 * (e / p.shard_experts) + 1], n - n0);
    start += c;
  }
  if (tid == WG - 1) tiles[0] = s_scan_tiles[WG - 1];
  memoryBarrierBuffer();
  barrier();

  for (uint s = tid; s < p.shards; s += WG) dispatch[8 * s + 5] = dispatch[8 * s + 1];
  for (uint i = tid; i < p.rows * p.k; i += WG) {
    const uint row = atomicAdd(route[p.off_cursor + route[i]], 1u);
    route[p.off_pos + i] = row;
    route[p.off_rows + row] = i / p.k;
  }
}
