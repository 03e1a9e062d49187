// The ops a whole model adds, against host computations on awkward shapes:
// the MLP's gated product (every activation, padded rows, fp16), the
// embedding gather over table chunks (float and block formats), and the
// device-side statistics.
#include <cmath>
#include <limits>

#include "harness.hpp"
#include "ops/ops.hpp"
#include "ops/qmatmul.hpp"
#include "vkgate/quant.hpp"
#include "vkgate/reference_model.hpp"

namespace test_ops_model {

using namespace vkgate;
using test::check_close;
using test::run_once;
using test::upload_half;

// Each activation's error is judged over all five shapes together: a shape of
// one element alone would make NMSE a relative error on one random value. On
// the CPU kernels a workgroup takes a row, on the GPU ones 256 elements of it.
TEST_CASE_FIXTURE(test::GpuTest, "glu: act(gate)·up for silu, gelu, gelu_tanh and sigmoid, rows a stride apart, fp16") {
  struct Shape {
    uint32_t rows, inter, ld_p, ld_h;
  };
  test::ScopedTuning tuning(ctx);
  for (bool cpu_kernels : {true, false})
  for (Activation act : {Activation::silu, Activation::gelu, Activation::gelu_tanh, Activation::sigmoid})
    for (ops::Storage st : {ops::Storage::f32, ops::Storage::f16}) {
      if (st == ops::Storage::f16 && !vk.info.storage16) continue;
      const bool half = st == ops::Storage::f16;
      INFO("activation " << std::string(to_string(act)) << std::string(half ? ", fp16" : "")
                         << (cpu_kernels ? "" : ", GPU kernels"));
      tuning->cpu_matmul = cpu_kernels;
      std::vector<float> rows_got;
      std::vector<double> want;
      for (const Shape s : {Shape{1, 1, 2, 1}, Shape{7, 33, 66, 40}, Shape{3, 96, 200, 96}, Shape{65, 5, 10, 8},
                            Shape{2, 600, 1210, 604}}) {
        auto p = random(size_t(s.rows) * s.ld_p, 2.0f);
        auto gp = half ? upload_half(*this, p, "proj") : upload(p, "proj");
        const size_t n = size_t(s.rows) * s.ld_h;
        std::vector<float> nan_h(n, std::numeric_limits<float>::quiet_NaN());
        auto gh = half ? upload_half(*this, nan_h, "h") : poisoned(n, "h");
        run_once(vk, [&](gpu::Recorder& rec) { ops::glu(vk, rec, {.proj = gp, .h = gh, .rows = s.rows, .inter = s.inter,
                                                                  .act = act, .s = st, .ld_p = s.ld_p,
                                                                  .ld_h = s.ld_h}); });
        const std::vector<float> got = test::download_stored(*this, gh, n, half);
        for (uint32_t r = 0; r < s.rows; ++r)
          for (uint32_t i = 0; i < s.inter; ++i) {
            rows_got.push_back(got[size_t(r) * s.ld_h + i]);
            want.push_back(reference::activation(act, p[size_t(r) * s.ld_p + i]) * p[size_t(r) * s.ld_p + s.inter + i]);
          }
      }
      check_close(rows_got, want, half ? 1e-6 : 1e-12);
    }
}

// NMSE is blind to small outputs; GELU's negative tail is where 1 + erf(x)
// and 1 + tanh(u) cancel, so each element's relative error is checked there.
TEST_CASE_FIXTURE(test::GpuTest, "glu: every activation keeps its relative accuracy for x in [-8, 8]") {
  const uint32_t inter = 161;
  std::vector<float> p(2 * inter, 1.0f);
  for (uint32_t i = 0; i < inter; ++i) p[i] = -8.0f + 0.1f * float(i);
  for (Activation act : {Activation::silu, Activation::gelu, Activation::gelu_tanh, Activation::sigmoid}) {
    INFO("activation " << std::string(to_string(act)));
    auto gp = upload(p, "proj");
    auto gh = poisoned(inter, "h");
    run_once(vk, [&](gpu::Recorder& rec) { ops::glu(vk, rec, {.proj = gp, .h = gh, .rows = 1, .inter = inter,
                                                              .act = act, .s = ops::Storage::f32, .ld_p = 2 * inter,
                                                              .ld_h = inter}); });
    const auto got = download(gh, inter);
    for (uint32_t i = 0; i < inter; ++i) {
      const double want = reference::activation(act, p[i]);
      CAPTURE(p[i]);
      CHECK(std::abs(got[i] - want) <= 1e-5 * std::abs(want) + 1e-30);
    }
  }
}

TEST_CASE_FIXTURE(test::GpuTest, "embed: rows gathered by id from a table in chunks, each chunk writing only its own ids") {
  const uint32_t V = 37, D = 19, ld = 24, n = 11;
  const auto table = random(size_t(V) * ld);
  std::vector<int32_t> ids(n);
  for (uint32_t i = 0; i < n; ++i) ids[i] = int32_t((i * 17 + 3) % V);
  ids[0] = 0;
  ids[n - 1] = V - 1;
  auto gids = device(n, "ids");
  gpu::upload(vk, gids, ids.data(), n * 4);
  auto gx = poisoned(size_t(n) * D, "x");
  // Chunks of 10, 10, 10 and 7 rows, each its own buffer.
  std::vector<gpu::Buffer> chunks;
  for (uint32_t first = 0; first < V; first += 10)
    chunks.push_back(upload(std::vector<float>(table.begin() + long(first) * ld,
                                               table.begin() + long(std::min(first + 10, V)) * ld),
                            "chunk"));
  run_once(vk, [&](gpu::Recorder& rec) {
    for (uint32_t c = 0; c < chunks.size(); ++c)
      ops::embed(vk, rec, {.ids = gids, .table = chunks[c], .x = gx, .rows = n, .dim = D, .ld = ld, .first = 10 * c,
                           .count = std::min(10u, V - 10 * c), .s = ops::Storage::f32});
  });
  std::vector<double> want;
  for (uint32_t i = 0; i < n; ++i)
    for (uint32_t d = 0; d < D; ++d) want.push_back(table[size_t(ids[i]) * ld + d]);
  check_close(download(gx, size_t(n) * D), want, 0);
}

// A GGUF's quantized token_embd stays in its blocks on the device: the rows
// the ids name are dequantized by the gather (blocks.glsl's dequant8), to the
// very fp32 values the host's dequantize gives. Rows of several blocks (the
// 32-element formats' rows of 3 blocks are only 2-byte aligned: 102 bytes of
// Q8_0), the table in chunks of 10 rows, each its own buffer padded as
// qmatmul reads; ids on the first and last row of the table and of each
// chunk, one repeated; x poisoned with NaN first.
TEST_CASE_FIXTURE(test::GpuTest, "embed_blocks: rows gathered from a table in each block format equal the host's dequantize exactly") {
  const DType formats[] = {DType::Q8_0, DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1,   DType::Q2_K,
                           DType::Q3_K, DType::Q4_K, DType::Q5_K, DType::Q6_K, DType::IQ4_NL, DType::IQ4_XS};
  const uint32_t V = 37, per_chunk = 10;
  const std::vector<int32_t> ids = {0, 36, 9, 10, 19, 20, 29, 30, 5, 36, 17, 0, 33};
  const uint32_t n = uint32_t(ids.size());
  auto gids = device(n, "ids");
  gpu::upload(vk, gids, ids.data(), n * 4);
  for (const DType f : formats) {
    CAPTURE(to_string(f));
    const uint32_t D = block_elements(f) == 32 ? 96 : 512;
    const size_t row_bytes = *stored_bytes(f, D);
    const std::vector<std::byte> blocks = quantize(f, random(size_t(V) * D, 0.5f));
    std::vector<float> values(size_t(V) * D);
    dequantize(f, blocks, values);
    std::vector<gpu::Buffer> chunks;
    for (uint32_t first = 0; first < V; first += per_chunk) {
      const uint32_t count = std::min(per_chunk, V - first);
      std::vector<std::byte> part(blocks.begin() + long(first * row_bytes),
                                  blocks.begin() + long((first + count) * row_bytes));
      part.resize(part.size() + ops::qmatmul_padding, std::byte{0xff});
      chunks.push_back(vk.allocator->allocate(part.size(), gpu::MemoryKind::device, "chunk"));
      gpu::upload(vk, chunks.back(), part.data(), part.size());
    }
    auto gx = poisoned(size_t(n) * D, "x");
    run_once(vk, [&](gpu::Recorder& rec) {
      for (uint32_t c = 0; c < chunks.size(); ++c)
        ops::embed_blocks(vk, rec, {.ids = gids, .table = chunks[c], .x = gx, .rows = n, .dim = D,
                                    .first = per_chunk * c, .count = std::min(per_chunk, V - per_chunk * c),
                                    .format = f});
    });
    const std::vector<float> got = download(gx, size_t(n) * D);
    size_t differ = 0, first_differ = 0;
    for (uint32_t i = 0; i < n; ++i)
      for (uint32_t d = 0; d < D; ++d) {
        const float want = values[size_t(ids[i]) * D + d];
        if (!(got[size_t(i) * D + d] == want) && differ++ == 0) first_differ = size_t(i) * D + d;
      }
    CAPTURE(first_differ);
    CHECK(differ == 0);
  }
}

TEST_CASE_FIXTURE(test::GpuTest, "embed_blocks: a table buffer too small or rows that are not whole blocks are refused") {
  auto gids = device(1, "ids"), gx = device(64, "x");
  const size_t row_bytes = *stored_bytes(DType::Q8_0, 64);
  gpu::Buffer table = vk.allocator->allocate(2 * row_bytes, gpu::MemoryKind::device, "unpadded table");
  gpu::Recorder rec(vk);
  rec.begin();
  // Two rows without the padding the kernel may read past the last block.
  CHECK_THROWS_WITH_AS(ops::embed_blocks(vk, rec, {.ids = gids, .table = table, .x = gx, .rows = 1, .dim = 64,
                                                   .first = 0, .count = 2, .format = DType::Q8_0}),
                       doctest::Contains("bytes"), Error);
  CHECK_THROWS_WITH_AS(ops::embed_blocks(vk, rec, {.ids = gids, .table = table, .x = gx, .rows = 1, .dim = 48,
                                                   .first = 0, .count = 1, .format = DType::Q8_0}),
                       doctest::Contains("whole blocks"), Error);
  CHECK_THROWS_AS(ops::embed_blocks(vk, rec, {.ids = gids, .table = table, .x = gx, .rows = 1, .dim = 64,
                                              .first = 0, .count = 1, .format = DType::F16}),
                  Error);
  rec.end();
}

TEST_CASE_FIXTURE(test::GpuTest, "stats: first-token attention per head, gate scores through a view, max |x|") {
  const uint32_t B = 2, H = 3, T = 5, ld = 9, G = 4;
  auto probs = random(size_t(B) * H * T * ld);
  auto gp = upload(probs, "probs");
  // The gate rows as the official layout places them: [B·T, 2·H·G] with each
  // head's G gates after its G query values.
  const uint32_t cols = 2 * H * G;
  auto proj = random(size_t(B) * T * cols, 3.0f);
  auto gproj = upload(proj, "proj");
  ops::Gate gating;
  gating.view = {G, T * cols, cols, 1, 2 * G, 0};
  gating.width = G;
  gating.heads = H;
  auto x = random(size_t(B) * T * 7);
  x[13] = -42.5f;
  auto gxb = upload(x, "x");
  auto out = poisoned(H + 3, "stats");
  run_once(vk, [&](gpu::Recorder& rec) {
    ops::first_token_attn(vk, rec, gp, B, H, T, ld, out, 0);
    ops::gate_scores(vk, rec, gproj, gating, B * T, T, ops::Storage::f32, out, H);
    ops::max_abs(vk, rec, gxb, uint32_t(x.size()), out, H + 2);
  });
  const auto got = download(out, H + 3);
  for (uint32_t h = 0; h < H; ++h) {
    double m = 0;
    for (uint32_t b = 0; b < B; ++b)
      for (uint32_t t = 0; t < T; ++t) m += probs[((size_t(b) * H + h) * T + t) * ld] / double(B * T);
    CHECK(got[h] == doctest::Approx(m).epsilon(1e-6));
  }
  double sum = 0, below = 0;
  for (uint32_t bt = 0; bt < B * T; ++bt)
    for (uint32_t h = 0; h < H; ++h)
      for (uint32_t j = 0; j < G; ++j) {
        const double s = 1 / (1 + std::exp(-double(proj[size_t(bt) * cols + h * 2 * G + G + j])));
        sum += s;
        below += s < 0.1;
      }
  CHECK(got[H] == doctest::Approx(sum).epsilon(1e-6));
  CHECK(got[H + 1] == below);
  CHECK(got[H + 2] == 42.5f);
}

}  // namespace test_ops_model
