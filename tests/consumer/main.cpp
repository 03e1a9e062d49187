// The README's linking example: build a small block, run it, check it.
#include <vkgate/block.hpp>
#include <vkgate/error.hpp>
#include <vkgate/reference.hpp>

#include <cstdio>
#include <random>
#include <vector>

int main() try {
  vkgate::Context ctx;  // VKGATE_DEVICE picks the device; VKGATE_VALIDATION=1 validates
  vkgate::BlockConfig cfg;
  cfg.hidden_size = 64;
  cfg.num_heads = 4;
  cfg.num_kv_heads = 2;
  cfg.head_dim = 16;
  cfg.gate_kind = vkgate::GateKind::headwise;

  std::mt19937 rng(7);
  std::normal_distribution<float> dist(0.0f, 0.2f);
  std::map<std::string, std::vector<float>> storage;
  vkgate::WeightMap weights;
  for (const auto& spec : vkgate::expected_weights(cfg)) {
    auto& v = storage[spec.name];
    v.resize(size_t(spec.numel()));
    for (float& x : v) x = dist(rng);
    weights[spec.name] = v;
  }
  std::vector<float> x(2 * 5 * 64);
  for (float& v : x) v = dist(rng);

  vkgate::GatedAttention block(ctx, cfg, weights);
  const std::vector<float> y = block.forward(x, /*batch=*/2, /*tokens=*/5);

  vkgate::reference::Inputs in;
  in.hidden = x;
  in.batch = 2;
  in.tokens = 5;
  const auto diff = vkgate::reference::compare(y, vkgate::reference::forward(cfg, weights, in).output);
  std::printf("%s: NMSE %.3e, max abs %.3e\n", ctx.device().name.c_str(), diff.nmse, diff.max_abs);
  return diff.nmse <= 1e-9 && ctx.validation_messages() == 0 ? 0 : 1;
} catch (const vkgate::Error& e) {
  std::fprintf(stderr, "consumer: %s\n", e.what());
  return 1;
}
