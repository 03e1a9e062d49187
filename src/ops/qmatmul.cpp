#include "ops/qmatmul.hpp"

#include <algorithm>

#include "gpu/context_impl.hpp"
#include "gpu/pipeline.hpp"
#include "vkgate/quant.hpp"

namespace vkgate::ops {

namespace {
// Mirrors Push in shaders/qmatmul.comp.
struct QmatmulPush {
  uint32_t M, N, K, ldx, row_bytes, ldy, ldr, has_bias, has_residual, col0;
  uint32_t gate_act = 0, gate_combine = 0, gate_at = 0, ldg = 0;
  uint32_t zero_centered = 0;
  float eps = 0;
  uint32_t act = 0;
};
constexpr uint32_t kRows = 8;                // the ROWS kernel's most rows of X
constexpr uint32_t kTileM = 32, kTileN = 64;  // the tiled kernel's outputs per workgroup
// The CPU kernels: columns per decode subgroup; the register tile's rows and
// columns per lane, dequantizing 8 elements at a time (the float formats) or
// a block format's 32-element slices (decode's 8 rows, more). Timed on
// lavapipe, 2 cores, the 0.6B shape's Q4_K products (ms per step, BENCHMARKS
// 2026-11-27): 16 × 8 beat 32 × 8 by 2.7× at 15 rows; slices 8 × 8 took 128
// ms at 8 rows where the decode kernel took 245, 16 × 4 849 ms at 64 rows
// where the 8-element tile took 1,420; the decode kernel stays ahead below 4 rows.
constexpr uint32_t kCpuColumns = 8, kCpuSlicesFrom = 4;
struct CpuTile {
  uint32_t rm, rn;
};
constexpr CpuTile kCpuTile{16, 8}, kCpuSlicesDecode{8, 8}, kCpuSlices{16, 4};
}  // namespace

std::vector<gpu::QrowsTile> qrows_tile_candidates() {
  return {{false, 1, 1}, {true, 1, 1}, {true, 1, 2}, {true, 2, 1}, {true, 2, 2}, {true, 4, 1}};
}

std::optional<SliceRows> slice_rows(const DeviceInfo& d, const gpu::QrowsTile& tile, DType wtype, uint32_t ldx) {
  if (!tile.slices || !is_quantized(wtype) || ldx % 8 != 0) return std::nullopt;
  const uint32_t min_sg = std::max(1u, d.min_subgroup_size);
  return SliceRows{min_sg, tile.columns * (256 / min_sg)};
}

bool qmatmul_dequantizes(const DeviceInfo& d, const gpu::Tuning& t, Storage act, uint32_t M) {
  if (act != Storage::f16 || M <= kRows) return false;
  return d.coopmat_f16 || d.coopmat_f16_khr || coopmat_usable(d, t.coopmat_staged) == gpu::Coopmat::emulated;
}

bool qmatmul_norm_applies(const DeviceInfo& d, const gpu::Tuning& t, DType wtype, uint32_t M, uint32_t K) {
  return !cpu_gemm(d, t) && M <= kRows && d.subgroup_arithmetic && t.pass_fusion &&
         slice_rows(d, t.qrows_tile, wtype, K).has_value();
}

bool qmatmul_takes(DType wtype, uint32_t K) {
  const bool readable = is_quantized(wtype) || wtype == DType::F32 || wtype == DType::F16 || wtype == DType::BF16;
  return readable && K % 8 == 0 && stored_bytes(wtype, K).has_value();
}

void qmatmul(Context::Impl& ctx, Recorder& rec, const QmatmulArgs& a) {
  const auto& [x, w, wtype, y, M, N, K, s, bias, residual, y_f32, ldx, ldy, col0, gate, norm, glu] = a;
  const std::optional<size_t> row_bytes = stored_bytes(wtype, K);
  if (!qmatmul_takes(wtype, K))
    throw Error(ErrorCode::invalid_argument, "qmatmul: rows of " + std::to_string(K) + " elements of " +
                                                 to_string(wtype) + " are not a shape its kernel takes (whole blocks, 8-element chunks)");
  const uint64_t w_rows = uint64_t(N) * (norm && glu ? 2 : 1);
  if (w.size() < w_rows * *row_bytes + qmatmul_padding)
    throw Error(ErrorCode::invalid_argument, "qmatmul: weight buffer '" + w.name() + "' holds " +
                                                 std::to_string(w.size()) + " bytes, " +
                                                 std::to_string(w_rows * *row_bytes + qmatmul_padding) + " needed");
  if (glu && !norm) throw Error(ErrorCode::invalid_argument, "qmatmul: the GLU form takes the input norm too");
  if (norm && (!qmatmul_norm_applies(ctx.info, rec.tuning(), wtype, M, K) || residual || gate || y_f32 ||
               (ldx && ldx != K) || (glu && col0)))
    throw Error(ErrorCode::invalid_argument, "qmatmul: " + std::to_string(M) + " rows of " + to_string(wtype) +
                                                 " with the input norm folded in is not a product its kernel takes");
  QmatmulPush push{M, N, K, ldx ? ldx : K, uint32_t(*row_bytes), ldy ? ldy : N, ldy ? ldy : N,
            bias ? 1u : 0u, residual ? 1u : 0u, col0};
  set_gate(push, gate);
  if (norm) {
    push.zero_centered = norm->kind == NormKind::zero_centered ? 1u : 0u;
    push.eps = norm->eps;
    push.act = glu ? uint32_t(*glu) : 0u;
  }
  const uint32_t fmt = ggml_type_of(wtype);
  const char* y32 = y_f32 ? "_y32" : "";
  auto bind = [&](const gpu::Pipeline& p, VkFormat x_texel, uint32_t gx, uint32_t gy,
                  VkFormat w_texel = VK_FORMAT_R32_UINT) {
    rec.dispatch(p,
                 {{&x, gpu::Access::read, p.texel_bindings & 1u ? x_texel : VK_FORMAT_UNDEFINED},
                  {&w, gpu::Access::read, p.texel_bindings & 2u ? w_texel : VK_FORMAT_UNDEFINED},
                  {bias ? bias : &x, gpu::Access::read},
                  {norm ? &norm->w : residual ? residual : &x, gpu::Access::read},
                  {&y, gpu::Access::write},
                  {gate ? &gate->scores : &x, gpu::Access::read}},
                 push, gx, gy, 1, norm ? (glu ? "rmsnorm+qmatmul+glu" : "rmsnorm+qmatmul") : "qmatmul");
  };
  // CPU drivers: one-subgroup workgroups reading X as RGBA texels (f32 or f16 activations).
  if (cpu_gemm(ctx.info, rec.tuning()) && s != Storage::bf16 && push.ldx % 4 == 0) {
    const VkFormat x4 = texel4_format(s);
    // Block formats from 4 rows: the register tile over slices (its 8 or 16 rows cost the
    // same however many are real, so fewer take the decode kernel).
    const bool slices = is_quantized(wtype) && M >= kCpuSlicesFrom;
    if (M <= kRows && !slices) {
      const gpu::Grid g = gpu::grid_for((N + kCpuColumns - 1) / kCpuColumns);
      bind(ctx.pipelines->get(variant("qmatmul_rows_cpu", s, y32), {8, fmt, M, kCpuColumns}), x4, g.x, g.y,
           qrows_cpu_view(wtype));
    } else {
      const CpuTile t = slices && M <= kRows ? kCpuSlicesDecode : slices ? kCpuSlices : kCpuTile;
      bind(ctx.pipelines->get(variant(slices ? "qmatmul_cpu_slices" : "qmatmul_cpu", s, y32), {8, fmt, t.rm, t.rn}),
           x4, (N + 8 * t.rn - 1) / (8 * t.rn), std::min<uint32_t>((M + t.rm - 1) / t.rm, 65535),
           slices ? qrows_cpu_view(wtype) : VK_FORMAT_R32_UINT);
    }
    return;
  }
  const gpu::QrowsTile& tile = rec.tuning().qrows_tile;
  const std::optional<SliceRows> sr = slice_rows(ctx.info, tile, wtype, push.ldx);
  if (norm) {
    // s is y's storage here (x is fp32); the GLU form's subgroups take one column each, not tile.columns.
    const uint32_t per_group = glu ? 256 / sr->min_subgroup : sr->columns;
    bind(ctx.pipelines->get(variant(glu ? "qmatmul_slices_norm_glu" : "qmatmul_slices_norm", s),
                            {256, fmt, tile.columns, tile.unroll, sr->min_subgroup}),
         VK_FORMAT_UNDEFINED, (N + per_group - 1) / per_group, 1);
  } else if (M <= kRows && ctx.info.subgroup_arithmetic && sr) {
    bind(ctx.pipelines->get(variant("qmatmul_slices", s, y32), {256, fmt, tile.columns, tile.unroll, sr->min_subgroup}),
         VK_FORMAT_UNDEFINED, (N + sr->columns - 1) / sr->columns, 1);
  } else if (M <= kRows && ctx.info.subgroup_arithmetic) {
    const uint32_t per_group = 256 / ctx.info.subgroup_size;
    bind(ctx.pipelines->get(variant("qmatmul_rows", s, y32), {256, fmt}), texel_format(s),
         (N + per_group - 1) / per_group, 1);
  } else {
    bind(ctx.pipelines->get(variant("qmatmul_tiled", s, y32), {256, fmt}), texel_format(s),
         (N + kTileN - 1) / kTileN, (M + kTileM - 1) / kTileM);
  }
}

}  // namespace vkgate::ops
