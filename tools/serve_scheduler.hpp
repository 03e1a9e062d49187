// `vkgate serve`: the scheduler. One thread owns the Model (a Model is used
// by one thread at a time); HTTP handler threads submit Jobs and wait on each
// Job's own channel. Up to `parallel` generations are active; every round
// steps each of them once (a prompt runs a piece per round), and queued jobs
// join between rounds, so a long generation or prompt does not hold the
// others back (continuous batching): the generations whose prompts have run
// take their next position together in one device step
// (Generation::step_all), the weights read once for all of them. A finished
// generation's sequence stays as long as `cache_slots` allow (the least
// recently used goes first): a later request whose prompt starts the same
// way (a chat's next turn, a shared system prompt) starts from it and runs
// only the rest (prompt caching).
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "vkgate/generate.hpp"
#include "vkgate/model.hpp"
#include "vkgate/tokenizer.hpp"

namespace vkgate::cli {

// One request's generation and the channel its handler reads.
struct Job {
  const std::chrono::steady_clock::time_point arrived = std::chrono::steady_clock::now();
  std::vector<int64_t> prompt;
  // No callbacks: the scheduler reads each step's text. keep_sequence: the
  // job may start from a cached sequence and leaves its own.
  GenerateOptions options;
  // Set by the handler when its client went away, or by shutdown: the
  // scheduler drops the job at its next step.
  std::atomic<bool> cancelled{false};

  std::mutex mu;
  std::condition_variable cv;
  // Guarded by mu.
  std::string unread;  // text not yet taken by a streaming handler
  std::string text;    // all the text
  std::vector<TokenLogprob> logprobs;  // with options.logprobs ≥ 0: each id's whose text is the answer's
  size_t logprobs_read = 0;            // how many of them a streaming handler took
  size_t completion_tokens = 0;
  size_t cached_tokens = 0;  // prompt tokens taken from a cached sequence (set by the first id)
  bool finished = false;
  FinishReason finish = FinishReason::length;
  std::optional<std::string> error;  // the generation failed (or the server is shutting down)
  int error_status = 500;

  // Waits up to `wait` for new text, logprobs or the end; returns (and clears)
  // the text not yet read, and moves the logprobs not yet read into `logprobs`.
  std::string take(std::chrono::milliseconds wait, bool& ended, std::vector<TokenLogprob>& logprobs);
  // Waits up to `wait` for the end; true once it came.
  bool wait_finished(std::chrono::milliseconds wait);
};

// A Prometheus histogram of seconds: cumulative counts of observations at
// most each bound, their count and their sum.
struct SecondsHistogram {
  static constexpr std::array<double, 11> kBounds{0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60};
  std::array<std::atomic<uint64_t>, kBounds.size()> at_most{};
  std::atomic<uint64_t> count{0};
  std::atomic<double> sum{0};
  void observe(double seconds);
};

struct SchedulerStats {
  std::atomic<uint64_t> requests_total{0}, prompt_tokens_total{0}, generated_tokens_total{0};
  std::atomic<uint64_t> prompt_tokens_cached_total{0};  // of prompt_tokens_total: not run, a cache held them
  std::atomic<int64_t> cached_sequences{0};
  std::atomic<uint64_t> prompt_rounds_total{0};  // rounds that ran prompt positions
  std::atomic<int64_t> active{0}, queued{0};
  std::atomic<double> tokens_per_second{0};
  std::atomic<uint64_t> kv_cache_bytes{0};
  // From a request's arrival to its first generated id: the wait for a slot,
  // tokenizing and the prompt's rounds included.
  SecondsHistogram first_token;
};

// The stats as Prometheus text (GET /metrics).
std::string prometheus_text(const SchedulerStats& s);

class Scheduler {
 public:
  // prefill_chunk: the most prompt positions one generation runs per round, so that a
  // long prompt delays the other generations' next tokens by one chunk at a time.
  // gather: how long a request that finds the scheduler idle waits for others
  // (until none has come for that long, at most 5 times it), so that a burst
  // of clients starts as one set of rows: their prompts run together, and
  // the set's step is recorded once.
  // cache_slots: finished generations' sequences kept for later prompts (0: none).
  Scheduler(Model& model, const Tokenizer& tokenizer, int parallel, int queue_limit, int prefill_chunk,
            std::chrono::milliseconds gather, int cache_slots);
  ~Scheduler();
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  enum class Admit { accepted, queue_full, closed };
  // Queues `jobs` (one request's choices) unless more than queue_limit jobs
  // would then be waiting for a slot: all of them, or none.
  Admit submit(std::span<const std::shared_ptr<Job>> jobs);
  // Refuses new jobs, ends the queued ones with 503, cancels the active ones
  // (each ends after its current step) and joins the thread.
  void shutdown();
  const SchedulerStats& stats() const { return stats_; }
  // The most jobs it holds at once: the active ones and the queued ones.
  int capacity() const { return parallel_ + queue_limit_; }

 private:
  struct Active;
  void run();
  // A job's slot is free again, and the active gauge drops: before its
  // handler hears that it ended, so that the client's next request finds the
  // slot (not a 429 for a job that has finished but is still counted until
  // the round ends) and /metrics no longer counts it.
  void free_slot();
  // Passes a generation's step on to its job's handler.
  void deliver(Active& a, Generation::Step s);
  void finish(Job& job, FinishReason why, const std::string& last_text);
  void fail(Job& job, int status, const std::string& message);
  // The cached sequence (taken out of the cache) that most of `job`'s
  // prompt can start from; none where none holds any of it.
  std::optional<CachedSequence> take_cached(const Job& job);

  Model& model_;
  const Tokenizer& tokenizer_;
  const int parallel_, queue_limit_, prefill_chunk_, cache_slots_;
  const std::chrono::milliseconds gather_;
  SchedulerStats stats_;

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<Job>> queue_;  // guarded by mu_
  int active_count_ = 0;                    // guarded by mu_
  bool closed_ = false;                     // guarded by mu_

  // Recent rounds, for the decode rate: (end time, ids generated, seconds stepping).
  struct Round {
    std::chrono::steady_clock::time_point at;
    size_t ids;
    double seconds;
  };
  std::deque<Round> recent_;  // scheduler thread only
  std::deque<CachedSequence> cached_;  // scheduler thread only; the most recently used last
  std::thread thread_;
};

}  // namespace vkgate::cli
