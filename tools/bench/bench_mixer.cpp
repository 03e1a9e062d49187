#include "bench/bench_mixer.hpp"

#include <algorithm>
#include <map>
#include <memory>

namespace vkgate::bench::detail {

std::vector<float> time_recurrent_mixer(Bench& b, const nn::Mixer& layer, uint32_t B, uint32_t T, uint32_t D,
                                        const HostData& x, const Options& opt, Case& c) {
  const uint32_t seg = std::clamp<uint32_t>(layer.max_step_tokens(B), 1, T);
  struct Segment {
    uint32_t first, tokens;
    const Buffer *x, *y;
  };
  std::vector<Segment> segments;
  for (uint32_t at = 0; at < T; at += seg) {
    const uint32_t n = std::min(seg, T - at);
    const size_t e = x.stored.size() / x.values.size();  // bytes per element
    HostData part;
    for (uint32_t r = 0; r < B; ++r) {
      const size_t from = (size_t(r) * T + at) * D, to = from + size_t(n) * D;
      part.values.insert(part.values.end(), x.values.begin() + long(from), x.values.begin() + long(to));
      part.stored.insert(part.stored.end(), x.stored.begin() + long(from * e), x.stored.begin() + long(to * e));
    }
    segments.push_back({at, n, &b.upload(part, "hidden_states"), &b.device(size_t(B) * n * D * 4, "output")});
  }
  const std::unique_ptr<nn::MixerCache> state = layer.make_cache(B, T, "");
  nn::Workspace ws;
  std::map<uint32_t, std::unique_ptr<nn::MixerPlan>> plans;  // by segment length (a full one, the last)
  for (const Segment& s : segments)
    if (!plans.count(s.tokens)) plans[s.tokens] = layer.plan({B, s.tokens, s.tokens, true, false, false}, ws);
  ws.allocate(b.vk);
  if (segments.size() > 1) c.name += " (" + std::to_string(segments.size()) + " segments)";
  b.time(c, opt, [&](gpu::Recorder& rec) {
    state->record_clear(rec);
    for (const Segment& s : segments)
      layer.record(rec, *plans.at(s.tokens), ws, {*s.x, *s.y, false, state.get(), s.first, {}, nullptr}, false);
  });
  std::vector<float> y(size_t(B) * T * D);
  for (const Segment& s : segments) {
    const auto part = b.download(*s.y, size_t(B) * s.tokens * D);
    for (uint32_t r = 0; r < B; ++r)
      std::copy_n(part.begin() + long(size_t(r) * s.tokens * D), size_t(s.tokens) * D,
                  y.begin() + long((size_t(r) * T + s.first) * D));
  }
  return y;
}

std::vector<float> first_tokens(const std::vector<float>& v, uint32_t B, uint32_t T, uint32_t D, uint32_t tokens) {
  std::vector<float> out;
  for (uint32_t r = 0; r < B; ++r)
    out.insert(out.end(), v.begin() + long(size_t(r) * T * D), v.begin() + long((size_t(r) * T + tokens) * D));
  return out;
}

}  // namespace vkgate::bench::detail
