#include "vkgate/model.hpp"

#include <algorithm>
#include <climits>
#include <chrono>
#include <cstring>
#include <list>

#include "finite.hpp"
#include "gpu/context_impl.hpp"
#include "nn/stack.hpp"
#include "ops/ops.hpp"
#include "vkgate/checkpoint.hpp"
#include "vkgate/error.hpp"

namespace vkgate {

namespace {

// The plans a Model (forwards without a cache) or a Sequence keeps; the least
// recently used goes first, so memory stays bounded whatever the shapes.
constexpr size_t kMaxPlans = 4;

struct PlanKey {
  int batch, tokens;
  bool stats;
  bool operator==(const PlanKey&) const = default;
};

struct KeyedPlan {
  PlanKey key;
  std::unique_ptr<nn::StackPlan> plan;
};

// Plans by key, the most recently used first.
class PlanCache {
 public:
  nn::StackPlan* find(const PlanKey& key) {
    auto it = std::find_if(plans_.begin(), plans_.end(), [&](const KeyedPlan& p) { return p.key == key; });
    if (it == plans_.end()) return nullptr;
    plans_.splice(plans_.begin(), plans_, it);
    return plans_.front().plan.get();
  }
  nn::StackPlan& add(const PlanKey& key, std::unique_ptr<nn::StackPlan> plan) {
    if (plans_.size() == kMaxPlans) {
      dropped_recordings_ += plans_.back().plan->rec->recordings();
      plans_.pop_back();
    }
    plans_.push_front({key, std::move(plan)});
    return *plans_.front().plan;
  }
  // Drops every plan (they record anew when next used).
  void clear() {
    dropped_recordings_ = recordings();
    plans_.clear();
  }
  size_t recordings() const {
    size_t n = dropped_recordings_;
    for (const KeyedPlan& p : plans_) n += p.plan->rec->recordings();
    return n;
  }
  uint64_t bytes() const;

 private:
  std::list<KeyedPlan> plans_;
  size_t dropped_recordings_ = 0;
};

uint64_t plan_bytes(const nn::StackPlan& p) {
  uint64_t n = p.scratch.bytes();
  for (const gpu::Buffer* b : {&p.ids, &p.rope_up, &p.rope, &p.x, &p.h, &p.last, &p.normed, &p.logits, &p.stats,
                               &p.stats_down})
    n += b->size();
  return n;
}

uint64_t PlanCache::bytes() const {
  uint64_t n = 0;
  for (const KeyedPlan& p : plans_) n += plan_bytes(*p.plan);
  return n;
}

int64_t argmax(std::span<const float> row) {
  return std::max_element(row.begin(), row.end()) - row.begin();  // the first of equal maxima
}

double milliseconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

struct Model::Impl {
  Context& ctx;
  Context::Impl& vk;
  ModelConfig cfg;
  ModelOptions options;
  std::unique_ptr<nn::Stack> stack;
  PlanCache plans;
  std::vector<Sequence::Impl*> sequences;  // live ones
  size_t ended_recordings = 0;             // of sequences that have ended
  std::vector<StageTime> last_timings;
  bool poison = false;

  Impl(Context& c, const ModelConfig& config, const ModelOptions& o) : ctx(c), vk(c.impl()), cfg(config), options(o) {}

  // Ids [B, T], each checked against the vocabulary.
  void check_ids(std::span<const int64_t> ids, int batch, int tokens) const {
    for (size_t i = 0; i < ids.size(); ++i)
      if (ids[i] < 0 || ids[i] >= cfg.vocab_size)
        throw Error(ErrorCode::invalid_argument, "input id " + std::to_string(ids[i]) + " at " +
                                                     detail::index_text(int64_t(i), {batch, tokens}) +
                                                     " is outside the vocabulary [0, " +
                                                     std::to_string(cfg.vocab_size) + ")");
  }
  // Ids [B, T] as int32 into the plan's staging buffer, checked first.
  void put_ids(nn::StackPlan& p, std::span<const int64_t> ids) const {
    check_ids(ids, int(p.batch), int(p.tokens));
    auto* out = static_cast<int32_t*>(p.ids.mapped());
    for (size_t i = 0; i < ids.size(); ++i) out[i] = int32_t(ids[i]);
  }

  // One step after put_ids: the plan recorded (or its parameters updated for
  // another cache length), submitted and waited for. A GLA step's commands do
  // not depend on the position: its state carries everything before it.
  void run(nn::StackPlan& p, uint32_t past, const std::vector<nn::LayerCache>* caches) {
    if (!cfg.gla) {
      const auto table =
          ops::rope_table(p.tokens, uint32_t(cfg.attention.rotary_dim()), cfg.attention.rope_theta, past);
      std::memcpy(p.rope_up.mapped(), table.data(), table.size() * sizeof(float));
    }
    if (p.rec->recordings() == 0) {
      stack->record(p, gpu::Recorder::Mode::record, past, caches, poison);
    } else if (p.past != past && !cfg.gla) {
      try {
        stack->record(p, gpu::Recorder::Mode::update, past, caches, poison);
      } catch (const Error&) {  // a sequence of commands that changed with the length: record it anew
        stack->record(p, gpu::Recorder::Mode::record, past, caches, poison);
      }
    }
    p.rec->submit("running the model");
    last_timings.clear();
    for (const auto& t : p.rec->timings()) last_timings.push_back({t.label, t.microseconds});
  }

  // A GLA model's layers have neither attention probabilities nor sigmoid gate
  // scores: first_token_attn and gate_mean stay empty (as the reference's).
  ModelStats stats(const nn::StackPlan& p) const {
    const int L = cfg.num_hidden_layers, H = cfg.gla ? cfg.gla->num_heads : cfg.attention.num_heads;
    const uint32_t stride = stack->stats_stride();
    const float* s = static_cast<const float*>(p.stats_down.mapped());
    const bool gated = cfg.attention.gate_kind != GateKind::none;
    const double gate_values = double(p.batch) * p.tokens * double(cfg.attention.gate_rows());
    ModelStats out;
    out.layers = L;
    out.heads = H;
    for (int l = 0; l < L; ++l) {
      const float* at = s + size_t(l) * stride;
      if (cfg.gla) {
        out.max_activation.push_back(at[0]);
        continue;
      }
      out.first_token_attn.insert(out.first_token_attn.end(), at, at + H);
      if (gated) out.gate_mean.push_back(double(at[H]) / gate_values);
      out.max_activation.push_back(at[H + 2]);
    }
    return out;
  }
};

struct Sequence::Impl {
  Model::Impl* model;
  int batch = 0, capacity = 0, length = 0;
  std::vector<nn::LayerCache> caches;
  PlanCache plans;
  // GLA: zeroes every layer's state (a new sequence, truncate(0)).
  std::unique_ptr<gpu::Recorder> reset;
  // GLA: a step failed after it may have advanced some states, which no longer
  // match `length`; only truncate(0) makes the sequence usable again.
  bool state_lost = false;

  ~Impl() {
    model->ended_recordings += plans.recordings();
    std::erase(model->sequences, this);
  }
  uint64_t cache_bytes() const {
    uint64_t n = 0;
    for (const nn::LayerCache& c : caches) n += c.keys.size() + c.values.size() + c.state.size();
    return n;
  }
  void zero_states() {
    reset->submit("resetting the GLA states of a sequence");
    state_lost = false;
  }
};

// ---- Sequence ----

Sequence::Sequence(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Sequence::~Sequence() = default;
Sequence::Sequence(Sequence&&) noexcept = default;
Sequence& Sequence::operator=(Sequence&&) noexcept = default;
int Sequence::batch() const { return impl_->batch; }
int Sequence::capacity() const { return impl_->capacity; }
int Sequence::length() const { return impl_->length; }
void Sequence::truncate(int length) {
  Impl& s = *impl_;
  if (length < 0 || length > s.length)
    throw Error(ErrorCode::invalid_argument, "truncate: length " + std::to_string(length) + " is outside 0.." +
                                                 std::to_string(s.length));
  if (s.reset) {  // a GLA model: one state per layer, the sum of every position so far
    if (length == 0) s.zero_states();
    else if (length != s.length)
      throw Error(ErrorCode::invalid_argument,
                  "truncate: length " + std::to_string(length) + " of " + std::to_string(s.length) +
                      ": a GLA model's sequence holds a recurrent state, not one cache entry per position, so it "
                      "cannot be rolled back; truncate to 0 (start again) or keep the length");
  }
  s.length = length;
}

// ---- Model ----

Model Model::load(Context& ctx, const std::string& dir, const ModelOptions& options) {
  const ModelConfig cfg = load_model_config(dir);
  const Checkpoint ckpt(dir);
  return Model(ctx, cfg, model_tensors(ckpt, cfg), options);
}

Model::Model(Context& ctx, const ModelConfig& cfg, const TensorMap& weights, const ModelOptions& options)
    : impl_(std::make_unique<Impl>(ctx, cfg, options)) {
  cfg.validate();
  const nn::Storage act = nn::storage_of(options.precision);
  if (act != nn::Storage::f32 && !impl_->vk.info.storage16)
    throw Error(ErrorCode::unsupported, std::string("precision ") + to_string(options.precision) +
                                            " needs 16-bit storage buffers, which " + impl_->vk.info.name +
                                            " does not support");
  for (const TensorSpec& spec : expected_model_weights(cfg)) {
    const auto it = weights.find(spec.name);
    if (it == weights.end()) throw Error(ErrorCode::missing_tensor, "weights: tensor '" + spec.name + "' is missing");
    const HostTensor& t = it->second;
    if ((!t.shape.empty() && t.shape != spec.shape) || t.numel() != spec.numel() ||
        (t.dtype != DType::F32 && t.dtype != DType::F16 && t.dtype != DType::BF16))
      throw Error(ErrorCode::shape_mismatch, "weights: tensor '" + spec.name + "' is " + to_string(t.dtype) + " " +
                                                 shape_text(t.shape) + ", expected F32, F16 or BF16 " +
                                                 shape_text(spec.shape));
    if (options.check_finite) {
      detail::require_finite(t, "weight '" + spec.name + "'", spec.shape);
      if (options.precision == Precision::fp16) detail::require_fp16_range(t, "weight '" + spec.name + "'", spec.shape);
    }
  }
  impl_->stack = std::make_unique<nn::Stack>(impl_->vk, impl_->vk.tuning, cfg, weights, act);
}

Model::~Model() = default;
Model::Model(Model&&) noexcept = default;
Model& Model::operator=(Model&&) noexcept = default;

std::vector<float> Model::logits(std::span<const int64_t> ids, int batch, int tokens, ModelStats* stats) {
  Impl& m = *impl_;
  if (batch <= 0 || tokens <= 0 || size_t(batch) * size_t(tokens) != ids.size())
    throw Error(ErrorCode::invalid_argument, "logits: " + std::to_string(ids.size()) + " ids for batch " +
                                                 std::to_string(batch) + " × tokens " + std::to_string(tokens));
  const PlanKey key{batch, tokens, stats != nullptr};
  nn::StackPlan* p = m.plans.find(key);
  if (!p) p = &m.plans.add(key, m.stack->plan(uint32_t(batch), uint32_t(tokens), uint32_t(tokens), false, true, stats));
  m.put_ids(*p, ids);
  m.run(*p, 0, nullptr);
  const float* out = static_cast<const float*>(p->logits.mapped());
  if (stats) *stats = m.stats(*p);
  return std::vector<float>(out, out + size_t(batch) * tokens * m.cfg.vocab_size);
}

Sequence Model::start(int batch, int capacity) {
  Impl& m = *impl_;
  if (batch <= 0 || capacity <= 0)
    throw Error(ErrorCode::invalid_argument, "start: batch and capacity must be positive, got " +
                                                 std::to_string(batch) + " and " + std::to_string(capacity));
  auto s = std::make_unique<Sequence::Impl>();
  s->model = &m;
  m.sequences.push_back(s.get());
  s->batch = batch;
  s->capacity = capacity;
  if (m.cfg.gla) {  // one fp32 state per layer, whatever the capacity
    const size_t n = m.stack->gla_state_elements(uint32_t(batch));
    s->reset = std::make_unique<gpu::Recorder>(m.vk, m.stack->tuning());
    s->reset->begin();
    for (int l = 0; l < m.cfg.num_hidden_layers; ++l) {
      nn::LayerCache c;
      c.state = nn::allocate(m.vk, n, nn::Storage::f32, gpu::MemoryKind::device,
                             "layer " + std::to_string(l) + " GLA state");
      s->reset->fill(c.state, 0);  // the word of 0.0f
      s->caches.push_back(std::move(c));
    }
    s->reset->end();
    s->zero_states();
    return Sequence(std::move(s));
  }
  const BlockConfig& a = m.cfg.attention;
  const size_t n = size_t(batch) * size_t(a.num_kv_heads) * size_t(capacity) * size_t(a.head_dim);
  for (int l = 0; l < m.cfg.num_hidden_layers; ++l) {
    const std::string name = "layer " + std::to_string(l) + " ";
    nn::LayerCache c;
    c.keys = nn::allocate(m.vk, n, m.stack->storage(), gpu::MemoryKind::device, name + "key cache");
    c.values = nn::allocate(m.vk, n, m.stack->storage(), gpu::MemoryKind::device, name + "value cache");
    s->caches.push_back(std::move(c));
  }
  return Sequence(std::move(s));
}

std::vector<float> Model::extend(Sequence& seq, std::span<const int64_t> ids, int tokens) {
  Impl& m = *impl_;
  Sequence::Impl& s = *seq.impl_;
  if (s.model != &m) throw Error(ErrorCode::invalid_argument, "extend: the sequence belongs to another model");
  if (s.state_lost)
    throw Error(ErrorCode::invalid_argument, "extend: an earlier step failed and left the sequence's GLA states "
                                             "undefined; truncate(0) starts it again");
  if (tokens <= 0 || size_t(s.batch) * size_t(tokens) != ids.size())
    throw Error(ErrorCode::invalid_argument, "extend: " + std::to_string(ids.size()) + " ids for batch " +
                                                 std::to_string(s.batch) + " × tokens " + std::to_string(tokens));
  if (s.length + tokens > s.capacity)
    throw Error(ErrorCode::invalid_argument, "extend: the sequence holds " + std::to_string(s.length) + " of " +
                                                 std::to_string(s.capacity) + " positions; " +
                                                 std::to_string(tokens) + " more do not fit");
  // Tokens beyond one step's buffers run as several steps, the GLA states carried between them.
  if (const int step = int(std::min<uint32_t>(m.stack->max_step_tokens(uint32_t(s.batch)), INT_MAX));
      step > 0 && tokens > step) {
    m.check_ids(ids, s.batch, tokens);  // before any piece moves the states on
    std::vector<float> last;
    for (int at = 0; at < tokens; at += step) {
      const int n = std::min(step, tokens - at);
      std::vector<int64_t> piece;
      for (int b = 0; b < s.batch; ++b) {
        const auto row = ids.subspan(size_t(b) * size_t(tokens) + size_t(at), size_t(n));
        piece.insert(piece.end(), row.begin(), row.end());
      }
      last = extend(seq, piece, n);
    }
    return last;
  }
  const PlanKey key{s.batch, tokens, false};
  nn::StackPlan* p = s.plans.find(key);
  if (!p)
    p = &s.plans.add(key, m.stack->plan(uint32_t(s.batch), uint32_t(tokens), uint32_t(s.capacity), true, false, false));
  m.put_ids(*p, ids);  // a bad id is refused before any state changes
  try {
    m.run(*p, uint32_t(s.length), &s.caches);
  } catch (...) {
    s.state_lost = s.reset != nullptr;
    throw;
  }
  s.length += tokens;
  const float* out = static_cast<const float*>(p->logits.mapped());
  return std::vector<float>(out, out + size_t(s.batch) * m.cfg.vocab_size);
}

GenerateResult Model::generate(std::span<const int64_t> prompt, const GenerateOptions& options) {
  Impl& m = *impl_;
  if (prompt.empty()) throw Error(ErrorCode::invalid_argument, "generate: the prompt is empty");
  if (options.max_new_tokens < 0) throw Error(ErrorCode::invalid_argument, "generate: max_new_tokens is negative");
  GenerateResult r;
  if (options.max_new_tokens == 0) return r;
  Sequence seq = start(1, int(prompt.size()) + options.max_new_tokens);
  auto t0 = std::chrono::steady_clock::now();
  std::vector<float> logits = extend(seq, prompt, int(prompt.size()));
  r.prefill_ms = milliseconds_since(t0);
  const auto& eos = m.cfg.eos_token_ids;
  while (true) {
    const int64_t id = argmax(logits);
    r.ids.push_back(id);
    const bool more = !options.on_token || options.on_token(id);
    const bool stop = options.stop_at_eos && std::find(eos.begin(), eos.end(), id) != eos.end();
    if (!more || stop || int(r.ids.size()) == options.max_new_tokens) break;
    t0 = std::chrono::steady_clock::now();
    logits = extend(seq, std::span(&id, 1), 1);
    r.step_ms.push_back(milliseconds_since(t0));
  }
  return r;
}

GenerateResult Model::generate(const Tokenizer& tokenizer, std::string_view prompt, const GenerateOptions& options) {
  const std::vector<int32_t> ids32 = tokenizer.encode(prompt);
  if (ids32.empty()) throw Error(ErrorCode::invalid_argument, "generate: the prompt encodes to no tokens");
  const std::vector<int64_t> ids(ids32.begin(), ids32.end());
  Tokenizer::StreamDecoder stream = tokenizer.stream_decoder();
  std::string text;
  GenerateOptions o = options;
  // The text callback runs inside the id callback, so that a stop from either
  // ends the generation after the same id.
  o.on_token = [&](int64_t id) {
    if (id > INT32_MAX)
      throw Error(ErrorCode::invalid_argument, "generate: the model chose id " + std::to_string(id) +
                                                   ", outside the vocabulary of " + tokenizer.source());
    const std::string piece = stream.push(int32_t(id));
    text += piece;
    const bool more_ids = !options.on_token || options.on_token(id);
    return (!options.on_text || options.on_text(piece)) && more_ids;
  };
  GenerateResult r = generate(ids, o);
  const std::string rest = stream.finish();
  if (!rest.empty() && options.on_text) options.on_text(rest);
  r.text = text + rest;
  return r;
}

std::optional<double> GenerateResult::tokens_per_s() const {
  double ms = 0;
  for (double t : step_ms) ms += t;
  if (step_ms.empty() || !(ms > 0)) return std::nullopt;
  return double(step_ms.size()) * 1000.0 / ms;
}

const ModelConfig& Model::config() const { return impl_->cfg; }
Precision Model::precision() const { return impl_->options.precision; }

MemoryUse Model::memory() const {
  MemoryUse u;
  u.weights = impl_->stack->weight_bytes();
  u.workspace = impl_->plans.bytes();
  for (const Sequence::Impl* s : impl_->sequences) {
    u.kv_cache += s->cache_bytes();
    u.workspace += s->plans.bytes();
  }
  return u;
}

size_t Model::recordings() const {
  size_t n = impl_->plans.recordings() + impl_->ended_recordings;
  for (const Sequence::Impl* s : impl_->sequences) n += s->plans.recordings();
  return n;
}

std::vector<StageTime> Model::last_timings() const { return impl_->last_timings; }

void Model::set_poison(bool on) {
  // The plans are made again when next used, with or without the fills.
  impl_->poison = on;
  impl_->plans.clear();
  for (Sequence::Impl* s : impl_->sequences) s->plans.clear();
}

}  // namespace vkgate
