// `vkgate serve`: the scheduler thread (serve_scheduler.hpp).
#include "serve_scheduler.hpp"

#include <algorithm>
#include <cstdio>

#include "vkgate/error.hpp"

namespace vkgate::cli {

std::string Job::take(std::chrono::milliseconds wait, bool& ended, std::vector<TokenLogprob>& new_logprobs) {
  std::unique_lock lk(mu);
  cv.wait_for(lk, wait, [&] { return finished || !unread.empty() || logprobs.size() > logprobs_read; });
  std::string out;
  out.swap(unread);
  new_logprobs.assign(logprobs.begin() + long(logprobs_read), logprobs.end());
  logprobs_read = logprobs.size();
  ended = finished;
  return out;
}

// The count first: a reader takes the buckets, then the count, so that no
// bucket it prints holds more than the count (the +Inf bucket).
void SecondsHistogram::observe(double seconds) {
  ++count;
  for (size_t i = 0; i < kBounds.size(); ++i)
    if (seconds <= kBounds[i]) ++at_most[i];
  sum += seconds;
}

std::string prometheus_text(const SchedulerStats& s) {
  std::string out;
  auto metric = [&](const char* name, const char* type, const char* help, const std::string& value) {
    out += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " " + type + "\n" + name + " " +
           value + "\n";
  };
  char rate[32];
  std::snprintf(rate, sizeof rate, "%.3f", s.tokens_per_second.load());
  metric("vkgate_requests_total", "counter", "Generation requests accepted.", std::to_string(s.requests_total));
  metric("vkgate_requests_active", "gauge", "Generations being stepped.", std::to_string(s.active));
  metric("vkgate_queue_length", "gauge", "Requests waiting for a slot.", std::to_string(s.queued));
  metric("vkgate_prompt_tokens_total", "counter", "Prompt tokens of the requests, cached ones included.",
         std::to_string(s.prompt_tokens_total));
  metric("vkgate_prompt_tokens_cached_total", "counter",
         "Prompt tokens taken from cached sequences instead of running.", std::to_string(s.prompt_tokens_cached_total));
  metric("vkgate_cached_sequences", "gauge", "Finished generations' sequences kept for later prompts.",
         std::to_string(s.cached_sequences));
  metric("vkgate_prompt_rounds_total", "counter",
         "Scheduler rounds that ran prompt positions (requests gathered together share theirs).",
         std::to_string(s.prompt_rounds_total));
  metric("vkgate_generated_tokens_total", "counter", "Tokens generated.", std::to_string(s.generated_tokens_total));
  metric("vkgate_tokens_per_second", "gauge", "Tokens generated per second of stepping, over the last 10 s.", rate);
  metric("vkgate_kv_cache_bytes", "gauge", "Device memory of the live sequences' caches.",
         std::to_string(s.kv_cache_bytes));
  const char* ttft = "vkgate_time_to_first_token_seconds";
  out += std::string("# HELP ") + ttft +
         " From a request's arrival to its first generated token (waiting, tokenizing and the prompt "
         "included).\n# TYPE " + ttft + " histogram\n";
  const SecondsHistogram& h = s.first_token;
  for (size_t i = 0; i < h.kBounds.size(); ++i) {
    char le[32];
    std::snprintf(le, sizeof le, "%g", h.kBounds[i]);
    out += std::string(ttft) + "_bucket{le=\"" + le + "\"} " + std::to_string(h.at_most[i]) + "\n";
  }
  const std::string count = std::to_string(h.count);  // after the buckets (SecondsHistogram::observe)
  char sum[32];
  std::snprintf(sum, sizeof sum, "%.6f", h.sum.load());
  out += std::string(ttft) + "_bucket{le=\"+Inf\"} " + count + "\n" + ttft + "_sum " + sum + "\n" + ttft +
         "_count " + count + "\n";
  return out;
}

bool Job::wait_finished(std::chrono::milliseconds wait) {
  std::unique_lock lk(mu);
  return cv.wait_for(lk, wait, [&] { return finished; });
}

struct Scheduler::Active {
  std::shared_ptr<Job> job;
  Generation gen;
  bool prompt_run = false;  // every prompt position has run (Generation::prefill)
};

Scheduler::Scheduler(Model& model, const Tokenizer& tokenizer, int parallel, int queue_limit, int prefill_chunk,
                     std::chrono::milliseconds gather, int cache_slots)
    : model_(model), tokenizer_(tokenizer), parallel_(parallel), queue_limit_(queue_limit),
      prefill_chunk_(prefill_chunk), cache_slots_(cache_slots), gather_(gather) {
  stats_.kv_cache_bytes = model_.memory().kv_cache;
  thread_ = std::thread([this] { run(); });
}

Scheduler::~Scheduler() { shutdown(); }

Scheduler::Admit Scheduler::submit(std::span<const std::shared_ptr<Job>> jobs) {
  {
    std::lock_guard lk(mu_);
    if (closed_) return Admit::closed;
    // Jobs beyond the free slots wait; more than queue_limit waiting is refused.
    const int waiting = int(queue_.size() + jobs.size()) - std::max(0, parallel_ - active_count_);
    if (waiting > queue_limit_) return Admit::queue_full;
    queue_.insert(queue_.end(), jobs.begin(), jobs.end());
    stats_.queued = int64_t(queue_.size());
    ++stats_.requests_total;
  }
  cv_.notify_all();
  return Admit::accepted;
}

void Scheduler::shutdown() {
  std::deque<std::shared_ptr<Job>> queued;
  {
    std::lock_guard lk(mu_);
    if (!thread_.joinable()) return;
    closed_ = true;
    queued.swap(queue_);
    stats_.queued = 0;
  }
  for (auto& j : queued) fail(*j, 503, "the server is shutting down");
  cv_.notify_all();
  thread_.join();
}

void Scheduler::free_slot() {
  std::lock_guard lk(mu_);
  --active_count_;
  stats_.active = active_count_;  // the gauge too: a client that has its end then reads it
}

void Scheduler::finish(Job& job, FinishReason why, const std::string& last_text) {
  {
    std::lock_guard lk(job.mu);
    job.unread += last_text;
    job.text += last_text;
    job.finish = why;
    job.finished = true;
  }
  job.cv.notify_all();
}

void Scheduler::fail(Job& job, int status, const std::string& message) {
  {
    std::lock_guard lk(job.mu);
    job.error = message;
    job.error_status = status;
    job.finished = true;
  }
  job.cv.notify_all();
}

void Scheduler::deliver(Active& a, Generation::Step s) {
  Job& job = *a.job;
  ++stats_.generated_tokens_total;
  const GenerateResult& r = a.gen.result();
  if (r.ids.size() == 1) {
    stats_.first_token.observe(std::chrono::duration<double>(std::chrono::steady_clock::now() - job.arrived).count());
    stats_.prompt_tokens_cached_total += uint64_t(r.cached_tokens);
    std::lock_guard lk(job.mu);
    job.cached_tokens = size_t(r.cached_tokens);
  }
  if (a.gen.done() && r.finish == FinishReason::eos && tokenizer_.is_special(int32_t(s.id))) {
    // The eos token's own text (<|im_end|>, <|endoftext|>) is not part of the answer, nor its logprob.
    const std::string eos = tokenizer_.decode(std::vector<int32_t>{int32_t(s.id)});
    if (s.text.size() >= eos.size() && s.text.compare(s.text.size() - eos.size(), eos.size(), eos) == 0) {
      s.text.resize(s.text.size() - eos.size());
      s.logprob.reset();
    }
  }
  if (a.gen.done()) {
    {
      std::lock_guard lk(job.mu);
      job.completion_tokens = r.ids.size();
      if (s.logprob) job.logprobs.push_back(std::move(*s.logprob));
    }
    if (std::optional<CachedSequence> c = a.gen.release()) {
      cached_.push_back(std::move(*c));
      while (int(cached_.size()) > cache_slots_) cached_.pop_front();
      stats_.cached_sequences = int64_t(cached_.size());
    }
    free_slot();
    finish(job, r.finish, s.text);
  } else if (!s.text.empty() || s.logprob) {
    {
      std::lock_guard lk(job.mu);
      job.completion_tokens = r.ids.size();
      job.unread += s.text;
      job.text += s.text;
      if (s.logprob) job.logprobs.push_back(std::move(*s.logprob));
    }
    job.cv.notify_all();
  }
}

std::optional<CachedSequence> Scheduler::take_cached(const Job& job) {
  if (!job.options.keep_sequence) return std::nullopt;
  auto best = cached_.end();
  int most = 0;
  for (auto it = cached_.begin(); it != cached_.end(); ++it)
    if (const int n = cached_prefix(*it, job.prompt); n > most) most = n, best = it;
  if (best == cached_.end()) return std::nullopt;
  CachedSequence c = std::move(*best);
  cached_.erase(best);
  stats_.cached_sequences = int64_t(cached_.size());
  return c;
}

void Scheduler::run() {
  std::vector<Active> active;
  auto finished = [](Job& job) {
    std::lock_guard lk(job.mu);
    return job.finished;
  };
  auto fail_all = [&](std::span<Active* const> failed, const char* message) {
    for (Active* a : failed) {
      free_slot();
      fail(*a->job, 500, message);
    }
  };
  for (;;) {
    std::vector<std::shared_ptr<Job>> joining;
    bool closing;
    {
      std::unique_lock lk(mu_);
      cv_.wait(lk, [&] { return closed_ || !queue_.empty() || !active.empty(); });
      if (active.empty() && gather_.count() > 0) {  // idle: a burst of requests starts together
        const auto until = std::chrono::steady_clock::now() + 5 * gather_;
        for (size_t seen = queue_.size(); !closed_ && int(seen) < parallel_; seen = queue_.size())
          if (!cv_.wait_for(lk,
                            std::min<std::chrono::steady_clock::duration>(
                                gather_, until - std::chrono::steady_clock::now()),
                            [&] { return closed_ || queue_.size() > seen; }))
            break;
      }
      closing = closed_;
      while (!closing && int(active.size() + joining.size()) < parallel_ && !queue_.empty()) {
        joining.push_back(std::move(queue_.front()));
        queue_.pop_front();
      }
      active_count_ = int(active.size() + joining.size());
      stats_.queued = int64_t(queue_.size());
    }
    if (closing) {
      // Each active generation has finished its step: end them all now.
      for (Active& a : active) finish(*a.job, FinishReason::cancelled, "");
      active.clear();
      stats_.active = 0;
      std::lock_guard lk(mu_);
      active_count_ = 0;
      return;
    }
    for (auto& job : joining) {
      try {
        if (cache_slots_ == 0) job->options.keep_sequence = false;
        std::optional<CachedSequence> from = take_cached(*job);
        active.push_back({job, from ? Generation(model_, job->prompt, job->options, &tokenizer_, std::move(*from))
                                    : Generation(model_, job->prompt, job->options, &tokenizer_)});
        stats_.prompt_tokens_total += job->prompt.size();
      } catch (const std::exception& e) {
        free_slot();
        fail(*job, 400, e.what());
      }
    }
    stats_.active = int64_t(active.size());

    // A piece of each prompt that has not run (those of as many positions
    // together); then one step of every generation whose prompt has, all
    // together (one device step, the weights read once).
    const auto round_start = std::chrono::steady_clock::now();
    std::vector<Active*> prefilling;
    std::vector<Generation*> prompts;
    for (Active& a : active) {
      if (a.job->cancelled) {
        free_slot();
        finish(*a.job, FinishReason::cancelled, "");
      } else if (!a.prompt_run) {
        prefilling.push_back(&a);
        prompts.push_back(&a.gen);
      }
    }
    try {
      // The first id comes in the round that runs the prompt's last piece.
      const std::vector<bool> ran = Generation::prefill_all(prompts, prefill_chunk_);
      for (size_t k = 0; k < prefilling.size(); ++k) prefilling[k]->prompt_run = ran[k];
      if (!prompts.empty()) ++stats_.prompt_rounds_total;
    } catch (const Error& e) {
      if (e.code() == ErrorCode::out_of_memory && !cached_.empty()) {
        // The cached sequences' memory goes back; the prompts start again next round.
        std::fprintf(stderr, "vkgate serve: out of memory with %zu cached sequences: dropping them (%s)\n",
                     cached_.size(), e.what());
        cached_.clear();
        stats_.cached_sequences = 0;
      } else {
        fail_all(prefilling, e.what());
      }
    } catch (const std::exception& e) {  // a failed piece: every prompt of the round fails
      fail_all(prefilling, e.what());
    }
    std::vector<Active*> stepping;
    std::vector<Generation*> gens;
    for (Active& a : active) {
      if (!a.prompt_run || finished(*a.job)) continue;  // cancelled or failed above
      stepping.push_back(&a);
      gens.push_back(&a.gen);
    }
    std::vector<Generation::Step> steps;
    try {
      steps = Generation::step_all(gens);
    } catch (const std::exception& e) {  // the shared step failed: every generation in it
      fail_all(stepping, e.what());
      stepping.clear();
    }
    for (size_t k = 0; k < stepping.size(); ++k) deliver(*stepping[k], steps[k]);
    const size_t ids = stepping.size();
    std::erase_if(active, [&](const Active& a) { return finished(*a.job); });
    {
      std::lock_guard lk(mu_);
      active_count_ = int(active.size());
    }
    stats_.active = int64_t(active.size());

    // The decode rate over the last 10 s of rounds: ids per second spent stepping.
    const auto now = std::chrono::steady_clock::now();
    if (ids > 0) recent_.push_back({now, ids, std::chrono::duration<double>(now - round_start).count()});
    while (!recent_.empty() && now - recent_.front().at > std::chrono::seconds(10)) recent_.pop_front();
    size_t total = 0;
    double seconds = 0;
    for (const Round& r : recent_) total += r.ids, seconds += r.seconds;
    stats_.tokens_per_second = seconds > 0 ? double(total) / seconds : 0.0;
    stats_.kv_cache_bytes = model_.memory().kv_cache;
  }
}

}  // namespace vkgate::cli
