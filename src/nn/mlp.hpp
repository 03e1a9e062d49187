// Internal: a decoder layer's MLP behind one interface (FeedForward), so a
// model holds dense and sparse layers alike: the dense module
//
//   y = x + down( act(gate(x̂)) ⊙ up(x̂) ),   x̂ = post_attention_layernorm(x) (a GLA model's mlp_norm)
//
// with gate and up as one projection [gate ; up] (one product, whose output
// the activation·product pass reads), the RMSNorm folded into that projection
// where it pays (decode steps on GPUs), and the residual added by the down
// projection. Records into a recorder it is given; the caller owns x, y and
// the workspace.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "gpu/recorder.hpp"
#include "gpu/tuning.hpp"
#include "nn/mixer.hpp"
#include "nn/projection.hpp"
#include "nn/storage.hpp"
#include "nn/workspace.hpp"
#include "vkgate/model_config.hpp"
#include "vkgate/weights.hpp"

namespace vkgate::nn {

class FeedForward {
 public:
  virtual ~FeedForward() = default;
  // The scratch a step of `rows` rows needs.
  virtual void reserve(uint32_t rows, Workspace& ws) const = 0;
  // y (fp32 [rows, D]) = x (fp32 [rows, D]) + mlp(norm(x)); its statistics
  // (stats_floats) into `stats` when that names a buffer.
  virtual void record(gpu::Recorder& rec, const Workspace& ws, uint32_t rows, const gpu::Buffer& x,
                      const gpu::Buffer& y, StatsSlot stats, bool poison) const = 0;
  virtual uint32_t stats_floats() const { return 0; }
  // The most rows one step may hold (0: not even one).
  virtual uint32_t max_step_rows() const { return UINT32_MAX; }
  virtual uint64_t weight_bytes() const = 0;
  // The weight bytes one token's step reads (a sparse MoE: its routed experts
  // at top-k of E, their average share).
  virtual uint64_t token_read_bytes() const { return weight_bytes(); }
};

// Layer `layer`'s MLP (ModelConfig::sparse_mlp: the mixture of experts, nn/moe.hpp),
// its tensors under full names in `weights`, checked by the caller.
std::unique_ptr<FeedForward> make_feed_forward(Context::Impl& vk, const gpu::Tuning& tuning, const ModelConfig& cfg,
                                               const TensorMap& weights, int layer, Storage act);

class Mlp : public FeedForward {
 public:
  // Uploads layer `layer`'s MLP norm (ModelConfig::mlp_norm_name) and mlp tensors from
  // `weights` (full names, checked by the caller): float projections in
  // `act`, block formats as stored (nn/projection.hpp), the norm and biases in fp32.
  Mlp(Context::Impl& vk, const gpu::Tuning& tuning, const ModelConfig& cfg, const TensorMap& weights, int layer,
      Storage act);

  // The scratch `rows` rows need (roles "normed", "mlp_proj", "mlp_hidden", "split_k").
  void reserve(uint32_t rows, Workspace& ws) const override;
  void record(gpu::Recorder& rec, const Workspace& ws, uint32_t rows, const gpu::Buffer& x, const gpu::Buffer& y,
              StatsSlot stats, bool poison) const override;
  uint64_t weight_bytes() const override;

 private:
  bool norm_in_projection(uint32_t rows) const;

  Context::Impl& vk_;
  const gpu::Tuning tuning_;
  uint32_t hidden_, inter_;
  NormKind norm_kind_;
  float eps_;
  Activation act_fn_;
  Storage act_;
  uint32_t ld_hidden_ = 0, ld_inter_ = 0;  // operand row strides (ops::operand_stride)
  Buffer norm_w_, b_gate_up_, b_down_;
  Projection w_gate_up_, w_down_;
};

}  // namespace vkgate::nn
