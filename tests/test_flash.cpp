// Fused flash attention on every kernel that can take a shape, and its plans.
#include <algorithm>
#include <cmath>
#include <optional>
#include <string>

#include "harness.hpp"
#include "gpu/pipeline.hpp"
#include "gpu/recorder.hpp"
#include "gpu/tuning.hpp"
#include "ops/attention.hpp"
#include "vkgate/dtype.hpp"

namespace test_flash {

using namespace vkgate;
using test::check_close;
using test::run_once;

// Each case on every kernel that can take it: flash_attention.comp always,
// flash_decode.comp for ≤ 16 rows per KV group, and in fp16 flash_coopmat.comp
// (on tensor cores, or with its products emulated on CPU drivers). One test
// per storage type, so that ctest can run them side by side.
struct FlashTest : test::GpuTest {
  void run_cases(ops::Storage st);
};

TEST_CASE_FIXTURE(FlashTest, "flash attention: fused online softmax with GQA, causal, mask, gate, split keys, fp32") {
  run_cases(ops::Storage::f32);
}

TEST_CASE_FIXTURE(FlashTest, "flash attention: fused online softmax with GQA, causal, mask, gate, split keys, fp16") {
  if (!ctx.device().storage16) {
    MESSAGE("skipped: " << ctx.device().name << " has no 16-bit storage");
    return;
  }
  run_cases(ops::Storage::f16);
}

void FlashTest::run_cases(ops::Storage st) {
  struct Case {
    uint32_t B, H, KV, T, S, Dh;
    bool causal, mask;
    uint32_t gate_width;  // 0: no gate
    bool split;
    bool tiled;         // tiled GQA: query head h reads KV head h % KV
    bool under_gpu_av;  // GPU-assisted validation compiles each instrumented pipeline for minutes on
                        // lavapipe: it runs the cases that between them reach every kernel, gate, mask,
                        // split and a head_dim that is not a power of two

    // Positions allocated per KV head (0: S), as a model's cache: the plan is
    // made for all of them, the run has S keys; the positions past S hold NaN.
    uint32_t capacity = 0;
  };
  const Case cases[] = {
      {2, 4, 4, 9, 9, 64, true, false, 0, false, false, true},     // MHA prefill
      {3, 6, 2, 5, 5, 80, false, true, 80, false, false, true},    // GQA, mask, elementwise gate
      {1, 4, 1, 1, 1, 128, true, false, 1, false, false, false},    // MQA, T = 1, headwise gate
      {1, 2, 1, 17, 40, 256, true, true, 256, false, false, false}, // chunked prefill after a cache
      {2, 8, 2, 1, 1000, 64, true, false, 64, true, false, true},  // decode over a long cache: split keys
      {1, 4, 2, 3, 700, 128, true, true, 1, true, true, true},     // split keys with a mask and T > 1, tiled
      {1, 16, 2, 1, 600, 256, true, false, 256, true, false, false}, // Qwen3-Next decode: 8 query heads per KV head
      {2, 12, 1, 1, 77, 72, false, true, 1, false, false, true},    // 12 rows in 2 workgroups, Dh not a power of two
      {1, 8, 2, 21, 60, 64, true, true, 64, false, true, true},    // 84 rows: several row tiles of every kernel, tiled
      {1, 4, 1, 10, 600, 128, true, false, 1, true, false, false},  // prefill after a cache, split keys
      {1, 8, 2, 1, 50, 64, true, false, 64, false, true, false},    // tiled decode: 4 query heads per KV head
      // A decode step and a short prefill over a partly filled cache: the
      // run's keys spread over the splits planned for the capacity.
      {2, 8, 2, 1, 300, 64, true, false, 0, true, false, true, 1280},
      {1, 4, 1, 3, 200, 128, true, false, 1, true, false, false, 900},
  };
  const DeviceInfo& dev = ctx.device();
  using ops::Coopmat;
  Coopmat tensor = ops::coopmat_usable(dev, Coopmat::tensor);
  if (tensor == Coopmat::off) tensor = ops::coopmat_usable(dev, Coopmat::emulated);
  if (tensor != Coopmat::tensor && st == ops::Storage::f16) {
    const std::string why = dev.name + " has no usable cooperative matrix" +
                            (tensor == Coopmat::emulated ? "; its algorithm runs with emulated products" : "");
    MESSAGE("tensor-core flash attention skipped: " << why);
  }
  const float inf = std::numeric_limits<float>::infinity();
  int coopmat_runs = 0;
  const bool gpu_av = ctx.gpu_assisted_validation_enabled();
  for (const Case& c : cases) {
    if (gpu_av && !c.under_gpu_av) continue;
    CAPTURE(st);
    CAPTURE(c.H);
    CAPTURE(c.KV);
    CAPTURE(c.T);
    CAPTURE(c.S);
    CAPTURE(c.Dh);
    // fp16 runs get inputs that fp16 holds exactly, so only the kernel's own rounding counts.
    const bool half = st == ops::Storage::f16;
    auto input = [&](size_t n, float scale) {
      auto x = random(n, scale);
      if (half)
        for (float& e : x) e = half_to_float(float_to_half(e));
      return x;
    };
    auto put = [&](const std::vector<float>& x, const char* name) {
      if (!half) return upload(x, name);
      std::vector<uint16_t> bits(x.size());
      std::transform(x.begin(), x.end(), bits.begin(), float_to_half);
      auto b = device(x.size() / 2 + 1, name);
      gpu::upload(vk, b, bits.data(), bits.size() * 2);
      return b;
    };
    const auto q = input(size_t(c.B) * c.H * c.T * c.Dh, 1.0f), k = input(size_t(c.B) * c.KV * c.S * c.Dh, 1.0f),
               v = input(size_t(c.B) * c.KV * c.S * c.Dh, 1.0f);
    const uint32_t cap = c.capacity ? c.capacity : c.S;
    // k and v as the kernels read them: cap positions per (batch, KV head).
    auto cached = [&](const std::vector<float>& x) {
      std::vector<float> out(size_t(c.B) * c.KV * cap * c.Dh, std::numeric_limits<float>::quiet_NaN());
      for (size_t bh = 0; bh < size_t(c.B) * c.KV; ++bh)
        std::copy_n(x.begin() + long(bh * c.S * c.Dh), c.S * c.Dh, out.begin() + long(bh * cap * c.Dh));
      return out;
    };
    std::vector<float> mask;
    if (c.mask) {
      mask = random(size_t(c.B) * c.T * c.S);
      for (size_t i = 0; i < mask.size(); i += 4) mask[i] = -inf;
      for (uint32_t s = 0; s < c.S; ++s) mask[s] = -inf;  // batch 0, query 0: every key masked
    }
    const auto g = input(size_t(c.B) * c.T * c.H * std::max(c.gate_width, 1u), 2.0f);
    auto gq = put(q, "q"), gk = put(cached(k), "k"), gv = put(cached(v), "v"), gg = put(g, "gate");
    auto gm = upload(c.mask ? mask : std::vector<float>{0}, "mask");
    ops::AttentionShape shape{c.B, c.H, c.KV, c.T, c.S, c.Dh, cap};
    shape.tiled = c.tiled;
    ops::AttentionShape planned = shape;
    planned.keys = cap;
    const double scale = 1.0 / std::sqrt(double(c.Dh));
    // Tiled GQA is grouped GQA with query head h renumbered (h % KV)·G + h / KV.
    const uint32_t G = c.H / c.KV;
    auto grouped_head = [&](uint32_t h) { return c.tiled ? (h % c.KV) * G + h / c.KV : h; };
    std::vector<float> q_grouped(q.size());
    for (uint32_t b = 0; b < c.B; ++b)
      for (uint32_t h = 0; h < c.H; ++h)
        std::copy_n(q.begin() + long((b * c.H + h) * c.T * c.Dh), c.T * c.Dh,
                    q_grouped.begin() + long((b * c.H + grouped_head(h)) * c.T * c.Dh));
    const auto by_group = reference::attention(q_grouped, k, v, c.B, c.H, c.KV, c.T, c.S, c.Dh, scale, c.causal, mask);
    std::vector<double> want(by_group.size());
    for (uint32_t bt = 0; bt < c.B * c.T; ++bt)
      for (uint32_t h = 0; h < c.H; ++h)
        std::copy_n(by_group.begin() + long((bt * c.H + grouped_head(h)) * c.Dh), c.Dh,
                    want.begin() + long((bt * c.H + h) * c.Dh));
    if (c.gate_width) {
      const std::vector<float> wf(want.begin(), want.end());
      want = reference::gate(wf, g, size_t(c.B) * c.T, c.H, c.Dh, c.gate_width);
    }
    const bool decode_shape = c.T * (c.H / c.KV) <= 16 && dev.subgroup_arithmetic;
    // flash_decode.comp four times: its default rows per workgroup, and 3
    // (row tiles that split a token's heads, VKGATE_FLASH_DECODE_ROWS; more row
    // tiles may leave a CPU driver's few workgroups unsplit), both with the
    // splits merged by each row tile's last workgroup; the default rows with
    // attention_combine.comp (VKGATE_DISABLE_DECODE_MERGE); and split cases
    // with a split per block of keys, merged, then combined (10 to 20 splits:
    // a CPU driver's plan takes at most 8, so these are the merges whose
    // splits take more than one round of an 8-lane subgroup, the last one
    // partly filled, and the combines whose threads load several rounds).
    // flash_coopmat.comp at its default tile, and in the MHA prefill and the
    // 84-row case at tiles that between them take each other path: 2 strips,
    // 64 keys per block, fp16 partial sums of P·V and of both products.
    struct Run {
      ops::FlashKernel kernel;
      uint32_t decode_rows = 0;
      std::optional<gpu::FlashTile> tile;
      uint32_t merge_splits = ops::FlashOptions{}.merge_splits;
      uint32_t splits = 0;
    };
    std::vector<Run> runs = {Run{ops::FlashKernel::general}, Run{ops::FlashKernel::decode},
                             Run{ops::FlashKernel::decode, 3}, Run{ops::FlashKernel::decode, 0, {}, 0},
                             Run{ops::FlashKernel::coopmat}};
    if (c.split)
      for (uint32_t merge_splits : {65535u, 0u}) runs.push_back({ops::FlashKernel::decode, 0, {}, merge_splits, 65535});
    if (c.Dh == 64 && c.T > 1 && !c.split && !gpu_av)
      for (const char* t : {"2x64", "4x32p", "2x64h"}) runs.push_back({ops::FlashKernel::coopmat, 0, gpu::FlashTile::parse(t)});
    for (const Run& run : runs) {
      const ops::FlashKernel kernel = run.kernel;
      if (run.decode_rows && c.Dh != 64) continue;  // one more pipeline per storage, not one per head_dim
      CAPTURE(run.decode_rows);
      const std::string tile = run.tile ? run.tile->name() : "default";
      CAPTURE(tile);
      CAPTURE(run.merge_splits);
      CAPTURE(run.splits);
      ops::FlashOptions o;
      o.decode_rows = run.decode_rows;
      o.merge_splits = run.merge_splits;
      o.splits = run.splits;
      if (run.tile) o.tile = *run.tile;
      o.split = c.split;
      o.decode = kernel == ops::FlashKernel::decode;
      o.coopmat = kernel == ops::FlashKernel::coopmat ? tensor : Coopmat::off;
      const ops::FlashPlan plan = ops::flash_plan(dev, planned, st, o);
      CAPTURE(int(plan.kernel));
      if (kernel == ops::FlashKernel::decode) {
        CHECK((plan.kernel == kernel) == decode_shape);
        if (!decode_shape) continue;
      }
      if (kernel == ops::FlashKernel::coopmat) {
        // fp16 only, head_dim a multiple of 16, the tiles within shared memory.
        if (plan.kernel == ops::FlashKernel::general) continue;
        CHECK((plan.kernel == ops::FlashKernel::coopmat || plan.kernel == ops::FlashKernel::coopmat_emulated));
        // A tile that fits runs as it is, the others with fewer strips or keys.
        if (run.tile && ops::flash_tile_misfit(dev, *run.tile, tensor, c.Dh).empty()) CHECK(plan.tile == *run.tile);
        if (run.tile) CHECK(plan.tile.acc16 == run.tile->acc16);
        ++coopmat_runs;
      }
      CAPTURE(plan.splits);
      if (c.split && !run.decode_rows) CHECK(plan.splits > 1);
      CHECK(plan.merge ==
            (plan.kernel == ops::FlashKernel::decode && plan.splits > 1 && plan.splits <= run.merge_splits));
      // A split the run's keys leave empty would hold a capacity's share, not an even one.
      if (c.capacity && plan.splits > 1) CHECK(uint64_t(plan.chunk) * (plan.splits - 1) >= c.S);
      auto partial = device(ops::flash_partial_floats(planned, plan), "partial");
      auto counters = upload(std::vector<float>(std::max<size_t>(1, ops::flash_counter_words(planned, plan)), 0.0f),
                             "counters");
      auto go = half ? put(std::vector<float>(q.size(), std::numeric_limits<float>::quiet_NaN()), "out")
                     : poisoned(q.size(), "out");
      run_once(vk, [&](gpu::Recorder& rec) {
        ops::Gate gating;
        gating.view = ops::btd_view(c.T, c.H, std::max(c.gate_width, 1u));
        gating.width = c.gate_width;
        gating.heads = c.H;
        ops::FlashArgs a{gq,     gk, gv, c.mask ? &gm : nullptr, c.gate_width ? &gg : nullptr, gating, go, &partial,
                         &counters};
        // Twice with the same counters, the output poisoned between: each
        // dispatch must leave them at zero for the next.
        for (int rep = 0; rep < (plan.merge ? 2 : 1); ++rep) {
          if (rep) rec.fill(go, 0xffffffffu);  // NaN in every storage type
          ops::flash_attention(vk, rec, a, shape, plan, c.causal, float(scale), st);
        }
      });
      check_close(test::download_stored(*this, go, q.size(), half), want, half ? 1e-5 : 1e-9);
    }
  }
  if (tensor != Coopmat::off && st == ops::Storage::f16) CHECK(coopmat_runs > 0);
}

TEST_CASE_FIXTURE(test::GpuTest, "flash plan: a forced split count (VKGATE_FLASH_SPLITS) holds, at most one split per block") {
  // 1280 keys: 2 splits of 640 (blocks of 32 or 64 keys); the plan's own
  // choice differs (4 on CPU drivers, more elsewhere).
  const ops::AttentionShape shape{1, 16, 2, 1, 1280, 256};
  for (ops::Storage st : {ops::Storage::f32, ops::Storage::f16}) {
    ops::FlashOptions o;
    o.coopmat = ops::Coopmat::tensor;
    CHECK(ops::flash_plan(ctx.device(), shape, st, o).splits > 2);
    o.splits = 2;
    ops::FlashPlan plan = ops::flash_plan(ctx.device(), shape, st, o);
    CHECK(plan.splits == 2);
    CHECK(plan.chunk == 640);
    o.splits = 100000;
    plan = ops::flash_plan(ctx.device(), shape, st, o);
    CHECK(plan.splits == 1280 / plan.block);
    o.split = false;
    CHECK(ops::flash_plan(ctx.device(), shape, st, o).splits == 1);
  }
}


TEST_CASE("flash plan: tensor-core tiles are named as VKGATE_FLASH_TILE reads them, and fall back to what fits") {
  for (const gpu::FlashTile& tile : ops::flash_tile_candidates()) CHECK(gpu::FlashTile::parse(tile.name()) == tile);
  CHECK(gpu::FlashTile::parse("2x64p") == gpu::FlashTile{2, 64, gpu::FlashTile::Acc16::pv});
  CHECK(gpu::FlashTile::parse("1x32h") == gpu::FlashTile{1, 32, gpu::FlashTile::Acc16::both});
  for (const char* bad : {"", "4", "4x", "x32", "3x32", "4x48", "4x32q", "4x32ph", "16x32", "4x32 ", "-4x32"}) {
    CAPTURE(bad);
    CHECK_FALSE(gpu::FlashTile::parse(bad).has_value());
  }
  // 48 KiB (the H100's) at head_dim 256: 4 strips do not fit and 2 do; 64
  // keys per block fit neither, so the plan takes 32 with the tile's sums.
  DeviceInfo d;
  d.type = "discrete";
  d.coopmat_f16 = d.subgroup_shuffle = true;
  d.shared_memory_bytes = 48 * 1024;
  d.max_workgroup_invocations = 1024;
  const ops::AttentionShape prefill{1, 16, 2, 512, 512, 256};
  ops::FlashOptions o;
  o.coopmat = gpu::Coopmat::tensor;
  const auto plan_of = [&](const char* tile) {
    o.tile = *gpu::FlashTile::parse(tile);
    return ops::flash_plan(d, prefill, ops::Storage::f16, o);
  };
  CHECK(plan_of("4x32").tile == *gpu::FlashTile::parse("2x32"));
  CHECK(plan_of("2x64h").tile == *gpu::FlashTile::parse("2x32h"));
  CHECK(plan_of("4x32p").rows == 32);
  CHECK(!ops::flash_tile_misfit(d, *gpu::FlashTile::parse("4x32"), gpu::Coopmat::tensor, 256).empty());
  CHECK(ops::flash_tile_misfit(d, *gpu::FlashTile::parse("2x32h"), gpu::Coopmat::tensor, 256).empty());
  // Without subgroup shuffles (its softmax's) the kernel is not planned.
  d.subgroup_shuffle = false;
  CHECK(plan_of("2x32").kernel == ops::FlashKernel::general);
}

TEST_CASE("flash plan: an NVIDIA device's defaults are its sweep's winners, and the environment overrides them") {
  DeviceInfo d;
  d.type = "discrete";
  d.vendor_id = 0x10de;
  d.coopmat_f16 = d.subgroup_shuffle = true;
  d.shared_memory_bytes = 48 * 1024;
  d.max_workgroup_invocations = 1024;
  d.subgroup_arithmetic = true;  // flash_decode.comp's
  const gpu::Tuning t = gpu::tuning_from_environment(d);
  CHECK(t.flash_tile == *gpu::FlashTile::parse("2x32"));
  CHECK(t.flash_split_keys == 64);
  // qwen3-0.6b's decode step over 512 keys: 8 KV heads, splits of 64 keys.
  const ops::AttentionShape step{1, 16, 8, 1, 512, 128};
  ops::FlashOptions o;
  o = ops::flash_options(t);
  const ops::FlashPlan few = ops::flash_plan(d, step, ops::Storage::f16, o);
  CHECK(few.splits == 8);
  CHECK(few.merge);
  // Qwen3-Next's over 32k keys: 2 KV heads, 128 splits, merged by the combine pass.
  const ops::FlashPlan many = ops::flash_plan(d, ops::AttentionShape{1, 16, 2, 1, 32768, 256}, ops::Storage::f16, o);
  CHECK(many.splits == 128);
  CHECK_FALSE(many.merge);
  {
    test::ScopedEnv keys("VKGATE_FLASH_SPLIT_KEYS", "128"), tile("VKGATE_FLASH_TILE", "4x32p"),
        merge("VKGATE_DECODE_MERGE_SPLITS", "128");
    const gpu::Tuning e = gpu::tuning_from_environment(d);
    CHECK(e.flash_split_keys == 128);
    CHECK(e.flash_tile == *gpu::FlashTile::parse("4x32p"));
    CHECK(e.decode_merge_splits == 128);
  }
  {
    test::ScopedEnv merge("VKGATE_DECODE_MERGE_SPLITS", "128"), off("VKGATE_DISABLE_DECODE_MERGE", "1");
    CHECK(gpu::tuning_from_environment(d).decode_merge_splits == 0);
  }
  d.vendor_id = 0x1002;  // elsewhere the kernels' own rules until a sweep there
  CHECK(gpu::tuning_from_environment(d).flash_split_keys == 0);
}

}  // namespace test_flash
