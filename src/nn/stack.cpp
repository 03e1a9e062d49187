#include "nn/stack.hpp"

#include <algorithm>
#include <climits>

#include "ops/ops.hpp"
#include "vkgate/error.hpp"

namespace vkgate::nn {

namespace {
// Layer `layer`'s mixer tensors under their bare names, viewed from the model's full names.
TensorMap mixer_view(const MixerConfig& mixer, const TensorMap& w, int layer) {
  TensorMap bare;
  for (const TensorSpec& spec : mixer_weights(mixer))
    bare[spec.name] = w.at(mixer_tensor_name(mixer, layer, spec.name));
  return bare;
}
}  // namespace

Stack::Stack(Context::Impl& vk, const gpu::Tuning& tuning, const ModelConfig& cfg, const TensorMap& w, Storage act)
    : vk_(vk), tuning_(tuning), cfg_(cfg), act_(act) {
  const uint32_t V = uint32_t(cfg.vocab_size), D = uint32_t(cfg.hidden_size());
  // Progress by tensors: the embedding and lm_head, then each layer's, then the final norm.
  const std::vector<TensorSpec> specs = expected_model_weights(cfg);
  gpu::ProgressReport report(vk, Progress::Task::tensors, specs.size());
  uint64_t done = 0, bytes = 0;
  auto loaded_layer = [&](int layer) {
    const std::string prefix = layer_tensor_name(layer, "");
    for (const TensorSpec& spec : specs)
      if (spec.name.starts_with(prefix)) {
        ++done;
        bytes += w.at(spec.name).bytes.size();
      }
    report.advance(done, bytes);
  };
  // A table in a block format stays in it (the gather dequantizes the rows
  // it reads), and so does lm_head; a tied table's one copy serves both.
  const HostTensor& table = w.at(cfg.embedding_name());
  embed_ = std::make_unique<VocabMatrix>(vk, tuning, table, V, D, act, cfg.embedding_name());
  if (!cfg.tie_word_embeddings)
    lm_head_ = std::make_unique<VocabMatrix>(vk, tuning, w.at("lm_head.weight"), V, D, act, "lm_head.weight");
  done = cfg.tie_word_embeddings ? 1 : 2;
  bytes = table.bytes.size() + (cfg.tie_word_embeddings ? 0 : w.at("lm_head.weight").bytes.size());
  report.advance(done, bytes);
  std::vector<MixerConfig> planned;  // the distinct mixer configs, in the order of their plans
  for (int i = 0; i < cfg.num_hidden_layers; ++i) {
    const MixerConfig mixer = cfg.mixer(i);
    mixers_.push_back(make_mixer(vk, tuning, mixer, mixer_view(mixer, w, i), act));
    ffns_.push_back(make_feed_forward(vk, tuning, cfg, w, i, act));
    const auto same = std::find(planned.begin(), planned.end(), mixer);
    plan_of_.push_back(size_t(same - planned.begin()));
    if (same == planned.end()) {
      planned.push_back(mixer);
      planners_.push_back(size_t(i));
    }
    loaded_layer(i);
  }
  uint32_t mlp_stats = 0;
  for (size_t l = 0; l < mixers_.size(); ++l) {
    mixer_stats_ = std::max(mixer_stats_, mixers_[l]->stats_floats());
    mlp_stats = std::max(mlp_stats, ffns_[l]->stats_floats());
  }
  stats_stride_ = mixer_stats_ + mlp_stats + 1;
  final_norm_ = upload(vk, stored(w.at("model.norm.weight"), Storage::f32), "model.norm.weight");
  report.advance(specs.size(), bytes + w.at("model.norm.weight").bytes.size());
}

uint32_t Stack::max_step_tokens(uint32_t batch) const {
  uint32_t most = UINT32_MAX;
  for (size_t planner : planners_) most = std::min(most, mixers_[planner]->max_step_tokens(batch));
  for (const auto& f : ffns_) most = std::min(most, f->max_step_rows() / batch);
  return most;
}

LayerCaches Stack::make_caches(uint32_t batch, uint32_t capacity) const {
  LayerCaches caches;
  for (size_t l = 0; l < mixers_.size(); ++l)
    caches.push_back(mixers_[l]->make_cache(batch, capacity, "layer " + std::to_string(l) + " "));
  return caches;
}


MixerStats Stack::layer_stats(const StackPlan& p, int layer) const {
  const float* at = static_cast<const float*>(p.stats_down.mapped()) + size_t(layer) * stats_stride_;
  return mixers_[size_t(layer)]->read_stats(at, double(p.batch) * p.tokens);
}

std::vector<double> Stack::mlp_stats(const StackPlan& p, int layer) const {
  const float* at = static_cast<const float*>(p.stats_down.mapped()) + size_t(layer) * stats_stride_ + mixer_stats_;
  return std::vector<double>(at, at + ffns_[size_t(layer)]->stats_floats());
}

uint64_t StackPlan::bytes() const {
  uint64_t n = scratch.bytes();
  for (const Buffer* b : {&ids, &x, &h, &last, &normed, &logits, &top, &stats, &stats_down}) n += b->size();
  return n;
}

std::unique_ptr<StackPlan> Stack::plan(uint32_t batch, uint32_t tokens, uint32_t kv_stride, bool sequence,
                                       bool all_logits, bool stats, uint32_t top_k) const {
  return make_plan({batch, tokens, kv_stride, sequence, stats, false, {}}, all_logits, top_k);
}

std::unique_ptr<StackPlan> Stack::plan_rows(std::vector<uint32_t> row_strides, uint32_t tokens, uint32_t top_k) const {
  const uint32_t batch = uint32_t(row_strides.size()),
                 most = *std::max_element(row_strides.begin(), row_strides.end());
  return make_plan({batch, tokens, most, true, false, false, std::move(row_strides)}, false, top_k);
}

std::unique_ptr<StackPlan> Stack::make_plan(MixerShape shape, bool all_logits, uint32_t top_k) const {
  const uint32_t batch = shape.batch, tokens = shape.tokens;
  const bool stats = shape.stats;
  auto p = std::make_unique<StackPlan>();
  p->batch = batch;
  p->tokens = tokens;
  p->kv_stride = shape.kv_stride;
  p->sequence = shape.sequence;
  p->all_logits = all_logits;
  p->with_stats = stats;
  p->row_strides = shape.row_strides;
  const size_t B = batch, T = tokens, BT = B * T, D = size_t(cfg_.hidden_size()), M = p->rows(),
               L = mixers_.size();
  const VocabMatrix& lm = lm_head_ ? *lm_head_ : *embed_;
  // Layers of one config share a plan; every plan shares the scratch.
  for (size_t planner : planners_)
    p->mixers.push_back(mixers_[planner]->plan(shape, p->scratch));
  for (const auto& f : ffns_) f->reserve(uint32_t(BT), p->scratch);
  lm.reserve(uint32_t(M), p->scratch);
  p->scratch.allocate(vk_);
  p->ids = vk_.allocator->allocate(BT * 4, MemoryKind::upload, "input_ids (staging)");
  p->x = allocate(vk_, BT * D, Storage::f32, MemoryKind::device, "residual stream");
  p->h = allocate(vk_, BT * D, Storage::f32, MemoryKind::device, "residual stream after the mixer");
  if (!all_logits) p->last = allocate(vk_, B * D, Storage::f32, MemoryKind::device, "last positions");
  p->normed = allocate(vk_, M * lm.ld(), act_, MemoryKind::device, "final norm");
  p->top_k = top_k;
  if (top_k) {  // the sampler reads top_k per row: the logits stay on the device
    p->logits = allocate(vk_, M * size_t(cfg_.vocab_size), Storage::f32, MemoryKind::device, "logits");
    p->top = vk_.allocator->allocate(M * (top_k + 1) * 8, MemoryKind::readback, "top logits (readback)");
  } else {
    p->logits = allocate(vk_, M * size_t(cfg_.vocab_size), Storage::f32, MemoryKind::readback, "logits (readback)");
  }
  if (stats) {
    p->stats = allocate(vk_, L * stats_stride_, Storage::f32, MemoryKind::device, "statistics");
    p->stats_down = allocate(vk_, L * stats_stride_, Storage::f32, MemoryKind::readback, "statistics (readback)");
  }
  p->rec = std::make_shared<gpu::Recorder>(vk_, tuning_);
  return p;
}

void Stack::prepare(StackPlan& p, uint32_t past) const {
  for (size_t i = 0; i < planners_.size(); ++i) mixers_[planners_[i]]->prepare(*p.mixers[i], past);
}

void Stack::prepare_rows(StackPlan& p, std::span<const uint32_t> pasts) const {
  for (size_t i = 0; i < planners_.size(); ++i) mixers_[planners_[i]]->prepare_rows(*p.mixers[i], pasts);
}

void Stack::record(StackPlan& p, gpu::Recorder::Mode mode, uint32_t past, const LayerCaches* caches,
                   bool poison) const {
  if (!p.row_strides.empty() || bool(caches) != p.sequence || (caches && caches->size() != mixers_.size()))
    throw Error(ErrorCode::invalid_argument, "model: a plan recorded without the caches it was made for");
  record_step(p, mode, past, caches, {}, poison);
}

void Stack::record_rows(StackPlan& p, gpu::Recorder::Mode mode, std::span<const RowSequence> rows,
                        bool poison) const {
  bool fit = rows.size() == p.row_strides.size();
  for (const RowSequence& r : rows) fit = fit && r.caches && r.caches->size() == mixers_.size();
  if (!fit) throw Error(ErrorCode::invalid_argument, "model: a plan recorded without the caches it was made for");
  record_step(p, mode, 0, nullptr, rows, poison);
  p.pasts.clear();
  for (const RowSequence& r : rows) p.pasts.push_back(r.past);
}

void Stack::record_step(StackPlan& p, gpu::Recorder::Mode mode, uint32_t past, const LayerCaches* caches,
                        std::span<const RowSequence> rows, bool poison) const {
  gpu::Recorder& rec = *p.rec;
  const uint32_t B = p.batch, T = p.tokens, BT = B * T, D = uint32_t(cfg_.hidden_size()), M = p.rows();
  const VocabMatrix& lm = lm_head_ ? *lm_head_ : *embed_;
  rec.begin(mode);
  if (poison)
    for (const Buffer* b : {&p.x, &p.h, &p.last, &p.normed})
      if (b->valid()) rec.fill(*b, nan_word(b == &p.normed ? act_ : Storage::f32));
  for (size_t i = 0; i < planners_.size(); ++i) mixers_[planners_[i]]->record_begin(rec, *p.mixers[i]);

  embed_->gather(rec, p.ids, p.x, BT);
  std::vector<RowCache> row_caches(rows.size());
  for (size_t l = 0; l < mixers_.size(); ++l) {
    const uint32_t at = uint32_t(l) * stats_stride_;
    for (size_t r = 0; r < rows.size(); ++r) row_caches[r] = {(*rows[r].caches)[l].get(), rows[r].past};
    // h = x + mixer(norm(x)); x = h + mlp(norm(h))
    const MixerIo io{p.x, p.h, true, caches ? (*caches)[l].get() : nullptr, past,
                     {p.with_stats ? &p.stats : nullptr, at}, nullptr, row_caches};
    mixers_[l]->record(rec, *p.mixers[plan_of_[l]], p.scratch, io, poison);
    ffns_[l]->record(rec, p.scratch, BT, p.h, p.x, {p.with_stats ? &p.stats : nullptr, at + mixer_stats_}, poison);
    if (p.with_stats) ops::max_abs(vk_, rec, p.x, BT * D, p.stats, at + stats_stride_ - 1);
  }

  // lm_head(norm(x)) for every position, or for each row's last.
  const Buffer* head_in = &p.x;
  if (!p.all_logits && T > 1) {  // (a step of one token per row: every row is its last)
    std::vector<VkBufferCopy> last;
    for (uint32_t b = 0; b < B; ++b) last.push_back({(VkDeviceSize(b) * T + T - 1) * D * 4, VkDeviceSize(b) * D * 4, D * 4});
    rec.copy(p.x, p.last, std::move(last));
    head_in = &p.last;
  }
  ops::rmsnorm(vk_, rec, {.x = *head_in, .in = ops::btd_view(M, 1, D), .w = final_norm_, .y = p.normed,
                          .out = {0, M * lm.ld(), lm.ld(), 1, lm.ld(), 0}, .rows = M, .tokens = M, .heads = 1, .dim = D,
                          .kind = cfg_.norm_kind(), .eps = float(cfg_.norm_eps()), .s = act_, .x_f32 = true});
  lm.project(rec, p.scratch, p.normed, M, p.logits);
  if (p.top_k) {
    const uint32_t V = uint32_t(cfg_.vocab_size);
    ops::top_k(vk_, rec, p.logits, M, V, V, p.top_k, p.top);
  }
  if (p.with_stats) rec.copy(p.stats, p.stats_down, p.stats.size());
  rec.end();
  p.past = past;
}

uint64_t Stack::weight_bytes() const {
  uint64_t n = embed_->bytes() + (lm_head_ ? lm_head_->bytes() : 0) + final_norm_.size();
  for (size_t l = 0; l < mixers_.size(); ++l) n += mixers_[l]->weight_bytes() + ffns_[l]->weight_bytes();
  return n;
}

uint64_t Stack::token_read_bytes() const {
  const uint64_t table = embed_->bytes();
  uint64_t n = table / uint64_t(cfg_.vocab_size) + (lm_head_ ? lm_head_->bytes() : table) + final_norm_.size();
  for (size_t l = 0; l < mixers_.size(); ++l) n += mixers_[l]->weight_bytes() + ffns_[l]->token_read_bytes();
  return n;
}

}  // namespace vkgate::nn
