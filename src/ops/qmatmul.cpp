#include "ops/qmatmul.hpp"

#include "gpu/context_impl.hpp"
#include "gpu/pipeline.hpp"
#include "vkgate/quant.hpp"

namespace vkgate::ops {

namespace {
// Mirrors Push in shaders/qmatmul.comp.
struct Push {
  uint32_t M, N, K, ldx, row_bytes, ldy, ldr, has_bias, has_residual, col0;
  uint32_t gate_act = 0, gate_combine = 0, gate_at = 0, ldg = 0;
};
constexpr uint32_t kRows = 8;                // the ROWS kernel's most rows of X
constexpr uint32_t kTileM = 32, kTileN = 64;  // the tiled kernel's outputs per workgroup
}  // namespace

void qmatmul(Context::Impl& ctx, Recorder& rec, const QmatmulArgs& a) {
  const auto& [x, w, wtype, y, M, N, K, s, bias, residual, y_f32, ldx, ldy, col0, gate] = a;
  const std::optional<size_t> row_bytes = stored_bytes(wtype, K);
  if (K % 8 != 0 || !row_bytes || (is_quantized(wtype) == false && wtype != DType::F32 && wtype != DType::F16 &&
                                   wtype != DType::BF16))
    throw Error(ErrorCode::invalid_argument, "qmatmul: rows of " + std::to_string(K) + " elements of " +
                                                 to_string(wtype) + " are not a shape its kernel takes (whole blocks, 8-element chunks)");
  if (w.size() < uint64_t(N) * *row_bytes + qmatmul_padding)
    throw Error(ErrorCode::invalid_argument, "qmatmul: weight buffer '" + w.name() + "' holds " +
                                                 std::to_string(w.size()) + " bytes, " +
                                                 std::to_string(uint64_t(N) * *row_bytes + qmatmul_padding) + " needed");
  Push push{M, N, K, ldx ? ldx : K, uint32_t(*row_bytes), ldy ? ldy : N, ldy ? ldy : N,
            bias ? 1u : 0u, residual ? 1u : 0u, col0};
  if (gate) {
    push.gate_act = uint32_t(gate->activation) + 1;
    push.gate_combine = uint32_t(gate->combine);
    push.gate_at = gate->at;
    push.ldg = gate->ld;
  }
  const bool rows = M <= kRows && ctx.info.subgroup_arithmetic;
  const bool cpu = cpu_kernels(ctx.info);
  const std::string name = variant(rows ? (cpu ? "qmatmul_rows_cpu" : "qmatmul_rows") : (cpu ? "qmatmul_tiled_cpu" : "qmatmul_tiled"),
                                   s, y_f32 ? "_y32" : "");
  const gpu::Pipeline& p = ctx.pipelines->get(name, {256, ggml_type_of(wtype)});
  const VkFormat x_texel = p.texel_bindings & 1u ? texel_format(s) : VK_FORMAT_UNDEFINED;
  const VkFormat w_texel = p.texel_bindings & 2u ? VK_FORMAT_R32_UINT : VK_FORMAT_UNDEFINED;
  uint32_t gx, gy = 1;
  if (rows) {
    gx = (N + 256 / ctx.info.subgroup_size - 1) / (256 / ctx.info.subgroup_size);
  } else {
    gx = (N + kTileN - 1) / kTileN;
    gy = (M + kTileM - 1) / kTileM;
  }
  rec.dispatch(p,
               {{&x, gpu::Access::read, x_texel},
                {&w, gpu::Access::read, w_texel},
                {bias ? bias : &x, gpu::Access::read},
                {residual ? residual : &x, gpu::Access::read},
                {&y, gpu::Access::write},
                {gate ? &gate->scores : &x, gpu::Access::read}},
               push, gx, gy, 1, "qmatmul");
}

}  // namespace vkgate::ops
