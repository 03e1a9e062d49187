#include "nn/attention.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "vkgate/error.hpp"

namespace vkgate::nn {

using gpu::Recorder;

// The projections P [B·T, cols] = x̂·[q_proj (+ gate_proj) ; k_proj ; v_proj]ᵀ.
// q_proj's columns hold the gate rows in the checkpoint's layout (DESIGN.md
// §3): Qwen3-Next interleaves [q_h | g_h] per head, the official code groups
// [q of G heads | G gates] per KV group. Both are "groups of Gl heads, each
// group [Gl·Dh queries | Gl·gw gates]" with Gl = 1 and G. The separate layout
// (every gate position) appends gate_proj's rows, gate_heads × gw, after all
// queries. Every gate reads its raw scores from P: the query, key and value
// gates in the q/k/v preparation pass, the sdpa gate in attention's
// epilogue, the dense gate in o_proj's.
Attention::Attention(Context::Impl& vk, const gpu::Tuning& tuning, const BlockConfig& cfg, const TensorMap& w,
                     Storage act)
    : vk_(vk), tuning_(tuning), cfg_(cfg), act_(act) {
  const uint32_t Dh = uint32_t(cfg.head_dim), gw = uint32_t(cfg.gate_width()), H = uint32_t(cfg.num_heads);
  const bool separate = cfg.gate_layout == GateLayout::separate;
  groups_ = cfg.gate_layout == GateLayout::qwen3_next ? 1 : separate ? H : uint32_t(cfg.group_size());
  group_stride_ = groups_ * (Dh + gw);
  k_col_ = separate ? H * Dh + uint32_t(cfg.gate_rows()) : H * (Dh + gw);
  v_col_ = k_col_ + uint32_t(cfg.kv_dim());
  cols_ = v_col_ + uint32_t(cfg.kv_dim());

  // Projections in the activation storage (or block formats as stored), norms and biases in fp32.
  auto tensor = [&](const std::string& name) { return &w.at(name); };
  auto f32 = [&](const std::string& name) { return stored(w.at(name), Storage::f32); };
  const bool separate_gate = cfg.gate_layout == GateLayout::separate && cfg.gate_kind != GateKind::none;
  const std::vector<std::byte> none;
  const uint32_t D = uint32_t(cfg.hidden_size), HDh = uint32_t(cfg.attn_dim());
  ld_hidden_ = ops::operand_stride(vk.info, tuning, D, act);
  ld_heads_ = ops::operand_stride(vk.info, tuning, HDh, act);
  norm_w_ = upload(vk, f32("input_layernorm.weight"), "input_layernorm.weight");
  w_qkv_ = Projection(vk, tuning,
                      {tensor("q_proj.weight"), separate_gate ? tensor("gate_proj.weight") : nullptr,
                       tensor("k_proj.weight"), tensor("v_proj.weight")},
                      D, act, "q_proj+k_proj+v_proj.weight");
  if (cfg.qkv_bias)
    b_qkv_ = upload(vk,
                    concat({f32("q_proj.bias"), separate_gate ? f32("gate_proj.bias") : none, f32("k_proj.bias"),
                            f32("v_proj.bias")}),
                    "q_proj+k_proj+v_proj.bias");
  if (cfg.use_qk_norm) {
    qn_w_ = upload(vk, f32("q_norm.weight"), "q_norm.weight");
    kn_w_ = upload(vk, f32("k_norm.weight"), "k_norm.weight");
  }
  w_o_ = Projection(vk, tuning, {tensor("o_proj.weight")}, HDh, act, "o_proj.weight");
  if (cfg.o_bias) b_o_ = upload(vk, f32("o_proj.bias"), "o_proj.bias");
}

ops::View Attention::query_view(uint32_t T) const { return {0, T * cols_, cols_, groups_, group_stride_, uint32_t(cfg_.head_dim)}; }
ops::Gate Attention::gating(uint32_t T) const {
  const uint32_t gw = uint32_t(cfg_.gate_width()), heads = uint32_t(cfg_.gate_heads());
  ops::Gate g;
  // Separate: one group of all the position's heads, gw apart, after the queries.
  g.view = cfg_.gate_layout == GateLayout::separate
               ? ops::View{uint32_t(cfg_.attn_dim()), T * cols_, cols_, heads, 0, gw}
               : ops::View{groups_ * uint32_t(cfg_.head_dim), T * cols_, cols_, groups_, group_stride_, gw};
  g.width = gw;
  g.heads = heads;
  g.shared_heads = cfg_.gate_shared_heads ? 1 : 0;
  g.activation = uint32_t(cfg_.gate_activation);
  g.combine = uint32_t(cfg_.gate_combine);
  return g;
}
ops::View Attention::key_view(uint32_t T) const { return {k_col_, T * cols_, cols_, 1, uint32_t(cfg_.head_dim), 0}; }
ops::View Attention::value_view(uint32_t T) const { return {v_col_, T * cols_, cols_, 1, uint32_t(cfg_.head_dim), 0}; }
uint32_t Attention::projection_columns() const { return cols_; }

uint64_t Attention::weight_bytes() const {
  uint64_t n = 0;
  n += w_qkv_.bytes() + w_o_.bytes();
  for (const Buffer* b : {&norm_w_, &b_qkv_, &qn_w_, &kn_w_, &b_o_}) n += b->size();
  return n;
}

namespace {
// Up to this many tokens a step's shaders read the RoPE table from its mapped
// staging buffer; longer steps copy it to the device first.
constexpr uint32_t kDirectTableTokens = 8;
}  // namespace

void Attention::plan_attend(AttentionPlan& p, Workspace& ws) const {
  const MixerShape& s = p.shape;
  const uint32_t batch = s.batch, tokens = s.tokens, kv_stride = s.kv_stride, H = uint32_t(cfg_.num_heads);
  // A plan whose cache grows between replays keeps the score stride of its
  // capacity, rounded to whole vec4s, whatever the cache's length.
  p.score_ld = s.sequence ? (kv_stride + 3) / 4 * 4 : kv_stride;
  ops::AttentionShape shape{batch, H, uint32_t(cfg_.num_kv_heads), tokens, kv_stride, uint32_t(cfg_.head_dim)};
  shape.score_stride = p.score_ld;
  shape.tiled = cfg_.gqa_mapping == GqaMapping::tiled;
  // Statistics need every probability; otherwise fused where the device prefers it.
  p.fused = !s.stats && tuning_.fused && ops::flash_preferred(vk_.info, tuning_);
  if (p.fused)
    p.flash = ops::flash_plan(vk_.info, shape, act_, ops::flash_options(tuning_));
  else
    p.chunk = s.stats ? tokens : ops::query_chunk(tuning_, shape);
  p.attn_ld = p.fused ? H * uint32_t(cfg_.head_dim) : ld_heads_;  // the fused kernel writes dense rows

  const size_t B = batch, T = tokens, Dh = size_t(cfg_.head_dim), e = ops::element_bytes(act_);
  ws.need(row_role("q", p.row), B * H * T * Dh * e);
  if (p.fused)
    ws.need(row_role("partial", p.row), ops::flash_partial_floats(shape, p.flash) * 4);
  else
    ws.need(row_role("scores", p.row), B * H * p.chunk * size_t(p.score_ld) * 4);
  const size_t table = ops::rope_table_floats(tokens, uint32_t(cfg_.rotary_dim()));
  p.rope_up = allocate(vk_, table, Storage::f32, gpu::MemoryKind::upload, "rope cos/sin table (staging)");
  if (tokens > kDirectTableTokens || !tuning_.direct_io)
    p.rope = allocate(vk_, table, Storage::f32, gpu::MemoryKind::device, "rope cos/sin table");
}

std::unique_ptr<MixerPlan> Attention::plan(const MixerShape& s, Workspace& ws) const {
  auto owned = std::make_unique<AttentionPlan>();
  AttentionPlan& p = *owned;
  p.shape = s;
  const uint32_t BT = s.batch * s.tokens, D = uint32_t(cfg_.hidden_size);
  const size_t T = s.tokens, e = ops::element_bytes(act_);
  p.norm_in_projection = !w_qkv_.quantized() && ops::matmul_rmsnorm_applies(vk_.info, tuning_, BT, D, w_qkv_.ldw());
  if (s.rows_apart()) {
    if (s.stats || s.mask || !s.sequence || s.row_strides.size() != s.batch)
      throw Error(ErrorCode::invalid_argument, "attention: a step of separate sequences takes one cache per row, "
                                               "and neither statistics nor a mask");
    for (uint32_t r = 0; r < s.batch; ++r) {
      auto& rp = *p.rows.emplace_back(std::make_unique<AttentionPlan>());
      rp.shape = {1, s.tokens, s.row_strides[r], true, false, false, {}};
      rp.row = r;
      plan_attend(rp, ws);
      ws.need(row_role("attn", r), T * rp.attn_ld * e);
    }
    p.fused = p.rows[0]->fused;
    p.attn_ld = p.rows[0]->attn_ld;
  } else {
    plan_attend(p, ws);
  }
  if (!p.norm_in_projection) ws.need("normed", BT * size_t(ld_hidden_) * e);
  ws.need("proj", BT * size_t(cols_) * e);
  ws.need("attn", BT * size_t(p.attn_ld) * e);
  // Split-K where a projection's tiles would leave the GPU idle (ops::matmul_splits).
  const size_t proj_splits = w_qkv_.splits(BT, ld_hidden_);
  const size_t o_splits = w_o_.splits(BT, p.attn_ld);
  if (proj_splits > 1) ws.need("split_k", proj_splits * BT * cols_ * 4);
  if (o_splits > 1) ws.need("split_k", o_splits * BT * D * 4);
  w_qkv_.reserve(ws, BT);
  w_o_.reserve(ws, BT);
  if (!s.sequence) {  // a forward that keeps no cache: one layer's keys and values at a time
    const size_t n = size_t(s.batch) * size_t(cfg_.num_kv_heads) * s.kv_stride * size_t(cfg_.head_dim) * e;
    ws.need("keys", n);
    ws.need("values", n);
  }
  return owned;
}

void Attention::prepare(MixerPlan& plan, uint32_t past) const {
  AttentionPlan& p = static_cast<AttentionPlan&>(plan);
  const std::vector<float> table = ops::rope_table(cfg_, p.shape.tokens, past);
  std::memcpy(p.rope_up.mapped(), table.data(), table.size() * sizeof(float));
}

void Attention::prepare_rows(MixerPlan& plan, std::span<const uint32_t> pasts) const {
  AttentionPlan& p = static_cast<AttentionPlan&>(plan);
  for (size_t r = 0; r < p.rows.size(); ++r) prepare(*p.rows[r], pasts[r]);
}

void Attention::record_begin(Recorder& rec, const MixerPlan& plan) const {
  const AttentionPlan& p = static_cast<const AttentionPlan&>(plan);
  if (p.rope.valid()) rec.copy(p.rope_up, p.rope, p.rope.size());
  for (const auto& row : p.rows) record_begin(rec, *row);
}

std::unique_ptr<MixerCache> Attention::make_cache(uint32_t batch, uint32_t capacity, const std::string& name) const {
  auto c = std::make_unique<KvCache>();
  const size_t n = size_t(batch) * size_t(cfg_.num_kv_heads) * capacity * size_t(cfg_.head_dim);
  c->keys = allocate(vk_, n, act_, gpu::MemoryKind::device, name + "key cache");
  c->values = allocate(vk_, n, act_, gpu::MemoryKind::device, name + "value cache");
  c->batch = batch;
  c->capacity = capacity;
  return c;
}

MixerStats Attention::read_stats(const float* f, double rows) const {
  const size_t H = size_t(cfg_.num_heads);
  MixerStats s;
  s.first_token_attn.assign(f, f + H);
  if (cfg_.gate_kind != GateKind::none) {
    const double n = rows * double(cfg_.gate_rows());
    s.gate_mean = double(f[H]) / n;
    s.gate_frac_below_0_1 = double(f[H + 1]) / n;
  }
  return s;
}

void Attention::record(Recorder& rec, const MixerPlan& plan, const Workspace& ws, const MixerIo& io,
                       bool poison) const {
  const AttentionPlan& p = static_cast<const AttentionPlan&>(plan);
  const uint32_t B = p.shape.batch, T = p.shape.tokens, BT = B * T, D = uint32_t(cfg_.hidden_size),
                 H = uint32_t(cfg_.num_heads), Dh = uint32_t(cfg_.head_dim);
  const float eps = float(cfg_.rms_norm_eps);
  const Buffer& proj = ws["proj"];
  const Buffer& attn = ws["attn"];
  const Buffer* split_k = ws.find("split_k");
  if (poison) {
    std::vector<std::string> roles{"normed", "proj", "q", "attn", "scores"};
    for (uint32_t r = 0; r < p.rows.size(); ++r)
      for (const char* role : {"q", "attn", "scores"}) roles.push_back(row_role(role, r));
    for (const std::string& role : roles)
      if (const Buffer* b = ws.find(role)) rec.fill(*b, nan_word(role.starts_with("scores") ? Storage::f32 : act_));
  }

  // x̂·Wᵀ for q (+ gate rows), k, v in one product, the RMSNorm folded in where it pays.
  const Buffer* qkv_bias = cfg_.qkv_bias ? &b_qkv_ : nullptr;
  if (p.norm_in_projection) {
    ops::matmul_rmsnorm(vk_, rec, {.x = io.x, .norm_w = norm_w_, .kind = cfg_.norm_kind, .eps = eps,
                                   .w = w_qkv_.dense(), .y = proj, .M = BT, .N = cols_, .K = D, .s = act_,
                                   .bias = qkv_bias, .ldw = w_qkv_.ldw()});
  } else {
    const Buffer& normed = ws["normed"];
    ops::rmsnorm(vk_, rec, {.x = io.x, .in = ops::btd_view(T, 1, D), .w = norm_w_, .y = normed,
                            .out = {0, T * ld_hidden_, ld_hidden_, 1, ld_hidden_, 0}, .rows = BT, .tokens = T,
                            .heads = 1, .dim = D, .kind = cfg_.norm_kind, .eps = eps, .s = act_, .x_f32 = true});
    w_qkv_.record(rec, {.x = normed, .y = proj, .M = BT, .bias = qkv_bias, .ldx = ld_hidden_, .partial = split_k,
                        .ws = &ws});
  }

  if (p.rows.empty()) {
    record_attend(rec, p, ws, static_cast<const KvCache*>(io.cache), io.past, 0, attn, io);
  } else {  // each row against its own sequence's cache, then into its row of "attn"
    if (io.rows.size() != p.rows.size())
      throw Error(ErrorCode::invalid_argument, "attention: a step of separate sequences without one cache per row");
    for (uint32_t r = 0; r < p.rows.size(); ++r) {
      const Buffer& row_attn = ws[row_role("attn", r)];
      record_attend(rec, *p.rows[r], ws, static_cast<const KvCache*>(io.rows[r].cache), io.rows[r].past,
                    r * T * cols_, row_attn, io);
      copy_row(rec, row_attn, attn, r, uint64_t(T) * p.attn_ld * ops::element_bytes(act_));
    }
  }

  const bool gated = cfg_.gate_kind != GateKind::none;
  const GatePosition at = cfg_.gate_position;
  const ops::Gate gating = this->gating(T);
  if (!p.fused && gated && at == GatePosition::sdpa)  // the fused kernel gates in its epilogue
    ops::gate(vk_, rec, {.g = proj, .gating = gating, .y = attn, .y_view = {0, T * p.attn_ld, p.attn_ld, 1, Dh, 0},
                         .rows = BT, .tokens = T, .heads = H, .dim = Dh, .s = act_});
  if (p.shape.stats && gated) ops::gate_scores(vk_, rec, proj, gating, BT, T, act_, *io.stats.buffer, io.stats.at + H);
  const ops::EpilogueGate dense{proj, uint32_t(cfg_.attn_dim()), cols_, cfg_.gate_activation, cfg_.gate_combine};
  w_o_.record(rec, {.x = attn, .y = io.y, .M = BT, .bias = cfg_.o_bias ? &b_o_ : nullptr,
                    .residual = io.residual ? &io.x : nullptr, .y_f32 = true, .ldx = p.attn_ld, .partial = split_k,
                    .gate = gated && at == GatePosition::dense ? &dense : nullptr, .ws = &ws});
}

void Attention::record_attend(Recorder& rec, const AttentionPlan& p, const Workspace& ws, const KvCache* cache,
                              uint32_t past, uint32_t base, const Buffer& attn, const MixerIo& io) const {
  const uint32_t B = p.shape.batch, T = p.shape.tokens, BT = B * T, S = T + past;
  const uint32_t H = uint32_t(cfg_.num_heads), KV = uint32_t(cfg_.num_kv_heads), Dh = uint32_t(cfg_.head_dim);
  if (S > p.shape.kv_stride)
    throw Error(ErrorCode::invalid_argument, "attention: " + std::to_string(S) + " keys exceed the cache's " +
                                                 std::to_string(p.shape.kv_stride) + " positions");
  const Buffer& keys = cache ? cache->keys : ws["keys"];
  const Buffer& values = cache ? cache->values : ws["values"];
  const Buffer& rope = p.rope_table();
  const float eps = float(cfg_.rms_norm_eps);
  const Buffer& proj = ws["proj"];
  const Buffer& q = ws[row_role("q", p.row)];
  const ops::View qv = shifted(query_view(T), base), kv = shifted(key_view(T), base),
                  vv = shifted(value_view(T), base);

  // q, and the new keys and values into the cache at positions past..: the
  // query, key or value gate, q/k norm and RoPE. One pass, or the reference
  // path of a pass per op and tensor.
  const bool qk_norm = cfg_.use_qk_norm, gated = cfg_.gate_kind != GateKind::none;
  const GatePosition at = cfg_.gate_position;
  ops::Gate gating = this->gating(T);
  gating.view = shifted(gating.view, base);
  const ops::GateTarget target = !gated                        ? ops::GateTarget::none
                                 : at == GatePosition::query ? ops::GateTarget::query
                                 : at == GatePosition::key   ? ops::GateTarget::key
                                 : at == GatePosition::value ? ops::GateTarget::value
                                                             : ops::GateTarget::none;
  const uint32_t rd = uint32_t(cfg_.rotary_dim()), stride = p.shape.kv_stride;
  if (tuning_.pass_fusion) {
    const ops::QkvPrepare args{proj,  qv, kv, vv, qk_norm ? &qn_w_ : nullptr,
                               qk_norm ? &kn_w_ : nullptr, cfg_.norm_kind, eps, rope, rd, cfg_.rope_style, target,
                               gating, q, keys, values, stride, past};
    ops::qkv_prepare(vk_, rec, args, BT, T, H, KV, Dh, act_);
  } else {
    if (target != ops::GateTarget::none) {  // in place in the projections
      const ops::View y = target == ops::GateTarget::query ? qv : target == ops::GateTarget::key ? kv : vv;
      ops::gate(vk_, rec, {.g = proj, .gating = gating, .y = proj, .y_view = y, .rows = BT, .tokens = T,
                           .heads = gating.heads, .dim = Dh, .s = act_});
    }
    auto prepare = [&](ops::View src, const Buffer& norm, const Buffer& dst, uint32_t heads, uint32_t seq,
                       uint32_t first) {
      const ops::View out = ops::bhsd_view(heads, seq, Dh, first);
      if (qk_norm) {
        ops::rmsnorm(vk_, rec, {.x = proj, .in = src, .w = norm, .y = dst, .out = out, .rows = BT, .tokens = T,
                                .heads = heads, .dim = Dh, .kind = cfg_.norm_kind, .eps = eps, .s = act_});
        src = out;  // rotated in place
      }
      ops::rope(vk_, rec, {.x = qk_norm ? dst : proj, .in = src, .table = rope, .y = dst, .out = out, .rows = BT,
                           .tokens = T, .heads = heads, .dim = Dh, .rotary = rd, .s = act_, .style = cfg_.rope_style});
    };
    prepare(qv, qn_w_, q, H, T, 0);
    prepare(kv, kn_w_, keys, KV, stride, past);
    ops::rope(vk_, rec, {.x = proj, .in = vv, .table = rope, .y = values,
                         .out = ops::bhsd_view(KV, stride, Dh, past), .rows = BT, .tokens = T, .heads = KV,
                         .dim = Dh, .rotary = 0, .s = act_});
  }

  // softmax(q·kᵀ/√Dh + mask)·v, gated: fused, or in query chunks through a score matrix.
  const ops::AttentionShape shape{B, H, KV, T, S, Dh, stride, 0, 0, p.attn_ld, p.score_ld,
                                  cfg_.gqa_mapping == GqaMapping::tiled};
  const float scale = float(1.0 / std::sqrt(double(Dh)));
  const bool sdpa_gate = gated && at == GatePosition::sdpa;
  if (p.fused) {
    const ops::FlashArgs args{q,      keys, values, io.mask, sdpa_gate ? &proj : nullptr, gating, attn,
                              &ws[row_role("partial", p.row)]};
    ops::flash_attention(vk_, rec, args, shape, p.flash, cfg_.causal, scale, act_);
  } else {
    const Buffer& scores = ws[row_role("scores", p.row)];
    for (uint32_t first = 0; first < T; first += p.chunk) {
      ops::AttentionShape part = shape;
      part.first = first;
      part.count = std::min(p.chunk, T - first);
      ops::attention_scores(vk_, rec, q, keys, scores, part, act_, cfg_.causal);
      ops::softmax(vk_, rec, {.scores = scores, .batch = B, .heads = H, .tokens = part.count, .keys = S,
                              .causal = cfg_.causal, .scale = scale, .mask = io.mask, .first = first, .total = T,
                              .ld = p.score_ld});
      if (p.shape.stats) ops::first_token_attn(vk_, rec, scores, B, H, T, p.score_ld, *io.stats.buffer, io.stats.at);
      ops::attention_values(vk_, rec, scores, values, attn, part, act_, cfg_.causal);
    }
  }
}

}  // namespace vkgate::nn
