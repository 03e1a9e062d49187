// The CPU oracle's RoPE frequencies for every rope_scaling type, from
// transformers' formulas (its ROPE_INIT_FUNCTIONS and dynamic_rope_update),
// written apart from the GPU tables' (ops/rope.cpp), in double.
#include <algorithm>
#include <cmath>
#include <string>

#include "reference/internal.hpp"
#include "vkgate/reference.hpp"

namespace vkgate::reference {

RopeFrequencies rope_frequencies(const BlockConfig& cfg, int64_t seq_len) {
  cfg.validate();
  if (seq_len < 1) internal::bad_argument("rope_frequencies", "seq_len (" + std::to_string(seq_len) + ") must be positive");
  const RopeScaling& s = cfg.rope_scaling;
  const double r = cfg.rotary_dim(), factor = s.factor;
  // Dynamic NTK stretches the base once the sequence outgrows the model's
  // length m: θ' = θ·(1 + factor·(n − m)/m)^(r/(r−2)), n = seq_len.
  double log_base = std::log(cfg.rope_theta);
  if (s.type == RopeType::dynamic && seq_len > cfg.max_position_embeddings) {
    const double m = cfg.max_position_embeddings;
    log_base += r / (r - 2) * std::log1p(factor * (double(seq_len) - m) / m);
  }
  RopeFrequencies f;
  for (int64_t i = 0; 2 * i < int64_t(r); ++i) f.inv_freq.push_back(std::exp(-log_base * double(2 * i) / r));
  if (s.type == RopeType::none || s.type == RopeType::dynamic) return f;
  if (s.type == RopeType::linear) {  // positions squeezed by the factor
    for (double& w : f.inv_freq) w = w / factor;
    return f;
  }
  // llama3 and yarn judge each pair by the turns it makes over the pre-training
  // length L: n_i = L·ω_i / 2π.
  const double L = cfg.rope_original_max_positions(), two_pi = 2 * std::acos(-1.0);
  if (s.type == RopeType::llama3) {
    // n_i below low_freq_factor: interpolated (ω/factor); above high_freq_factor:
    // kept; between: the mix with weight t = (n_i − low)/(high − low) on ω.
    for (double& w : f.inv_freq) {
      const double turns = L * w / two_pi;
      if (turns < s.low_freq_factor) {
        w /= factor;
      } else if (turns <= s.high_freq_factor) {
        const double t = (turns - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
        w = w * t + (w / factor) * (1 - t);
      }
    }
    return f;
  }
  // yarn: the pair index at which a pair makes `turns` turns over L solves
  // L·θ^(−2i/r) = 2π·turns. Pairs below the beta_fast index keep ω, pairs above
  // the beta_slow index get ω/factor, a linear ramp in the index between.
  auto pair_index = [&](double turns) { return r / 2 * std::log(L / (two_pi * turns)) / std::log(cfg.rope_theta); };
  double first = pair_index(s.beta_fast), last = pair_index(s.beta_slow);
  if (s.truncate) {
    first = std::floor(first);
    last = std::ceil(last);
  }
  first = first < 0 ? 0 : first;
  last = last > r - 1 ? r - 1 : last;
  const double span = last == first ? 0.001 : last - first;
  for (size_t i = 0; i < f.inv_freq.size(); ++i) {
    const double interpolated = std::min(1.0, std::max(0.0, (double(i) - first) / span));
    f.inv_freq[i] *= (1 - interpolated) + interpolated / factor;
  }
  // The magnitude cos and sin are scaled by: given, or 1 + 0.1·m·ln(factor)
  // (m = 1, or the ratio of those terms for mscale and mscale_all_dim).
  auto magnitude = [&](double m) { return factor > 1 ? 1 + 0.1 * m * std::log(factor) : 1.0; };
  if (s.attention_factor > 0)
    f.attention_factor = s.attention_factor;
  else if (s.mscale > 0 && s.mscale_all_dim > 0)
    f.attention_factor = magnitude(s.mscale) / magnitude(s.mscale_all_dim);
  else
    f.attention_factor = magnitude(1);
  return f;
}

}  // namespace vkgate::reference
