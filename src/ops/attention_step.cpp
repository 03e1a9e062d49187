#include <algorithm>

#include "gpu/context_impl.hpp"
#include "gpu/pipeline.hpp"
#include "ops/attention.hpp"

namespace vkgate::ops {

namespace {
struct AttentionStepPush {
  uint32_t heads, kv_heads, tokens, tiled, causal, out_ld;
  float scale;
  uint32_t out_base;
  alignas(16) uint32_t past[kStepSequences];  // std430: uvec4[2], 16-byte aligned
  uint32_t stride[kStepSequences];
};
static_assert(kStepSequences == 8, "attention_step.comp holds the per-sequence values as uvec4[2]");

// Shared memory: q, a block's scores, the per-row state and the partitions' accumulators.
uint32_t shared_bytes(uint32_t wg, uint32_t G, uint32_t Dh) {
  const uint32_t chunks = Dh / 8, parts = wg / chunks;
  return 4 * (G * Dh + G * wg + 3 * G + parts * G * Dh);
}
}  // namespace

void append_caches(std::vector<gpu::Binding>& b, std::span<const StepSequence> seqs, gpu::Access access) {
  for (auto which : {&StepSequence::keys, &StepSequence::values})
    for (size_t i = 0; i < kStepSequences; ++i) b.push_back({seqs[std::min(i, seqs.size() - 1)].*which, access});
}

uint32_t step_sequences_per_dispatch(const DeviceInfo& d, const Tuning& t) {
  // Two arrays of them, q and out, in one stage.
  const bool arrays = d.storage_buffer_arrays && d.max_stage_storage_buffers >= 2 * kStepSequences + 2;
  return !arrays ? 1 : t.step_sequences ? std::min(t.step_sequences, kStepSequences) : kStepSequences;
}

bool attention_step_applies(const DeviceInfo& d, const Tuning& t, const AttentionShape& s, bool batched) {
  const bool here = (cpu_gemm(d, t) && t.cpu_attention) || (batched && t.step_attention_gpu);
  if (!t.step_attention || !here || s.heads % s.kv_heads != 0) return false;
  const uint32_t G = s.heads / s.kv_heads, Dh = s.head_dim;
  // Each lane holds the G rows of q in private memory: at most 4 KiB of it.
  return s.tokens <= kStepTokens && G <= 8 && G * Dh <= 1024 && Dh % 8 == 0 && Dh / 8 <= kStepWorkgroup &&
         shared_bytes(kStepWorkgroup, G, Dh) <= d.shared_memory_bytes;
}

void attention_step(Context::Impl& ctx, Recorder& rec, const Buffer& q, std::span<const StepSequence> seqs,
                    const Buffer& out, uint32_t out_base, const AttentionShape& s, Storage st, bool causal,
                    float scale) {
  const bool arrays = seqs.size() > 1;
  if (seqs.empty() || seqs.size() > kStepSequences || (arrays && s.batch != seqs.size()))
    throw Error(ErrorCode::invalid_argument, "attention_step: " + std::to_string(seqs.size()) +
                                                 " caches for a batch of " + std::to_string(s.batch));
  AttentionStepPush push{s.heads,   s.kv_heads, s.tokens, s.tiled ? 1u : 0u, causal ? 1u : 0u, s.out_row(),
                         scale,     out_base,   {},       {}};
  for (size_t i = 0; i < seqs.size(); ++i) {
    push.past[i] = seqs[i].past;
    push.stride[i] = seqs[i].stride;
  }
  const gpu::Pipeline& p = ctx.pipelines->get(variant(arrays ? "attention_step_seqs" : "attention_step", st),
                                              {kStepWorkgroup, s.heads / s.kv_heads, s.head_dim});
  std::vector<gpu::Binding> b{{&q, gpu::Access::read}};
  if (arrays) {
    append_caches(b, seqs, gpu::Access::read);
  } else {
    b.push_back({seqs[0].keys, gpu::Access::read});
    b.push_back({seqs[0].values, gpu::Access::read});
  }
  b.push_back({&out, gpu::Access::write});
  rec.dispatch(p, std::span<const gpu::Binding>(b), push, s.kv_heads, s.tokens, s.batch, "attention.step");
}

}  // namespace vkgate::ops
