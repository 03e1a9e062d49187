// Device faults and limits (issue 5, item 4): requests beyond the device's
// limits are refused with a clear Error before any Vulkan call could be
// invalid; out of device memory — a request beyond the heap, beyond the
// Context's device_memory_limit, or VK_ERROR_OUT_OF_DEVICE_MEMORY from the
// driver (injected) — is Error(out_of_memory) and the Context stays usable;
// VK_ERROR_DEVICE_LOST (injected) is Error(device_lost) saying so, never an
// abort, and the lost Context refuses further work at once; no Vulkan driver
// at all is Error(no_device). Each test also runs under the validation layer:
// no fault path may make an invalid Vulkan call.
#include <climits>
#include <cstdlib>

#include "block_weights.hpp"
#include "gpu/pipeline.hpp"
#include "gpu/recorder.hpp"
#include "harness.hpp"
#include "vkgate/block.hpp"
#include "vkgate/error.hpp"

namespace test_faults {

using namespace vkgate;

namespace {

BlockConfig small_config(int hidden = 64) {
  BlockConfig c;
  c.hidden_size = hidden;
  c.num_heads = 4;
  c.num_kv_heads = 2;
  c.head_dim = 16;
  c.partial_rotary_factor = 0.5;
  return c;
}

// A Context of its own (faults are injected into it), validated like the suite's.
ContextOptions validated(uint64_t memory_limit = 0) {
  ContextOptions o;
  o.validation = true;
  if (const char* d = std::getenv("VKGATE_TEST_DEVICE")) o.device = d;
  o.device_memory_limit = memory_limit;
  return o;
}

// The block runs and matches the reference: the Context is usable.
void check_usable(Context& ctx, std::mt19937& rng) {
  const BlockConfig c = small_config();
  test::RandomWeights w(c, rng);
  GatedAttention block(ctx, c, w.map);
  std::normal_distribution<float> dist;
  std::vector<float> x(3 * 64);
  for (float& v : x) v = dist(rng);
  reference::Inputs in{.hidden = x, .batch = 1, .tokens = 3};
  test::check_close(block.forward(x, 1, 3), reference::forward(c, w.map, in).output);
}

Error caught(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e;
  }
  FAIL("no vkgate::Error was thrown");
  return Error(ErrorCode::vulkan, "");
}

void check_clean(Context& ctx) {
  const auto msgs = ctx.take_validation_messages();
  for (const auto& m : msgs) MESSAGE(m);
  CHECK_MESSAGE(msgs.empty(), "the validation layer reported " << msgs.size() << " message(s)");
}

}  // namespace

TEST_CASE_FIXTURE(test::GpuTest, "faults: buffers beyond maxStorageBufferRange or the heap are refused before any Vulkan call") {
  const DeviceInfo& d = ctx.device();
  const uint64_t range = d.max_storage_buffer_range;
  Error e = caught([&] { vk.allocator->allocate(range + 4, gpu::MemoryKind::device, "too long"); });
  CHECK(e.code() == ErrorCode::unsupported);
  CHECK(std::string(e.what()).find("allocating 'too long'") == 0);
  CHECK(std::string(e.what()).find("maxStorageBufferRange") != std::string::npos);
  e = caught([&] { vk.allocator->allocate(uint64_t(1) << 50, gpu::MemoryKind::upload, "a petabyte"); });
  CHECK(e.code() == ErrorCode::out_of_memory);
  CHECK(std::string(e.what()).find("allocating 'a petabyte' (1073741824 MiB): more than the device has") == 0);
  e = caught([&] { vk.allocator->allocate(~uint64_t(0) - 8, gpu::MemoryKind::device, "2^64"); });
  CHECK(e.code() == ErrorCode::out_of_memory);
  // The allocator is unchanged: an ordinary request still works.
  CHECK(upload(random(16), "after").valid());
}

TEST_CASE_FIXTURE(test::GpuTest, "faults: impossible shapes are refused without overflow, and the block stays usable") {
  const BlockConfig c = small_config();
  test::RandomWeights w(c, rng);
  GatedAttention block(ctx, c, w.map);
  const auto x = random(2 * 64);
  // batch · tokens · hidden overflows 64 bits: refused before the size check could wrap.
  Error e = caught([&] { block.forward(x, INT_MAX, INT_MAX); });
  CHECK(e.code() == ErrorCode::unsupported);
  CHECK(std::string(e.what()).find("forward: hidden_states needs 2147483647 × 2147483647 × 64 elements") == 0);
  // A resident cache far beyond one buffer.
  e = caught([&] { block.reserve_cache(1 << 20, INT_MAX); });
  CHECK(e.code() == ErrorCode::unsupported);
  CHECK(std::string(e.what()).find("resident key cache") != std::string::npos);
  // A failed reserve leaves no cache (not a stale capacity with freed buffers).
  ForwardInputs in{.hidden = x, .batch = 1, .tokens = 2, .use_device_cache = true};
  CHECK_THROWS_WITH_AS(block.run(in), doctest::Contains("reserve_cache or load_cache first"), Error);
  // A prefill longer than the plan's buffers allow.
  const int long_T = int(ctx.device().max_storage_buffer_range / (4 * 64)) + 1;
  e = caught([&] { block.forward(std::vector<float>(size_t(long_T) * 64), 1, long_T); });
  CHECK(e.code() == ErrorCode::unsupported);
  CHECK(std::string(e.what()).find("maxStorageBufferRange") != std::string::npos);
  // Still usable, with and without a cache.
  reference::Inputs r{.hidden = x, .batch = 1, .tokens = 2};
  test::check_close(block.forward(x, 1, 2), reference::forward(c, w.map, r).output);
  block.reserve_cache(1, 4);
  test::check_close(block.run(in).output, reference::forward(c, w.map, r).output);
}

TEST_CASE_FIXTURE(test::GpuTest, "faults: a dispatch beyond maxComputeWorkGroupCount is refused, not recorded") {
  const gpu::Pipeline& p = vk.pipelines->get("gate", {64});
  REQUIRE(p.bindings == 2);  // the gate shader's count
  gpu::Buffer gate_rows = device(16, "gate rows"), out = device(16, "attention output");
  gpu::Recorder rec(vk);
  rec.begin();
  const std::vector<std::byte> params(p.param_bytes);
  const uint32_t too_many = ctx.device().max_workgroup_count[0] + 1;
  REQUIRE(too_many > 1);
  Error e = caught([&] {
    const gpu::Binding b[] = {{&gate_rows, gpu::Access::read}, {&out, gpu::Access::read_write}};
    rec.dispatch_bytes(p, b, params, too_many);
  });
  CHECK(e.code() == ErrorCode::unsupported);
  CHECK(std::string(e.what()).find("maxComputeWorkGroupCount") != std::string::npos);
  rec.end();
  rec.submit("an empty recording after a refused dispatch");
}

TEST_CASE("faults: out of device memory while building a block is an Error, and the Context stays usable") {
  std::mt19937 rng(5);
  SUBCASE("the Context's device_memory_limit: a block too large for it") {
    Context ctx(validated(8u << 20));
    BlockConfig big = small_config(512);
    big.num_heads = 8;
    big.head_dim = 64;  // about 3.5 MiB of weights per block
    test::RandomWeights w(big, rng);
    std::vector<std::unique_ptr<GatedAttention>> blocks;
    Error e = caught([&] {
      for (int i = 0; i < 10; ++i) blocks.push_back(std::make_unique<GatedAttention>(ctx, big, w.map));
    });
    CHECK(blocks.size() >= 1);
    CHECK(blocks.size() < 3);
    CHECK(e.code() == ErrorCode::out_of_memory);
    CHECK(std::string(e.what()).find("allocating '") == 0);
    CHECK(std::string(e.what()).find("device_memory_limit is 8 MiB") != std::string::npos);
    CHECK(ctx.device_memory_allocated() <= (8u << 20));
    blocks.clear();
    CHECK(ctx.device_memory_in_use() == 0);  // the failed block gave back what it had taken
    check_usable(ctx, rng);
    check_clean(ctx);
  }
  SUBCASE("an impossible size: a request beyond the device's memory heap") {
    Context ctx(validated());
    const uint64_t heap = ctx.device().device_local_bytes;
    Error e = caught([&] { ctx.impl().allocator->allocate(heap * 4, gpu::MemoryKind::readback, "impossible"); });
    CHECK(e.code() == ErrorCode::out_of_memory);
    CHECK(std::string(e.what()).find("more than the device has") != std::string::npos);
    check_usable(ctx, rng);
    check_clean(ctx);
  }
  SUBCASE("VK_ERROR_OUT_OF_DEVICE_MEMORY from vkAllocateMemory (injected)") {
    Context ctx(validated());
    const BlockConfig c = small_config();
    test::RandomWeights w(c, rng);
    ctx.impl().inject_allocate = VK_ERROR_OUT_OF_DEVICE_MEMORY;
    Error e = caught([&] { GatedAttention block(ctx, c, w.map); });
    CHECK(e.code() == ErrorCode::out_of_memory);
    CHECK(e.vk_result() == VK_ERROR_OUT_OF_DEVICE_MEMORY);
    CHECK(std::string(e.what()).find("vkAllocateMemory failed with VK_ERROR_OUT_OF_DEVICE_MEMORY") != std::string::npos);
    CHECK(std::string(e.what()).find("allocating '") == 0);
    CHECK_FALSE(ctx.device_lost());
    check_usable(ctx, rng);
    check_clean(ctx);
  }
}

TEST_CASE("faults: VK_ERROR_DEVICE_LOST is an Error that says so, and the lost Context refuses work") {
  std::mt19937 rng(7);
  auto ctx = std::make_unique<Context>(validated());
  const BlockConfig c = small_config();
  test::RandomWeights w(c, rng);
  auto block = std::make_unique<GatedAttention>(*ctx, c, w.map);
  const std::vector<float> x(2 * 64, 0.5f);
  block->forward(x, 1, 2);
  ctx->impl().inject_wait = VK_ERROR_DEVICE_LOST;
  Error e = caught([&] { block->forward(x, 1, 2); });
  CHECK(e.code() == ErrorCode::device_lost);
  CHECK(e.vk_result() == VK_ERROR_DEVICE_LOST);
  CHECK(std::string(e.what()) ==
        "running the gated attention block: vkWaitForFences failed with VK_ERROR_DEVICE_LOST (the Vulkan device was "
        "lost; create a new Context)");
  CHECK(ctx->device_lost());
  // Every later use fails at once with the same code.
  e = caught([&] { block->forward(x, 1, 2); });
  CHECK(e.code() == ErrorCode::device_lost);
  CHECK(std::string(e.what()).find("the Vulkan device was lost earlier") != std::string::npos);
  e = caught([&] { GatedAttention another(*ctx, c, w.map); });
  CHECK(e.code() == ErrorCode::device_lost);
  // Tearing down a lost Context is quiet: no abort, no validation message.
  block.reset();
  check_clean(*ctx);
  ctx.reset();
  // A new Context works.
  Context fresh(validated());
  check_usable(fresh, rng);
  check_clean(fresh);
}

TEST_CASE("faults: no Vulkan driver at all (VK_LOADER_DRIVERS_DISABLE='*') is Error(no_device)") {
  {
    test::ScopedEnv env("VK_LOADER_DRIVERS_DISABLE", "*");
    for (bool validation : {false, true}) {
      CAPTURE(validation);
      ContextOptions o;
      o.validation = validation;
      Error e = caught([&] { Context ctx(o); });
      CHECK(e.code() == ErrorCode::no_device);
      CHECK(std::string(e.what()) ==
            "creating the Vulkan instance: no Vulkan driver was found (vkCreateInstance failed with "
            "VK_ERROR_INCOMPATIBLE_DRIVER); VK_LOADER_DRIVERS_DISABLE='*' disables drivers");
    }
    Error e = caught([] { Context::list_devices(); });
    CHECK(e.code() == ErrorCode::no_device);
  }
  // A selector that matches nothing names the devices there are.
  ContextOptions o;
  o.device = "no such device";
  Error e = caught([&] { Context ctx(o); });
  CHECK(e.code() == ErrorCode::no_device);
  CHECK(std::string(e.what()).find("device selector: no device name contains 'no such device' (devices: 0: ") == 0);
}

}  // namespace test_faults
