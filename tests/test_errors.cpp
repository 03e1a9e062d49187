// The error surface (issue 5, item 8): one exception type, vkgate::Error, with
// a code from a closed enum and a message saying what was being done, which
// call failed and with which VkResult. Every code is listed here with its
// text, and the VkResult → code mapping is checked for every result name.
#include "doctest.hpp"

#include <set>
#include <string>
#include <type_traits>

#include "gpu/vk.hpp"
#include "vkgate/error.hpp"

namespace test_errors {

using namespace vkgate;

namespace {
// Stands in for a Vulkan entry point: VK_CHECK names the call from its text.
VkResult vkAllocateMemoryStandIn(VkResult r, int) { return r; }
}  // namespace

TEST_CASE("errors: every ErrorCode is listed and has its own text") {
  // The full table. A code added to the enum without a line here fails the
  // count check below; one without a to_string case fails the text check.
  const std::pair<ErrorCode, const char*> table[] = {
      {ErrorCode::invalid_argument, "invalid argument"},
      {ErrorCode::invalid_config, "invalid config"},
      {ErrorCode::missing_tensor, "missing tensor"},
      {ErrorCode::shape_mismatch, "shape mismatch"},
      {ErrorCode::io, "i/o error"},
      {ErrorCode::no_device, "no device"},
      {ErrorCode::unsupported, "unsupported"},
      {ErrorCode::out_of_memory, "out of memory"},
      {ErrorCode::device_lost, "device lost"},
      {ErrorCode::vulkan, "vulkan error"},
      {ErrorCode::validation, "validation error"},
      {ErrorCode::non_finite, "non-finite value"},
  };
  const auto all = all_error_codes();
  REQUIRE(all.size() == std::size(table));
  std::set<std::string> texts;
  for (size_t i = 0; i < all.size(); ++i) {
    CAPTURE(i);
    CHECK(all[i] == table[i].first);
    CHECK(int(all[i]) == int(i));  // declaration order, no gaps
    CHECK(std::string(to_string(table[i].first)) == table[i].second);
    texts.insert(to_string(all[i]));
  }
  CHECK(texts.size() == all.size());
  CHECK(std::string(to_string(ErrorCode(int(all.size())))) == "unknown error");
}

TEST_CASE("errors: Error is a std::runtime_error carrying code, message and VkResult") {
  static_assert(std::is_base_of_v<std::runtime_error, Error>);
  const Error e(ErrorCode::io, "reading 'x.safetensors': truncated header");
  CHECK(e.code() == ErrorCode::io);
  CHECK(std::string(e.what()) == "reading 'x.safetensors': truncated header");
  CHECK(e.vk_result() == 0);
  try {
    throw Error(ErrorCode::vulkan, "m", -13);
  } catch (const std::exception& base) {  // callers that only know std::exception still get the text
    CHECK(std::string(base.what()) == "m");
    CHECK(dynamic_cast<const Error&>(base).vk_result() == -13);
  }
}

TEST_CASE("errors: a failed Vulkan call names what was done, the call and the VkResult") {
  struct Case {
    VkResult result;
    ErrorCode code;
    const char* text;
  };
  const Case cases[] = {
      {VK_ERROR_OUT_OF_DEVICE_MEMORY, ErrorCode::out_of_memory,
       "allocating 'q': vkAllocateMemoryStandIn failed with VK_ERROR_OUT_OF_DEVICE_MEMORY (device memory is exhausted)"},
      {VK_ERROR_OUT_OF_HOST_MEMORY, ErrorCode::out_of_memory,
       "allocating 'q': vkAllocateMemoryStandIn failed with VK_ERROR_OUT_OF_HOST_MEMORY (host memory is exhausted)"},
      {VK_ERROR_DEVICE_LOST, ErrorCode::device_lost,
       "allocating 'q': vkAllocateMemoryStandIn failed with VK_ERROR_DEVICE_LOST (the Vulkan device was lost; create a new "
       "Context)"},
      {VK_ERROR_INITIALIZATION_FAILED, ErrorCode::vulkan,
       "allocating 'q': vkAllocateMemoryStandIn failed with VK_ERROR_INITIALIZATION_FAILED"},
      {VkResult(-123456), ErrorCode::vulkan, "allocating 'q': vkAllocateMemoryStandIn failed with VkResult(-123456)"},
  };
  for (const Case& c : cases) {
    CAPTURE(int(c.result));
    try {
      VK_CHECK(vkAllocateMemoryStandIn(c.result, 0), "allocating 'q'");  // the macro takes the call text up to '('
      FAIL("no throw");
    } catch (const Error& e) {
      CHECK(e.code() == c.code);
      CHECK(e.vk_result() == int32_t(c.result));
      CHECK(std::string(e.what()) == c.text);
    }
  }
  CHECK_NOTHROW(VK_CHECK(VK_SUCCESS, "nothing"));
}

TEST_CASE("errors: every VkResult of the Vulkan 1.3 headers has its name") {
  const auto known = gpu::known_results();
  CHECK(known.size() >= 44);
  std::set<std::string> names;
  for (int32_t v : known) {
    const char* n = gpu::result_name(VkResult(v));
    REQUIRE(n != nullptr);
    CHECK(std::string(n).rfind("VK_", 0) == 0);
    names.insert(n);
  }
  CHECK(names.size() == known.size());
  CHECK(std::string(gpu::result_name(VK_ERROR_DEVICE_LOST)) == "VK_ERROR_DEVICE_LOST");
  CHECK(std::string(gpu::result_name(VK_ERROR_OUT_OF_POOL_MEMORY)) == "VK_ERROR_OUT_OF_POOL_MEMORY");
  CHECK(gpu::result_name(VkResult(-999)) == nullptr);
  CHECK(gpu::result_text(VkResult(-999)) == "VkResult(-999)");
  // Each error result maps to exactly one code.
  for (int32_t v : known) {
    if (v >= 0) continue;
    const ErrorCode code = gpu::vk_error(VkResult(v), "vkX()", "doing").code();
    const bool oom = v == VK_ERROR_OUT_OF_DEVICE_MEMORY || v == VK_ERROR_OUT_OF_HOST_MEMORY;
    CHECK(code == (oom ? ErrorCode::out_of_memory : v == VK_ERROR_DEVICE_LOST ? ErrorCode::device_lost : ErrorCode::vulkan));
  }
}

}  // namespace test_errors
