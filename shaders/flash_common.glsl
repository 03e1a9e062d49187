// What the three flash kernels (flash_attention, flash_decode, flash_coopmat)
// share: bindings 3–6, the push constants and the single write of a result.
// The including shader declares HEAD_DIM and bindings 0–2 (q, k, v) first;
// T is the storage of the gate and the output.

RO(3, mask, F32)
RO(4, g, T)
RW(5, o, T)
RW(6, partial, F32)

#include "gate.glsl"
#include "params.glsl"
struct Push {
  Gate gate;
  uint tokens, keys, kv_stride, heads, kv_heads, past;  // kv_stride: positions per (b, KV head) in k/v
  uint causal, has_mask, has_gate;
  uint tiled;  // query head h reads KV head h % KV, not h / G (GqaMapping)
  uint chunk, splits;  // keys per split and number of splits
  float scale;
  uint mask_ld;  // floats between rows of the mask [B, 1, T, S]
};
PARAMS(Push)

// Element d of the row (b, t, h), whose unnormalised output is `val`, with the
// row's running max m and sum l. With split keys, to partial [B, splits, H,
// T, Dh + 2] (O, then m and l), which attention_combine.comp finishes;
// otherwise O / l, gated, to o [B, T, H, Dh]. A fully masked row (l = 0) gives zeros.
void flash_store(uint b, uint t, uint h, uint d, uint split, float val, float m, float l) {
  if (p.splits > 1) {
    const uint base = (((b * p.splits + split) * p.heads + h) * p.tokens + t) * (HEAD_DIM + 2);
    partial_st(base + d, val);
    if (d == 0) {
      partial_st(base + HEAD_DIM, m);
      partial_st(base + HEAD_DIM + 1, l);
    }
    return;
  }
  float out_v = l > 0.0 ? val / l : 0.0;
  if (p.has_gate != 0) out_v = gated(p.gate, p.tokens, b * p.tokens + t, h, d, out_v);
  o_st(((b * p.tokens + t) * p.heads + h) * HEAD_DIM + d, out_v);
}

// Query head `member` (< G) of KV head kvh's group.
uint group_head(uint kvh, uint member, uint G) { return p.tiled != 0 ? member * p.kv_heads + kvh : kvh * G + member; }
