// Choosing the next token from a row of logits: greedy (the default), or a
// draw from the distribution that transformers' generate() samples from, its
// processors applied in its order:
//
//   penalties (repeat, presence, frequency) over the latest ids of the context
//   -> greedy when temperature is 0, else: logits / temperature
//   -> top_k -> top_p -> min_p -> softmax -> one draw
//
//   vkgate::Sampler s({.temperature = 0.8, .top_p = 0.95, .seed = 7});
//   int64_t id = s.sample(logits, context_ids);
//
// Thread safety: a Sampler (its random state) is used by one thread at a time.
// Faults: options outside their ranges are an Error(invalid_argument) naming
// the option, raised by the constructor.
#pragma once

#include <cstdint>
#include <optional>
#include <random>
#include <span>
#include <utility>
#include <vector>

namespace vkgate {

struct SamplingOptions {
  // 0: greedy, the most likely id (the first of equal maxima); > 0: sample
  // from softmax(logits / temperature).
  double temperature = 0.0;
  // Keep only the k most likely ids (0: all).
  int top_k = 0;
  // Keep the smallest set of the most likely ids whose probability reaches
  // top_p, in (0, 1] (1: all).
  double top_p = 1.0;
  // Drop the ids whose probability is below min_p × the most likely one's, in [0, 1].
  double min_p = 0.0;
  // transformers' repetition_penalty (llama.cpp's repeat_penalty): the logit l
  // of an id among the last repeat_last_n of the context becomes l / p when
  // l > 0, else l · p. 1: off; must be positive.
  double repeat_penalty = 1.0;
  // OpenAI's: l − presence (once an id occurs) − frequency × its count, over
  // the same window; each in [−2, 2], 0: off.
  double presence_penalty = 0.0;
  double frequency_penalty = 0.0;
  // How many of the context's latest ids the penalties look at: 0 none, −1
  // all (llama.cpp's default is 64).
  int repeat_last_n = 64;
  // The draws of one seed are the same on every run and platform; none: a
  // seed from std::random_device.
  std::optional<uint64_t> seed;

  bool greedy() const { return temperature == 0.0; }
};

class Sampler {
 public:
  explicit Sampler(const SamplingOptions& options = {});
  // The next id for `logits` [V]; `context` is the ids so far (the prompt,
  // then those generated), which the penalties read.
  int64_t sample(std::span<const float> logits, std::span<const int64_t> context);
  // How many of a row's most likely ids sample() needs to choose from, when
  // that is fewer than all (Model::extend_top selects them on the device): 1
  // greedy, top_k when sampling with 1 ≤ top_k ≤ kMaxTopCandidates; 0 (the
  // whole row) with penalties, which read the context's ids wherever they rank.
  static constexpr int kMaxTopCandidates = 256;
  int top_candidates() const;
  // sample() from a row's most likely ids and their logits, most likely
  // first and equal logits the lower id first: at least top_candidates() of
  // them, and every id tied with the top_candidates()-th unless the list ends
  // before the tie does (the caller's to rule out). The same id as sample()
  // on the whole row, with the same draws.
  int64_t sample_top(std::span<const int64_t> ids, std::span<const float> logits);
  // The distribution sample() draws from: (id, probability) of every id left
  // after the processors, most likely first, summing to 1 (greedy: the one id
  // with probability 1). Does not draw.
  std::vector<std::pair<int64_t, double>> distribution(std::span<const float> logits,
                                                       std::span<const int64_t> context) const;
  const SamplingOptions& options() const { return options_; }

 private:
  SamplingOptions options_;
  std::mt19937_64 rng_;
};

}  // namespace vkgate
