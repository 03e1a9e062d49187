// Shared by the GLA kernels (gla_recurrent.comp, gla_chunk.comp), included
// after PARAMS: the feature map φ and the log forget gate, in fp32.
//   log α = max(logsigmoid(gk) / normalizer, clamp_min)
// The including shader's Push has feature_map (0 none, 1 relu, 2 elu + 1),
// normalizer and clamp_min (−inf when unset).

float phi(float v) { return p.feature_map == 1 ? max(v, 0.0) : p.feature_map == 2 ? (v > 0.0 ? v + 1.0 : exp(v)) : v; }

// log(1 + y) for y ≥ 0, without losing y ≪ 1 to rounding.
float log1p_pos(float y) { return y < 1e-4 ? y * (1.0 - y * (0.5 - y / 3.0)) : log(1.0 + y); }
float log_sigmoid(float v) { return v < 0.0 ? v - log1p_pos(exp(v)) : -log1p_pos(exp(-v)); }
float log_gate(float logit) { return max(log_sigmoid(logit) / p.normalizer, p.clamp_min); }
// 1 − e^l for l ≤ 0, exact to rounding where e^l is close to 1.
float one_minus_exp(float l) { return l > -1e-2 ? -l * (1.0 + l * (0.5 + l * (1.0 / 6.0 + l / 24.0))) : 1.0 - exp(l); }
