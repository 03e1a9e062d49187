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

void Attention::plan_rope(AttentionPlan& p, uint32_t rows) const {
  const size_t table = ops::rope_table_floats(rows, uint32_t(cfg_.rotary_dim()));
  p.rope_up = allocate(vk_, table, Storage::f32, gpu::MemoryKind::upload, "rope cos/sin table (staging)");
  if (rows > kDirectTableTokens || !tuning_.direct_io)
    p.rope = allocate(vk_, table, Storage::f32, gpu::MemoryKind::device, "rope cos/sin table");
}

ops::AttentionShape Attention::attention_shape(uint32_t batch, uint32_t tokens, uint32_t keys, uint32_t stride,
                                               uint32_t attn_ld, uint32_t score_ld) const {
  return {batch, uint32_t(cfg_.num_heads), uint32_t(cfg_.num_kv_heads), tokens, keys, uint32_t(cfg_.head_dim),
          stride, 0, 0, attn_ld, score_ld, cfg_.gqa_mapping == GqaMapping::tiled};
}

void Attention::plan_attend(AttentionPlan& p, Workspace& ws) const {
  const MixerShape& s = p.shape;
  const uint32_t batch = s.batch, tokens = s.tokens, kv_stride = s.kv_stride, H = uint32_t(cfg_.num_heads);
  // A plan whose cache grows between replays keeps the score stride of its
  // capacity, rounded to whole vec4s, whatever the cache's length.
  p.score_ld = s.sequence ? (kv_stride + 3) / 4 * 4 : kv_stride;
  const ops::AttentionShape shape = attention_shape(batch, tokens, kv_stride, kv_stride, 0, p.score_ld);
  // Statistics need every probability, the mask a score matrix; otherwise
  // fused where the device prefers it.
  p.step = !s.stats && !s.mask && ops::attention_step_applies(vk_.info, tuning_, shape, false);
  p.fused = !p.step && !s.stats && tuning_.fused && ops::flash_preferred(vk_.info, tuning_);
  if (p.fused)
    p.flash = ops::flash_plan(vk_.info, shape, act_, ops::flash_options(tuning_));
  else if (!p.step)
    p.chunk = s.stats ? tokens : ops::query_chunk(tuning_, shape);
  p.attn_ld = p.fused ? H * uint32_t(cfg_.head_dim) : ld_heads_;  // the fused kernel writes dense rows

  const size_t B = batch, T = tokens, Dh = size_t(cfg_.head_dim), e = ops::element_bytes(act_);
  ws.need(row_role("q", p.row), B * H * T * Dh * e);
  if (p.fused) {
    ws.need(row_role("partial", p.row), ops::flash_partial_floats(shape, p.flash) * 4);
    if (const size_t words = ops::flash_counter_words(shape, p.flash))
      ws.need_zeroed(row_role("flash_counters", p.row), words * 4);
  } else if (!p.step)
    ws.need(row_role("scores", p.row), B * H * p.chunk * size_t(p.score_ld) * 4);
  plan_rope(p, tokens);
}

std::unique_ptr<MixerPlan> Attention::plan(const MixerShape& s, Workspace& ws) const {
  auto owned = std::make_unique<AttentionPlan>();
  AttentionPlan& p = *owned;
  p.shape = s;
  const uint32_t BT = s.batch * s.tokens, D = uint32_t(cfg_.hidden_size);
  const size_t T = s.tokens, e = ops::element_bytes(act_);
  p.norm_in_projection = w_qkv_.norm_applies(BT);
  if (s.rows_apart()) {
    if (s.stats || s.mask || !s.sequence || s.row_strides.size() != s.batch)
      throw Error(ErrorCode::invalid_argument, "attention: a step of separate sequences takes one cache per row, "
                                               "and neither statistics nor a mask");
    p.step = tuning_.pass_fusion &&
             ops::attention_step_applies(vk_.info, tuning_, attention_shape(1, s.tokens, 0, 0, 0, 0), true);
    const uint32_t per = p.step ? ops::step_sequences_per_dispatch(vk_.info, tuning_) : 1;
    for (uint32_t r = 0; r < s.batch; r += per) {
      auto& rp = *p.rows.emplace_back(std::make_unique<AttentionPlan>());
      rp.row = r;
      if (p.step) {
        rp.shape = {std::min(per, s.batch - r), s.tokens, 0, true, false, false, {}};
        plan_rope(rp, rp.shape.batch * s.tokens);
        continue;
      }
      rp.shape = {1, s.tokens, s.row_strides[r], true, false, false, {}};
      plan_attend(rp, ws);
      ws.need(row_role("attn", r), T * rp.attn_ld * e);
    }
    if (p.step) {
      ws.need("q", size_t(std::min(per, s.batch)) * T * size_t(cfg_.attn_dim()) * e);
      p.attn_ld = ld_heads_;
    } else {
      p.fused = p.rows[0]->fused;
      p.attn_ld = p.rows[0]->attn_ld;
    }
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
  if (!p.step) {
    for (size_t r = 0; r < p.rows.size(); ++r) prepare(*p.rows[r], pasts[r]);
    return;
  }
  // A group's table: the cos of each row's positions, then their sin.
  const uint32_t T = p.shape.tokens;
  for (const auto& g : p.rows) {
    std::vector<float> cos, sin;
    for (uint32_t r = g->row; r < g->row + g->shape.batch; ++r) {
      const std::vector<float> t = ops::rope_table(cfg_, T, pasts[r]);
      const size_t half = t.size() / 2;  // cos, sin, then one spare float
      cos.insert(cos.end(), t.begin(), t.begin() + half);
      sin.insert(sin.end(), t.begin() + half, t.begin() + 2 * half);
    }
    auto* out = static_cast<float*>(g->rope_up.mapped());
    std::memcpy(out, cos.data(), cos.size() * sizeof(float));
    std::memcpy(out + cos.size(), sin.data(), sin.size() * sizeof(float));
  }
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
  c->heads = uint32_t(cfg_.num_kv_heads);
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
    const ops::RowNorm norm{norm_w_, cfg_.norm_kind, eps};
    w_qkv_.record(rec, {.x = io.x, .y = proj, .M = BT, .bias = qkv_bias, .ws = &ws, .norm = &norm});
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
  } else if (io.rows.size() != B) {
    throw Error(ErrorCode::invalid_argument, "attention: a step of separate sequences without one cache per row");
  } else if (p.step) {
    for (const auto& group : p.rows) record_group(rec, *group, p, ws, attn, io);
  } else {  // each row against its own sequence's cache, then into its row of "attn"
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
  const Buffer& q = ws[row_role("q", p.row)];
  const uint32_t stride = p.shape.kv_stride;
  const ops::QkvPrepare args = qkv_args(p, ws, base, q, keys, values, stride, past);
  const ops::AttentionShape shape = attention_shape(B, T, S, stride, p.attn_ld, p.score_ld);
  const bool prepare_in_flash = !p.step && p.fused && tuning_.pass_fusion && tuning_.decode_prepare &&
                                ops::flash_prepares_in_decode(vk_.info, shape, p.flash, args);
  if (tuning_.pass_fusion) {
    if (!prepare_in_flash) ops::qkv_prepare(vk_, rec, args, BT, T, H, KV, Dh, act_);  // else flash_decode_prep.comp does
  } else {  // the reference path: a pass per op and tensor
    const Buffer& proj = args.proj;
    const uint32_t rd = args.rotary;
    if (args.gate_target != ops::GateTarget::none) {  // in place in the projections
      const ops::View y = args.gate_target == ops::GateTarget::query ? args.q_view
                          : args.gate_target == ops::GateTarget::key ? args.k_view
                                                                     : args.v_view;
      ops::gate(vk_, rec, {.g = proj, .gating = args.gating, .y = proj, .y_view = y, .rows = BT, .tokens = T,
                           .heads = args.gating.heads, .dim = Dh, .s = act_});
    }
    auto prepare = [&](ops::View src, const Buffer* norm, const Buffer& dst, uint32_t heads, uint32_t seq,
                       uint32_t first) {
      const ops::View out = ops::bhsd_view(heads, seq, Dh, first);
      if (norm) {
        ops::rmsnorm(vk_, rec, {.x = proj, .in = src, .w = *norm, .y = dst, .out = out, .rows = BT, .tokens = T,
                                .heads = heads, .dim = Dh, .kind = args.kind, .eps = args.eps, .s = act_});
        src = out;  // rotated in place
      }
      ops::rope(vk_, rec, {.x = norm ? dst : proj, .in = src, .table = args.table, .y = dst, .out = out, .rows = BT,
                           .tokens = T, .heads = heads, .dim = Dh, .rotary = rd, .s = act_,
                           .style = args.rope_style});
    };
    prepare(args.q_view, args.q_norm, q, H, T, 0);
    prepare(args.k_view, args.k_norm, keys, KV, stride, past);
    ops::rope(vk_, rec, {.x = proj, .in = args.v_view, .table = args.table, .y = values,
                         .out = ops::bhsd_view(KV, stride, Dh, past), .rows = BT, .tokens = T, .heads = KV,
                         .dim = Dh, .rotary = 0, .s = act_});
  }

  // softmax(q·kᵀ/√Dh + mask)·v, gated: in one pass for a short step, fused,
  // or in query chunks through a score matrix.
  const float scale = float(1.0 / std::sqrt(double(Dh)));
  if (p.step) {
    const ops::StepSequence seq{&keys, &values, past, stride};
    ops::attention_step(vk_, rec, q, std::span(&seq, 1), attn, 0, shape, act_, cfg_.causal, scale);
  } else if (p.fused) {
    const bool sdpa_gate = cfg_.gate_kind != GateKind::none && cfg_.gate_position == GatePosition::sdpa;
    const ops::FlashArgs fa{q,
                            keys,
                            values,
                            io.mask,
                            sdpa_gate ? &args.proj : nullptr,
                            args.gating,
                            attn,
                            &ws[row_role("partial", p.row)],
                            ws.find(row_role("flash_counters", p.row)),
                            prepare_in_flash ? &args : nullptr};
    ops::flash_attention(vk_, rec, fa, shape, p.flash, cfg_.causal, scale, act_);
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

ops::QkvPrepare Attention::qkv_args(const AttentionPlan& p, const Workspace& ws, uint32_t base, const Buffer& q,
                                    const Buffer& keys, const Buffer& values, uint32_t stride,
                                    uint32_t past) const {
  // The query, key or value gate, q/k norm and RoPE of the projections at
  // element `base`; the new keys and values into the cache at positions past..
  const uint32_t T = p.shape.tokens;
  const bool qk_norm = cfg_.use_qk_norm, gated = cfg_.gate_kind != GateKind::none;
  const GatePosition at = cfg_.gate_position;
  ops::Gate gating = this->gating(T);
  gating.view = shifted(gating.view, base);
  const ops::GateTarget target = !gated                        ? ops::GateTarget::none
                                 : at == GatePosition::query ? ops::GateTarget::query
                                 : at == GatePosition::key   ? ops::GateTarget::key
                                 : at == GatePosition::value ? ops::GateTarget::value
                                                             : ops::GateTarget::none;
  return {ws["proj"],         shifted(query_view(T), base), shifted(key_view(T), base), shifted(value_view(T), base),
          qk_norm ? &qn_w_ : nullptr, qk_norm ? &kn_w_ : nullptr, cfg_.norm_kind, float(cfg_.rms_norm_eps),
          p.rope_table(),     uint32_t(cfg_.rotary_dim()), cfg_.rope_style, target, gating,
          q,                  keys, values, stride, past};
}

void Attention::record_group(Recorder& rec, const AttentionPlan& group, const AttentionPlan& parent,
                             const Workspace& ws, const Buffer& attn, const MixerIo& io) const {
  const uint32_t first = group.row, n = group.shape.batch, T = parent.shape.tokens;
  const uint32_t H = uint32_t(cfg_.num_heads), KV = uint32_t(cfg_.num_kv_heads), Dh = uint32_t(cfg_.head_dim);
  std::vector<ops::StepSequence> seqs;
  for (uint32_t r = first; r < first + n; ++r) {
    const auto* cache = static_cast<const KvCache*>(io.rows[r].cache);
    const uint32_t stride = parent.shape.row_strides[r], past = io.rows[r].past;
    if (T + past > stride)
      throw Error(ErrorCode::invalid_argument, "attention: " + std::to_string(T + past) + " keys exceed row " +
                                                   std::to_string(r) + "'s cache of " + std::to_string(stride) +
                                                   " positions");
    seqs.push_back({&cache->keys, &cache->values, past, stride});
  }
  // The group's rows of "proj" into "q" (the group's batch rows) and their caches.
  ops::QkvPrepare args = qkv_args(group, ws, first * T * cols_, ws["q"], *seqs[0].keys, *seqs[0].values, 0, 0);
  args.seqs = seqs;
  ops::qkv_prepare(vk_, rec, args, n * T, T, H, KV, Dh, act_);
  const float scale = float(1.0 / std::sqrt(double(Dh)));
  ops::attention_step(vk_, rec, ws["q"], seqs, attn, first * T * parent.attn_ld,
                      attention_shape(n, T, 0, 0, parent.attn_ld, 0), act_, cfg_.causal, scale);
}

}  // namespace vkgate::nn
