#include <algorithm>
#include <cmath>
#include <numbers>

#include "gpu/context_impl.hpp"
#include "gpu/pipeline.hpp"
#include "ops/ops.hpp"

namespace vkgate::ops {

namespace {
struct RopePush {
  View in, out;
  uint32_t tokens, heads, dim, rotary, count, interleaved;
};
constexpr uint32_t kRopeWorkgroup = 64;
}  // namespace

RopeFrequencies rope_frequencies(const BlockConfig& c, int64_t seq_len) {
  const int r = c.rotary_dim();
  const RopeScaling& s = c.rope_scaling;
  RopeFrequencies f;
  double theta = c.rope_theta;
  // transformers' _compute_dynamic_ntk_parameters: θ·(factor·n/max − (factor − 1))^(r/(r−2)),
  // n = the sequence length, only once it is past max_position_embeddings.
  if (s.type == RopeType::dynamic && seq_len > c.max_position_embeddings) {
    const double grow = s.factor * double(seq_len) / double(c.max_position_embeddings) - (s.factor - 1);
    theta *= std::pow(grow, double(r) / double(r - 2));
  }
  f.inv_freq.resize(size_t(r / 2));
  for (int i = 0; i < r / 2; ++i) f.inv_freq[size_t(i)] = 1.0 / std::pow(theta, double(2 * i) / double(r));

  const double factor = s.factor, original = double(c.rope_original_max_positions());
  switch (s.type) {
    case RopeType::none:
    case RopeType::dynamic: break;
    case RopeType::linear:
      for (double& x : f.inv_freq) x /= factor;
      break;
    case RopeType::llama3: {  // _compute_llama3_parameters
      const double low_wavelen = original / s.low_freq_factor, high_wavelen = original / s.high_freq_factor;
      for (double& x : f.inv_freq) {
        const double wavelen = 2 * std::numbers::pi / x;
        if (wavelen > low_wavelen) {
          x /= factor;
        } else if (!(wavelen < high_wavelen)) {
          const double smooth = (original / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
          x = (1 - smooth) * x / factor + smooth * x;
        }
      }
      break;
    }
    case RopeType::yarn: {  // _compute_yarn_parameters
      auto correction_dim = [&](double rotations) {
        return double(r) * std::log(original / (rotations * 2 * std::numbers::pi)) / (2 * std::log(c.rope_theta));
      };
      double low = correction_dim(s.beta_fast), high = correction_dim(s.beta_slow);
      if (s.truncate) low = std::floor(low), high = std::ceil(high);
      low = std::max(low, 0.0);
      high = std::min(high, double(r - 1));
      if (low == high) high += 0.001;
      for (int i = 0; i < r / 2; ++i) {
        const double ramp = std::clamp((double(i) - low) / (high - low), 0.0, 1.0);
        double& x = f.inv_freq[size_t(i)];
        x = x / factor * ramp + x * (1 - ramp);
      }
      auto mscale = [&](double m) { return factor <= 1 ? 1.0 : 0.1 * m * std::log(factor) + 1.0; };
      f.attention_factor = s.attention_factor > 0                     ? s.attention_factor
                           : s.mscale > 0 && s.mscale_all_dim > 0 ? mscale(s.mscale) / mscale(s.mscale_all_dim)
                                                                  : mscale(1);
      break;
    }
  }
  return f;
}

size_t rope_table_floats(uint32_t tokens, uint32_t rotary) { return size_t(tokens) * (rotary / 2) * 2 + 1; }

std::vector<float> rope_table(const RopeFrequencies& f, uint32_t tokens, uint32_t first) {
  const size_t half = f.inv_freq.size();
  std::vector<float> t(rope_table_floats(tokens, uint32_t(2 * half)));  // +1: never an empty buffer
  for (uint32_t p = 0; p < tokens; ++p)
    for (size_t i = 0; i < half; ++i) {
      const double angle = double(first + p) * f.inv_freq[i];
      t[p * half + i] = float(std::cos(angle) * f.attention_factor);
      t[size_t(tokens) * half + p * half + i] = float(std::sin(angle) * f.attention_factor);
    }
  return t;
}

std::vector<float> rope_table(const BlockConfig& c, uint32_t tokens, uint32_t first) {
  return rope_table(rope_frequencies(c, int64_t(first) + tokens), tokens, first);
}

void rope(Context::Impl& ctx, Recorder& rec, const RopeArgs& a) {
  const auto& [x, in, table, y, out, rows, tokens, heads, dim, rotary, s, style] = a;
  const gpu::Pipeline& p = ctx.pipelines->get(variant("rope", s), {kRopeWorkgroup});
  const uint64_t count = uint64_t(rows) * heads * (dim - rotary / 2);
  RopePush push{in, out, tokens, heads, dim, rotary, uint32_t(count), style == RopeStyle::interleaved ? 1u : 0u};
  const gpu::Grid g = gpu::grid_for((count + kRopeWorkgroup - 1) / kRopeWorkgroup);
  const bool in_place = &x == &y;
  rec.dispatch(p, {{&x, gpu::Access::read}, {&table, gpu::Access::read}, {&y, in_place ? gpu::Access::read_write : gpu::Access::write}},
               push, g.x, g.y, 1, rotary ? "rope" : "relayout");
}

}  // namespace vkgate::ops
