#include "vkgate/model.hpp"

#include <algorithm>
#include <climits>
#include <cstring>

#include "finite.hpp"
#include "gpu/context_impl.hpp"
#include "gpu/transfer.hpp"
#include "nn/plan_cache.hpp"
#include "nn/recurrent_states.hpp"
#include "nn/stack.hpp"
#include "ops/ops.hpp"
#include "vkgate/checkpoint.hpp"
#include "vkgate/error.hpp"
#include "vkgate/quant.hpp"
#include "vkgate/gguf_model.hpp"

namespace vkgate {

namespace {

// The plans a Model (forwards without a cache) or a Sequence keeps (nn::PlanCache).
constexpr size_t kMaxPlans = 4;

struct PlanKey {
  int batch, tokens;
  bool stats;
  uint32_t top_k = 0;  // StackPlan::top_k
  bool operator==(const PlanKey&) const = default;
};

using PlanCache = nn::PlanCache<PlanKey, nn::StackPlan>;

template <typename Key>
uint64_t plan_bytes(const nn::PlanCache<Key, nn::StackPlan>& plans) {
  uint64_t n = 0;
  plans.for_each([&](const Key&, const nn::StackPlan& p) { n += p.bytes(); });
  return n;
}

// Ids [rows, tokens] run as pieces of at most `step` tokens per row, in order;
// the last piece's logits.
template <typename Run>
std::vector<float> in_pieces(std::span<const int64_t> ids, size_t rows, int tokens, int step, Run run) {
  std::vector<float> last;
  for (int at = 0; at < tokens; at += step) {
    const int n = std::min(step, tokens - at);
    std::vector<int64_t> piece;
    for (size_t r = 0; r < rows; ++r) {
      const auto row = ids.subspan(r * size_t(tokens) + size_t(at), size_t(n));
      piece.insert(piece.end(), row.begin(), row.end());
    }
    last = run(std::span<const int64_t>(piece), n);
  }
  return last;
}

}  // namespace

struct Model::Impl {
  Context& ctx;
  Context::Impl& vk;
  ModelConfig cfg;
  ModelOptions options;
  std::unique_ptr<nn::Stack> stack;
  PlanCache plans{kMaxPlans};
  // The steps of several sequences together (extend of several), by the
  // sequences (one per row), the step's top_k and its tokens per row.
  struct RowsKey {
    std::vector<const Sequence::Impl*> seqs;
    uint32_t top_k = 0, tokens = 1;
    bool operator==(const RowsKey&) const = default;
  };
  nn::PlanCache<RowsKey, nn::StackPlan> row_plans{kMaxPlans};
  std::vector<Sequence::Impl*> sequences;  // live ones
  size_t ended_recordings = 0;             // of sequences that have ended
  // The recorder of the last step, whose timestamps last_timings() reads.
  std::shared_ptr<const gpu::Recorder> timed;
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
  // A step that would hold `positions` positions of one sequence, against the context limit.
  void check_context(int64_t positions, const std::string& doing) const {
    const int limit = options.ignore_context_limit ? 0 : cfg.context_limit();
    if (limit > 0 && positions > limit)
      throw Error(ErrorCode::invalid_argument,
                  doing + ": " + std::to_string(positions) + " positions are more than the model's context limit of " +
                      std::to_string(limit) + " (max_position_embeddings " +
                      std::to_string(cfg.attention.max_position_embeddings) +
                      (limit != cfg.attention.max_position_embeddings ? ", scaled by its rope_scaling" : "") +
                      "); ModelOptions::ignore_context_limit (vkgate --ignore-context-limit) runs past it");
  }
  // Ids [B, T] as int32 into the plan's staging buffer, checked first.
  void put_ids(nn::StackPlan& p, std::span<const int64_t> ids) const {
    check_ids(ids, int(p.batch), int(p.tokens));
    auto* out = static_cast<int32_t*>(p.ids.mapped());
    for (size_t i = 0; i < ids.size(); ++i) out[i] = int32_t(ids[i]);
  }

  // One step after put_ids: the plan recorded (or its parameters updated for
  // another cache length), submitted and waited for.
  void run(nn::StackPlan& p, uint32_t past, const nn::LayerCaches* caches) {
    stack->prepare(p, past);
    submit(p, p.past != past, [&](gpu::Recorder::Mode mode) { stack->record(p, mode, past, caches, poison); });
  }
  // The same for a plan of several sequences, one per row.
  void run_rows(nn::StackPlan& p, std::span<const nn::RowSequence> rows) {
    std::vector<uint32_t> pasts;
    for (const nn::RowSequence& r : rows) pasts.push_back(r.past);
    stack->prepare_rows(p, pasts);
    submit(p, p.pasts != pasts, [&](gpu::Recorder::Mode mode) { stack->record_rows(p, mode, rows, poison); });
  }
  // Records `p` by `record` the first time, updates its parameters when the
  // lengths `changed`, then submits and waits.
  template <typename Record>
  void submit(nn::StackPlan& p, bool changed, Record record) {
    if (p.rec->recordings() == 0) {
      record(gpu::Recorder::Mode::record);
    } else if (changed) {
      try {
        record(gpu::Recorder::Mode::update);
      } catch (const Error&) {  // a sequence of commands that changed with the length: record it anew
        record(gpu::Recorder::Mode::record);
      }
    }
    p.rec->submit("running the model");
    timed = p.rec;
  }

  // One step of ids [batch, tokens] of `s` (checked by the caller, within one
  // step's buffers) with its plan of `top_k`; the plan holds the results.
  const nn::StackPlan& run_sequence(Sequence::Impl& s, std::span<const int64_t> ids, int tokens, uint32_t top_k);
  // `tokens` positions of each of several sequences (extend of several, ids
  // [n, tokens], within one step's buffers): one sequence's own plan, or the
  // plan of the set.
  const nn::StackPlan& step_sequences(std::span<Sequence* const> seqs, std::span<const int64_t> ids, int tokens,
                                      uint32_t top_k);

  // Each layer's statistics as its mixer and MLP read them; the attention
  // lists hold the layers with attention probabilities.
  ModelStats stats(const nn::StackPlan& p) const {
    const int L = cfg.num_hidden_layers;
    const float* s = static_cast<const float*>(p.stats_down.mapped());
    ModelStats out;
    out.layers = L;
    for (int l = 0; l < L; ++l) {
      const nn::MixerStats m = stack->layer_stats(p, l);
      if (!m.first_token_attn.empty()) {
        out.attention_layers.push_back(l);
        out.heads = int(m.first_token_attn.size());
        out.first_token_attn.insert(out.first_token_attn.end(), m.first_token_attn.begin(), m.first_token_attn.end());
        if (m.gate_mean) out.gate_mean.push_back(*m.gate_mean);
      }
      if (cfg.sparse_mlp(l)) {
        const std::vector<double> load = stack->mlp_stats(p, l);
        out.moe_layers.push_back(l);
        out.experts = int(load.size());
        out.expert_load.insert(out.expert_load.end(), load.begin(), load.end());
      }
      out.max_activation.push_back(s[size_t(l + 1) * stack->stats_stride() - 1]);
    }
    return out;
  }
};

struct Sequence::Impl {
  Model::Impl* model;
  int batch = 0, capacity = 0, length = 0;
  nn::LayerCaches caches;
  PlanCache plans{kMaxPlans};
  // Zeroes them for a new sequence (truncate(0)), saves and restores the checkpoint.
  nn::RecurrentStates states;
  // A step failed after it may have advanced some recurrent states, which no
  // longer match `length`; only truncate(0) or to the checkpoint makes the
  // sequence usable again.
  bool state_lost = false;
  int checkpoint_length = -1;  // where the states' copy was saved; -1: none

  Impl(Model::Impl& m, int b, int c)
      : model(&m), batch(b), capacity(c), caches(m.stack->make_caches(uint32_t(b), uint32_t(c))),
        states(m.vk, m.stack->tuning()) {
    states.bind(caches);
  }
  ~Impl() {
    drop_recordings();
    std::erase(model->sequences, this);
  }
  bool recurrent() const { return states.any(); }
  uint64_t cache_bytes() const {
    uint64_t n = states.saved_bytes();
    for (const auto& c : caches) n += c->bytes();
    return n;
  }
  void clear_states() {
    states.clear();
    state_lost = false;
  }
  void restore_states() {
    states.restore();
    state_lost = false;
  }
  // Drops every recording that binds the caches: the steps (this sequence's
  // and the ones it shares with others) can never run again.
  void drop_recordings() {
    model->ended_recordings += plans.recordings();
    plans = PlanCache{kMaxPlans};
    model->row_plans.drop_if([this](const Model::Impl::RowsKey& key) {
      return std::find(key.seqs.begin(), key.seqs.end(), this) != key.seqs.end();
    });
  }
};

const nn::StackPlan& Model::Impl::run_sequence(Sequence::Impl& s, std::span<const int64_t> ids, int tokens,
                                               uint32_t top_k) {
  const PlanKey key{s.batch, tokens, false, top_k};
  nn::StackPlan* p = s.plans.find(key);
  if (!p)
    p = &s.plans.add(key, stack->plan(uint32_t(s.batch), uint32_t(tokens), uint32_t(s.capacity), true, false, false,
                                      top_k));
  put_ids(*p, ids);  // a bad id is refused before any state changes
  try {
    run(*p, uint32_t(s.length), &s.caches);
  } catch (...) {
    s.state_lost = s.recurrent();
    throw;
  }
  s.length += tokens;
  return *p;
}

const nn::StackPlan& Model::Impl::step_sequences(std::span<Sequence* const> seqs, std::span<const int64_t> ids,
                                                 int tokens, uint32_t top_k) {
  const size_t n = seqs.size();
  if (n == 0 || tokens <= 0 || ids.size() != n * size_t(tokens))
    throw Error(ErrorCode::invalid_argument, "extend: " + std::to_string(ids.size()) + " ids for " +
                                                 std::to_string(n) + " sequences × tokens " + std::to_string(tokens));
  RowsKey key{{}, top_k, uint32_t(tokens)};
  std::vector<Sequence::Impl*> impls;
  for (size_t i = 0; i < n; ++i) {
    const std::string which = "extend: sequence " + std::to_string(i);
    if (!seqs[i] || !seqs[i]->impl_) throw Error(ErrorCode::invalid_argument, which + " is null or moved from");
    Sequence::Impl& s = *seqs[i]->impl_;
    if (s.model != this) throw Error(ErrorCode::invalid_argument, which + " belongs to another model");
    if (s.batch != 1)
      throw Error(ErrorCode::invalid_argument, which + " has batch " + std::to_string(s.batch) +
                                                   "; several sequences step together one row each (batch 1)");
    if (std::find(key.seqs.begin(), key.seqs.end(), &s) != key.seqs.end())
      throw Error(ErrorCode::invalid_argument, which + " is given twice");
    if (s.state_lost)
      throw Error(ErrorCode::invalid_argument, which + ": an earlier step failed and left its recurrent states "
                                                       "undefined; truncate(0) starts it again");
    check_context(int64_t(s.length) + tokens, which);
    if (s.length + tokens > s.capacity)
      throw Error(ErrorCode::invalid_argument, which + " holds " + std::to_string(s.length) + " of " +
                                                   std::to_string(s.capacity) + " positions; " +
                                                   std::to_string(tokens) + " more do not fit");
    key.seqs.push_back(&s);
    impls.push_back(&s);
  }
  check_ids(ids, int(n), tokens);
  if (n == 1) return run_sequence(*impls[0], ids, tokens, top_k);
  nn::StackPlan* p = row_plans.find(key);
  if (!p) {
    std::vector<uint32_t> capacities;
    for (const Sequence::Impl* s : impls) capacities.push_back(uint32_t(s->capacity));
    p = &row_plans.add(key, stack->plan_rows(std::move(capacities), uint32_t(tokens), top_k));
  }
  put_ids(*p, ids);
  std::vector<nn::RowSequence> rows;
  for (const Sequence::Impl* s : impls) rows.push_back({&s->caches, uint32_t(s->length)});
  try {
    run_rows(*p, rows);
  } catch (...) {
    for (Sequence::Impl* s : impls) s->state_lost = s->recurrent();
    throw;
  }
  for (Sequence::Impl* s : impls) s->length += tokens;
  return *p;
}

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
  if (s.recurrent()) {  // a recurrent state sums every position so far
    if (length == s.checkpoint_length && (length != s.length || s.state_lost)) s.restore_states();
    else if (length == 0) s.clear_states();
    else if (length != s.length)
      throw Error(ErrorCode::invalid_argument,
                  "truncate: length " + std::to_string(length) + " of " + std::to_string(s.length) +
                      ": the sequence holds recurrent states (GLA or Gated DeltaNet layers), not one cache entry per "
                      "position, so it cannot be rolled back there: only to 0 (start again)" +
                      (s.checkpoint_length > 0 ? ", to its checkpoint at " + std::to_string(s.checkpoint_length) : "") +
                      " or to its length");
  }
  if (length < s.checkpoint_length) s.checkpoint_length = -1;
  s.length = length;
}
void Sequence::checkpoint() {
  Impl& s = *impl_;
  if (s.state_lost)
    throw Error(ErrorCode::invalid_argument, "checkpoint: an earlier step failed and left the sequence's recurrent "
                                             "states undefined; truncate to 0 or the checkpoint first");
  s.states.save();
  s.checkpoint_length = s.length;
}
void Sequence::reserve(int capacity) {
  Impl& s = *impl_;
  if (capacity <= 0)
    throw Error(ErrorCode::invalid_argument, "reserve: capacity must be positive, got " + std::to_string(capacity));
  if (capacity <= s.capacity) return;
  Model::Impl& m = *s.model;
  nn::LayerCaches grown = m.stack->make_caches(uint32_t(s.batch), uint32_t(capacity));
  gpu::Recorder rec(m.vk, m.stack->tuning());
  rec.begin();
  for (size_t i = 0; i < grown.size(); ++i) s.caches[i]->record_copy(rec, *grown[i], uint32_t(s.length));
  rec.end();
  rec.submit("copying a sequence's caches to room for " + std::to_string(capacity) + " positions");
  s.drop_recordings();
  s.caches = std::move(grown);
  s.capacity = capacity;
  s.states.bind(s.caches);
}
int Sequence::checkpoint_length() const { return impl_->checkpoint_length; }
int Sequence::rollback_length(int at_most) const {
  const Impl& s = *impl_;
  if (at_most < 0)
    throw Error(ErrorCode::invalid_argument, "rollback_length: at_most must be at least 0, got " + std::to_string(at_most));
  at_most = std::min(at_most, s.length);
  if (!s.recurrent()) return at_most;
  if (at_most == s.length && !s.state_lost) return at_most;
  return s.checkpoint_length >= 0 && s.checkpoint_length <= at_most ? s.checkpoint_length : 0;
}

// ---- Model ----

Model Model::load(Context& ctx, const std::string& dir, const ModelOptions& options) {
  if (is_gguf_file(dir)) {  // a GGUF file: config and tensors from it, checked before any upload
    const GgufFile file = GgufFile::open(dir);
    const ModelConfig cfg = gguf_model_config(file);
    TensorBuffers copies;
    return Model(ctx, cfg, gguf_model_tensors(file, cfg, copies), options);
  }
  const ModelConfig cfg = load_model_config(dir);
  const Checkpoint ckpt(dir);
  return Model(ctx, cfg, model_tensors(ckpt, cfg), options);
}

bool quantizable_weight(const std::string& name) {
  if (name == "lm_head.weight") return true;
  if (!name.ends_with(".weight")) return false;
  // The module's own name: "q_proj", "in_proj_qkvz", "gk_proj" of "gk_proj.0".
  std::string module = name.substr(0, name.size() - 7);
  std::string last = module.substr(module.rfind('.') + 1);
  if (!last.empty() && last.find_first_not_of("0123456789") == std::string::npos) {
    module.resize(module.size() - last.size() - 1);
    last = module.substr(module.rfind('.') + 1);
  }
  return last.find("proj") != std::string::npos;
}

TensorMap quantize_weights(const ModelConfig& cfg, const TensorMap& weights, DType quant,
                           std::vector<std::vector<std::byte>>& storage) {
  if (!is_quantized(quant))
    throw Error(ErrorCode::invalid_argument, std::string("quantize_weights: ") + to_string(quant) + " is not a block format");
  TensorMap out = weights;
  for (const TensorSpec& spec : expected_model_weights(cfg)) {
    const auto it = out.find(spec.name);
    if (it == out.end() || !quantizable_weight(spec.name) || spec.shape.size() != 2) continue;
    HostTensor& t = it->second;
    if (is_quantized(t.dtype) || spec.shape[1] % int64_t(block_elements(quant)) != 0) continue;
    const std::vector<float> f = nn::to_f32(t);
    storage.push_back(quantize(quant, f));
    t = HostTensor{quant, spec.shape, storage.back()};
  }
  return out;
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
    const bool float_or_blocks = t.dtype == DType::F32 || t.dtype == DType::F16 || t.dtype == DType::BF16 ||
                                 is_quantized(t.dtype);
    if ((!t.shape.empty() && t.shape != spec.shape) || t.numel() != spec.numel() || !float_or_blocks)
      throw Error(ErrorCode::shape_mismatch, "weights: tensor '" + spec.name + "' is " + to_string(t.dtype) + " " +
                                                 shape_text(t.shape) + ", expected F32, F16, BF16 or a block format " +
                                                 shape_text(spec.shape));
    if (options.check_finite) detail::require_usable_weight(t, spec, options.precision);
  }
  std::vector<std::vector<std::byte>> blocks;  // alive until uploaded
  TensorMap quantized;
  if (options.quant) quantized = quantize_weights(cfg, weights, *options.quant, blocks);
  const TensorMap& used = options.quant ? quantized : weights;
  gpu::Tuning tuning = impl_->vk.tuning;
  tuning.int8_activations = options.int8_activations;
  impl_->stack = std::make_unique<nn::Stack>(impl_->vk, tuning, cfg, used, act);
}

Model::~Model() = default;
Model::Model(Model&&) noexcept = default;
Model& Model::operator=(Model&&) noexcept = default;

std::vector<float> Model::logits(std::span<const int64_t> ids, int batch, int tokens, ModelStats* stats) {
  Impl& m = *impl_;
  if (batch <= 0 || tokens <= 0 || size_t(batch) * size_t(tokens) != ids.size())
    throw Error(ErrorCode::invalid_argument, "logits: " + std::to_string(ids.size()) + " ids for batch " +
                                                 std::to_string(batch) + " × tokens " + std::to_string(tokens));
  m.check_context(tokens, "logits");
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
  auto s = std::make_unique<Sequence::Impl>(m, batch, capacity);
  m.sequences.push_back(s.get());
  s->clear_states();  // recurrent states start at zero
  return Sequence(std::move(s));
}

std::vector<float> Model::extend(Sequence& seq, std::span<const int64_t> ids, int tokens) {
  Impl& m = *impl_;
  Sequence::Impl& s = *seq.impl_;
  if (s.model != &m) throw Error(ErrorCode::invalid_argument, "extend: the sequence belongs to another model");
  if (s.state_lost)
    throw Error(ErrorCode::invalid_argument, "extend: an earlier step failed and left the sequence's recurrent states "
                                             "undefined; truncate(0) starts it again");
  if (tokens <= 0 || size_t(s.batch) * size_t(tokens) != ids.size())
    throw Error(ErrorCode::invalid_argument, "extend: " + std::to_string(ids.size()) + " ids for batch " +
                                                 std::to_string(s.batch) + " × tokens " + std::to_string(tokens));
  m.check_context(int64_t(s.length) + tokens, "extend");
  if (s.length + tokens > s.capacity)
    throw Error(ErrorCode::invalid_argument, "extend: the sequence holds " + std::to_string(s.length) + " of " +
                                                 std::to_string(s.capacity) + " positions; " +
                                                 std::to_string(tokens) + " more do not fit");
  // Tokens beyond one step's buffers run as several steps, the GLA states carried between them.
  if (const int step = int(std::min<uint32_t>(m.stack->max_step_tokens(uint32_t(s.batch)), INT_MAX));
      step > 0 && tokens > step) {
    m.check_ids(ids, s.batch, tokens);  // before any piece moves the states on
    return in_pieces(ids, size_t(s.batch), tokens, step,
                     [&](std::span<const int64_t> piece, int n) { return extend(seq, piece, n); });
  }
  const nn::StackPlan& p = m.run_sequence(s, ids, tokens, 0);
  const float* out = static_cast<const float*>(p.logits.mapped());
  return std::vector<float>(out, out + size_t(s.batch) * m.cfg.vocab_size);
}

std::vector<float> Model::extend(std::span<Sequence* const> seqs, std::span<const int64_t> ids, int tokens) {
  Impl& m = *impl_;
  const size_t n = seqs.size();
  if (const int step = int(std::min<uint32_t>(m.stack->max_step_tokens(uint32_t(std::max<size_t>(n, 1))), INT_MAX));
      step > 0 && tokens > step && ids.size() == n * size_t(tokens)) {
    m.check_ids(ids, int(n), tokens);  // before any piece moves a sequence on
    return in_pieces(ids, n, tokens, step,
                     [&](std::span<const int64_t> piece, int k) { return extend(seqs, piece, k); });
  }
  const nn::StackPlan& p = m.step_sequences(seqs, ids, tokens, 0);
  const float* out = static_cast<const float*>(p.logits.mapped());
  return std::vector<float>(out, out + seqs.size() * size_t(impl_->cfg.vocab_size));
}

TopLogits Model::extend_top(std::span<Sequence* const> seqs, std::span<const int64_t> ids, int k) {
  Impl& m = *impl_;
  const int most = std::min<int>(int(ops::kTopKMax), m.cfg.vocab_size);
  if (k < 1 || k > most)
    throw Error(ErrorCode::invalid_argument,
                "extend_top: k " + std::to_string(k) + " is outside [1, " + std::to_string(most) + "]");
  const nn::StackPlan& p = m.step_sequences(seqs, ids, 1, uint32_t(k));
  const size_t n = seqs.size(), V = size_t(m.cfg.vocab_size);
  TopLogits t;
  t.k = k;
  const auto* pairs = static_cast<const uint32_t*>(p.top.mapped());
  std::vector<float> all;  // every row's logits, read only where a row's ties ran past k
  for (size_t r = 0; r < n; ++r) {
    const uint32_t* row = pairs + r * size_t(k + 1) * 2;
    for (int i = 0; i < k; ++i) {
      float v;
      std::memcpy(&v, &row[2 * i], 4);
      t.logits.push_back(v);
      t.ids.push_back(int64_t(row[2 * i + 1]));
    }
    if (row[2 * k] == 0) continue;
    if (all.empty()) {
      all.resize(n * V);
      gpu::download(m.vk, p.logits, all.data(), all.size() * 4);
    }
    t.full[int(r)].assign(all.begin() + long(r * V), all.begin() + long((r + 1) * V));
  }
  return t;
}

std::vector<int64_t> Model::extend_greedy(std::span<Sequence* const> seqs, std::span<const int64_t> ids) {
  std::vector<int64_t> next(seqs.size());
  if (impl_->vk.tuning.device_top_k) {
    const TopLogits t = extend_top(seqs, ids, 1);
    std::copy(t.ids.begin(), t.ids.end(), next.begin());
    return next;
  }
  const std::vector<float> logits = extend(seqs, ids);
  const auto V = long(impl_->cfg.vocab_size);
  for (size_t i = 0; i < seqs.size(); ++i)
    next[i] = std::max_element(logits.begin() + long(i) * V, logits.begin() + long(i + 1) * V) - (logits.begin() + long(i) * V);
  return next;
}

const ModelConfig& Model::config() const { return impl_->cfg; }
Context& Model::context() { return impl_->ctx; }
int Model::context_limit() const { return impl_->options.ignore_context_limit ? 0 : impl_->cfg.context_limit(); }
Precision Model::precision() const { return impl_->options.precision; }

MemoryUse Model::memory() const {
  MemoryUse u;
  u.weights = impl_->stack->weight_bytes();
  u.weights_per_token = impl_->stack->token_read_bytes();
  u.workspace = plan_bytes(impl_->plans) + plan_bytes(impl_->row_plans);
  for (const Sequence::Impl* s : impl_->sequences) {
    u.kv_cache += s->cache_bytes();
    u.workspace += plan_bytes(s->plans);
  }
  return u;
}

size_t Model::recordings() const {
  size_t n = impl_->plans.recordings() + impl_->row_plans.recordings() + impl_->ended_recordings;
  for (const Sequence::Impl* s : impl_->sequences) n += s->plans.recordings();
  return n;
}

std::vector<StageTime> Model::last_timings() const {
  std::vector<StageTime> out;
  if (impl_->timed)
    for (const auto& t : impl_->timed->timings()) out.push_back({t.label, t.microseconds});
  return out;
}

void Model::set_poison(bool on) {
  // The plans are made again when next used, with or without the fills.
  impl_->poison = on;
  impl_->plans.clear();
  impl_->row_plans.clear();
  for (Sequence::Impl* s : impl_->sequences) s->plans.clear();
}

}  // namespace vkgate
