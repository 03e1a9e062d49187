// The Gated DeltaNet layer's benchmark (vkgate bench --op gdn): either form
// of the delta rule, or the automatic choice, with the projections, the conv
// and the output norm around it, from zero states.
#include <cmath>
#include <map>
#include <random>

#include "bench/bench_internal.hpp"
#include "bench/bench_mixer.hpp"
#include "nn/gdn.hpp"
#include "vkgate/reference_gdn.hpp"

namespace vkgate::bench {

using namespace detail;

namespace {
// The double reference costs about a second per 64 tokens at Qwen3-Next's
// shape; the layer is causal, so the first tokens of a long run check it.
constexpr uint32_t kCheckedTokens = 128;
}  // namespace

Case gdn(Context& ctx, const GdnConfig& cfg, int batch, int tokens, Precision precision, const Options& opt,
         GlaForm form) {
  cfg.validate();
  Bench b(ctx);
  gpu::Tuning tuning = b.vk.tuning;
  if (form != GlaForm::automatic)
    tuning.gdn_mode = form == GlaForm::chunk ? gpu::RecurrenceMode::chunk : gpu::RecurrenceMode::recurrent;
  std::map<std::string, std::vector<float>> data;
  WeightMap weights;
  double proj_elems = 0;
  std::uniform_real_distribution<float> uni(0.0f, 1.0f);
  for (const TensorSpec& spec : gdn_expected_weights(cfg)) {
    std::normal_distribution<float> dist(0.0f, float(1.0 / std::sqrt(double(spec.shape.back()))));
    auto& v = data[spec.name];
    v.resize(size_t(spec.numel()));
    // Decays and norms in the ranges trained checkpoints hold.
    for (float& x : v)
      x = spec.name == "norm.weight" ? 1.0f + 0.1f * dist(b.rng)
          : spec.name == "A_log"     ? std::log(0.05f + 3.0f * uni(b.rng))
          : spec.name == "dt_bias"   ? -3.0f + 4.0f * uni(b.rng)
                                     : dist(b.rng);
    weights[spec.name] = v;
    if (spec.name.find("proj") != std::string::npos) proj_elems += double(spec.numel());
  }
  const Storage act = storage_of(precision);
  const nn::Gdn layer(b.vk, tuning, GdnMixer{cfg, std::nullopt}, as_tensors(weights), act);
  const uint32_t B = uint32_t(batch), T = uint32_t(tokens), D = uint32_t(cfg.hidden_size);
  const HostData x = random_data(size_t(B) * T * D, act, b.rng);  // no input norm: read as stored
  Case c;
  c.name = "gdn B" + std::to_string(batch) + " T" + std::to_string(tokens) + " nk" + std::to_string(cfg.num_key_heads) +
           " nv" + std::to_string(cfg.num_value_heads) + " dk" + std::to_string(cfg.key_head_dim) + " dv" +
           std::to_string(cfg.value_head_dim) + " " + to_string(precision) +
           (layer.chunked(T) ? " chunk" : " recurrent");
  const std::vector<float> y = time_recurrent_mixer(b, layer, B, T, D, x, opt, c);
  const uint32_t checked = std::min(T, kCheckedTokens);
  const auto want = reference::gdn_forward(cfg, weights, {first_tokens(x.values, B, T, D, checked), batch, int(checked)});
  record_check(c, first_tokens(y, B, T, D, checked), want.output,
               checked == T ? "whole output" : "the first " + std::to_string(checked) + " tokens of each row");
  const double BT = double(B) * T, nv = cfg.num_value_heads, dk = cfg.key_head_dim, dv = cfg.value_head_dim;
  // The projections, then per token and value head the decay, Sᵀk, the
  // rank-1 update and Sᵀq (7·dk·dv), whichever form ran: GFLOP/s compare as times do.
  c.flop = 2 * BT * proj_elems + 7 * BT * nv * dk * dv;
  const double S = double(B) * nv * dk * dv;
  c.bytes = proj_elems * double(ops::element_bytes(act)) + BT * D * (double(ops::element_bytes(act)) + 4) + 2 * S * 4;
  return c;
}

}  // namespace vkgate::bench
