// What the three flash kernels (flash_attention, flash_decode, flash_coopmat)
// share: bindings 3–6, the push constants and the single write of a result.
// The including shader declares HEAD_DIM and bindings 0–2 (q, k, v) first;
// T is the storage of the gate and the output.

RO(3, mask, F32)
RO(4, g, T)
RW(5, o, T)
#ifdef PARTIAL_COHERENT
RW_COHERENT(6, partial, F32)
#else
RW(6, partial, F32)
#endif

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
  uint merge;    // flash_decode.comp: the splits merged by the last workgroup of each row tile
#ifdef PREPARE
  // flash_decode_prep.comp's (PREPARE), as qkv_prepare.comp's: the q, k and v rows in
  // the projections (binding 0), RoPE's rotated dims and pairs, the q/k norm
  // (0: none; 1: x·w; 2: x·(1 + w)) and its epsilon.
  View q_view, k_view, v_view;
  uint rotary, interleaved, norm;
  float eps;
#endif
};
PARAMS(Push)

// Where split `split`'s partial result for the row (b, t, h) starts in
// partial [B, splits, H, T, Dh + 2] (O, then m and l).
uint partial_base(uint b, uint t, uint h, uint split) {
  return (((b * p.splits + split) * p.heads + h) * p.tokens + t) * (HEAD_DIM + 2);
}

// Element d of the row (b, t, h), finished (O / l: `val`): gated, to o [B, T, H, Dh].
void flash_out(uint b, uint t, uint h, uint d, float val) {
  if (p.has_gate != 0) val = gated(p.gate, p.tokens, b * p.tokens + t, h, d, val);
  o_st(((b * p.tokens + t) * p.heads + h) * HEAD_DIM + d, val);
}

// Element d of the row (b, t, h), whose unnormalised output is `val`, with the
// row's running max m and sum l. With split keys, to the split's partial
// result, which attention_combine.comp (or flash_decode.comp's last
// workgroup) finishes; otherwise O / l to o. A fully masked row (l = 0) gives zeros.
void flash_store(uint b, uint t, uint h, uint d, uint split, float val, float m, float l) {
  if (p.splits > 1) {
    const uint base = partial_base(b, t, h, split);
    partial_st(base + d, val);
    if (d == 0) {
      partial_st(base + HEAD_DIM, m);
      partial_st(base + HEAD_DIM + 1, l);
    }
    return;
  }
  flash_out(b, t, h, d, l > 0.0 ? val / l : 0.0);
}

// Query head `member` (< G) of KV head kvh's group.
uint group_head(uint kvh, uint member, uint G) { return p.tiled != 0 ? member * p.kv_heads + kvh : kvh * G + member; }
