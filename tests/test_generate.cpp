// Generation on the device: sampled decoding against the reference's logits
// sampled with the same seed, stop strings, ids beyond the tokenizer, and the
// step-by-step Generation against Model::generate.
#include <algorithm>
#include <string>

#include "harness.hpp"
#include "model_weights.hpp"
#include "test_util.hpp"
#include "vkgate/error.hpp"
#include "vkgate/generate.hpp"
#include "vkgate/model.hpp"
#include "vkgate/model_config.hpp"
#include "vkgate/reference_model.hpp"
#include "vkgate/tokenizer.hpp"

namespace test_generate {

using namespace vkgate;

namespace {

Tokenizer unit_tokenizer() { return Tokenizer::load(std::string(VKGATE_TOKENIZER_UNIT_DIR) + "/gpt2_style.json"); }

// The reference's ids for `prompt` with each step's last logits (double,
// rounded to float as the device returns them) sampled by a Sampler of `o`.
std::vector<int64_t> reference_sampled(const test::RandomModel& m, std::vector<int64_t> ids, int new_tokens,
                                       const SamplingOptions& o) {
  Sampler sampler(o);
  std::vector<int64_t> out;
  for (int i = 0; i < new_tokens; ++i) {
    const int T = int(ids.size());
    const auto r = reference::model_forward(m.cfg, m.map, {ids, 1, T});
    const size_t V = size_t(m.cfg.vocab_size);
    std::vector<float> last(r.logits.end() - long(V), r.logits.end());
    const int64_t id = sampler.sample(last, ids);
    ids.push_back(id);
    out.push_back(id);
  }
  return out;
}

}  // namespace

TEST_CASE_FIXTURE(test::GpuTest, "generate: sampled ids equal the reference's logits sampled with the same seed") {
  test::TinyModel shape;
  shape.gate = GateKind::elementwise;
  const test::RandomModel m(shape.config(), rng);
  Model model(ctx, m.cfg, m.tensors);
  const std::vector<int64_t> prompt = test::random_ids(rng, 5, m.cfg.vocab_size);
  const SamplingOptions samplings[] = {
      {.temperature = 1.5, .seed = 3},
      {.temperature = 0.8, .top_k = 20, .top_p = 0.9, .repeat_penalty = 1.3, .seed = 4},
      {.temperature = 1.0, .min_p = 0.05, .presence_penalty = 0.5, .frequency_penalty = 0.5, .repeat_last_n = -1, .seed = 5},
  };
  for (const SamplingOptions& s : samplings) {
    CAPTURE(s.temperature);
    GenerateOptions o;
    o.max_new_tokens = 6;
    o.stop_at_eos = false;
    o.sampling = s;
    const GenerateResult r = model.generate(prompt, o);
    CHECK(r.ids == reference_sampled(m, prompt, 6, s));
    CHECK(r.finish == FinishReason::length);
    CHECK(model.generate(prompt, o).ids == r.ids);  // the seed repeats the draws
  }
}

TEST_CASE_FIXTURE(test::GpuTest, "generate: a stop string ends the text before it, streamed text never shows a part of it") {
  const Tokenizer tok = unit_tokenizer();
  test::TinyModel shape;
  shape.vocab = tok.vocab_size();
  const test::RandomModel m(shape.config(), rng);
  Model model(ctx, m.cfg, m.tensors);
  GenerateOptions o;
  o.max_new_tokens = 24;
  o.stop_at_eos = false;
  const GenerateResult full = model.generate(tok, "hello world", o);
  REQUIRE(full.ids.size() == 24);
  // A stop string of 3 bytes from the middle of the text, where it first occurs.
  size_t at = std::string::npos;
  for (size_t i = 2; i + 3 <= full.text.size() && at == std::string::npos; ++i)
    if (full.text.find(full.text.substr(i, 3)) == i) at = i;
  if (at == std::string::npos) return;  // a random text without a usable stop string (rare)
  // The ids up to the one whose (whole-character) text completes the stop string.
  size_t stop_ids = 0;
  Tokenizer::StreamDecoder decoded = tok.stream_decoder();
  for (std::string text; text.size() < at + 3; ++stop_ids) text += decoded.push(int32_t(full.ids[stop_ids]));
  const std::string stop = full.text.substr(at, 3);
  CAPTURE(stop);
  o.stop = {"never in the text \x01", stop};
  std::string streamed;
  bool piece_shows_stop_part = false;
  o.on_text = [&](std::string_view piece) {
    streamed += piece;
    // Nothing passed on may end in the first byte(s) of the stop string before the stop is known.
    piece_shows_stop_part |= streamed.size() > at;
    return true;
  };
  const GenerateResult r = model.generate(tok, "hello world", o);
  CHECK(r.finish == FinishReason::stop_string);
  CHECK(r.text == full.text.substr(0, at));
  CHECK(streamed == r.text);
  CHECK_FALSE(piece_shows_stop_part);
  CHECK(r.ids == std::vector<int64_t>(full.ids.begin(), full.ids.begin() + long(stop_ids)));

  // Step by step: the same ids and text, and the generation refuses a step after its end.
  o.on_text = nullptr;
  const std::vector<int32_t> p32 = tok.encode("hello world");
  Generation g(model, std::vector<int64_t>(p32.begin(), p32.end()), o, &tok);
  std::string text;
  while (!g.done()) text += g.step().text;
  CHECK(text == r.text);
  CHECK(g.result().ids == r.ids);
  test::expect_error([&] { g.step(); }, ErrorCode::invalid_argument, {"ended"});
  test::expect_error([&] { Generation(model, std::vector<int64_t>{1}, o); }, ErrorCode::invalid_argument,
                     {"stop strings need a tokenizer"});
}

TEST_CASE_FIXTURE(test::GpuTest, "generate: ids beyond the tokenizer decode to no text and are listed") {
  const Tokenizer tok = unit_tokenizer();
  test::TinyModel shape;
  shape.vocab = tok.vocab_size() + 40;  // padded as Qwen3's 151,936 rows for 151,669 tokens
  test::RandomModel m(shape.config(), rng);
  // lm_head rows of the tokenizer's ids at zero: the 40 padding rows decide every step.
  auto& head = m.data.at("lm_head.weight");
  std::fill(head.begin(), head.begin() + long(size_t(tok.vocab_size()) * size_t(shape.hidden)), 0.0f);
  m.map["lm_head.weight"] = head;
  m.tensors = as_tensors(m.map);
  Model model(ctx, m.cfg, m.tensors);
  GenerateOptions o;
  o.max_new_tokens = 4;
  o.stop_at_eos = false;
  std::string streamed;
  o.on_text = [&](std::string_view piece) { return streamed += piece, true; };
  const GenerateResult r = model.generate(tok, "hello", o);
  REQUIRE(r.ids.size() == 4);
  for (int64_t id : r.ids) CHECK(id >= tok.vocab_size());
  CHECK(r.undecoded_ids == r.ids);
  CHECK(r.text.empty());
  CHECK(streamed.empty());
  CHECK(r.finish == FinishReason::length);
}

TEST_CASE_FIXTURE(test::GpuTest, "generate: the context limit refuses longer prompts and steps, and ends a generation") {
  test::TinyModel shape;
  ModelConfig cfg = shape.config();
  cfg.attention.max_position_embeddings = 8;
  const test::RandomModel m(cfg, rng);
  Model model(ctx, m.cfg, m.tensors);
  CHECK(model.context_limit() == 8);
  GenerateOptions o;
  o.max_new_tokens = 10;
  o.stop_at_eos = false;
  const std::vector<int64_t> prompt = test::random_ids(rng, 5, shape.vocab);
  // Prompt and new ids together fill the 8 positions: 3 new ids, the last one never run.
  const GenerateResult r = model.generate(prompt, o);
  CHECK(r.finish == FinishReason::context_limit);
  CHECK(r.ids == reference::greedy_generate(m.cfg, m.map, prompt, 3, false));
  const std::vector<int64_t> eight = test::random_ids(rng, 8, shape.vocab), nine = test::random_ids(rng, 9, shape.vocab);
  const GenerateResult full = model.generate(eight, o);
  CHECK(full.ids.empty());
  CHECK(full.finish == FinishReason::context_limit);
  test::expect_error([&] { model.generate(nine, o); }, ErrorCode::invalid_argument,
                     {"prompt's 9 tokens", "context limit of 8", "ignore_context_limit"});
  test::expect_error([&] { model.logits(nine, 1, 9); }, ErrorCode::invalid_argument,
                     {"logits: 9 positions", "context limit of 8", "max_position_embeddings 8"});
  Sequence seq = model.start(1, 16);
  model.extend(seq, eight, 8);
  test::expect_error([&] { model.extend(seq, std::vector<int64_t>{1}, 1); }, ErrorCode::invalid_argument,
                     {"extend: 9 positions", "context limit of 8"});

  // ModelOptions::ignore_context_limit runs past it, as the reference does.
  Model free(ctx, m.cfg, m.tensors, {.ignore_context_limit = true});
  CHECK(free.context_limit() == 0);
  o.max_new_tokens = 4;
  const GenerateResult past = free.generate(nine, o);
  CHECK(past.finish == FinishReason::length);
  CHECK(past.ids == reference::greedy_generate(m.cfg, m.map, nine, 4, false));
}

TEST_CASE("generate: the context limit is max_position_embeddings, scaled as the RoPE scaling reaches") {
  ModelConfig c = test::TinyModel().config();
  CHECK(c.context_limit() == 0);  // made in code without a length
  c.attention.max_position_embeddings = 4096;
  CHECK(c.context_limit() == 4096);
  c.attention.rope_scaling.type = RopeType::linear;
  c.attention.rope_scaling.factor = 2;
  CHECK(c.context_limit() == 8192);
  c.attention.rope_scaling.type = RopeType::dynamic;
  CHECK(c.context_limit() == 8192);
  // Qwen3's YaRN recipe: factor 4 over the original 32768, max_position_embeddings 40960.
  c.attention.max_position_embeddings = 40960;
  c.attention.rope_scaling = {.type = RopeType::yarn, .factor = 4, .original_max_position_embeddings = 32768};
  CHECK(c.context_limit() == 131072);
  // Llama 3.1: max_position_embeddings is already the scaled length.
  c.attention.max_position_embeddings = 131072;
  c.attention.rope_scaling = {.type = RopeType::llama3, .factor = 8, .original_max_position_embeddings = 8192};
  CHECK(c.context_limit() == 131072);
  ModelConfig gla = test::TinyGla().config();
  CHECK(gla.context_limit() == 0);
}

// A server's way to keep a long prompt from stalling other generations: the
// prompt runs a few positions per prefill() call, interleaved with another
// Generation's steps on the same Model, and the result is the one-step
// prompt's (greedy and seeded ids, the same logits through the cache) — for
// attention caches (qwen3) and recurrent states with a conv window (qwen3_next).
TEST_CASE_FIXTURE(test::GpuTest, "generate: a prompt run in prefill() pieces between another generation's steps") {
  test::TinyModel shape;
  const test::RandomModel qwen3(shape.config(), rng);
  const test::RandomModel next(parse_model_config_json(test::tiny_qwen3_next_json().dump(), "config.json"), rng);
  for (const test::RandomModel* m : {&qwen3, &next}) {
    CAPTURE(m->cfg.model_type);
    Model model(ctx, m->cfg, m->tensors);
    const auto prompt = test::random_ids(rng, 11, m->cfg.vocab_size);
    const auto other = test::random_ids(rng, 4, m->cfg.vocab_size);
    for (const SamplingOptions& s : {SamplingOptions{}, SamplingOptions{.temperature = 1.0, .seed = 9}}) {
      GenerateOptions o;
      o.max_new_tokens = 5;
      o.stop_at_eos = false;
      o.sampling = s;
      const GenerateResult alone = model.generate(prompt, o);
      Generation g(model, prompt, o), h(model, other, o);
      int pieces = 0;
      while (!g.prefill(3)) {
        ++pieces;
        if (!h.done()) h.step();
      }
      CHECK(pieces == 3);  // 11 positions: 3 + 3 + 3, then the last 2
      CHECK(g.prefill(3));  // nothing left to run
      while (!g.done()) g.step();
      CHECK(g.result().ids == alone.ids);
      CHECK(g.result().prefill_ms > 0);
      while (!h.done()) h.step();
      CHECK(h.result().ids == model.generate(other, o).ids);
      test::expect_error([&] { g.prefill(1); }, ErrorCode::invalid_argument, {"ended"});
    }
    Generation fresh(model, prompt, GenerateOptions{});
    test::expect_error([&] { fresh.prefill(0); }, ErrorCode::invalid_argument, {"at least 1"});
  }
}

// A sequence starts with room for the prompt and 256 new ids and doubles it as
// they come: the caches (KV and recurrent states) carried over each move, the
// memory only what the ids so far take. Each greedy id is the likeliest of
// the logits of a forward of the whole sequence without a cache.
TEST_CASE_FIXTURE(test::GpuTest, "generate: the sequence's room grows as the ids come (qwen3, qwen3_next)") {
  test::TinyModel shape;
  const test::RandomModel qwen3(shape.config(), rng);
  const test::RandomModel next(parse_model_config_json(test::tiny_qwen3_next_json().dump(), "config.json"), rng);
  for (const test::RandomModel* m : {&qwen3, &next}) {
    CAPTURE(m->cfg.model_type);
    Model model(ctx, m->cfg, m->tensors);
    const auto prompt = test::random_ids(rng, 5, m->cfg.vocab_size);
    GenerateOptions o;
    o.max_new_tokens = 300;
    o.stop_at_eos = false;
    std::vector<uint64_t> bytes;  // the caches' bytes after each id
    o.on_token = [&](int64_t) {
      bytes.push_back(model.memory().kv_cache);
      return true;
    };
    const GenerateResult r = model.generate(prompt, o);
    REQUIRE(r.ids.size() == 300);
    // Room for 5 + 256 positions, then (the 257th id's step finds it full) all 305.
    auto sequence_bytes = [&](int capacity) {
      Sequence s = model.start(1, capacity);
      return model.memory().kv_cache;
    };
    CHECK(bytes[0] == sequence_bytes(261));
    CHECK(bytes[256] == bytes[0]);
    CHECK(bytes[257] == sequence_bytes(305));
    CHECK(bytes[299] == bytes[257]);
    std::vector<int64_t> ids(prompt.begin(), prompt.end());
    ids.insert(ids.end(), r.ids.begin(), r.ids.end() - 1);
    const std::vector<float> logits = model.logits(ids, 1, int(ids.size()));
    const size_t V = size_t(m->cfg.vocab_size);
    for (size_t i = 0; i < r.ids.size(); ++i) {
      const auto row = logits.begin() + long((prompt.size() - 1 + i) * V);
      const float best = *std::max_element(row, row + long(V));
      INFO("id " << i);
      CHECK(row[r.ids[i]] >= best - 1e-4f * std::max(1.0f, std::abs(best)));
    }
  }
}

// Logprobs: each chosen id's log-softmax over the model's logits, and the most
// likely ids', against the reference's logits of the same ids (teacher-forced
// on what the device chose): greedy, sampled with top_k (which would otherwise
// choose on the device), and two generations stepped together, one without.
TEST_CASE_FIXTURE(test::GpuTest, "generate: logprobs of the chosen and the most likely ids equal the reference's") {
  test::TinyModel shape;
  const test::RandomModel m(shape.config(), rng);
  Model model(ctx, m.cfg, m.tensors);
  const auto prompt = test::random_ids(rng, 6, m.cfg.vocab_size);
  const size_t V = size_t(m.cfg.vocab_size);
  auto check = [&](const GenerateResult& r, int n) {
    REQUIRE(r.logprobs.size() == r.ids.size());
    std::vector<int64_t> ids = prompt;
    for (size_t i = 0; i < r.ids.size(); ++i) {
      CAPTURE(i);
      const auto ref = reference::model_forward(m.cfg, m.map, {ids, 1, int(ids.size())});
      const std::vector<double> last(ref.logits.end() - long(V), ref.logits.end());
      double peak = *std::max_element(last.begin(), last.end()), sum = 0;
      for (double l : last) sum += std::exp(l - peak);
      auto want = [&](int64_t id) { return last[size_t(id)] - peak - std::log(sum); };
      const TokenLogprob& got = r.logprobs[i];
      CHECK(got.id == r.ids[i]);
      CHECK(std::abs(got.logprob - want(got.id)) < 1e-4);
      REQUIRE(got.top.size() == size_t(n));
      std::vector<double> sorted(last);
      std::sort(sorted.rbegin(), sorted.rend());
      for (int j = 0; j < n; ++j) {
        CHECK(std::abs(got.top[size_t(j)].second - want(got.top[size_t(j)].first)) < 1e-4);
        CHECK(std::abs(got.top[size_t(j)].second - (sorted[size_t(j)] - peak - std::log(sum))) < 1e-4);
      }
      ids.push_back(r.ids[i]);
    }
  };
  GenerateOptions o;
  o.max_new_tokens = 4;
  o.stop_at_eos = false;
  o.logprobs = 3;
  check(model.generate(prompt, o), 3);
  o.logprobs = 0;
  o.sampling = {.temperature = 1.0, .top_k = 5, .seed = 2};
  const GenerateResult sampled = model.generate(prompt, o);
  check(sampled, 0);

  GenerateOptions plain = o;
  plain.logprobs = -1;
  o.logprobs = GenerateOptions::kMaxLogprobs;
  const auto other = test::random_ids(rng, 3, m.cfg.vocab_size);
  Generation g(model, prompt, o), h(model, other, plain);
  while (!g.done() || !h.done()) {
    std::vector<Generation*> set;
    for (Generation* x : {&g, &h})
      if (!x->done()) set.push_back(x);
    const auto steps = Generation::step_all(set);
    for (size_t k = 0; k < set.size(); ++k) CHECK(steps[k].logprob.has_value() == (set[k] == &g));
  }
  CHECK(g.result().ids == sampled.ids);  // the same draws as alone, whole rows or not
  check(g.result(), GenerateOptions::kMaxLogprobs);
  CHECK(h.result().logprobs.empty());
  CHECK(h.result().ids == model.generate(other, plain).ids);

  o.logprobs = GenerateOptions::kMaxLogprobs + 1;
  test::expect_error([&] { Generation(model, prompt, o); }, ErrorCode::invalid_argument, {"logprobs 21"});
}

}  // namespace test_generate
