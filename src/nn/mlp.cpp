#include "nn/mlp.hpp"

#include "ops/ops.hpp"

namespace vkgate::nn {

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
  auto weight = [&](const char* n) { return stored(w.at(name(n)), act); };
  auto f32 = [&](const char* n) { return stored(w.at(name(n)), Storage::f32); };
  const size_t e = ops::element_bytes(act);
  ld_hidden_ = ops::operand_stride(vk.info, tuning, hidden_, act);
  ld_inter_ = ops::operand_stride(vk.info, tuning, inter_, act);
  norm_w_ = upload(vk, f32(cfg.mlp_norm_name()), name(cfg.mlp_norm_name()));
  // [gate ; up]: row r < I of the product is gate's, row I + r up's (ops::glu).
  w_gate_up_ = upload(vk,
                      ops::strided_rows(concat({weight("mlp.gate_proj.weight"), weight("mlp.up_proj.weight")}),
                                        2 * size_t(inter_), hidden_ * e, ld_hidden_ * e),
                      name("mlp.gate_proj+up_proj.weight"));
  w_down_ = upload(vk, ops::strided_rows(weight("mlp.down_proj.weight"), hidden_, inter_ * e, ld_inter_ * e),
                   name("mlp.down_proj.weight"));
  if (cfg.mlp_bias) {
    b_gate_up_ = upload(vk, concat({f32("mlp.gate_proj.bias"), f32("mlp.up_proj.bias")}), name("mlp.gate_proj+up_proj.bias"));
    b_down_ = upload(vk, f32("mlp.down_proj.bias"), name("mlp.down_proj.bias"));
  }
}

bool Mlp::norm_in_projection(uint32_t rows) const {
  return ops::matmul_rmsnorm_applies(vk_.info, tuning_, rows, hidden_, ld_hidden_);
}

void Mlp::reserve(uint32_t rows, Workspace& ws) const {
  const size_t e = ops::element_bytes(act_), R = rows;
  if (!norm_in_projection(rows)) ws.need("normed", R * ld_hidden_ * e);
  ws.need("mlp_proj", R * 2 * inter_ * e);
  ws.need("mlp_hidden", R * ld_inter_ * e);
  const size_t up_splits = ops::matmul_splits(vk_.info, tuning_, rows, 2 * inter_, hidden_, act_, ld_hidden_, ld_hidden_);
  const size_t down_splits = ops::matmul_splits(vk_.info, tuning_, rows, hidden_, inter_, act_, ld_inter_, ld_inter_);
  if (up_splits > 1) ws.need("split_k", up_splits * R * 2 * inter_ * 4);
  if (down_splits > 1) ws.need("split_k", down_splits * R * hidden_ * 4);
}

void Mlp::record(gpu::Recorder& rec, const Workspace& ws, uint32_t rows, const Buffer& x, const Buffer& y,
                 bool poison) const {
  const Buffer& proj = ws["mlp_proj"];
  const Buffer& h = ws["mlp_hidden"];
  const Buffer* split_k = ws.find("split_k");
  const Buffer* gate_up_bias = b_gate_up_.valid() ? &b_gate_up_ : nullptr;
  if (poison)
    for (const char* role : {"normed", "mlp_proj", "mlp_hidden"})
      if (const Buffer* b = ws.find(role)) rec.fill(*b, nan_word(act_));
  if (norm_in_projection(rows)) {
    ops::matmul_rmsnorm(vk_, rec, x, norm_w_, norm_kind_, eps_, w_gate_up_, gate_up_bias, proj, rows, 2 * inter_,
                        hidden_, act_, ld_hidden_);
  } else {
    const Buffer& normed = ws["normed"];
    ops::rmsnorm(vk_, rec, x, ops::btd_view(rows, 1, hidden_), norm_w_, normed,
                 {0, rows * ld_hidden_, ld_hidden_, 1, ld_hidden_, 0}, rows, rows, 1, hidden_, norm_kind_, eps_, act_,
                 true);
    ops::matmul(vk_, rec, normed, w_gate_up_, gate_up_bias, nullptr, proj, rows, 2 * inter_, hidden_, act_, false,
                ld_hidden_, ld_hidden_, split_k);
  }
  ops::glu(vk_, rec, proj, h, rows, inter_, act_fn_, act_, 2 * inter_, ld_inter_);
  ops::matmul(vk_, rec, h, w_down_, b_down_.valid() ? &b_down_ : nullptr, &x, y, rows, hidden_, inter_, act_, true,
              ld_inter_, ld_inter_, split_k);
}

uint64_t Mlp::weight_bytes() const {
  uint64_t n = 0;
  for (const Buffer* b : {&norm_w_, &w_gate_up_, &b_gate_up_, &w_down_, &b_down_}) n += b->size();
  return n;
}

}  // namespace vkgate::nn
