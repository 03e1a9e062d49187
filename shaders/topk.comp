#version 450
#extension GL_GOOGLE_include_directive : require
// Variants (the build compiles one SPIR-V module per line: name, then defines):
// variant: topk
// The k (≤ 256) largest of each row of fp32 logits x [rows, n] (rows ld
// apart), most likely first and equal values the lower id first, for a
// sampler that reads k values instead of n: one workgroup of 256 per row.
//   out [rows, out_ld] uvec2: out[0..k) = (value bits, id); out[k] = (the
//   elements equal to the k-th that did not fit, 0): when > 0 the k are not
//   every id tied with the k-th (transformers' top_k keeps them all).
// Values are compared as keys: the float bits mapped so that unsigned order
// is float order. The k-th largest key is found a byte at a time (4 rounds of
// a 256-bin histogram over the elements that still match the bytes found so
// far), after a bound that keeps most elements out of the histograms: the
// k-th largest of the threads' maxima (each thread's max is one element, so
// at least k elements reach it: every one of the k largest does). The k are
// then gathered in index order (each thread a contiguous range, placed by an
// exclusive scan of the threads' counts: deterministic) and sorted in shared
// memory (bitonic).
#include "common.glsl"
#include "params.glsl"

layout(std430, binding = 0) restrict readonly buffer X { float x[]; };
layout(std430, binding = 1) restrict writeonly buffer Out { uvec2 out_kv[]; };
struct Push {
  uint n, k, ld, out_ld;
};
PARAMS(Push)

const uint KMAX = 256;  // = WG (the pipeline is made with 256)
shared uint hist[256];
shared uint scan[KMAX];
shared uint skey[KMAX], sid[KMAX];
shared uint found[2];

uint key_of(float v) {
  const uint b = floatBitsToUint(v);
  return (b & 0x80000000u) != 0u ? ~b : b | 0x80000000u;
}
float value_of(uint key) { return uintBitsToFloat((key & 0x80000000u) != 0u ? key & 0x7fffffffu : ~key); }

// skey/sid sorted: larger keys first, equal keys the lower id first.
void sort_shared(uint tid) {
  for (uint size = 2u; size <= KMAX; size <<= 1u)
    for (uint stride = size >> 1u; stride > 0u; stride >>= 1u) {
      const uint j = tid ^ stride;
      if (j > tid) {
        const bool first = skey[tid] > skey[j] || (skey[tid] == skey[j] && sid[tid] < sid[j]);
        if (first != ((tid & size) == 0u)) {
          const uint k = skey[tid], i = sid[tid];
          skey[tid] = skey[j];
          sid[tid] = sid[j];
          skey[j] = k;
          sid[j] = i;
        }
      }
      barrier();
    }
}

// The exclusive prefix sum over the threads of `v`.
uint exclusive_scan(uint tid, uint v) {
  scan[tid] = v;
  barrier();
  for (uint d = 1u; d < KMAX; d <<= 1u) {
    const uint add = tid >= d ? scan[tid - d] : 0u;
    barrier();
    scan[tid] += add;
    barrier();
  }
  const uint before = scan[tid] - v;
  barrier();
  return before;
}

void main() {
  LOAD_PARAMS;
  const uint tid = gl_LocalInvocationID.x, row = gl_WorkGroupID.x, base = row * p.ld;
  const uint n = p.n, k = min(p.k, n);

  // The bound: the k-th largest of the threads' maxima (0 for a thread without elements).
  uint most = 0u;
  for (uint i = tid; i < n; i += KMAX) most = max(most, key_of(x[base + i]));
  skey[tid] = most;
  sid[tid] = tid;
  barrier();
  sort_shared(tid);
  const uint bound = skey[k - 1u];
  barrier();

  // The k-th largest key, a byte at a time; `want`: how many of the keys equal to it are taken.
  uint prefix = 0u, mask = 0u, want = k;
  for (int shift = 24; shift >= 0; shift -= 8) {
    hist[tid] = 0u;
    barrier();
    for (uint i = tid; i < n; i += KMAX) {
      const uint key = key_of(x[base + i]);
      if (key >= bound && (key & mask) == prefix) atomicAdd(hist[(key >> uint(shift)) & 255u], 1u);
    }
    barrier();
    if (tid == 0u) {
      uint above = 0u, d = 255u;
      while (d > 0u && above + hist[d] < want) above += hist[d--];
      found[0] = d;
      found[1] = want - above;
    }
    barrier();
    prefix |= found[0] << uint(shift);
    mask |= 255u << uint(shift);
    want = found[1];
    barrier();
  }

  // Gathered in index order: every key above the k-th, and the first `want` equal to it.
  const uint chunk = (n + KMAX - 1u) / KMAX, lo = min(n, tid * chunk), hi = min(n, lo + chunk);
  uint above = 0u, equal = 0u;
  for (uint i = lo; i < hi; ++i) {
    const uint key = key_of(x[base + i]);
    above += key > prefix ? 1u : 0u;
    equal += key == prefix ? 1u : 0u;
  }
  uint at_above = exclusive_scan(tid, above), at_equal = exclusive_scan(tid, equal);
  if (tid == KMAX - 1u) found[0] = at_equal + equal;  // every key equal to the k-th
  skey[tid] = 0u;  // the slots past k sort last
  sid[tid] = 0xffffffffu;
  barrier();
  const uint taken_above = k - want;
  for (uint i = lo; i < hi; ++i) {
    const uint key = key_of(x[base + i]);
    if (key > prefix) {
      skey[at_above] = key;
      sid[at_above++] = i;
    } else if (key == prefix) {
      if (at_equal < want) {
        skey[taken_above + at_equal] = key;
        sid[taken_above + at_equal] = i;
      }
      ++at_equal;
    }
  }
  barrier();
  sort_shared(tid);
  const uint out_at = row * p.out_ld;
  if (tid < k) out_kv[out_at + tid] = uvec2(floatBitsToUint(value_of(skey[tid])), sid[tid]);
  if (tid == 0u) out_kv[out_at + k] = uvec2(found[0] - want, 0u);
}
