// The MLP's activations, by ModelConfig's Activation (the config's
// hidden_act): 0 silu x·σ(x), 1 gelu x·Φ(x) with the erf form, 2
// gelu_pytorch_tanh, 3 sigmoid. Used by glu.comp and matvec.comp's GLU form.
#ifndef VKGATE_ACTIVATION_GLSL
#define VKGATE_ACTIVATION_GLSL

// Both GELUs are written without 1 + erf(·) or 1 + tanh(·): for negative x
// those cancel to a few correct bits, and GELU(x) is small exactly there.
// erfc by the Chebyshev fit of Numerical Recipes §6.2 (relative error below
// 1.2e-7 for all z ≥ 0); GLSL has no erf.
float erfc_pos(float z) {
  const float t = 1.0 / (1.0 + 0.5 * z);
  const float poly =
      -1.26551223 +
      t * (1.00002368 +
           t * (0.37409196 +
                t * (0.09678418 +
                     t * (-0.18628806 +
                          t * (0.27886807 + t * (-1.13520398 + t * (1.48851587 + t * (-0.82215223 + t * 0.17087277))))))));
  return t * exp(-z * z + poly);
}

float activation(float x, uint kind) {
  if (kind == 0) return x / (1.0 + exp(-x));
  if (kind == 1) {  // x·Φ(x) = x·erfc(−x/√2)/2
    const float z = x * 0.70710678118654752;
    return 0.5 * x * (z < 0.0 ? erfc_pos(-z) : 2.0 - erfc_pos(z));
  }
  // 1 + tanh(u) = 2σ(2u), u = √(2/π)(x + 0.044715x³)
  if (kind == 2) return x / (1.0 + exp(-1.5957691216057308 * (x + 0.044715 * x * x * x)));
  return 1.0 / (1.0 + exp(-x));
}

#endif
