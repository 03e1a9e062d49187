// Internal: products with weights in ggml's block formats (shaders/qmatmul.comp).
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "ops/ops.hpp"
#include "vkgate/dtype.hpp"

namespace vkgate::ops {

// Columns col0..col0+N−1 of y[M, ldy] = x[M,K]·w[N,K]ᵀ (+ bias) (gated) (+
// residual), w's rows stored as `wtype` (a block format, or F32/F16/BF16:
// the parts of a fused projection that are not quantized), each row
// stored_bytes(wtype, K) bytes, the buffer padded by qmatmul_padding bytes.
// bias, residual (fp32, rows ldy apart) and the gate's scores are indexed by
// the full column col0 + n. x is stored as `s` (rows ldx apart), y as `s` or
// fp32 when y_f32. K must be a multiple of 8 and of the format's block.
struct QmatmulArgs {
  const Buffer& x;
  const Buffer& w;
  DType wtype;
  const Buffer& y;
  uint32_t M, N, K;
  Storage s = Storage::f32;
  const Buffer* bias = nullptr;
  const Buffer* residual = nullptr;
  bool y_f32 = false;
  uint32_t ldx = 0, ldy = 0, col0 = 0;
  const EpilogueGate* gate = nullptr;
  // The input RMSNorm folded in (where qmatmul_norm_applies): x is the fp32
  // residual stream [M, K] (dense), no residual or gate. With `glu` too, w
  // holds 2N rows (the gate's N, then the up's; bias their 2N values) and
  // y[m, n] = act(gate)·up (the MLP's decode pass, as ops::matmul_rmsnorm's).
  const RowNorm* norm = nullptr;
  std::optional<Activation> glu;
};
void qmatmul(Context::Impl& ctx, Recorder& rec, const QmatmulArgs& a);
// Whether M rows of W in `wtype` take QmatmulArgs::norm: the GPU decode kernel
// over slices (≤ 8 rows, a block format, the slices tile) with
// Tuning::pass_fusion.
bool qmatmul_norm_applies(const DeviceInfo& d, const gpu::Tuning& t, DType wtype, uint32_t M, uint32_t K);
// The GPU decode kernels `vkgate bench --op qmatmul --tiles all` times (and
// the tests run): the first kernel's chunks, and SLICE_ROWS at 1, 2 or 4
// columns per subgroup with 1 or 2 slices per lane in flight.
std::vector<gpu::QrowsTile> qrows_tile_candidates();
// The GPU decode kernel over slices (qrows_gpu.glsl, in qmatmul.comp and
// moe_matmul.comp), where `tile` takes it for `wtype` (a block format, X's rows
// 8-element aligned): the smallest subgroup the device runs (a spec constant)
// and the columns a workgroup of 256 invocations covers, which its grid
// follows. nullopt: the 8-element-chunk kernel instead.
struct SliceRows {
  uint32_t min_subgroup, columns;
};
std::optional<SliceRows> slice_rows(const DeviceInfo& d, const gpu::QrowsTile& tile, DType wtype, uint32_t ldx);
// Whether a block-format product of M rows of `act` activations is better
// run as its weights dequantized to fp16 (dequantize_rows) and the fp16
// matmul: prefill (more than 8 rows) where that matmul has tensor cores, or
// their emulation is forced (tests).
bool qmatmul_dequantizes(const DeviceInfo& d, const gpu::Tuning& t, Storage act, uint32_t M);
// Whether qmatmul takes rows of K elements of `wtype`: a block format or
// F32/F16/BF16, whole blocks and 8-element chunks.
bool qmatmul_takes(DType wtype, uint32_t K);
// The view of W that the CPU drivers' decode kernels read (qrows_cpu.glsl):
// block formats 16 bytes per fetch, F32/F16/BF16 4.
inline VkFormat qrows_cpu_view(DType w) { return is_quantized(w) ? VK_FORMAT_R32G32B32A32_UINT : VK_FORMAT_R32_UINT; }
// Bytes the kernels may read past a weight's last row: the CPU decode reads
// the 16-byte units around a 2-byte-aligned field of up to 36 bytes.
constexpr size_t qmatmul_padding = 48;

}  // namespace vkgate::ops
