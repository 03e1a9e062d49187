#include "nn/gdn.hpp"

#include <algorithm>

#include "ops/ops.hpp"
#include "vkgate/error.hpp"

namespace vkgate::nn {

namespace {
// Qwen3.5's separate projections as views of their rows in in_proj_qkvz's and
// in_proj_ba's order: per key head j, q_j, k_j, the v and z rows of its value
// heads, then per key head its value heads' b and a rows (gdn_config.hpp).
// Whole rows, so a block format stays as stored: Projection makes one run of
// the consecutive views that share a format.
std::vector<HostTensor> grouped_projections(const GdnConfig& c, const TensorMap& w) {
  const int64_t nk = c.num_key_heads, r = c.group_size(), dk = c.key_head_dim, dv = c.value_head_dim,
                keys = nk * dk, D = c.hidden_size;
  std::vector<HostTensor> out;
  auto rows = [&](const char* name, int64_t first, int64_t count) {
    const HostTensor& t = w.at(name);
    const size_t row = t.bytes.size() / size_t(t.numel() / D);
    out.push_back({t.dtype, {count, D}, t.bytes.subspan(size_t(first) * row, size_t(count) * row)});
  };
  for (int64_t j = 0; j < nk; ++j) {
    rows("in_proj_qkv.weight", j * dk, dk);
    rows("in_proj_qkv.weight", keys + j * dk, dk);
    rows("in_proj_qkv.weight", 2 * keys + j * r * dv, r * dv);
    rows("in_proj_z.weight", j * r * dv, r * dv);
  }
  for (int64_t j = 0; j < nk; ++j) {
    rows("in_proj_b.weight", j * r, r);
    rows("in_proj_a.weight", j * r, r);
  }
  return out;
}
}  // namespace

Gdn::Gdn(Context::Impl& vk, const gpu::Tuning& tuning, const GdnMixer& cfg, const TensorMap& w, Storage act)
    : vk_(vk), tuning_(tuning), cfg_(cfg), act_(act) {
  const GdnConfig& c = cfg.config;
  check_gdn_weights(c, w);
  D_ = uint32_t(c.hidden_size);
  qkvz_ = uint32_t(c.qkvz_rows());
  cols_ = qkvz_ + 2 * uint32_t(c.num_value_heads);
  ld_hidden_ = ops::operand_stride(vk.info, tuning, D_, act);
  ld_value_ = ops::operand_stride(vk.info, tuning, uint32_t(c.value_dim()), act);
  auto f32 = [&](const char* name) { return stored(w.at(name), Storage::f32); };
  if (cfg.input_norm) norm_w_ = upload(vk, f32("input_layernorm.weight"), "input_layernorm.weight");
  // One product gives both projections, in_proj_ba's columns after in_proj_qkvz's.
  // Qwen3.5's four projections are regrouped into that order.
  if (c.separate_projections) {
    const std::vector<HostTensor> parts = grouped_projections(c, w);
    std::vector<const HostTensor*> pointers;
    for (const HostTensor& t : parts) pointers.push_back(&t);
    w_in_ = Projection(vk, tuning, pointers, D_, act, "in_proj_qkv+z+b+a.weight");
  } else {
    w_in_ = Projection(vk, tuning, {&w.at("in_proj_qkvz.weight"), &w.at("in_proj_ba.weight")}, D_, act,
                       "in_proj_qkvz+in_proj_ba.weight");
  }
  conv_w_ = upload(vk, f32("conv1d.weight"), "conv1d.weight");  // [C, 1, K] is [C, K]
  a_log_ = upload(vk, f32("A_log"), "A_log");
  dt_bias_ = upload(vk, f32("dt_bias"), "dt_bias");
  out_norm_w_ = upload(vk, f32("norm.weight"), "norm.weight");
  w_out_ = Projection(vk, tuning, {&w.at("out_proj.weight")}, uint32_t(c.value_dim()), act, "out_proj.weight");
}

uint64_t Gdn::weight_bytes() const {
  uint64_t n = 0;
  n += w_in_.bytes() + w_out_.bytes();
  for (const Buffer* b : {&norm_w_, &conv_w_, &a_log_, &dt_bias_, &out_norm_w_}) n += b->size();
  return n;
}

// The chunked form is correct but slower than the recurrence on every device
// measured (BENCHMARKS.md, 2026-11-26): the layer's own choice is the
// recurrence until it is not; VKGATE_GDN_MODE=chunk forces it.
bool Gdn::chunked(uint32_t /*tokens*/) const { return tuning_.gdn_mode == gpu::RecurrenceMode::chunk; }

size_t Gdn::conv_elements(uint32_t batch) const {
  const GdnConfig& c = cfg_.config;
  return size_t(batch) * size_t(c.conv_channels()) * size_t(c.conv_kernel - 1);
}

size_t Gdn::state_elements(uint32_t batch) const {
  const GdnConfig& c = cfg_.config;
  return size_t(batch) * size_t(c.num_value_heads) * size_t(c.key_head_dim) * size_t(c.value_head_dim);
}

std::unique_ptr<MixerCache> Gdn::make_cache(uint32_t batch, uint32_t /*capacity*/, const std::string& name) const {
  auto c = std::make_unique<GdnState>();
  c->conv = allocate(vk_, conv_elements(batch), Storage::f32, gpu::MemoryKind::device, name + "Gated DeltaNet conv state");
  c->state = allocate(vk_, state_elements(batch), Storage::f32, gpu::MemoryKind::device, name + "Gated DeltaNet state");
  return c;
}

uint64_t Gdn::largest_token_bytes() const {
  const GdnConfig& c = cfg_.config;
  const uint64_t e = ops::element_bytes(act_), nv = uint64_t(c.num_value_heads);
  return std::max({uint64_t(ld_hidden_) * e, uint64_t(cols_) * e, uint64_t(c.conv_channels()) * 4,
                   nv * uint64_t(std::max(c.key_head_dim, c.value_head_dim)) * 4, uint64_t(ld_value_) * e,
                   nv * ops::kGdnChunk * 4, uint64_t(D_) * 4});
}

uint32_t Gdn::max_step_tokens(uint32_t batch) const {
  return uint32_t(std::min<uint64_t>(vk_.info.max_storage_buffer_range / (uint64_t(batch) * largest_token_bytes()),
                                     UINT32_MAX));
}

void Gdn::reserve_delta(Workspace& ws, uint32_t batch, uint32_t tokens, uint32_t row) const {
  const ops::GdnScratchFloats f = ops::gdn_scratch_floats(ops::gdn_shape(cfg_.config, batch, tokens));
  ws.need(row_role("gdn_mixed", row), f.mixed * 4);
  ws.need(row_role("gdn_bg", row), f.bg * 4);
  ws.need(row_role("gdn_o", row), f.o * 4);
  if (chunked(tokens)) {
    ws.need(row_role("gdn_w", row), f.chunk_w * 4);
    ws.need(row_role("gdn_u", row), f.chunk_u * 4);
    ws.need(row_role("gdn_p", row), f.chunk_p * 4);
  }
}

std::unique_ptr<MixerPlan> Gdn::plan(const MixerShape& s, Workspace& ws) const {
  auto p = std::make_unique<MixerPlan>();
  p->shape = s;
  if (const uint32_t most = max_step_tokens(s.batch); s.tokens > most)
    throw Error(ErrorCode::unsupported,
                "gated deltanet: a step of batch " + std::to_string(s.batch) + " × " + std::to_string(s.tokens) +
                    " tokens is more than the " + std::to_string(most) + " tokens one step's buffers hold (" +
                    std::to_string(s.batch * largest_token_bytes()) + " bytes per token against " +
                    "maxStorageBufferRange " + std::to_string(vk_.info.max_storage_buffer_range) +
                    "); run the sequence in pieces, the states carried");
  const size_t BT = size_t(s.batch) * s.tokens, e = ops::element_bytes(act_);
  if (has_input_norm() && !w_in_.norm_applies(uint32_t(BT))) ws.need("normed", BT * ld_hidden_ * e);
  ws.need("gdn_proj", BT * cols_ * e);
  ws.need("gdn_y", BT * ld_value_ * e);
  if (s.rows_apart()) {  // each row's recurrence against its own sequence's states, into its own scratch
    if (s.stats || !s.sequence || s.row_strides.size() != s.batch)
      throw Error(ErrorCode::invalid_argument, "gated deltanet: a step of separate sequences takes one state per row");
    for (uint32_t r = 0; r < s.batch; ++r) {
      reserve_delta(ws, 1, s.tokens, r);
      ws.need(row_role("gdn_y", r), size_t(s.tokens) * ld_value_ * e);
    }
  } else {
    reserve_delta(ws, s.batch, s.tokens, kAllRows);
  }
  if (!s.sequence) {
    ws.need("gdn_conv", conv_elements(s.batch) * 4);
    ws.need("gdn_state", state_elements(s.batch) * 4);
  }
  const uint32_t rows = uint32_t(BT);
  const uint32_t splits = std::max(w_in_.splits(rows, ld_hidden_), w_out_.splits(rows, ld_value_));
  if (splits > 1) ws.need("split_k", splits * BT * std::max(cols_, D_) * 4);
  w_in_.reserve(ws, rows);
  w_out_.reserve(ws, rows);
  return p;
}

void Gdn::record(gpu::Recorder& rec, const MixerPlan& p, const Workspace& ws, const MixerIo& io, bool poison) const {
  const uint32_t B = p.shape.batch, T = p.shape.tokens, BT = B * T;
  const GdnConfig& c = cfg_.config;
  const Buffer& proj = ws["gdn_proj"];
  const Buffer& y = ws["gdn_y"];
  const Buffer* split_k = ws.find("split_k");
  if (poison)
    for (const char* role : {"normed", "gdn_proj", "gdn_y"})
      if (const Buffer* b = ws.find(role)) rec.fill(*b, nan_word(act_));
  // The sequence's states, or zero states of the plan's (a forward that keeps none);
  // a step of separate sequences has one per row (io.rows).
  const auto* cache = static_cast<const GdnState*>(io.cache);
  if (!cache && io.rows.empty()) {
    rec.fill(ws["gdn_conv"], 0);
    rec.fill(ws["gdn_state"], 0);
  }

  const Buffer* x = &io.x;
  uint32_t ldx = D_;
  const bool norm_folded = has_input_norm() && w_in_.norm_applies(BT);
  if (norm_folded) {  // the norm in the decode product
    const ops::RowNorm norm{norm_w_, *cfg_.input_norm, float(c.rms_norm_eps)};
    w_in_.record(rec, {.x = io.x, .y = proj, .M = BT, .ws = &ws, .norm = &norm});
  } else if (has_input_norm()) {
    const Buffer& normed = ws["normed"];
    ops::rmsnorm(vk_, rec, {.x = io.x, .in = ops::btd_view(T, 1, D_), .w = norm_w_, .y = normed,
                            .out = {0, T * ld_hidden_, ld_hidden_, 1, ld_hidden_, 0}, .rows = BT, .tokens = T,
                            .heads = 1, .dim = D_, .kind = *cfg_.input_norm, .eps = float(c.rms_norm_eps), .s = act_,
                            .x_f32 = true});
    x = &normed;
    ldx = ld_hidden_;
  }
  if (!norm_folded) w_in_.record(rec, {.x = *x, .y = proj, .M = BT, .ldx = ldx, .partial = split_k, .ws = &ws});
  const bool chunks = chunked(T);
  // The recurrence of `rows` rows from row `first` of the projections, against `states`, into `out`.
  auto delta = [&](uint32_t rows, uint32_t first, uint32_t row, const Buffer& conv, const Buffer& state,
                   const Buffer& out) {
    const uint32_t at = first * T * cols_;
    const ops::GdnArgs args{proj,     at,     cols_,       proj,        at + qkvz_,     cols_,
                            conv_w_,  a_log_, dt_bias_,    out_norm_w_, float(c.rms_norm_eps), conv,
                            state,    out,    ld_value_,
                            {ws[row_role("gdn_mixed", row)], ws[row_role("gdn_bg", row)], ws[row_role("gdn_o", row)],
                             chunks ? &ws[row_role("gdn_w", row)] : nullptr, chunks ? &ws[row_role("gdn_u", row)] : nullptr,
                             chunks ? &ws[row_role("gdn_p", row)] : nullptr},
                            c.out_proj_tiled};
    ops::gdn_forward(vk_, rec, args, ops::gdn_shape(c, rows, T), act_,
                     chunks ? ops::GdnForm::chunk : ops::GdnForm::recurrent);
  };
  if (io.rows.empty()) {
    delta(B, 0, kAllRows, cache ? cache->conv : ws["gdn_conv"], cache ? cache->state : ws["gdn_state"], y);
  } else {  // each row against its own sequence's states, then into its row of y
    for (uint32_t r = 0; r < B; ++r) {
      const auto* row_cache = static_cast<const GdnState*>(io.rows[r].cache);
      const Buffer& row_y = ws[row_role("gdn_y", r)];
      delta(1, r, r, row_cache->conv, row_cache->state, row_y);
      copy_row(rec, row_y, y, r, uint64_t(T) * ld_value_ * ops::element_bytes(act_));
    }
  }
  w_out_.record(rec, {.x = y, .y = io.y, .M = BT, .residual = io.residual ? &io.x : nullptr, .y_f32 = true,
                      .ldx = ld_value_, .partial = split_k, .ws = &ws});
}

}  // namespace vkgate::nn
