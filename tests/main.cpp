#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <cstdio>

#include "doctest.hpp"
#include "harness.hpp"

namespace {

// Names the seed that replays a failed test's random draw (harness.hpp's
// drawn_seed), so that a failure seen once in CI can be run again.
struct SeedListener : doctest::IReporter {
  explicit SeedListener(const doctest::ContextOptions&) {}
  void test_case_start(const doctest::TestCaseData&) override { vkgate::test::drawn_seed().reset(); }
  void test_case_end(const doctest::CurrentTestCaseStats& stats) override {
    if (!stats.testCaseSuccess && vkgate::test::drawn_seed())
      std::printf("VKGATE_TEST_SEED=%u replays this test's random draw\n", unsigned(*vkgate::test::drawn_seed()));
  }
  void report_query(const doctest::QueryData&) override {}
  void test_run_start() override {}
  void test_run_end(const doctest::TestRunStats&) override {}
  void test_case_reenter(const doctest::TestCaseData&) override {}
  void test_case_exception(const doctest::TestCaseException&) override {}
  void subcase_start(const doctest::SubcaseSignature&) override {}
  void subcase_end() override {}
  void log_assert(const doctest::AssertData&) override {}
  void log_message(const doctest::MessageData&) override {}
  void test_case_skipped(const doctest::TestCaseData&) override {}
};
REGISTER_LISTENER("seed", 1, SeedListener);

}  // namespace
