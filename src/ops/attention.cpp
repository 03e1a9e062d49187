#include <algorithm>
#include <string_view>

#include "gpu/context_impl.hpp"
#include "gpu/pipeline.hpp"
#include "ops/attention.hpp"

namespace vkgate::ops {

namespace {
struct Push {
  uint32_t M, N, K, heads, group;
  uint32_t a_sb, a_sh, a_sm;
  uint32_t b_sb, b_sh, b_sk, b_sn;
  uint32_t c_sb, c_sh, c_sm;
  uint32_t causal, past;
  uint32_t a_off, c_off;  // added to A's and C's (batch, head) base
  uint32_t tiled_kv;      // KV with tiled GQA, else 0
};

// 32×32 tiles, 2×4 per thread: 128 threads, within every device's limits.
const std::vector<uint32_t> kTiles = {128, 32, 32, 16, 2, 4};

// attention.comp's ROWS_CPU: up to 4 rows (lavapipe, one decode step's
// attention over 1024 keys: 1.0 ms against the tiles' 1.5 with one head per
// KV head, even at 4; 1.0 against 0.6 with 8, whose rows fill a tile), read
// as RGBA texels, so every offset and stride along the vec4s in elements a
// multiple of 4 (scores: A's and B's rows of k; P·V: B's rows of n, and
// whole vec4s of n).
bool rows_cpu_takes(const Tuning& t, const Push& p, Storage st, bool values) {
  const auto x4 = [](std::initializer_list<uint32_t> v) {
    return std::all_of(v.begin(), v.end(), [](uint32_t x) { return x % 4 == 0; });
  };
  if (!t.matvec || p.M > 4 || st == Storage::bf16 || !x4({p.a_sb, p.a_sh, p.a_sm, p.a_off})) return false;
  if (values) return p.N >= 4 && x4({p.N, p.b_sb, p.b_sh, p.b_sk});
  return x4({p.K, p.b_sb, p.b_sh, p.b_sn});
}

// `a_st`, `b_st`: the storage of A and B, for the texel views of the CPU kernels.
void product(Context::Impl& ctx, Recorder& rec, const Buffer& a, const Buffer& b, const Buffer& c, const Push& push,
             uint32_t batch_heads, Storage st, Storage a_st, Storage b_st, const char* tail, const char* label) {
  if (batch_heads > 65535) throw Error(ErrorCode::invalid_argument, "attention: batch × heads exceeds 65535");
  // `rgba`: ROWS_CPU's vec4 views, else the register tiles' scalar ones.
  auto dispatch = [&](const gpu::Pipeline& p, uint32_t gx, uint32_t gy, bool rgba = false) {
    const bool texel = p.texel_bindings != 0;
    const auto view = [&](Storage s) {
      return !texel ? VK_FORMAT_UNDEFINED : rgba ? texel4_format(s) : texel_format(s);
    };
    rec.dispatch(p, {{&a, gpu::Access::read, view(a_st)}, {&b, gpu::Access::read, view(b_st)}, {&c, gpu::Access::write}},
                 push, gx, gy, batch_heads, label);
  };
  if (cpu_gemm(ctx.info, rec.tuning())) {
    const bool values = std::string_view(tail) == "_values";
    if (rows_cpu_takes(rec.tuning(), push, st, values)) {
      const uint32_t columns = values ? 32 : 8;  // per workgroup
      dispatch(ctx.pipelines->get(variant("attention_rows_cpu", st, tail), {8, push.M, values ? 1u : 0u}),
               (push.N + columns - 1) / columns, 1, true);
      return;
    }
    const gpu::Grid g = cpu_gemm_grid(rec.tuning(), push.M, push.N);
    dispatch(ctx.pipelines->get(variant("attention_cpu", st, tail), cpu_gemm_spec(rec.tuning(), push.M)), g.x, g.y);
    return;
  }
  dispatch(ctx.pipelines->get(variant("attention", st, tail), kTiles), (push.N + kTiles[2] - 1) / kTiles[2],
           (push.M + kTiles[1] - 1) / kTiles[1]);
}

// One query (a decode step) with G > 1 query heads per KV head: the G heads
// of a group become the G rows of one product against their shared keys or
// values, instead of G products of one row each (whose tiles would compute
// RM − 1 clamped copies of it). Every key is visible to the one query.
// A group's heads are G consecutive heads, or every KV-th with tiled GQA:
// `head` is the stride from one group to the next, `member` from one of its
// heads to the next, in units of one head's row.
bool group_rows(const AttentionShape& s) { return s.tokens == 1 && s.heads > s.kv_heads; }
struct GroupStrides {
  uint32_t head, member;
};
GroupStrides group_strides(const AttentionShape& s) {
  return s.tiled ? GroupStrides{1, s.kv_heads} : GroupStrides{s.heads / s.kv_heads, 1};
}

}  // namespace

uint32_t query_chunk(const Tuning& t, const AttentionShape& s) {
  const uint64_t per_row = uint64_t(s.batch) * s.heads * s.score_row() * 4;
  return uint32_t(std::clamp<uint64_t>(t.score_bytes / per_row, 1, s.tokens));
}

void attention_scores(Context::Impl& ctx, Recorder& rec, const Buffer& q, const Buffer& k, const Buffer& scores,
                      const AttentionShape& s, Storage st, bool causal) {
  const uint32_t T = s.tokens, R = s.rows(), S = s.keys, Dh = s.head_dim, H = s.heads, KV = s.kv_heads,
                 L = s.score_row();
  if (group_rows(s)) {
    const uint32_t G = H / KV;
    const GroupStrides gs = group_strides(s);
    const Push push{G, S, Dh, KV, 1,
                    H * Dh, gs.head * Dh, gs.member * Dh,          // q [B, H, 1, Dh]: a group's heads as rows
                    KV * s.stride() * Dh, s.stride() * Dh, 1, Dh,  // k [B, KV, S, Dh]
                    H * L, gs.head * L, gs.member * L,             // scores [B, H, 1, S], rows L apart
                    0, 0, 0, 0, 0};
    product(ctx, rec, q, k, scores, push, s.batch * KV, st, st, st, "_scores", "attention.scores");
    return;
  }
  Push push{R, S, Dh, H, H / KV,
            H * T * Dh, T * Dh, Dh,       // q [B, H, T, Dh], rows first..
            KV * s.stride() * Dh, s.stride() * Dh, 1, Dh,  // k [B, KV, S, Dh]: k index = d, n index = s
            H * R * L, R * L, L,          // scores [B, H, R, S], rows L apart
            causal ? 1u : 0u, S - T + s.first,
            s.first * Dh, 0, s.tiled ? KV : 0u};
  product(ctx, rec, q, k, scores, push, s.batch * H, st, st, st, "_scores", "attention.scores");
}

void attention_values(Context::Impl& ctx, Recorder& rec, const Buffer& probs, const Buffer& v, const Buffer& out,
                      const AttentionShape& s, Storage st, bool causal) {
  const uint32_t T = s.tokens, R = s.rows(), S = s.keys, Dh = s.head_dim, H = s.heads, KV = s.kv_heads,
                 L = s.score_row();
  if (group_rows(s)) {
    const uint32_t G = H / KV;
    const GroupStrides gs = group_strides(s);
    const Push push{G, Dh, S, KV, 1,
                    H * L, gs.head * L, gs.member * L,             // probs [B, H, 1, S]: a group's heads as rows
                    KV * s.stride() * Dh, s.stride() * Dh, Dh, 1,  // v [B, KV, S, Dh]
                    s.out_row(), gs.head * Dh, gs.member * Dh,     // out [B, 1, H, Dh]
                    0, 0, 0, 0, 0};
    product(ctx, rec, probs, v, out, push, s.batch * KV, st, Storage::f32, st, "_values", "attention.values");
    return;
  }
  Push push{R, Dh, S, H, H / KV,
            H * R * L, R * L, L,          // probs [B, H, R, S], rows L apart
            KV * s.stride() * Dh, s.stride() * Dh, Dh, 1,  // v [B, KV, S, Dh]: k index = s, n index = d
            T * s.out_row(), Dh, s.out_row(),  // out [B, T, H, Dh], rows first..
            causal ? 2u : 0u, S - T + s.first,
            0, s.first * s.out_row(), s.tiled ? KV : 0u};
  product(ctx, rec, probs, v, out, push, s.batch * H, st, Storage::f32, st, "_values", "attention.values");
}

}  // namespace vkgate::ops
