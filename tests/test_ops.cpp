// Every op against the CPU reference on deliberately awkward shapes.
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "harness.hpp"
#include "gpu/pipeline.hpp"
#include "gpu/recorder.hpp"
#include "ops/attention.hpp"
#include "vkgate/dtype.hpp"
#include "vkgate/reference_model.hpp"

namespace test_ops {

using namespace vkgate;
using test::check_close;
using test::run_once;
using test::upload_half;

namespace {

// Plain RoPE's cos/sin table on `rotary` dims with base θ (a block config
// whose only rotary dims are those: rope_table reads nothing else of it).
std::vector<float> plain_rope_table(uint32_t tokens, uint32_t rotary, double theta, uint32_t first) {
  BlockConfig c;
  c.head_dim = int(rotary);
  c.rope_theta = theta;
  return ops::rope_table(c, tokens, first);
}

}  // namespace

TEST_CASE_FIXTURE(test::GpuTest, "matmul: Y = X·Wᵀ (+b) (+residual) on odd shapes, K up to 4096") {
  struct Shape {
    uint32_t M, N, K;
    bool bias, residual;
  };
  const Shape shapes[] = {{1, 1, 1, false, false},    {1, 67, 4096, true, false}, {3, 130, 257, false, true},
                          {65, 63, 129, true, true},  {200, 96, 1000, false, false}, {17, 300, 2048, true, false},
                          {64, 64, 64, false, false}, {4, 37, 128, true, true}, {2, 8, 36, false, false},
                          {8, 20, 64, false, true},   {5, 19, 1096, true, true}, {12, 67, 1096, true, true},
                          {16, 40, 256, false, true}, {9, 33, 100, true, false}};
  test::ScopedTuning tuning(ctx);  // GPUs: 9–16 rows in matvec.comp's 16-row form too
  tuning->matvec_rows = gpu::kMatvecMaxRows;
  // CPU drivers: the register tiles of 8, 32 and 64 rows, whatever the test
  // command's VKGATE_CPU_GEMM_ROWS (tools/quickstart.sh).
  tuning->cpu_gemm_rows = gpu::Tuning{}.cpu_gemm_rows;
  // GPU-assisted validation took minutes per instrumented 16-row pipeline on
  // lavapipe: it checks the 8-row form (the other stages run both).
  const uint32_t most_rows = ctx.gpu_assisted_validation_enabled() ? 8 : gpu::kMatvecMaxRows;
  for (const Shape& s : shapes) {
    if (s.M > most_rows && s.M <= gpu::kMatvecMaxRows) continue;
    CAPTURE(s.M);
    CAPTURE(s.N);
    CAPTURE(s.K);
    const auto x = random(size_t(s.M) * s.K), w = random(size_t(s.N) * s.K, 0.05f);
    const auto b = s.bias ? random(s.N) : std::vector<float>{};
    const auto r = s.residual ? random(size_t(s.M) * s.N) : std::vector<float>{};
    auto gx = upload(x, "x"), gw = upload(w, "w"), gy = poisoned(size_t(s.M) * s.N, "y");
    auto gb = upload(s.bias ? b : std::vector<float>{0}, "b"), gr = upload(s.residual ? r : std::vector<float>{0}, "r");
    // Room for split-K partial sums, where the device (or VKGATE_MATMUL_SPLITS) splits.
    auto gp = poisoned(size_t(ops::matmul_splits(vk.info, vk.tuning, s.M, s.N, s.K)) * s.M * s.N, "partial");
    run_once(vk, [&](gpu::Recorder& rec) {
      ops::matmul(vk, rec, {.x = gx, .w = gw, .y = gy, .M = s.M, .N = s.N, .K = s.K, .bias = s.bias ? &gb : nullptr,
                            .residual = s.residual ? &gr : nullptr, .partial = &gp});
    });
    auto want = reference::linear(x, w, b, s.M, s.N, s.K);
    for (size_t i = 0; i < r.size(); ++i) want[i] += r[i];
    check_close(download(gy, want.size()), want);
  }
}


// Split-K on the GPU kernels (the tiled one here; tensor cores too on devices
// with them), forced to 1..7 splits, with K not a multiple of the split.
TEST_CASE_FIXTURE(test::GpuTest, "matmul: split-K (VKGATE_MATMUL_SPLITS) on the tiled kernels, bias and residual added once") {
  test::ScopedTuning tuning(ctx);
  tuning->cpu_matmul = false;
  // o_proj of a 128-token prefill has 64 output tiles: a GPU splits it; CPU drivers never do.
  {
    tuning->matmul_splits = 0;
    const uint32_t auto_splits = ops::matmul_splits(vk.info, vk.tuning, 128, 2048, 4096);
    const bool cpu = vk.info.type == "cpu";
    CHECK((cpu ? auto_splits == 1 : auto_splits > 1));
    tuning->split_k = false;
    CHECK(ops::matmul_splits(vk.info, vk.tuning, 128, 2048, 4096) == 1);
  }
  struct Shape {
    uint32_t M, N, K;
  };
  for (const Shape s : {Shape{65, 70, 1000}, Shape{64, 128, 512}, Shape{9, 33, 40}}) {
    for (uint32_t forced : {1u, 2u, 3u, 7u}) {
      CAPTURE(s.M);
      CAPTURE(s.K);
      CAPTURE(forced);
      tuning->matmul_splits = forced;
      for (ops::Storage st : {ops::Storage::f32, ops::Storage::f16}) {
        if (st == ops::Storage::f16 && !vk.info.storage16) continue;
        const uint32_t splits = ops::matmul_splits(vk.info, vk.tuning, s.M, s.N, s.K, st);
        CHECK(splits == std::min(forced, s.K / 16));
        const bool half = st == ops::Storage::f16;
        auto x = random(size_t(s.M) * s.K), w = random(size_t(s.N) * s.K, 0.05f);
        const auto b = random(s.N), r = random(size_t(s.M) * s.N);
        auto put = [&](std::vector<float>& v, const char* name) {
          return half ? upload_half(*this, v, name) : upload(v, name);
        };
        auto gx = put(x, "x"), gw = put(w, "w"), gb = upload(b, "b"), gr = upload(r, "r");
        auto gy = poisoned(size_t(s.M) * s.N, "y"), gp = poisoned(size_t(splits) * s.M * s.N, "partial");
        run_once(vk, [&](gpu::Recorder& rec) {
          ops::matmul(vk, rec, {.x = gx, .w = gw, .y = gy, .M = s.M, .N = s.N, .K = s.K, .s = st, .bias = &gb,
                                .residual = &gr, .y_f32 = true, .partial = &gp});
        });
        auto want = reference::linear(x, w, b, s.M, s.N, s.K);
        for (size_t i = 0; i < r.size(); ++i) want[i] += r[i];
        check_close(download(gy, want.size()), want);
      }
    }
  }
}

// The decode projection with input_layernorm folded in (matvec.comp NORM_X):
// on GPUs, and on CPU drivers under VKGATE_DISABLE_CPU_MATMUL (its ctest run);
// elsewhere the op declines and the test runs the two passes it stands for.
TEST_CASE_FIXTURE(test::GpuTest, "matmul: RMSNorm(X)·Wᵀ (+b) in one pass for up to 16 rows, plain and zero-centred") {
  struct Shape {
    uint32_t M, N, K;
    bool bias;
    NormKind kind;
  };
  const Shape shapes[] = {{1, 70, 2048, true, NormKind::zero_centered}, {3, 33, 1096, false, NormKind::plain},
                          {8, 40, 64, true, NormKind::plain}, {2, 9, 8, false, NormKind::zero_centered},
                          {12, 50, 1096, true, NormKind::plain}, {16, 24, 64, false, NormKind::zero_centered}};
  test::ScopedTuning tuning(ctx);  // 9–16 rows too (VKGATE_MATVEC_ROWS=16), not under GPU-assisted validation (above)
  tuning->matvec_rows = gpu::kMatvecMaxRows;
  const uint32_t most_rows = ctx.gpu_assisted_validation_enabled() ? 8 : gpu::kMatvecMaxRows;
  const bool expect_fused = !ops::cpu_gemm(vk.info, vk.tuning) && vk.info.subgroup_arithmetic &&
                            vk.tuning.matvec && vk.tuning.pass_fusion;
  for (ops::Storage st : {ops::Storage::f32, ops::Storage::f16}) {
    if (st == ops::Storage::f16 && !vk.info.storage16) continue;
    for (const Shape& s : shapes) {
      if (s.M > most_rows) continue;
      CAPTURE(s.M);
      CAPTURE(s.N);
      CAPTURE(s.K);
      CAPTURE(int(st));
      const auto x = random(size_t(s.M) * s.K, 3.0f), g = random(s.K, 0.5f), w = random(size_t(s.N) * s.K, 0.05f);
      const auto b = s.bias ? random(s.N) : std::vector<float>{0};
      const bool half = st == ops::Storage::f16;
      const float nan = std::numeric_limits<float>::quiet_NaN();
      std::vector<float> w_used = w, y_nan(size_t(s.M) * s.N, nan), xn_nan(size_t(s.M) * s.K, nan);
      auto gx = upload(x, "x"), gg = upload(g, "norm weight"), gb = upload(b, "b");
      auto gw = half ? upload_half(*this, w_used, "w") : upload(w, "w");
      auto gy = half ? upload_half(*this, y_nan, "y") : poisoned(y_nan.size(), "y");
      auto gxn = half ? upload_half(*this, xn_nan, "x normed") : poisoned(xn_nan.size(), "x normed");
      bool fused = false;
      run_once(vk, [&](gpu::Recorder& rec) {
        fused = ops::matmul_rmsnorm_applies(vk.info, vk.tuning, s.M, s.K);
        if (fused) {
          ops::matmul_rmsnorm(vk, rec, {.x = gx, .norm_w = gg, .kind = s.kind, .eps = 1e-6f, .w = gw, .y = gy, .M = s.M,
                                        .N = s.N, .K = s.K, .s = st, .bias = s.bias ? &gb : nullptr});
        } else {
          const ops::View rows = ops::btd_view(s.M, 1, s.K);
          ops::rmsnorm(vk, rec, {.x = gx, .in = rows, .w = gg, .y = gxn, .out = rows, .rows = s.M, .tokens = s.M,
                                 .heads = 1, .dim = s.K, .kind = s.kind, .eps = 1e-6f, .s = st, .x_f32 = true});
          ops::matmul(vk, rec, {.x = gxn, .w = gw, .y = gy, .M = s.M, .N = s.N, .K = s.K, .s = st,
                                .bias = s.bias ? &gb : nullptr});
        }
      });
      CHECK(fused == expect_fused);
      const auto xn = reference::rms_norm(x, g, s.M, s.K, 1e-6, s.kind);
      auto want = reference::linear(std::vector<float>(xn.begin(), xn.end()), w_used,
                                    s.bias ? b : std::vector<float>{}, s.M, s.N, s.K);
      if (!half) {
        check_close(download(gy, want.size()), want);
      } else {
        check_close(test::download_stored(*this, gy, want.size(), true), want, 1e-6);
      }
    }
  }
}

// The MLP's decode pass (matvec.comp NORM_X GLU): RMSNorm, the gate and up
// projections and act(gate)·up in one dispatch, on the GPU kernels (forced on
// CPU drivers), h's rows a stride apart with the gaps left alone.
TEST_CASE_FIXTURE(test::GpuTest, "matmul: RMSNorm(X)·(gate, up)ᵀ and act(gate)·up in one pass, every activation") {
  struct Shape {
    uint32_t M, N, K, ldy;
    bool bias;
    NormKind kind;
  };
  const Shape shapes[] = {{1, 70, 2048, 70, true, NormKind::zero_centered}, {3, 33, 1096, 40, false, NormKind::plain},
                          {8, 40, 64, 48, true, NormKind::plain}, {12, 9, 72, 16, true, NormKind::zero_centered}};
  test::ScopedTuning tuning(ctx);  // whatever the VKGATE_DISABLE_* switches of this run say
  tuning->cpu_matmul = false;
  tuning->matvec = tuning->pass_fusion = true;
  tuning->matvec_rows = gpu::kMatvecMaxRows;
  const uint32_t most_rows = ctx.gpu_assisted_validation_enabled() ? 8 : gpu::kMatvecMaxRows;
  if (!vk.info.subgroup_arithmetic) return;  // the kernel's subgroup sums; the MLP then runs its three passes
  const float nan = std::numeric_limits<float>::quiet_NaN();
  // Under GPU-assisted validation (its instrumented pipelines compile for
  // about 40 s each on lavapipe) one storage and one activation: the
  // activation does not change what is read or written.
  const bool gpu_av = ctx.gpu_assisted_validation_enabled();
  for (Activation act : {Activation::silu, Activation::gelu, Activation::gelu_tanh, Activation::sigmoid})
    for (ops::Storage st : {ops::Storage::f32, ops::Storage::f16}) {
      if (st == ops::Storage::f16 && !vk.info.storage16) continue;
      if (gpu_av && (act != Activation::silu || st != (vk.info.storage16 ? ops::Storage::f16 : ops::Storage::f32)))
        continue;
      const bool half = st == ops::Storage::f16;
      for (const Shape& s : shapes) {
        if (s.M > most_rows) continue;
        INFO("activation " << std::string(to_string(act)) << (half ? ", fp16" : "") << ", M " << s.M << ", N " << s.N
                           << ", K " << s.K);
        REQUIRE(ops::matmul_rmsnorm_applies(vk.info, vk.tuning, s.M, s.K));
        const auto x = random(size_t(s.M) * s.K, 3.0f), g = random(s.K, 0.5f),
                   w = random(size_t(2 * s.N) * s.K, 0.05f);
        const auto b = s.bias ? random(2 * s.N) : std::vector<float>{0};
        std::vector<float> w_used = w, y_nan(size_t(s.M) * s.ldy, nan);
        auto gx = upload(x, "x"), gg = upload(g, "norm weight"), gb = upload(b, "b");
        auto gw = half ? upload_half(*this, w_used, "w") : upload(w, "w");
        auto gy = half ? upload_half(*this, y_nan, "h") : poisoned(y_nan.size(), "h");
        run_once(vk, [&](gpu::Recorder& rec) {
          ops::matmul_rmsnorm(vk, rec, {.x = gx, .norm_w = gg, .kind = s.kind, .eps = 1e-6f, .w = gw, .y = gy,
                                        .M = s.M, .N = s.N, .K = s.K, .s = st, .bias = s.bias ? &gb : nullptr,
                                        .glu = act, .ldy = s.ldy});
        });
        const auto xn = reference::rms_norm(x, g, s.M, s.K, 1e-6, s.kind);
        const auto proj = reference::linear(std::vector<float>(xn.begin(), xn.end()), w_used,
                                            s.bias ? b : std::vector<float>{}, s.M, 2 * s.N, s.K);
        const std::vector<float> got = test::download_stored(*this, gy, y_nan.size(), half);
        std::vector<float> h;
        std::vector<double> want;
        for (uint32_t m = 0; m < s.M; ++m) {
          for (uint32_t n = 0; n < s.N; ++n) {
            h.push_back(got[size_t(m) * s.ldy + n]);
            const size_t at = size_t(m) * 2 * s.N + n;
            want.push_back(reference::activation(act, proj[at]) * proj[at + s.N]);
          }
          for (uint32_t n = s.N; n < s.ldy; ++n) CHECK(std::isnan(got[size_t(m) * s.ldy + n]));
        }
        check_close(h, want, half ? 1e-6 : 1e-12);
      }
    }
}

// The block pads operand rows on CPU drivers (ops::operand_stride); any
// kernel that read a gap would pick up its NaN.
TEST_CASE_FIXTURE(test::GpuTest, "matmul: rows of X and W a stride apart (ldx, ldw > K), the gaps NaN") {
  struct Shape {
    uint32_t M, N, K, ldx, ldw;
  };
  const Shape shapes[] = {{37, 70, 256, 261, 272}, {1, 9, 64, 80, 64}, {70, 64, 32, 32, 48}};
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (const Shape& s : shapes) {
    CAPTURE(s.M);
    CAPTURE(s.K);
    const auto x = random(size_t(s.M) * s.K), w = random(size_t(s.N) * s.K, 0.05f);
    auto spread = [&](const std::vector<float>& dense, uint32_t rows, uint32_t ld) {
      std::vector<float> out(size_t(rows) * ld, nan);
      for (uint32_t r = 0; r < rows; ++r) std::copy_n(dense.begin() + long(r) * s.K, s.K, out.begin() + long(r) * ld);
      return out;
    };
    auto gx = upload(spread(x, s.M, s.ldx), "x"), gw = upload(spread(w, s.N, s.ldw), "w");
    auto gy = poisoned(size_t(s.M) * s.N, "y");
    run_once(vk, [&](gpu::Recorder& rec) {
      ops::matmul(vk, rec, {.x = gx, .w = gw, .y = gy, .M = s.M, .N = s.N, .K = s.K, .ldx = s.ldx, .ldw = s.ldw});
    });
    check_close(download(gy, size_t(s.M) * s.N), reference::linear(x, w, {}, s.M, s.N, s.K));
  }
}

TEST_CASE_FIXTURE(test::GpuTest, "rmsnorm: per row, plain and zero-centred") {
  struct Shape {
    uint32_t rows, dim;
  };
  for (NormKind kind : {NormKind::plain, NormKind::zero_centered})
    for (Shape s : {Shape{1, 3}, Shape{7, 2048}, Shape{5, 1000}, Shape{3, 96}}) {
      CAPTURE(s.rows);
      CAPTURE(s.dim);
      const auto x = random(size_t(s.rows) * s.dim, 3.0f), w = random(s.dim, 0.3f);
      auto gx = upload(x, "x"), gw = upload(w, "w"), gy = poisoned(x.size(), "y");
      const ops::View v = ops::btd_view(s.rows, 1, s.dim);
      run_once(vk, [&](gpu::Recorder& rec) {
        ops::rmsnorm(vk, rec, {.x = gx, .in = v, .w = gw, .y = gy, .out = v, .rows = s.rows, .tokens = s.rows,
                               .heads = 1, .dim = s.dim, .kind = kind, .eps = 1e-6f});
      });
      check_close(download(gy, x.size()), reference::rms_norm(x, w, s.rows, s.dim, 1e-6, kind));
    }
}

TEST_CASE_FIXTURE(test::GpuTest, "rmsnorm: per head from [B,T,H,Dh] into [B,H,T,Dh], head_dim 64/80/128/256") {
  const uint32_t B = 3, T = 5, H = 3;
  for (uint32_t Dh : {64u, 80u, 128u, 256u}) {
    CAPTURE(Dh);
    const auto x = random(size_t(B) * T * H * Dh, 2.0f), w = random(Dh, 0.3f);
    auto gx = upload(x, "x"), gw = upload(w, "w"), gy = poisoned(x.size(), "y");
    run_once(vk, [&](gpu::Recorder& rec) {
      ops::rmsnorm(vk, rec, {.x = gx, .in = ops::btd_view(T, H, Dh), .w = gw, .y = gy, .out = ops::bhsd_view(H, T, Dh),
                             .rows = B * T, .tokens = T, .heads = H, .dim = Dh, .kind = NormKind::zero_centered,
                             .eps = 1e-6f});
    });
    // Reference per row of Dh in [B,T,H,Dh] order, then transposed to [B,H,T,Dh].
    const auto rows = reference::rms_norm(x, w, size_t(B) * T * H, Dh, 1e-6, NormKind::zero_centered);
    std::vector<double> want(rows.size());
    for (uint32_t b = 0; b < B; ++b)
      for (uint32_t t = 0; t < T; ++t)
        for (uint32_t h = 0; h < H; ++h)
          for (uint32_t d = 0; d < Dh; ++d)
            want[((size_t(b) * H + h) * T + t) * Dh + d] = rows[((size_t(b) * T + t) * H + h) * Dh + d];
    check_close(download(gy, x.size()), want);
  }
}

TEST_CASE_FIXTURE(test::GpuTest, "rope: rotate-half, full and partial rotary, position offset, in place") {
  struct Case {
    uint32_t B, T, H, Dh, rotary, pos0;
  };
  const Case cases[] = {{3, 5, 2, 64, 64, 0},   {1, 1, 4, 80, 20, 37},  {2, 9, 1, 128, 64, 1000},
                        {1, 3, 2, 256, 64, 5},  {2, 4, 3, 256, 0, 0},   {1, 7, 2, 128, 128, 123456}};
  for (const Case& c : cases) {
    CAPTURE(c.Dh);
    CAPTURE(c.rotary);
    CAPTURE(c.pos0);
    const auto x = random(size_t(c.B) * c.T * c.H * c.Dh);
    auto gx = upload(x, "x");
    auto table = upload(plain_rope_table(c.T, c.rotary, 1e6, c.pos0), "table");
    const ops::View v = ops::btd_view(c.T, c.H, c.Dh);
    run_once(vk, [&](gpu::Recorder& rec) {
      ops::rope(vk, rec, {.x = gx, .in = v, .table = table, .y = gx, .out = v, .rows = c.B * c.T, .tokens = c.T,
                          .heads = c.H, .dim = c.Dh, .rotary = c.rotary});
    });
    check_close(download(gx, x.size()), reference::rope(x, c.B, c.T, c.H, c.Dh, c.rotary, 1e6, c.pos0));
  }
}

// The projections' rows hold [group of 2 query heads | their 2 gate columns]
// per group, then the keys, then the values (the official grouped gate
// layout, DESIGN.md §3); the caches hold older positions that must survive.
TEST_CASE_FIXTURE(test::GpuTest, "qkv_prepare: q/k norm + RoPE and v, from the projections into q and the caches") {
  struct Case {
    uint32_t B, T, H, KV, Dh, rotary, first, spare;  // spare: cache positions past the new tokens
    int norm;  // -1: no q/k norm
  };
  const Case cases[] = {{2, 3, 4, 2, 64, 64, 5, 2, int(NormKind::zero_centered)},
                        {1, 1, 4, 2, 256, 64, 17, 0, int(NormKind::plain)},
                        {2, 4, 2, 1, 80, 20, 0, 3, -1},
                        {1, 5, 2, 2, 128, 128, 1000, 1, int(NormKind::plain)}};
  for (const Case& c : cases) {
    CAPTURE(c.Dh);
    CAPTURE(c.rotary);
    CAPTURE(c.norm);
    const uint32_t groups = 2, group_stride = groups * (c.Dh + 1), k_col = c.H * (c.Dh + 1),
                   v_col = k_col + c.KV * c.Dh, cols = v_col + c.KV * c.Dh, seq = c.first + c.T + c.spare;
    const size_t BT = size_t(c.B) * c.T;
    const auto proj = random(BT * cols, 2.0f), qw = random(c.Dh, 0.3f), kw = random(c.Dh, 0.3f);
    const auto old_k = random(size_t(c.B) * c.KV * seq * c.Dh), old_v = random(size_t(c.B) * c.KV * seq * c.Dh);
    auto gp = upload(proj, "projections"), gqw = upload(qw, "q_norm"), gkw = upload(kw, "k_norm");
    auto table = upload(plain_rope_table(c.T, c.rotary, 1e6, c.first), "table");
    auto gq = poisoned(BT * c.H * c.Dh, "q"), gk = upload(old_k, "k cache"), gv = upload(old_v, "v cache");
    const ops::View qv{0, c.T * cols, cols, groups, group_stride, c.Dh}, kv{k_col, c.T * cols, cols, 1, c.Dh, 0},
        vv{v_col, c.T * cols, cols, 1, c.Dh, 0};
    const bool norm = c.norm >= 0;
    const NormKind kind = norm ? NormKind(c.norm) : NormKind::plain;
    run_once(vk, [&](gpu::Recorder& rec) {
      const ops::QkvPrepare a{gp,    qv,       kv,          vv, norm ? &gqw : nullptr, norm ? &gkw : nullptr, kind, 1e-6f,
                              table, c.rotary, RopeStyle::rotate_half, ops::GateTarget::none, ops::Gate{},
                              gq,    gk,       gv,          seq, c.first};
      ops::qkv_prepare(vk, rec, a, uint32_t(BT), c.T, c.H, c.KV, c.Dh);
    });

    // Heads gathered from the projections into [B, T, heads, Dh], then normed and rotated.
    auto expect = [&](const ops::View& view, uint32_t heads, const std::vector<float>& w, bool rotate) {
      std::vector<float> x(BT * heads * c.Dh);
      for (size_t bt = 0; bt < BT; ++bt)
        for (uint32_t h = 0; h < heads; ++h)
          for (uint32_t d = 0; d < c.Dh; ++d) {
            const size_t b = bt / c.T, t = bt % c.T;
            x[(bt * heads + h) * c.Dh + d] =
                proj[view.base + b * view.sb + t * view.st + (h / view.groups) * view.sg + (h % view.groups) * view.sh + d];
          }
      if (!rotate) return std::vector<double>(x.begin(), x.end());
      if (norm) {
        const auto normed = reference::rms_norm(x, w, int64_t(BT * heads), c.Dh, 1e-6, kind);
        x.assign(normed.begin(), normed.end());
      }
      return reference::rope(x, c.B, c.T, heads, c.Dh, c.rotary, 1e6, c.first);
    };
    // [B, T, heads, Dh] into [B, heads, seq, Dh] at positions `first`.. over `base`.
    auto place = [&](const std::vector<double>& rows, uint32_t heads, uint32_t positions, uint32_t first,
                     std::vector<double> base) {
      for (uint32_t b = 0; b < c.B; ++b)
        for (uint32_t t = 0; t < c.T; ++t)
          for (uint32_t h = 0; h < heads; ++h)
            for (uint32_t d = 0; d < c.Dh; ++d)
              base[((size_t(b) * heads + h) * positions + first + t) * c.Dh + d] =
                  rows[((size_t(b) * c.T + t) * heads + h) * c.Dh + d];
      return base;
    };
    check_close(download(gq, BT * c.H * c.Dh),
                place(expect(qv, c.H, qw, true), c.H, c.T, 0, std::vector<double>(BT * c.H * c.Dh)));
    check_close(download(gk, old_k.size()),
                place(expect(kv, c.KV, kw, true), c.KV, seq, c.first, std::vector<double>(old_k.begin(), old_k.end())));
    check_close(download(gv, old_v.size()),
                place(expect(vv, c.KV, {}, false), c.KV, seq, c.first, std::vector<double>(old_v.begin(), old_v.end())));
  }
}

// flash_decode_prep.comp against the two passes it replaces, qkv_prepare then
// flash_decode, on the same projections and caches: the same attention output
// and the same caches. The caches' older positions are random and the new
// ones NaN until written; norms plain, zero-centred and none, both RoPE
// styles, partial rotary, 1 and 2 new tokens, the new positions in the last
// of several key splits and on both sides of a split's edge (63 | 64). Under
// GPU-assisted validation (which instruments each pipeline for a long time
// on lavapipe) only the case with the edge.
TEST_CASE_FIXTURE(test::GpuTest, "flash attention: qkv_prepare folded into flash_decode (flash_decode_prep) equals the two passes") {
  if (!ctx.device().subgroup_arithmetic || ctx.device().max_stage_storage_buffers < 11) {
    MESSAGE("skipped: " << ctx.device().name << " runs no flash_decode_prep");
    return;
  }
  struct Case {
    uint32_t B, T, H, KV, Dh, rotary, past, spare, splits;
    int norm;  // -1: no q/k norm
    RopeStyle style;
  };
  const Case cases[] = {{2, 1, 4, 2, 64, 64, 200, 3, 4, int(NormKind::zero_centered), RopeStyle::rotate_half},
                        {1, 1, 16, 2, 256, 64, 150, 0, 3, int(NormKind::zero_centered), RopeStyle::rotate_half},
                        {1, 2, 4, 2, 128, 128, 63, 2, 2, int(NormKind::plain), RopeStyle::interleaved},
                        {2, 1, 2, 1, 80, 20, 10, 1, 1, -1, RopeStyle::rotate_half}};
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (ops::Storage st : {ops::Storage::f32, ops::Storage::f16}) {
    const bool half = st == ops::Storage::f16;
    if (half && !ctx.device().storage16) continue;
    for (const Case& c : cases) {
      if (ctx.gpu_assisted_validation_enabled() && c.T == 1) continue;
      CAPTURE(half);
      CAPTURE(c.Dh);
      CAPTURE(c.T);
      CAPTURE(c.norm);
      const uint32_t groups = 2, group_stride = groups * c.Dh, k_col = c.H * c.Dh, v_col = k_col + c.KV * c.Dh,
                     cols = v_col + c.KV * c.Dh, seq = c.past + c.T + c.spare;
      const size_t BT = size_t(c.B) * c.T, cache = size_t(c.B) * c.KV * seq * c.Dh;
      auto put = [&](std::vector<float> x, const char* name) { return half ? upload_half(*this, x, name) : upload(x, name); };
      std::vector<float> proj = random(BT * cols, 2.0f), old_k = random(cache), old_v = random(cache);
      for (size_t bh = 0; bh < size_t(c.B) * c.KV; ++bh)
        for (uint32_t t = 0; t < c.T; ++t)
          for (uint32_t d = 0; d < c.Dh; ++d) old_k[(bh * seq + c.past + t) * c.Dh + d] = old_v[(bh * seq + c.past + t) * c.Dh + d] = nan;
      const auto qw = random(c.Dh, 0.3f), kw = random(c.Dh, 0.3f);
      auto gp = put(proj, "projections"), gqw = upload(qw, "q_norm"), gkw = upload(kw, "k_norm");
      auto table = upload(plain_rope_table(c.T, c.rotary, 1e6, c.past), "table");
      auto gq = put(std::vector<float>(BT * c.H * c.Dh, nan), "q");
      auto ka = put(old_k, "k cache, two passes"), va = put(old_v, "v cache, two passes");
      auto kb = put(old_k, "k cache, folded"), vb = put(old_v, "v cache, folded");
      auto oa = put(std::vector<float>(BT * c.H * c.Dh, nan), "out, two passes");
      auto ob = put(std::vector<float>(BT * c.H * c.Dh, nan), "out, folded");
      const ops::View qv{0, c.T * cols, cols, groups, group_stride, c.Dh}, kv{k_col, c.T * cols, cols, 1, c.Dh, 0},
          vv{v_col, c.T * cols, cols, 1, c.Dh, 0};
      const bool norm = c.norm >= 0;
      const NormKind kind = norm ? NormKind(c.norm) : NormKind::plain;
      const ops::AttentionShape shape{c.B, c.H, c.KV, c.T, c.past + c.T, c.Dh, seq};
      ops::FlashOptions o;
      o.splits = c.splits;
      const ops::FlashPlan plan = ops::flash_plan(ctx.device(), shape, st, o);
      CAPTURE(plan.splits);
      REQUIRE(plan.kernel == ops::FlashKernel::decode);
      CHECK(plan.splits == c.splits);
      auto partial = device(ops::flash_partial_floats(shape, plan), "partial");
      auto counters = upload(std::vector<float>(std::max<size_t>(1, ops::flash_counter_words(shape, plan)), 0.0f),
                             "counters");
      const float scale = float(1.0 / std::sqrt(double(c.Dh)));
      run_once(vk, [&](gpu::Recorder& rec) {
        auto prepare = [&](const gpu::Buffer& k, const gpu::Buffer& v) {
          return ops::QkvPrepare{gp,   qv, kv, vv, norm ? &gqw : nullptr, norm ? &gkw : nullptr, kind, 1e-6f,
                                 table, c.rotary, c.style, ops::GateTarget::none, ops::Gate{},
                                 gq,   k,  v,  seq, c.past};
        };
        const ops::QkvPrepare a = prepare(ka, va), b = prepare(kb, vb);
        CHECK(ops::flash_prepares_in_decode(ctx.device(), shape, plan, b));
        ops::qkv_prepare(vk, rec, a, uint32_t(BT), c.T, c.H, c.KV, c.Dh, st);
        ops::flash_attention(vk, rec, {gq, ka, va, nullptr, nullptr, {}, oa, &partial, &counters}, shape, plan, true,
                             scale, st);
        ops::flash_attention(vk, rec, {gq, kb, vb, nullptr, nullptr, {}, ob, &partial, &counters, &b}, shape, plan,
                             true, scale, st);
      });
      auto as_double = [](const std::vector<float>& x) { return std::vector<double>(x.begin(), x.end()); };
      const size_t n = BT * c.H * c.Dh;
      // fp16: the two passes round q to fp16 between them, the folded kernel does not.
      check_close(test::download_stored(*this, ob, n, half), as_double(test::download_stored(*this, oa, n, half)),
                  half ? 1e-5 : 1e-11);
      check_close(test::download_stored(*this, kb, cache, half), as_double(test::download_stored(*this, ka, cache, half)),
                  half ? 1e-7 : 1e-11);
      check_close(test::download_stored(*this, vb, cache, half), as_double(test::download_stored(*this, va, cache, half)),
                  0.0);
    }
  }
}

TEST_CASE_FIXTURE(test::GpuTest, "softmax: scaled, causal, additive mask, fully masked rows give zeros") {
  struct Case {
    uint32_t B, H, T, S;
    bool causal, mask;
  };
  const Case cases[] = {{3, 2, 5, 5, true, false},  {1, 4, 1, 1, true, false},    {2, 3, 7, 12, true, true},
                        {1, 2, 37, 37, false, true}, {2, 1, 3, 300, false, false}, {1, 1, 4, 1030, true, false},
                        {2, 2, 9, 64, true, true}};
  const float inf = std::numeric_limits<float>::infinity();
  for (const Case& c : cases) {
    CAPTURE(c.T);
    CAPTURE(c.S);
    const auto s = random(size_t(c.B) * c.H * c.T * c.S, 4.0f);
    std::vector<float> mask;
    if (c.mask) {
      mask = random(size_t(c.B) * c.T * c.S);
      for (size_t i = 0; i < mask.size(); i += 3) mask[i] = -inf;
      for (uint32_t k = 0; k < c.S; ++k) mask[k] = -inf;  // batch 0, query 0: every key masked
      // Query 1: the first 8 keys masked, so some lanes see only −inf before a finite score.
      if (c.T > 1)
        for (uint32_t k = 0; k < std::min(c.S - 1, 8u); ++k) mask[c.S + k] = -inf;
    }
    auto gs = upload(s, "scores");
    auto gm = upload(c.mask ? mask : std::vector<float>{0}, "mask");
    run_once(vk, [&](gpu::Recorder& rec) {
      ops::softmax(vk, rec, {.scores = gs, .batch = c.B, .heads = c.H, .tokens = c.T, .keys = c.S, .causal = c.causal,
                             .scale = 0.125f, .mask = c.mask ? &gm : nullptr});
    });
    check_close(download(gs, s.size()), reference::softmax(s, c.B, c.H, c.T, c.S, 0.125, c.causal, mask));
  }
}

TEST_CASE_FIXTURE(test::GpuTest, "attention: scores, softmax and P·V with MHA, GQA and MQA") {
  struct Case {
    uint32_t B, H, KV, T, S, Dh;
    bool causal;
  };
  // The two before the last are tall enough for the CPU kernels to skip
  // causally masked tiles (64 rows × 64 keys), with and without a cache before
  // the new tokens; the last three are decode steps over a cache, where the
  // query heads of each KV group run as the rows of one product, and a
  // chunk of 3 tokens after 8 cached (on CPU drivers the products of up to
  // 8 rows take attention.comp's ROWS_CPU, which computes the causally
  // masked scores that the softmax then zeroes).
  // (CPU drivers: the register tiles of up to 64 rows, whatever the test
  // command's VKGATE_CPU_GEMM_ROWS.)
  test::ScopedTuning tuning(ctx);
  tuning->cpu_gemm_rows = gpu::Tuning{}.cpu_gemm_rows;
  const Case cases[] = {{2, 4, 4, 9, 9, 64, true},    {3, 6, 2, 5, 5, 80, false},  {1, 4, 1, 1, 1, 128, true},
                        {1, 2, 1, 17, 22, 256, true},  {2, 8, 2, 33, 33, 64, false}, {1, 2, 1, 200, 200, 64, true},
                        {1, 2, 2, 130, 300, 64, true}, {2, 12, 3, 1, 70, 80, true},  {1, 8, 1, 1, 37, 48, true},
                        {2, 4, 2, 3, 11, 64, true}};
  // Score rows S apart, and padded to whole vec4s as a model's cache keeps them
  // (ROWS_CPU's P·V reads them as vec4s).
  for (const Case& c : cases)
    for (const uint32_t L : {c.S, (c.S + 3) / 4 * 4}) {
      CAPTURE(c.H);
      CAPTURE(c.KV);
      CAPTURE(c.T);
      CAPTURE(c.Dh);
      CAPTURE(L);
      const auto q = random(size_t(c.B) * c.H * c.T * c.Dh), k = random(size_t(c.B) * c.KV * c.S * c.Dh),
                 v = random(size_t(c.B) * c.KV * c.S * c.Dh);
      auto gq = upload(q, "q"), gk = upload(k, "k"), gv = upload(v, "v");
      auto gs = poisoned(size_t(c.B) * c.H * c.T * L, "scores"), go = poisoned(q.size(), "out");
      ops::AttentionShape shape{c.B, c.H, c.KV, c.T, c.S, c.Dh};
      shape.score_stride = L;
      const double scale = 1.0 / std::sqrt(double(c.Dh));
      run_once(vk, [&](gpu::Recorder& rec) {
        ops::attention_scores(vk, rec, gq, gk, gs, shape, ops::Storage::f32, c.causal);
        ops::softmax(vk, rec, {.scores = gs, .batch = c.B, .heads = c.H, .tokens = c.T, .keys = c.S, .causal = c.causal,
                               .scale = float(scale), .ld = L});
        ops::attention_values(vk, rec, gs, gv, go, shape, ops::Storage::f32, c.causal);
      });
      check_close(download(go, q.size()),
                  reference::attention(q, k, v, c.B, c.H, c.KV, c.T, c.S, c.Dh, scale, c.causal, {}));
    }
}

TEST_CASE_FIXTURE(test::GpuTest, "gate: headwise and elementwise sigmoid gates, rows of y dense or a stride apart") {
  const uint32_t rows = 7, H = 3, Dh = 80, ld = H * Dh + 16;
  for (uint32_t gw : {1u, Dh})
    for (uint32_t y_stride : {0u, ld}) {
      CAPTURE(gw);
      CAPTURE(y_stride);
      const auto y = random(size_t(rows) * H * Dh), g = random(size_t(rows) * H * gw, 3.0f);
      const uint32_t row = y_stride ? y_stride : H * Dh;
      // Strided rows: the gaps hold NaN and must stay untouched.
      std::vector<float> spread(size_t(rows) * row, std::numeric_limits<float>::quiet_NaN());
      for (uint32_t r = 0; r < rows; ++r) std::copy_n(y.begin() + long(r) * H * Dh, H * Dh, spread.begin() + long(r) * row);
      auto gy = upload(spread, "y"), gg = upload(g, "g");
      ops::Gate gating;
      gating.view = ops::btd_view(rows, H, gw);
      gating.width = gw;
      gating.heads = H;
      run_once(vk, [&](gpu::Recorder& rec) {
        ops::gate(vk, rec, {.g = gg, .gating = gating, .y = gy, .y_view = {0, 0, row, 1, Dh, 0}, .rows = rows,
                            .tokens = rows, .heads = H, .dim = Dh});
      });
      const auto got = download(gy, spread.size());
      std::vector<float> dense;
      for (uint32_t r = 0; r < rows; ++r) {
        dense.insert(dense.end(), got.begin() + long(r) * row, got.begin() + long(r) * row + H * Dh);
        CHECK(std::all_of(got.begin() + long(r) * row + H * Dh, got.begin() + long(r + 1) * row,
                          [](float x) { return std::isnan(x); }));
      }
      check_close(dense, reference::gate(y, g, rows, H, Dh, gw));
    }
}

TEST_CASE_FIXTURE(test::GpuTest, "matmul: fp16 and bf16 storage, tensor cores where the device has them") {
  if (!ctx.device().storage16) {
    MESSAGE("skipped: the device has no 16-bit storage buffers");
    return;
  }
  if (!ctx.device().coopmat_f16 && !ctx.device().coopmat_f16_khr)
    MESSAGE("cooperative-matrix path skipped: " << ctx.device().name
                                                << " has no usable VK_NV_cooperative_matrix or VK_KHR_cooperative_matrix"
                                                   " fp16 shape (scalar fp16 tested)");
  struct Shape {
    uint32_t M, N, K;
    bool bias, residual, y_f32;
  };
  // The first three fit the tensor-core tiles (multiples of 128), the fourth
  // does not; the last three are decode-sized (1 to 3 rows; K 1096 runs the
  // matrix-vector kernel's unrolled loop and its tail).
  const Shape shapes[] = {{128, 256, 256, false, false, true}, {256, 128, 1024, true, true, true},
                          {128, 384, 64, true, false, false},  {33, 70, 100, false, true, true},
                          {1, 45, 64, true, false, true},      {3, 20, 96, false, true, false},
                          {2, 40, 1096, true, false, true}};
  // CPU drivers: f16's register tiles of 32 rows, bf16's of 64, whatever the
  // test command's VKGATE_CPU_GEMM_ROWS (tools/quickstart.sh).
  test::ScopedTuning tuning(ctx);
  tuning->cpu_gemm_rows = gpu::Tuning{}.cpu_gemm_rows;
  for (ops::Storage st : {ops::Storage::f16, ops::Storage::bf16})
    for (const Shape& s : shapes) {
      CAPTURE(s.M);
      CAPTURE(s.N);
      CAPTURE(s.K);
      auto round = [&](std::vector<float> v, std::vector<uint16_t>& bits) {
        for (float& x : v) {
          bits.push_back(st == ops::Storage::f16 ? float_to_half(x) : float_to_bf16(x));
          x = st == ops::Storage::f16 ? half_to_float(bits.back()) : bf16_to_float(bits.back());
        }
        return v;
      };
      std::vector<uint16_t> xb, wb;
      const auto x = round(random(size_t(s.M) * s.K), xb), w = round(random(size_t(s.N) * s.K, 0.05f), wb);
      const auto b = random(s.N), r = random(size_t(s.M) * s.N);
      auto gx = device(xb.size() / 2 + 1, "x"), gw = device(wb.size() / 2 + 1, "w");
      gpu::upload(vk, gx, xb.data(), xb.size() * 2);
      gpu::upload(vk, gw, wb.data(), wb.size() * 2);
      auto gb = upload(b, "b"), gr = upload(r, "r");
      auto gy = poisoned(size_t(s.M) * s.N, "y");
      run_once(vk, [&](gpu::Recorder& rec) {
        ops::matmul(vk, rec, {.x = gx, .w = gw, .y = gy, .M = s.M, .N = s.N, .K = s.K, .s = st,
                              .bias = s.bias ? &gb : nullptr, .residual = s.residual ? &gr : nullptr,
                              .y_f32 = s.y_f32});
      });
      auto want = reference::linear(x, w, s.bias ? b : std::vector<float>{}, s.M, s.N, s.K);
      if (s.residual)
        for (size_t i = 0; i < want.size(); ++i) want[i] += r[i];
      std::vector<float> got(want.size());
      if (s.y_f32) {
        got = download(gy, want.size());
      } else {
        std::vector<uint16_t> yb(want.size());
        gpu::download(vk, gy, yb.data(), yb.size() * 2);
        for (size_t i = 0; i < yb.size(); ++i) got[i] = st == ops::Storage::f16 ? half_to_float(yb[i]) : bf16_to_float(yb[i]);
      }
      check_close(got, want, st == ops::Storage::f16 ? 1e-5 : 1e-4);
    }
}

// Every tile the sweep (`vkgate bench --op matmul --tiles all`) may pick as a
// device's default, on tensor cores; CPU drivers run the emulation of a few
// (its pipelines JIT-compile slowly), with 16 k per slice as ops::matmul does.
TEST_CASE_FIXTURE(test::GpuTest, "matmul: the staged tensor-core kernel at each candidate tile") {
  gpu::Coopmat kind = ops::coopmat_usable(vk.info, gpu::Coopmat::tensor);
  if (kind == gpu::Coopmat::off) kind = ops::coopmat_usable(vk.info, gpu::Coopmat::emulated);
  if (kind == gpu::Coopmat::off) {
    MESSAGE("skipped: " << ctx.device().name << " has neither tensor cores nor the CPU driver's emulation");
    return;
  }
  const uint32_t M = 256, N = 256, K = 128;  // whole tiles of every candidate
  std::vector<float> x = random(size_t(M) * K), w = random(size_t(N) * K, 0.05f);
  const auto b = random(N), r = random(size_t(M) * N);
  auto gx = upload_half(*this, x, "x"), gw = upload_half(*this, w, "w");
  auto gb = upload(b, "b"), gr = upload(r, "r");
  auto want = reference::linear(x, w, b, M, N, K);
  for (size_t i = 0; i < want.size(); ++i) want[i] += r[i];
  auto tiles = ops::staged_tile_candidates();
  if (kind == gpu::Coopmat::emulated) tiles.resize(3);
  for (const gpu::StagedTile& chosen : tiles) {
    const gpu::StagedTile tile = ops::staged_tile_run(chosen, kind);
    CAPTURE(tile.name());
    const std::string misfit = ops::staged_tile_misfit(vk.info, tile, kind, M, N, K, K, K);
    if (!misfit.empty()) {
      MESSAGE("tile " << tile.name() << " skipped on " << ctx.device().name << ": " << misfit);
      continue;
    }
    gpu::Tuning t = vk.tuning;
    t.coopmat_staged = kind;
    t.staged_tile = tile;
    t.cpu_matmul = false;
    for (bool y_f32 : {true, false}) {
      CAPTURE(y_f32);
      // NaN in every element, as floats or as halves.
      auto gy = poisoned(size_t(M) * N, "y");
      if (!y_f32) {
        const std::vector<uint16_t> nan(size_t(M) * N, 0x7e00);
        gpu::upload(vk, gy, nan.data(), nan.size() * 2);
      }
      gpu::Recorder rec(vk, t);
      rec.begin();
      ops::matmul(vk, rec, {.x = gx, .w = gw, .y = gy, .M = M, .N = N, .K = K, .s = ops::Storage::f16, .bias = &gb,
                            .residual = &gr, .y_f32 = y_f32});
      rec.end();
      rec.submit("test");
      std::vector<float> got(want.size());
      if (y_f32) {
        got = download(gy, want.size());
      } else {
        std::vector<uint16_t> yb(want.size());
        gpu::download(vk, gy, yb.data(), yb.size() * 2);
        for (size_t i = 0; i < yb.size(); ++i) got[i] = half_to_float(yb[i]);
      }
      check_close(got, want, 1e-5);
    }
  }
}

}  // namespace test_ops
