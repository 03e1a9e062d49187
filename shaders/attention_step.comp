#version 450
#extension GL_GOOGLE_include_directive : require
// Variants (the build compiles one SPIR-V module per line: name, then defines):
// variant: attention_step
// variant: attention_step_f16 T=F16
// variant: attention_step_bf16 T=BF16
// variant: attention_step_seqs SEQUENCES
// variant: attention_step_seqs_f16 T=F16 SEQUENCES
// variant: attention_step_seqs_bf16 T=BF16 SEQUENCES
// One step's attention on a CPU driver: softmax(q·kᵀ·scale)·v for a few
// positions of each sequence, scores, softmax and values in one dispatch.
// Through a score matrix that is three dispatches per sequence and layer,
// and lavapipe spends ~0.1 ms on each, whatever its size: with 8 sequences
// in a step, 28 layers paid ~65 ms of a 317 ms step for them.
// SEQUENCES: the keys and values are arrays of up to MAX_SEQS caches (one
// per sequence of a batched step, each its own buffer and length); without
// it, one cache [B, KV, stride, Dh] whose sequences share their length.
//
// One workgroup per (KV head, position t, sequence b) holds the G query
// heads of that KV head as rows, and walks the visible keys in blocks of WG
// with an online softmax:
// - scores: lane i scores key i against every row (q from each lane's own
//   copy: 47 → 38 ms for a step of 8 sequences at ~70 positions, where it
//   read q from shared memory);
// - one lane per row takes the block's maximum, rescales its sum and turns
//   the scores into probabilities (a serial loop: ~3 ms of those 47);
// - values: lanes split into CH chunks of 8 dims × P key partitions, each
//   lane keeping its chunk of every row; the partitions are summed at the end.
#include "common.glsl"
#include "storage.glsl"
#ifndef T
#define T F32
#endif

layout(constant_id = 1) const uint G = 2;          // query heads per KV head: the rows
layout(constant_id = 2) const uint HEAD_DIM = 128; // a multiple of 8
const uint CH = HEAD_DIM / 8;                      // 8-element chunks per row
const uint P = WG / CH;                            // key partitions in the values phase (WG ≥ CH)
const uint MAX_SEQS = 8;

VEC8_RO(0, q, T)
#ifdef SEQUENCES
VEC8_ARRAY_RO(1, k, T, MAX_SEQS)
VEC8_ARRAY_RO(2, v, T, MAX_SEQS)
#else
VEC8_RO(1, k, T)
VEC8_RO(2, v, T)
#define k_ld8_at(a, i, lo, hi) k_ld8(i, lo, hi)
#define v_ld8_at(a, i, lo, hi) v_ld8(i, lo, hi)
#endif
RW(3, o, T)

#include "params.glsl"
struct Push {
  uint heads, kv_heads, tokens;
  uint tiled;    // query head of member g: g·KV + kvh, else kvh·G + g
  uint causal;   // position t sees keys < past + t + 1, else < past + tokens
  uint out_ld;   // elements between rows (b, t) of out [B·T, out_ld]; head h at h·HEAD_DIM
  float scale;
  uint out_base;  // where row (0, 0) of out starts
  uvec4 past[2], stride[2];  // per sequence (SEQUENCES), else [0] for all: cached positions, cache capacity
};
PARAMS(Push)

shared vec4 q_s[G * CH * 2];       // the rows of q, scaled, as lo/hi halves per chunk
shared float sc_s[G * WG];         // a block's scores, then probabilities: [row][key]
shared float m_s[G], l_s[G], corr_s[G];
shared vec4 red_s[P * G * CH * 2];  // the partitions' accumulators

uint at(uvec4 v[2], uint i) { return v[i / 4][i % 4]; }

void main() {
  LOAD_PARAMS;
  const uint kvh = gl_WorkGroupID.x, t = gl_WorkGroupID.y, b = gl_WorkGroupID.z;
  const uint tid = gl_LocalInvocationID.x;
#ifdef SEQUENCES
  const uint seq = b, past = at(p.past, b), stride = at(p.stride, b);
  const uint kv_base = kvh * stride * CH;  // in chunks
#else
  const uint seq = 0, past = at(p.past, 0), stride = at(p.stride, 0);
  const uint kv_base = (b * p.kv_heads + kvh) * stride * CH;
#endif
  const uint keys = p.causal != 0 ? past + t + 1 : past + p.tokens;
  const float NEG_INF = -1.0 / 0.0;

  for (uint e = tid; e < G * CH; e += WG) {
    const uint g = e / CH, c = e % CH;
    const uint h = p.tiled != 0 ? g * p.kv_heads + kvh : kvh * G + g;
    vec4 lo, hi;
    q_ld8(((b * p.heads + h) * p.tokens + t) * CH + c, lo, hi);
    q_s[2 * e] = lo * p.scale;
    q_s[2 * e + 1] = hi * p.scale;
  }
  if (tid < G) {
    m_s[tid] = NEG_INF;
    l_s[tid] = 0.0;
  }
  const uint c = tid % CH, part = tid / CH;  // this lane's chunk and partition in the values phase
  vec4 acc[G * 2];
  [[unroll]] for (uint i = 0; i < G * 2; ++i) acc[i] = vec4(0.0);
  barrier();
  // Every lane's own copy of q: faster on llvmpipe than reading q_s in the
  // loop (see the header), likely because it loads shared memory lane by lane
  // and a private array as whole SIMD vectors.
  vec4 qr[G * CH * 2];
  [[unroll]] for (uint i = 0; i < G * CH * 2; ++i) qr[i] = q_s[i];

  for (uint k0 = 0; k0 < keys; k0 += WG) {
    const uint key = k0 + tid;
    float s[G];
    [[unroll]] for (uint g = 0; g < G; ++g) s[g] = NEG_INF;
    if (key < keys) {
      [[unroll]] for (uint g = 0; g < G; ++g) s[g] = 0.0;
      [[unroll]] for (uint ch = 0; ch < CH; ++ch) {
        vec4 lo, hi;
        k_ld8_at(seq, kv_base + key * CH + ch, lo, hi);
        [[unroll]] for (uint g = 0; g < G; ++g)
          s[g] += dot(qr[2 * (g * CH + ch)], lo) + dot(qr[2 * (g * CH + ch) + 1], hi);
      }
    }
    [[unroll]] for (uint g = 0; g < G; ++g) sc_s[g * WG + tid] = s[g];
    barrier();
    if (tid < G) {  // every block holds a visible key: the maximum is finite
      float mx = m_s[tid];
      for (uint j = 0; j < WG; ++j) mx = max(mx, sc_s[tid * WG + j]);
      float sum = 0.0;
      for (uint j = 0; j < WG; ++j) {
        const float pr = exp(sc_s[tid * WG + j] - mx);
        sc_s[tid * WG + j] = pr;
        sum += pr;
      }
      const float corr = exp(m_s[tid] - mx);
      corr_s[tid] = corr;
      l_s[tid] = l_s[tid] * corr + sum;
      m_s[tid] = mx;
    }
    barrier();
    if (part < P) {
      [[unroll]] for (uint g = 0; g < G; ++g) {
        acc[2 * g] *= corr_s[g];
        acc[2 * g + 1] *= corr_s[g];
      }
      const uint n = min(WG, keys - k0);
      for (uint j = part; j < n; j += P) {
        vec4 lo, hi;
        v_ld8_at(seq, kv_base + (k0 + j) * CH + c, lo, hi);
        [[unroll]] for (uint g = 0; g < G; ++g) {
          const float pr = sc_s[g * WG + j];
          acc[2 * g] += pr * lo;
          acc[2 * g + 1] += pr * hi;
        }
      }
    }
    barrier();
  }

  if (part < P)
    [[unroll]] for (uint g = 0; g < G; ++g) {
      red_s[2 * ((part * G + g) * CH + c)] = acc[2 * g];
      red_s[2 * ((part * G + g) * CH + c) + 1] = acc[2 * g + 1];
    }
  barrier();
  for (uint e = tid; e < G * CH * 2; e += WG) {
    const uint g = e / (CH * 2), quad = e % (CH * 2);
    vec4 sum = vec4(0.0);
    for (uint q = 0; q < P; ++q) sum += red_s[(q * G + g) * CH * 2 + quad];
    sum /= l_s[g];
    const uint h = p.tiled != 0 ? g * p.kv_heads + kvh : kvh * G + g;
    const uint base = p.out_base + (b * p.tokens + t) * p.out_ld + h * HEAD_DIM + quad * 4;
    [[unroll]] for (uint i = 0; i < 4; ++i) o_st(base + i, sum[i]);
  }
}
