#include "gpu/context_impl.hpp"
#include "gpu/pipeline.hpp"
#include "ops/ops.hpp"

namespace vkgate::ops {

namespace {
struct StatsPush {
  Gate gate;
  uint32_t mode, batch, heads, tokens, ld, count, out_at;
};

// One workgroup per result: a wide one (or one subgroup on CPU drivers).
void reduce(Context::Impl& ctx, Recorder& rec, const Buffer& x, Storage s, const Buffer& out, const StatsPush& push,
            uint32_t groups, const char* label) {
  const RowReduce r = row_reduce(ctx.info, rec.tuning(), 1u << 20);
  rec.dispatch(ctx.pipelines->get(variant("stats", s) + r.suffix, {r.wg}),
               {{&x, gpu::Access::read}, {&out, gpu::Access::read_write}}, push, groups, 1, 1, label);
}
}  // namespace

void first_token_attn(Context::Impl& ctx, Recorder& rec, const Buffer& probs, uint32_t batch, uint32_t heads,
                      uint32_t tokens, uint32_t ld, const Buffer& out, uint32_t at) {
  reduce(ctx, rec, probs, Storage::f32, out, StatsPush{{}, 0, batch, heads, tokens, ld, 0, at}, heads,
         "stats.first_token_attn");
}

void gate_scores(Context::Impl& ctx, Recorder& rec, const Buffer& g, const Gate& gating, uint32_t rows,
                 uint32_t tokens, Storage s, const Buffer& out, uint32_t at) {
  reduce(ctx, rec, g, s, out, StatsPush{gating, 1, 0, gating.heads, tokens, 0, rows * gating.heads, at}, 1, "stats.gate");
}

void max_abs(Context::Impl& ctx, Recorder& rec, const Buffer& x, uint32_t count, const Buffer& out, uint32_t at) {
  reduce(ctx, rec, x, Storage::f32, out, StatsPush{{}, 2, 0, 0, 0, 0, count, at}, 1, "stats.max_abs");
}

}  // namespace vkgate::ops
