// The device model's logits against the double reference's, for the model
// tests of every model_type.
#pragma once

#include "harness.hpp"
#include "model_weights.hpp"
#include "vkgate/model.hpp"
#include "vkgate/reference_model.hpp"

namespace vkgate::test {

// A random model of `cfg` on fresh ids [batch, tokens], outputs poisoned; a
// second forward must repeat the first exactly (nothing carried between them).
inline void check_model(GpuTest& t, const ModelConfig& cfg, int batch, int tokens, Precision precision, double nmse) {
  CAPTURE(t.seed);
  RandomModel m(cfg, t.rng);
  Model model(t.ctx, m.cfg, m.tensors, {precision});
  model.set_poison(true);
  const auto ids = random_ids(t.rng, size_t(batch) * tokens, m.cfg.vocab_size);
  const auto want = reference::model_forward(m.cfg, m.map, {ids, batch, tokens});
  const std::vector<float> got = model.logits(ids, batch, tokens);
  check_close(got, want.logits, nmse);
  CHECK(model.logits(ids, batch, tokens) == got);
}

}  // namespace vkgate::test
