// The output epilogue of the matmul kernels (matmul, matmul_staged,
// matmul_coopmat, matvec, matmul_combine): Y[m, n] = v (+ bias[n]), then the
// dense gate (G5: o_proj's output after its bias, before the residual) with
// its raw score gate[gate_at + m·ldg + n], then (+ R[m, n]). The includer
// declares the bias, res and gate buffers and a Push with has_bias,
// has_residual, ldr, gate_act (0: no gate; else the GateActivation + 1),
// gate_combine, gate_at and ldg.
#define GATE_ACT_ONLY
#include "gate.glsl"

float epilogue(uint m, uint n, float v) {
  if (p.has_bias != 0) v += bias_ld(n);
  if (p.gate_act != 0) v = gate_apply(p.gate_combine, v, gate_act(p.gate_act - 1, gate_ld(p.gate_at + m * p.ldg + n)));
  if (p.has_residual != 0) v += res_ld(m * p.ldr + n);
  return v;
}
