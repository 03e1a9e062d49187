// Proof that the harness works: the validation layer (with synchronization
// validation) must report a missing barrier and an invalid call. If these
// fail, a green suite means nothing.
#include "harness.hpp"
#include "gpu/recorder.hpp"
#include "ops/ops.hpp"

namespace test_validation {

using namespace vkgate;

TEST_CASE("validation: the layer with synchronization validation is active in tests") {
  Context& ctx = test::context();
  REQUIRE(ctx.validation_enabled());
  ctx.take_validation_messages();

  SUBCASE("a missing barrier between a write and a read is reported") {
    auto& vk = ctx.impl();
    test::GpuTest t;
    auto x = t.upload(t.random(64 * 64), "x");
    auto w = t.upload(t.random(64 * 64), "w");
    auto y = t.device(64 * 64, "y"), z = t.device(64 * 64, "z");
    gpu::Recorder rec(vk);
    rec.begin();
    rec.disable_hazard_tracking_for_test();
    ops::matmul(vk, rec, {.x = x, .w = w, .y = y, .M = 64, .N = 64, .K = 64});  // writes y
    ops::matmul(vk, rec, {.x = y, .w = w, .y = z, .M = 64, .N = 64, .K = 64});  // reads y: RAW without a barrier
    rec.end();
    rec.submit("missing-barrier test");
    const auto msgs = ctx.take_validation_messages();
    CHECK_MESSAGE(!msgs.empty(), "sync validation did not report a read-after-write hazard");
    bool hazard = false;
    for (const auto& m : msgs) hazard = hazard || m.find("SYNC-HAZARD") != std::string::npos;
    CHECK(hazard);
  }

  SUBCASE("with hazard tracking the same sequence is clean, and needs exactly one barrier") {
    auto& vk = ctx.impl();
    test::GpuTest t;
    auto x = t.upload(t.random(64 * 64), "x");
    auto w = t.upload(t.random(64 * 64), "w");
    auto y = t.device(64 * 64, "y"), z = t.device(64 * 64, "z"), u = t.device(64 * 64, "u");
    gpu::Recorder rec(vk);
    rec.begin();
    ops::matmul(vk, rec, {.x = x, .w = w, .y = y, .M = 64, .N = 64, .K = 64});
    ops::matmul(vk, rec, {.x = x, .w = w, .y = u, .M = 64, .N = 64, .K = 64});  // independent: no barrier
    ops::matmul(vk, rec, {.x = y, .w = w, .y = z, .M = 64, .N = 64, .K = 64});  // RAW on y: one barrier
    rec.end();
    rec.submit("tracked test");
    CHECK(rec.barrier_count() == 1);
  }

  SUBCASE("an invalid call is reported") {
    auto& vk = ctx.impl();
    VkBufferCreateInfo bci{VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO};
    bci.size = 0;  // VUID-VkBufferCreateInfo-size-00912: size must be greater than 0
    bci.usage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT;
    VkBuffer buffer = VK_NULL_HANDLE;
    vkCreateBuffer(vk.device, &bci, nullptr, &buffer);
    if (buffer) vkDestroyBuffer(vk.device, buffer, nullptr);
    const auto msgs = ctx.take_validation_messages();
    CHECK_MESSAGE(!msgs.empty(), "a zero-sized buffer was not reported");
    bool named = false;
    for (const auto& m : msgs) named = named || m.find("00912") != std::string::npos;
    CHECK(named);
  }
}

}  // namespace test_validation
