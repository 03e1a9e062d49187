// Generation with a Model (model.hpp): the options of a generation (greedy or
// sampled, stop conditions, streaming callbacks), what it produced, and
// Generation, the loop of Model::generate taken one step at a time, so that a
// caller (Python's iterator, a server) can do other work between steps.
//
//   vkgate::GenerateOptions o{.max_new_tokens = 64, .sampling = {.temperature = 0.7, .top_p = 0.9, .seed = 1}};
//   o.stop = {"\n\n"};
//   vkgate::Generation g(model, prompt_ids, o, &tokenizer);
//   while (!g.done()) std::fputs(g.step().text.c_str(), stdout);
//   g.result().finish;  // why it ended
//
// Thread safety: a Generation uses its Model, so it follows the Model's rule
// (one thread at a time, for the Model and all its Generations and Sequences).
// It must not outlive its Model or its Tokenizer.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "vkgate/sampling.hpp"

namespace vkgate {

class Model;
class Tokenizer;
struct CachedSequence;  // model.hpp: a sequence and the ids its positions hold

struct GenerateOptions {
  int max_new_tokens = 16;
  // Stop after emitting an id of config().eos_token_ids (it is included).
  bool stop_at_eos = true;
  // How each id is chosen: greedy by default (sampling.hpp).
  SamplingOptions sampling;
  // With a tokenizer: generation stops as soon as the text contains one of
  // these strings, which is left out of the text (as OpenAI's `stop`); the id
  // that completed it is the last of the ids. Text that may begin a stop
  // string is held back from on_text until it is known not to.
  std::vector<std::string> stop;
  // Called with each new id as soon as it is chosen (streaming); returning
  // false stops the generation after that id.
  std::function<bool(int64_t)> on_token;
  // With a tokenizer (the text overload of generate): called with the text
  // that each new id completes, whole UTF-8 characters only (may be empty
  // while a character is split across ids); returning false stops.
  std::function<bool(std::string_view)> on_text;
  // ≥ 0: each chosen id's log-probability, with this many (≤ kMaxLogprobs) of
  // the most likely ids beside it, in Step::logprob and GenerateResult::logprobs.
  // They are the model's: the log-softmax of its logits over the whole
  // vocabulary, before temperature, penalties or truncation (vLLM's default).
  // Each row then comes to the host whole (no device top-k).
  int logprobs = -1;
  static constexpr int kMaxLogprobs = 20;
  // Keep the sequence once the generation ends, for release() (a server's
  // prompt cache). With recurrent states (GLA, Gated DeltaNet) the prompt's
  // last position then runs after a checkpoint (Sequence::checkpoint), so
  // that a later prompt that repeats this one, or parts from it after that
  // point (a chat's next turn, which drops this turn's thinking), can start
  // there.
  bool keep_sequence = false;
};


// One chosen id's log-probability under the model, and the most likely ids'
// (GenerateOptions::logprobs of them, most likely first, equal ones lower id first).
struct TokenLogprob {
  int64_t id = -1;
  double logprob = 0;
  std::vector<std::pair<int64_t, double>> top;
};

// Why a generation ended.
enum class FinishReason {
  length,         // max_new_tokens ids
  eos,            // an eos_token_id (with stop_at_eos)
  stop_string,    // one of GenerateOptions::stop appeared in the text
  context_limit,  // the sequence reached the model's context limit (model.hpp)
  cancelled,      // on_token or on_text returned false
};
const char* to_string(FinishReason reason) noexcept;  // "length", "eos", "stop", "context_limit", "cancelled"

struct GenerateResult {
  std::vector<int64_t> ids;     // the generated ids, without the prompt
  std::string text;             // with a tokenizer: the generated text (without a stop string)
  // Generated ids the tokenizer does not know (a model may have more rows than
  // its tokenizer has tokens: Qwen3 151,936 against 151,669). Each is decoded
  // as no text, as Hugging Face's decode does.
  std::vector<int64_t> undecoded_ids;
  std::vector<TokenLogprob> logprobs;  // one per id, with GenerateOptions::logprobs ≥ 0
  FinishReason finish = FinishReason::length;
  // Prompt positions that the sequence a generation started from already
  // held (Generation's CachedSequence), which did not run again.
  int cached_tokens = 0;
  double prefill_ms = 0;        // the prompt's step, host wall time
  std::vector<double> step_ms;  // each later step
  // Generated ids after the first, per second of steps; none when no step ran
  // after the prompt's (one id or none generated), as no rate was measured.
  std::optional<double> tokens_per_s() const;
};

// The prompt positions a Generation started from `c` takes from it instead
// of running them: the longest prefix of `prompt`, short of its last position
// (whose logits choose the first id), that c.ids shares and c.sequence can go
// back to (Sequence::rollback_length). A server picks among its cached
// sequences with it.
int cached_prefix(const CachedSequence& c, std::span<const int64_t> prompt);

class Generation {
 public:
  // Starts a generation of `prompt` (ids in [0, vocab_size)) on a sequence of
  // its own, with room for the prompt and 256 new ids at first, doubled
  // (Sequence::reserve) as they come up to max_new_tokens: a large
  // max_new_tokens costs memory only as it is used. With a tokenizer the
  // ids are also decoded into text (and `stop` applies; without one `stop`
  // must be empty). Nothing runs on the device until the first step().
  Generation(Model& model, std::span<const int64_t> prompt, const GenerateOptions& options,
             const Tokenizer* tokenizer = nullptr);
  // The same, starting from `from` (a batch-1 sequence of this model): its
  // cached_prefix of the prompt does not run again (cached_tokens; none where
  // dynamic NTK RoPE runs the whole prompt as one step). A sequence without
  // room for the prompt is given it (Sequence::reserve), and more as above.
  Generation(Model& model, std::span<const int64_t> prompt, const GenerateOptions& options,
             const Tokenizer* tokenizer, CachedSequence from);
  ~Generation();
  Generation(Generation&&) noexcept;
  Generation& operator=(Generation&&) noexcept;

  struct Step {
    int64_t id = -1;   // the id chosen
    std::string text;  // the text it completes (with a tokenizer), after the callbacks saw it
    std::optional<TokenLogprob> logprob;  // with GenerateOptions::logprobs ≥ 0
  };
  // Runs one device step (the whole prompt at the first) and chooses the next
  // id. Error(invalid_argument) once done(). When the generation ends, the
  // text still held back is part of the last step's text.
  Step step();
  // Runs up to `tokens` (≥ 1) more positions of the prompt without choosing
  // an id, and says whether the whole prompt has run; step() then chooses the
  // first id, running whatever of the prompt is left. A server interleaves a
  // long prompt with other generations' steps this way. The prompt's positions
  // and results are the same as one step()'s (dynamic NTK RoPE runs the whole
  // prompt at once). Error(invalid_argument) once done().
  bool prefill(int tokens);
  // prefill() of several generations of one Model at once (a server's new
  // requests): each runs up to `tokens` more positions of its prompt, and
  // those that run as many run together (Model::extend of several: one
  // device step per piece, the weights read once for all). Returns whether
  // each one's whole prompt has run. None may be done() or given twice. A
  // failure throws; the generations of the failed step start their prompts
  // again at the next call, and those of another step keep what they ran.
  static std::vector<bool> prefill_all(std::span<Generation* const> generations, int tokens);
  // step() of several generations of one Model at once (a server's round):
  // those whose prompt has run take their next position together, in one
  // device step (Model::extend of several sequences: the weights read once
  // for all); one whose prompt has not run first runs it on its own. Returns
  // each one's Step, in order. None may be done() or given twice. A failure
  // of the shared step is each batched generation's failure: their caches
  // may have moved on, so none can be stepped again.
  static std::vector<Step> step_all(std::span<Generation* const> generations);
  bool done() const;
  // What was generated so far (final once done()).
  const GenerateResult& result() const;
  // Once done() with GenerateOptions::keep_sequence: the sequence and the ids
  // its positions hold (the prompt and the generated ids that ran: all but
  // the last), handed over once. Nothing when the generation failed or was
  // not asked to keep it.
  std::optional<CachedSequence> release();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace vkgate
