#include "nn/stack.hpp"

#include <algorithm>
#include <climits>

#include "ops/ops.hpp"
#include "vkgate/error.hpp"

namespace vkgate::nn {

namespace {
// Up to this many tokens a step's shaders read the rope table from its mapped
// staging buffer (as the block's decode steps do); longer steps copy it first.
constexpr uint32_t kDirectTableTokens = 8;

// Layer `layer`'s GLA tensors under the bare names nn::Gla reads, viewed from
// the model's full names.
TensorMap gla_layer_view(const ModelConfig& cfg, const TensorMap& w, int layer) {
  TensorMap bare;
  for (const TensorSpec& spec : gla_expected_weights(*cfg.gla, cfg.gla_forms))
    bare[spec.name] = w.at(layer_gla_name(layer, spec.name));
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
  embed_ = std::make_unique<VocabMatrix>(vk, tuning, w.at(cfg.embedding_name()), V, D, act, cfg.embedding_name());
  if (!cfg.tie_word_embeddings)
    lm_head_ = std::make_unique<VocabMatrix>(vk, tuning, w.at("lm_head.weight"), V, D, act, "lm_head.weight");
  done = cfg.tie_word_embeddings ? 1 : 2;
  bytes = w.at(cfg.embedding_name()).bytes.size() + (lm_head_ ? w.at("lm_head.weight").bytes.size() : 0);
  report.advance(done, bytes);
  for (int i = 0; i < cfg.num_hidden_layers; ++i) {
    Layer layer;
    if (cfg.gla)
      layer.gla = std::make_unique<Gla>(vk, tuning, *cfg.gla, gla_layer_view(cfg, w, i), act);
    else
      layer.attention = std::make_unique<Attention>(vk, tuning, cfg.attention, layer_attention_tensors(cfg, w, i), act);
    layer.mlp = std::make_unique<Mlp>(vk, tuning, cfg, w, i, act);
    layers_.push_back(std::move(layer));
    loaded_layer(i);
  }
  final_norm_ = upload(vk, stored(w.at("model.norm.weight"), Storage::f32), "model.norm.weight");
  report.advance(specs.size(), bytes + w.at("model.norm.weight").bytes.size());
}

size_t Stack::gla_state_elements(uint32_t batch) const {
  if (!cfg_.gla) return 0;
  const GlaConfig& g = *cfg_.gla;
  return size_t(batch) * size_t(g.num_heads) * size_t(g.head_k_dim()) * size_t(g.head_v_dim());
}

uint32_t Stack::max_step_tokens(uint32_t batch) const {
  if (!cfg_.gla) return UINT32_MAX;
  const uint64_t fit = vk_.info.max_storage_buffer_range / (uint64_t(batch) * layers_[0].gla->largest_token_bytes());
  const uint32_t forced = tuning_.gla_segment_tokens;
  return uint32_t(std::min<uint64_t>(forced ? std::min<uint64_t>(fit, forced) : fit, UINT32_MAX));
}

std::unique_ptr<StackPlan> Stack::plan(uint32_t batch, uint32_t tokens, uint32_t kv_stride, bool sequence,
                                       bool all_logits, bool stats) const {
  auto p = std::make_unique<StackPlan>();
  p->batch = batch;
  p->tokens = tokens;
  p->kv_stride = kv_stride;
  p->sequence = sequence;
  p->all_logits = all_logits;
  p->with_stats = stats;
  const size_t B = batch, T = tokens, BT = B * T, D = size_t(cfg_.hidden_size()), M = p->rows(),
               KV = size_t(cfg_.attention.num_kv_heads), Dh = size_t(cfg_.attention.head_dim),
               e = ops::element_bytes(act_), L = layers_.size();
  const VocabMatrix& lm = lm_head_ ? *lm_head_ : *embed_;
  // Every layer has the same shape: the first one's plan and scratch serve them all.
  if (const Gla* gla = layers_[0].gla.get()) {
    if (const uint32_t most = max_step_tokens(batch); tokens > most)
      throw Error(ErrorCode::unsupported,
                  "model: a step of batch " + std::to_string(batch) + " × " + std::to_string(tokens) +
                      " tokens is more than the " + std::to_string(most) + " tokens one step's GLA buffers hold (" +
                      std::to_string(batch * gla->largest_token_bytes()) + " bytes per token against " +
                      "maxStorageBufferRange " + std::to_string(vk_.info.max_storage_buffer_range) +
                      ", or VKGATE_GLA_SEGMENT_TOKENS); a Sequence runs a long prompt in pieces (Model::extend), "
                      "or use a smaller batch");
    gla->reserve(batch, tokens, p->scratch);
    if (!sequence) p->scratch.need("layer_state", gla_state_elements(batch) * 4);  // zeroed before each layer
  } else {
    p->attention = layers_[0].attention->plan(batch, tokens, kv_stride, false, stats, sequence);
    layers_[0].attention->reserve(p->attention, p->scratch);
    if (!sequence) {  // a forward that keeps no cache: one layer's keys and values at a time
      p->scratch.need("keys", B * KV * kv_stride * Dh * e);
      p->scratch.need("values", B * KV * kv_stride * Dh * e);
    }
  }
  layers_[0].mlp->reserve(uint32_t(BT), p->scratch);
  lm.reserve(uint32_t(M), p->scratch);
  p->scratch.allocate(vk_);
  p->ids = vk_.allocator->allocate(BT * 4, MemoryKind::upload, "input_ids (staging)");
  if (!cfg_.gla) {  // GLA has no positions
    const size_t table = ops::rope_table_floats(tokens, uint32_t(cfg_.attention.rotary_dim()));
    p->rope_up = allocate(vk_, table, Storage::f32, MemoryKind::upload, "rope cos/sin table (staging)");
    if (tokens > kDirectTableTokens)
      p->rope = allocate(vk_, table, Storage::f32, MemoryKind::device, "rope cos/sin table");
  }
  p->x = allocate(vk_, BT * D, Storage::f32, MemoryKind::device, "residual stream");
  p->h = allocate(vk_, BT * D, Storage::f32, MemoryKind::device, "residual stream after attention");
  if (!all_logits) p->last = allocate(vk_, B * D, Storage::f32, MemoryKind::device, "last positions");
  p->normed = allocate(vk_, M * lm.ld(), act_, MemoryKind::device, "final norm");
  p->logits = allocate(vk_, M * size_t(cfg_.vocab_size), Storage::f32, MemoryKind::readback, "logits (readback)");
  if (stats) {
    p->stats = allocate(vk_, L * stats_stride(), Storage::f32, MemoryKind::device, "statistics");
    p->stats_down = allocate(vk_, L * stats_stride(), Storage::f32, MemoryKind::readback, "statistics (readback)");
  }
  p->rec = std::make_unique<gpu::Recorder>(vk_, tuning_);
  return p;
}

void Stack::record(StackPlan& p, gpu::Recorder::Mode mode, uint32_t past, const std::vector<LayerCache>* caches,
                   bool poison) const {
  if (bool(caches) != p.sequence || (caches && caches->size() != layers_.size()))
    throw Error(ErrorCode::invalid_argument, "model: a plan recorded without the caches it was made for");
  gpu::Recorder& rec = *p.rec;
  const uint32_t B = p.batch, T = p.tokens, BT = B * T, D = uint32_t(cfg_.hidden_size()), M = p.rows();
  const VocabMatrix& lm = lm_head_ ? *lm_head_ : *embed_;
  rec.begin(mode);
  if (poison)
    for (const Buffer* b : {&p.x, &p.h, &p.last, &p.normed})
      if (b->valid()) rec.fill(*b, nan_word(b == &p.normed ? act_ : Storage::f32));
  if (p.rope.valid()) rec.copy(p.rope_up, p.rope, p.rope.size());

  embed_->gather(rec, p.ids, p.x, BT);
  for (size_t l = 0; l < layers_.size(); ++l) {
    const uint32_t at = uint32_t(l) * stats_stride();
    if (const Gla* gla = layers_[l].gla.get()) {  // h = x + gla(attn_norm(x))
      const Buffer& state = caches ? (*caches)[l].state : p.scratch["layer_state"];
      if (!caches) rec.fill(state, 0);  // 0.0f: a forward without a sequence starts from a zero state
      gla->record(rec, p.scratch, B, T, {p.x, p.h, state, &p.x}, poison);
    } else {  // h = x + attn(norm(x))
      const AttentionIo io{p.x, p.h,
                           caches ? (*caches)[l].keys : p.scratch["keys"],
                           caches ? (*caches)[l].values : p.scratch["values"],
                           past, p.rope_table(), nullptr, {p.with_stats ? &p.stats : nullptr, at}};
      layers_[l].attention->record(rec, p.attention, p.scratch, io, poison);
    }
    layers_[l].mlp->record(rec, p.scratch, BT, p.h, p.x, poison);  // x = h + mlp(norm(h))
    if (p.with_stats) ops::max_abs(vk_, rec, p.x, BT * D, p.stats, at + stats_stride() - 1);
  }

  // lm_head(norm(x)) for every position, or for each row's last.
  const Buffer* rows = &p.x;
  if (!p.all_logits) {
    std::vector<VkBufferCopy> last;
    for (uint32_t b = 0; b < B; ++b) last.push_back({(VkDeviceSize(b) * T + T - 1) * D * 4, VkDeviceSize(b) * D * 4, D * 4});
    rec.copy(p.x, p.last, std::move(last));
    rows = &p.last;
  }
  ops::rmsnorm(vk_, rec, {.x = *rows, .in = ops::btd_view(M, 1, D), .w = final_norm_, .y = p.normed,
                          .out = {0, M * lm.ld(), lm.ld(), 1, lm.ld(), 0}, .rows = M, .tokens = M, .heads = 1, .dim = D,
                          .kind = cfg_.norm_kind(), .eps = float(cfg_.norm_eps()), .s = act_, .x_f32 = true});
  lm.project(rec, p.scratch, p.normed, M, p.logits);
  if (p.with_stats) rec.copy(p.stats, p.stats_down, p.stats.size());
  rec.end();
  p.past = past;
}

uint64_t Stack::weight_bytes() const {
  uint64_t n = embed_->bytes() + (lm_head_ ? lm_head_->bytes() : 0) + final_norm_.size();
  for (const Layer& l : layers_)
    n += (l.gla ? l.gla->weight_bytes() : l.attention->weight_bytes()) + l.mlp->weight_bytes();
  return n;
}

}  // namespace vkgate::nn
