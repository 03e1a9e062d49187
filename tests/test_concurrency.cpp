// Determinism and concurrency (issue 5, item 6): the same input on the same
// device gives bitwise-identical output — replayed, from a second block, from
// a second Context, through the device-resident cache; and two GatedAttention
// objects driven from two threads at once on one shared Context (each with
// its own command pools) give exactly what they give one after the other,
// with the validation layer (which also checks thread safety of Vulkan
// object use) silent throughout.
#include <cstring>
#include <thread>

#include "block_weights.hpp"
#include "harness.hpp"
#include "vkgate/block.hpp"

namespace test_concurrency {

using namespace vkgate;

namespace {

BlockConfig config(int heads, int kv, GateKind gate) {
  BlockConfig c;
  c.hidden_size = 96;
  c.num_heads = heads;
  c.num_kv_heads = kv;
  c.head_dim = 32;
  c.gate_kind = gate;
  c.partial_rotary_factor = 0.5;
  c.norm_kind = NormKind::zero_centered;
  return c;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// A fixed workload: prefills of a few shapes, then decode steps on the resident cache.
struct Workload {
  std::vector<std::vector<float>> inputs;
  std::vector<std::pair<int, int>> shapes;  // (batch, tokens); tokens 0 marks a decode step of batch 1
  Workload(std::mt19937& rng, int D) {
    std::normal_distribution<float> dist;
    for (auto [b, t] : std::initializer_list<std::pair<int, int>>{{1, 7}, {2, 3}, {1, 1}, {3, 5}, {1, 0}, {1, 0}, {1, 0}}) {
      const size_t n = size_t(b) * size_t(t == 0 ? 1 : t) * size_t(D);
      std::vector<float> x(n);
      for (float& v : x) v = dist(rng);
      inputs.push_back(std::move(x));
      shapes.emplace_back(b, t);
    }
  }
  std::vector<std::vector<float>> run(GatedAttention& block) const {
    std::vector<std::vector<float>> out;
    block.reserve_cache(1, 8);
    for (size_t i = 0; i < inputs.size(); ++i) {
      auto [b, t] = shapes[i];
      if (t > 0) {
        out.push_back(block.forward(inputs[i], b, t));
      } else {
        ForwardInputs in{.hidden = inputs[i], .batch = 1, .tokens = 1, .use_device_cache = true};
        out.push_back(block.run(in).output);
      }
    }
    return out;
  }
};

}  // namespace

TEST_CASE_FIXTURE(test::GpuTest, "determinism: bitwise-identical outputs across replays, blocks, Contexts and cache paths") {
  const BlockConfig c = config(6, 2, GateKind::elementwise);
  test::RandomWeights w(c, rng);
  const Workload work(rng, c.hidden_size);
  GatedAttention a(ctx, c, w.map), b(ctx, c, w.map);
  const auto first = work.run(a);
  const auto again = work.run(a);  // replays of recorded plans
  const auto other = work.run(b);  // a second block on the same Context
  ContextOptions o;
  o.validation = true;
  if (const char* d = std::getenv("VKGATE_TEST_DEVICE")) o.device = d;
  Context ctx2(o);
  GatedAttention c2(ctx2, c, w.map);
  const auto fresh = work.run(c2);  // a second Context: pipelines compiled anew
  REQUIRE(first.size() == work.inputs.size());
  for (size_t i = 0; i < first.size(); ++i) {
    CAPTURE(i);
    CHECK(same_bits(first[i], again[i]));
    CHECK(same_bits(first[i], other[i]));
    CHECK(same_bits(first[i], fresh[i]));
  }
  CHECK(ctx2.take_validation_messages().empty());
}

TEST_CASE_FIXTURE(test::GpuTest, "concurrency: two blocks on two threads at once equal sequential use (shared Context)") {
  const BlockConfig c1 = config(6, 2, GateKind::elementwise), c2 = config(4, 1, GateKind::headwise);
  test::RandomWeights w1(c1, rng), w2(c2, rng);
  const Workload work1(rng, c1.hidden_size), work2(rng, c2.hidden_size);
  constexpr int kRounds = 4;

  // Sequential: one after the other.
  std::vector<std::vector<float>> seq1, seq2;
  {
    GatedAttention a(ctx, c1, w1.map), b(ctx, c2, w2.map);
    seq1 = work1.run(a);
    seq2 = work2.run(b);
  }
  // Concurrent: each thread builds its block (uploads race too) and runs the workload several times.
  struct Result {
    std::vector<std::vector<std::vector<float>>> rounds;
    std::string error;
  };
  Result r1, r2;
  auto body = [&](const BlockConfig& c, const test::RandomWeights& w, const Workload& work, Result& r) {
    try {
      GatedAttention block(ctx, c, w.map);
      for (int i = 0; i < kRounds; ++i) r.rounds.push_back(work.run(block));
    } catch (const std::exception& e) {
      r.error = e.what();
    }
  };
  std::thread t1(body, std::cref(c1), std::cref(w1), std::cref(work1), std::ref(r1));
  std::thread t2(body, std::cref(c2), std::cref(w2), std::cref(work2), std::ref(r2));
  t1.join();
  t2.join();
  CHECK(r1.error.empty());
  CHECK(r2.error.empty());
  REQUIRE(r1.rounds.size() == size_t(kRounds));
  REQUIRE(r2.rounds.size() == size_t(kRounds));
  for (int round = 0; round < kRounds; ++round)
    for (size_t i = 0; i < seq1.size(); ++i) {
      CAPTURE(round);
      CAPTURE(i);
      CHECK(same_bits(r1.rounds[size_t(round)][i], seq1[i]));
      CHECK(same_bits(r2.rounds[size_t(round)][i], seq2[i]));
    }
  // The device memory the two blocks used is back.
  CHECK(vk.allocator->bytes_in_use() == 0);
}

}  // namespace test_concurrency
