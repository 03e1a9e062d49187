#include "ops/qmatmul_dot.hpp"

#include <algorithm>

#include "gpu/context_impl.hpp"
#include "gpu/pipeline.hpp"
#include "vkgate/quant.hpp"

namespace vkgate::ops {

namespace {
// Mirrors Push in shaders/qmatmul_dot.comp.
struct QmatmulDotPush {
  uint32_t M, N, K, row_bytes, d_at, ldy, ldr, has_bias, has_residual, col0;
  uint32_t gate_act = 0, gate_combine = 0, gate_at = 0, ldg = 0;
};
constexpr uint32_t kDotRows = 8;                 // the ROWS kernels' most rows of X
constexpr uint32_t kDotTileM = 32, kDotTileN = 64;  // the tiled kernel's outputs per workgroup
// The CPU kernels: columns per decode subgroup, and per lane of the register tile.
constexpr uint32_t kDotCpuColumns = 8, kDotCpuRN = 8;
}  // namespace

bool qmatmul_dot_takes(const DeviceInfo& d, DType wtype, uint32_t K) {
  return d.integer_dot_product && (wtype == DType::Q8_0 || wtype == DType::Q4_0) && K > 0 && K % 32 == 0;
}

void qmatmul_dot(Context::Impl& ctx, Recorder& rec, const QmatmulArgs& a) {
  const auto& [x, w, wtype, y, M, N, K, s, bias, residual, y_f32, ldx, ldy, col0, gate, norm, glu] = a;
  if (norm || glu) throw Error(ErrorCode::invalid_argument, "qmatmul_dot: no input norm or GLU in the int8 product");
  (void)ldx;
  if (!qmatmul_dot_takes(ctx.info, wtype, K))
    throw Error(ErrorCode::unsupported, "qmatmul_dot: rows of " + std::to_string(K) + " elements of " +
                                            to_string(wtype) + " on " + ctx.info.name +
                                            (ctx.info.integer_dot_product ? "" : " (no shaderIntegerDotProduct)") +
                                            ": the int8 product takes Q8_0 and Q4_0 rows of whole blocks");
  const size_t row_bytes = *stored_bytes(wtype, K);
  if (w.size() < uint64_t(N) * row_bytes + qmatmul_padding)
    throw Error(ErrorCode::invalid_argument, "qmatmul_dot: weight buffer '" + w.name() + "' holds " +
                                                 std::to_string(w.size()) + " bytes, " +
                                                 std::to_string(uint64_t(N) * row_bytes + qmatmul_padding) + " needed");
  if (x.size() < q8_bytes(M, K))
    throw Error(ErrorCode::invalid_argument, "qmatmul_dot: quantized activations '" + x.name() + "' hold " +
                                                 std::to_string(x.size()) + " bytes, " +
                                                 std::to_string(q8_bytes(M, K)) + " needed for " +
                                                 std::to_string(M) + " rows of " + std::to_string(K));
  QmatmulDotPush push{M, N, K, uint32_t(row_bytes), q8_scales_at(M, K), ldy ? ldy : N, ldy ? ldy : N,
            bias ? 1u : 0u, residual ? 1u : 0u, col0};
  set_gate(push, gate);
  const uint32_t fmt = ggml_type_of(wtype);
  const char* y32 = y_f32 ? "_y32" : "";
  auto bind = [&](const gpu::Pipeline& p, uint32_t gx, uint32_t gy) {
    const bool texel = p.texel_bindings != 0;
    rec.dispatch(p,
                 {{&x, gpu::Access::read, texel ? VK_FORMAT_R32G32B32A32_UINT : VK_FORMAT_UNDEFINED},
                  {&w, gpu::Access::read, texel ? VK_FORMAT_R32G32B32A32_UINT : VK_FORMAT_UNDEFINED},
                  {bias ? bias : &x, gpu::Access::read},
                  {residual ? residual : &x, gpu::Access::read},
                  {&y, gpu::Access::write},
                  {gate ? &gate->scores : &x, gpu::Access::read}},
                 push, gx, gy, 1, "qmatmul_dot");
  };
  // CPU drivers: one-subgroup workgroups reading X's and W's quads as RGBA32UI texels.
  if (cpu_gemm(ctx.info, rec.tuning())) {
    if (M <= kDotRows) {
      const gpu::Grid g = gpu::grid_for((N + kDotCpuColumns - 1) / kDotCpuColumns);
      bind(ctx.pipelines->get(variant("qmatmul_dot_rows_cpu", s, y32), {8, fmt, M, kDotCpuColumns}), g.x, g.y);
    } else {
      const uint32_t rm = M > 16 ? 32 : 16;
      bind(ctx.pipelines->get(variant("qmatmul_dot_cpu", s, y32), {8, fmt, rm, kDotCpuRN}),
           (N + 8 * kDotCpuRN - 1) / (8 * kDotCpuRN), std::min<uint32_t>((M + rm - 1) / rm, 65535));
    }
    return;
  }
  if (M <= kDotRows && ctx.info.subgroup_arithmetic) {
    const uint32_t per_group = 256 / ctx.info.subgroup_size;
    bind(ctx.pipelines->get(variant("qmatmul_dot_rows", s, y32), {256, fmt}), (N + per_group - 1) / per_group, 1);
  } else {
    bind(ctx.pipelines->get(variant("qmatmul_dot_tiled", s, y32), {256, fmt}), (N + kDotTileN - 1) / kDotTileN,
         (M + kDotTileM - 1) / kDotTileM);
  }
}

}  // namespace vkgate::ops
