// The device model's logits against the double reference's, for the model
// tests of every model_type.
#pragma once

#include "harness.hpp"
#include "model_weights.hpp"
#include "nn/storage.hpp"
#include "vkgate/error.hpp"
#include "vkgate/model.hpp"
#include "vkgate/reference_model.hpp"

namespace vkgate::test {

// The reference's fp32 copy of every tensor of `tensors` (F32, F16, BF16, or
// a block format dequantized: the values the device computes with).
struct Dequantized {
  std::map<std::string, std::vector<float>> data;
  WeightMap map;
  explicit Dequantized(const TensorMap& tensors) {
    for (const auto& [name, t] : tensors) map[name] = data[name] = nn::to_f32(t);
  }
};

// A random model of `cfg` on fresh ids [batch, tokens], outputs poisoned; a
// second forward must repeat the first exactly (nothing carried between them).
inline void check_model(GpuTest& t, const ModelConfig& cfg, int batch, int tokens, Precision precision, double nmse) {
  RandomModel m(cfg, t.rng);
  Model model(t.ctx, m.cfg, m.tensors, {precision});
  model.set_poison(true);
  const auto ids = random_ids(t.rng, size_t(batch) * tokens, m.cfg.vocab_size);
  const auto want = reference::model_forward(m.cfg, m.map, {ids, batch, tokens});
  const std::vector<float> got = model.logits(ids, batch, tokens);
  check_close(got, want.logits, nmse);
  CHECK(model.logits(ids, batch, tokens) == got);
}

// Model::load(path) fails with `code` and a message holding the path and each
// of `parts`, having allocated nothing.
inline void check_load_refused(GpuTest& t, const std::string& path, ErrorCode code,
                               const std::vector<std::string>& parts) {
  const uint64_t before = t.ctx.device_memory_allocated();
  try {
    Model::load(t.ctx, path);
    FAIL("Model::load accepted " << path);
  } catch (const Error& e) {
    const std::string what = e.what();
    INFO(what);
    CHECK(e.code() == code);
    CHECK(what.find(path) != std::string::npos);
    for (const std::string& p : parts) CHECK(what.find(p) != std::string::npos);
  }
  CHECK(t.ctx.device_memory_allocated() == before);
}

}  // namespace vkgate::test
