// Gated DeltaNet's ops (ops.hpp): the prepare pass and the conv-state update
// (shaders/gdn_prepare.comp), the delta rule token by token
// (shaders/gdn_recurrent.comp) and the gated RMSNorm, which is GLA's output
// pass (shaders/gla_output.comp) reading z through a View.
#include <algorithm>
#include <cmath>
#include <string>

#include "gpu/context_impl.hpp"
#include "gpu/pipeline.hpp"
#include "ops/ops.hpp"
#include "vkgate/error.hpp"

namespace vkgate::ops {

namespace {

struct GdnPreparePush {
  uint32_t batch, tokens, nk, nv, dk, dv, kernel;
  uint32_t qkvz_base, qkvz_ld, ba_base, ba_ld;
  uint32_t groups;
  float q_scale;
};
struct RecurrentPush {
  uint32_t batch, tokens, nk, nv, dv;
};
struct GdnChunkPush {
  uint32_t batch, tokens, nk, nv, dv, chunks;
};

// The shaders index every buffer with 32 bits.
void check_shape(const GdnArgs& a, const GdnShape& s) {
  if (s.batch == 0 || s.tokens == 0 || s.nk == 0 || s.nv % s.nk != 0 || s.dk == 0 || s.dv == 0 || s.kernel < 2 ||
      s.kernel > 16)
    throw Error(ErrorCode::invalid_argument,
                "gdn: impossible shape: batch " + std::to_string(s.batch) + ", tokens " + std::to_string(s.tokens) +
                    ", nk " + std::to_string(s.nk) + ", nv " + std::to_string(s.nv) + ", dk " + std::to_string(s.dk) +
                    ", dv " + std::to_string(s.dv) + ", kernel " + std::to_string(s.kernel));
  const uint64_t rows = s.rows();
  const uint64_t widest = std::max({uint64_t(s.channels()), uint64_t(s.nv) * s.dv, uint64_t(a.qkvz_ld),
                                    uint64_t(a.ba_ld), uint64_t(a.y_ld)});
  const uint64_t state = uint64_t(s.batch) * s.nv * s.dk * s.dv;
  if (rows * widest + std::max({a.qkvz_base, a.ba_base}) >= (uint64_t(1) << 32) || state >= (uint64_t(1) << 32))
    throw Error(ErrorCode::unsupported, "gdn: " + std::to_string(s.batch) + " × " + std::to_string(s.tokens) +
                                            " tokens need indices beyond 32 bits");
}

}  // namespace

GdnShape gdn_shape(const GdnConfig& c, uint32_t batch, uint32_t tokens) {
  return GdnShape{batch,
                  tokens,
                  uint32_t(c.num_key_heads),
                  uint32_t(c.num_value_heads),
                  uint32_t(c.key_head_dim),
                  uint32_t(c.value_head_dim),
                  uint32_t(c.conv_kernel)};
}

GdnScratchFloats gdn_scratch_floats(const GdnShape& s) {
  const uint64_t rows = s.rows();
  const uint64_t chunks = (uint64_t(s.tokens) + kGdnChunk - 1) / kGdnChunk;
  return {std::max<uint64_t>(1, rows * s.channels()),
          std::max<uint64_t>(1, rows * s.nv * 2),
          std::max<uint64_t>(1, rows * s.nv * s.dv),
          std::max<uint64_t>(1, rows * s.nv * s.dk),
          std::max<uint64_t>(1, rows * s.nv * s.dv),
          std::max<uint64_t>(1, uint64_t(s.batch) * s.nv * chunks * kGdnChunk * kGdnChunk)};
}

namespace {

// The subgroup form of the recurrent kernel (gdn_recurrent.comp SUBGROUP):
// lanes per column (0: not usable here) and columns per workgroup. CPU drivers
// have 8 lanes; GPUs take 32 where they can run full subgroups of 32 (64 on
// devices that only have 64), with 4 columns per workgroup.
// !Tuning::subgroup_reduce (VKGATE_DISABLE_SUBGROUP_REDUCE) turns it off.
struct SubgroupColumns {
  uint32_t lanes = 0, columns = 0;
};
SubgroupColumns subgroup_columns(const DeviceInfo& d, const Tuning& t) {
  if (!d.subgroup_arithmetic || !t.subgroup_reduce) return {};
  uint32_t lanes = d.subgroup_size;
  if (d.subgroup_size_control && d.min_subgroup_size <= 32 && 32 <= d.max_subgroup_size) lanes = 32;
  const uint32_t columns = cpu_kernels(d) ? 8 : 4;
  if (lanes < 4 || lanes > 64 || !gpu::subgroup_size_ok(d, lanes, lanes * columns)) return {};
  return {lanes, columns};
}

}  // namespace

uint32_t gdn_recurrent_columns(const DeviceInfo& d, const Tuning& t, uint32_t dk, uint32_t dv) {
  if (const SubgroupColumns sg = subgroup_columns(d, t); sg.lanes) return sg.columns;
  // Up to 64 columns, as many as d_v needs, with the columns' shared memory
  // within half of what the device has (and at least 8 columns).
  const uint64_t budget = std::max<uint64_t>(d.shared_memory_bytes / 2, 16 * 1024);
  uint32_t wg = 8;
  while (wg < dv && wg < 64 && uint64_t(dk) * wg * 2 * 4 <= budget && wg * 2 <= d.max_workgroup_invocations) wg *= 2;
  return wg;
}

void gdn_prepare(Context::Impl& ctx, Recorder& rec, const GdnArgs& a, const GdnShape& s, Storage st) {
  check_shape(a, s);
  const uint64_t groups = s.rows() * s.nk;
  GdnPreparePush push{s.batch,    s.tokens,    s.nk,      s.nv,      s.dk,    s.dv,
                      s.kernel,   a.qkvz_base, a.qkvz_ld, a.ba_base, a.ba_ld, uint32_t(groups),
                      float(1.0 / std::sqrt(double(s.dk)))};
  // Where row_reduce takes one subgroup per row (CPU drivers), texel reads too.
  const RowReduce r = row_reduce(ctx.info, rec.tuning(), 2 * s.dk);
  const bool texel = std::string(r.suffix) == "_sg";
  const VkFormat x = texel ? texel_format(st) : VK_FORMAT_UNDEFINED, f32 = texel ? VK_FORMAT_R32_SFLOAT : x;
  const gpu::Grid g = gpu::grid_for(groups);
  rec.dispatch(ctx.pipelines->get(variant("gdn_prepare", st) + (texel ? "_cpu" : ""), {r.wg}),
               {{&a.qkvz, gpu::Access::read, x},
                {&a.ba, gpu::Access::read, x},
                {&a.conv_weight, gpu::Access::read, f32},
                {&a.a_log, gpu::Access::read, f32},
                {&a.dt_bias, gpu::Access::read, f32},
                {&a.conv_state, gpu::Access::read, f32},
                {&a.scratch.mixed, gpu::Access::write},
                {&a.scratch.bg, gpu::Access::write}},
               push, g.x, g.y, 1, "gdn.prepare");
  // The new conv state, after the pass above has read the old one.
  constexpr uint32_t kWG = 64;
  const uint64_t channels = uint64_t(s.batch) * s.channels();
  push.groups = uint32_t(channels);
  const gpu::Grid gc = gpu::grid_for((channels + kWG - 1) / kWG);
  rec.dispatch(ctx.pipelines->get(variant("gdn_conv_state", st), {kWG}),
               {{&a.qkvz, gpu::Access::read},
                {&a.ba, gpu::Access::read},
                {&a.conv_weight, gpu::Access::read},
                {&a.a_log, gpu::Access::read},
                {&a.dt_bias, gpu::Access::read},
                {&a.conv_state, gpu::Access::read_write},
                // Every variant of a shader takes the same bindings; this one reads neither.
                {&a.scratch.mixed, gpu::Access::read},
                {&a.scratch.bg, gpu::Access::read}},
               push, gc.x, gc.y, 1, "gdn.conv_state");
}

void gdn_recurrent(Context::Impl& ctx, Recorder& rec, const GdnArgs& a, const GdnShape& s) {
  check_shape(a, s);
  const uint32_t columns = gdn_recurrent_columns(ctx.info, rec.tuning(), s.dk, s.dv);
  const RecurrentPush push{s.batch, s.tokens, s.nk, s.nv, s.dv};
  const SubgroupColumns sg = subgroup_columns(ctx.info, rec.tuning());
  const bool texel = sg.lanes && cpu_kernels(ctx.info);
  const VkFormat f32 = texel ? VK_FORMAT_R32_SFLOAT : VK_FORMAT_UNDEFINED;
  const gpu::Pipeline& p =
      sg.lanes ? ctx.pipelines->get(texel ? "gdn_recurrent_sg_cpu" : "gdn_recurrent_sg",
                                    {sg.lanes * columns, s.dk, sg.lanes, (s.dk + sg.lanes - 1) / sg.lanes}, sg.lanes)
               : ctx.pipelines->get("gdn_recurrent", {columns, s.dk});
  rec.dispatch(p,
               {{&a.scratch.mixed, gpu::Access::read, f32},
                {&a.scratch.bg, gpu::Access::read, f32},
                {&a.state, gpu::Access::read_write},
                {&a.scratch.o, gpu::Access::write}},
               push, (s.dv + columns - 1) / columns, s.nv, s.batch, "gdn.recurrent");
}

void gdn_output(Context::Impl& ctx, Recorder& rec, const GdnArgs& a, const GdnShape& s, Storage st) {
  check_shape(a, s);
  // z of value head h = j·r + i sits in key head j's block after q, k and v.
  const uint32_t r = s.group();
  const View z{a.qkvz_base + 2 * s.dk + r * s.dv, s.tokens * a.qkvz_ld, a.qkvz_ld, r, s.qkvz_group(), s.dv};
  const GlaOutput out{a.scratch.o, a.qkvz, z,      &a.norm_weight, true, a.eps, a.y, a.y_ld, uint32_t(s.rows()),
                      s.tokens,    s.nv,   s.dv, 1,           a.y_tiled ? r : 1};
  gla_output(ctx, rec, out, st);
}

void gdn_chunked(Context::Impl& ctx, Recorder& rec, const GdnArgs& a, const GdnShape& s) {
  check_shape(a, s);
  const GdnScratch& x = a.scratch;
  if (!x.chunk_w || !x.chunk_u || !x.chunk_p)
    throw Error(ErrorCode::invalid_argument, "gdn_chunked: the chunk scratch (chunk_w, chunk_u, chunk_p) is missing");
  const uint32_t chunks = (s.tokens + kGdnChunk - 1) / kGdnChunk;
  if (uint64_t(s.batch) * s.nv * chunks * kGdnChunk * kGdnChunk >= (uint64_t(1) << 32))
    throw Error(ErrorCode::unsupported, "gdn_chunked: the chunks' scores need indices beyond 32 bits");
  const GdnChunkPush push{s.batch, s.tokens, s.nk, s.nv, s.dv, chunks};
  rec.dispatch(ctx.pipelines->get("gdn_chunk_wy", {kGdnChunk, s.dk}),
               {{&x.mixed, gpu::Access::read},
                {&x.bg, gpu::Access::read_write},
                {x.chunk_w, gpu::Access::write},
                {x.chunk_u, gpu::Access::write},
                {x.chunk_p, gpu::Access::write},
                // Every variant of a shader takes the same bindings; this one reads neither.
                {&a.state, gpu::Access::read},
                {&x.o, gpu::Access::read}},
               push, chunks, s.nv, s.batch, "gdn.chunk_wy");
  // Columns per workgroup: each keeps dk + kGdnChunk floats of shared memory.
  const uint64_t budget = std::max<uint64_t>(ctx.info.shared_memory_bytes / 2, 16 * 1024);
  uint32_t wg = 8;
  while (wg < s.dv && wg < 64 && uint64_t(s.dk + kGdnChunk) * wg * 2 * 4 <= budget &&
         wg * 2 <= ctx.info.max_workgroup_invocations)
    wg *= 2;
  rec.dispatch(ctx.pipelines->get("gdn_chunk_state", {wg, s.dk}),
               {{&x.mixed, gpu::Access::read},
                {&x.bg, gpu::Access::read},
                {x.chunk_w, gpu::Access::read},
                {x.chunk_u, gpu::Access::read},
                {x.chunk_p, gpu::Access::read},
                {&a.state, gpu::Access::read_write},
                {&x.o, gpu::Access::read_write}},
               push, (s.dv + wg - 1) / wg, s.nv, s.batch, "gdn.chunk_state");
}

void gdn_forward(Context::Impl& ctx, Recorder& rec, const GdnArgs& a, const GdnShape& s, Storage st, GdnForm form) {
  gdn_prepare(ctx, rec, a, s, st);
  if (form == GdnForm::chunk) gdn_chunked(ctx, rec, a, s);
  else gdn_recurrent(ctx, rec, a, s);
  gdn_output(ctx, rec, a, s, st);
}

}  // namespace vkgate::ops
