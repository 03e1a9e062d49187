// Prompt caching: a Sequence's checkpoint of its recurrent states
// (GLA, Gated DeltaNet), and a Generation that starts from the sequence an
// earlier one left (GenerateOptions::keep_sequence, Generation::release), on
// attention, GLA and hybrid qwen3_next models, against the double-precision
// reference of the whole prompt.
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

namespace test_prompt_cache {

using namespace vkgate;

namespace {

ModelConfig qwen3_next() { return parse_model_config_json(test::tiny_qwen3_next_json().dump(), "config.json"); }

std::vector<int64_t> join(std::vector<int64_t> a, const std::vector<int64_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// Runs g to its end; its ids.
std::vector<int64_t> finish(Generation& g) {
  while (!g.done()) g.step();
  return g.result().ids;
}

// Random ids [B, N] and the reference's logits of each position: what a
// sequence's steps are checked against, a position (all rows) at a time.
struct Rows {
  int B, N;
  std::vector<int64_t> all;
  reference::ModelResult full;
  Rows(const test::RandomModel& m, std::mt19937& rng, int b, int n)
      : B(b), N(n), all(test::random_ids(rng, size_t(b) * n, m.cfg.vocab_size)),
        full(reference::model_forward(m.cfg, m.map, {all, b, n})) {}
  std::vector<double> logits(int t) const { return test::positions(full.logits, B, N, t); }
  std::vector<int64_t> ids(int from, int count) const { return test::positions(all, B, N, from, count); }
};

}  // namespace

TEST_CASE_FIXTURE(test::GpuTest, "prompt cache: a checkpoint restores the recurrent states (qwen3_next and GLA), "
                                 "truncate names it, rollback_length says where a sequence can go back to") {
  for (const ModelConfig& cfg : {qwen3_next(), test::TinyGla{}.config()}) {
    CAPTURE(cfg.model_type);
    const test::RandomModel m(cfg, rng);
    Model model(ctx, m.cfg, m.tensors);
    model.set_poison(true);
    const int B = 2, N = 9, P = 5;
    const Rows rows(m, rng, B, N);
    Sequence seq = model.start(B, N);
    CHECK(seq.checkpoint_length() == -1);
    const uint64_t states = model.memory().kv_cache;
    model.extend(seq, rows.ids(0, P), P);
    seq.checkpoint();
    CHECK(seq.checkpoint_length() == P);
    // The copy of the states: all the GLA's caches, the Gated DeltaNet layers' share of the hybrid's.
    if (cfg.gla) CHECK(model.memory().kv_cache == 2 * states);
    else CHECK((model.memory().kv_cache > states && model.memory().kv_cache < 2 * states));
    for (int t = P; t < N; ++t) model.extend(seq, rows.ids(t, 1), 1);
    CHECK(seq.rollback_length(N) == N);
    CHECK(seq.rollback_length(N - 1) == P);
    CHECK(seq.rollback_length(P - 1) == 0);
    CHECK_THROWS_WITH_AS(seq.truncate(P + 1), doctest::Contains("to its checkpoint at 5"), Error);
    seq.truncate(P);
    for (int round = 0; round < 2; ++round) {  // the checkpoint stays for another return
      CAPTURE(round);
      for (int t = P; t < N; ++t) {
        CAPTURE(t);
        test::check_close(model.extend(seq, rows.ids(t, 1), 1), rows.logits(t), 1e-8);
      }
      seq.truncate(P);
    }
    seq.truncate(0);  // below the checkpoint: it is gone
    CHECK(seq.checkpoint_length() == -1);
    CHECK(seq.rollback_length(0) == 0);
    test::check_close(model.extend(seq, rows.ids(0, P), P), rows.logits(P - 1), 1e-8);
    CHECK_THROWS_WITH_AS(seq.truncate(2), doctest::Contains("cannot be rolled back"), Error);
  }
  // KV caches alone go back anywhere; a checkpoint copies nothing.
  const test::RandomModel m(test::TinyModel{}.config(), rng);
  Model model(ctx, m.cfg, m.tensors);
  Sequence seq = model.start(1, 8);
  model.extend(seq, test::random_ids(rng, 6, m.cfg.vocab_size), 6);
  const uint64_t bytes = model.memory().kv_cache;
  seq.checkpoint();
  CHECK(model.memory().kv_cache == bytes);
  CHECK(seq.rollback_length(3) == 3);
  CHECK(seq.rollback_length(99) == 6);
  seq.truncate(3);
  CHECK(seq.checkpoint_length() == -1);
}

TEST_CASE_FIXTURE(test::GpuTest, "prompt cache: reserve moves a sequence to more room, its positions, states and "
                                 "checkpoint kept (qwen3, qwen3_next, GLA)") {
  for (const ModelConfig& cfg : {test::TinyModel{}.config(), qwen3_next(), test::TinyGla{}.config()}) {
    CAPTURE(cfg.model_type);
    const test::RandomModel m(cfg, rng);
    Model model(ctx, m.cfg, m.tensors);
    model.set_poison(true);
    const int B = 2, N = 9, P = 4;
    const Rows rows(m, rng, B, N);
    Sequence seq = model.start(B, P + 1);
    model.extend(seq, rows.ids(0, P), P);
    seq.checkpoint();
    model.extend(seq, rows.ids(P, 1), 1);  // a recorded decode step, which reserve drops
    seq.truncate(P);
    seq.reserve(P);  // has it: nothing changes
    CHECK(seq.capacity() == P + 1);
    seq.reserve(N);
    CHECK(seq.capacity() == N);
    CHECK(seq.length() == P);
    for (int t = P; t < N; ++t) {
      CAPTURE(t);
      test::check_close(model.extend(seq, rows.ids(t, 1), 1), rows.logits(t), 1e-8);
    }
    seq.truncate(P);  // the checkpoint came along
    test::check_close(model.extend(seq, rows.ids(P, 1), 1), rows.logits(P), 1e-8);
  }
}

TEST_CASE_FIXTURE(test::GpuTest, "prompt cache: a generation from a cached sequence runs only what the cache lacks "
                                 "and chooses the reference's ids (qwen3, qwen3_next, GLA)") {
  test::TinyModel attention;
  attention.gate = GateKind::headwise;
  for (const ModelConfig& cfg : {attention.config(), qwen3_next(), test::TinyGla{}.config()}) {
    CAPTURE(cfg.model_type);
    const bool recurrent = cfg.gla || cfg.linear_attention;
    const test::RandomModel m(cfg, rng);
    Model model(ctx, m.cfg, m.tensors);
    model.set_poison(true);
    GenerateOptions o;
    o.stop_at_eos = false;
    o.keep_sequence = true;
    o.max_new_tokens = 5;
    auto greedy = [&](const std::vector<int64_t>& prompt) {
      return reference::greedy_generate(m.cfg, m.map, prompt, o.max_new_tokens, false);
    };
    // Room for a later turn: the first generation stops itself after 5 of its 14.
    GenerateOptions first = o;
    first.max_new_tokens = 14;
    int taken = 0;
    first.on_token = [&](int64_t) { return ++taken < 5; };
    const std::vector<int64_t> prompt1 = test::random_ids(rng, 6, m.cfg.vocab_size);
    Generation g1(model, prompt1, first);
    const std::vector<int64_t> reply1 = finish(g1);
    CHECK(reply1 == greedy(prompt1));
    std::optional<CachedSequence> c = g1.release();
    REQUIRE(c);
    CHECK(!g1.release());  // handed over once
    // The prompt and the ids that ran: all but the last.
    CHECK(c->ids == join(prompt1, std::vector<int64_t>(reply1.begin(), reply1.end() - 1)));
    CHECK(c->sequence.length() == 10);
    CHECK(c->sequence.checkpoint_length() == (recurrent ? 5 : -1));

    // The next turn: the whole exchange, then new ids. Nothing runs again.
    const std::vector<int64_t> prompt2 = join(join(prompt1, reply1), test::random_ids(rng, 3, m.cfg.vocab_size));
    Generation g2(model, prompt2, o, nullptr, std::move(*c));
    const std::vector<int64_t> reply2 = finish(g2);
    CHECK(g2.result().cached_tokens == 10);
    CHECK(reply2 == greedy(prompt2));
    c = g2.release();
    REQUIRE(c);

    // The same prompt again: all but its last position, from the checkpoint where states recur.
    Generation g3(model, prompt2, o, nullptr, std::move(*c));
    CHECK(finish(g3) == reply2);
    CHECK(g3.result().cached_tokens == int(prompt2.size()) - 1);
    c = g3.release();
    REQUIRE(c);

    // A prompt that parts from it at position 4: KV caches go back there, recurrent states to the start.
    std::vector<int64_t> prompt4(prompt2.begin(), prompt2.begin() + 4);
    prompt4 = join(prompt4, test::random_ids(rng, 7, m.cfg.vocab_size));
    prompt4[4] = (prompt2[4] + 1) % m.cfg.vocab_size;
    Generation g4(model, prompt4, o, nullptr, std::move(*c));
    CHECK(finish(g4) == greedy(prompt4));
    CHECK(g4.result().cached_tokens == (recurrent ? 0 : 4));

    // A sequence without room for the prompt and max_new_tokens is given it.
    c = g4.release();
    REQUIRE(c);
    GenerateOptions more = o;
    more.max_new_tokens = c->sequence.capacity();
    Generation g5(model, prompt4, more, nullptr, std::move(*c));
    CHECK(finish(g5) == reference::greedy_generate(m.cfg, m.map, prompt4, more.max_new_tokens, false));
    CHECK(g5.result().cached_tokens == int(prompt4.size()) - 1);
    CHECK(g5.release()->sequence.capacity() == int(prompt4.size()) + more.max_new_tokens);

    // Without keep_sequence nothing is kept; a cached sequence must hold its ids.
    GenerateOptions plain = o;
    plain.keep_sequence = false;
    Generation g6(model, prompt1, plain);
    finish(g6);
    CHECK(!g6.release());
    CachedSequence wrong{model.start(1, 20), {1, 2}};
    CHECK_THROWS_WITH_AS(Generation(model, prompt1, o, nullptr, std::move(wrong)),
                         doctest::Contains("holds 0 positions but 2 ids"), Error);
  }
}

TEST_CASE_FIXTURE(test::GpuTest, "prompt cache: prefill_all pauses a recurrent prompt for its checkpoint, and prompts "
                                 "from caches run beside new ones") {
  const test::RandomModel m(qwen3_next(), rng);
  Model model(ctx, m.cfg, m.tensors);
  GenerateOptions o;
  o.stop_at_eos = false;
  o.keep_sequence = true;
  o.max_new_tokens = 3;
  const std::vector<int64_t> base = test::random_ids(rng, 9, m.cfg.vocab_size);
  GenerateOptions roomy = o;  // room for the prompt below: it stops itself after 3 of its 8
  roomy.max_new_tokens = 8;
  int taken = 0;
  roomy.on_token = [&](int64_t) { return ++taken < 3; };
  Generation seed(model, base, roomy);
  finish(seed);
  std::optional<CachedSequence> c = seed.release();
  REQUIRE(c);
  CHECK(c->sequence.checkpoint_length() == 8);
  // One prompt extends the cached one's checkpoint (8 of its positions cached), the other is new.
  std::vector<int64_t> a = join(std::vector<int64_t>(base.begin(), base.begin() + 8),
                                test::random_ids(rng, 4, m.cfg.vocab_size));
  a[8] = (base[8] + 1) % m.cfg.vocab_size;
  const std::vector<int64_t> b = test::random_ids(rng, 12, m.cfg.vocab_size);
  Generation ga(model, a, o, nullptr, std::move(*c)), gb(model, b, o);
  std::vector<Generation*> both{&ga, &gb};
  // 4 positions each: a's last 3 stop before its last position (its checkpoint), b runs 4.
  CHECK(Generation::prefill_all(both, 4) == std::vector<bool>{false, false});
  CHECK(Generation::prefill_all(both, 4) == std::vector<bool>{true, false});
  while (!ga.done() || !gb.done()) {
    std::vector<Generation*> running;
    for (Generation* g : both)
      if (!g->done()) running.push_back(g);
    Generation::step_all(running);
  }
  CHECK(ga.result().cached_tokens == 8);
  CHECK(ga.result().ids == reference::greedy_generate(m.cfg, m.map, a, 3, false));
  CHECK(gb.result().ids == reference::greedy_generate(m.cfg, m.map, b, 3, false));
  CHECK(ga.release()->sequence.checkpoint_length() == 11);
  CHECK(gb.release()->sequence.checkpoint_length() == 11);
}

}  // namespace test_prompt_cache
