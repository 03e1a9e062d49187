#include "vkgate/block.hpp"

#include <cmath>
#include <cstring>
#include <limits>
#include <optional>

#include "finite.hpp"
#include "gpu/context_impl.hpp"
#include "gpu/memory.hpp"
#include "gpu/recorder.hpp"
#include "gpu/transfer.hpp"
#include "nn/attention.hpp"
#include "nn/plan_cache.hpp"
#include "nn/storage.hpp"
#include "ops/ops.hpp"
#include "vkgate/error.hpp"

namespace vkgate {

using gpu::Buffer;
using gpu::MemoryKind;
using nn::Storage;

namespace {

// Up to this many tokens (decode steps) the shaders read the hidden states and
// write the output through mapped staging memory (Plan::x_in, y_out); longer
// inputs are copied, in bulk, to and from device memory.
constexpr size_t kDirectIoTokens = 8;

}  // namespace

// The facade over one nn::Attention module: the plans of the shapes it has
// run, the caches (passed in, or resident on the device), the host's
// conversions and checks.
struct GatedAttention::Impl {
  Context& ctx;
  Context::Impl& vk;
  BlockConfig cfg;
  BlockOptions options;
  Storage act;  // weights and activations on the device
  std::unique_ptr<nn::Attention> attention;
  bool poison = false;

  // A resident-cache plan is keyed with past = −1: its positions reach the
  // recorded commands as parameters (Recorder::Mode::update).
  struct Key {
    int batch, tokens, past;
    bool mask, cache, stats;
    bool operator==(const Key&) const = default;
  };
  static bool resident(const Key& k) { return k.past < 0; }
  struct Plan {
    Key key;
    std::unique_ptr<nn::MixerPlan> attn;
    nn::Workspace scratch;
    Buffer x_up, x, y, y_down;
    // What the shaders read as hidden states and write the output to: the
    // device copies, or for a few tokens the mapped staging buffers
    // themselves, which saves a copy each way and its barrier.
    const Buffer *x_in = nullptr, *y_out = nullptr;
    int past = 0;  // positions before the new tokens (for a resident plan: as last recorded)
    std::unique_ptr<nn::MixerCache> given;  // the cache of a plan given one explicitly [B, KV, past + T, Dh]
    Buffer kv_up, mask_up, mask;  // inputs beyond hidden_states, when used
    Buffer k_down, v_down;        // present_key/value, when asked for
    Buffer stats, stats_down;     // Attention::stats_floats()
    std::unique_ptr<gpu::Recorder> rec;
  };
  static constexpr size_t kMaxPlans = 8;
  nn::PlanCache<Key, Plan> plans{kMaxPlans};
  std::optional<Key> last;  // the plan that ran last
  std::unique_ptr<nn::MixerCache> cache;  // the resident cache (reserve_cache, load_cache): an nn::KvCache
  int cache_len = 0;

  Impl(Context& c, const BlockConfig& config, const BlockOptions& opts)
      : ctx(c), vk(c.impl()), cfg(config), options(opts), act(nn::storage_of(opts.precision)) {
    if (act != Storage::f32 && !vk.info.storage16)
      throw Error(ErrorCode::unsupported, std::string("precision ") + to_string(opts.precision) + " needs 16-bit storage buffers (storageBuffer16BitAccess), which " +
                                              vk.info.name + " does not support");
  }

  Buffer buffer(size_t elements, Storage s, MemoryKind kind, const std::string& name) {
    return nn::allocate(vk, elements, s, kind, name);
  }
  Buffer device(size_t elements, Storage s, const std::string& name) {
    return buffer(elements, s, MemoryKind::device, name);
  }

  Plan& plan(const Key& key) {
    if (Plan* p = plans.find(key)) return *p;
    auto p = std::make_unique<Plan>();
    p->key = key;
    p->past = resident(key) ? cache_len : key.past;
    const size_t B = size_t(key.batch), T = size_t(key.tokens), BT = B * T;
    // Keys allocated per (batch, KV head): the resident cache's capacity, or past + T.
    const size_t S = resident(key) ? size_t(kv(*cache).capacity) : T + size_t(key.past);
    const size_t D = size_t(cfg.hidden_size);
    const Storage f32 = Storage::f32;
    p->attn = attention->plan({uint32_t(B), uint32_t(T), uint32_t(S), true, key.stats, key.mask}, p->scratch);
    p->scratch.allocate(vk);
    const bool direct_io = BT <= kDirectIoTokens && attention->tuning().direct_io;
    p->x_up = buffer(BT * D, f32, MemoryKind::upload, "hidden_states (staging)");
    if (!direct_io) p->x = device(BT * D, f32, "hidden_states");
    p->x_in = direct_io ? &p->x_up : &p->x;
    p->y_down = buffer(BT * D, f32, MemoryKind::readback, "output (readback)");
    if (!direct_io) p->y = device(BT * D, f32, "output");
    p->y_out = direct_io ? &p->y_down : &p->y;
    if (!resident(key)) p->given = attention->make_cache(uint32_t(B), uint32_t(S), "");
    const uint32_t score_ld = static_cast<const nn::AttentionPlan&>(*p->attn).score_ld;
    if (key.past > 0)
      p->kv_up = buffer(2 * B * size_t(cfg.num_kv_heads) * size_t(key.past) * size_t(cfg.head_dim), act,
                        MemoryKind::upload, "past_key/past_value (staging)");
    if (key.mask) {
      p->mask_up = buffer(BT * score_ld, f32, MemoryKind::upload, "attention_mask (staging)");
      p->mask = device(BT * score_ld, f32, "attention_mask");
    }
    if (key.cache) {
      const size_t n = B * size_t(cfg.num_kv_heads) * S * size_t(cfg.head_dim);
      p->k_down = buffer(n, act, MemoryKind::readback, "present_key (readback)");
      p->v_down = buffer(n, act, MemoryKind::readback, "present_value (readback)");
    }
    if (key.stats) {
      p->stats = device(attention->stats_floats(), f32, "statistics");
      p->stats_down = buffer(attention->stats_floats(), f32, MemoryKind::readback, "statistics (readback)");
    }
    p->rec = std::make_unique<gpu::Recorder>(vk, attention->tuning());
    record(*p);
    return plans.add(key, std::move(p));
  }

  static const nn::KvCache& kv(const nn::MixerCache& c) { return static_cast<const nn::KvCache&>(c); }
  const nn::KvCache& kv_cache(const Plan& p) const { return kv(resident(p.key) ? *cache : *p.given); }
  // The plan that ran last, without making it the most recently used.
  const Plan* last_plan() const {
    const Plan* found = nullptr;
    if (last) plans.for_each([&](const Key& k, const Plan& p) { if (k == *last) found = &p; });
    return found;
  }

  // Mode::update rewrites only the parameters of a recorded plan (its
  // resident cache grew): the command buffer is replayed as it is.
  void record(Plan& p, gpu::Recorder::Mode mode = gpu::Recorder::Mode::record) {
    gpu::Recorder& rec = *p.rec;
    const nn::KvCache& kvc = kv_cache(p);
    const uint32_t B = uint32_t(p.key.batch), KV = uint32_t(cfg.num_kv_heads), Dh = uint32_t(cfg.head_dim),
                   P = uint32_t(p.past), S = uint32_t(p.key.tokens) + P;
    rec.begin(mode);
    if (poison) {
      if (!resident(p.key))
        for (const Buffer* b : {&kvc.keys, &kvc.values}) rec.fill(*b, nn::nan_word(act));
      rec.fill(*p.y_out, nn::nan_word(Storage::f32));
    }
    if (p.x_in != &p.x_up) rec.copy(p.x_up, p.x, p.x.size());
    attention->record_begin(rec, *p.attn);
    if (P && !resident(p.key)) {
      // past_key then past_value, each [B, KV, P, Dh], into positions 0..P−1 of [B, KV, S, Dh].
      const VkDeviceSize e = ops::element_bytes(act), row = VkDeviceSize(P) * Dh * e, half = VkDeviceSize(B) * KV * row;
      std::vector<VkBufferCopy> k_regions, v_regions;
      for (uint32_t bk = 0; bk < B * KV; ++bk) {
        k_regions.push_back({bk * row, VkDeviceSize(bk) * S * Dh * e, row});
        v_regions.push_back({half + bk * row, VkDeviceSize(bk) * S * Dh * e, row});
      }
      rec.copy(p.kv_up, kvc.keys, k_regions);
      rec.copy(p.kv_up, kvc.values, v_regions);
    }
    if (p.key.mask) rec.copy(p.mask_up, p.mask, p.mask.size());
    rec.mark("upload inputs");
    const nn::MixerIo io{*p.x_in, *p.y_out, cfg.residual, &kvc, P, {p.key.stats ? &p.stats : nullptr, 0},
                         p.key.mask ? &p.mask : nullptr};
    attention->record(rec, *p.attn, p.scratch, io, poison);
    if (p.y_out != &p.y_down) rec.copy(p.y, p.y_down, p.y.size());
    if (p.key.cache) {
      rec.copy(kvc.keys, p.k_down, kvc.keys.size());
      rec.copy(kvc.values, p.v_down, kvc.values.size());
    }
    if (p.key.stats) rec.copy(p.stats, p.stats_down, p.stats.size());
    rec.mark("download outputs");
    rec.end();
  }

  // The device's reductions (ops::first_token_attn, ops::gate_scores) as BlockStats.
  BlockStats stats(const Plan& p) const {
    const nn::MixerStats m = attention->read_stats(static_cast<const float*>(p.stats_down.mapped()),
                                                   double(p.key.batch) * p.key.tokens);
    BlockStats out;
    out.first_token_attn = m.first_token_attn;
    out.gate_mean = m.gate_mean.value_or(std::numeric_limits<double>::quiet_NaN());
    out.gate_frac_below_0_1 = m.gate_frac_below_0_1.value_or(std::numeric_limits<double>::quiet_NaN());
    return out;
  }
};

namespace {
// The config, once validate() has accepted it: Impl derives its layout (which
// divides by the KV heads) from it, so nothing may see it before.
const BlockConfig& validated(const BlockConfig& cfg) {
  cfg.validate();
  return cfg;
}
}  // namespace

GatedAttention::GatedAttention(Context& ctx, const BlockConfig& cfg, const TensorMap& weights,
                               const BlockOptions& options)
    : impl_(std::make_unique<Impl>(ctx, validated(cfg), options)) {
  check_weights(cfg, weights);
  if (options.check_finite)
    for (const TensorSpec& spec : expected_weights(cfg))
      detail::require_usable_weight(weights.at(spec.name), spec, options.precision);
  impl_->attention = std::make_unique<nn::Attention>(impl_->vk, impl_->vk.tuning, cfg, weights,
                                                     impl_->act);
}

GatedAttention::GatedAttention(Context& ctx, const BlockConfig& cfg, const WeightMap& weights,
                               const BlockOptions& options)
    : GatedAttention(ctx, cfg, as_tensors(weights), options) {}

GatedAttention::~GatedAttention() = default;

namespace {
// a·b·..., or Error(unsupported) when the product does not fit 64 bits or
// exceeds `limit` (a device buffer's element count).
size_t checked_product(std::initializer_list<size_t> factors, uint64_t limit, const std::string& what) {
  uint64_t n = 1;
  bool overflow = false;
  for (size_t f : factors) overflow = overflow || __builtin_mul_overflow(n, uint64_t(f), &n);
  if (overflow || n > limit) {
    std::string dims;
    for (size_t f : factors) dims += (dims.empty() ? "" : " × ") + std::to_string(f);
    throw Error(ErrorCode::unsupported, "forward: " + what + " needs " + dims +
                                            " elements, more than one device buffer holds (maxStorageBufferRange " +
                                            std::to_string(limit * 4) + " bytes); split the batch or the sequence");
  }
  return size_t(n);
}

void check_size(std::span<const float> t, size_t want, const char* name, const std::string& shape) {
  if (t.size() != want)
    throw Error(ErrorCode::shape_mismatch, std::string("forward: ") + name + " has " + std::to_string(t.size()) +
                                               " elements, expected " + shape + " = " + std::to_string(want));
}
std::string dims(std::initializer_list<size_t> d) {
  std::string s = "[";
  for (size_t x : d) s += (s.size() > 1 ? ", " : "") + std::to_string(x);
  return s + "]";
}
}  // namespace

ForwardOutputs GatedAttention::run(const ForwardInputs& in) {
  const BlockConfig& c = impl_->cfg;
  if (in.batch <= 0 || in.tokens <= 0 || in.past < 0)
    throw Error(ErrorCode::invalid_argument, "forward: batch and tokens must be positive and past ≥ 0, got batch " +
                                                 std::to_string(in.batch) + ", tokens " + std::to_string(in.tokens) +
                                                 ", past " + std::to_string(in.past));
  Impl& im = *impl_;
  const bool resident = in.use_device_cache;
  if (resident) {
    if (!im.cache)
      throw Error(ErrorCode::invalid_argument, "forward: use_device_cache needs reserve_cache or load_cache first");
    const nn::KvCache& c = Impl::kv(*im.cache);
    if (in.batch != int(c.batch) || in.past != 0 || !in.past_key.empty() || !in.past_value.empty() || in.want_cache)
      throw Error(ErrorCode::invalid_argument,
                  "forward: with use_device_cache the batch must be the cache's (" + std::to_string(c.batch) +
                      ") and past, past_key, past_value and want_cache must be left unset");
    if (im.cache_len + in.tokens > int(c.capacity))
      throw Error(ErrorCode::invalid_argument, "forward: the device cache holds " + std::to_string(im.cache_len) +
                                                   " of " + std::to_string(c.capacity) + " positions; " +
                                                   std::to_string(in.tokens) + " more do not fit");
  }
  const size_t B = size_t(in.batch), T = size_t(in.tokens), P = size_t(resident ? im.cache_len : in.past),
               D = size_t(c.hidden_size), H = size_t(c.num_heads), KV = size_t(c.num_kv_heads),
               Dh = size_t(c.head_dim);
  // Every buffer the plan allocates, counted without overflow before anything is allocated.
  const uint64_t most = im.vk.info.max_storage_buffer_range / 4;
  const size_t S = resident ? size_t(Impl::kv(*im.cache).capacity) : T + P;
  checked_product({B, T, D}, most, "hidden_states");
  checked_product({B, T, size_t(im.attention->projection_columns())}, most, "the projections");
  checked_product({B, H, T, Dh}, most, "q");
  checked_product({B, KV, S, Dh}, most, "the key and value cache");
  if (!in.attention_mask.empty()) checked_product({B, T, S}, most, "attention_mask");
  if (in.want_stats) checked_product({B, H, T, S}, most, "the attention scores");
  check_size(in.hidden, B * T * D, "hidden_states", dims({B, T, D}));
  if (!resident) {
    check_size(in.past_key, B * KV * P * Dh, "past_key", dims({B, KV, P, Dh}));
    check_size(in.past_value, B * KV * P * Dh, "past_value", dims({B, KV, P, Dh}));
  }
  const bool mask = !in.attention_mask.empty();
  if (mask) check_size(in.attention_mask, B * T * (P + T), "attention_mask", dims({B, 1, T, P + T}));
  if (im.options.check_finite) {
    const std::vector<int64_t> hs{int64_t(B), int64_t(T), int64_t(D)}, ks{int64_t(B), int64_t(KV), int64_t(P), int64_t(Dh)};
    detail::require_finite(in.hidden, "forward: hidden_states", hs);
    detail::require_norm_in_range(in.hidden, D, "forward: hidden_states", hs);
    if (!resident) {
      detail::require_finite(in.past_key, "forward: past_key", ks);
      detail::require_finite(in.past_value, "forward: past_value", ks);
      if (im.act == Storage::f16) {
        detail::require_fp16_range(in.past_key, "forward: past_key", ks);
        detail::require_fp16_range(in.past_value, "forward: past_value", ks);
      }
    }
    if (mask)
      detail::require_finite(in.attention_mask, "forward: attention_mask",
                             {int64_t(B), 1, int64_t(T), int64_t(P + T)}, true);
  }

  const Impl::Key key{in.batch, in.tokens, resident ? -1 : in.past, mask, in.want_cache, in.want_stats};
  Impl::Plan& p = im.plan(key);
  if (p.past != int(P)) {  // a resident plan whose cache has grown since it was recorded
    p.past = int(P);
    try {
      try {
        im.record(p, gpu::Recorder::Mode::update);
      } catch (const Error&) {  // commands that changed with the length (direct dispatch's counts): record anew
        im.record(p, gpu::Recorder::Mode::record);
      }
    } catch (...) {  // a half-updated plan must not be replayed: drop it
      if (im.last == key) im.last.reset();
      im.plans.drop_if([&](const Impl::Key& k) { return k == key; });
      throw;
    }
  }
  std::memcpy(p.x_up.mapped(), in.hidden.data(), in.hidden.size_bytes());
  im.attention->prepare(*p.attn, uint32_t(P));
  const Storage act = im.act;
  if (P && !resident) {
    nn::encode(in.past_key, act, p.kv_up.mapped());
    nn::encode(in.past_value, act, static_cast<char*>(p.kv_up.mapped()) + in.past_key.size() * ops::element_bytes(act));
  }
  if (mask)  // rows of P + T into rows score_ld apart
    for (size_t row = 0, ld = static_cast<const nn::AttentionPlan&>(*p.attn).score_ld; row < B * T; ++row)
      std::memcpy(static_cast<float*>(p.mask_up.mapped()) + row * ld, in.attention_mask.data() + row * (P + T),
                  (P + T) * sizeof(float));
  p.rec->submit("running the gated attention block");
  im.last = key;
  if (resident) im.cache_len += in.tokens;

  ForwardOutputs out;
  out.output = nn::decode(p.y_down.mapped(), p.y_down.size() / 4, Storage::f32);
  if (in.want_cache) {
    out.present_key = nn::decode(p.k_down.mapped(), p.k_down.size() / ops::element_bytes(act), act);
    out.present_value = nn::decode(p.v_down.mapped(), p.v_down.size() / ops::element_bytes(act), act);
  }
  if (in.want_stats) out.stats = impl_->stats(p);
  if (im.options.check_finite) {
    const std::string why = " (the inputs and weights are finite: an intermediate overflowed the " +
                            std::string(to_string(im.options.precision)) + " storage or fp32 arithmetic)";
    try {
      detail::require_finite(out.output, "forward: the output", {int64_t(B), int64_t(T), int64_t(D)});
      detail::require_finite(out.present_key, "forward: present_key", {int64_t(B), int64_t(KV), int64_t(P + T), int64_t(Dh)});
      detail::require_finite(out.present_value, "forward: present_value", {int64_t(B), int64_t(KV), int64_t(P + T), int64_t(Dh)});
    } catch (const Error& e) {
      throw Error(e.code(), e.what() + why);
    }
  }
  return out;
}

std::vector<float> GatedAttention::forward(std::span<const float> hidden, int batch, int tokens) {
  ForwardInputs in;
  in.hidden = hidden;
  in.batch = batch;
  in.tokens = tokens;
  return run(in).output;
}

void GatedAttention::reserve_cache(int batch, int capacity) {
  Impl& im = *impl_;
  if (batch <= 0 || capacity <= 0)
    throw Error(ErrorCode::invalid_argument, "reserve_cache: batch and capacity must be positive");
  // Resident plans were recorded against the old buffers.
  if (im.last && Impl::resident(*im.last)) im.last.reset();
  im.plans.drop_if(Impl::resident);
  checked_product({size_t(batch), size_t(im.cfg.num_kv_heads), size_t(capacity), size_t(im.cfg.head_dim)},
                  im.vk.info.max_storage_buffer_range / ops::element_bytes(im.act),
                  "reserve_cache: the resident key cache");
  // No cache until both halves exist: a failed allocation leaves none (not a stale capacity).
  im.cache.reset();
  im.cache_len = 0;
  im.cache = im.attention->make_cache(uint32_t(batch), uint32_t(capacity), "resident ");
}

void GatedAttention::load_cache(std::span<const float> key, std::span<const float> value, int batch, int length,
                                int capacity) {
  Impl& im = *impl_;
  if (length < 0 || length > capacity)
    throw Error(ErrorCode::invalid_argument, "load_cache: length must be in 0..capacity");
  if (batch <= 0) throw Error(ErrorCode::invalid_argument, "load_cache: batch must be positive");
  const size_t KV = size_t(im.cfg.num_kv_heads), Dh = size_t(im.cfg.head_dim), L = size_t(length);
  const uint64_t most = im.vk.info.max_storage_buffer_range / ops::element_bytes(im.act);
  checked_product({size_t(batch), KV, size_t(capacity), Dh}, most, "load_cache: the resident key cache");
  check_size(key, size_t(batch) * KV * L * Dh, "past_key", dims({size_t(batch), KV, L, Dh}));
  check_size(value, size_t(batch) * KV * L * Dh, "past_value", dims({size_t(batch), KV, L, Dh}));
  if (im.options.check_finite) {
    const std::vector<int64_t> ks{batch, int64_t(KV), length, int64_t(Dh)};
    detail::require_finite(key, "load_cache: past_key", ks);
    detail::require_finite(value, "load_cache: past_value", ks);
    if (im.act == Storage::f16) {
      detail::require_fp16_range(key, "load_cache: past_key", ks);
      detail::require_fp16_range(value, "load_cache: past_value", ks);
    }
  }
  reserve_cache(batch, capacity);
  const size_t e = ops::element_bytes(im.act), C = size_t(capacity);
  const nn::KvCache& c = Impl::kv(*im.cache);
  for (auto [src, dst] : {std::pair{key, &c.keys}, std::pair{value, &c.values}}) {
    // [B, KV, length, Dh] rows into [B, KV, capacity, Dh], the rest zero.
    std::vector<std::byte> host(size_t(batch) * KV * C * Dh * e);
    for (size_t bk = 0; bk < size_t(batch) * KV; ++bk)
      nn::encode(src.subspan(bk * L * Dh, L * Dh), im.act, host.data() + bk * C * Dh * e);
    gpu::upload(im.vk, *dst, host.data(), host.size());
  }
  im.cache_len = length;
}

int GatedAttention::cache_length() const { return impl_->cache_len; }

void GatedAttention::truncate_cache(int length) {
  if (length < 0 || length > impl_->cache_len)
    throw Error(ErrorCode::invalid_argument, "truncate_cache: length " + std::to_string(length) +
                                                 " is outside 0.." + std::to_string(impl_->cache_len));
  impl_->cache_len = length;
}

std::vector<StageTime> GatedAttention::last_timings() const {
  std::vector<StageTime> out;
  if (const Impl::Plan* p = impl_->last_plan())
    for (const auto& t : p->rec->timings()) out.push_back({t.label, t.microseconds});
  return out;
}

void GatedAttention::replay(int times) {
  const Impl::Plan* p = impl_->last_plan();
  if (!p) throw Error(ErrorCode::invalid_argument, "replay: no forward has run yet");
  for (int i = 0; i < times; ++i) p->rec->submit("replaying the gated attention block");
}

void GatedAttention::set_poison(bool on) {
  if (impl_->poison == on) return;
  impl_->poison = on;
  impl_->plans.for_each([&](const Impl::Key&, Impl::Plan& p) { impl_->record(p); });
}

const BlockConfig& GatedAttention::config() const { return impl_->cfg; }
Precision GatedAttention::precision() const { return impl_->options.precision; }
size_t GatedAttention::recorded_shapes() const { return impl_->plans.size(); }
size_t GatedAttention::recordings() const { return impl_->plans.recordings(); }

}  // namespace vkgate
