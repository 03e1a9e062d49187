// The output gate of every position (BlockConfig::gate_position): a raw score
// z from the projections, activated, optionally averaged over the heads of
// its position, then combined with the gated value y. Mirrors ops::Gate.
#ifndef VKGATE_GATE_GLSL
#define VKGATE_GATE_GLSL

float gate_act(uint act, float z) {
  const float sig = 1.0 / (1.0 + exp(-z));
  return act == 0 ? sig : act == 1 ? z * sig : act == 2 ? 0.5 + 0.5 * sig : z;
}

float gate_apply(uint combine, float y, float s) { return combine == 0 ? y * s : y + s; }

// The rest reads scores through a View (common.glsl); GATE_ACT_ONLY leaves it out.
#ifndef GATE_ACT_ONLY
struct Gate {
  View view;     // raw scores (bt, head at the gate's position, j < width)
  uint width;    // scores per head: 1 (headwise) or the gated row's dim
  uint heads;    // heads at the position: how many the shared mean covers
  uint shared_heads;  // 1: every head takes the mean of the heads' scores
  uint act;      // 0 sigmoid, 1 silu, 2 ns_sigmoid, 3 identity (GateActivation)
  uint combine;  // 0 y·s, 1 y + s (GateCombine)
};

// GATE_LD(i) reads a raw score: the includer's buffer of projections (g_ld by default).
#ifndef GATE_LD
#define GATE_LD g_ld
#endif

// The activated score for element d of head h of row bt.
float gate_score(Gate gt, uint tokens, uint bt, uint h, uint d) {
  const uint j = gt.width == 1 ? 0 : d;
  const uint first = gt.shared_heads != 0 ? 0 : h, n = gt.shared_heads != 0 ? gt.heads : 1;
  float s = 0.0;
  for (uint k = 0; k < n; ++k) s += gate_act(gt.act, GATE_LD(view_offset(gt.view, tokens, bt, first + k, j)));
  return s / float(n);
}

float gated(Gate gt, uint tokens, uint bt, uint h, uint d, float y) {
  return gate_apply(gt.combine, y, gate_score(gt, tokens, bt, h, d));
}
#endif

#endif
