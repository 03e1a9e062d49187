#include "gpu/context_impl.hpp"
#include "gpu/pipeline.hpp"
#include "ops/ops.hpp"

namespace vkgate::ops {

namespace {
struct Push {
  uint32_t M, N, K, heads, group;
  uint32_t a_sb, a_sh, a_sm;
  uint32_t b_sb, b_sh, b_sk, b_sn;
  uint32_t c_sb, c_sh, c_sm;
};

// 32×32 tiles, 2×4 per thread: 128 threads, within every device's limits.
const std::vector<uint32_t> kTiles = {128, 32, 32, 16, 2, 4};

void product(Context::Impl& ctx, Recorder& rec, const Buffer& a, const Buffer& b, const Buffer& c, const Push& push,
             uint32_t batch_heads, const std::string& shader, const char* label) {
  const gpu::Pipeline& p = ctx.pipelines->get(shader, kTiles);
  if (batch_heads > 65535) throw Error(ErrorCode::invalid_argument, "attention: batch × heads exceeds 65535");
  rec.dispatch(p, {{&a, gpu::Access::read}, {&b, gpu::Access::read}, {&c, gpu::Access::write}}, &push,
               (push.N + kTiles[2] - 1) / kTiles[2], (push.M + kTiles[1] - 1) / kTiles[1], batch_heads, label);
}
}  // namespace

void attention_scores(Context::Impl& ctx, Recorder& rec, const Buffer& q, const Buffer& k, const Buffer& scores,
                      const AttentionShape& s, Storage st) {
  const uint32_t T = s.tokens, S = s.keys, Dh = s.head_dim, H = s.heads, KV = s.kv_heads;
  Push push{T, S, Dh, H, H / KV,
            H * T * Dh, T * Dh, Dh,       // q [B, H, T, Dh]
            KV * s.stride() * Dh, s.stride() * Dh, 1, Dh,  // k [B, KV, S, Dh]: k index = d, n index = s
            H * T * S, T * S, S};         // scores [B, H, T, S]
  product(ctx, rec, q, k, scores, push, s.batch * H, variant("attention", st, "_scores"), "attention.scores");
}

void attention_values(Context::Impl& ctx, Recorder& rec, const Buffer& probs, const Buffer& v, const Buffer& out,
                      const AttentionShape& s, Storage st) {
  const uint32_t T = s.tokens, S = s.keys, Dh = s.head_dim, H = s.heads, KV = s.kv_heads;
  Push push{T, Dh, S, H, H / KV,
            H * T * S, T * S, S,          // probs [B, H, T, S]
            KV * s.stride() * Dh, s.stride() * Dh, Dh, 1,  // v [B, KV, S, Dh]: k index = s, n index = d
            T * H * Dh, Dh, H * Dh};      // out [B, T, H, Dh]
  product(ctx, rec, probs, v, out, push, s.batch * H, variant("attention", st, "_values"), "attention.values");
}

}  // namespace vkgate::ops
