#include <algorithm>

#include "gpu/context_impl.hpp"
#include "gpu/pipeline.hpp"
#include "ops/ops.hpp"

namespace vkgate::ops {

namespace {
// Every kernel reads the whole struct; k_chunk only the tiled ones (split-K),
// zero_centered and eps only matvec.comp's NORM_X.
struct MatmulPush {
  uint32_t M, N, K, ldx, ldw, ldy, ldr, has_bias, has_residual;
  uint32_t k_chunk = 0;  // set by the dispatch: K, or k per split
  uint32_t zero_centered = 0;
  float eps = 0;
  uint32_t gate_act = 0, gate_combine = 0, gate_at = 0, ldg = 0;  // shaders/epilogue.glsl
};

// The subgroup matrix-vector kernel (GPUs, ≤ Tuning::matvec_rows rows), and its 8-wide loads.
bool matvec_applies(const DeviceInfo& d, const Tuning& t, uint32_t M) {
  return !cpu_gemm(d, t) && M <= std::min(t.matvec_rows, gpu::kMatvecMaxRows) && d.subgroup_arithmetic && t.matvec;
}
// matvec.comp's MAX_M for M rows: its partial sums per lane.
std::vector<uint32_t> matvec_spec(uint32_t M) { return {256, M <= 8 ? 8u : gpu::kMatvecMaxRows}; }
bool vec8_rows(uint32_t K, uint32_t ldx, uint32_t ldw) { return K % 8 == 0 && ldx % 8 == 0 && ldw % 8 == 0; }
// The shapes matvec.comp's NORM_X variant takes: ≤ 16 dense rows of whole
// 16-byte chunks, on a device with subgroup arithmetic.
bool norm_matvec_fits(const DeviceInfo& d, uint32_t M, uint32_t K, uint32_t ldw) {
  return M <= gpu::kMatvecMaxRows && d.subgroup_arithmetic && vec8_rows(K, K, ldw);
}
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

// Which kernel a product takes, and its grid of output tiles.
enum class Path { rows_cpu, cpu, matvec, staged, coopmat, tiled };
struct Route {
  Path path;
  Coopmat staged = Coopmat::off;
  gpu::StagedTile tile;  // Path::staged's
  uint32_t gx = 0, gy = 0;
};
Route route(const DeviceInfo& d, const Tuning& t, const MatmulPush& push, Storage s) {
  const uint32_t M = push.M, N = push.N, K = push.K;
  // CPU drivers, up to 8 rows (decode): the lanes split K (ROWS_CPU in matmul.comp).
  // lavapipe, 9216×2048 f32: 4× the 8-row tiles below at 1 row, 1.4× at 8. In f16 the
  // tile costs the same from 1 to 8 rows and overtakes them past 4 (the 0.6B shape's
  // lm_head, 151936×1024: 62, 97 and 156 ms at 1, 4 and 8 rows against ~100).
  const bool vec4_rows = K % 4 == 0 && push.ldx % 4 == 0 && push.ldw % 4 == 0;
  const uint32_t most_rows = s == Storage::f16 ? 4 : 8;
  if (cpu_gemm(d, t) && M <= most_rows && s != Storage::bf16 && vec4_rows && t.matvec) {
    const gpu::Grid g = gpu::grid_for((N + 7) / 8);
    return {Path::rows_cpu, Coopmat::off, {}, g.x, g.y};
  }
  // CPU drivers, whatever M (even a decode step: ~25× the matrix-vector kernel on lavapipe).
  if (cpu_gemm(d, t)) {
    const gpu::Grid g = cpu_gemm_grid(t, M, N, s);
    return {Path::cpu, Coopmat::off, {}, g.x, g.y};
  }
  // A few rows (decode): one subgroup per output column streams W once, in
  // 8-element loads where the rows allow them.
  if (matvec_applies(d, t, M)) {
    const gpu::Grid g = matvec_grid(d, N);
    return {Path::matvec, Coopmat::off, {}, g.x, g.y};
  }
  // Tensor cores through shared memory (Tuning::coopmat_staged, with the
  // device's Tuning::staged_tile) when its tiles cover the matrices and its
  // slices fit in shared memory; else the direct-load kernel below. It does
  // not split K: a forced split count (VKGATE_MATMUL_SPLITS) goes past it.
  if (const Coopmat c = s == Storage::f16 && !t.matmul_splits ? coopmat_usable(d, t.coopmat_staged) : Coopmat::off;
      c != Coopmat::off) {
    const gpu::StagedTile tile = staged_tile_run(t.staged_tile, c);
    if (staged_tile_misfit(d, tile, c, M, N, K, push.ldx, push.ldw).empty())
      return {Path::staged, c, tile, N / staged_tile_n(tile), M / staged_tile_m(tile)};
  }
  // Tensor cores for fp16 when the 64×64 tiles cover the matrices exactly,
  // through either cooperative-matrix extension.
  if (s == Storage::f16 && (d.coopmat_f16 || d.coopmat_f16_khr) && M % 64 == 0 && N % 64 == 0 && K % 16 == 0 &&
      push.ldx % 8 == 0 && push.ldw % 8 == 0)
    return {Path::coopmat, Coopmat::off, {}, N / 64, M / 64};
  const auto spec = tiles(d);
  return {Path::tiled, Coopmat::off, {}, (N + spec[2] - 1) / spec[2], (M + spec[1] - 1) / spec[1]};
}

// Split-K for the tiled kernels: when the output has fewer tiles than this, a
// GPU would sit mostly idle (o_proj of a 128-token prefill: 64 tiles), so
// each tile's K is split across workgroups, each split at least kSplitMinK.
constexpr uint64_t kSplitTiles = 256;
constexpr uint32_t kSplitMinK = 256, kSplitAlign = 16;  // a split is whole BK = 16 slices
// k per split: whole slices.
uint32_t split_chunk(uint32_t K, uint32_t splits) {
  const uint32_t chunk = (K + splits - 1) / splits;
  return (chunk + kSplitAlign - 1) / kSplitAlign * kSplitAlign;
}
// The splits a product on route `r` takes: as many as split_chunk leaves non-empty.
uint32_t split_count(const DeviceInfo& d, const Tuning& t, const Route& r, uint32_t K) {
  if (r.path != Path::coopmat && r.path != Path::tiled) return 1;
  uint32_t n = 1;
  const uint64_t tiles = uint64_t(r.gx) * r.gy;
  if (t.matmul_splits)
    n = std::clamp<uint32_t>(t.matmul_splits, 1, std::max(1u, std::min(K / kSplitAlign, d.max_workgroup_count[2])));
  else if (d.type != "cpu" && t.split_k && tiles < kSplitTiles)
    n = uint32_t(std::min<uint64_t>((kSplitTiles + tiles - 1) / tiles, std::max(1u, K / kSplitMinK)));
  return n > 1 ? (K + split_chunk(K, n) - 1) / split_chunk(K, n) : 1;
}
}  // namespace

bool cpu_gemm(const DeviceInfo& d, const Tuning& t) {
  return cpu_kernels(d) && d.subgroup_shuffle && t.cpu_matmul;
}

// One 8-lane subgroup per RM×(8·RN) tile; the taller tile (fewer loads per
// FMA) where M fills it, but not taller than 64: llvmpipe (Mesa 22.3)
// computes wrong results from 80 rows up. f16 operands (their conversions
// take registers) peak lower: the 0.6B shape's f16 products on lavapipe took
// 546 ms at 16 rows with 16-row tiles against 918 with 32, and 1,743 ms at
// 64 rows with 32-row tiles against 1,953 with 64. Never taller than
// Tuning::cpu_gemm_rows.
std::vector<uint32_t> cpu_gemm_spec(const Tuning& t, uint32_t M, Storage s) {
  const uint32_t rows = s == Storage::f16 ? (M > 16 ? 32u : M > 8 ? 16u : 8u) : (M > 32 ? 64u : M > 8 ? 32u : 8u);
  return {8, std::min(rows, t.cpu_gemm_rows), kCpuRN};
}

gpu::Grid cpu_gemm_grid(const Tuning& t, uint32_t M, uint32_t N, Storage s) {
  const uint32_t rm = cpu_gemm_spec(t, M, s)[1];
  // The shaders step through row blocks past the grid's 65535.
  return {(N + 8 * kCpuRN - 1) / (8 * kCpuRN), std::min<uint32_t>((M + rm - 1) / rm, 65535)};
}

uint32_t operand_stride(const DeviceInfo& d, const Tuning& t, uint32_t K, Storage s) {
  const uint32_t e = element_bytes(s);
  return cpu_gemm(d, t) && (K * e) % 128 == 0 ? K + 64 / e : K;
}

std::vector<std::byte> strided_rows(std::vector<std::byte> dense, size_t rows, size_t row_bytes,
                                    size_t stride_bytes) {
  if (stride_bytes == row_bytes) return dense;
  std::vector<std::byte> out(rows * stride_bytes);
  for (size_t r = 0; r < rows; ++r)
    std::copy_n(dense.begin() + long(r * row_bytes), row_bytes, out.begin() + long(r * stride_bytes));
  return out;
}

gpu::StagedTile staged_tile_run(gpu::StagedTile t, Coopmat c) {
  if (c == Coopmat::emulated) t.tk = 16;
  return t;
}
uint32_t staged_tile_m(const gpu::StagedTile& t) { return t.wm * t.fm * 16; }
uint32_t staged_tile_n(const gpu::StagedTile& t) { return t.wn * t.fn * 16; }

std::string staged_tile_misfit(const DeviceInfo& d, const gpu::StagedTile& t, Coopmat c, uint32_t M, uint32_t N,
                               uint32_t K, uint32_t ldx, uint32_t ldw) {
  const uint32_t TM = staged_tile_m(t), TN = staged_tile_n(t), wg = t.wm * t.wn * coopmat_lanes(c);
  // Shared memory in 16-byte pieces: the slices of X (also the epilogue's
  // 64 pieces per subgroup) and of W, rows tk + 8 halves apart.
  const uint64_t ld8 = t.tk / 8 + 1;
  const uint64_t shared = (std::max<uint64_t>(t.stages * TM * ld8, 64ull * t.wm * t.wn) + t.stages * TN * ld8) * 16;
  auto whole = [&](uint32_t rows) { return (rows * t.tk / 8) % wg == 0 && rows * t.tk / 8 / wg <= 8; };
  if (t.tk % 16 || (t.stages != 1 && t.stages != 2)) return "k per slice must be a multiple of 16, stages 1 or 2";
  if (wg > d.max_workgroup_invocations)
    return std::to_string(wg) + " invocations, the device takes " + std::to_string(d.max_workgroup_invocations);
  if (shared > d.shared_memory_bytes)
    return std::to_string(shared) + " bytes of shared memory, the device has " + std::to_string(d.shared_memory_bytes);
  if (!whole(TM) || !whole(TN)) return "the slices do not split into 1 to 8 16-byte pieces per lane";
  if (M % TM || N % TN || K % t.tk || ldx % 8 || ldw % 8)
    return std::to_string(M) + "x" + std::to_string(N) + "x" + std::to_string(K) + " is not whole " +
           std::to_string(TM) + "x" + std::to_string(TN) + "x" + std::to_string(t.tk) + " tiles";
  return {};
}

std::vector<gpu::StagedTile> staged_tile_candidates() {
  std::vector<gpu::StagedTile> out;
  // {wm, wn, fm, fn, tk, stages}: 128×128 as 8 subgroups of 64×32, 4 of
  // 64×64 and 16 of 32×32; 128×256 and 256×128; 64-k slices; small tiles for
  // small products. Each with fp32 and with fp16 partial sums.
  const uint32_t shapes[][6] = {{2, 4, 4, 2, 32, 2}, {2, 2, 4, 4, 32, 2}, {4, 4, 2, 2, 32, 2}, {2, 4, 4, 4, 32, 1},
                                {4, 2, 4, 4, 32, 1}, {2, 2, 4, 4, 64, 1}, {2, 2, 2, 2, 64, 2}, {2, 4, 2, 2, 32, 2}};
  for (bool acc16 : {false, true})
    for (const auto& v : shapes) out.push_back({v[0], v[1], v[2], v[3], v[4], v[5], acc16});
  return out;
}

uint32_t matmul_splits(const DeviceInfo& d, const Tuning& t, uint32_t M, uint32_t N, uint32_t K, Storage s,
                       uint32_t ldx, uint32_t ldw) {
  const MatmulPush push{M, N, K, ldx ? ldx : K, ldw ? ldw : K, N, N, 0, 0};
  return split_count(d, t, route(d, t, push, s), K);
}

void matmul(Context::Impl& ctx, Recorder& rec, const MatmulArgs& a) {
  const auto& [x, w, y, M, N, K, s, bias, residual, y_f32, ldx, ldw, partial, gate] = a;
  MatmulPush push{M, N, K, ldx ? ldx : K, ldw ? ldw : K, N, N, bias ? 1u : 0u, residual ? 1u : 0u, K};
  set_gate(push, gate);
  const Tuning& t = rec.tuning();
  const Route r = route(ctx.info, t, push, s);
  const uint32_t splits = partial ? split_count(ctx.info, t, r, K) : 1;
  if (splits > 1 && partial->size() < uint64_t(splits) * M * N * 4)
    throw Error(ErrorCode::invalid_argument, "matmul: the split-K partial buffer '" + partial->name() + "' holds " +
                                                 std::to_string(partial->size()) + " bytes, " +
                                                 std::to_string(uint64_t(splits) * M * N * 4) + " needed");
  // With split-K the kernel writes fp32 partial sums, rows z·M.. of `partial`,
  // and matmul_combine.comp adds them and applies the epilogue into y.
  const Buffer& out = splits > 1 ? *partial : y;
  const bool out_f32 = splits > 1 || y_f32;
  if (splits > 1) {
    push.k_chunk = split_chunk(K, splits);
    push.has_bias = push.has_residual = push.gate_act = 0;
  }
  // Every variant has the same interface; absent operands are bound to a
  // buffer the shader never reads, to keep one pipeline per variant.
  // `texel`: the format of X's and W's texel views, for variants that read them so.
  auto dispatch = [&](const gpu::Pipeline& p, const char* label, VkFormat texel = VK_FORMAT_UNDEFINED) {
    if (p.texel_bindings && texel == VK_FORMAT_UNDEFINED) texel = texel_format(s);
    rec.dispatch(p,
                 {{&x, gpu::Access::read, texel},
                  {&w, gpu::Access::read, texel},
                  {bias ? bias : &w, gpu::Access::read},
                  {residual ? residual : &x, gpu::Access::read},
                  {&out, gpu::Access::write},
                  {gate ? &gate->scores : &x, gpu::Access::read}},
                 push, r.gx, r.gy, splits, label);
  };
  const char* y32 = out_f32 ? "_y32" : "";
  switch (r.path) {
    case Path::rows_cpu:
      dispatch(ctx.pipelines->get(variant("matmul_rows_cpu", s, y32), {8, M, 8}), "matmul",
               texel4_format(s));
      break;
    case Path::cpu:
      dispatch(ctx.pipelines->get(variant("matmul_cpu", s, y32), cpu_gemm_spec(t, M, s)), "matmul");
      break;
    case Path::matvec:
      dispatch(ctx.pipelines->get(variant(vec8_rows(push.K, push.ldx, push.ldw) ? "matvec_v8" : "matvec", s, y32),
                                  matvec_spec(M)),
               "matvec");
      break;
    case Path::staged: {
      const bool emulated = r.staged == Coopmat::emulated;
      const std::string name = std::string(emulated ? "matmul_staged_emulated" : "matmul_staged") + (out_f32 ? "" : "_f16");
      const gpu::StagedTile& tl = r.tile;
      dispatch(ctx.pipelines->get(name, {tl.wm * tl.wn * coopmat_lanes(r.staged), tl.wm, tl.wn, tl.fm, tl.fn, tl.tk,
                                         tl.acc16 ? 1u : 0u, tl.stages}),
               "matmul.coopmat_staged");
      break;
    }
    case Path::coopmat: {
      // The KHR kernel asks for the 32-lane subgroups it is written for.
      const bool khr = ctx.info.coopmat_f16_khr;
      const std::string name = khr ? "matmul_coopmat_khr" : "matmul_coopmat";
      dispatch(ctx.pipelines->get(name + (out_f32 ? "" : "_f16"), {128}, khr ? 32u : 0u),
               khr ? "matmul.coopmat_khr" : "matmul.coopmat");
      break;
    }
    case Path::tiled: dispatch(ctx.pipelines->get(variant("matmul", s, y32), tiles(ctx.info)), "matmul"); break;
  }
  if (splits == 1) return;
  constexpr uint32_t kCombineWG = 256;
  struct {
    uint32_t M, N, ldy, ldr, has_bias, has_residual, splits;
    uint32_t gate_act = 0, gate_combine = 0, gate_at = 0, ldg = 0;
  } cp{M, N, N, N, bias ? 1u : 0u, residual ? 1u : 0u, splits};
  set_gate(cp, gate);
  const gpu::Grid g = gpu::grid_for((uint64_t(M) * N + kCombineWG - 1) / kCombineWG);
  rec.dispatch(ctx.pipelines->get(variant("matmul_combine", s, y_f32 ? "_y32" : ""), {kCombineWG}),
               {{partial, gpu::Access::read}, {bias ? bias : partial, gpu::Access::read},
                {residual ? residual : partial, gpu::Access::read}, {&y, gpu::Access::write},
                {gate ? &gate->scores : partial, gpu::Access::read}},
               cp, g.x, g.y, 1, "matmul.combine");
}

bool matmul_rmsnorm_applies(const DeviceInfo& d, const Tuning& t, uint32_t M, uint32_t K, uint32_t ldw) {
  return matvec_applies(d, t, M) && norm_matvec_fits(d, M, K, ldw ? ldw : K) && t.pass_fusion;
}

void matmul_rmsnorm(Context::Impl& ctx, Recorder& rec, const MatmulRmsnormArgs& a) {
  auto [x, norm_w, kind, eps, w, y, M, N, K, s, bias, ldw, glu, ldy] = a;
  if (!ldw) ldw = K;
  if (!ldy) ldy = N;
  if (!norm_matvec_fits(ctx.info, M, K, ldw))
    throw Error(ErrorCode::invalid_argument, "matmul_rmsnorm: " + std::to_string(M) + " rows of " +
                                                 std::to_string(K) + " (stride " + std::to_string(ldw) +
                                                 ") is not a shape its kernel takes");
  MatmulPush push{M, N, K, K, ldw, ldy, N, bias ? 1u : 0u, 0u, K, kind == NormKind::zero_centered ? 1u : 0u, eps};
  if (glu) push.gate_act = uint32_t(*glu);  // matvec.comp's GLU reads its activation there
  const gpu::Grid g = matvec_grid(ctx.info, N);
  rec.dispatch(ctx.pipelines->get(variant(glu ? "matvec_v8_norm_glu" : "matvec_v8_norm", s), matvec_spec(M)),
               {{&x, gpu::Access::read}, {&w, gpu::Access::read}, {bias ? bias : &w, gpu::Access::read},
                {&norm_w, gpu::Access::read}, {&y, gpu::Access::write}, {&w, gpu::Access::read}},
               push, g.x, g.y, 1, glu ? "rmsnorm+matvec+glu" : "rmsnorm+matvec");  // binding 5: the other variants' gate
}

}  // namespace vkgate::ops
