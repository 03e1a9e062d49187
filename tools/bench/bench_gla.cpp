// The GLA layer's benchmark (vkgate bench --op gla): either form of the
// recurrence, or the automatic choice, with the projections around it.
#include <cmath>
#include <map>
#include <random>

#include "bench/bench_internal.hpp"
#include "bench/bench_mixer.hpp"
#include "nn/gla.hpp"
#include "vkgate/reference_gla.hpp"

namespace vkgate::bench {

using namespace detail;

Case gla(Context& ctx, const GlaConfig& cfg, int batch, int tokens, Precision precision, const Options& opt,
         GlaForm form) {
  cfg.validate();
  Bench b(ctx);
  gpu::Tuning tuning = b.vk.tuning;
  if (form != GlaForm::automatic) tuning.gla_mode = form == GlaForm::chunk ? gpu::RecurrenceMode::chunk : gpu::RecurrenceMode::recurrent;
  const GlaForms forms{16, "g_norm_swish_gate.weight", true};
  std::map<std::string, std::vector<float>> data;
  WeightMap weights;
  double weight_elems = 0;
  for (const TensorSpec& spec : gla_expected_weights(cfg, forms)) {
    const bool norm = spec.name.find("norm") != std::string::npos, bias = spec.name.ends_with(".bias");
    std::normal_distribution<float> dist(norm ? 1.0f : bias ? 2.0f : 0.0f,
                                         norm ? 0.1f : bias ? 1.0f : float(1.0 / std::sqrt(double(spec.shape.back()))));
    auto& v = data[spec.name];
    v.resize(size_t(spec.numel()));
    for (float& x : v) x = dist(b.rng);
    weights[spec.name] = v;
    weight_elems += double(spec.numel());
  }
  const Storage act = storage_of(precision);
  const nn::Gla layer(b.vk, tuning, cfg, as_tensors(weights), act);
  const uint32_t B = uint32_t(batch), T = uint32_t(tokens), D = uint32_t(cfg.hidden_size);
  const size_t S = size_t(B) * cfg.num_heads * cfg.head_k_dim() * cfg.head_v_dim();
  const HostData x = random_data(size_t(B) * T * D, Storage::f32, b.rng);  // before attn_norm: fp32
  Case c;
  c.name = "gla B" + std::to_string(batch) + " T" + std::to_string(tokens) + " H" + std::to_string(cfg.num_heads) +
           " dk" + std::to_string(cfg.head_k_dim()) + " dv" + std::to_string(cfg.head_v_dim()) + " " +
           to_string(precision) + (form == GlaForm::chunk ? " chunk" : form == GlaForm::recurrent ? " recurrent" : "");
  const std::vector<float> y = time_recurrent_mixer(b, layer, B, T, D, x, opt, c);
  const auto want = reference::gla_forward(cfg, weights, {x.values, batch, tokens, {}});
  record_check(c, y, want.output, "whole output");
  const double BT = double(B) * T, H = cfg.num_heads, dk = cfg.head_k_dim(), dv = cfg.head_v_dim();
  // The projections, then the recurrence (a state update and an output
  // product per token), whichever form ran: GFLOP/s compare as times do.
  c.flop = 2 * BT * weight_elems + 4 * BT * H * dk * dv;
  c.bytes = weight_elems * double(ops::element_bytes(act)) + 2 * BT * D * 4 + 2 * double(S) * 4;
  return c;
}

}  // namespace vkgate::bench
