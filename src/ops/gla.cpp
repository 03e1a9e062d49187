#include <algorithm>
#include <cmath>
#include <limits>

#include "gpu/context_impl.hpp"
#include "gpu/pipeline.hpp"
#include "ops/ops.hpp"

namespace vkgate::ops {

namespace {
struct ScanPush {
  View q, k, v, gk;
  uint32_t tokens, heads, kv_heads, dv, feature_map, convex;
  float normalizer, clamp_min, scale;
  uint32_t batch_tokens;
};
struct GlaChunkPush {
  View q, k, v, gk;
  uint32_t tokens, heads, kv_heads, dv, feature_map, convex;
  float normalizer, clamp_min, scale;
  uint32_t batch, chunks, parts;
};
struct OutputPush {
  View g;
  uint32_t tokens, heads, dv, rows, has_norm, has_gate, y_ld, parts;
  float eps;
  uint32_t y_tile;
};
}  // namespace

uint32_t gla_row_blocks(uint32_t dk) {
  uint32_t rows = std::min(dk, 32u);  // the largest divisor of dk up to 32
  while (dk % rows) --rows;
  return dk / rows;
}

void gla_recurrent(Context::Impl& ctx, Recorder& rec, const GlaScan& a, Storage s) {
  // A column per invocation: as many as d_v needs, 8 to 64 (CPU drivers run a
  // workgroup on one thread, so more workgroups keep every core busy).
  uint32_t wg = 8;
  while (wg < a.dv && wg < 64) wg *= 2;
  const ScanPush push{a.q_view, a.k_view, a.v_view, a.gk_view, a.tokens, a.heads, a.kv_heads, a.dv,
                      uint32_t(a.feature_map), a.convex ? 1u : 0u, a.normalizer,
                      a.clamp_min ? float(*a.clamp_min) : -std::numeric_limits<float>::infinity(), a.scale,
                      a.batch * a.tokens};
  constexpr uint32_t kPrepareWG = 64;
  const gpu::Grid g = gpu::grid_for((uint64_t(a.batch) * a.tokens * (a.heads + a.kv_heads) * a.dk + kPrepareWG - 1) / kPrepareWG);
  rec.dispatch(ctx.pipelines->get(variant("gla_prepare", s), {kPrepareWG, a.dk}),
               {{&a.proj, gpu::Access::read},
                {&a.gk, gpu::Access::read},
                {&a.state, gpu::Access::read},
                {&a.o, gpu::Access::read},
                {&a.qs, gpu::Access::write},
                {&a.ks, gpu::Access::write},
                {&a.as, gpu::Access::write}},
               push, g.x, g.y, 1, "gla.prepare");
  const uint32_t blocks = gla_row_blocks(a.dk), rows = a.dk / blocks;
  // CPU drivers: texel reads, four rows per fetch where the row blocks allow.
  const bool cpu = cpu_gemm(ctx.info, rec.tuning()), rows4 = cpu && rows % 4 == 0;
  const gpu::Pipeline& p =
      ctx.pipelines->get(variant("gla_recurrent", s) + (rows4 ? "_cpu4" : cpu ? "_cpu" : ""), {wg, a.dk, rows});
  const bool texel = p.texel_bindings != 0;
  const VkFormat x_format = texel ? texel_format(s) : VK_FORMAT_UNDEFINED,
                 f32_format = rows4 ? VK_FORMAT_R32G32B32A32_SFLOAT : texel ? VK_FORMAT_R32_SFLOAT : VK_FORMAT_UNDEFINED;
  rec.dispatch(p,
               {{&a.proj, gpu::Access::read, x_format},
                {&a.gk, gpu::Access::read, x_format},
                {&a.state, gpu::Access::read_write},
                {&a.o, gpu::Access::write},
                {&a.qs, gpu::Access::read, f32_format},
                {&a.ks, gpu::Access::read, f32_format},
                {&a.as, gpu::Access::read, f32_format}},
               push, (a.dv + wg - 1) / wg, a.heads * blocks, a.batch, "gla.recurrent");
}

// Below this many tokens a recording takes the scan: a chunk's fixed work
// (its scores, the registers the state pass loads) outweighs a short scan.
constexpr uint32_t kChunkMinTokens = 64;
// The state pass's rows per workgroup: CPU drivers hold a 64-row tile per
// 8-lane subgroup (gemm_cpu.glsl's shape), GPUs 32 rows per invocation.
uint32_t chunk_rows(const DeviceInfo& d, const Tuning& t) { return cpu_gemm(d, t) ? 64 : 32; }

bool gla_chunkwise(const Tuning& t, uint32_t tokens) {
  return t.gla_mode == gpu::RecurrenceMode::chunk || (t.gla_mode == gpu::RecurrenceMode::automatic && tokens >= kChunkMinTokens);
}

uint32_t gla_chunk_parts(const DeviceInfo& d, const Tuning& t, uint32_t dk) {
  const uint32_t rows = chunk_rows(d, t);
  return (dk + rows - 1) / rows + 1;  // the state pass's row blocks, then the intra-chunk part
}

void gla_chunked(Context::Impl& ctx, Recorder& rec, const GlaScan& a, const GlaChunkScratch& c, Storage s) {
  const bool cpu = cpu_gemm(ctx.info, rec.tuning());
  const uint32_t chunks = (a.tokens + kGlaChunk - 1) / kGlaChunk, rows = chunk_rows(ctx.info, rec.tuning()),
                 parts = gla_chunk_parts(ctx.info, rec.tuning(), a.dk);
  const GlaChunkPush push{a.q_view, a.k_view, a.v_view, a.gk_view, a.tokens, a.heads, a.kv_heads, a.dv,
                       uint32_t(a.feature_map), a.convex ? 1u : 0u, a.normalizer,
                       a.clamp_min ? float(*a.clamp_min) : -std::numeric_limits<float>::infinity(), a.scale,
                       a.batch, chunks, parts};
  // CPU drivers read through texel views (bf16 projections stay storage buffers).
  const std::string tail = cpu ? "_cpu" : "";
  const VkFormat f32 = cpu ? VK_FORMAT_R32_SFLOAT : VK_FORMAT_UNDEFINED, x = cpu ? texel_format(s) : VK_FORMAT_UNDEFINED;
  constexpr uint32_t kPrepareWG = 64;
  auto prepare_grid = [&](uint32_t heads) {
    return gpu::grid_for((uint64_t(a.batch) * chunks * heads * a.dk + kPrepareWG - 1) / kPrepareWG);
  };
  const gpu::Grid gk = prepare_grid(a.kv_heads), gq = prepare_grid(a.heads);
  rec.dispatch(ctx.pipelines->get(variant("gla_chunk_keys", s) + tail, {kPrepareWG, a.dk}),
               {{&a.proj, gpu::Access::read, x},
                {&a.gk, gpu::Access::read, x},
                {&a.ks, gpu::Access::write},
                {&c.kd, gpu::Access::write},
                {&c.kr, gpu::Access::write},
                {&a.as, gpu::Access::read_write}},
               push, gk.x, gk.y, 1, "gla.chunk_keys");
  rec.dispatch(ctx.pipelines->get(variant("gla_chunk_queries", s) + tail, {kPrepareWG, a.dk}),
               {{&a.proj, gpu::Access::read, x},
                {&a.as, gpu::Access::read, f32},
                {&a.qs, gpu::Access::write},
                {&c.qd, gpu::Access::write},
                {&c.qr, gpu::Access::write}},
               push, gq.x, gq.y, 1, "gla.chunk_queries");
  rec.dispatch(ctx.pipelines->get(std::string("gla_chunk_scores") + tail, {8, a.dk}),
               {{&c.qr, gpu::Access::read, f32},
                {&c.kr, gpu::Access::read, f32},
                {&a.as, gpu::Access::read, f32},
                {&a.qs, gpu::Access::read, f32},
                {&a.ks, gpu::Access::read, f32},
                {&c.scores, gpu::Access::write}},
               push, chunks, a.heads, a.batch, "gla.chunk_scores");
  // Columns: 8 lanes × 8 on CPU drivers (the 64×8 register tile), 64 × 1 on GPUs.
  const uint32_t wg = cpu ? 8 : 64, rn = cpu ? 8 : 1, tiles = (a.dv + wg * rn - 1) / (wg * rn);
  rec.dispatch(ctx.pipelines->get(variant("gla_chunk_state", s) + tail, {wg, a.dk, rows, rn}),
               {{&c.qd, gpu::Access::read, f32},
                {&c.kd, gpu::Access::read, f32},
                {&a.as, gpu::Access::read, f32},
                {&a.proj, gpu::Access::read, x},
                {&a.state, gpu::Access::read_write},
                {&a.o, gpu::Access::write}},
               push, tiles, (parts - 1) * a.heads, a.batch, "gla.chunk_state");
  rec.dispatch(ctx.pipelines->get(variant("gla_chunk_intra", s) + tail, {wg, a.dk, rows, rn}),
               {{&c.scores, gpu::Access::read, f32}, {&a.proj, gpu::Access::read, x}, {&a.o, gpu::Access::write}},
               push, tiles, chunks * a.heads, a.batch, "gla.chunk_intra");
}

void gla_output(Context::Impl& ctx, Recorder& rec, const GlaOutput& a, Storage s) {
  const RowReduce r = row_reduce(ctx.info, rec.tuning(), a.dv);
  const gpu::Pipeline& p = ctx.pipelines->get(variant("gla_output", s) + r.suffix, {r.wg});
  const uint64_t rows = uint64_t(a.rows) * a.heads;
  const OutputPush push{a.g_view, a.tokens, a.heads, a.dv, uint32_t(rows), a.norm ? 1u : 0u, a.gate ? 1u : 0u,
                        a.y_ld, a.parts, a.eps, a.y_tile};
  const gpu::Grid g = gpu::grid_for(rows);
  rec.dispatch(p,
               {{&a.o, gpu::Access::read},
                {&a.proj, gpu::Access::read},
                {a.norm ? a.norm : &a.o, gpu::Access::read},
                {&a.y, gpu::Access::write}},
               push, g.x, g.y, 1, "gla.output");
}

}  // namespace vkgate::ops
