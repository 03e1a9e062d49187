#include <algorithm>

#include "gpu/context_impl.hpp"
#include "gpu/pipeline.hpp"
#include "ops/ops.hpp"

namespace vkgate::ops {

namespace {
// The register tile of matmul.comp's REGISTER_TILED variant (CPU_RM, CPU_RN).
constexpr uint32_t kCpuRN = 8;

// matvec.comp reads the last two fields too (NORM_X); the other shaders only
// the first nine.
struct Push {
  uint32_t M, N, K, ldx, ldw, ldy, ldr, has_bias, has_residual;
  uint32_t zero_centered = 0;
  float eps = 0;
};

// The subgroup matrix-vector kernel (GPUs, ≤ 8 rows), and its 8-wide loads.
bool matvec_applies(const DeviceInfo& d, uint32_t M) {
  return !cpu_gemm(d) && M <= 8 && d.subgroup_arithmetic && !gpu::env_flag("VKGATE_DISABLE_MATVEC");
}
bool vec8_rows(const Push& p) { return p.K % 8 == 0 && p.ldx % 8 == 0 && p.ldw % 8 == 0; }
gpu::Grid matvec_grid(const DeviceInfo& d, uint32_t N) {
  const uint32_t per_group = 256 / std::max(1u, d.subgroup_size);
  return {(N + per_group - 1) / per_group, 1};
}

// 64×64 tiles with 4×4 register tiles (256 threads) where the device allows,
// else 32×32 with 2×2... kept to shapes every Vulkan device must support.
std::vector<uint32_t> tiles(const DeviceInfo& d) {
  const uint32_t BK = 16;
  if (d.max_workgroup_invocations >= 256 && d.shared_memory_bytes >= 2 * BK * 64 * 4)
    return {256, 64, 64, BK, 4, 4};
  return {128, 32, 64, BK, 2, 8};
}
}  // namespace

bool cpu_gemm(const DeviceInfo& d) {
  return cpu_kernels(d) && d.subgroup_shuffle && !gpu::env_flag("VKGATE_DISABLE_CPU_MATMUL");
}

// One 8-lane subgroup per RM×(8·RN) tile; the taller tile (fewer loads per
// FMA) where M fills it, but not taller than 64: llvmpipe (Mesa 22.3)
// computes wrong results from 80 rows up.
std::vector<uint32_t> cpu_gemm_spec(uint32_t M) { return {8, M > 32 ? 64u : M > 8 ? 32u : 8u, kCpuRN}; }

gpu::Grid cpu_gemm_grid(uint32_t M, uint32_t N) {
  const uint32_t rm = cpu_gemm_spec(M)[1];
  // The shaders step through row blocks past the grid's 65535.
  return {(N + 8 * kCpuRN - 1) / (8 * kCpuRN), std::min<uint32_t>((M + rm - 1) / rm, 65535)};
}

uint32_t operand_stride(const DeviceInfo& d, uint32_t K, Storage s) {
  const uint32_t e = element_bytes(s);
  return cpu_gemm(d) && (K * e) % 128 == 0 ? K + 64 / e : K;
}

std::vector<std::byte> strided_rows(std::vector<std::byte> dense, size_t rows, size_t row_bytes,
                                    size_t stride_bytes) {
  if (stride_bytes == row_bytes) return dense;
  std::vector<std::byte> out(rows * stride_bytes);
  for (size_t r = 0; r < rows; ++r)
    std::copy_n(dense.begin() + long(r * row_bytes), row_bytes, out.begin() + long(r * stride_bytes));
  return out;
}

void matmul(Context::Impl& ctx, Recorder& rec, const Buffer& x, const Buffer& w, const Buffer* bias,
            const Buffer* residual, const Buffer& y, uint32_t M, uint32_t N, uint32_t K, Storage s, bool y_f32,
            uint32_t ldx, uint32_t ldw) {
  const Push push{M, N, K, ldx ? ldx : K, ldw ? ldw : K, N, N, bias ? 1u : 0u, residual ? 1u : 0u};
  // Every variant has the same interface; absent operands are bound to a
  // buffer the shader never reads, to keep one pipeline per variant.
  // `texel`: the format of X's and W's texel views, for variants that read them so.
  auto dispatch = [&](const gpu::Pipeline& p, uint32_t gx, uint32_t gy, const char* label,
                      VkFormat texel = VK_FORMAT_UNDEFINED) {
    if (p.texel_bindings && texel == VK_FORMAT_UNDEFINED) texel = texel_format(s);
    rec.dispatch(p,
                 {{&x, gpu::Access::read, texel},
                  {&w, gpu::Access::read, texel},
                  {bias ? bias : &w, gpu::Access::read},
                  {residual ? residual : &x, gpu::Access::read},
                  {&y, gpu::Access::write}},
                 &push, gx, gy, 1, label);
  };
  // CPU drivers, up to 8 rows (decode): the lanes split K (ROWS_CPU in matmul.comp).
  // lavapipe, 9216×2048 f32: 4× the 8-row tiles below at 1 row, 1.4× at 8.
  const bool vec4_rows = K % 4 == 0 && push.ldx % 4 == 0 && push.ldw % 4 == 0;
  if (cpu_gemm(ctx.info) && M <= 8 && s != Storage::bf16 && vec4_rows && !gpu::env_flag("VKGATE_DISABLE_MATVEC")) {
    const VkFormat f = s == Storage::f32 ? VK_FORMAT_R32G32B32A32_SFLOAT : VK_FORMAT_R16G16B16A16_SFLOAT;
    const gpu::Grid g = gpu::grid_for((N + 7) / 8);
    dispatch(ctx.pipelines->get(variant("matmul_rows_cpu", s, y_f32 ? "_y32" : ""), {8, M, 8}), g.x, g.y, "matmul", f);
    return;
  }
  // CPU drivers, whatever M (even a decode step: ~25× the matrix-vector kernel on lavapipe).
  if (cpu_gemm(ctx.info)) {
    const gpu::Grid g = cpu_gemm_grid(M, N);
    dispatch(ctx.pipelines->get(variant("matmul_cpu", s, y_f32 ? "_y32" : ""), cpu_gemm_spec(M)), g.x, g.y, "matmul");
    return;
  }
  // A few rows (decode): one subgroup per output column streams W once, in
  // 8-element loads where the rows allow them.
  if (matvec_applies(ctx.info, M)) {
    const gpu::Grid g = matvec_grid(ctx.info, N);
    dispatch(ctx.pipelines->get(variant(vec8_rows(push) ? "matvec_v8" : "matvec", s, y_f32 ? "_y32" : ""), {256}),
             g.x, g.y, "matvec");
    return;
  }
  // Tensor cores through shared memory (opt-in, VKGATE_COOPMAT_STAGED) when its
  // tiles cover the matrices and its slices fit in shared memory. Opt-in
  // because it is slower on the H100 (31 TFLOP/s at 8192³ against 39 for the
  // kernel below, BENCHMARKS.md): its fp32-accumulating products, not its
  // loads, set the pace there.
  if (const Coopmat c = s == Storage::f16 ? coopmat_usable(ctx.info, coopmat_from_env("VKGATE_COOPMAT_STAGED", false))
                                          : Coopmat::off;
      c != Coopmat::off) {
    // 32 k per slice on tensor cores; 16 fits the emulation in 32 KiB. Shared
    // memory in 16-byte pieces: two slices of X (also the epilogue's 8 × 256
    // floats) and two of W, rows TK + 8 halves apart.
    const uint32_t TM = 128, TN = 128, TK = c == Coopmat::emulated ? 16 : 32;
    const uint64_t shared = (std::max(2 * TM * (TK / 8 + 1), 8u * 64) + 2 * TN * (TK / 8 + 1)) * 16;
    if (M % TM == 0 && N % TN == 0 && K % TK == 0 && push.ldx % 8 == 0 && push.ldw % 8 == 0 &&
        shared <= ctx.info.shared_memory_bytes) {
      const std::string name = std::string(c == Coopmat::emulated ? "matmul_staged_emulated" : "matmul_staged") +
                               (y_f32 ? "" : "_f16");
      dispatch(ctx.pipelines->get(name, {8 * coopmat_lanes(c)}), N / TN, M / TM, "matmul.coopmat_staged");
      return;
    }
  }
  // Tensor cores for fp16 when the 64×64 tiles cover the matrices exactly.
  if (s == Storage::f16 && ctx.info.coopmat_f16 && M % 64 == 0 && N % 64 == 0 && K % 16 == 0 && push.ldx % 8 == 0 &&
      push.ldw % 8 == 0) {
    dispatch(ctx.pipelines->get(y_f32 ? "matmul_coopmat" : "matmul_coopmat_f16", {128}), N / 64, M / 64,
             "matmul.coopmat");
    return;
  }
  const auto spec = tiles(ctx.info);
  dispatch(ctx.pipelines->get(variant("matmul", s, y_f32 ? "_y32" : ""), spec), (N + spec[2] - 1) / spec[2],
           (M + spec[1] - 1) / spec[1], "matmul");
}

bool matmul_rmsnorm(Context::Impl& ctx, Recorder& rec, const Buffer& x, const Buffer& norm_w, NormKind kind, float eps,
                    const Buffer& w, const Buffer* bias, const Buffer& y, uint32_t M, uint32_t N, uint32_t K, Storage s,
                    uint32_t ldw) {
  const Push push{M, N, K, K, ldw ? ldw : K, N, N, bias ? 1u : 0u, 0u, kind == NormKind::zero_centered ? 1u : 0u, eps};
  if (!matvec_applies(ctx.info, M) || !vec8_rows(push) || gpu::env_flag("VKGATE_DISABLE_PASS_FUSION")) return false;
  const gpu::Grid g = matvec_grid(ctx.info, N);
  rec.dispatch(ctx.pipelines->get(variant("matvec_v8_norm", s), {256}),
               {{&x, gpu::Access::read}, {&w, gpu::Access::read}, {bias ? bias : &w, gpu::Access::read},
                {&norm_w, gpu::Access::read}, {&y, gpu::Access::write}},
               &push, g.x, g.y, 1, "rmsnorm+matvec");
  return true;
}

}  // namespace vkgate::ops
