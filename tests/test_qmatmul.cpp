// ops::qmatmul (shaders/qmatmul.comp): products with weights in ggml's block
// formats, read as stored and dequantized on the device, against the double
// product with the host's dequantization (vkgate/quant.hpp) of the same bytes.
#include "doctest.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <iterator>
#include <optional>
#include <span>

#include "harness.hpp"
#include "nn/storage.hpp"
#include "ops/qmatmul.hpp"
#include "vkgate/quant.hpp"
#include "vkgate/reference_model.hpp"

namespace test_qmatmul {

using namespace vkgate;

namespace {

const DType kFormats[] = {DType::Q8_0, DType::Q4_0, DType::Q4_1,   DType::Q5_0,   DType::Q5_1, DType::Q2_K,
                          DType::Q3_K, DType::Q4_K, DType::Q5_K,   DType::Q6_K,   DType::F32,  DType::F16,
                          DType::BF16, DType::IQ4_NL, DType::IQ4_XS};

// w [rows, K] in `f` (a block format via quantize, or a float format) and the
// values the device should see, padded as ops::qmatmul reads.
struct Stored {
  std::vector<std::byte> bytes;
  std::vector<float> values;
};
Stored store(DType f, const std::vector<float>& w) {
  Stored s;
  if (is_quantized(f)) {
    s.bytes = quantize(f, w);
    s.values.resize(w.size());
    dequantize(f, s.bytes, s.values);
  } else {
    const ops::Storage st = f == DType::F32 ? ops::Storage::f32 : f == DType::F16 ? ops::Storage::f16 : ops::Storage::bf16;
    s.bytes.resize(w.size() * ops::element_bytes(st));
    nn::encode(w, st, s.bytes.data());
    s.values = nn::decode(s.bytes.data(), w.size(), st);
  }
  s.bytes.resize(s.bytes.size() + ops::qmatmul_padding);
  return s;
}

struct Shape {
  uint32_t M, N, K;
};
// y = x·wᵀ + b + r through ops::qmatmul with the Context's tuning, for every
// format and activation storage, against the double product of the weights
// the device should see. x's rows are 8 elements apart from K, the gaps NaN:
// an element read past K shows.
struct QmatmulTest : test::GpuTest {
  void check_formats(std::initializer_list<Shape> shapes, std::span<const DType> formats = kFormats,
                     std::initializer_list<ops::Storage> storages = {ops::Storage::f32, ops::Storage::f16});
};
void QmatmulTest::check_formats(std::initializer_list<Shape> shapes, std::span<const DType> formats,
                                std::initializer_list<ops::Storage> storages) {
  for (const Shape sh : shapes) {
    for (const DType f : formats) {
      if (sh.K % block_elements(f) != 0) continue;
      for (const ops::Storage st : storages) {
        if (st == ops::Storage::f16 && !vk.info.storage16) continue;
        CAPTURE(sh.M);
        CAPTURE(sh.N);
        CAPTURE(sh.K);
        CAPTURE(to_string(f));
        CAPTURE(int(st));
        const uint32_t ldx = sh.K + 8;
        std::vector<float> x(size_t(sh.M) * ldx, std::numeric_limits<float>::quiet_NaN());
        const std::vector<float> xv = random(size_t(sh.M) * sh.K);
        for (uint32_t m = 0; m < sh.M; ++m) std::copy_n(xv.begin() + long(m) * sh.K, sh.K, x.begin() + long(m) * ldx);
        const Stored w = store(f, random(size_t(sh.N) * sh.K, 0.05f));
        const auto b = random(sh.N), r = random(size_t(sh.M) * sh.N);
        gpu::Buffer gx = st == ops::Storage::f16 ? test::upload_half(*this, x, "x") : upload(x, "x");
        gpu::Buffer gw = vk.allocator->allocate(w.bytes.size(), gpu::MemoryKind::device, "w");
        gpu::upload(vk, gw, w.bytes.data(), w.bytes.size());
        auto gb = upload(b, "b"), gr = upload(r, "r"), gy = poisoned(size_t(sh.M) * sh.N, "y");
        test::run_once(vk, [&](gpu::Recorder& rec) {
          ops::qmatmul(vk, rec, {.x = gx, .w = gw, .wtype = f, .y = gy, .M = sh.M, .N = sh.N, .K = sh.K, .s = st,
                                 .bias = &gb, .residual = &gr, .y_f32 = true, .ldx = ldx});
        });
        std::vector<double> want(size_t(sh.M) * sh.N);
        for (uint32_t m = 0; m < sh.M; ++m)
          for (uint32_t n = 0; n < sh.N; ++n) {
            double acc = b[n] + r[size_t(m) * sh.N + n];
            for (uint32_t k = 0; k < sh.K; ++k)
              acc += double(x[size_t(m) * ldx + k]) * double(w.values[size_t(n) * sh.K + k]);
            want[size_t(m) * sh.N + n] = acc;
          }
        test::check_close(download(gy, want.size()), want);
      }
    }
  }
}
}  // namespace

TEST_CASE_FIXTURE(QmatmulTest, "qmatmul: every format, decode rows and tiles, equals the double product of the dequantized weights") {
  check_formats({{1, 70, 512}, {5, 33, 256}, {40, 70, 512}, {8, 9, 768}});
}

// The GPU decode kernels (qmatmul.comp's SLICE_ROWS at each swept tile, and
// ROWS) on every device: CPU drivers take them without their own kernels.
// Every format on the default tile; on the others two (a 2-byte-aligned
// block, a whole 16-byte one) with fp16 activations: each pipeline compiles
// per format and storage, and lavapipe takes up to 3 s for one. 70 columns leave a
// workgroup partly empty; K 2304 gives a 32-lane subgroup a second pass over
// its slices, an unroll of 2 a partial one.
TEST_CASE_FIXTURE(QmatmulTest, "qmatmul: the GPU decode kernel at every tile") {
  test::ScopedTuning tuning(ctx);
  tuning->cpu_matmul = false;
  const DType some[] = {DType::Q8_0, DType::Q4_K};
  for (const gpu::QrowsTile& tile : ops::qrows_tile_candidates()) {
    CAPTURE(tile.name());
    tuning->qrows_tile = tile;
    if (tile == gpu::QrowsTile{})
      check_formats({{1, 70, 2304}, {3, 33, 256}, {8, 9, 768}});
    else
      check_formats({{1, 70, 2304}, {8, 9, 768}}, some, {ops::Storage::f16});
  }
}

// The GPUs' prefill tiles (shared memory, dequant8 per 8-element chunk),
// which CPU drivers leave to their own kernels: every block format once.
TEST_CASE_FIXTURE(QmatmulTest, "qmatmul: the GPU prefill tiles in every block format") {
  test::ScopedTuning tuning(ctx);
  tuning->cpu_matmul = false;
  std::vector<DType> blocks;
  std::copy_if(std::begin(kFormats), std::end(kFormats), std::back_inserter(blocks), is_quantized);
  check_formats({{40, 70, 512}}, blocks, {ops::Storage::f32});
}

// The quantized decode step's passes: RMSNorm(X)·Wᵀ (+ b), and with the GLU
// act(RMSNorm(X)·W_gᵀ + b_g)·(RMSNorm(X)·W_uᵀ + b_u) into rows a stride apart,
// on the GPU decode kernel (forced on CPU drivers). The reference normalizes
// in double precision and multiplies the weights the device should see.
TEST_CASE_FIXTURE(test::GpuTest, "qmatmul: the input RMSNorm and the MLP's GLU folded into the GPU decode kernel") {
  test::ScopedTuning tuning(ctx);  // whatever the VKGATE_DISABLE_* switches of this run say
  tuning->cpu_matmul = false;
  tuning->pass_fusion = true;
  tuning->qrows_tile = gpu::QrowsTile{};
  if (!vk.info.subgroup_arithmetic) return;
  struct Case {
    DType f;
    uint32_t M, N, K;
    NormKind kind;
    std::optional<Activation> glu;
    uint32_t ldy, col0;  // col0: a part of a fused projection (no GLU)
  };
  const Case cases[] = {{DType::Q4_K, 1, 70, 2304, NormKind::plain, std::nullopt, 70, 0},
                        {DType::Q8_0, 3, 33, 256, NormKind::zero_centered, std::nullopt, 44, 7},
                        {DType::Q4_K, 1, 40, 512, NormKind::plain, Activation::silu, 48, 0},
                        {DType::Q6_K, 8, 9, 256, NormKind::zero_centered, Activation::gelu_tanh, 9, 0},
                        {DType::Q8_0, 2, 70, 2304, NormKind::plain, Activation::gelu, 72, 0}};
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (const Case& c : cases)
    for (const ops::Storage st : {ops::Storage::f32, ops::Storage::f16}) {
      if (st == ops::Storage::f16 && !vk.info.storage16) continue;
      const bool half = st == ops::Storage::f16;
      INFO(to_string(c.f) << ", M " << c.M << ", N " << c.N << ", K " << c.K << (c.glu ? ", GLU" : "")
                          << (half ? ", fp16" : ""));
      REQUIRE(ops::qmatmul_norm_applies(vk.info, vk.tuning, c.f, c.M, c.K));
      const uint32_t rows = c.glu ? 2 * c.N : c.N;
      const auto x = random(size_t(c.M) * c.K, 3.0f), g = random(c.K, 0.5f), b = random(c.col0 + rows);
      const Stored w = store(c.f, random(size_t(rows) * c.K, 0.05f));
      auto gx = upload(x, "x"), gg = upload(g, "norm weight"), gb = upload(b, "b");
      gpu::Buffer gw = vk.allocator->allocate(w.bytes.size(), gpu::MemoryKind::device, "w");
      gpu::upload(vk, gw, w.bytes.data(), w.bytes.size());
      std::vector<float> y_nan(size_t(c.M) * c.ldy, nan);
      auto gy = half ? test::upload_half(*this, y_nan, "y") : upload(y_nan, "y");
      const ops::RowNorm norm{gg, c.kind, 1e-6f};
      test::run_once(vk, [&](gpu::Recorder& rec) {
        ops::qmatmul(vk, rec, {.x = gx, .w = gw, .wtype = c.f, .y = gy, .M = c.M, .N = c.N, .K = c.K, .s = st,
                               .bias = &gb, .ldy = c.ldy, .col0 = c.col0, .norm = &norm, .glu = c.glu});
      });
      const std::vector<float> got = test::download_stored(*this, gy, y_nan.size(), half);
      std::vector<float> written;
      std::vector<double> want;
      for (uint32_t m = 0; m < c.M; ++m) {
        double ss = 0;
        for (uint32_t k = 0; k < c.K; ++k) ss += double(x[size_t(m) * c.K + k]) * x[size_t(m) * c.K + k];
        const double inv = 1.0 / std::sqrt(ss / c.K + 1e-6);
        auto row = [&](uint32_t n) {
          double acc = 0;
          for (uint32_t k = 0; k < c.K; ++k) {
            const double gk = c.kind == NormKind::zero_centered ? 1.0 + g[k] : double(g[k]);
            acc += x[size_t(m) * c.K + k] * inv * gk * w.values[size_t(n) * c.K + k];
          }
          return acc + b[c.col0 + n];
        };
        for (uint32_t n = 0; n < c.N; ++n) {
          written.push_back(got[size_t(m) * c.ldy + c.col0 + n]);
          want.push_back(c.glu ? reference::activation(*c.glu, row(n)) * row(c.N + n) : row(n));
        }
        for (uint32_t n = 0; n < c.ldy; ++n)
          if (n < c.col0 || n >= c.col0 + c.N) CHECK(std::isnan(got[size_t(m) * c.ldy + n]));
      }
      test::check_close(written, want, half ? 1e-6 : 1e-10);
    }
}

TEST_CASE_FIXTURE(test::GpuTest, "qmatmul: the parts of a fused projection in different formats write their own columns") {
  // A Q4_K_M file's layer: q and k in Q4_K, v in Q6_K, and a float part.
  const uint32_t K = 256, M = 3;
  struct Part {
    DType f;
    uint32_t rows;
  };
  for (const uint32_t m_rows : {M, 12u}) {
    CAPTURE(m_rows);
    const Part parts[] = {{DType::Q4_K, 24}, {DType::Q6_K, 8}, {DType::F16, 5}, {DType::Q8_0, 16}};
    uint32_t N = 0;
    for (const Part& p : parts) N += p.rows;
    const auto x = random(size_t(m_rows) * K), b = random(N);
    auto gx = upload(x, "x"), gb = upload(b, "b"), gy = poisoned(size_t(m_rows) * N, "y");
    std::vector<gpu::Buffer> gw;
    std::vector<Stored> ws;
    for (const Part& p : parts) {
      ws.push_back(store(p.f, random(size_t(p.rows) * K, 0.05f)));
      gw.push_back(vk.allocator->allocate(ws.back().bytes.size(), gpu::MemoryKind::device, "w"));
      gpu::upload(vk, gw.back(), ws.back().bytes.data(), ws.back().bytes.size());
    }
    test::run_once(vk, [&](gpu::Recorder& rec) {
      uint32_t col0 = 0;
      for (size_t i = 0; i < gw.size(); ++i) {
        ops::qmatmul(vk, rec, {.x = gx, .w = gw[i], .wtype = parts[i].f, .y = gy, .M = m_rows, .N = parts[i].rows,
                               .K = K, .bias = &gb, .ldy = N, .col0 = col0});
        col0 += parts[i].rows;
      }
    });
    std::vector<double> want(size_t(m_rows) * N);
    for (uint32_t m = 0; m < m_rows; ++m) {
      uint32_t col = 0;
      for (size_t i = 0; i < gw.size(); ++i)
        for (uint32_t n = 0; n < parts[i].rows; ++n, ++col) {
          double acc = b[col];
          for (uint32_t k = 0; k < K; ++k) acc += double(x[size_t(m) * K + k]) * ws[i].values[size_t(n) * K + k];
          want[size_t(m) * N + col] = acc;
        }
    }
    test::check_close(download(gy, want.size()), want);
  }
}

TEST_CASE_FIXTURE(test::GpuTest, "qmatmul: rows that are not whole blocks, or a weight buffer too small, are refused") {
  auto gx = upload(std::vector<float>(64, 1.0f), "x"), gy = poisoned(64, "y");
  gpu::Buffer gw = vk.allocator->allocate(64, gpu::MemoryKind::device, "w");
  gpu::Recorder rec(vk);
  rec.begin();
  CHECK_THROWS_WITH_AS(ops::qmatmul(vk, rec, {.x = gx, .w = gw, .wtype = DType::Q4_K, .y = gy, .M = 1, .N = 1, .K = 64}),
                       doctest::Contains("not a shape its kernel takes"), Error);
  CHECK_THROWS_WITH_AS(ops::qmatmul(vk, rec, {.x = gx, .w = gw, .wtype = DType::Q8_0, .y = gy, .M = 1, .N = 2, .K = 64}),
                       doctest::Contains("'w' holds 64 bytes"), Error);
  rec.end();
}

TEST_CASE("qmatmul: decode tiles are named as VKGATE_QROWS_TILE reads them") {
  for (const gpu::QrowsTile& tile : ops::qrows_tile_candidates()) CHECK(gpu::QrowsTile::parse(tile.name()) == tile);
  CHECK(gpu::QrowsTile::parse("slices2x1") == gpu::QrowsTile{true, 2, 1});
  for (const char* bad : {"", "chunk", "slices", "slices0x1", "slices1x", "slices1x9", "slices1x1z", "slices-1x1"}) {
    CAPTURE(bad);
    CHECK_FALSE(gpu::QrowsTile::parse(bad).has_value());
  }
}

}  // namespace test_qmatmul
