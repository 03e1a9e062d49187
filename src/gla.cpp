#include "vkgate/gla.hpp"

#include <algorithm>
#include <cstring>

#include "finite.hpp"
#include "gpu/context_impl.hpp"
#include "gpu/recorder.hpp"
#include "nn/gla.hpp"
#include "nn/plan_cache.hpp"
#include "nn/storage.hpp"
#include "vkgate/error.hpp"

namespace vkgate {

using gpu::Buffer;
using gpu::MemoryKind;
using nn::Storage;

// The facade over one nn::Gla module: a recorded plan per (batch, tokens).
struct GlaLayer::Impl {
  Context::Impl& vk;
  GlaConfig cfg;
  BlockOptions options;
  Storage act;
  std::unique_ptr<nn::Gla> gla;
  bool poison = false;

  struct Plan {
    std::unique_ptr<nn::MixerPlan> gla;
    nn::Workspace scratch;
    Buffer x_up, x, y, y_down, state_up, state_down;
    nn::GlaState state;  // the initial state in, the final state out
    std::unique_ptr<gpu::Recorder> rec;
  };
  static constexpr size_t kMaxPlans = 4;
  nn::PlanCache<std::pair<int, int>, Plan> plans{kMaxPlans};

  Impl(Context& c, const GlaConfig& config, const BlockOptions& opts)
      : vk(c.impl()), cfg(config), options(opts), act(nn::storage_of(opts.precision)) {
    if (act != Storage::f32 && !vk.info.storage16)
      throw Error(ErrorCode::unsupported, std::string("precision ") + to_string(opts.precision) +
                                              " needs 16-bit storage buffers (storageBuffer16BitAccess), which " +
                                              vk.info.name + " does not support");
  }

  size_t state_elements(int batch) const { return gla->state_elements(uint32_t(batch)); }

  Plan& plan(int batch, int tokens) {
    if (Plan* found = plans.find({batch, tokens})) return *found;
    auto p = std::make_unique<Plan>();
    const size_t BT = size_t(batch) * size_t(tokens), D = size_t(cfg.hidden_size), S = state_elements(batch);
    // Without attn_norm the projection reads the input as it is: in the activation storage.
    const Storage x_storage = gla->has_attn_norm() ? Storage::f32 : act;
    p->gla = gla->plan({uint32_t(batch), uint32_t(tokens), uint32_t(tokens), true, false, false}, p->scratch);
    p->scratch.allocate(vk);
    p->x_up = nn::allocate(vk, BT * D, x_storage, MemoryKind::upload, "hidden_states (staging)");
    p->x = nn::allocate(vk, BT * D, x_storage, MemoryKind::device, "hidden_states");
    p->y = nn::allocate(vk, BT * D, Storage::f32, MemoryKind::device, "output");
    p->y_down = nn::allocate(vk, BT * D, Storage::f32, MemoryKind::readback, "output (readback)");
    p->state_up = nn::allocate(vk, S, Storage::f32, MemoryKind::upload, "initial_state (staging)");
    p->state.state = nn::allocate(vk, S, Storage::f32, MemoryKind::device, "state");
    p->state_down = nn::allocate(vk, S, Storage::f32, MemoryKind::readback, "final_state (readback)");
    p->rec = std::make_unique<gpu::Recorder>(vk, gla->tuning());
    gpu::Recorder& rec = *p->rec;
    rec.begin();
    if (poison) rec.fill(p->y, nn::nan_word(Storage::f32));
    rec.copy(p->x_up, p->x, p->x.size());
    rec.copy(p->state_up, p->state.state, S * 4);
    rec.mark("upload inputs");
    gla->record(rec, *p->gla, p->scratch, {p->x, p->y, false, &p->state, 0, {}, nullptr}, poison);
    rec.copy(p->y, p->y_down, p->y.size());
    rec.copy(p->state.state, p->state_down, S * 4);
    rec.mark("download outputs");
    rec.end();
    return plans.add({batch, tokens}, std::move(p));
  }
};

GlaLayer::GlaLayer(Context& ctx, const GlaConfig& cfg, const TensorMap& weights, const BlockOptions& options) {
  cfg.validate();
  impl_ = std::make_unique<Impl>(ctx, cfg, options);
  const GlaForms forms = check_gla_weights(cfg, weights);
  if (options.check_finite)
    for (const TensorSpec& spec : gla_expected_weights(cfg, forms))
      detail::require_usable_weight(weights.at(spec.name), spec, options.precision);
  impl_->gla = std::make_unique<nn::Gla>(impl_->vk, impl_->vk.tuning, cfg, weights, impl_->act);
}

GlaLayer::GlaLayer(Context& ctx, const GlaConfig& cfg, const WeightMap& weights, const BlockOptions& options)
    : GlaLayer(ctx, cfg, as_tensors(weights), options) {}

GlaLayer::~GlaLayer() = default;

const GlaConfig& GlaLayer::config() const { return impl_->cfg; }
const GlaForms& GlaLayer::forms() const { return impl_->gla->forms(); }

void GlaLayer::set_poison(bool on) {
  if (impl_->poison != on) impl_->plans.clear();  // recorded with the other setting
  impl_->poison = on;
}

GlaOutputs GlaLayer::forward(std::span<const float> hidden, int batch, int tokens,
                             std::span<const float> initial_state) {
  Impl& im = *impl_;
  const GlaConfig& c = im.cfg;
  if (batch <= 0 || tokens <= 0)
    throw Error(ErrorCode::invalid_argument, "gla forward: batch and tokens must be positive, got batch " +
                                                 std::to_string(batch) + ", tokens " + std::to_string(tokens));
  const size_t BT = size_t(batch) * size_t(tokens), D = size_t(c.hidden_size), S = im.state_elements(batch);
  const int64_t H = c.num_heads, dk = c.head_k_dim(), dv = c.head_v_dim();
  // A long sequence runs in segments that fit the device's buffers, each
  // starting from the state the one before left (the recurrence is sequential
  // anyway).
  const uint64_t range = im.vk.info.max_storage_buffer_range, row = uint64_t(batch) * im.gla->largest_token_bytes();
  if (row > range || S * 4 > range)
    throw Error(ErrorCode::unsupported, "gla forward: batch " + std::to_string(batch) +
                                            " needs buffers beyond maxStorageBufferRange (" + std::to_string(range) +
                                            " bytes) for a single token; split the batch");
  uint64_t segment_tokens = std::min<uint64_t>(uint64_t(tokens), range / row);
  if (const uint32_t forced = im.gla->tuning().gla_segment_tokens) segment_tokens = std::min<uint64_t>(segment_tokens, forced);
  const int segment = int(segment_tokens);
  if (hidden.size() != BT * D)
    throw Error(ErrorCode::shape_mismatch, "gla forward: hidden_states has " + std::to_string(hidden.size()) +
                                               " elements, expected [" + std::to_string(batch) + ", " +
                                               std::to_string(tokens) + ", " + std::to_string(D) + "]");
  if (!initial_state.empty() && initial_state.size() != S)
    throw Error(ErrorCode::shape_mismatch, "gla forward: initial_state has " + std::to_string(initial_state.size()) +
                                               " elements, expected [" + std::to_string(batch) + ", " +
                                               std::to_string(H) + ", " + std::to_string(dk) + ", " +
                                               std::to_string(dv) + "]");
  const std::vector<int64_t> hs{batch, tokens, int64_t(D)}, ss{batch, H, dk, dv};
  if (im.options.check_finite) {
    detail::require_finite(hidden, "gla forward: hidden_states", hs);
    if (!initial_state.empty()) detail::require_finite(initial_state, "gla forward: initial_state", ss);
  }
  GlaOutputs out;
  out.output.resize(BT * D);
  out.final_state.assign(S, 0.0f);
  if (!initial_state.empty()) std::copy(initial_state.begin(), initial_state.end(), out.final_state.begin());
  const size_t x_bytes = ops::element_bytes(im.gla->has_attn_norm() ? Storage::f32 : im.act);
  for (int at = 0; at < tokens; at += segment) {
    const int n = std::min(segment, tokens - at);
    Impl::Plan& p = im.plan(batch, n);
    for (int b = 0; b < batch; ++b) {  // rows at.. of each sequence, as the plan's [B, n, D]
      const auto rows = hidden.subspan((size_t(b) * tokens + at) * D, size_t(n) * D);
      std::byte* dst = static_cast<std::byte*>(p.x_up.mapped()) + size_t(b) * n * D * x_bytes;
      if (im.gla->has_attn_norm()) std::memcpy(dst, rows.data(), rows.size_bytes());
      else nn::encode(rows, im.act, dst);
    }
    std::memcpy(p.state_up.mapped(), out.final_state.data(), S * sizeof(float));
    p.rec->submit("running the gated linear attention layer");
    for (int b = 0; b < batch; ++b)
      std::memcpy(out.output.data() + (size_t(b) * tokens + at) * D,
                  static_cast<const float*>(p.y_down.mapped()) + size_t(b) * n * D, size_t(n) * D * sizeof(float));
    std::memcpy(out.final_state.data(), p.state_down.mapped(), S * sizeof(float));
  }
  if (im.options.check_finite) {
    detail::require_finite(out.output, "gla forward: output", hs);
    detail::require_finite(out.final_state, "gla forward: final_state", ss);
  }
  return out;
}

}  // namespace vkgate
