#include "nn/projection.hpp"

#include <algorithm>

#include "ops/qmatmul.hpp"
#include "ops/qmatmul_dot.hpp"
#include "vkgate/error.hpp"
#include "vkgate/quant.hpp"

namespace vkgate::nn {

Projection Projection::from_dense(Context::Impl& vk, const gpu::Tuning& tuning, std::vector<std::byte> dense,
                                  uint32_t rows, uint32_t K, Storage act, const std::string& name) {
  Projection p;
  p.vk_ = &vk;
  p.tuning_ = tuning;
  p.act_ = act;
  p.rows_ = rows;
  p.K_ = K;
  p.ldw_ = ops::operand_stride(vk.info, tuning, K, act);
  const size_t e = ops::element_bytes(act);
  p.dense_ = upload(vk, ops::strided_rows(std::move(dense), rows, K * e, p.ldw_ * e), name);
  return p;
}

Projection::Projection(Context::Impl& vk, const gpu::Tuning& tuning, const std::vector<const HostTensor*>& parts,
                       uint32_t K, Storage act, const std::string& name) {
  const bool blocks = std::any_of(parts.begin(), parts.end(), [](const HostTensor* t) { return t && is_quantized(t->dtype); });
  if (!blocks) {
    std::vector<std::byte> dense;
    uint32_t rows = 0;
    for (const HostTensor* t : parts) {
      if (!t) continue;
      const std::vector<std::byte> b = stored(*t, act);
      dense.insert(dense.end(), b.begin(), b.end());
      rows += uint32_t(t->numel() / K);
    }
    *this = from_dense(vk, tuning, std::move(dense), rows, K, act, name);
    return;
  }
  vk_ = &vk;
  tuning_ = tuning;
  act_ = act;
  K_ = ldw_ = K;
  name_ = name;
  for (const HostTensor* t : parts) {
    if (!t) continue;
    if (!ops::qmatmul_takes(t->dtype, K))
      throw Error(ErrorCode::unsupported, name + ": a " + to_string(t->dtype) + " part with rows of " +
                                              std::to_string(K) + " elements, which the quantized product cannot take "
                                              "(rows of whole blocks, a multiple of 8)");
    const auto count = uint32_t(t->bytes.size() / *stored_bytes(t->dtype, K));
    if (runs_.empty() || runs_.back().dtype != t->dtype) runs_.push_back({t->dtype, rows_, 0, {}});
    runs_.back().count += count;
    rows_ += count;
  }
  // Each run's parts, as stored, padded for the kernel's reads past the last block.
  size_t at = 0;
  std::vector<const HostTensor*> present;
  for (const HostTensor* t : parts)
    if (t) present.push_back(t);
  for (Run& r : runs_) {
    std::vector<std::byte> bytes;
    const size_t want = size_t(r.count) * *stored_bytes(r.dtype, K);
    while (bytes.size() < want) {
      const HostTensor& t = *present[at++];
      bytes.insert(bytes.end(), t.bytes.begin(), t.bytes.end());
    }
    if (bytes.size() + ops::qmatmul_padding > vk.info.max_storage_buffer_range)
      throw Error(ErrorCode::unsupported, name + ": " + std::to_string(bytes.size()) + " bytes of " +
                                              to_string(r.dtype) + " rows exceed the device's maxStorageBufferRange");
    bytes.resize(bytes.size() + ops::qmatmul_padding);
    const std::string label = runs_.size() == 1 ? name : name + " (" + to_string(r.dtype) + " rows " +
                                                              std::to_string(r.first) + "..)";
    r.rows = upload(vk, bytes, label);
  }
}

uint32_t Projection::splits(uint32_t M, uint32_t ldx) const {
  if (quantized()) return 1;
  return ops::matmul_splits(vk_->info, tuning_, M, rows_, K_, act_, ldx ? ldx : K_, ldw_);
}

bool Projection::int8() const {
  return tuning_.int8_activations &&
         std::any_of(runs_.begin(), runs_.end(), [&](const Run& r) { return ops::qmatmul_dot_takes(vk_->info, r.dtype, K_); });
}

bool Projection::dequantizes(uint32_t M) const {
  return quantized() && !int8() && ops::qmatmul_dequantizes(vk_->info, tuning_, act_, M);
}

bool Projection::norm_applies(uint32_t M) const {
  if (!quantized()) return ops::matmul_rmsnorm_applies(vk_->info, tuning_, M, K_, ldw_);
  return !int8() && !dequantizes(M) && std::all_of(runs_.begin(), runs_.end(), [&](const Run& r) {
    return ops::qmatmul_norm_applies(vk_->info, tuning_, r.dtype, M, K_);
  });
}

bool Projection::glu_applies(uint32_t M) const {
  return norm_applies(M) && rows_ % 2 == 0 && runs_.size() <= 1;
}

void Projection::reserve(Workspace& ws, uint32_t M) const {
  if (int8()) ws.need("q8_act", ops::q8_bytes(M, K_));
  if (dequantizes(M)) ws.need("dequant_w", size_t(rows_) * K_ * ops::element_bytes(act_));
}

void Projection::record(gpu::Recorder& rec, const ProjectArgs& a) const {
  if (a.norm) {
    if (a.glu ? !glu_applies(a.M) : !norm_applies(a.M))
      throw Error(ErrorCode::invalid_argument, name_ + ": a product of " + std::to_string(a.M) + " rows cannot apply the "
                                               "input norm" + (a.glu ? " and the GLU" : "") + " itself");
    const uint32_t N = a.glu ? rows_ / 2 : rows_, ldy = a.ldy ? a.ldy : N;
    if (!quantized()) {
      ops::matmul_rmsnorm(*vk_, rec, {.x = a.x, .norm_w = a.norm->w, .kind = a.norm->kind, .eps = a.norm->eps,
                                      .w = dense_, .y = a.y, .M = a.M, .N = N, .K = K_, .s = act_, .bias = a.bias,
                                      .ldw = ldw_, .glu = a.glu, .ldy = ldy});
      return;
    }
    for (const Run& r : runs_)
      ops::qmatmul(*vk_, rec, {.x = a.x, .w = r.rows, .wtype = r.dtype, .y = a.y, .M = a.M,
                               .N = a.glu ? N : r.count, .K = K_, .s = act_, .bias = a.bias, .ldy = ldy,
                               .col0 = r.first, .norm = a.norm, .glu = a.glu});
    return;
  }
  auto scratch = [&](const char* role) -> const Buffer& {
    if (!a.ws) throw Error(ErrorCode::invalid_argument, name_ + ": its product needs the plan's workspace");
    return (*a.ws)[role];
  };
  if (dequantizes(a.M)) {
    const Buffer& w = scratch("dequant_w");
    for (const Run& r : runs_)
      ops::dequantize_rows(*vk_, rec, {.table = r.rows, .format = r.dtype, .x = w, .rows = r.count, .dim = K_,
                                       .out0 = r.first, .s = act_});
    // No split-K: splits() told the caller none is taken.
    ops::matmul(*vk_, rec, {.x = a.x, .w = w, .y = a.y, .M = a.M, .N = rows_, .K = K_, .s = act_, .bias = a.bias,
                            .residual = a.residual, .y_f32 = a.y_f32, .ldx = a.ldx, .ldw = K_, .gate = a.gate});
    return;
  }
  const Buffer* q8 = int8() ? &scratch("q8_act") : nullptr;
  if (q8) ops::quantize_q8(*vk_, rec, {.x = a.x, .q = *q8, .M = a.M, .K = K_, .s = act_, .ldx = a.ldx});
  if (!quantized()) {
    ops::matmul(*vk_, rec, {.x = a.x, .w = dense_, .y = a.y, .M = a.M, .N = rows_, .K = K_, .s = act_, .bias = a.bias,
                            .residual = a.residual, .y_f32 = a.y_f32, .ldx = a.ldx, .ldw = ldw_, .partial = a.partial,
                            .gate = a.gate});
    return;
  }
  for (const Run& r : runs_) {
    const bool dot = tuning_.int8_activations && ops::qmatmul_dot_takes(vk_->info, r.dtype, K_);
    (dot ? ops::qmatmul_dot : ops::qmatmul)(
        *vk_, rec, {.x = dot ? *q8 : a.x, .w = r.rows, .wtype = r.dtype, .y = a.y, .M = a.M, .N = r.count, .K = K_,
                    .s = act_, .bias = a.bias, .residual = a.residual, .y_f32 = a.y_f32, .ldx = a.ldx, .ldy = rows_,
                    .col0 = r.first, .gate = a.gate});
  }
}

uint64_t Projection::bytes() const {
  uint64_t n = dense_.size();
  for (const Run& r : runs_) n += r.rows.size();
  return n;
}

}  // namespace vkgate::nn
