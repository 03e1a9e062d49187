// Generation: the loop of Model::generate, one step at a time (generate.hpp).
#include "vkgate/generate.hpp"

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdint>
#include <cmath>
#include <map>
#include <numeric>
#include <optional>
#include <utility>

#include "gpu/context_impl.hpp"
#include "vkgate/error.hpp"
#include "vkgate/model.hpp"
#include "vkgate/tokenizer.hpp"

namespace vkgate {

namespace {

constexpr size_t kPrefillChunk = 512;
// A sequence starts with room for the prompt and this many new ids, and
// doubles its room as they come (Sequence::reserve), up to max_new_tokens: a
// long max_new_tokens (a server's default, the rest of its context) holds the
// cache the generation uses, not the one it may use.
constexpr int kFirstRoom = 256;

double milliseconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

// The length of the longest suffix of `text` that is a proper prefix of one of
// `stops`: text that may still become a stop string.
size_t stop_prefix_length(std::string_view text, const std::vector<std::string>& stops) {
  size_t longest = 0;
  for (const std::string& s : stops)
    for (size_t n = std::min(text.size(), s.size() - 1); n > longest; --n)
      if (text.substr(text.size() - n) == std::string_view(s).substr(0, n)) {
        longest = n;
        break;
      }
  return longest;
}

// `id`'s log-softmax over `row`, and the `n` most likely ids', in double.
TokenLogprob token_logprob(std::span<const float> row, int64_t id, int n) {
  const float peak = *std::max_element(row.begin(), row.end());
  double sum = 0;
  for (float l : row) sum += std::exp(double(l) - double(peak));
  const double log_z = double(peak) + std::log(sum);
  TokenLogprob t{id, double(row[size_t(id)]) - log_z, {}};
  if (n == 0) return t;
  std::vector<int64_t> order(row.size());
  std::iota(order.begin(), order.end(), int64_t(0));
  const auto first = order.begin() + std::min<long>(n, long(order.size()));
  std::partial_sort(order.begin(), first, order.end(), [&](int64_t a, int64_t b) {
    return row[size_t(a)] > row[size_t(b)] || (row[size_t(a)] == row[size_t(b)] && a < b);
  });
  for (auto it = order.begin(); it != first; ++it) t.top.emplace_back(*it, double(row[size_t(*it)]) - log_z);
  return t;
}

}  // namespace

const char* to_string(FinishReason reason) noexcept {
  switch (reason) {
    case FinishReason::length: return "length";
    case FinishReason::eos: return "eos";
    case FinishReason::stop_string: return "stop";
    case FinishReason::context_limit: return "context_limit";
    case FinishReason::cancelled: return "cancelled";
  }
  return "?";
}

std::optional<double> GenerateResult::tokens_per_s() const {
  double ms = 0;
  for (double t : step_ms) ms += t;
  if (step_ms.empty() || !(ms > 0)) return std::nullopt;
  return double(step_ms.size()) * 1000.0 / ms;
}

int cached_prefix(const CachedSequence& c, std::span<const int64_t> prompt) {
  const size_t most = std::min(prompt.empty() ? 0 : prompt.size() - 1, c.ids.size());
  size_t common = 0;
  while (common < most && c.ids[common] == prompt[common]) ++common;
  return c.sequence.rollback_length(int(common));
}

struct Generation::Impl {
  Model& model;
  const Tokenizer* tokenizer;
  GenerateOptions options;
  Sampler sampler;
  std::vector<int64_t> context;  // the prompt, then the generated ids
  size_t prompt_size;
  std::optional<Sequence> seq;      // once the whole prompt has run
  std::optional<Sequence> pending;  // while only part of it has (prefill)
  std::optional<CachedSequence> from;  // the sequence to start from, until the prompt first runs
  std::optional<CachedSequence> kept;  // once done, with keep_sequence, until release()
  size_t prefilled = 0;             // prompt positions run (or held by `from`)
  // Where the prompt's run pauses for a checkpoint (keep_sequence with recurrent states).
  size_t checkpoint_at = SIZE_MAX;
  std::vector<float> prompt_logits;  // the prompt's last logits, until step() samples them
  std::optional<Tokenizer::StreamDecoder> decoder;
  std::string held;  // decoded text not yet passed on: it may begin a stop string
  GenerateResult result;
  bool done = false;
  int room = INT_MAX;  // new ids the context limit leaves
  // The most likely ids per row a decode step needs (Sampler::top_candidates), chosen on the
  // device (Tuning::device_top_k); 0: the whole row.
  int top = 0;

  Impl(Model& m, std::span<const int64_t> prompt, const GenerateOptions& o, const Tokenizer* t)
      : model(m), tokenizer(t), options(o), sampler(o.sampling), context(prompt.begin(), prompt.end()),
        prompt_size(prompt.size()) {
    if (prompt.empty()) throw Error(ErrorCode::invalid_argument, "generate: the prompt is empty");
    if (o.max_new_tokens < 0) throw Error(ErrorCode::invalid_argument, "generate: max_new_tokens is negative");
    if (!o.stop.empty() && !t)
      throw Error(ErrorCode::invalid_argument, "generate: stop strings need a tokenizer (the text they are found in)");
    for (const std::string& s : o.stop)
      if (s.empty()) throw Error(ErrorCode::invalid_argument, "generate: a stop string is empty");
    const int64_t vocab = m.config().vocab_size;
    for (size_t i = 0; i < prompt.size(); ++i)
      if (prompt[i] < 0 || prompt[i] >= vocab)
        throw Error(ErrorCode::invalid_argument, "generate: prompt id " + std::to_string(prompt[i]) + " at position " +
                                                     std::to_string(i) + " is outside the vocabulary [0, " +
                                                     std::to_string(vocab) + ")");
    if (o.logprobs < -1 || o.logprobs > GenerateOptions::kMaxLogprobs)
      throw Error(ErrorCode::invalid_argument, "generate: logprobs " + std::to_string(o.logprobs) +
                                                   " is outside [0, " + std::to_string(GenerateOptions::kMaxLogprobs) +
                                                   "] (or -1: none)");
    if (t) decoder.emplace(t->stream_decoder());
    if (const int c = sampler.top_candidates();
        o.logprobs < 0 && m.context().impl().tuning.device_top_k && c <= m.config().vocab_size)
      top = c;
    if (const int limit = m.context_limit(); limit > 0) {
      if (prompt.size() > size_t(limit))
        throw Error(ErrorCode::invalid_argument,
                    "generate: the prompt's " + std::to_string(prompt.size()) +
                        " tokens are more than the model's context limit of " + std::to_string(limit) +
                        " (max_position_embeddings); ModelOptions::ignore_context_limit (vkgate "
                        "--ignore-context-limit) runs past it");
      // The prompt and the new ids together stay within it: the last new id is never run.
      room = limit - int(prompt.size());
    }
    done = o.max_new_tokens == 0;
    if (!done && room == 0) end(FinishReason::context_limit);
    if (o.keep_sequence && (m.config().gla || m.config().linear_attention) && prompt_size > 1 && !whole_prompt())
      checkpoint_at = prompt_size - 1;
  }

  // Starts from `c`: the prompt's positions that it holds and can go back to
  // (cached_prefix) do not run; start_prompt gives it room where it lacks it.
  void adopt(CachedSequence c) {
    if (c.sequence.batch() != 1)
      throw Error(ErrorCode::invalid_argument, "generate: the cached sequence has batch " +
                                                   std::to_string(c.sequence.batch()) + "; a generation runs batch 1");
    if (c.ids.size() != size_t(c.sequence.length()))
      throw Error(ErrorCode::invalid_argument, "generate: the cached sequence holds " +
                                                   std::to_string(c.sequence.length()) + " positions but " +
                                                   std::to_string(c.ids.size()) + " ids");
    if (done) return;
    // Dynamic NTK RoPE rotates a step's keys by the step's own length: the whole prompt runs again.
    prefilled = whole_prompt() ? 0 : size_t(cached_prefix(c, std::span(context).first(prompt_size)));
    from.emplace(std::move(c));
  }
  // The room the whole generation may take, and the room a sequence starts with.
  int capacity() const { return int(prompt_size) + std::min(options.max_new_tokens, room); }
  int first_capacity() const { return std::min(capacity(), int(prompt_size) + kFirstRoom); }
  // The prompt position the next run ends at, at the latest.
  size_t stop() const { return prefilled < checkpoint_at ? std::min(checkpoint_at, prompt_size) : prompt_size; }
  void checkpoint_if_due() {
    if (prefilled == checkpoint_at && pending->checkpoint_length() != int(prefilled)) pending->checkpoint();
  }

  // The text `id` completes. A model may have more rows than its tokenizer has
  // tokens: such an id decodes to no text, as Hugging Face's decode does.
  std::string decode(int64_t id) {
    if (id >= tokenizer->vocab_size() || !tokenizer->id_to_token(int32_t(id))) {
      result.undecoded_ids.push_back(id);
      return {};
    }
    return decoder->push(int32_t(id));
  }

  void end(FinishReason why) {
    if (done) return;
    done = true;
    result.finish = why;
  }

  // Runs prompt positions [prefilled, prefilled + tokens) (all that are left
  // for tokens <= 0) into `pending`; once the whole prompt has run, `pending`
  // becomes `seq` and its last logits wait in `prompt_logits`. A failure
  // drops what ran, so that a retry starts the prompt again.
  void run_prompt(size_t tokens) {
    const auto t0 = std::chrono::steady_clock::now();
    try {
      start_prompt();
      const size_t end = whole_prompt() || tokens == 0 ? prompt_size : std::min(prompt_size, prefilled + tokens);
      // A long prompt runs in chunks (each attending to the ones before through the cache), so
      // that its progress can be told and one step's scratch stays bounded.
      gpu::ProgressReport report(model.context().impl(), Progress::Task::prefill, prompt_size);
      const size_t chunk = whole_prompt() ? prompt_size : kPrefillChunk;
      while (prefilled < end) {
        const size_t n = std::min({chunk, end - prefilled, stop() - prefilled});
        prompt_logits = model.extend(*pending, std::span(context).subspan(prefilled, n), int(n));
        prefilled += n;
        checkpoint_if_due();
        report.advance(prefilled);
      }
    } catch (...) {
      drop_prompt();
      throw;
    }
    end_prompt_piece(milliseconds_since(t0));
  }

  // The next `n` positions of several prompts (each with that many left), in
  // one device step per chunk (Model::extend of several sequences). A failure
  // drops what each of them ran.
  static void run_prompts(std::span<Impl* const> group, size_t n) {
    Model& model = group[0]->model;
    const auto t0 = std::chrono::steady_clock::now();
    try {
      std::vector<Sequence*> seqs;
      for (Impl* g : group) {
        g->start_prompt();
        seqs.push_back(&*g->pending);
      }
      for (size_t ran = 0; ran < n;) {
        const size_t k = std::min(kPrefillChunk, n - ran);
        std::vector<int64_t> ids;
        for (const Impl* g : group) {
          const auto at = g->context.begin() + long(g->prefilled);
          ids.insert(ids.end(), at, at + long(k));
        }
        const std::vector<float> logits = model.extend(seqs, ids, int(k));
        const size_t V = logits.size() / group.size();
        for (size_t r = 0; r < group.size(); ++r) {
          group[r]->prefilled += k;
          group[r]->prompt_logits.assign(logits.begin() + long(r * V), logits.begin() + long((r + 1) * V));
          group[r]->checkpoint_if_due();
        }
        ran += k;
      }
    } catch (...) {
      for (Impl* g : group) g->drop_prompt();
      throw;
    }
    const double ms = milliseconds_since(t0);
    for (Impl* g : group) g->end_prompt_piece(ms);
  }

  // A set of generations for step_all or prefill_all: none null, ended or
  // given twice, all of one model.
  static void check_set(std::span<Generation* const> generations) {
    for (size_t i = 0; i < generations.size(); ++i) {
      if (!generations[i])
        throw Error(ErrorCode::invalid_argument, "generate: generation " + std::to_string(i) + " is null");
      const Impl& g = *generations[i]->impl_;
      g.check_running();
      if (&g.model != &generations[0]->impl_->model)
        throw Error(ErrorCode::invalid_argument, "generate: the generations of one step belong to different models");
      for (size_t j = 0; j < i; ++j)
        if (generations[j] == generations[i])
          throw Error(ErrorCode::invalid_argument, "generate: generation " + std::to_string(i) + " is given twice");
    }
  }

  // Dynamic NTK RoPE rotates a step's keys with frequencies of the step's own length, as
  // transformers does for its one prefill step: pieces would rotate them otherwise.
  bool whole_prompt() const { return model.config().attention.rope_scaling.type == RopeType::dynamic; }
  void start_prompt() {
    if (pending) return;
    if (from) {
      from->sequence.truncate(int(prefilled));
      from->sequence.reserve(first_capacity());
      pending.emplace(std::move(from->sequence));
      from.reset();
      result.cached_tokens = int(prefilled);
    } else {
      pending.emplace(model.start(1, first_capacity()));
    }
    checkpoint_if_due();
  }
  void drop_prompt() {
    pending.reset();
    from.reset();
    prefilled = 0;
    result.cached_tokens = 0;
    prompt_logits.clear();
  }
  void end_prompt_piece(double ms) {
    result.prefill_ms += ms;
    if (prefilled == prompt_size) {
      seq.emplace(std::move(*pending));
      pending.reset();
    }
  }

  // Whether the next step() is a decode step of `seq` (the prompt has run and its logits were sampled).
  bool decoding() const { return seq && prompt_logits.empty(); }

  void check_running() const {
    if (done) throw Error(ErrorCode::invalid_argument, "generate: the generation has ended");
  }

  Step step() {
    check_running();
    if (decoding()) {
      Impl* self = this;
      return decode(std::span(&self, 1))[0];
    }
    if (!seq) run_prompt(0);  // the prompt's step: run what is left of it
    const std::vector<float> logits = std::move(prompt_logits);
    prompt_logits.clear();
    return accept(sampler.sample(logits, context), logits);
  }

  // One decode step of generations of one model whose prompts have run, in one
  // device step (Model::extend of several sequences). Where every sampler needs
  // only each row's most likely ids, those are chosen on the device.
  static std::vector<Step> decode(std::span<Impl* const> gens) {
    Model& model = gens[0]->model;
    std::vector<Sequence*> seqs;
    std::vector<int64_t> ids;
    int k = 0;
    bool whole = false;
    for (Impl* g : gens) {
      if (Sequence& s = *g->seq; s.length() == s.capacity()) s.reserve(std::min(g->capacity(), 2 * s.capacity()));
      seqs.push_back(&*g->seq);
      ids.push_back(g->context.back());
      whole = whole || g->top == 0;
      k = std::max(k, g->top);
    }
    const auto t0 = std::chrono::steady_clock::now();
    std::vector<float> logits;  // [n, V], or each row's top k
    TopLogits top;
    if (whole) logits = model.extend(seqs, ids);
    else top = model.extend_top(seqs, ids, k);
    const double ms = milliseconds_since(t0);
    const size_t V = logits.size() / gens.size();
    std::vector<Step> steps;
    for (size_t r = 0; r < gens.size(); ++r) {
      Impl& g = *gens[r];
      g.result.step_ms.push_back(ms);
      const auto full = top.full.find(int(r));  // ties ran past k: the whole row
      const std::span<const float> row = whole                   ? std::span<const float>(logits).subspan(r * V, V)
                                         : full != top.full.end() ? std::span<const float>(full->second)
                                                                  : std::span<const float>();
      const size_t at = r * size_t(k);
      steps.push_back(g.accept(!row.empty() ? g.sampler.sample(row, g.context)
                                            : g.sampler.sample_top(std::span(top.ids).subspan(at, size_t(k)),
                                                                   std::span(top.logits).subspan(at, size_t(k))),
                               row));
    }
    return steps;
  }

  // Takes `id`, chosen from `row` (the step's logits; empty where only the
  // device's top candidates came back, never with logprobs), as the next id
  // and passes it on: callbacks, text, stop conditions.
  Step accept(int64_t id, std::span<const float> row) {
    Step s;
    s.id = id;
    context.push_back(s.id);
    result.ids.push_back(s.id);
    if (options.logprobs >= 0) {
      s.logprob = token_logprob(row, id, options.logprobs);
      result.logprobs.push_back(*s.logprob);
    }
    const bool more_ids = !options.on_token || options.on_token(s.id);

    if (tokenizer) {
      held += decode(s.id);
      size_t found = std::string::npos;
      for (const std::string& stop : options.stop) found = std::min(found, held.find(stop));
      if (found != std::string::npos) {
        held.resize(found);
        end(FinishReason::stop_string);
      }
    }
    const auto& eos = model.config().eos_token_ids;
    if (options.stop_at_eos && std::find(eos.begin(), eos.end(), s.id) != eos.end()) end(FinishReason::eos);
    if (int(result.ids.size()) == options.max_new_tokens) end(FinishReason::length);
    if (int(result.ids.size()) == room) end(FinishReason::context_limit);
    if (tokenizer) {
      const bool ending = done || !more_ids;
      // Bytes the decoder still holds (an unfinished character) come after a
      // stop string that was found: they are dropped with it.
      if (ending && !(done && result.finish == FinishReason::stop_string)) held += decoder->finish();
      const size_t keep = ending ? 0 : stop_prefix_length(held, options.stop);
      s.text = held.substr(0, held.size() - keep);
      held.erase(0, held.size() - keep);
      result.text += s.text;
      if (options.on_text && !options.on_text(s.text) && !done) {
        held += decoder->finish();  // nothing more comes: what was held back belongs to the text
        result.text += held;
        held.clear();
        end(FinishReason::cancelled);
      }
    }
    if (!more_ids) end(FinishReason::cancelled);
    if (done && options.keep_sequence) {
      std::vector<int64_t> ran(context.begin(), context.begin() + seq->length());
      kept.emplace(CachedSequence{std::move(*seq), std::move(ran)});
    }
    if (done) seq.reset();  // the caches go back now, not when the Generation does
    return s;
  }
};

Generation::Generation(Model& model, std::span<const int64_t> prompt, const GenerateOptions& options,
                       const Tokenizer* tokenizer)
    : impl_(std::make_unique<Impl>(model, prompt, options, tokenizer)) {}
Generation::Generation(Model& model, std::span<const int64_t> prompt, const GenerateOptions& options,
                       const Tokenizer* tokenizer, CachedSequence from)
    : Generation(model, prompt, options, tokenizer) {
  impl_->adopt(std::move(from));
}
Generation::~Generation() = default;
Generation::Generation(Generation&&) noexcept = default;
Generation& Generation::operator=(Generation&&) noexcept = default;
Generation::Step Generation::step() { return impl_->step(); }
bool Generation::prefill(int tokens) {
  if (tokens < 1) throw Error(ErrorCode::invalid_argument, "generate: prefill takes at least 1 token");
  if (impl_->done) throw Error(ErrorCode::invalid_argument, "generate: the generation has ended");
  if (!impl_->seq) impl_->run_prompt(size_t(tokens));
  return impl_->seq.has_value();
}
std::vector<bool> Generation::prefill_all(std::span<Generation* const> generations, int tokens) {
  if (tokens < 1) throw Error(ErrorCode::invalid_argument, "generate: prefill takes at least 1 token");
  Impl::check_set(generations);
  // Prompts that take as many positions this call run together.
  std::map<size_t, std::vector<Impl*>> groups;
  for (Generation* gen : generations) {
    Impl& g = *gen->impl_;
    if (g.seq) continue;
    if (g.whole_prompt()) g.run_prompt(0);
    else groups[std::min(size_t(tokens), g.stop() - g.prefilled)].push_back(&g);
  }
  for (const auto& [n, group] : groups) {
    if (group.size() == 1) group[0]->run_prompt(n);
    else Impl::run_prompts(group, n);
  }
  std::vector<bool> ran;
  for (Generation* gen : generations) ran.push_back(gen->impl_->seq.has_value());
  return ran;
}

std::vector<Generation::Step> Generation::step_all(std::span<Generation* const> generations) {
  Impl::check_set(generations);
  std::vector<Step> steps(generations.size());
  std::vector<size_t> batched;
  for (size_t i = 0; i < generations.size(); ++i)
    if (generations[i]->impl_->decoding()) batched.push_back(i);
  for (size_t i = 0; i < generations.size(); ++i)  // the prompts, each on its own
    if (std::find(batched.begin(), batched.end(), i) == batched.end()) steps[i] = generations[i]->step();
  if (batched.empty()) return steps;
  std::vector<Impl*> decoding;
  for (size_t i : batched) decoding.push_back(generations[i]->impl_.get());
  std::vector<Step> decoded = Impl::decode(decoding);
  for (size_t k = 0; k < batched.size(); ++k) steps[batched[k]] = std::move(decoded[k]);
  return steps;
}

bool Generation::done() const { return impl_->done; }
const GenerateResult& Generation::result() const { return impl_->result; }
std::optional<CachedSequence> Generation::release() { return std::exchange(impl_->kept, std::nullopt); }

GenerateResult Model::generate(std::span<const int64_t> prompt, const GenerateOptions& options) {
  Generation g(*this, prompt, options);
  while (!g.done()) g.step();
  return g.result();
}

GenerateResult Model::generate(const Tokenizer& tokenizer, std::string_view prompt, const GenerateOptions& options) {
  const std::vector<int32_t> ids32 = tokenizer.encode(prompt);
  if (ids32.empty()) throw Error(ErrorCode::invalid_argument, "generate: the prompt encodes to no tokens");
  const std::vector<int64_t> ids(ids32.begin(), ids32.end());
  Generation g(*this, ids, options, &tokenizer);
  while (!g.done()) g.step();
  return g.result();
}

}  // namespace vkgate
