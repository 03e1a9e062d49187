// The CPU oracle of a Gated DeltaNet layer: each stage of gdn_config.hpp in
// double, the delta rule one token at a time. The GPU fuses stages and
// computes the recurrence in chunks; this stays the plain form, in its own
// loop order, so that a mistake there cannot be shared.
#include "vkgate/reference_gdn.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>

#include "reference/internal.hpp"
#include "vkgate/error.hpp"

namespace vkgate::reference {

using internal::sigmoid;

namespace {

using Vec = std::vector<double>;

double silu(double x) { return x * sigmoid(x); }
// torch.nn.functional.softplus (beta 1, threshold 20: the input itself above it).
double softplus(double x) { return x > 20 ? x : std::log1p(std::exp(x)); }

// y[m, n] = Σ_k x[m, k]·w[n, k]
Vec linear(std::span<const double> x, std::span<const float> w, int64_t m, int64_t n, int64_t k) {
  Vec y(size_t(m * n), 0.0);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t o = 0; o < n; ++o) {
      double acc = 0;
      for (int64_t j = 0; j < k; ++j) acc += x[size_t(i * k + j)] * double(w[size_t(o * k + j)]);
      y[size_t(i * n + o)] = acc;
    }
  return y;
}

}  // namespace

GdnResult gdn_forward(const GdnConfig& cfg, const WeightMap& weights, const GdnInputs& in) {
  return internal::gdn_forward_d(cfg, weights, Vec(in.hidden.begin(), in.hidden.end()), in);
}

GdnResult internal::gdn_forward_d(const GdnConfig& cfg, const WeightMap& weights, std::span<const double> x,
                                  const GdnInputs& in) {
  cfg.validate();
  check_gdn_weights(cfg, as_tensors(weights));
  if (in.batch <= 0 || in.tokens <= 0)
    internal::bad_argument("gdn_forward", "batch (" + std::to_string(in.batch) + ") and tokens (" +
                                              std::to_string(in.tokens) + ") must be positive");
  const int64_t B = in.batch, T = in.tokens, D = cfg.hidden_size;
  const int64_t nk = cfg.num_key_heads, nv = cfg.num_value_heads, r = cfg.group_size();
  const int64_t dk = cfg.key_head_dim, dv = cfg.value_head_dim, K = cfg.conv_kernel;
  const int64_t C = cfg.conv_channels(), P = cfg.qkvz_group(), keys = nk * dk;
  internal::check_size("gdn_forward", "hidden", x.size(), {B, T, D});
  if (!in.conv_state.empty()) internal::check_size("gdn_forward", "conv_state", in.conv_state.size(), {B, C, K - 1});
  if (!in.initial_state.empty())
    internal::check_size("gdn_forward", "initial_state", in.initial_state.size(), {B, nv, dk, dv});

  const int64_t rows = B * T;
  Vec mixed, z, b, a;
  if (cfg.separate_projections) {
    // Qwen3.5: the projections give mixed, z, b and a as they are.
    mixed = linear(x, weights.at("in_proj_qkv.weight"), rows, C, D);
    z = linear(x, weights.at("in_proj_z.weight"), rows, nv * dv, D);
    b = linear(x, weights.at("in_proj_b.weight"), rows, nv, D);
    a = linear(x, weights.at("in_proj_a.weight"), rows, nv, D);
  } else {
    const Vec qkvz = linear(x, weights.at("in_proj_qkvz.weight"), rows, cfg.qkvz_rows(), D);
    const Vec ba = linear(x, weights.at("in_proj_ba.weight"), rows, 2 * nv, D);
    // Un-group the projections: key head j's block of qkvz is
    // [q_j | k_j | v of its r value heads | z of them], of ba [b (r) | a (r)].
    mixed.resize(size_t(rows * C));
    z.resize(size_t(rows * nv * dv));
    b.resize(size_t(rows * nv));
    a.resize(size_t(rows * nv));
    for (int64_t row = 0; row < rows; ++row) {
      const double* p = qkvz.data() + row * cfg.qkvz_rows();
      double* m = mixed.data() + row * C;
      for (int64_t j = 0; j < nk; ++j) {
        const double* blk = p + j * P;
        for (int64_t i = 0; i < dk; ++i) {
          m[j * dk + i] = blk[i];
          m[keys + j * dk + i] = blk[dk + i];
        }
        for (int64_t e = 0; e < r * dv; ++e) {
          m[2 * keys + j * r * dv + e] = blk[2 * dk + e];
          z[size_t(row * nv * dv + j * r * dv + e)] = blk[2 * dk + r * dv + e];
        }
        for (int64_t e = 0; e < r; ++e) {
          b[size_t(row * nv + j * r + e)] = ba[size_t(row * 2 * nv + j * 2 * r + e)];
          a[size_t(row * nv + j * r + e)] = ba[size_t(row * 2 * nv + j * 2 * r + r + e)];
        }
      }
    }
  }

  // The causal depthwise conv over [conv_state | mixed] per channel, then SiLU;
  // the new conv state is the last K−1 inputs of that sequence.
  std::span<const float> cw = weights.at("conv1d.weight");  // [C, 1, K]
  Vec conv(size_t(rows * C));
  GdnResult res;
  res.final_conv_state.assign(size_t(B * C * (K - 1)), 0.0);
  for (int64_t bi = 0; bi < B; ++bi)
    for (int64_t c = 0; c < C; ++c) {
      // The channel's inputs: K−1 from the state (zeros without one), then the T new ones.
      Vec seq(size_t(K - 1 + T), 0.0);
      if (!in.conv_state.empty())
        for (int64_t s = 0; s < K - 1; ++s) seq[size_t(s)] = in.conv_state[size_t((bi * C + c) * (K - 1) + s)];
      for (int64_t t = 0; t < T; ++t) seq[size_t(K - 1 + t)] = mixed[size_t((bi * T + t) * C + c)];
      for (int64_t t = 0; t < T; ++t) {
        double acc = 0;
        for (int64_t tap = 0; tap < K; ++tap) acc += double(cw[size_t(c * K + tap)]) * seq[size_t(t + tap)];
        conv[size_t((bi * T + t) * C + c)] = silu(acc);
      }
      for (int64_t s = 0; s < K - 1; ++s)
        res.final_conv_state[size_t((bi * C + c) * (K - 1) + s)] = seq[size_t(T + s)];
    }

  // Per value head h (key head h / r): q, k l2-normalised (q ·dk^-0.5), v, β, g.
  std::span<const float> A_log = weights.at("A_log"), dt_bias = weights.at("dt_bias");
  const double q_scale = 1.0 / std::sqrt(double(dk));
  Vec q(size_t(rows * nv * dk)), k(size_t(rows * nv * dk)), v(size_t(rows * nv * dv));
  Vec beta(size_t(rows * nv)), g(size_t(rows * nv));
  for (int64_t row = 0; row < rows; ++row) {
    const double* m = conv.data() + row * C;
    for (int64_t h = 0; h < nv; ++h) {
      const int64_t j = h / r;
      double qq = 0, kk = 0;
      for (int64_t i = 0; i < dk; ++i) {
        qq += m[j * dk + i] * m[j * dk + i];
        kk += m[keys + j * dk + i] * m[keys + j * dk + i];
      }
      const double qn = q_scale / std::sqrt(qq + 1e-6), kn = 1.0 / std::sqrt(kk + 1e-6);
      for (int64_t i = 0; i < dk; ++i) {
        q[size_t((row * nv + h) * dk + i)] = m[j * dk + i] * qn;
        k[size_t((row * nv + h) * dk + i)] = m[keys + j * dk + i] * kn;
      }
      for (int64_t e = 0; e < dv; ++e) v[size_t((row * nv + h) * dv + e)] = m[2 * keys + h * dv + e];
      const size_t at = size_t(row * nv + h);
      beta[at] = sigmoid(b[at]);
      g[at] = -std::exp(double(A_log[size_t(h)])) * softplus(a[at] + double(dt_bias[size_t(h)]));
    }
  }

  // The delta rule, token by token, for each (sequence, value head).
  Vec core(size_t(rows * nv * dv));
  res.final_state.assign(size_t(B * nv * dk * dv), 0.0);
  if (!in.initial_state.empty()) std::copy(in.initial_state.begin(), in.initial_state.end(), res.final_state.begin());
  Vec u(static_cast<size_t>(dv));
  for (int64_t bi = 0; bi < B; ++bi)
    for (int64_t h = 0; h < nv; ++h) {
      double* S = res.final_state.data() + (bi * nv + h) * dk * dv;  // [dk, dv], in place
      for (int64_t t = 0; t < T; ++t) {
        const size_t at = size_t((bi * T + t) * nv + h);
        const double* kt = k.data() + at * dk;
        const double* qt = q.data() + at * dk;
        const double* vt = v.data() + at * dv;
        const double decay = std::exp(g[at]);
        for (int64_t e = 0; e < dk * dv; ++e) S[e] *= decay;
        // u = β·(v − Sᵀk)
        for (int64_t c = 0; c < dv; ++c) u[size_t(c)] = vt[c];
        for (int64_t i = 0; i < dk; ++i)
          for (int64_t c = 0; c < dv; ++c) u[size_t(c)] -= S[i * dv + c] * kt[i];
        for (int64_t c = 0; c < dv; ++c) u[size_t(c)] *= beta[at];
        // S += k·uᵀ, o = Sᵀq
        for (int64_t i = 0; i < dk; ++i)
          for (int64_t c = 0; c < dv; ++c) S[i * dv + c] += kt[i] * u[size_t(c)];
        double* o = core.data() + at * dv;
        for (int64_t c = 0; c < dv; ++c) o[c] = 0;
        for (int64_t i = 0; i < dk; ++i)
          for (int64_t c = 0; c < dv; ++c) o[c] += S[i * dv + c] * qt[i];
      }
    }

  // RMSNorm(o)·w·silu(z) per value head ([B·T, nv·dv] is out_proj's input layout), then out_proj.
  std::span<const float> nw = weights.at("norm.weight");
  Vec gated(core.size());
  for (int64_t rh = 0; rh < rows * nv; ++rh) {
    const double* o = core.data() + rh * dv;
    double ss = 0;
    for (int64_t c = 0; c < dv; ++c) ss += o[c] * o[c];
    const double inv = 1.0 / std::sqrt(ss / double(dv) + cfg.rms_norm_eps);
    for (int64_t c = 0; c < dv; ++c)
      gated[size_t(rh * dv + c)] = o[c] * inv * double(nw[size_t(c)]) * silu(z[size_t(rh * dv + c)]);
  }
  // With out_proj_tiled, out_proj's columns take value head g = j·r + i at block i·nk + j (llama.cpp's order).
  Vec tiled;
  if (cfg.out_proj_tiled) {
    tiled.resize(gated.size());
    for (int64_t row = 0; row < rows; ++row)
      for (int64_t h = 0; h < nv; ++h)
        std::copy_n(gated.begin() + (row * nv + h) * dv, dv, tiled.begin() + (row * nv + (h % r) * nk + h / r) * dv);
  }
  res.output = linear(cfg.out_proj_tiled ? tiled : gated, weights.at("out_proj.weight"), rows, D, nv * dv);

  if (in.keep_debug) {
    res.mixed_qkv = std::move(mixed);
    res.conv_silu = std::move(conv);
    res.z = std::move(z);
    res.b = std::move(b);
    res.a = std::move(a);
    res.q_scaled = std::move(q);
    res.k_normed = std::move(k);
    res.v = std::move(v);
    res.g = std::move(g);
    res.beta = std::move(beta);
    res.core = std::move(core);
    res.gated_norm = std::move(gated);
  }
  return res;
}

}  // namespace vkgate::reference
