#include "nn/gla.hpp"

#include <algorithm>

#include "ops/ops.hpp"

namespace vkgate::nn {

Gla::Gla(Context::Impl& vk, const gpu::Tuning& tuning, const GlaConfig& cfg, const TensorMap& w, Storage act)
    : vk_(vk), tuning_(tuning), cfg_(cfg), forms_(check_gla_weights(cfg, w)), act_(act) {
  D_ = uint32_t(cfg.hidden_size);
  H_ = uint32_t(cfg.num_heads);
  KV_ = uint32_t(cfg.num_kv_heads);
  dk_ = uint32_t(cfg.head_k_dim());
  dv_ = uint32_t(cfg.head_v_dim());
  rank_ = uint32_t(forms_.low_rank_dim);
  const bool gate = cfg.use_output_gate, single = rank_ == 0;
  q_col_ = rank_;
  k_col_ = q_col_ + H_ * dk_;
  v_col_ = k_col_ + KV_ * dk_;
  g_col_ = v_col_ + KV_ * dv_;
  gk_col_ = g_col_ + (gate ? H_ * dv_ : 0);
  cols_ = gk_col_ + (single ? KV_ * dk_ : 0);

  auto f32 = [&](const std::string& name) { return stored(w.at(name), Storage::f32); };
  ld_hidden_ = ops::operand_stride(vk.info, tuning, D_, act);
  ld_out_ = ops::operand_stride(vk.info, tuning, H_ * dv_, act);
  if (forms_.attn_norm) norm_w_ = upload(vk, f32("attn_norm.weight"), "attn_norm.weight");
  auto tensor = [&](const char* name) { return &w.at(name); };
  w_proj_ = Projection(vk, tuning,
                       {single ? nullptr : tensor("gk_proj.0.weight"), tensor("q_proj.weight"), tensor("k_proj.weight"),
                        tensor("v_proj.weight"), gate ? tensor("g_proj.weight") : nullptr,
                        single ? tensor("gk_proj.weight") : nullptr},
                       D_, act, "gk_proj+q_proj+k_proj+v_proj+g_proj.weight");
  if (single) {  // the forget gate's bias after zeros for the other columns
    std::vector<std::byte> bias((cols_ - KV_ * dk_) * sizeof(float));
    const auto gk_bias = f32("gk_proj.bias");
    bias.insert(bias.end(), gk_bias.begin(), gk_bias.end());
    b_proj_ = upload(vk, bias, "gk_proj.bias");
  } else {
    w_gk1_ = Projection(vk, tuning, {tensor("gk_proj.1.weight")}, rank_, act, "gk_proj.1.weight");
    b_gk1_ = upload(vk, f32("gk_proj.1.bias"), "gk_proj.1.bias");
  }
  if (!forms_.output_norm.empty()) out_norm_w_ = upload(vk, f32(forms_.output_norm), forms_.output_norm);
  w_o_ = Projection(vk, tuning, {tensor("o_proj.weight")}, H_ * dv_, act, "o_proj.weight");
}

uint64_t Gla::weight_bytes() const {
  uint64_t n = 0;
  n += w_proj_.bytes() + w_gk1_.bytes() + w_o_.bytes();
  for (const Buffer* b : {&norm_w_, &b_proj_, &b_gk1_, &out_norm_w_}) n += b->size();
  return n;
}

uint64_t Gla::largest_token_bytes() const {
  const uint64_t e = ops::element_bytes(act_);
  // Either form: o's parts, and the chunkwise form's scores.
  const uint64_t parts = std::max(ops::gla_row_blocks(dk_), ops::gla_chunk_parts(vk_.info, tuning_, dk_));
  return std::max({uint64_t(cols_) * e, uint64_t(H_) * parts * dv_ * 4, uint64_t(ld_out_) * e,
                   uint64_t(ld_hidden_) * e, uint64_t(D_) * 4, uint64_t(H_) * dk_ * 4,
                   uint64_t(H_) * ops::kGlaChunk * 4});
}

uint32_t Gla::o_parts(uint32_t tokens) const {
  return ops::gla_chunkwise(tuning_, tokens) ? ops::gla_chunk_parts(vk_.info, tuning_, dk_) : ops::gla_row_blocks(dk_);
}

uint32_t Gla::max_step_tokens(uint32_t batch) const {
  const uint64_t fit = vk_.info.max_storage_buffer_range / (uint64_t(batch) * largest_token_bytes());
  const uint32_t forced = tuning_.gla_segment_tokens;
  return uint32_t(std::min<uint64_t>(forced ? std::min<uint64_t>(fit, forced) : fit, UINT32_MAX));
}

std::unique_ptr<MixerCache> Gla::make_cache(uint32_t batch, uint32_t /*capacity*/, const std::string& name) const {
  auto c = std::make_unique<GlaState>();
  c->state = allocate(vk_, state_elements(batch), Storage::f32, gpu::MemoryKind::device, name + "GLA state");
  return c;
}

void Gla::reserve_scan(Workspace& ws, uint32_t batch, uint32_t tokens, uint32_t row) const {
  const size_t BT = size_t(batch) * tokens;
  ws.need(row_role("gla_qs", row), BT * H_ * dk_ * 4);
  ws.need(row_role("gla_ks", row), BT * KV_ * dk_ * 4);
  ws.need(row_role("gla_as", row), BT * KV_ * dk_ * 4);
  if (ops::gla_chunkwise(tuning_, tokens)) {
    for (const char* r : {"gla_qd", "gla_qr"}) ws.need(row_role(r, row), BT * H_ * dk_ * 4);
    for (const char* r : {"gla_kd", "gla_kr"}) ws.need(row_role(r, row), BT * KV_ * dk_ * 4);
    const size_t chunks = (tokens + ops::kGlaChunk - 1) / ops::kGlaChunk;
    ws.need(row_role("gla_scores", row), size_t(batch) * H_ * chunks * ops::kGlaChunk * ops::kGlaChunk * 4);
  }
}

std::unique_ptr<MixerPlan> Gla::plan(const MixerShape& s, Workspace& ws) const {
  auto p = std::make_unique<MixerPlan>();
  p->shape = s;
  const uint32_t batch = s.batch, tokens = s.tokens;
  if (const uint32_t most = max_step_tokens(batch); tokens > most)
    throw Error(ErrorCode::unsupported,
                "gla: a step of batch " + std::to_string(batch) + " × " + std::to_string(tokens) +
                    " tokens is more than the " + std::to_string(most) + " tokens one step's GLA buffers hold (" +
                    std::to_string(batch * largest_token_bytes()) + " bytes per token against " +
                    "maxStorageBufferRange " + std::to_string(vk_.info.max_storage_buffer_range) +
                    ", or VKGATE_GLA_SEGMENT_TOKENS); a Sequence runs a long prompt in pieces (Model::extend), "
                    "or use a smaller batch");
  if (!s.sequence) ws.need("layer_state", state_elements(batch) * 4);  // zeroed before each layer
  const size_t BT = size_t(batch) * tokens, e = ops::element_bytes(act_);
  if (forms_.attn_norm && !w_proj_.norm_applies(uint32_t(BT))) ws.need("normed", BT * ld_hidden_ * e);
  ws.need("gla_proj", BT * cols_ * e);
  if (rank_) ws.need("gla_gk", BT * KV_ * dk_ * e);
  ws.need("gla_o", BT * H_ * o_parts(tokens) * dv_ * 4);
  if (s.rows_apart()) {  // each row's scan against its own sequence's state, into its own scratch
    if (s.stats || !s.sequence || s.row_strides.size() != batch)
      throw Error(ErrorCode::invalid_argument, "gla: a step of separate sequences takes one state per row");
    for (uint32_t r = 0; r < batch; ++r) {
      reserve_scan(ws, 1, tokens, r);
      ws.need(row_role("gla_o", r), size_t(tokens) * H_ * o_parts(tokens) * dv_ * 4);
    }
  } else {
    reserve_scan(ws, batch, tokens, kAllRows);
  }
  ws.need("gla_attn", BT * ld_out_ * e);
  const uint32_t rows = uint32_t(BT);
  // Split-K partial sums of the widest of the three products (ops::matmul_splits).
  const uint32_t splits = std::max({w_proj_.splits(rows, ld_hidden_), rank_ ? w_gk1_.splits(rows, cols_) : 1u,
                                    w_o_.splits(rows, ld_out_)});
  if (splits > 1) ws.need("split_k", splits * BT * std::max(cols_, D_) * 4);
  for (const Projection* w : {&w_proj_, &w_gk1_, &w_o_}) w->reserve(ws, rows);
  return p;
}

void Gla::record(gpu::Recorder& rec, const MixerPlan& p, const Workspace& ws, const MixerIo& io, bool poison) const {
  const uint32_t batch = p.shape.batch, T = p.shape.tokens, BT = batch * T;
  // The sequence's state, or a zero state of the plan's (a forward that keeps none).
  // (A step of separate sequences has one per row: io.rows.)
  const Buffer* state = !io.rows.empty() ? nullptr
                        : io.cache       ? &static_cast<const GlaState*>(io.cache)->state
                                         : &ws["layer_state"];
  if (state && !io.cache) rec.fill(*state, 0);  // 0.0f
  const Buffer& proj = ws["gla_proj"];
  const Buffer& o = ws["gla_o"];
  const Buffer& attn = ws["gla_attn"];
  const Buffer* split_k = ws.find("split_k");
  if (poison)
    for (const char* role : {"normed", "gla_proj", "gla_gk", "gla_o", "gla_attn"})
      if (const Buffer* b = ws.find(role)) rec.fill(*b, nan_word(role == std::string("gla_o") ? Storage::f32 : act_));

  // x̂·Wᵀ for every projection in one product (x̂: attn_norm(x), or x as given).
  const Buffer* x = &io.x;
  uint32_t ldx = D_;
  const Buffer* bias = b_proj_.valid() ? &b_proj_ : nullptr;
  const bool norm_folded = forms_.attn_norm && w_proj_.norm_applies(BT);
  if (norm_folded) {  // the norm in the decode product
    const ops::RowNorm norm{norm_w_, NormKind::plain, float(cfg_.norm_eps)};
    w_proj_.record(rec, {.x = io.x, .y = proj, .M = BT, .bias = bias, .ws = &ws, .norm = &norm});
  } else if (forms_.attn_norm) {
    const Buffer& normed = ws["normed"];
    ops::rmsnorm(vk_, rec, {.x = io.x, .in = ops::btd_view(T, 1, D_), .w = norm_w_, .y = normed,
                            .out = {0, T * ld_hidden_, ld_hidden_, 1, ld_hidden_, 0}, .rows = BT, .tokens = T,
                            .heads = 1, .dim = D_, .kind = NormKind::plain, .eps = float(cfg_.norm_eps), .s = act_,
                            .x_f32 = true});
    x = &normed;
    ldx = ld_hidden_;
  }
  if (!norm_folded)
    w_proj_.record(rec, {.x = *x, .y = proj, .M = BT, .bias = bias, .ldx = ldx, .partial = split_k, .ws = &ws});
  // The low-rank forget gate's second product reads the first rank_ columns.
  const Buffer* gk = &proj;
  ops::View gk_view{gk_col_, T * cols_, cols_, 1, dk_, 0};
  if (rank_) {
    gk = &ws["gla_gk"];
    w_gk1_.record(rec, {.x = proj, .y = *gk, .M = BT, .bias = &b_gk1_, .ldx = cols_, .partial = split_k, .ws = &ws});
    gk_view = {0, T * KV_ * dk_, KV_ * dk_, 1, dk_, 0};
  }

  auto view = [&](uint32_t col, uint32_t dim) { return ops::View{col, T * cols_, cols_, 1, dim, 0}; };
  // The scan of `rows` rows from row `first` of the projections, against `state`, into `o`.
  auto scan = [&](uint32_t rows, uint32_t first, uint32_t row, const Buffer& state, const Buffer& o) {
    const uint32_t at = first * T * cols_, gk_at = first * T * (rank_ ? KV_ * dk_ : cols_);
    const ops::GlaScan args{proj, *gk, shifted(view(q_col_, dk_), at), shifted(view(k_col_, dk_), at),
                            shifted(view(v_col_, dv_), at), shifted(gk_view, gk_at), state, o,
                            ws[row_role("gla_qs", row)], ws[row_role("gla_ks", row)], ws[row_role("gla_as", row)], rows, T, H_,
                            KV_, dk_, dv_, cfg_.feature_map, cfg_.key_coupling == KeyCoupling::convex,
                            float(cfg_.gate_logit_normalizer), cfg_.clamp_min, float(cfg_.scale())};
    if (ops::gla_chunkwise(tuning_, T))
      ops::gla_chunked(vk_, rec, args,
                       {ws[row_role("gla_qd", row)], ws[row_role("gla_qr", row)], ws[row_role("gla_kd", row)],
                        ws[row_role("gla_kr", row)], ws[row_role("gla_scores", row)]},
                       act_);
    else
      ops::gla_recurrent(vk_, rec, args, act_);
  };
  if (io.rows.empty()) {
    scan(batch, 0, kAllRows, *state, o);
  } else {  // each row against its own sequence's state, then into its row of o
    for (uint32_t r = 0; r < batch; ++r) {
      const Buffer& row_o = ws[row_role("gla_o", r)];
      scan(1, r, r, static_cast<const GlaState*>(io.rows[r].cache)->state, row_o);
      copy_row(rec, row_o, o, r, uint64_t(T) * H_ * o_parts(T) * dv_ * 4);
    }
  }
  const ops::GlaOutput out{o, proj, view(g_col_, dv_), out_norm_w_.valid() ? &out_norm_w_ : nullptr,
                           cfg_.use_output_gate, float(cfg_.norm_eps), attn, ld_out_, BT, T, H_, dv_, o_parts(T)};
  ops::gla_output(vk_, rec, out, act_);
  w_o_.record(rec, {.x = attn, .y = io.y, .M = BT, .residual = io.residual ? &io.x : nullptr, .y_f32 = true,
                    .ldx = ld_out_, .partial = split_k, .ws = &ws});
}

}  // namespace vkgate::nn
