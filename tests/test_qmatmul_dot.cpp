// ops::quantize_q8 and ops::qmatmul_dot (shaders/quantize_q8.comp,
// shaders/qmatmul_dot.comp): activations quantized per 32-element block to
// int8, multiplied by Q8_0/Q4_0 weights with integer dot products. Checked
// (a) within the stated bound of the double product on the dequantized
// weights, |Δy| ≤ Σ_blocks max|x_b|/254 · Σ_{i∈b} |w_i|, and (b) equal, up to
// fp32 rounding, to the double product of the device's own quantized X (read
// back) with the dequantized weights: the integer sums are exact.
#include "doctest.hpp"

#include <cmath>
#include <cstring>

#include "harness.hpp"
#include "nn/storage.hpp"
#include "ops/qmatmul_dot.hpp"
#include "vkgate/quant.hpp"

namespace test_qmatmul_dot {

using namespace vkgate;

namespace {

// X [M, ldx] stored as `s` on the device, and the values the device reads.
gpu::Buffer upload_x(test::GpuTest& t, std::vector<float>& x, ops::Storage s) {
  if (s == ops::Storage::f32) return t.upload(x, "x");
  std::vector<std::byte> bytes(x.size() * 2);
  nn::encode(x, s, bytes.data());
  x = nn::decode(bytes.data(), x.size(), s);
  bytes.resize((bytes.size() + 3) / 4 * 4);
  gpu::Buffer b = t.device(bytes.size() / 4, "x");
  gpu::upload(t.vk, b, bytes.data(), bytes.size());
  return b;
}

// The quantized X as the device wrote it (ops::q8_scales_at's layout).
struct Q8 {
  std::vector<int8_t> q;   // [M, K]
  std::vector<float> d;    // [M, K/32]
};
Q8 read_q8(test::GpuTest& t, const gpu::Buffer& b, uint32_t M, uint32_t K) {
  std::vector<uint32_t> words(ops::q8_bytes(M, K) / 4);
  gpu::download(t.vk, b, words.data(), words.size() * 4);
  Q8 r;
  r.q.resize(size_t(M) * K);
  std::memcpy(r.q.data(), words.data(), r.q.size());
  r.d.resize(size_t(M) * (K / 32));
  std::memcpy(r.d.data(), words.data() + ops::q8_scales_at(M, K), r.d.size() * 4);
  return r;
}

gpu::Buffer q8_buffer(test::GpuTest& t, uint32_t M, uint32_t K) {
  return t.poisoned(ops::q8_bytes(M, K) / 4, "x (int8 blocks)");
}

const char* storage_name(ops::Storage s) { return s == ops::Storage::f32 ? "f32" : s == ops::Storage::f16 ? "f16" : "bf16"; }

}  // namespace

TEST_CASE_FIXTURE(test::GpuTest, "quantize_q8: per 32-element block d = max|x|/127 and q = round(x/d), f32 f16 bf16 activations") {
  const uint32_t M = 3, K = 96;
  for (const ops::Storage s : {ops::Storage::f32, ops::Storage::f16, ops::Storage::bf16}) {
    if (s != ops::Storage::f32 && !vk.info.storage16) continue;
    for (const uint32_t ldx : {K + 8, K + 2}) {  // texel rows on CPU drivers (a multiple of 4), and not
      CAPTURE(storage_name(s));
      CAPTURE(ldx);
      // The gaps between rows NaN: a read past K shows in the scales.
      std::vector<float> x(size_t(M) * ldx, std::numeric_limits<float>::quiet_NaN());
      const std::vector<float> v = random(size_t(M) * K, 3.0f);
      for (uint32_t m = 0; m < M; ++m) std::copy_n(v.begin() + long(m) * K, K, x.begin() + long(m) * ldx);
      std::fill_n(x.begin() + ldx + 32, 32, 0.0f);  // a zero block: d = 0, q = 0
      x[2 * ldx + 5] = 1e4f;                        // one large element: the rest of its block rounds to 0
      gpu::Buffer gx = upload_x(*this, x, s), gq = q8_buffer(*this, M, K);
      test::run_once(vk, [&](gpu::Recorder& rec) {
        ops::quantize_q8(vk, rec, {.x = gx, .q = gq, .M = M, .K = K, .s = s, .ldx = ldx});
      });
      const Q8 got = read_q8(*this, gq, M, K);
      for (uint32_t m = 0; m < M; ++m)
        for (uint32_t b = 0; b < K / 32; ++b) {
          CAPTURE(m);
          CAPTURE(b);
          float amax = 0;
          for (uint32_t i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(x[size_t(m) * ldx + 32 * b + i]));
          const float d = got.d[size_t(m) * (K / 32) + b];
          REQUIRE(d == amax * (1.0f / 127.0f));  // an fp32 product: the same bits on any device
          for (uint32_t i = 0; i < 32; ++i) {
            const double xv = x[size_t(m) * ldx + 32 * b + i];
            const int q = got.q[size_t(m) * K + 32 * b + i];
            CHECK(std::abs(q) <= 127);
            if (d == 0) {
              CHECK(q == 0);
              continue;
            }
            // round(x/d), ties either way: |x/d − q| ≤ ½ up to the rounding of x/d.
            CHECK(std::fabs(xv / d - q) <= 0.5 + 1e-5 * std::fabs(xv / d));
          }
        }
    }
  }
}

TEST_CASE_FIXTURE(test::GpuTest, "qmatmul_dot: Q8_0 and Q4_0 on int8 blocks of X, decode rows and tiles, within the int8 bound and exact on the quantized X") {
  if (!vk.info.integer_dot_product) {
    MESSAGE("skipped: " << vk.info.name << " has no shaderIntegerDotProduct");
    return;
  }
  struct Shape {
    uint32_t M, N, K;
  };
  for (const Shape sh : {Shape{1, 75, 256}, Shape{3, 37, 96}, Shape{8, 41, 320}, Shape{33, 37, 256}}) {
    for (const DType f : {DType::Q8_0, DType::Q4_0}) {
      for (const ops::Storage st : {ops::Storage::f32, ops::Storage::f16, ops::Storage::bf16}) {
        if (st != ops::Storage::f32 && !vk.info.storage16) continue;
        // Each storage, format and row count compiles a pipeline (seconds each on a CPU
        // driver): bf16 on one decode shape, the 33-row register tile in f32.
        if ((st == ops::Storage::bf16 && sh.M != 3) || (sh.M == 33 && st != ops::Storage::f32)) continue;
        CAPTURE(sh.M);
        CAPTURE(sh.N);
        CAPTURE(sh.K);
        CAPTURE(to_string(f));
        CAPTURE(storage_name(st));
        const uint32_t ldx = sh.K + 8, K = sh.K, M = sh.M, N = sh.N, nb = K / 32;
        std::vector<float> x(size_t(M) * ldx, std::numeric_limits<float>::quiet_NaN());
        const std::vector<float> xv = random(size_t(M) * K);
        for (uint32_t m = 0; m < M; ++m) std::copy_n(xv.begin() + long(m) * K, K, x.begin() + long(m) * ldx);
        std::vector<float> w = random(size_t(N) * K, 0.05f);
        std::vector<std::byte> wq = quantize(f, w);
        dequantize(f, wq, w);  // the values the device multiplies
        wq.resize(wq.size() + ops::qmatmul_padding);
        const auto b = random(N), r = random(size_t(M) * N);
        gpu::Buffer gx = upload_x(*this, x, st), gq = q8_buffer(*this, M, K);
        gpu::Buffer gw = vk.allocator->allocate(wq.size(), gpu::MemoryKind::device, "w");
        gpu::upload(vk, gw, wq.data(), wq.size());
        auto gb = upload(b, "b"), gr = upload(r, "r"), gy = poisoned(size_t(M) * N, "y");
        test::run_once(vk, [&](gpu::Recorder& rec) {
          ops::quantize_q8(vk, rec, {.x = gx, .q = gq, .M = M, .K = K, .s = st, .ldx = ldx});
          ops::qmatmul_dot(vk, rec, {.x = gq, .w = gw, .wtype = f, .y = gy, .M = M, .N = N, .K = K, .s = st,
                                     .bias = &gb, .residual = &gr, .y_f32 = true});
        });
        const std::vector<float> got = download(gy, size_t(M) * N);
        const Q8 q8 = read_q8(*this, gq, M, K);
        size_t outside = 0, inexact = 0;
        double worst = 0;  // the largest error as a share of its bound
        for (uint32_t m = 0; m < M; ++m)
          for (uint32_t n = 0; n < N; ++n) {
            const double base = double(b[n]) + r[size_t(m) * N + n];
            double exact = base, quantized = base, bound = 0, magnitude = std::fabs(base);
            for (uint32_t blk = 0; blk < nb; ++blk) {
              double amax = 0, wsum = 0;
              for (uint32_t i = 0; i < 32; ++i) {
                const size_t k = 32 * blk + i;
                const double xe = x[size_t(m) * ldx + k], we = w[size_t(n) * K + k];
                const double xq = double(q8.d[size_t(m) * nb + blk]) * q8.q[size_t(m) * K + k];
                exact += xe * we;
                quantized += xq * we;
                magnitude += std::fabs(xq * we);
                amax = std::max(amax, std::fabs(xe));
                wsum += std::fabs(we);
              }
              bound += amax / 254 * wsum;
            }
            const double y = got[size_t(m) * N + n];
            // fp32 rounding: the per-block products and the sum over blocks and lanes.
            const double rounding = 4e-6 * magnitude;
            if (!(std::fabs(y - exact) <= bound + rounding)) ++outside;
            if (!(std::fabs(y - quantized) <= rounding)) ++inexact;
            worst = std::max(worst, std::fabs(y - exact) / bound);
          }
        CHECK(outside == 0);
        CHECK(inexact == 0);
        CHECK(worst > 0.01);  // the int8 path ran, not the fp32 product
      }
    }
  }
}

TEST_CASE_FIXTURE(test::GpuTest, "qmatmul_dot: a fused projection's Q8_0 and Q4_0 parts write their own columns, with the dense gate") {
  if (!vk.info.integer_dot_product) return;
  const uint32_t K = 128, N = 40;
  const DType formats[] = {DType::Q8_0, DType::Q4_0};
  const uint32_t rows[] = {24, 16};
  for (const uint32_t M : {2u, 12u}) {
    CAPTURE(M);
    const auto x = random(size_t(M) * K), bias = random(N), scores = random(size_t(M) * N);
    auto gx = upload(x, "x"), gb = upload(bias, "b"), gs = upload(scores, "scores"), gq = q8_buffer(*this, M, K);
    auto gy = poisoned(size_t(M) * N, "y");
    std::vector<std::vector<float>> w;
    std::vector<gpu::Buffer> gw;
    for (int i = 0; i < 2; ++i) {
      w.push_back(random(size_t(rows[i]) * K, 0.05f));
      std::vector<std::byte> bytes = quantize(formats[i], w.back());
      dequantize(formats[i], bytes, w.back());
      bytes.resize(bytes.size() + ops::qmatmul_padding);
      gw.push_back(vk.allocator->allocate(bytes.size(), gpu::MemoryKind::device, "w"));
      gpu::upload(vk, gw.back(), bytes.data(), bytes.size());
    }
    const ops::EpilogueGate gate{gs, 0, N, GateActivation::sigmoid, GateCombine::multiply};
    test::run_once(vk, [&](gpu::Recorder& rec) {
      ops::quantize_q8(vk, rec, {.x = gx, .q = gq, .M = M, .K = K});
      for (uint32_t i = 0, col0 = 0; i < 2; col0 += rows[i], ++i)
        ops::qmatmul_dot(vk, rec, {.x = gq, .w = gw[i], .wtype = formats[i], .y = gy, .M = M, .N = rows[i], .K = K,
                                   .bias = &gb, .ldy = N, .col0 = col0, .gate = &gate});
    });
    const Q8 q8 = read_q8(*this, gq, M, K);
    std::vector<double> want(size_t(M) * N);
    for (uint32_t m = 0; m < M; ++m)
      for (uint32_t i = 0, col = 0; i < 2; ++i)
        for (uint32_t n = 0; n < rows[i]; ++n, ++col) {
          double acc = bias[col];
          for (uint32_t k = 0; k < K; ++k)
            acc += double(q8.d[size_t(m) * (K / 32) + k / 32]) * q8.q[size_t(m) * K + k] * w[i][size_t(n) * K + k];
          want[size_t(m) * N + col] = acc / (1.0 + std::exp(-double(scores[size_t(m) * N + col])));
        }
    test::check_close(download(gy, want.size()), want, 1e-11);
  }
}

TEST_CASE_FIXTURE(test::GpuTest, "qmatmul_dot: other formats, partial blocks and short buffers are refused") {
  auto gq = q8_buffer(*this, 1, 64), gy = poisoned(64, "y");
  gpu::Buffer gw = vk.allocator->allocate(64, gpu::MemoryKind::device, "w");
  gpu::Recorder rec(vk);
  rec.begin();
  CHECK_THROWS_WITH_AS(ops::qmatmul_dot(vk, rec, {.x = gq, .w = gw, .wtype = DType::Q4_K, .y = gy, .M = 1, .N = 1, .K = 256}),
                       doctest::Contains("the int8 product takes Q8_0 and Q4_0"), Error);
  CHECK_THROWS_WITH_AS(ops::quantize_q8(vk, rec, {.x = gy, .q = gq, .M = 1, .K = 48}),
                       doctest::Contains("multiple of 32"), Error);
  CHECK_THROWS_WITH_AS(ops::quantize_q8(vk, rec, {.x = gy, .q = gq, .M = 2, .K = 64}),
                       doctest::Contains("bytes, "), Error);
  if (vk.info.integer_dot_product)
    CHECK_THROWS_WITH_AS(ops::qmatmul_dot(vk, rec, {.x = gq, .w = gw, .wtype = DType::Q8_0, .y = gy, .M = 1, .N = 2, .K = 64}),
                         doctest::Contains("'w' holds 64 bytes"), Error);
  rec.end();
}

}  // namespace test_qmatmul_dot
