// The recorder (bindings, parameters, updates without re-recording), pipelines
// with a required subgroup size, and the copy shader.
#include <algorithm>
#include <bit>
#include <cmath>
#include <string>

#include "harness.hpp"
#include "gpu/pipeline.hpp"
#include "gpu/recorder.hpp"
#include "ops/attention.hpp"
#include "vkgate/dtype.hpp"

namespace test_recorder {

using namespace vkgate;
using test::check_close;
using test::run_once;

// The bandwidth yardstick of `vkgate bench --peak` must really copy: a
// ratio to a peak that wrote nothing would be meaningless.
TEST_CASE_FIXTURE(test::GpuTest, "copy shader: the bench's bandwidth yardstick copies every element") {
  const size_t n = 4 * 1037;
  const auto src = random(n);
  auto gs = upload(src, "src");
  auto gd = poisoned(n + 4, "dst");
  run_once(vk, [&](gpu::Recorder& rec) { ops::copy_shader(vk, rec, gs, gd, n * 4); });
  const auto got = download(gd, n + 4);
  CHECK(std::equal(src.begin(), src.end(), got.begin()));
  CHECK(std::all_of(got.begin() + n, got.end(), [](float x) { return std::isnan(x); }));
}

TEST_CASE_FIXTURE(test::GpuTest, "recorder: a dispatch with a wrong binding count or a missing buffer is an error, "
                                 "arrays of buffers counted by their elements") {
  const gpu::Pipeline& copy = vk.pipelines->get("copy", {64});
  auto src = upload(random(16), "src");
  gpu::Buffer none;
  const uint32_t count = 4;
  gpu::Recorder rec(vk);
  rec.begin();
  CHECK_THROWS_WITH_AS(rec.dispatch(copy, {{&src, gpu::Access::read}}, count, 1),
                       doctest::Contains("expected 2 buffers for its 2 bindings, got 1"), Error);
  CHECK_THROWS_WITH_AS(rec.dispatch(copy, {{&src, gpu::Access::read}, {&none, gpu::Access::write}}, count, 1),
                       doctest::Contains("binding 1 has no buffer"), Error);
  // The parameter block's size is the one the shader's SPIR-V declares (copy.comp: one uint).
  CHECK(copy.param_bytes == 4);
  const uint16_t narrow = 4;
  CHECK_THROWS_WITH_AS(rec.dispatch(copy, {{&src, gpu::Access::read}, {&src, gpu::Access::write}}, narrow, 1),
                       doctest::Contains("parameter block is 4 bytes, the host passed 2"), Error);
  // attention_step_seqs: q, 8 caches' keys, 8 caches' values, out; its SPIR-V says so.
  if (ctx.device().storage_buffer_arrays) {
    const gpu::Pipeline& step = vk.pipelines->get("attention_step_seqs", {64, 2, 8});
    CHECK(step.counts == std::vector<uint32_t>{1, 8, 8, 1});
    const std::vector<std::byte> params(step.param_bytes);
    const gpu::Binding four[] = {{&src, gpu::Access::read}, {&src, gpu::Access::read}, {&src, gpu::Access::read},
                                 {&src, gpu::Access::write}};
    CHECK_THROWS_WITH_AS(rec.dispatch_bytes(step, four, params, 1),
                         doctest::Contains("expected 18 buffers for its 4 bindings, got 4"), Error);
  }
  rec.end();
}

// An update rewrites the recorded dispatches' parameters and workgroup counts
// for the next submission without recording the command buffer again; a
// sequence that differs from the recording is refused, and the recorder then
// submits nothing until it records again.
TEST_CASE_FIXTURE(test::GpuTest, "recorder: an update rewrites parameters and counts, a different sequence is refused") {
  const gpu::Pipeline& copy = vk.pipelines->get("copy", {64});
  const auto x = random(4 * 64 * 8);
  auto src = upload(x, "src"), other = upload(x, "other");
  gpu::Tuning tuning = vk.tuning;
  tuning.direct_dispatch = false;  // the counts read from the arena (GPUs default to the command buffer's)
  gpu::Recorder rec(vk, tuning);
  auto record = [&](gpu::Recorder::Mode mode, const gpu::Buffer& dst, uint32_t vec4s) {
    rec.begin(mode);
    rec.dispatch(copy, {{&src, gpu::Access::read}, {&dst, gpu::Access::write}}, vec4s, (vec4s + 63) / 64);
    rec.end();
  };
  auto dst = poisoned(x.size(), "dst");
  record(gpu::Recorder::Mode::record, dst, 64);
  rec.submit("copying 64 vec4");
  auto got = download(dst, x.size());
  CHECK(std::equal(x.begin(), x.begin() + 256, got.begin()));
  CHECK(std::isnan(got[256]));
  const size_t barriers = rec.barrier_count();
  record(gpu::Recorder::Mode::update, dst, 64 * 8);
  CHECK(rec.barrier_count() == barriers);
  rec.submit("copying 512 vec4");
  CHECK(download(dst, x.size()) == x);
  CHECK_THROWS_WITH_AS(record(gpu::Recorder::Mode::update, other, 64), doctest::Contains("differs from command 0"),
                       Error);
  CHECK_THROWS_WITH_AS(rec.submit("after a refused update"), doctest::Contains("not recorded"), Error);
  auto fresh = poisoned(x.size(), "fresh");
  record(gpu::Recorder::Mode::record, fresh, 64 * 8);
  rec.submit("recorded again");
  CHECK(download(fresh, x.size()) == x);
}

// With Tuning::direct_dispatch the workgroup counts are in the command buffer:
// an update still rewrites the parameters, but a changed count is refused
// (the model and the block then record the step again).
TEST_CASE_FIXTURE(test::GpuTest, "recorder: direct dispatch updates parameters in place and refuses a changed "
                                 "workgroup count until recorded again") {
  const gpu::Pipeline& copy = vk.pipelines->get("copy", {64});
  const auto x = random(4 * 64 * 8);
  auto src = upload(x, "src"), dst = poisoned(x.size(), "dst");
  gpu::Tuning tuning = vk.tuning;
  tuning.direct_dispatch = true;
  gpu::Recorder rec(vk, tuning);
  auto record = [&](gpu::Recorder::Mode mode, uint32_t vec4s) {
    rec.begin(mode);
    rec.dispatch(copy, {{&src, gpu::Access::read}, {&dst, gpu::Access::write}}, vec4s, (vec4s + 63) / 64);
    rec.end();
  };
  record(gpu::Recorder::Mode::record, 32);
  rec.submit("copying 32 vec4");
  auto got = download(dst, x.size());
  CHECK(std::equal(x.begin(), x.begin() + 128, got.begin()));
  CHECK(std::isnan(got[128]));
  record(gpu::Recorder::Mode::update, 64);  // one workgroup still
  rec.submit("copying 64 vec4");
  got = download(dst, x.size());
  CHECK(std::equal(x.begin(), x.begin() + 256, got.begin()));
  CHECK(std::isnan(got[256]));
  CHECK_THROWS_WITH_AS(record(gpu::Recorder::Mode::update, 64 * 8),
                       doctest::Contains("has 8×1×1 workgroups, not the 1×1×1 recorded"), Error);
  CHECK_THROWS_WITH_AS(rec.submit("after a refused update"), doctest::Contains("not recorded"), Error);
  record(gpu::Recorder::Mode::record, 64 * 8);
  rec.submit("recorded again");
  CHECK(download(dst, x.size()) == x);
}

// Replays wait as a GPU's do (Tuning::fence_spin_us): asleep for most of the
// last run's time, then polling the fence, then (a spin budget of 1 µs runs
// out) asleep again; every replay's result is complete when submit returns.
TEST_CASE_FIXTURE(test::GpuTest, "recorder: replays sleep, then poll the fence, then sleep again, and see every "
                                 "result") {
  const gpu::Pipeline& copy = vk.pipelines->get("copy", {64});
  const auto x = random(4 * 64 * 16);
  auto a = upload(x, "a"), b = poisoned(x.size(), "b"), c = poisoned(x.size(), "c");
  for (uint32_t spin_us : {1000u, 1u}) {
    CAPTURE(spin_us);
    gpu::Tuning tuning = vk.tuning;
    tuning.fence_spin_us = spin_us;
    gpu::Recorder rec(vk, tuning);
    rec.begin();
    for (int i = 0; i < 8; ++i) {  // a chain of copies long enough to outlast 1 µs of polling
      rec.dispatch(copy, {{&a, gpu::Access::read}, {&b, gpu::Access::write}}, uint32_t(x.size() / 4), 16);
      rec.dispatch(copy, {{&b, gpu::Access::read}, {&c, gpu::Access::write}}, uint32_t(x.size() / 4), 16);
    }
    rec.end();
    const std::vector<float> nan(x.size(), std::numeric_limits<float>::quiet_NaN());
    for (int run = 0; run < 4; ++run) {
      gpu::upload(vk, c, nan.data(), nan.size() * 4);  // poisoned before each replay
      rec.submit("copies");
      CHECK(download(c, x.size()) == x);
    }
  }
}

// A step of many sequences records thousands of dispatches: each one's span is
// timed past the first timestamp pool's 1024 queries, in the recording and in
// a replay of it, and the dispatches still run.
TEST_CASE_FIXTURE(test::GpuTest, "recorder: every dispatch of a 2500-dispatch recording is timed, replayed too") {
  if (!vk.info.timestamps) return;
  const gpu::Pipeline& copy = vk.pipelines->get("copy", {64});
  const auto x = random(4 * 64);
  auto a = upload(x, "a"), b = poisoned(x.size(), "b");
  const uint32_t n = 2500, vec4s = 64;
  gpu::Recorder rec(vk);
  auto record = [&](gpu::Recorder::Mode mode) {
    rec.begin(mode);
    for (uint32_t i = 0; i < n; ++i)
      rec.dispatch(copy, {{i % 2 ? &b : &a, gpu::Access::read}, {i % 2 ? &a : &b, gpu::Access::write}}, vec4s, 1,
                   1, 1, "copy " + std::to_string(i));
    rec.end();
  };
  for (auto mode : {gpu::Recorder::Mode::record, gpu::Recorder::Mode::update}) {
    record(mode);
    rec.submit("2500 copies");
    const std::vector<gpu::DispatchTiming> t = rec.timings();
    REQUIRE(t.size() == n);
    CHECK(t.front().label == "copy 0");
    CHECK(t.back().label == "copy 2499");
    CHECK(std::all_of(t.begin(), t.end(), [](const gpu::DispatchTiming& d) { return d.microseconds >= 0.0; }));
    CHECK(download(b, x.size()) == x);
  }
}

// Timestamps slow every dispatch, so they are written only when asked for: a
// Context without them records no timings (and its dispatches still run).
TEST_CASE("context: timestamps off unless ContextOptions::timestamps or VKGATE_TIMESTAMPS asks") {
  Context& shared = test::context();  // made with timestamps on: whether the device has them
  const bool has = shared.device().timestamps;
  ContextOptions o;
  o.validation = true;
  o.device = shared.device().name;
  auto timed = [&](const ContextOptions& options) {
    Context c(options);
    Context::Impl& vk = c.impl();
    const std::vector<float> ones(256, 1.0f);
    gpu::Buffer src = vk.allocator->allocate(1024, gpu::MemoryKind::device, "src"),
                dst = vk.allocator->allocate(1024, gpu::MemoryKind::device, "dst");
    gpu::upload(vk, src, ones.data(), 1024);
    gpu::Recorder rec(vk);
    rec.begin();
    ops::copy_shader(vk, rec, src, dst, 1024);
    rec.end();
    rec.submit("a copy");
    std::vector<float> got(256);
    gpu::download(vk, dst, got.data(), 1024);
    CHECK(got == ones);
    CHECK(c.device().timestamps == !rec.timings().empty());
    CHECK(c.validation_messages() == 0);
    return c.device().timestamps;
  };
  {
    test::ScopedEnv unset("VKGATE_TIMESTAMPS", "");  // restores it afterwards
    ::unsetenv("VKGATE_TIMESTAMPS");
    CHECK(!timed(o));
  }
  {
    test::ScopedEnv on("VKGATE_TIMESTAMPS", "1");
    CHECK(timed(o) == has);
    o.timestamps = false;
    CHECK(!timed(o));
  }
  test::ScopedEnv off("VKGATE_TIMESTAMPS", "0");
  o.timestamps = true;
  CHECK(timed(o) == has);
}

// The KHR tensor-core matmul asks for subgroups of 32 where the device
// offers subgroup size control (AMD's default is 64); this checks that
// request's plumbing (device features, pipeline create info) under the
// validation layer, and the refusals, on any device.
// Workgroup counts that an earlier dispatch of the recording wrote: the copy
// shader moves a VkDispatchIndirectCommand into `counts` (a compute write),
// then a dispatch takes its counts from there (an indirect read: the barrier
// between them is the recorder's, and the validation layer checks it). With
// {0, 1, 1} nothing runs; with {2, 1, 1} the (grid-stride) copy does.
TEST_CASE_FIXTURE(test::GpuTest, "recorder: a dispatch takes its workgroup counts from a buffer the device wrote") {
  const gpu::Pipeline& copy = vk.pipelines->get("copy", {64});
  const size_t n = 4 * 64 * 8;
  const auto x = random(n);
  auto src = upload(x, "src");
  for (uint32_t groups : {0u, 2u}) {
    CAPTURE(groups);
    const std::vector<float> command{std::bit_cast<float>(groups), std::bit_cast<float>(1u), std::bit_cast<float>(1u), 0.0f};
    auto written = upload(command, "counts (source)");
    auto counts = poisoned(4, "counts");
    auto dst = poisoned(n, "dst");
    const uint32_t one = 1, all = uint32_t(n / 4);
    run_once(vk, [&](gpu::Recorder& rec) {
      rec.dispatch(copy, {{&written, gpu::Access::read}, {&counts, gpu::Access::write}}, one, 1);
      rec.dispatch_indirect(copy, {{&src, gpu::Access::read}, {&dst, gpu::Access::write}}, all, counts, 0);
      CHECK_THROWS_WITH_AS(
          rec.dispatch_indirect(copy, {{&src, gpu::Access::read}, {&dst, gpu::Access::write}}, all, counts, 8),
          doctest::Contains("outside their buffer"), Error);
    });
    const auto got = download(dst, n);
    if (groups == 0) CHECK(std::all_of(got.begin(), got.end(), [](float v) { return std::isnan(v); }));
    else CHECK(got == x);
  }
}

TEST_CASE_FIXTURE(test::GpuTest, "pipelines: a required subgroup size, where the device can be asked for one") {
  const DeviceInfo& d = vk.info;
  const std::string too_big = "full subgroups of " + std::to_string(d.max_subgroup_size * 2);
  CHECK_THROWS_WITH_AS(vk.pipelines->get("copy", {d.max_subgroup_size * 2}, d.max_subgroup_size * 2),
                       doctest::Contains(too_big.c_str()), Error);
  CHECK_THROWS_AS(vk.pipelines->get("copy", {d.min_subgroup_size * 3 / 2}, d.min_subgroup_size), Error);
  if (!d.subgroup_size_control) {
    MESSAGE("skipped: " << d.name << " has no subgroup size control");
    return;
  }
  for (uint32_t size = d.min_subgroup_size; size <= d.max_subgroup_size; size *= 2) {
    CAPTURE(size);
    // The largest workgroup the request allows, and one subgroup more.
    const uint32_t wg = std::min(d.max_workgroup_invocations, size * d.max_workgroup_subgroups) / size * size;
    if (uint64_t(wg + size) <= d.max_workgroup_invocations)
      CHECK_THROWS_AS(vk.pipelines->get("copy", {wg + size}, size), Error);
    const gpu::Pipeline& sized = vk.pipelines->get("copy", {wg}, size);
    CHECK(sized.subgroup_size == size);
    CHECK(&sized != &vk.pipelines->get("copy", {wg}));
    const auto x = random(4 * 1000);
    auto src = upload(x, "src");
    auto dst = poisoned(x.size(), "dst");
    const uint32_t count = uint32_t(x.size() / 4);
    run_once(vk, [&](gpu::Recorder& rec) {
      rec.dispatch(sized, {{&src, gpu::Access::read}, {&dst, gpu::Access::write}}, count, 2, 1, 1, "copy");
    });
    CHECK(download(dst, x.size()) == x);
  }
}

}  // namespace test_recorder

