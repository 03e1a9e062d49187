#include "vkgate/sampling.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <sstream>
#include <string>
#include <unordered_map>

#include "vkgate/error.hpp"

namespace vkgate {

namespace {

void require(bool ok, const char* option, const char* range, double got) {
  if (ok) return;
  std::ostringstream os;
  os << "sampling: " << option << " must be " << range << ", got " << got;
  throw Error(ErrorCode::invalid_argument, os.str());
}

bool in(double x, double lo, double hi) { return std::isfinite(x) && x >= lo && x <= hi; }

// The logits in double with the penalties applied to the ids of the context's window.
std::vector<double> penalized(std::span<const float> logits, std::span<const int64_t> context,
                              const SamplingOptions& o) {
  std::vector<double> l(logits.begin(), logits.end());
  const bool any = o.repeat_penalty != 1.0 || o.presence_penalty != 0.0 || o.frequency_penalty != 0.0;
  if (!any || o.repeat_last_n == 0) return l;
  const size_t n = o.repeat_last_n < 0 ? context.size() : std::min(context.size(), size_t(o.repeat_last_n));
  std::unordered_map<int64_t, int> counts;
  for (int64_t id : context.last(n))
    if (id >= 0 && size_t(id) < l.size()) ++counts[id];
  for (const auto& [id, count] : counts) {
    double& x = l[size_t(id)];
    x = x > 0 ? x / o.repeat_penalty : x * o.repeat_penalty;
    x -= o.presence_penalty + o.frequency_penalty * count;
  }
  return l;
}

int64_t first_max(const std::vector<double>& l) {
  return std::max_element(l.begin(), l.end()) - l.begin();  // the first of equal maxima
}

// The ids left after top_k, top_p and min_p (most likely first only as far as
// top_p needed to sort), with weights exp(l − max) proportional to their
// probabilities. Only the kept ids are sorted: a vocabulary of 151,936 is not.
struct Candidates {
  std::vector<int32_t> ids;
  std::vector<double> weights;
};

bool penalties(const SamplingOptions& o) {
  return o.repeat_last_n != 0 && (o.repeat_penalty != 1.0 || o.presence_penalty != 0.0 || o.frequency_penalty != 0.0);
}

// The processors after top_k on `ids` (what top_k kept, most likely first
// when top_k applied) of scaled logits l (indexed by id).
Candidates after_top_k(std::vector<int32_t> ids, const std::vector<double>& l, const SamplingOptions& o);

Candidates candidates(std::vector<double> l, const SamplingOptions& o) {
  for (double& x : l) x /= o.temperature;
  std::vector<int32_t> ids(l.size());
  std::iota(ids.begin(), ids.end(), 0);
  auto more_likely = [&](int32_t a, int32_t b) { return l[size_t(a)] > l[size_t(b)] || (l[size_t(a)] == l[size_t(b)] && a < b); };
  // top_k keeps every id tied with the k-th (as transformers' `scores < kth` mask does), most
  // likely first: the order sample_top() finds them in, so that both draw the same id.
  if (o.top_k > 0 && size_t(o.top_k) < ids.size()) {
    std::nth_element(ids.begin(), ids.begin() + (o.top_k - 1), ids.end(), more_likely);
    const double kth = l[size_t(ids[size_t(o.top_k - 1)])];
    ids.erase(std::partition(ids.begin(), ids.end(), [&](int32_t i) { return l[size_t(i)] >= kth; }), ids.end());
    std::sort(ids.begin(), ids.end(), more_likely);
  }
  return after_top_k(std::move(ids), l, o);
}

Candidates after_top_k(std::vector<int32_t> ids, const std::vector<double>& l, const SamplingOptions& o) {
  auto more_likely = [&](int32_t a, int32_t b) { return l[size_t(a)] > l[size_t(b)] || (l[size_t(a)] == l[size_t(b)] && a < b); };
  const double max = l[size_t(*std::min_element(ids.begin(), ids.end(), more_likely))];
  auto weight = [&](int32_t i) { return std::exp(l[size_t(i)] - max); };
  if (o.top_p < 1.0) {
    double z = 0;
    for (int32_t i : ids) z += weight(i);
    // Sort a growing prefix until it holds top_p of the mass: peaked distributions need few ids.
    size_t sorted = std::min<size_t>(ids.size(), 64);
    for (;;) {
      std::partial_sort(ids.begin(), ids.begin() + long(sorted), ids.end(), more_likely);
      double mass = 0;
      size_t keep = 0;
      while (keep < sorted && mass < o.top_p * z) mass += weight(ids[keep++]);
      if (mass >= o.top_p * z || sorted == ids.size()) {
        ids.resize(std::max<size_t>(keep, 1));
        break;
      }
      sorted = std::min(ids.size(), sorted * 4);
    }
  }
  // min_p against the most likely id, whose weight is 1; top_p never drops it.
  if (o.min_p > 0)
    ids.erase(std::remove_if(ids.begin(), ids.end(), [&](int32_t i) { return weight(i) < o.min_p; }), ids.end());
  Candidates c;
  c.ids = std::move(ids);
  c.weights.reserve(c.ids.size());
  for (int32_t i : c.ids) c.weights.push_back(weight(i));
  return c;
}

int64_t draw(const Candidates& c, std::mt19937_64& rng) {
  double total = 0;
  for (double w : c.weights) total += w;
  // 53 random bits as a double in [0, 1): the same draws wherever mt19937_64 is.
  const double u = double(rng() >> 11) * 0x1.0p-53 * total;
  double cum = 0;
  for (size_t i = 0; i < c.ids.size(); ++i)
    if ((cum += c.weights[i]) > u) return c.ids[i];
  return c.ids.back();  // u within rounding of the total
}

}  // namespace

Sampler::Sampler(const SamplingOptions& o) : options_(o) {
  require(in(o.temperature, 0, 1e6), "temperature", "in [0, 1e6]", o.temperature);
  require(o.top_k >= 0, "top_k", ">= 0", o.top_k);
  require(in(o.top_p, 0, 1) && o.top_p > 0, "top_p", "in (0, 1]", o.top_p);
  require(in(o.min_p, 0, 1), "min_p", "in [0, 1]", o.min_p);
  require(in(o.repeat_penalty, 0, 1e6) && o.repeat_penalty > 0, "repeat_penalty", "positive", o.repeat_penalty);
  require(in(o.presence_penalty, -2, 2), "presence_penalty", "in [-2, 2]", o.presence_penalty);
  require(in(o.frequency_penalty, -2, 2), "frequency_penalty", "in [-2, 2]", o.frequency_penalty);
  require(o.repeat_last_n >= -1, "repeat_last_n", ">= -1 (-1: the whole context)", o.repeat_last_n);
  std::random_device device;
  rng_.seed(o.seed ? *o.seed : (uint64_t(device()) << 32) ^ device());
}

int64_t Sampler::sample(std::span<const float> logits, std::span<const int64_t> context) {
  if (logits.empty()) throw Error(ErrorCode::invalid_argument, "sampling: no logits");
  std::vector<double> l = penalized(logits, context, options_);
  if (options_.greedy()) return first_max(l);
  return draw(candidates(std::move(l), options_), rng_);
}

int Sampler::top_candidates() const {
  if (penalties(options_)) return 0;
  if (options_.greedy()) return 1;
  return options_.top_k > 0 && options_.top_k <= kMaxTopCandidates ? options_.top_k : 0;
}

int64_t Sampler::sample_top(std::span<const int64_t> ids, std::span<const float> logits) {
  const size_t k = size_t(top_candidates());
  if (k == 0 || ids.size() < k || logits.size() != ids.size())
    throw Error(ErrorCode::invalid_argument, "sampling: sample_top takes at least the top_candidates() (" +
                                                 std::to_string(k) + ") most likely ids, got " +
                                                 std::to_string(ids.size()));
  if (options_.greedy()) return ids[0];
  // top_k's candidates (every id tied with the k-th) as local ids 0..n-1, in the order candidates() sorts them into.
  size_t n = k;
  while (n < logits.size() && logits[n] == logits[k - 1]) ++n;
  std::vector<double> l(logits.begin(), logits.begin() + long(n));
  for (double& x : l) x /= options_.temperature;
  std::vector<int32_t> local(n);
  std::iota(local.begin(), local.end(), 0);
  Candidates c = after_top_k(std::move(local), l, options_);
  for (int32_t& id : c.ids) id = int32_t(ids[size_t(id)]);
  return draw(c, rng_);
}

std::vector<std::pair<int64_t, double>> Sampler::distribution(std::span<const float> logits,
                                                              std::span<const int64_t> context) const {
  if (logits.empty()) throw Error(ErrorCode::invalid_argument, "sampling: no logits");
  std::vector<double> l = penalized(logits, context, options_);
  if (options_.greedy()) return {{first_max(l), 1.0}};
  const Candidates c = candidates(l, options_);
  double total = 0;
  for (double w : c.weights) total += w;
  std::vector<std::pair<int64_t, double>> out;
  for (size_t i = 0; i < c.ids.size(); ++i) out.push_back({c.ids[i], c.weights[i] / total});
  std::sort(out.begin(), out.end(),
            [](const auto& a, const auto& b) { return a.second > b.second || (a.second == b.second && a.first < b.first); });
  return out;
}

}  // namespace vkgate
