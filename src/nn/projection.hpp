// Internal: a linear layer's weight on the device, W [N, K], the rows of one
// or several tensors stacked (a fused projection: [q ; k ; v], [gate ; up]).
//
// All parts in float formats: one buffer in the activation storage, rows
// operand_stride apart, run by ops::matmul (every kernel: tensor cores,
// split-K, the decode norm fusion). Any part in a block format (a GGUF
// tensor, or ModelOptions::quant): the parts keep the bytes they are stored
// in, each run of parts of one format one buffer, run by ops::qmatmul one
// dispatch per run into its columns.
//
// int8 activations (Tuning::int8_activations, ModelOptions::int8_activations)
// on a device with integer dot products: the runs in Q8_0 or Q4_0 take X
// quantized once per product to int8 blocks (ops::quantize_q8, into the
// workspace role "q8_act" that reserve() asks for) and multiply it with
// ops::qmatmul_dot; the other runs, and every product elsewhere, are as above.
//
// Prefill on tensor cores (dequantizes(M): more than 8 rows of fp16
// activations on a device whose fp16 matmul has tensor cores, or their
// emulation forced): the runs' rows are dequantized into the workspace role
// "dequant_w" (fp16 [N, K]) and multiplied by one ops::matmul, as a float
// weight would be; the block kernels' scalar products are several times
// slower there (BENCHMARKS.md, 2026-11-27).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "gpu/recorder.hpp"
#include "gpu/tuning.hpp"
#include "nn/storage.hpp"
#include "nn/workspace.hpp"
#include "ops/ops.hpp"
#include "vkgate/dtype.hpp"
#include "vkgate/weights.hpp"

namespace vkgate::nn {

struct ProjectArgs {
  const Buffer& x;  // [M, K] rows ldx apart, stored as the activations
  const Buffer& y;  // [M, N] (rows N apart), stored as the activations or fp32 with y_f32
  uint32_t M;
  const Buffer* bias = nullptr;
  const Buffer* residual = nullptr;
  bool y_f32 = false;
  uint32_t ldx = 0;
  const Buffer* partial = nullptr;  // split-K scratch (dense only: splits())
  const ops::EpilogueGate* gate = nullptr;
  // The plan's workspace: int8() and dequantizes() take their scratch ("q8_act",
  // "dequant_w") from it, as reserve() asked.
  const Workspace* ws = nullptr;
  // The input RMSNorm folded into the product (where norm_applies(M)): x is
  // the fp32 residual stream [M, K], dense; no residual, gate or split-K.
  // With `glu` too (where glu_applies(M)): the weight's rows are the gate's
  // then the up's, and y[m, n] = act(gate)·up for n < rows()/2, rows ldy apart (0: rows()/2).
  const ops::RowNorm* norm = nullptr;
  std::optional<Activation> glu;
  uint32_t ldy = 0;
};

class Projection {
 public:
  Projection() = default;
  // `parts` (null entries skipped) stacked by rows, each [rows_i, K]; checked by the caller.
  Projection(Context::Impl& vk, const gpu::Tuning& tuning, const std::vector<const HostTensor*>& parts, uint32_t K,
             Storage act, const std::string& name);
  // A float weight from `dense` (rows · K elements of `act`, rows K apart), for
  // callers that rearrange rows first.
  static Projection from_dense(Context::Impl& vk, const gpu::Tuning& tuning, std::vector<std::byte> dense,
                               uint32_t rows, uint32_t K, Storage act, const std::string& name);

  bool quantized() const { return !runs_.empty(); }
  uint32_t rows() const { return rows_; }
  // The dense buffer and its row stride (quantized: an empty buffer and K).
  const Buffer& dense() const { return dense_; }
  uint32_t ldw() const { return ldw_; }
  // The K splits ops::matmul takes for M rows given split-K scratch (1 for block formats).
  uint32_t splits(uint32_t M, uint32_t ldx) const;
  // Whether its product quantizes X to int8 (some run takes ops::qmatmul_dot).
  bool int8() const;
  // Whether a product of M rows runs on the weight dequantized to fp16.
  bool dequantizes(uint32_t M) const;
  // Whether a product of M rows can apply the input RMSNorm itself
  // (ProjectArgs::norm: matvec.comp's or qmatmul.comp's NORM_X), and the GLU
  // too (ProjectArgs::glu: a float weight, or block rows in one format).
  bool norm_applies(uint32_t M) const;
  bool glu_applies(uint32_t M) const;
  // Asks `ws` for the scratch a product of M rows needs beyond split-K:
  // int8(): role "q8_act", X's quantized blocks; dequantizes(M): "dequant_w".
  void reserve(Workspace& ws, uint32_t M) const;
  void record(gpu::Recorder& rec, const ProjectArgs& a) const;
  uint64_t bytes() const;

 private:
  struct Run {
    DType dtype;
    uint32_t first, count;  // rows
    Buffer rows;
  };
  Context::Impl* vk_ = nullptr;
  gpu::Tuning tuning_;
  Storage act_ = Storage::f32;
  uint32_t rows_ = 0, K_ = 0, ldw_ = 0;
  std::string name_;
  Buffer dense_;
  std::vector<Run> runs_;
};

}  // namespace vkgate::nn
