#include "vkgate/gdn.hpp"

#include <algorithm>
#include <cstring>

#include "finite.hpp"
#include "gpu/context_impl.hpp"
#include "gpu/recorder.hpp"
#include "nn/gdn.hpp"
#include "nn/plan_cache.hpp"
#include "nn/storage.hpp"
#include "ops/ops.hpp"
#include "vkgate/error.hpp"

namespace vkgate {

using gpu::Buffer;
using gpu::MemoryKind;
using nn::Storage;

// The facade over one nn::Gdn module: a recorded plan per (batch, tokens),
// the states uploaded before and read back after each.
struct GatedDeltaNet::Impl {
  Context::Impl& vk;
  GdnConfig cfg;
  BlockOptions options;
  Storage act;
  std::unique_ptr<nn::Gdn> gdn;
  bool poison = false;

  struct Plan {
    std::unique_ptr<nn::MixerPlan> plan;
    nn::Workspace scratch;
    Buffer x_up, x, y, y_down, conv_up, conv_down, state_up, state_down;
    nn::GdnState states;  // the initial states in, the final ones out
    std::unique_ptr<gpu::Recorder> rec;
  };
  static constexpr size_t kMaxPlans = 4;
  nn::PlanCache<std::pair<int, int>, Plan> plans{kMaxPlans};

  Impl(Context& c, const GdnConfig& config, const BlockOptions& opts)
      : vk(c.impl()), cfg(config), options(opts), act(nn::storage_of(opts.precision)) {
    if (act != Storage::f32 && !vk.info.storage16)
      throw Error(ErrorCode::unsupported, std::string("precision ") + to_string(opts.precision) +
                                              " needs 16-bit storage buffers (storageBuffer16BitAccess), which " +
                                              vk.info.name + " does not support");
  }

  Plan& plan(int batch, int tokens) {
    if (Plan* found = plans.find({batch, tokens})) return *found;
    auto p = std::make_unique<Plan>();
    const uint32_t B = uint32_t(batch);
    const size_t BT = size_t(batch) * size_t(tokens), D = size_t(cfg.hidden_size), C = gdn->conv_elements(B),
                 S = gdn->state_elements(B);
    p->plan = gdn->plan({B, uint32_t(tokens), uint32_t(tokens), true, false, false}, p->scratch);
    p->scratch.allocate(vk);
    // Without an input norm the projection reads the input as it is: in the activation storage.
    p->x_up = nn::allocate(vk, BT * D, act, MemoryKind::upload, "hidden_states (staging)");
    p->x = nn::allocate(vk, BT * D, act, MemoryKind::device, "hidden_states");
    p->y = nn::allocate(vk, BT * D, Storage::f32, MemoryKind::device, "output");
    p->y_down = nn::allocate(vk, BT * D, Storage::f32, MemoryKind::readback, "output (readback)");
    p->conv_up = nn::allocate(vk, C, Storage::f32, MemoryKind::upload, "conv_state (staging)");
    p->conv_down = nn::allocate(vk, C, Storage::f32, MemoryKind::readback, "final_conv_state (readback)");
    p->state_up = nn::allocate(vk, S, Storage::f32, MemoryKind::upload, "initial_state (staging)");
    p->state_down = nn::allocate(vk, S, Storage::f32, MemoryKind::readback, "final_state (readback)");
    p->states.conv = nn::allocate(vk, C, Storage::f32, MemoryKind::device, "conv state");
    p->states.state = nn::allocate(vk, S, Storage::f32, MemoryKind::device, "state");
    p->rec = std::make_unique<gpu::Recorder>(vk, gdn->tuning());
    gpu::Recorder& rec = *p->rec;
    rec.begin();
    if (poison) rec.fill(p->y, nn::nan_word(Storage::f32));
    rec.copy(p->x_up, p->x, p->x.size());
    rec.copy(p->conv_up, p->states.conv, C * 4);
    rec.copy(p->state_up, p->states.state, S * 4);
    rec.mark("upload inputs");
    gdn->record(rec, *p->plan, p->scratch, {p->x, p->y, false, &p->states, 0, {}, nullptr}, poison);
    rec.copy(p->y, p->y_down, p->y.size());
    rec.copy(p->states.conv, p->conv_down, C * 4);
    rec.copy(p->states.state, p->state_down, S * 4);
    rec.mark("download outputs");
    rec.end();
    return plans.add({batch, tokens}, std::move(p));
  }
};

GatedDeltaNet::GatedDeltaNet(Context& ctx, const GdnConfig& cfg, const TensorMap& weights,
                             const BlockOptions& options) {
  cfg.validate();
  impl_ = std::make_unique<Impl>(ctx, cfg, options);
  check_gdn_weights(cfg, weights);
  if (options.check_finite)
    for (const TensorSpec& spec : gdn_expected_weights(cfg))
      detail::require_usable_weight(weights.at(spec.name), spec, options.precision);
  impl_->gdn = std::make_unique<nn::Gdn>(impl_->vk, impl_->vk.tuning, GdnMixer{cfg, std::nullopt}, weights, impl_->act);
}

GatedDeltaNet::GatedDeltaNet(Context& ctx, const GdnConfig& cfg, const WeightMap& weights,
                             const BlockOptions& options)
    : GatedDeltaNet(ctx, cfg, as_tensors(weights), options) {}

GatedDeltaNet::~GatedDeltaNet() = default;
const GdnConfig& GatedDeltaNet::config() const { return impl_->cfg; }
bool GatedDeltaNet::chunked(int tokens) const { return impl_->gdn->chunked(uint32_t(std::max(tokens, 0))); }

void GatedDeltaNet::set_poison(bool on) {
  if (impl_->poison != on) impl_->plans.clear();  // recorded with the other setting
  impl_->poison = on;
}

GdnOutputs GatedDeltaNet::forward(std::span<const float> hidden, int batch, int tokens,
                                  std::span<const float> conv_state, std::span<const float> initial_state) {
  Impl& im = *impl_;
  const GdnConfig& c = im.cfg;
  if (batch <= 0 || tokens <= 0)
    throw Error(ErrorCode::invalid_argument, "gated deltanet forward: batch and tokens must be positive, got batch " +
                                                 std::to_string(batch) + ", tokens " + std::to_string(tokens));
  const size_t BT = size_t(batch) * size_t(tokens), D = size_t(c.hidden_size), C = im.gdn->conv_elements(uint32_t(batch)),
               S = im.gdn->state_elements(uint32_t(batch));
  const std::vector<int64_t> hs{batch, tokens, int64_t(D)},
      cs{batch, c.conv_channels(), c.conv_kernel - 1},
      ss{batch, c.num_value_heads, c.key_head_dim, c.value_head_dim};
  auto expect = [](std::span<const float> t, size_t want, const char* name, const std::vector<int64_t>& shape) {
    if (t.size() != want)
      throw Error(ErrorCode::shape_mismatch, std::string("gated deltanet forward: ") + name + " has " +
                                                 std::to_string(t.size()) + " elements, expected " + shape_text(shape));
  };
  expect(hidden, BT * D, "hidden_states", hs);
  if (!conv_state.empty()) expect(conv_state, C, "conv_state", cs);
  if (!initial_state.empty()) expect(initial_state, S, "initial_state", ss);
  // A long sequence runs in segments that fit the device's buffers, each
  // starting from the states the one before left (the recurrence is sequential anyway).
  const uint32_t most = im.gdn->max_step_tokens(uint32_t(batch));
  if (most == 0 || S * 4 > im.vk.info.max_storage_buffer_range)
    throw Error(ErrorCode::unsupported, "gated deltanet forward: batch " + std::to_string(batch) +
                                            " needs buffers beyond maxStorageBufferRange (" +
                                            std::to_string(im.vk.info.max_storage_buffer_range) +
                                            " bytes) for a single token; split the batch");
  if (im.options.check_finite) {
    detail::require_finite(hidden, "gated deltanet forward: hidden_states", hs);
    if (!conv_state.empty()) detail::require_finite(conv_state, "gated deltanet forward: conv_state", cs);
    if (!initial_state.empty()) detail::require_finite(initial_state, "gated deltanet forward: initial_state", ss);
  }
  GdnOutputs out;
  out.output.resize(BT * D);
  out.final_conv_state.assign(C, 0.0f);
  out.final_state.assign(S, 0.0f);
  std::copy(conv_state.begin(), conv_state.end(), out.final_conv_state.begin());
  std::copy(initial_state.begin(), initial_state.end(), out.final_state.begin());
  const size_t x_bytes = ops::element_bytes(im.act);
  const int segment = int(std::min<uint32_t>(most, uint32_t(tokens)));
  for (int at = 0; at < tokens; at += segment) {
    const int n = std::min(segment, tokens - at);
    Impl::Plan& p = im.plan(batch, n);
    for (int b = 0; b < batch; ++b)  // rows at.. of each sequence, as the plan's [B, n, D]
      nn::encode(hidden.subspan((size_t(b) * tokens + at) * D, size_t(n) * D), im.act,
                 static_cast<std::byte*>(p.x_up.mapped()) + size_t(b) * n * D * x_bytes);
    std::memcpy(p.conv_up.mapped(), out.final_conv_state.data(), C * sizeof(float));
    std::memcpy(p.state_up.mapped(), out.final_state.data(), S * sizeof(float));
    p.rec->submit("running the Gated DeltaNet layer");
    for (int b = 0; b < batch; ++b)
      std::memcpy(out.output.data() + (size_t(b) * tokens + at) * D,
                  static_cast<const float*>(p.y_down.mapped()) + size_t(b) * n * D, size_t(n) * D * sizeof(float));
    std::memcpy(out.final_conv_state.data(), p.conv_down.mapped(), C * sizeof(float));
    std::memcpy(out.final_state.data(), p.state_down.mapped(), S * sizeof(float));
  }
  if (im.options.check_finite) {
    detail::require_finite(out.output, "gated deltanet forward: output", hs);
    detail::require_finite(out.final_state, "gated deltanet forward: final_state", ss);
  }
  return out;
}

}  // namespace vkgate
