// attention_step.comp: one step's attention (a few positions per sequence)
// in one dispatch, each sequence against its own cache and length, or a
// batch sharing one cache; against the double-precision reference per
// sequence. Caches past 64 keys take several blocks of the online softmax;
// the positions past each sequence's keys hold NaN (never read), and so
// does the output around the rows the kernel must write (never written).
#include <algorithm>
#include <cmath>
#include <limits>

#include "harness.hpp"
#include "gpu/pipeline.hpp"
#include "ops/attention.hpp"
#include "vkgate/dtype.hpp"
#include "vkgate/reference.hpp"

namespace test_attention_step {

using namespace vkgate;

namespace {

struct StepTest : test::GpuTest {
  ops::Storage st = ops::Storage::f32;
  // x as the storage holds it exactly.
  std::vector<float> held(std::vector<float> x) const {
    for (float& e : x)
      if (st == ops::Storage::f16) e = half_to_float(float_to_half(e));
      else if (st == ops::Storage::bf16 && !std::isnan(e)) e = bf16_to_float(float_to_bf16(e));
    return x;
  }
  gpu::Buffer put(const std::vector<float>& x, const std::string& name) {
    if (st == ops::Storage::f32) return upload(x, name);
    std::vector<uint16_t> bits(x.size());
    std::transform(x.begin(), x.end(), bits.begin(), st == ops::Storage::f16 ? float_to_half : float_to_bf16);
    auto b = device(x.size() / 2 + 1, name);
    gpu::upload(vk, b, bits.data(), bits.size() * 2);
    return b;
  }
  std::vector<float> get(const gpu::Buffer& b, size_t n) {
    if (st == ops::Storage::f32) return download(b, n);
    std::vector<uint16_t> bits(n);
    gpu::download(vk, b, bits.data(), n * 2);
    std::vector<float> x(n);
    std::transform(bits.begin(), bits.end(), x.begin(), st == ops::Storage::f16 ? half_to_float : bf16_to_float);
    return x;
  }
  void run_cases();
};

struct Case {
  std::vector<uint32_t> pasts;  // one per sequence
  uint32_t H, KV, T, Dh;
  bool causal, tiled;
  bool shared;        // one cache [B, KV, stride, Dh] for the batch (equal pasts)
  bool under_gpu_av;  // the cases that between them reach every variant's code
};

void StepTest::run_cases() {
  const Case cases[] = {
      {{0, 70, 131}, 4, 2, 1, 64, true, false, false, true},               // decode, 1 to 3 blocks
      {{5, 66}, 8, 1, 3, 32, true, true, false, false},                    // 8 query heads per KV head, tiled
      {{63, 63}, 2, 2, 2, 128, false, false, true, true},                  // a shared cache, not causal
      {{1, 2, 3, 4, 5, 6, 7, 200}, 2, 1, 1, 8, true, false, false, false}, // eight caches, one dispatch
      {{129}, 6, 3, 8, 72, true, false, false, false},                     // 8 positions, Dh not a power of two
  };
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const bool gpu_av = ctx.gpu_assisted_validation_enabled();
  for (const Case& c : cases) {
    if (gpu_av && !c.under_gpu_av) continue;
    const uint32_t B = uint32_t(c.pasts.size());
    CAPTURE(st);
    CAPTURE(B);
    CAPTURE(c.H);
    CAPTURE(c.KV);
    CAPTURE(c.T);
    CAPTURE(c.Dh);
    if (!c.shared && B > ops::step_sequences_per_dispatch(ctx.device(), vk.tuning)) {
      MESSAGE("skipped: " << ctx.device().name << " binds no arrays of " << B << " caches");
      continue;
    }
    ops::AttentionShape shape{B, c.H, c.KV, c.T, 0, c.Dh};
    shape.tiled = c.tiled;
    shape.out_stride = c.H * c.Dh + 8;  // rows apart, the gaps poisoned
    const uint32_t out_base = 5;
    const double scale = 1.0 / std::sqrt(double(c.Dh));

    const std::vector<float> q = held(random(size_t(B) * c.H * c.T * c.Dh));
    auto gq = put(q, "q");
    // Each sequence's cache [KV, stride, Dh]: random where it holds keys, NaN past them.
    std::vector<std::vector<float>> keys, values;
    std::vector<uint32_t> strides;
    for (uint32_t b = 0; b < B; ++b) {
      const uint32_t filled = c.pasts[b] + c.T, stride = c.shared ? c.pasts[0] + c.T + 3 : filled + 2 * b + 1;
      strides.push_back(stride);
      for (auto* cache : {&keys, &values}) {
        std::vector<float> x = held(random(size_t(c.KV) * stride * c.Dh));
        for (uint32_t h = 0; h < c.KV; ++h)
          std::fill(x.begin() + long((h * stride + filled) * c.Dh), x.begin() + long((h + 1) * stride * c.Dh), nan);
        cache->push_back(std::move(x));
      }
    }
    std::vector<gpu::Buffer> gk, gv;
    std::vector<ops::StepSequence> seqs;
    if (c.shared) {
      std::vector<float> k, v;
      for (uint32_t b = 0; b < B; ++b) {
        k.insert(k.end(), keys[b].begin(), keys[b].end());
        v.insert(v.end(), values[b].begin(), values[b].end());
      }
      gk.push_back(put(k, "keys"));
      gv.push_back(put(v, "values"));
      seqs.push_back({&gk[0], &gv[0], c.pasts[0], strides[0]});
    } else {
      for (uint32_t b = 0; b < B; ++b) {
        gk.push_back(put(keys[b], "keys " + std::to_string(b)));
        gv.push_back(put(values[b], "values " + std::to_string(b)));
      }
      for (uint32_t b = 0; b < B; ++b) seqs.push_back({&gk[b], &gv[b], c.pasts[b], strides[b]});
    }
    const size_t out_n = out_base + size_t(B) * c.T * shape.out_stride;
    auto go = put(std::vector<float>(out_n, nan), "out");
    test::run_once(vk, [&](gpu::Recorder& rec) {
      ops::attention_step(vk, rec, gq, seqs, go, out_base, shape, st, c.causal, float(scale));
    });
    const std::vector<float> out = get(go, out_n);

    std::vector<float> got;
    std::vector<double> want;
    for (uint32_t b = 0; b < B; ++b) {
      const uint32_t S = c.pasts[b] + c.T, stride = strides[b];
      std::vector<float> k, v;  // [1, KV, S, Dh]
      for (uint32_t h = 0; h < c.KV; ++h) {
        const long at = long(h * stride * c.Dh);
        k.insert(k.end(), keys[b].begin() + at, keys[b].begin() + at + long(S * c.Dh));
        v.insert(v.end(), values[b].begin() + at, values[b].begin() + at + long(S * c.Dh));
      }
      const std::span qb(q.data() + size_t(b) * c.H * c.T * c.Dh, size_t(c.H) * c.T * c.Dh);
      const auto r = reference::attention(qb, k, v, 1, c.H, c.KV, c.T, S, c.Dh, scale, c.causal, {},
                                          c.tiled ? GqaMapping::tiled : GqaMapping::grouped);
      want.insert(want.end(), r.begin(), r.end());
      for (uint32_t t = 0; t < c.T; ++t) {
        const auto row = out.begin() + long(out_base + (b * c.T + t) * shape.out_stride);
        got.insert(got.end(), row, row + c.H * c.Dh);
        CHECK(std::all_of(row + c.H * c.Dh, row + shape.out_stride, [](float x) { return std::isnan(x); }));
      }
    }
    CHECK(std::all_of(out.begin(), out.begin() + out_base, [](float x) { return std::isnan(x); }));
    test::check_close(got, want, st == ops::Storage::f32 ? 1e-9 : st == ops::Storage::f16 ? 1e-5 : 1e-4);
  }
}

}  // namespace

TEST_CASE_FIXTURE(StepTest, "attention step: each sequence against its own cache and length, several blocks, GQA "
                            "grouped and tiled, fp32") {
  run_cases();
}

TEST_CASE_FIXTURE(StepTest, "attention step: the same in fp16 and bf16, and which steps take it") {
  if (!ctx.device().storage16) {
    MESSAGE("skipped: " << ctx.device().name << " has no 16-bit storage");
    return;
  }
  st = ops::Storage::f16;
  run_cases();
  st = ops::Storage::bf16;
  run_cases();
  // On CPU drivers: steps of at most 8 positions, head_dim a multiple of 8, at most 8 query heads per KV
  // head and G·head_dim ≤ 1024 (Qwen3-Next's 8 × 256 takes the score matrices).
  auto applies = [&](const ops::AttentionShape& s, bool batched = false) {
    return ops::attention_step_applies(ctx.device(), vk.tuning, s, batched);
  };
  if (ops::cpu_gemm(ctx.device(), vk.tuning)) {
    CHECK(applies({1, 16, 8, 8, 100, 128}));
    CHECK_FALSE(applies({1, 16, 8, 9, 100, 128}));
    CHECK_FALSE(applies({1, 16, 8, 1, 100, 12}));
    CHECK_FALSE(applies({1, 16, 1, 1, 100, 128}));
    CHECK_FALSE(applies({1, 16, 2, 1, 100, 256}));
  }
  // Elsewhere, batched steps with VKGATE_STEP_ATTENTION_GPU only.
  test::ScopedTuning t(ctx);
  t->cpu_matmul = false;
  CHECK_FALSE(applies({1, 16, 8, 8, 100, 128}));
  CHECK_FALSE(applies({1, 16, 8, 8, 100, 128}, true));
  t->step_attention_gpu = true;
  CHECK_FALSE(applies({1, 16, 8, 8, 100, 128}));
  CHECK(applies({1, 16, 8, 8, 100, 128}, true));
  CHECK_FALSE(applies({1, 16, 2, 1, 100, 256}, true));
  t->step_attention = false;  // VKGATE_DISABLE_STEP_ATTENTION wins
  CHECK_FALSE(applies({1, 16, 8, 8, 100, 128}, true));
}

}  // namespace test_attention_step
