#include "nn/mlp.hpp"

#include "nn/moe.hpp"
#include "ops/ops.hpp"

namespace vkgate::nn {

std::unique_ptr<FeedForward> make_feed_forward(Context::Impl& vk, const gpu::Tuning& tuning, const ModelConfig& cfg,
                                               const TensorMap& weights, int layer, Storage act) {
  if (cfg.sparse_mlp(layer)) return std::make_unique<Moe>(vk, tuning, cfg, weights, layer, act);
  return std::make_unique<Mlp>(vk, tuning, cfg, weights, layer, act);
}

Mlp::Mlp(Context::Impl& vk, const gpu::Tuning& tuning, const ModelConfig& cfg, const TensorMap& w, int layer,
         Storage act)
    : vk_(vk),
      tuning_(tuning),
      hidden_(uint32_t(cfg.hidden_size())),
      inter_(uint32_t(cfg.intermediate_size)),
      norm_kind_(cfg.norm_kind()),
      eps_(float(cfg.norm_eps())),
      act_fn_(cfg.hidden_act),
      act_(act) {
  auto name = [&](const char* n) { return layer_tensor_name(layer, n); };
  auto tensor = [&](const char* n) { return &w.at(name(n)); };
  auto f32 = [&](const char* n) { return stored(w.at(name(n)), Storage::f32); };
  ld_hidden_ = ops::operand_stride(vk.info, tuning, hidden_, act);
  ld_inter_ = ops::operand_stride(vk.info, tuning, inter_, act);
  norm_w_ = upload(vk, f32(cfg.mlp_norm_name()), name(cfg.mlp_norm_name()));
  // [gate ; up]: row r < I of the product is gate's, row I + r up's (ops::glu).
  w_gate_up_ = Projection(vk, tuning, {tensor("mlp.gate_proj.weight"), tensor("mlp.up_proj.weight")}, hidden_, act,
                          name("mlp.gate_proj+up_proj.weight"));
  w_down_ = Projection(vk, tuning, {tensor("mlp.down_proj.weight")}, inter_, act, name("mlp.down_proj.weight"));
  if (cfg.mlp_bias) {
    b_gate_up_ = upload(vk, concat({f32("mlp.gate_proj.bias"), f32("mlp.up_proj.bias")}), name("mlp.gate_proj+up_proj.bias"));
    b_down_ = upload(vk, f32("mlp.down_proj.bias"), name("mlp.down_proj.bias"));
  }
}

bool Mlp::norm_in_projection(uint32_t rows) const {
  return w_gate_up_.glu_applies(rows);
}

void Mlp::reserve(uint32_t rows, Workspace& ws) const {
  const size_t e = ops::element_bytes(act_), R = rows;
  if (!norm_in_projection(rows)) {
    ws.need("normed", R * ld_hidden_ * e);
    ws.need("mlp_proj", R * 2 * inter_ * e);
  }
  ws.need("mlp_hidden", R * ld_inter_ * e);
  const size_t up_splits = w_gate_up_.splits(rows, ld_hidden_);
  const size_t down_splits = w_down_.splits(rows, ld_inter_);
  if (up_splits > 1) ws.need("split_k", up_splits * R * 2 * inter_ * 4);
  if (down_splits > 1) ws.need("split_k", down_splits * R * hidden_ * 4);
  w_gate_up_.reserve(ws, rows);
  w_down_.reserve(ws, rows);
}

void Mlp::record(gpu::Recorder& rec, const Workspace& ws, uint32_t rows, const Buffer& x, const Buffer& y,
                 StatsSlot /*stats*/, bool poison) const {
  const Buffer& h = ws["mlp_hidden"];
  const Buffer* split_k = ws.find("split_k");
  const Buffer* gate_up_bias = b_gate_up_.valid() ? &b_gate_up_ : nullptr;
  if (poison)
    for (const char* role : {"normed", "mlp_proj", "mlp_hidden"})
      if (const Buffer* b = ws.find(role)) rec.fill(*b, nan_word(act_));
  if (norm_in_projection(rows)) {  // the norm, both projections and the GLU in one pass
    const ops::RowNorm norm{norm_w_, norm_kind_, eps_};
    w_gate_up_.record(rec, {.x = x, .y = h, .M = rows, .bias = gate_up_bias, .ws = &ws, .norm = &norm, .glu = act_fn_,
                            .ldy = ld_inter_});
  } else {
    const Buffer& normed = ws["normed"];
    const Buffer& proj = ws["mlp_proj"];
    ops::rmsnorm(vk_, rec, {.x = x, .in = ops::btd_view(rows, 1, hidden_), .w = norm_w_, .y = normed,
                            .out = {0, rows * ld_hidden_, ld_hidden_, 1, ld_hidden_, 0}, .rows = rows, .tokens = rows,
                            .heads = 1, .dim = hidden_, .kind = norm_kind_, .eps = eps_, .s = act_, .x_f32 = true});
    w_gate_up_.record(rec, {.x = normed, .y = proj, .M = rows, .bias = gate_up_bias, .ldx = ld_hidden_, .partial = split_k,
                            .ws = &ws});
    ops::glu(vk_, rec, {.proj = proj, .h = h, .rows = rows, .inter = inter_, .act = act_fn_, .s = act_,
                        .ld_p = 2 * inter_, .ld_h = ld_inter_});
  }
  w_down_.record(rec, {.x = h, .y = y, .M = rows, .bias = b_down_.valid() ? &b_down_ : nullptr, .residual = &x,
                       .y_f32 = true, .ldx = ld_inter_, .partial = split_k, .ws = &ws});
}

uint64_t Mlp::weight_bytes() const {
  uint64_t n = w_gate_up_.bytes() + w_down_.bytes();
  for (const Buffer* b : {&norm_w_, &b_gate_up_, &b_down_}) n += b->size();
  return n;
}

}  // namespace vkgate::nn
