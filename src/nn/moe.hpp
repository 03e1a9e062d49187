// Internal: the sparse mixture-of-experts MLP of a decoder layer (MoeConfig),
//
//   x̂ = post_attention_layernorm(x);  logits = x̂·[W_router ; shared_expert_gate]ᵀ  (all fp32)
//   route: top k per token, weights, rows grouped per expert      (ops::moe_route)
//   h = SwiGLU_e over each expert's rows; only chosen experts read (ops::moe_matmul, glu)
//   y = x + Σ_slots weight·h (+ σ(gate logit)·SwiGLU_shared(x̂))     (ops::moe_combine)
//
// all inside the command buffer: the routing never returns to the host. The
// experts' weights sit in shards of whole experts, each within the device's
// maxStorageBufferRange; a grouped GEMM runs once per shard, with the
// workgroups the routing pass counted for that shard's tiles.
//
// Experts in ggml's block formats (a GGUF, ModelOptions::quant) stay in them
// on the device: each GEMM whose tensors (gate and up, or down) are in a block
// format keeps their bytes as stored, experts back to back, and its kernel
// dequantizes them (ops::MoeBlocks); a [gate ; up] whose halves differ in
// format runs one dispatch per half. A layer whose experts do not share one
// dtype per projection (gate, up, down), or whose block rows are not whole
// blocks, is dequantized at upload into the activation storage, as float
// experts are stored.
#pragma once

#include <cstdint>
#include <vector>

#include "nn/mlp.hpp"
#include "nn/projection.hpp"
#include "ops/moe.hpp"

namespace vkgate::nn {

class Moe : public FeedForward {
 public:
  Moe(Context::Impl& vk, const gpu::Tuning& tuning, const ModelConfig& cfg, const TensorMap& weights, int layer,
      Storage act);

  // Roles "normed", "moe_normed_f32" (below fp32 storage), "moe_logits",
  // "moe_route", "moe_tiles", "moe_dispatch", "moe_proj", "moe_hidden",
  // "moe_out", and with a shared expert "moe_shared_proj", "moe_shared_hidden",
  // "moe_shared_out", "split_k".
  void reserve(uint32_t rows, Workspace& ws) const override;
  void record(gpu::Recorder& rec, const Workspace& ws, uint32_t rows, const gpu::Buffer& x, const gpu::Buffer& y,
              StatsSlot stats, bool poison) const override;
  // expert_load: the share of the step's tokens routed to each expert [E].
  uint32_t stats_floats() const override { return experts_; }
  uint32_t max_step_rows() const override;
  uint64_t weight_bytes() const override;
  uint64_t token_read_bytes() const override;

 private:
  struct Shard {
    uint32_t first, end;  // experts [first, end)
    // [n, 2·Im, D] and [n, D, Im]: in the activation storage, or each expert's
    // bytes as Layout says (padded by ops::qmatmul_padding)
    Buffer gate_up, down;
  };
  // How a grouped GEMM's weights are stored per expert: float (no parts: N·K
  // elements of the activation storage), or parts of stacked rows kept in
  // their dtype, each at its byte offset (4-byte aligned).
  struct Part {
    DType dtype;
    uint32_t rows, first_row, at;
  };
  struct Layout {
    std::vector<Part> parts;
    uint64_t expert_bytes = 0;
    bool blocks() const { return !parts.empty(); }
  };
  ops::MoeRouting routing(uint32_t rows) const;
  // Decode steps on GPUs: the input norm folded into the router's product
  // (matvec.comp NORM_X), and with the GLU into the shared expert's gate/up.
  bool router_norm_folded(uint32_t rows) const;
  bool shared_glu_folded(uint32_t rows) const;
  uint64_t dense_bytes() const;   // the norm, router and shared expert
  uint64_t expert_bytes() const;  // the routed experts

  Context::Impl& vk_;
  const gpu::Tuning tuning_;
  uint32_t hidden_, experts_, k_, inter_, shared_inter_;
  bool norm_topk_;
  NormKind norm_kind_;
  float eps_;
  Activation act_fn_;
  Storage act_;
  uint32_t ld_hidden_ = 0, ld_shared_ = 0;  // operand row strides of x̂ and the shared expert's hidden
  uint32_t ld_router_ = 0;                  // of the router's fp32 operands
  Buffer norm_w_, router_;  // router_: fp32 [E (+ 1), D], the shared expert's gate its last row
  Layout gate_up_layout_, down_layout_;
  std::vector<Shard> shards_;
  Projection shared_gate_up_, shared_down_;
};

}  // namespace vkgate::nn
