// Shared by the chunkwise GLA kernels (gla_chunk_*.comp), included after
// their bindings, with T defined.
//
// Gated linear attention in chunks of C tokens (GLA's chunkwise form; the
// definition is gla_recurrent.comp's). Within a chunk, with b_t = Σ_{u≤t} log α_u
// (per state row, from the chunk's start) and B = b_{L−1}:
//   o_t   = q̂_t·(e^{b_t} ⊙ S) + Σ_{s≤t} (Σ_i q̂_t[i] k̃_s[i] e^{b_t[i]−b_s[i]}) v_s
//   S_end = e^B ⊙ S + Σ_t (k̃_t ⊙ e^{B−b_t})ᵀ v_t
// q̂ = scale·φ(q). Five dispatches, a shader each:
//   keys, queries  per (chunk, head, state row): b_t (keys) and the scaled
//            vectors (their bindings say which); queries read keys' b_t.
//   scores   per (chunk, query head): the masked intra-chunk scores P [C, C].
//   state    per (state tile, query head): the pass over the chunks in order,
//            the tile held in registers; writes each chunk's q̂·(e^b ⊙ S) for
//            its rows (one of the first parts − 1 of o), then advances S.
//   intra    per (chunk, query head, column tile): P·V, o's last part.
// gla_output.comp sums the parts. The state is read from `state` at the start
// and written back at the end, as in the recurrent scan.
// Every exponent a kernel takes is ≤ 0, except where noted, so nothing
// overflows: the scores factor e^{b_t−b_s} through sub-blocks of 8 tokens,
// qr_t = q̂_t e^{b_t−b_f} (b_f: b at the first token of t's sub-block) and
// kr_s = k̃_s e^{b_l−b_s} (b_l: b at the last token of s's sub-block), so that
// for sub-blocks I > J: e^{b_t−b_s} = [qr] · e^{b_f(I)−b_l(J)} · [kr], each ≤ 1.
// On a diagonal sub-block the middle factor is e^{b_f−b_l} ≥ 1: taken as is
// while ≤ e^60, else that sub-block is computed element by element.
// SHUFFLE (CPU drivers, 8-lane subgroups; see gemm_cpu.glsl for why): the
// lanes share tile rows through subgroup shuffles and own distinct columns;
// without it every invocation loads the rows it needs itself.
#ifdef SHUFFLE
#extension GL_KHR_shader_subgroup_shuffle : require
#endif

const uint C = 64;   // tokens per chunk
const uint SUB = 8;  // tokens per sub-block of the scores
layout(constant_id = 1) const uint DK = 64;  // d_k: the state's rows
layout(constant_id = 2) const uint RM = 64;  // STATE: state rows per workgroup (a multiple of 8)
layout(constant_id = 3) const uint RN = 8;   // STATE, INTRA: columns per invocation

#include "params.glsl"
struct Push {
  View q_view, k_view, v_view, gk_view;  // (bt, head, d): q over H heads, the others over KV
  uint tokens, heads, kv_heads, dv;
  uint feature_map, convex;
  float normalizer, clamp_min, scale;
  uint batch, chunks, parts;  // chunks per sequence; parts of o (STATE's row blocks, then INTRA's)
};
PARAMS(Push)
#include "gla.glsl"

// Tokens per step of the products over tokens (the state pass, the intra
// part): each value of the register tile is loaded and stored once per TB
// tokens, llvmpipe spilling the tile to the stack (the state pass, T 1024,
// 2 heads, d_k 256, d_v 512: TB 1 73 ms, 2 46–52, 4 59, 8 66).
const uint TB = 2;

// The tile rows (m = 0 .. R−1) an invocation multiplies by its columns; the
// _TB forms hold them for TB tokens (u = 0 .. TB−1). With
// SHUFFLE lane l loads rows 8q + l and ROW(name, q, r) takes row 8q + r from
// lane r; without, each invocation loads all R rows.
#ifdef SHUFFLE
#define ROWS(name, R, EXPR)                                                  \
  float name[(R) / 8];                                                       \
  [[unroll]] for (uint q_ = 0; q_ < (R) / 8; ++q_) {                         \
    const uint m = q_ * 8 + gl_SubgroupInvocationID;                         \
    name[q_] = (EXPR);                                                       \
  }
#define ROW(name, q, r) subgroupShuffle(name[q], r)
#define ROWS_TB(name, R, EXPR)                                               \
  float name[TB][(R) / 8];                                                   \
  [[unroll]] for (uint u = 0; u < TB; ++u)                                   \
    [[unroll]] for (uint q_ = 0; q_ < (R) / 8; ++q_) {                       \
      const uint m = q_ * 8 + gl_SubgroupInvocationID;                       \
      name[u][q_] = (EXPR);                                                  \
    }
#define ROW_TB(name, u, q, r) subgroupShuffle(name[u][q], r)
#define LANE gl_SubgroupInvocationID
#else
#define ROWS(name, R, EXPR)                                                  \
  float name[R];                                                             \
  [[unroll]] for (uint m = 0; m < (R); ++m) name[m] = (EXPR);
#define ROW(name, q, r) name[(q) * 8 + (r)]
#define ROWS_TB(name, R, EXPR)                                               \
  float name[TB][R];                                                         \
  [[unroll]] for (uint u = 0; u < TB; ++u)                                   \
    [[unroll]] for (uint m = 0; m < (R); ++m) name[u][m] = (EXPR);
#define ROW_TB(name, u, q, r) name[u][(q) * 8 + (r)]
#define LANE gl_LocalInvocationID.x
#endif

struct Chunk {
  uint bt0, len;  // its first row of [B·T] and its tokens
};
Chunk chunk(uint b, uint n) { return Chunk(b * p.tokens + n * C, min(C, p.tokens - n * C)); }
uint kv_head(uint h) { return h / (p.heads / p.kv_heads); }

// The item of a queries or keys invocation: (batch row, chunk, head of
// `heads`, state row); false past the last.
bool prepare_item(uint heads, out Chunk c, out uint h, out uint i) {
  const uint id = gl_GlobalInvocationID.x + gl_GlobalInvocationID.y * gl_NumWorkGroups.x * WG;
  if (id >= p.batch * p.chunks * heads * DK) return false;
  const uint bn = id / (heads * DK), r = id - bn * heads * DK, b = bn / p.chunks;
  h = r / DK;
  i = r - h * DK;
  c = chunk(b, bn - b * p.chunks);
  return true;
}
