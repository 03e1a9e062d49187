// The CPU oracle. Every stage works on double values; float inputs and weights
// are widened on read. Loops are written for clarity, not speed, and share no
// code with the GPU path (DESIGN.md §2), so the two cannot share a mistake.
#include "vkgate/reference.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <sstream>
#include <string>

#include "vkgate/error.hpp"

#include "reference/internal.hpp"

namespace vkgate::reference {

namespace {

using Vec = std::vector<double>;

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

Vec widen(std::span<const float> x) { return Vec(x.begin(), x.end()); }

Vec zeros(int64_t n) { return Vec(static_cast<size_t>(n), 0.0); }

}  // namespace

// ---- the ops on double activations (shared with the model's oracle) ----

namespace internal {

[[noreturn]] void bad_argument(const char* op, const std::string& why) {
  throw Error(ErrorCode::invalid_argument, std::string("reference::") + op + ": " + why);
}

// Throws Error(invalid_argument) unless `got` elements are exactly the product of `dims`.
void check_size(const char* op, const char* tensor, size_t got, std::initializer_list<int64_t> dims) {
  int64_t want = 1;
  for (int64_t d : dims) {
    if (d < 0) {
      throw Error(ErrorCode::invalid_argument,
                  std::string("reference::") + op + ": negative dimension for '" + tensor + "'");
    }
    want *= d;
  }
  if (int64_t(got) == want) return;
  std::ostringstream os;
  os << "reference::" << op << ": '" << tensor << "' has " << got << " elements, expected [";
  size_t i = 0;
  for (int64_t d : dims) os << (i++ ? ", " : "") << d;
  os << "] = " << want;
  throw Error(ErrorCode::invalid_argument, os.str());
}

Vec linear_d(std::span<const double> x, std::span<const float> w, std::span<const float> b,
             int64_t m, int64_t n, int64_t k) {
  Vec y = zeros(m * n);
  for (int64_t row = 0; row < m; ++row) {
    for (int64_t out = 0; out < n; ++out) {
      double acc = b.empty() ? 0.0 : double(b[size_t(out)]);
      for (int64_t i = 0; i < k; ++i)
        acc += x[size_t(row * k + i)] * double(w[size_t(out * k + i)]);
      y[size_t(row * n + out)] = acc;
    }
  }
  return y;
}

Vec rms_norm_d(std::span<const double> x, std::span<const float> w, int64_t rows, int64_t dim,
               double eps, NormKind kind) {
  Vec y = zeros(rows * dim);
  for (int64_t r = 0; r < rows; ++r) {
    const double* xr = x.data() + r * dim;
    double sum_sq = 0;
    for (int64_t i = 0; i < dim; ++i) sum_sq += xr[i] * xr[i];
    const double inv_rms = 1.0 / std::sqrt(sum_sq / double(dim) + eps);
    for (int64_t i = 0; i < dim; ++i) {
      const double scale =
          kind == NormKind::zero_centered ? 1.0 + double(w[size_t(i)]) : double(w[size_t(i)]);
      y[size_t(r * dim + i)] = xr[i] * inv_rms * scale;
    }
  }
  return y;
}

std::span<const float> bias_or_empty(const WeightMap& w, bool present, const std::string& name) {
  return present ? w.at(name) : std::span<const float>{};
}

}  // namespace internal

using internal::bad_argument;
using internal::bias_or_empty;
using internal::check_size;
using internal::linear_d;
using internal::rms_norm_d;
using internal::sigmoid;

namespace {

// ---- the ops on double activations (sizes already checked) ----

// Plain RoPE's frequencies: pair i turns by θ^(−2i/r) per position.
RopeFrequencies plain_frequencies(int64_t rotary_dim, double theta) {
  RopeFrequencies f;
  for (int64_t i = 0; i < rotary_dim / 2; ++i)
    f.inv_freq.push_back(std::pow(theta, -2.0 * double(i) / double(rotary_dim)));
  return f;
}

// RoPE on x [batch, tokens, heads, head_dim]; token t (position pos0 + t) turns
// pair i by the angle pos·freqs[t].inv_freq[i], its cos and sin times
// freqs[t].attention_factor; dims past 2·inv_freq.size() pass through.
Vec rope_d(std::span<const double> x, int64_t batch, int64_t tokens, int64_t heads, int64_t head_dim,
           int64_t pos0, RopeStyle style, const std::vector<RopeFrequencies>& freqs) {
  Vec y(x.begin(), x.end());
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t t = 0; t < tokens; ++t) {
      const double pos = double(pos0 + t);
      const RopeFrequencies& f = freqs[size_t(t)];
      const int64_t half = int64_t(f.inv_freq.size());
      for (int64_t i = 0; i < half; ++i) {
        const double angle = pos * f.inv_freq[size_t(i)];
        const double c = f.attention_factor * std::cos(angle), s = f.attention_factor * std::sin(angle);
        const int64_t first = style == RopeStyle::rotate_half ? i : 2 * i;
        const int64_t second = style == RopeStyle::rotate_half ? i + half : 2 * i + 1;
        for (int64_t h = 0; h < heads; ++h) {
          const size_t base = size_t(((b * tokens + t) * heads + h) * head_dim);
          const double x1 = x[base + size_t(first)], x2 = x[base + size_t(second)];
          y[base + size_t(first)] = x1 * c - x2 * s;
          y[base + size_t(second)] = x2 * c + x1 * s;
        }
      }
    }
  }
  return y;
}

Vec softmax_d(std::span<const double> scores, int64_t batch, int64_t heads, int64_t tokens,
              int64_t keys, double scale, bool causal, std::span<const float> mask) {
  Vec p = zeros(batch * heads * tokens * keys);
  Vec row = zeros(keys);
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t h = 0; h < heads; ++h) {
      for (int64_t t = 0; t < tokens; ++t) {
        const size_t base = size_t(((b * heads + h) * tokens + t) * keys);
        const int64_t last_visible = keys - tokens + t;  // the query's absolute position
        double max = kNegInf;
        for (int64_t s = 0; s < keys; ++s) {
          double z = scale * scores[base + size_t(s)];
          if (!mask.empty()) z += double(mask[size_t((b * tokens + t) * keys + s)]);
          if (causal && s > last_visible) z = kNegInf;
          row[size_t(s)] = z;
          if (z > max) max = z;
        }
        // Every key masked: the row attends to nothing (zeros), rather than exp(-inf - -inf) = NaN.
        if (max == kNegInf) continue;
        double sum = 0;
        for (int64_t s = 0; s < keys; ++s) {
          row[size_t(s)] = std::exp(row[size_t(s)] - max);
          sum += row[size_t(s)];
        }
        for (int64_t s = 0; s < keys; ++s) p[base + size_t(s)] = row[size_t(s)] / sum;
      }
    }
  }
  return p;
}

struct AttentionOut {
  Vec out;    // [B, T, H, Dh]
  Vec probs;  // [B, H, T, S]
};

AttentionOut attention_d(std::span<const double> q, std::span<const double> k,
                         std::span<const double> v, int64_t batch, int64_t heads, int64_t kv_heads,
                         int64_t tokens, int64_t keys, int64_t head_dim, double scale, bool causal,
                         std::span<const float> mask, GqaMapping mapping) {
  const int64_t group = heads / kv_heads;
  auto kv_head_of = [&](int64_t h) {
    return mapping == GqaMapping::grouped ? h / group : h % kv_heads;
  };
  Vec scores = zeros(batch * heads * tokens * keys);
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t h = 0; h < heads; ++h) {
      const int64_t kvh = kv_head_of(h);
      for (int64_t t = 0; t < tokens; ++t) {
        const double* qr = q.data() + ((b * heads + h) * tokens + t) * head_dim;
        for (int64_t s = 0; s < keys; ++s) {
          const double* kr = k.data() + ((b * kv_heads + kvh) * keys + s) * head_dim;
          double dot = 0;
          for (int64_t d = 0; d < head_dim; ++d) dot += qr[d] * kr[d];
          scores[size_t(((b * heads + h) * tokens + t) * keys + s)] = dot;
        }
      }
    }
  }
  AttentionOut r;
  r.probs = softmax_d(scores, batch, heads, tokens, keys, scale, causal, mask);
  r.out = zeros(batch * tokens * heads * head_dim);
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t h = 0; h < heads; ++h) {
      const int64_t kvh = kv_head_of(h);
      for (int64_t t = 0; t < tokens; ++t) {
        double* o = r.out.data() + ((b * tokens + t) * heads + h) * head_dim;
        for (int64_t s = 0; s < keys; ++s) {
          const double p = r.probs[size_t(((b * heads + h) * tokens + t) * keys + s)];
          const double* vr = v.data() + ((b * kv_heads + kvh) * keys + s) * head_dim;
          for (int64_t d = 0; d < head_dim; ++d) o[d] += p * vr[d];
        }
      }
    }
  }
  return r;
}

Vec activate_d(std::span<const double> z, GateActivation activation) {
  Vec s(z.begin(), z.end());
  for (double& v : s) {
    switch (activation) {
      case GateActivation::sigmoid: v = sigmoid(v); break;
      case GateActivation::silu: v = v * sigmoid(v); break;
      case GateActivation::ns_sigmoid: v = 0.5 + 0.5 * sigmoid(v); break;
      case GateActivation::identity: break;
    }
  }
  return s;
}

// Scores s [rows, heads, gw] -> every head's scores replaced by the mean over the row's heads.
Vec share_heads(std::span<const double> s, int64_t rows, int64_t heads, int64_t gate_width) {
  Vec out = zeros(rows * heads * gate_width);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t j = 0; j < gate_width; ++j) {
      double sum = 0;
      for (int64_t h = 0; h < heads; ++h) sum += s[size_t((r * heads + h) * gate_width + j)];
      for (int64_t h = 0; h < heads; ++h)
        out[size_t((r * heads + h) * gate_width + j)] = sum / double(heads);
    }
  }
  return out;
}

// y [rows, heads, head_dim] met by the activated scores s [rows, heads, gw].
Vec gate_d(std::span<const double> y, std::span<const double> s, int64_t rows, int64_t heads,
           int64_t head_dim, int64_t gate_width, GateCombine combine) {
  Vec out = zeros(rows * heads * head_dim);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t h = 0; h < heads; ++h) {
      for (int64_t d = 0; d < head_dim; ++d) {
        // Headwise (gw = 1) reuses the head's one score for every channel.
        const int64_t gi = gate_width == 1 ? 0 : d;
        const double score = s[size_t((r * heads + h) * gate_width + gi)];
        const size_t i = size_t((r * heads + h) * head_dim + d);
        out[i] = combine == GateCombine::multiply ? y[i] * score : y[i] + score;
      }
    }
  }
  return out;
}

void check_gqa(const char* op, int64_t heads, int64_t kv_heads) {
  if (heads <= 0 || kv_heads <= 0 || heads % kv_heads != 0)
    bad_argument(op, "heads (" + std::to_string(heads) +
                         ") must be a positive multiple of kv_heads (" + std::to_string(kv_heads) +
                         ")");
}

void check_causal_keys(const char* op, bool causal, int64_t tokens, int64_t keys) {
  // The causal mask places the T queries at the end of the S keys.
  if (causal && keys < tokens)
    bad_argument(op, "causal attention needs keys (" + std::to_string(keys) + ") >= tokens (" +
                         std::to_string(tokens) + ")");
}

}  // namespace

// ---- single ops ----

std::vector<double> linear(std::span<const float> x, std::span<const float> w,
                           std::span<const float> b, int64_t m, int64_t n, int64_t k) {
  check_size("linear", "x", x.size(), {m, k});
  check_size("linear", "w", w.size(), {n, k});
  if (!b.empty()) check_size("linear", "b", b.size(), {n});
  return linear_d(widen(x), w, b, m, n, k);
}

std::vector<double> rms_norm(std::span<const float> x, std::span<const float> w, int64_t rows,
                             int64_t dim, double eps, NormKind kind) {
  check_size("rms_norm", "x", x.size(), {rows, dim});
  check_size("rms_norm", "w", w.size(), {dim});
  return rms_norm_d(widen(x), w, rows, dim, eps, kind);
}

std::vector<double> rope(std::span<const float> x, int64_t batch, int64_t tokens, int64_t heads,
                         int64_t head_dim, int64_t rotary_dim, double theta, int64_t pos0,
                         RopeStyle style) {
  check_size("rope", "x", x.size(), {batch, tokens, heads, head_dim});
  if (rotary_dim < 0 || rotary_dim > head_dim || rotary_dim % 2 != 0)
    bad_argument("rope", "rotary_dim " + std::to_string(rotary_dim) +
                             " must be even and in [0, head_dim " + std::to_string(head_dim) + "]");
  const std::vector<RopeFrequencies> freqs(size_t(std::max<int64_t>(tokens, 0)), plain_frequencies(rotary_dim, theta));
  return rope_d(widen(x), batch, tokens, heads, head_dim, pos0, style, freqs);
}

std::vector<double> softmax(std::span<const float> scores, int64_t batch, int64_t heads,
                            int64_t tokens, int64_t keys, double scale, bool causal,
                            std::span<const float> mask) {
  check_size("softmax", "scores", scores.size(), {batch, heads, tokens, keys});
  if (!mask.empty()) check_size("softmax", "mask", mask.size(), {batch, 1, tokens, keys});
  check_causal_keys("softmax", causal, tokens, keys);
  return softmax_d(widen(scores), batch, heads, tokens, keys, scale, causal, mask);
}

std::vector<double> attention(std::span<const float> q, std::span<const float> k,
                              std::span<const float> v, int64_t batch, int64_t heads,
                              int64_t kv_heads, int64_t tokens, int64_t keys, int64_t head_dim,
                              double scale, bool causal, std::span<const float> mask,
                              GqaMapping mapping) {
  check_gqa("attention", heads, kv_heads);
  check_size("attention", "q", q.size(), {batch, heads, tokens, head_dim});
  check_size("attention", "k", k.size(), {batch, kv_heads, keys, head_dim});
  check_size("attention", "v", v.size(), {batch, kv_heads, keys, head_dim});
  if (!mask.empty()) check_size("attention", "mask", mask.size(), {batch, 1, tokens, keys});
  check_causal_keys("attention", causal, tokens, keys);
  return attention_d(widen(q), widen(k), widen(v), batch, heads, kv_heads, tokens, keys, head_dim,
                     scale, causal, mask, mapping)
      .out;
}

std::vector<double> gate(std::span<const float> y, std::span<const float> g, int64_t rows,
                         int64_t heads, int64_t head_dim, int64_t gate_width,
                         GateActivation activation, GateCombine combine) {
  if (gate_width != 1 && gate_width != head_dim)
    bad_argument("gate", "gate_width " + std::to_string(gate_width) + " must be 1 or head_dim (" +
                             std::to_string(head_dim) + ")");
  check_size("gate", "y", y.size(), {rows, heads, head_dim});
  check_size("gate", "g", g.size(), {rows, heads, gate_width});
  return gate_d(widen(y), activate_d(widen(g), activation), rows, heads, head_dim, gate_width,
                combine);
}

// ---- the whole block ----

namespace {

// Queries [B·T, H, Dh] and raw gate rows [B·T, H, gw] split out of the q_proj
// output [B·T, q_proj_rows] according to the checkpoint's row layout.
struct QueryAndGate {
  Vec q;
  Vec gate;
};

QueryAndGate split_q_proj(const BlockConfig& cfg, const Vec& qp, int64_t rows) {
  const int64_t H = cfg.num_heads, Dh = cfg.head_dim, gw = cfg.gate_width();
  const int64_t G = cfg.group_size(), width = cfg.q_proj_rows();
  QueryAndGate r;
  const bool gates_in_q_proj = cfg.gate_layout != GateLayout::separate;
  r.q.resize(size_t(rows * H * Dh));
  if (gates_in_q_proj) r.gate.resize(size_t(rows * H * gw));
  for (int64_t row = 0; row < rows; ++row) {
    const double* src = qp.data() + row * width;
    for (int64_t h = 0; h < H; ++h) {
      int64_t q_at = 0, g_at = 0;  // column of head h's query and gate within the row
      switch (cfg.gate_layout) {
        case GateLayout::qwen3_next:  // [q_h | g_h] per head
          q_at = h * (Dh + gw);
          g_at = q_at + Dh;
          break;
        case GateLayout::official_grouped: {  // [q of G heads | gates of G heads] per KV group
          const int64_t group = h / G, member = h % G;
          const int64_t group_at = group * G * (Dh + gw);
          q_at = group_at + member * Dh;
          g_at = group_at + G * Dh + member * gw;
          break;
        }
        case GateLayout::separate:  // gates come from gate_proj instead
          q_at = h * Dh;
          break;
      }
      for (int64_t d = 0; d < Dh; ++d) r.q[size_t((row * H + h) * Dh + d)] = src[q_at + d];
      if (gates_in_q_proj)
        for (int64_t j = 0; j < gw; ++j) r.gate[size_t((row * H + h) * gw + j)] = src[g_at + j];
    }
  }
  return r;
}

// x [B, T, N, Dh] -> [B, N, T, Dh]
Vec heads_first(const Vec& x, int64_t B, int64_t T, int64_t N, int64_t Dh) {
  Vec y(x.size());
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t)
      for (int64_t n = 0; n < N; ++n)
        for (int64_t d = 0; d < Dh; ++d)
          y[size_t(((b * N + n) * T + t) * Dh + d)] = x[size_t(((b * T + t) * N + n) * Dh + d)];
  return y;
}

// The cache [B, KV, P, Dh] followed by the new tokens [B, KV, T, Dh] along the sequence axis.
Vec append_to_cache(std::span<const float> past, const Vec& fresh, int64_t B, int64_t KV, int64_t P,
                    int64_t T, int64_t Dh) {
  const int64_t S = P + T;
  Vec all = zeros(B * KV * S * Dh);
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t n = 0; n < KV; ++n) {
      for (int64_t s = 0; s < S; ++s) {
        for (int64_t d = 0; d < Dh; ++d) {
          all[size_t(((b * KV + n) * S + s) * Dh + d)] =
              s < P ? double(past[size_t(((b * KV + n) * P + s) * Dh + d)])
                    : fresh[size_t(((b * KV + n) * T + (s - P)) * Dh + d)];
        }
      }
    }
  }
  return all;
}

// `hidden_size`: the element count of the hidden states (in.hidden, or forward_d's double copy).
void check_inputs(const BlockConfig& cfg, const Inputs& in, size_t hidden_size) {
  if (in.batch <= 0 || in.tokens <= 0 || in.past < 0)
    bad_argument("forward", "batch (" + std::to_string(in.batch) + ") and tokens (" +
                                std::to_string(in.tokens) + ") must be positive, past (" +
                                std::to_string(in.past) + ") non-negative");
  const int64_t B = in.batch, T = in.tokens, P = in.past, KV = cfg.num_kv_heads, Dh = cfg.head_dim;
  check_size("forward", "hidden", hidden_size, {B, T, cfg.hidden_size});
  check_size("forward", "past_key", in.past_key.size(), {B, KV, P, Dh});
  check_size("forward", "past_value", in.past_value.size(), {B, KV, P, Dh});
  if (!in.attention_mask.empty())
    check_size("forward", "attention_mask", in.attention_mask.size(), {B, 1, T, P + T});
}

}  // namespace

Result forward(const BlockConfig& cfg, const WeightMap& weights, const Inputs& in) {
  return internal::forward_d(cfg, weights, widen(in.hidden), in);
}

Result internal::forward_d(const BlockConfig& cfg, const WeightMap& weights, std::span<const double> x,
                           const Inputs& in, std::span<const int64_t> rope_lengths) {
  cfg.validate();
  check_weights(cfg, weights);
  check_inputs(cfg, in, x.size());
  if (!rope_lengths.empty()) check_size("forward", "rope_lengths", rope_lengths.size(), {in.tokens});

  const int64_t B = in.batch, T = in.tokens, P = in.past, S = P + T;
  const int64_t D = cfg.hidden_size, H = cfg.num_heads, KV = cfg.num_kv_heads, Dh = cfg.head_dim;
  const int64_t gw = cfg.gate_width(), rows = B * T;
  const bool has_gate = cfg.gate_kind != GateKind::none;

  const Vec xn =
      rms_norm_d(x, weights.at("input_layernorm.weight"), rows, D, cfg.rms_norm_eps, cfg.norm_kind);

  const Vec qp =
      linear_d(xn, weights.at("q_proj.weight"), bias_or_empty(weights, cfg.qkv_bias, "q_proj.bias"),
               rows, cfg.q_proj_rows(), D);
  QueryAndGate qg = split_q_proj(cfg, qp, rows);
  Vec q = std::move(qg.q);
  Vec k = linear_d(xn, weights.at("k_proj.weight"),
                   bias_or_empty(weights, cfg.qkv_bias, "k_proj.bias"), rows, KV * Dh, D);
  Vec v = linear_d(xn, weights.at("v_proj.weight"),
                   bias_or_empty(weights, cfg.qkv_bias, "v_proj.bias"), rows, KV * Dh, D);

  // s = act(z) [rows, gate_heads, gw], kept for Result::gate; `applied` is what meets the tensor.
  Vec scores, applied;
  if (has_gate) {
    const Vec z = cfg.gate_layout == GateLayout::separate
                      ? linear_d(xn, weights.at("gate_proj.weight"),
                                 bias_or_empty(weights, cfg.qkv_bias, "gate_proj.bias"), rows,
                                 cfg.gate_rows(), D)
                      : std::move(qg.gate);
    scores = activate_d(z, cfg.gate_activation);
    applied = cfg.gate_shared_heads ? share_heads(scores, rows, cfg.gate_heads(), gw) : scores;
  }
  // One call per place a gate can sit keeps the order of the stages visible below.
  auto gate_at = [&](GatePosition position, Vec& y, int64_t heads, int64_t width) {
    if (has_gate && cfg.gate_position == position)
      y = gate_d(y, applied, rows, heads, width, gw, cfg.gate_combine);
  };
  // The query, key and value gates act on the raw projections: before the norms and RoPE.
  gate_at(GatePosition::query, q, H, Dh);
  gate_at(GatePosition::key, k, KV, Dh);
  gate_at(GatePosition::value, v, KV, Dh);

  if (cfg.use_qk_norm) {
    q = rms_norm_d(q, weights.at("q_norm.weight"), rows * H, Dh, cfg.rms_norm_eps, cfg.norm_kind);
    k = rms_norm_d(k, weights.at("k_norm.weight"), rows * KV, Dh, cfg.rms_norm_eps, cfg.norm_kind);
  }
  // Each token's frequencies for the length its step ended at: P + T, or as rope_lengths says.
  std::vector<RopeFrequencies> freqs;
  for (int64_t t = 0; t < T; ++t) {
    const int64_t length = rope_lengths.empty() ? S : rope_lengths[size_t(t)];
    if (t > 0 && length == (rope_lengths.empty() ? S : rope_lengths[size_t(t - 1)]))
      freqs.push_back(freqs.back());
    else
      freqs.push_back(rope_frequencies(cfg, length));
  }
  q = rope_d(q, B, T, H, Dh, P, cfg.rope_style, freqs);
  k = rope_d(k, B, T, KV, Dh, P, cfg.rope_style, freqs);

  Result r;
  r.q = heads_first(q, B, T, H, Dh);
  r.k = append_to_cache(in.past_key, heads_first(k, B, T, KV, Dh), B, KV, P, T, Dh);
  r.v = append_to_cache(in.past_value, heads_first(v, B, T, KV, Dh), B, KV, P, T, Dh);

  AttentionOut att = attention_d(r.q, r.k, r.v, B, H, KV, T, S, Dh, 1.0 / std::sqrt(double(Dh)),
                                 cfg.causal, in.attention_mask, cfg.gqa_mapping);
  r.sdpa = std::move(att.out);
  r.gated = r.sdpa;  // [B, T, H, Dh] is already [B, T, H·Dh]
  gate_at(GatePosition::sdpa, r.gated, H, Dh);

  r.output = linear_d(r.gated, weights.at("o_proj.weight"),
                      bias_or_empty(weights, cfg.o_bias, "o_proj.bias"), rows, D, H * Dh);
  gate_at(GatePosition::dense, r.output, 1, D);
  if (cfg.residual)
    for (size_t i = 0; i < r.output.size(); ++i) r.output[i] += x[i];
  r.gate = std::move(scores);

  r.first_token_attn = zeros(H);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t t = 0; t < T; ++t)
        r.first_token_attn[size_t(h)] +=
            att.probs[size_t(((b * H + h) * T + t) * S)] / double(B * T);
  return r;
}

// ---- accuracy metric ----

Diff compare(std::span<const float> got, std::span<const double> want) {
  if (got.size() != want.size())
    bad_argument("compare", "got " + std::to_string(got.size()) + " elements, want " +
                                std::to_string(want.size()));
  Diff d;
  double err = 0, ref = 0;
  bool finite = true;
  for (size_t i = 0; i < got.size(); ++i) {
    const double a = want[i], b = double(got[i]);
    if (!std::isfinite(b) && d.first_bad < 0) d.first_bad = int64_t(i);
    // A non-finite reference cannot vouch for anything either.
    if (!std::isfinite(a) || !std::isfinite(b)) {
      finite = false;
      continue;
    }
    err += (a - b) * (a - b);
    ref += a * a;
    d.max_abs = std::max(d.max_abs, std::abs(a - b));
  }
  if (!finite) {
    d.nmse = d.max_abs = std::numeric_limits<double>::infinity();
    return d;
  }
  // An all-zero reference has no scale to normalise by; report the raw squared error.
  d.nmse = ref == 0 ? err : err / ref;
  return d;
}

}  // namespace vkgate::reference
