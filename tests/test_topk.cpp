// ops::top_k (shaders/topk.comp): each row's k largest logits and ids, the
// order and ties exactly as a stable sort by value (descending) gives them,
// and the count of ids tied with the k-th that did not fit; output poisoned.
#include <algorithm>
#include <cstring>
#include <numeric>

#include "harness.hpp"
#include "ops/ops.hpp"
#include "vkgate/error.hpp"

namespace test_topk {

using namespace vkgate;

namespace {

struct Expected {
  std::vector<std::pair<float, uint32_t>> top;  // (value, id), most likely first
  uint32_t tied_beyond = 0;
};

Expected host_top_k(const float* row, uint32_t n, uint32_t k) {
  std::vector<uint32_t> ids(n);
  std::iota(ids.begin(), ids.end(), 0u);
  std::stable_sort(ids.begin(), ids.end(), [&](uint32_t a, uint32_t b) { return row[a] > row[b]; });
  Expected e;
  for (uint32_t i = 0; i < k; ++i) e.top.push_back({row[ids[i]], ids[i]});
  for (uint32_t i = k; i < n && row[ids[i]] == row[ids[k - 1]]; ++i) ++e.tied_beyond;
  return e;
}

}  // namespace

TEST_CASE_FIXTURE(test::GpuTest, "top_k: each row's k largest, ties the lower id first, ties past k counted") {
  struct Shape {
    uint32_t rows, n, ld, k;
    int ties;  // 0: distinct values; 1: values from a few levels (many ties); 2: one row all equal
  };
  for (const Shape s : {Shape{1, 5, 5, 1, 0}, Shape{3, 1000, 1003, 40, 0}, Shape{4, 151936, 151936, 256, 0},
                        Shape{2, 300, 300, 256, 1}, Shape{5, 4096, 4100, 17, 1}, Shape{2, 999, 999, 8, 2},
                        Shape{1, 100, 100, 100, 0}}) {
    CAPTURE(s.rows);
    CAPTURE(s.n);
    CAPTURE(s.k);
    CAPTURE(s.ties);
    std::vector<float> x = random(size_t(s.rows) * s.ld, 4.0f);
    if (s.ties == 1)
      for (float& v : x) v = std::round(v);  // about 30 levels
    if (s.ties == 2) std::fill(x.begin(), x.begin() + s.ld, -1.5f);
    for (float& v : x) v -= 2.0f;  // negative and positive keys both
    auto gx = upload(x, "logits");
    const size_t words = size_t(s.rows) * (s.k + 1) * 2;
    auto gout = poisoned(words, "top");
    test::run_once(vk, [&](gpu::Recorder& rec) { ops::top_k(vk, rec, gx, s.rows, s.n, s.ld, s.k, gout); });
    const std::vector<float> raw = download(gout, words);
    for (uint32_t r = 0; r < s.rows; ++r) {
      CAPTURE(r);
      const Expected e = host_top_k(x.data() + size_t(r) * s.ld, s.n, s.k);
      const float* row = raw.data() + size_t(r) * (s.k + 1) * 2;
      bool same = true;
      for (uint32_t i = 0; i < s.k; ++i) {
        uint32_t id = 0;
        std::memcpy(&id, &row[2 * i + 1], 4);
        same = same && row[2 * i] == e.top[i].first && id == e.top[i].second;
      }
      CHECK(same);
      uint32_t tied = 0;
      std::memcpy(&tied, &row[2 * s.k], 4);
      CHECK(tied == e.tied_beyond);
    }
  }
  auto small = upload(random(8), "x");
  auto out = poisoned(64, "out");
  gpu::Recorder rec(vk);
  rec.begin();
  CHECK_THROWS_WITH_AS(ops::top_k(vk, rec, small, 1, 8, 8, 9, out), doctest::Contains("k 9"), Error);
  CHECK_THROWS_WITH_AS(ops::top_k(vk, rec, small, 1, 8, 8, 0, out), doctest::Contains("k 0"), Error);
  rec.end();
}

}  // namespace test_topk
