// Batched decode (Model::extend of several sequences, Generation::step_all):
// sequences of different lengths and capacities advance in one device step,
// each with its own caches, one position each or several (prompts together). Every row must equal the same sequence stepped
// alone and the double-precision reference, for each model type (qwen3 with
// the gate, qwen3_next's Gated DeltaNet beside attention, GLA), on the
// attention kernels of every route (attention_step's one dispatch for the
// rows and in groups, unfused, fused flash, the pass-per-op path), with
// sequences joining and leaving between steps. The device's top
// k (Model::extend_top) against the whole rows, and generations sampling
// from it against the same generations reading whole rows.
#include <algorithm>
#include <climits>
#include <map>
#include <numeric>

#include <nlohmann/json.hpp>

#include "harness.hpp"
#include "ops/attention.hpp"
#include "model_check.hpp"
#include "model_weights.hpp"
#include "vkgate/error.hpp"
#include "vkgate/model.hpp"
#include "vkgate/model_config.hpp"
#include "vkgate/reference_model.hpp"

namespace test_batched_decode {

using namespace vkgate;

namespace {

// One sequence: its ids (prompt, then the ids the steps feed), the
// reference's logits of each position, and two copies of its state: one
// stepped with the others, one alone.
struct Row {
  int prompt = 0;
  std::vector<int64_t> ids;
  std::vector<double> reference;  // [N, V]
  std::optional<Sequence> together, alone;
};

std::vector<double> widened(const std::vector<float>& v) { return {v.begin(), v.end()}; }

// Whether the model's last step chose its rows' top k on the device.
bool ran_top_k(const Model& model) {
  const std::vector<StageTime> timings = model.last_timings();
  return std::any_of(timings.begin(), timings.end(), [](const StageTime& t) { return t.stage == "top_k"; });
}

// Runs the prompts of sequences of prompts 2, 5 and 3 together as far as
// the shortest goes (2 tokens per row, from position 0), then each one's rest
// alone; steps them together, then 2 positions each together (each row at its
// own past), then drops the second and adds a fourth, checking each row of
// every step against the sequence stepped alone (NMSE ≤ alone_bound) and the
// reference (≤ bound).
// `stage`: a dispatch label the batched decode step must have (the route under test).
void check_batched(Context& ctx, const test::RandomModel& m, std::mt19937& rng, double bound, double alone_bound,
                   const ModelOptions& options = {}, const std::string& stage = {}) {
  Model model(ctx, m.cfg, m.tensors, options);
  model.set_poison(true);
  const int V = m.cfg.vocab_size, steps = 3, wide = 2;
  std::map<int, Row> rows;
  // A sequence with its reference; its alone twin runs the prompt, and the
  // together one too unless `later` (prompt_together runs it).
  auto add = [&](int key, int prompt, bool later = false) {
    Row& r = rows[key];
    r.prompt = prompt;
    const int N = prompt + steps + wide + 1;
    r.ids = test::random_ids(rng, size_t(N), V);
    r.reference = reference::model_forward(m.cfg, m.map, {r.ids, 1, N}).logits;
    r.together.emplace(model.start(1, N + key));  // capacities apart
    r.alone.emplace(model.start(1, N));
    const std::span prompt_ids(r.ids.data(), size_t(prompt));
    model.extend(*r.alone, prompt_ids, prompt);
    if (!later)
      test::check_close(model.extend(*r.together, prompt_ids, prompt),
                        test::positions(r.reference, 1, N, prompt - 1), bound);
  };
  // The next `tokens` positions of every row together; each row's last
  // against its alone twin and the reference.
  auto step = [&](int tokens) {
    CAPTURE(tokens);
    std::vector<Sequence*> seqs;
    std::vector<int64_t> next;
    for (auto& [key, r] : rows) {
      seqs.push_back(&*r.together);
      const auto at = r.ids.begin() + r.together->length();
      next.insert(next.end(), at, at + tokens);
    }
    const std::vector<float> got = model.extend(seqs, next, tokens);
    REQUIRE(got.size() == rows.size() * size_t(V));
    if (!stage.empty() && tokens == 1) {
      const auto timings = model.last_timings();
      CHECK(std::any_of(timings.begin(), timings.end(), [&](const StageTime& t) { return t.stage.starts_with(stage); }));
    }
    size_t i = 0;
    for (auto& [key, r] : rows) {
      CAPTURE(key);
      const int at = r.together->length() - 1;
      CAPTURE(at);
      const std::vector<float> row(got.begin() + long(i * V), got.begin() + long((i + 1) * V));
      const std::vector<float> alone =
          model.extend(*r.alone, std::span(next).subspan(i * size_t(tokens), size_t(tokens)), tokens);
      test::check_close(row, widened(alone), alone_bound);
      test::check_close(row, test::positions(r.reference, 1, int(r.ids.size()), at), bound);
      ++i;
    }
  };
  // The prompts of the rows added `later`: the shortest's length together,
  // then each one's rest alone, its last logits against the reference.
  auto prompt_together = [&] {
    int shared = INT_MAX;
    for (auto& [key, r] : rows) shared = std::min(shared, r.prompt);
    std::vector<Sequence*> seqs;
    std::vector<int64_t> ids;
    for (auto& [key, r] : rows) {
      seqs.push_back(&*r.together);
      ids.insert(ids.end(), r.ids.begin(), r.ids.begin() + shared);
    }
    const std::vector<float> got = model.extend(seqs, ids, shared);
    size_t i = 0;
    for (auto& [key, r] : rows) {
      CAPTURE(key);
      const int N = int(r.ids.size());
      std::vector<float> last(got.begin() + long(i * V), got.begin() + long((i + 1) * V));
      ++i;
      if (r.prompt > shared)
        last = model.extend(*r.together, std::span(r.ids).subspan(size_t(shared), size_t(r.prompt - shared)),
                            r.prompt - shared);
      test::check_close(last, test::positions(r.reference, 1, N, r.prompt - 1), bound);
    }
  };

  add(0, 2, true);
  add(1, 5, true);
  add(2, 3, true);
  prompt_together();
  step(1);
  const size_t recorded = model.recordings();
  for (int t = 1; t < steps; ++t) step(1);
  CHECK(model.recordings() == recorded);  // the set's step: recorded once, replayed as the lengths move on
  step(wide);

  rows.erase(1);  // a sequence leaves (its plans go with it), another joins
  add(3, 4);
  const size_t before = model.recordings();
  step(1);
  CHECK(model.recordings() == before + 2);  // the new set's step, and the new sequence's alone twin's first step
}

// Greedy generations of random prompts of the given lengths, all of one
// model, stepped together and checked against each one alone.
struct Generations {
  Model& model;
  GenerateOptions o;
  std::vector<std::vector<int64_t>> prompts;
  std::vector<Generation> gens;
  Generations(Model& m, std::mt19937& rng, std::initializer_list<int> lengths, int new_tokens) : model(m) {
    o.max_new_tokens = new_tokens;
    o.stop_at_eos = false;
    for (int n : lengths) {
      prompts.push_back(test::random_ids(rng, size_t(n), model.config().vocab_size));
      gens.emplace_back(model, prompts.back(), o);
    }
  }
  // step_all of `all` until each is done, then every generation's ids against the same generation alone.
  void finish_and_check(std::vector<Generation*> all) {
    while (!all.empty()) {
      Generation::step_all(all);
      std::erase_if(all, [](const Generation* g) { return g->done(); });
    }
    for (size_t i = 0; i < gens.size(); ++i) {
      CAPTURE(i);
      CHECK(gens[i].result().ids == model.generate(prompts[i], o).ids);
    }
  }
};

}  // namespace

TEST_CASE_FIXTURE(test::GpuTest, "batched decode: qwen3 with an sdpa gate and GQA, rows equal each sequence alone "
                                 "and the reference (fp32, fp16), attention in one dispatch, in groups, per row") {
  test::TinyModel s;
  s.gate = GateKind::elementwise;
  const test::RandomModel m(s.config(), rng);
  // On CPU drivers a step's attention is attention_step.comp: the rows in
  // one dispatch, or in groups (of 2 here: 2 + 1 and 2 + 2 rows). Under
  // VKGATE_DISABLE_CPU_MATMUL they take the GPU kernels.
  const gpu::Tuning& tuning = ctx.impl().tuning;
  const bool cpu = ops::cpu_gemm(ctx.device(), tuning) && tuning.cpu_attention;
  check_batched(ctx, m, rng, 1e-8, 1e-10, {}, cpu ? "attention.step" : "");
  check_batched(ctx, m, rng, 1e-4, 1e-5, {.precision = Precision::fp16}, cpu ? "attention.step" : "");
  {
    test::ScopedTuning t(ctx);
    t->step_sequences = 2;
    check_batched(ctx, m, rng, 1e-8, 1e-10, {}, cpu ? "attention.step" : "");
  }
  {
    // A GPU's kernels with VKGATE_STEP_ATTENTION_GPU: the rows' attention in
    // one dispatch beside the matrix-vector products, which take up to 16
    // rows with VKGATE_MATVEC_ROWS=16 (12 in the forward of 2 × 6).
    test::ScopedTuning t(ctx);
    t->cpu_matmul = false;
    t->step_attention_gpu = true;
    t->matvec_rows = gpu::kMatvecMaxRows;
    check_batched(ctx, m, rng, 1e-8, 1e-10, {}, "attention.step");
    test::check_model(*this, m.cfg, 2, 6, Precision::fp32, 1e-8);
  }
  test::ScopedTuning t(ctx);  // each row through its own score matrix
  t->step_attention = false;
  check_batched(ctx, m, rng, 1e-8, 1e-10, {}, cpu ? "attention.scores" : "");
}

TEST_CASE_FIXTURE(test::GpuTest, "batched decode: the fused flash kernel and the pass-per-op path, a value gate "
                                 "(llama)") {
  test::TinyModel s;
  s.model_type = "llama";
  s.gate = GateKind::headwise;
  s.gate_position = GatePosition::value;
  const test::RandomModel m(s.config(), rng);
  {
    test::ScopedTuning t(ctx);
    t->fused = true;
    t->cpu_attention = false;  // flash preferred on a CPU driver too
    check_batched(ctx, m, rng, 1e-8, 1e-10, {}, "flash_attention");
  }
  test::ScopedTuning t(ctx);
  t->pass_fusion = false;
  check_batched(ctx, m, rng, 1e-8, 1e-10, {}, "rope");
}

TEST_CASE_FIXTURE(test::GpuTest, "batched decode: qwen3_next (Gated DeltaNet, gated attention, a sparse MoE with a "
                                 "shared expert) and GLA, each sequence's own recurrent states, recurrent and chunked") {
  nlohmann::json j = test::tiny_qwen3_next_json();
  j["num_experts"] = 5;
  j["num_experts_per_tok"] = 2;
  j["moe_intermediate_size"] = 16;
  j["shared_expert_intermediate_size"] = 20;
  const test::RandomModel next(parse_model_config_json(j.dump(), "config.json"), rng);
  REQUIRE(!next.cfg.moe_layers().empty());
  check_batched(ctx, next, rng, 1e-8, 1e-10);
  const test::RandomModel gla(test::TinyGla{}.config(), rng);
  check_batched(ctx, gla, rng, 1e-8, 1e-10);
  // The chunked forms, as a long prompt's pieces take them, each row against its own states.
  test::ScopedTuning tuning(ctx);
  tuning->gdn_mode = gpu::RecurrenceMode::chunk;
  tuning->gla_mode = gpu::RecurrenceMode::chunk;
  check_batched(ctx, next, rng, 1e-8, 1e-10);
  check_batched(ctx, gla, rng, 1e-8, 1e-10);
}

TEST_CASE_FIXTURE(test::GpuTest, "batched decode: Generation::step_all chooses the ids each generation alone "
                                 "chooses, and bad sets of sequences are errors naming the sequence") {
  test::TinyModel s;
  s.gate = GateKind::headwise;
  const test::RandomModel m(s.config(), rng);
  Model model(ctx, m.cfg, m.tensors);
  Generations g(model, rng, {3, 1, 6}, 5);
  std::vector<Generation>& gens = g.gens;
  // The first round runs each prompt on its own; a generation joins late.
  std::vector<Generation*> all{&gens[0], &gens[1]};
  Generation::step_all(all);
  all.push_back(&gens[2]);
  g.finish_and_check(all);
  CHECK_THROWS_WITH_AS(Generation::step_all(std::vector<Generation*>{&gens[0]}), doctest::Contains("has ended"), Error);

  Sequence a = model.start(1, 4), b = model.start(1, 2), wide = model.start(2, 4);
  const std::vector<int64_t> two{1, 2};
  CHECK_THROWS_WITH_AS(model.extend(std::vector<Sequence*>{&a, &a}, two), doctest::Contains("sequence 1 is given twice"),
                       Error);
  CHECK_THROWS_WITH_AS(model.extend(std::vector<Sequence*>{&a, &wide}, two), doctest::Contains("sequence 1 has batch 2"),
                       Error);
  CHECK_THROWS_WITH_AS(model.extend(std::vector<Sequence*>{&a, &b}, std::vector<int64_t>{1}),
                       doctest::Contains("1 ids for 2 sequences"), Error);
  CHECK_THROWS_WITH_AS(model.extend(std::vector<Sequence*>{&a, &b}, std::vector<int64_t>{1, m.cfg.vocab_size}),
                       doctest::Contains("outside the vocabulary"), Error);
  CHECK_THROWS_WITH_AS(model.extend(std::vector<Sequence*>{&a, &b}, two, 2),
                       doctest::Contains("2 ids for 2 sequences × tokens 2"), Error);
  CHECK_THROWS_WITH_AS(model.extend(std::vector<Sequence*>{&a, &b}, two, 0),
                       doctest::Contains("2 ids for 2 sequences × tokens 0"), Error);
  CHECK_THROWS_WITH_AS(model.extend(std::vector<Sequence*>{&a, &b}, std::vector<int64_t>{1, 2, 3, 4, 5, 6}, 3),
                       doctest::Contains("sequence 1 holds 0 of 2 positions; 3 more do not fit"), Error);
  model.extend(b, two, 2);
  CHECK_THROWS_WITH_AS(model.extend(std::vector<Sequence*>{&a, &b}, two), doctest::Contains("sequence 1 holds 2 of 2"),
                       Error);
  CHECK(a.length() == 0);  // a refused step moves no sequence on
}

TEST_CASE_FIXTURE(test::GpuTest, "batched decode: Generation::prefill_all runs the prompts that take as many "
                                 "positions together, and each generation chooses the ids it chooses alone") {
  test::TinyModel s;
  s.gate = GateKind::headwise;
  const test::RandomModel m(s.config(), rng);
  Model model(ctx, m.cfg, m.tensors);
  model.set_poison(true);
  Generations g(model, rng, {5, 5, 2, 9}, 4);
  std::vector<Generation>& gens = g.gens;
  std::vector<Generation*> all;
  for (Generation& g : gens) all.push_back(&g);
  // 4 positions of the prompts of 5, 5 and 9 in one step (one plan for the three), the 2 on its own.
  const size_t before = model.recordings();
  CHECK(Generation::prefill_all(all, 4) == std::vector<bool>{false, false, true, false});
  CHECK(model.recordings() == before + 2);
  // The two 5s' last positions together, 4 more of the 9 on its own; the 2 has run.
  CHECK(Generation::prefill_all(all, 4) == std::vector<bool>{true, true, true, false});
  g.finish_and_check(all);  // the 9's last position runs in its first step
  Generation fresh(model, g.prompts[0], g.o);
  CHECK_THROWS_WITH_AS(Generation::prefill_all(std::vector<Generation*>{&fresh}, 0),
                       doctest::Contains("at least 1 token"), Error);
  CHECK_THROWS_WITH_AS(Generation::prefill_all(std::vector<Generation*>{&fresh, &fresh}, 2),
                       doctest::Contains("generation 1 is given twice"), Error);
  CHECK_THROWS_WITH_AS(Generation::prefill_all(std::vector<Generation*>{&fresh, &gens[0]}, 2),
                       doctest::Contains("has ended"), Error);
}

TEST_CASE_FIXTURE(test::GpuTest, "device top-k: Model::extend_top gives each row's most likely ids as the whole "
                                 "row does, and the whole row where ties run past k") {
  test::TinyModel s;
  s.gate = GateKind::elementwise;
  test::RandomModel m(s.config(), rng);
  Model model(ctx, m.cfg, m.tensors);
  model.set_poison(true);
  const int V = m.cfg.vocab_size;
  std::vector<Sequence> seqs, twins;
  for (int n : {2, 4, 3}) {
    const auto prompt = test::random_ids(rng, size_t(n), V);
    seqs.push_back(model.start(1, 8));
    twins.push_back(model.start(1, 8));
    model.extend(seqs.back(), prompt, n);
    model.extend(twins.back(), prompt, n);
  }
  // The top k of each row, as a stable sort of the whole row orders them.
  auto expect_top = [&](const TopLogits& t, const std::vector<float>& all, size_t rows) {
    REQUIRE(t.ids.size() == rows * size_t(t.k));
    for (size_t r = 0; r < rows; ++r) {
      CAPTURE(r);
      std::vector<int> order(static_cast<size_t>(V));
      std::iota(order.begin(), order.end(), 0);
      const float* row = all.data() + r * size_t(V);
      std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return row[a] > row[b]; });
      bool same = true;
      for (int i = 0; i < t.k; ++i)
        same = same && t.ids[r * size_t(t.k) + size_t(i)] == order[size_t(i)] &&
               t.logits[r * size_t(t.k) + size_t(i)] == row[order[size_t(i)]];
      CHECK(same);
      CHECK(t.full.count(int(r)) == (row[order[size_t(t.k)]] == row[order[size_t(t.k - 1)]] ? 1u : 0u));
    }
  };
  std::vector<Sequence*> all{&seqs[0], &seqs[1], &seqs[2]}, all_twins{&twins[0], &twins[1], &twins[2]};
  const std::vector<int64_t> next{3, 5, 7};
  const TopLogits t = model.extend_top(all, next, 17);
  CHECK(ran_top_k(model));
  const std::vector<float> whole = model.extend(all_twins, next);
  test::check_close(whole, widened(whole));  // finite, every element written
  expect_top(t, whole, 3);
  const TopLogits one = model.extend_top(std::vector<Sequence*>{&seqs[0]}, std::vector<int64_t>{9}, 1);
  expect_top(one, model.extend(std::vector<Sequence*>{&twins[0]}, std::vector<int64_t>{9}), 1);
  CHECK_THROWS_WITH_AS(model.extend_top(all, next, 0), doctest::Contains("k 0"), Error);
  CHECK_THROWS_WITH_AS(model.extend_top(all, next, V + 1), doctest::Contains("outside [1, "), Error);

  // Every lm_head row the same: every logit of a row ties, so the whole row comes back.
  std::vector<float>& head = m.data.at("lm_head.weight");
  for (size_t i = size_t(s.hidden); i < head.size(); ++i) head[i] = head[i % size_t(s.hidden)];
  Model flat(ctx, m.cfg, m.tensors);
  Sequence a = flat.start(1, 4);
  const TopLogits tied = flat.extend_top(std::vector<Sequence*>{&a}, std::vector<int64_t>{1}, 5);
  REQUIRE(tied.full.count(0) == 1);
  CHECK(tied.full.at(0).size() == size_t(V));
  CHECK(tied.ids == std::vector<int64_t>{0, 1, 2, 3, 4});
}

// Model::extend_greedy, as `vkgate bench --model` decodes: each row's
// argmax (the lower id on ties) by the device's top 1 where the Context picks
// top ids there, else from the whole rows read back.
TEST_CASE_FIXTURE(test::GpuTest, "device top-k: Model::extend_greedy picks each row's most likely id both ways") {
  test::TinyModel s;
  test::RandomModel m(s.config(), rng);
  Model model(ctx, m.cfg, m.tensors);
  model.set_poison(true);
  const int V = m.cfg.vocab_size;
  for (bool device : {true, false}) {
    CAPTURE(device);
    test::ScopedTuning t(ctx);
    t->device_top_k = device;
    std::vector<Sequence> seqs, twins;
    for (int n : {3, 1}) {
      const auto prompt = test::random_ids(rng, size_t(n), V);
      for (auto* list : {&seqs, &twins}) {
        list->push_back(model.start(1, 8));
        model.extend(list->back(), prompt, n);
      }
    }
    std::vector<Sequence*> all{&seqs[0], &seqs[1]}, all_twins{&twins[0], &twins[1]};
    const std::vector<int64_t> next{2, 6};
    const std::vector<int64_t> got = model.extend_greedy(all, next);
    CHECK(ran_top_k(model) == device);
    const std::vector<float> whole = model.extend(all_twins, next);
    for (size_t r = 0; r < all.size(); ++r) {
      const auto row = whole.begin() + long(r) * V;
      CHECK(got[r] == std::max_element(row, row + V) - row);
    }
  }
}

TEST_CASE_FIXTURE(test::GpuTest, "device top-k: generations choose the same ids with the device's top k as with the "
                                 "whole rows (greedy, sampled with top_k, with penalties), alone and together") {
  test::TinyModel s;
  s.gate = GateKind::headwise;
  const test::RandomModel m(s.config(), rng);
  Model model(ctx, m.cfg, m.tensors);
  std::vector<GenerateOptions> options(3);
  for (GenerateOptions& o : options) {
    o.max_new_tokens = 6;
    o.stop_at_eos = false;
  }
  options[1].sampling = {.temperature = 1.3, .top_k = 20, .top_p = 0.9, .min_p = 0.02, .seed = 4};
  options[2].sampling = {.temperature = 0.8, .top_k = 12, .repeat_penalty = 1.3, .seed = 9};
  std::vector<std::vector<int64_t>> prompts;
  for (int n : {3, 2, 5}) prompts.push_back(test::random_ids(rng, size_t(n), m.cfg.vocab_size));
  // Each generation alone, then all three together, then the first two together (no penalties: every row top k).
  auto run = [&](std::vector<size_t> which, bool together) {
    std::vector<Generation> gens;
    for (size_t i : which) gens.emplace_back(model, prompts[i], options[i]);
    std::vector<Generation*> live;
    for (Generation& g : gens) live.push_back(&g);
    while (!live.empty()) {
      if (together) {
        Generation::step_all(live);
      } else {
        for (Generation* g : live) g->step();
      }
      std::erase_if(live, [](const Generation* g) { return g->done(); });
    }
    std::vector<std::vector<int64_t>> ids;
    for (const Generation& g : gens) ids.push_back(g.result().ids);
    return ids;
  };
  std::vector<std::vector<int64_t>> whole_rows;
  {
    test::ScopedTuning t(ctx);
    t->device_top_k = false;
    whole_rows = run({0, 1, 2}, false);
  }
  test::ScopedTuning device(ctx);  // the device's top k also on a CPU driver, whose default is the whole rows
  device->device_top_k = true;
  CHECK(run({0, 1, 2}, false) == whole_rows);
  CHECK(run({0, 1, 2}, true) == whole_rows);
  CHECK(run({0, 1}, true) == std::vector<std::vector<int64_t>>{whole_rows[0], whole_rows[1]});
  CHECK(ran_top_k(model));
}

}  // namespace test_batched_decode
