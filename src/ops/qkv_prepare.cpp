#include "gpu/context_impl.hpp"
#include "gpu/pipeline.hpp"
#include "ops/attention.hpp"

namespace vkgate::ops {

namespace {
struct QkvPreparePush {
  Gate gate;
  uint32_t gate_target, interleaved;
  View q, k, v;
  uint32_t tokens, heads, kv_heads, dim, rotary, seq, first, norm;
  float eps;
  uint32_t rows;
  alignas(16) uint32_t seq_of[kStepSequences];  // std430: uvec4[2], 16-byte aligned
  uint32_t first_of[kStepSequences];
};
}  // namespace

void qkv_prepare(Context::Impl& ctx, Recorder& rec, const QkvPrepare& a, uint32_t rows, uint32_t tokens,
                 uint32_t heads, uint32_t kv_heads, uint32_t dim, Storage s) {
  const RowReduce r = row_reduce(ctx.info, rec.tuning(), dim);
  const bool arrays = !a.seqs.empty();
  if (a.seqs.size() > kStepSequences || (arrays && a.seqs.size() * tokens != rows))
    throw Error(ErrorCode::invalid_argument, "qkv_prepare: " + std::to_string(a.seqs.size()) + " caches for " +
                                                 std::to_string(rows / tokens) + " sequences");
  const gpu::Pipeline& p = ctx.pipelines->get(variant(arrays ? "qkv_prepare_seqs" : "qkv_prepare", s) + r.suffix,
                                              {r.wg});
  const uint32_t norm = !a.q_norm ? 0u : a.kind == NormKind::zero_centered ? 2u : 1u;
  const uint64_t groups = uint64_t(rows) * (heads + 2 * kv_heads);
  QkvPreparePush push{a.gating, uint32_t(a.gate_target), a.rope_style == RopeStyle::interleaved ? 1u : 0u,
            a.q_view, a.k_view, a.v_view, tokens, heads, kv_heads, dim, a.rotary, a.seq, a.first, norm, a.eps,
            uint32_t(groups), {}, {}};
  for (size_t i = 0; i < a.seqs.size(); ++i) {
    push.seq_of[i] = a.seqs[i].stride;
    push.first_of[i] = a.seqs[i].past;
  }
  const bool texel = p.texel_bindings != 0;
  const VkFormat x_format = texel ? texel_format(s) : VK_FORMAT_UNDEFINED,
                 f32_format = texel ? VK_FORMAT_R32_SFLOAT : VK_FORMAT_UNDEFINED;
  // Without a norm the weight bindings hold the table, which the shader then never reads.
  const gpu::Grid g = gpu::grid_for(groups);
  std::vector<gpu::Binding> b{{&a.proj, gpu::Access::read, x_format},
                               {a.q_norm ? a.q_norm : &a.table, gpu::Access::read, f32_format},
                               {a.k_norm ? a.k_norm : &a.table, gpu::Access::read, f32_format},
                               {&a.table, gpu::Access::read, f32_format},
                               {&a.q, gpu::Access::write}};
  if (arrays) {
    append_caches(b, a.seqs, gpu::Access::write);
  } else {
    b.push_back({&a.k, gpu::Access::write});
    b.push_back({&a.v, gpu::Access::write});
  }
  rec.dispatch(p, std::span<const gpu::Binding>(b), push, g.x, g.y, 1, "qkv_prepare");
}

}  // namespace vkgate::ops
