// Shared by the GPU tests: one validated Context per test process, fresh
// random inputs, NaN poisoning and the accuracy metric.
#pragma once

#include "doctest.hpp"

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "gpu/context_impl.hpp"
#include "gpu/memory.hpp"
#include "gpu/recorder.hpp"
#include "gpu/transfer.hpp"
#include "vkgate/context.hpp"
#include "vkgate/dtype.hpp"
#include "vkgate/reference.hpp"

namespace vkgate::test {

// An environment variable set (or, given "", emptied) for the scope, then
// restored. The library reads its VKGATE_* switches only when a Context is
// made: use ScopedTuning to change the kernel choices of the shared Context.
struct ScopedEnv {
  std::string name, old;
  bool had;
  ScopedEnv(const char* n, const std::string& v) : name(n), had(std::getenv(n) != nullptr) {
    if (had) old = std::getenv(n);
    ::setenv(n, v.c_str(), 1);
  }
  ~ScopedEnv() { had ? void(::setenv(name.c_str(), old.c_str(), 1)) : void(::unsetenv(name.c_str())); }
};

// The shared Context's kernel choices (gpu/tuning.hpp) changed for the scope,
// then restored: blocks and recorders made meanwhile take them, as they would
// on a Context made with the matching VKGATE_* switches set.
struct ScopedTuning {
  gpu::Tuning& target;
  gpu::Tuning saved;
  explicit ScopedTuning(Context& ctx) : target(ctx.impl().tuning), saved(target) {}
  ~ScopedTuning() { target = saved; }
  ScopedTuning(const ScopedTuning&) = delete;
  ScopedTuning& operator=(const ScopedTuning&) = delete;
  gpu::Tuning* operator->() { return &target; }
};

// Every GPU test runs under VK_LAYER_KHRONOS_validation with synchronization
// validation; VKGATE_TEST_DEVICE picks the device (default: the best one).
// Timestamps on everywhere: tests read last_timings() to see which kernels ran.
inline Context& context() {
  static Context ctx([] {
    ContextOptions o;
    o.validation = true;
    o.timestamps = true;
    if (const char* d = std::getenv("VKGATE_TEST_DEVICE")) o.device = d;
    return o;
  }());
  return ctx;
}

// The seed of the running test's generator, which main.cpp's listener prints
// when the test fails; empty in a test without one.
inline std::optional<uint32_t>& drawn_seed() {
  static std::optional<uint32_t> seed;
  return seed;
}

// Fixture for TEST_CASE_FIXTURE: fails the test if the validation layer said
// anything during it, and seeds a fresh generator (printed on failure;
// VKGATE_TEST_SEED replays one).
inline uint32_t test_seed() {
  const char* s = std::getenv("VKGATE_TEST_SEED");
  return *(drawn_seed() = s ? uint32_t(std::strtoul(s, nullptr, 10)) : std::random_device{}());
}

struct GpuTest {
  Context& ctx = context();
  Context::Impl& vk = ctx.impl();
  uint32_t seed = test_seed();
  std::mt19937 rng{seed};

  GpuTest() { ctx.take_validation_messages(); }
  ~GpuTest() {
    const auto msgs = ctx.take_validation_messages();
    for (const auto& m : msgs) MESSAGE(m);
    CHECK_MESSAGE(msgs.empty(), "the validation layer reported " << msgs.size() << " message(s)");
  }

  std::vector<float> random(size_t n, float scale = 1.0f) {
    std::normal_distribution<float> dist(0.0f, scale);
    std::vector<float> v(n);
    for (float& x : v) x = dist(rng);
    return v;
  }
  gpu::Buffer device(size_t floats, const std::string& name) {
    return vk.allocator->allocate(floats * 4, gpu::MemoryKind::device, name);
  }
  gpu::Buffer upload(const std::vector<float>& data, const std::string& name) {
    gpu::Buffer b = device(data.size(), name);
    gpu::upload(vk, b, data.data(), data.size() * 4);
    return b;
  }
  // A device buffer filled with NaN, so an element the kernel skips shows up.
  gpu::Buffer poisoned(size_t floats, const std::string& name) {
    return upload(std::vector<float>(floats, std::numeric_limits<float>::quiet_NaN()), name);
  }
  std::vector<float> download(const gpu::Buffer& b, size_t floats) {
    std::vector<float> v(floats);
    gpu::download(vk, b, v.data(), floats * 4);
    return v;
  }
};

// Records `body` into a fresh command buffer and runs it once.
template <class F>
void run_once(Context::Impl& vk, F&& body) {
  gpu::Recorder rec(vk);
  rec.begin();
  body(rec);
  rec.end();
  rec.submit("test");
}

// v in fp16 on the device, and v rounded as stored there (what a kernel reads).
inline gpu::Buffer upload_half(GpuTest& t, std::vector<float>& v, const char* name) {
  std::vector<uint16_t> bits(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    bits[i] = float_to_half(v[i]);
    v[i] = half_to_float(bits[i]);
  }
  auto buf = t.device(v.size() / 2 + 1, name);
  gpu::upload(t.vk, buf, bits.data(), bits.size() * 2);
  return buf;
}

// The first n elements of b, stored as fp16 (half) or fp32, as floats.
inline std::vector<float> download_stored(GpuTest& t, const gpu::Buffer& b, size_t n, bool half) {
  if (!half) return t.download(b, n);
  std::vector<uint16_t> bits(n);
  gpu::download(t.vk, b, bits.data(), n * 2);
  std::vector<float> out(n);
  for (size_t i = 0; i < n; ++i) out[i] = half_to_float(bits[i]);
  return out;
}

// NMSE and max abs error against the double reference; NaN never passes.
inline void check_close(const std::vector<float>& got, const std::vector<double>& want, double nmse_bound = 1e-9) {
  REQUIRE(got.size() == want.size());
  const reference::Diff d = reference::compare(got, want);
  INFO("nmse = " << d.nmse << ", max abs = " << d.max_abs << ", first non-finite at " << d.first_bad);
  CHECK(d.first_bad == -1);
  CHECK(d.nmse <= nmse_bound);
}

}  // namespace vkgate::test
