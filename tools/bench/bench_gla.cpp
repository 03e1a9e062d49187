// The GLA layer's benchmark (vkgate bench --op gla): either form of the
// recurrence, or the automatic choice, with the projections around it.
#include <algorithm>
#include <cmath>
#include <map>
#include <random>

#include "bench/bench_internal.hpp"
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
  const Storage act = precision == Precision::fp16 ? Storage::f16 : precision == Precision::bf16 ? Storage::bf16 : Storage::f32;
  const nn::Gla layer(b.vk, tuning, cfg, as_tensors(weights), act);
  const uint32_t B = uint32_t(batch), T = uint32_t(tokens), D = uint32_t(cfg.hidden_size);
  const size_t S = size_t(B) * cfg.num_heads * cfg.head_k_dim() * cfg.head_v_dim();
  const HostData x = random_data(size_t(B) * T * D, Storage::f32, b.rng);
  // Segments of the tokens that the device's buffers hold, as GlaLayer runs
  // them, here recorded into one command buffer with the state carried on the device.
  const uint32_t seg = uint32_t(std::clamp<uint64_t>(b.vk.info.max_storage_buffer_range / (B * layer.largest_token_bytes()), 1, T));
  struct Segment {
    uint32_t first, tokens;
    const Buffer *x, *y;
  };
  std::vector<Segment> segments;
  for (uint32_t at = 0; at < T; at += seg) {
    const uint32_t n = std::min(seg, T - at);
    HostData part;
    for (uint32_t r = 0; r < B; ++r)
      part.values.insert(part.values.end(), x.values.begin() + (size_t(r) * T + at) * D,
                         x.values.begin() + (size_t(r) * T + at + n) * D);
    const auto* bytes = reinterpret_cast<const std::byte*>(part.values.data());
    part.stored.assign(bytes, bytes + part.values.size() * 4);
    segments.push_back({at, n, &b.upload(part, "hidden_states"), &b.device(size_t(B) * n * D * 4, "output")});
  }
  const Buffer& zeros = b.upload(HostData{std::vector<float>(S), std::vector<std::byte>(S * 4)}, "zero state");
  nn::GlaState state;
  state.state = b.vk.allocator->allocate(S * 4, gpu::MemoryKind::device, "state");
  nn::Workspace ws;
  std::map<uint32_t, std::unique_ptr<nn::MixerPlan>> plans;  // by segment length (a full one, the last)
  for (const Segment& s : segments)
    if (!plans.count(s.tokens)) plans[s.tokens] = layer.plan({B, s.tokens, s.tokens, true, false, false}, ws);
  ws.allocate(b.vk);
  Case c;
  c.name = "gla B" + std::to_string(batch) + " T" + std::to_string(tokens) + " H" + std::to_string(cfg.num_heads) +
           " dk" + std::to_string(cfg.head_k_dim()) + " dv" + std::to_string(cfg.head_v_dim()) + " " +
           to_string(precision) + (form == GlaForm::chunk ? " chunk" : form == GlaForm::recurrent ? " recurrent" : "") +
           (segments.size() > 1 ? " (" + std::to_string(segments.size()) + " segments)" : "");
  b.time(c, opt, [&](gpu::Recorder& rec) {
    rec.copy(zeros, state.state, S * 4);  // every run from the zero state
    for (const Segment& s : segments)
      layer.record(rec, *plans.at(s.tokens), ws, {*s.x, *s.y, false, &state, 0, {}, nullptr}, false);
  });
  std::vector<float> y(size_t(B) * T * D);
  for (const Segment& s : segments) {
    const auto part = b.download(*s.y, size_t(B) * s.tokens * D);
    for (uint32_t r = 0; r < B; ++r)
      std::copy_n(part.begin() + long(size_t(r) * s.tokens * D), size_t(s.tokens) * D,
                  y.begin() + long((size_t(r) * T + s.first) * D));
  }
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
