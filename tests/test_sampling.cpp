// The Sampler against the definitions of its processors (transformers'
// generate(): repetition penalty, temperature, top-k, top-p, min-p; OpenAI's
// presence and frequency penalties), each computed here independently in
// double, and the draws of a fixed seed.
#include "doctest.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <random>
#include <vector>

#include "test_util.hpp"
#include "vkgate/error.hpp"
#include "vkgate/sampling.hpp"

namespace test_sampling {

using namespace vkgate;

namespace {

// Logits whose softmax is `probs`.
std::vector<float> logits_of(const std::vector<double>& probs) {
  std::vector<float> l;
  for (double p : probs) l.push_back(float(std::log(p)));
  return l;
}

// softmax(l / t) over the ids in `keep` (every id when empty), renormalised.
template <typename F>
std::map<int64_t, double> softmax_over(const std::vector<F>& l, double t, std::vector<int64_t> keep = {}) {
  if (keep.empty())
    for (size_t i = 0; i < l.size(); ++i) keep.push_back(int64_t(i));
  double max = -INFINITY, z = 0;
  for (int64_t i : keep) max = std::max(max, double(l[size_t(i)]) / t);
  std::map<int64_t, double> p;
  for (int64_t i : keep) z += p[i] = std::exp(double(l[size_t(i)]) / t - max);
  for (auto& [i, v] : p) v /= z;
  return p;
}

void check_distribution(const std::vector<std::pair<int64_t, double>>& got, const std::map<int64_t, double>& want) {
  REQUIRE(got.size() == want.size());
  double sum = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    CAPTURE(got[i].first);
    REQUIRE(want.count(got[i].first) == 1);
    CHECK(got[i].second == doctest::Approx(want.at(got[i].first)).epsilon(1e-12));
    if (i) CHECK(got[i].second <= got[i - 1].second);  // most likely first
    sum += got[i].second;
  }
  CHECK(sum == doctest::Approx(1.0).epsilon(1e-12));
}

const std::vector<int64_t> kNoContext;

}  // namespace

TEST_CASE("sampling: greedy is the first of equal maxima, and the penalties apply to it too") {
  Sampler greedy;
  CHECK(greedy.sample(std::vector<float>{1, 3, 3, 2}, kNoContext) == 1);
  const auto d = greedy.distribution(std::vector<float>{1, 3, 3, 2}, kNoContext);
  REQUIRE(d.size() == 1);
  CHECK(d[0] == std::pair<int64_t, double>{1, 1.0});
  // 3 / 2 = 1.5 < 2: a repeated id loses the lead.
  Sampler penalised({.repeat_penalty = 2.0});
  const std::vector<int64_t> context{2, 1};
  CHECK(penalised.sample(std::vector<float>{1, 3, 2.5f, 2}, context) == 3);
}

TEST_CASE("sampling: temperature is softmax(logits / T)") {
  const std::vector<float> l{0.5f, -1.0f, 2.0f, 0.0f, 1.25f};
  for (double t : {0.3, 1.0, 2.5}) {
    CAPTURE(t);
    check_distribution(Sampler({.temperature = t}).distribution(l, kNoContext), softmax_over(l, t));
  }
}

TEST_CASE("sampling: top-k keeps the k most likely (and every id tied with the k-th), renormalised") {
  const std::vector<float> l{0.1f, 3.0f, -2.0f, 1.0f, 2.0f, 1.0f};
  check_distribution(Sampler({.temperature = 1, .top_k = 2}).distribution(l, kNoContext), softmax_over(l, 1, {1, 4}));
  // The 3rd most likely is tied with id 5: transformers' mask (scores < k-th) keeps both.
  check_distribution(Sampler({.temperature = 1, .top_k = 3}).distribution(l, kNoContext),
                     softmax_over(l, 1, {1, 4, 3, 5}));
  check_distribution(Sampler({.temperature = 1, .top_k = 100}).distribution(l, kNoContext), softmax_over(l, 1));
}

TEST_CASE("sampling: top-p keeps the fewest most likely ids whose probability reaches p") {
  const std::vector<float> l = logits_of({0.1, 0.5, 0.05, 0.15, 0.2});  // order: 1, 4, 3, 0, 2
  check_distribution(Sampler({.temperature = 1, .top_p = 0.45}).distribution(l, kNoContext), softmax_over(l, 1, {1}));
  check_distribution(Sampler({.temperature = 1, .top_p = 0.6}).distribution(l, kNoContext), softmax_over(l, 1, {1, 4}));
  check_distribution(Sampler({.temperature = 1, .top_p = 0.8}).distribution(l, kNoContext),
                     softmax_over(l, 1, {1, 4, 3}));
  check_distribution(Sampler({.temperature = 1, .top_p = 1.0}).distribution(l, kNoContext), softmax_over(l, 1));
  // After top-k: p is measured on the renormalised top-k distribution (transformers' order).
  // {0.5, 0.2} renormalised is {0.714, 0.286}: p 0.7 keeps only id 1 (without top-k it keeps two).
  check_distribution(Sampler({.temperature = 1, .top_k = 2, .top_p = 0.7}).distribution(l, kNoContext),
                     softmax_over(l, 1, {1}));
  check_distribution(Sampler({.temperature = 1, .top_p = 0.7}).distribution(l, kNoContext), softmax_over(l, 1, {1, 4}));
}

TEST_CASE("sampling: top-p over a large vocabulary equals the definition on a full sort") {
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0, 3);
  std::vector<float> l(20000);
  for (float& x : l) x = normal(rng);
  for (double p : {0.5, 0.9, 0.999}) {
    CAPTURE(p);
    std::vector<int64_t> order(l.size());
    std::iota(order.begin(), order.end(), 0);
    std::sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return l[size_t(a)] > l[size_t(b)]; });
    const auto all = softmax_over(l, 0.7);
    std::vector<int64_t> keep;
    double mass = 0;
    for (int64_t i : order) {
      if (mass >= p) break;
      keep.push_back(i);
      mass += all.at(i);
    }
    check_distribution(Sampler({.temperature = 0.7, .top_p = p}).distribution(l, kNoContext), softmax_over(l, 0.7, keep));
  }
}

TEST_CASE("sampling: min-p drops ids less likely than min_p × the most likely") {
  const std::vector<float> l = logits_of({0.1, 0.5, 0.05, 0.15, 0.2});
  // 0.3 × 0.5 = 0.15: ids with p >= 0.15 stay (0.5, 0.2, 0.15).
  check_distribution(Sampler({.temperature = 1, .min_p = 0.29}).distribution(l, kNoContext),
                     softmax_over(l, 1, {1, 4, 3}));
  check_distribution(Sampler({.temperature = 1, .min_p = 0.5}).distribution(l, kNoContext), softmax_over(l, 1, {1}));
  check_distribution(Sampler({.temperature = 1, .min_p = 1.0}).distribution(l, kNoContext), softmax_over(l, 1, {1}));
}

TEST_CASE("sampling: repeat, presence and frequency penalties over the context's window") {
  const std::vector<float> l{2.0f, -1.0f, 0.5f, 1.0f, 0.0f};
  const std::vector<int64_t> context{4, 0, 1, 0, 3, 0};
  // Window of the last 4 ids: 1, 0, 3, 0 (id 4 is outside it).
  SamplingOptions o{.temperature = 1, .repeat_penalty = 1.5, .presence_penalty = 0.25, .frequency_penalty = 0.5,
                    .repeat_last_n = 4};
  std::vector<double> want(l.begin(), l.end());
  want[0] = 2.0 / 1.5 - 0.25 - 0.5 * 2;
  want[1] = -1.0 * 1.5 - 0.25 - 0.5 * 1;
  want[3] = 1.0 / 1.5 - 0.25 - 0.5 * 1;
  check_distribution(Sampler(o).distribution(l, context), softmax_over(want, 1));
  // -1: the whole context (id 4 is penalised too, and id 0 counts 3 times).
  o.repeat_last_n = -1;
  want[0] = 2.0 / 1.5 - 0.25 - 0.5 * 3;
  want[4] = 0.0 * 1.5 - 0.25 - 0.5 * 1;
  check_distribution(Sampler(o).distribution(l, context), softmax_over(want, 1));
  // 0: none.
  o.repeat_last_n = 0;
  check_distribution(Sampler(o).distribution(l, context), softmax_over(l, 1));
}

TEST_CASE("sampling: a seed's draws are fixed, and the draws follow the distribution") {
  // Ids 0..3 with probabilities 0.4, 0.3, 0.2, 0.1. The draws of seed 7 are
  // u = (mt19937_64(7)() >> 11) · 2^-53 = 0.7544, 0.9493, 0.1174, 0.8919, each
  // taken on the cumulative sums 0.4, 0.7, 0.9, 1 in id order.
  const std::vector<float> l = logits_of({0.4, 0.3, 0.2, 0.1});
  Sampler s({.temperature = 1, .seed = 7});
  std::vector<int64_t> draws;
  for (int i = 0; i < 4; ++i) draws.push_back(s.sample(l, kNoContext));
  CHECK(draws == std::vector<int64_t>{2, 3, 0, 2});
  Sampler again({.temperature = 1, .seed = 7}), other({.temperature = 1, .seed = 8});
  std::vector<int64_t> a, b, c;
  for (int i = 0; i < 64; ++i) {
    a.push_back(again.sample(l, kNoContext));
    c.push_back(other.sample(l, kNoContext));
  }
  Sampler third({.temperature = 1, .seed = 7});
  for (int i = 0; i < 64; ++i) b.push_back(third.sample(l, kNoContext));
  CHECK(a == b);
  CHECK(a != c);

  // 200,000 draws: each id's share within 5 standard deviations of its probability.
  Sampler many({.temperature = 1, .top_k = 3, .seed = 11});
  const auto d = many.distribution(l, kNoContext);  // 0.444, 0.333, 0.222
  std::map<int64_t, int> counts;
  const int n = 200000;
  for (int i = 0; i < n; ++i) ++counts[many.sample(l, kNoContext)];
  CHECK(counts.count(3) == 0);
  for (const auto& [id, p] : d) {
    CAPTURE(id);
    CHECK(std::abs(counts[id] / double(n) - p) < 5 * std::sqrt(p * (1 - p) / n));
  }
}

TEST_CASE("sampling: options outside their ranges are errors naming the option") {
  const std::pair<SamplingOptions, const char*> bad[] = {
      {{.temperature = -1}, "temperature"},     {{.temperature = NAN}, "temperature"},
      {{.top_k = -1}, "top_k"},                 {{.top_p = 0}, "top_p"},
      {{.top_p = 1.5}, "top_p"},                {{.min_p = -0.1}, "min_p"},
      {{.repeat_penalty = 0}, "repeat_penalty"}, {{.presence_penalty = 3}, "presence_penalty"},
      {{.frequency_penalty = -2.5}, "frequency_penalty"}, {{.repeat_last_n = -2}, "repeat_last_n"},
  };
  for (const auto& [o, name] : bad) {
    CAPTURE(name);
    test::expect_error([&] { Sampler s(o); }, ErrorCode::invalid_argument, {std::string("sampling: ") + name});
  }
}

}  // namespace test_sampling
