// Shared by every vkgate compute shader.
#extension GL_EXT_control_flow_attributes : enable

// Specialization constant 0 is always the workgroup size (x); the host reads
// it back to size dispatches, so every shader agrees on this slot.
layout(local_size_x_id = 0) in;
layout(constant_id = 0) const uint WG = 64;

// A strided view of a [batch, tokens, heads, dim] tensor. Element (bt, h, d),
// with bt = b·T + t, sits at
//   base + b·sb + t·st + (h / groups)·sg + (h % groups)·sh + d.
// `groups` lets one formula address q_proj's gate layouts (heads interleaved
// per KV group) as well as plain [B,T,H,Dh] and [B,H,T,Dh] tensors.
struct View {
  uint base;
  uint sb;
  uint st;
  uint groups;
  uint sg;
  uint sh;
};

uint view_offset(View v, uint tokens, uint bt, uint h, uint d) {
  uint b = bt / tokens;
  uint t = bt - b * tokens;
  uint g = h / v.groups;
  return v.base + b * v.sb + t * v.st + g * v.sg + (h - g * v.groups) * v.sh + d;
}
