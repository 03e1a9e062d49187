#include "gpu/context_impl.hpp"
#include "gpu/pipeline.hpp"
#include "ops/ops.hpp"
#include "ops/qmatmul.hpp"
#include "vkgate/error.hpp"
#include "vkgate/quant.hpp"

namespace vkgate::ops {

namespace {
struct EmbedPush {
  uint32_t rows, dim, ld, first, count;
  uint32_t identity = 0, out0 = 0;  // dequantize_rows: table row r into x row out0 + r
};
}  // namespace

void embed(Context::Impl& ctx, Recorder& rec, const EmbedArgs& a) {
  const auto& [ids, table, x, rows, dim, ld, first, count, s] = a;
  const uint32_t wg = cpu_kernels(ctx.info) ? 8 : 64;
  const EmbedPush push{rows, dim, ld ? ld : dim, first, count};
  const gpu::Grid g = gpu::grid_for(rows);
  // Several chunks write disjoint rows of x: read_write keeps each dispatch's
  // rows of the others (the recorder orders them).
  rec.dispatch(ctx.pipelines->get(variant("embed", s), {wg}),
               {{&ids, gpu::Access::read}, {&table, gpu::Access::read}, {&x, gpu::Access::read_write}}, push, g.x, g.y,
               1, "embed");
}

void embed_blocks(Context::Impl& ctx, Recorder& rec, const EmbedBlocksArgs& a) {
  const auto& [ids, table, x, rows, dim, first, count, format] = a;
  const std::optional<size_t> row_bytes = stored_bytes(format, dim);
  if (!is_quantized(format) || !row_bytes || dim % 8 != 0)
    throw Error(ErrorCode::invalid_argument, "embed_blocks: rows of " + std::to_string(dim) + " elements of " +
                                                 to_string(format) + " are not whole blocks of a block format");
  if (table.size() < uint64_t(count) * *row_bytes + qmatmul_padding)
    throw Error(ErrorCode::invalid_argument, "embed_blocks: table buffer '" + table.name() + "' holds " +
                                                 std::to_string(table.size()) + " bytes, " +
                                                 std::to_string(uint64_t(count) * *row_bytes + qmatmul_padding) +
                                                 " needed");
  const uint32_t wg = cpu_kernels(ctx.info) ? 8 : 64;
  const EmbedPush push{rows, dim, uint32_t(*row_bytes), first, count};
  const gpu::Grid g = gpu::grid_for(rows);
  rec.dispatch(ctx.pipelines->get("embed_blocks", {wg, ggml_type_of(format)}),
               {{&ids, gpu::Access::read}, {&table, gpu::Access::read}, {&x, gpu::Access::read_write}}, push, g.x, g.y,
               1, "embed");
}

void dequantize_rows(Context::Impl& ctx, Recorder& rec, const DequantizeRowsArgs& a) {
  const auto& [table, format, x, rows, dim, out0, s] = a;
  const std::optional<size_t> row_bytes = stored_bytes(format, dim);
  if (!is_quantized(format) || !row_bytes || dim % 8 != 0 || s == Storage::bf16)
    throw Error(ErrorCode::invalid_argument, "dequantize_rows: rows of " + std::to_string(dim) + " elements of " +
                                                 to_string(format) + " into " + (s == Storage::f16 ? "fp16" : "fp32") +
                                                 " are not whole blocks of a block format");
  if (table.size() < uint64_t(rows) * *row_bytes + qmatmul_padding ||
      x.size() < (uint64_t(out0) + rows) * dim * element_bytes(s))
    throw Error(ErrorCode::invalid_argument, "dequantize_rows: '" + table.name() + "' or '" + x.name() +
                                                 "' is too small for " + std::to_string(rows) + " rows");
  const uint32_t wg = cpu_kernels(ctx.info) ? 8 : 64;
  const EmbedPush push{rows, dim, uint32_t(*row_bytes), 0, rows, 1, out0};
  const gpu::Grid g = gpu::grid_for(rows);
  // Binding 0 (the ids) is never read: identity rows.
  rec.dispatch(ctx.pipelines->get(s == Storage::f16 ? "embed_blocks_f16" : "embed_blocks", {wg, ggml_type_of(format)}),
               {{&table, gpu::Access::read}, {&table, gpu::Access::read}, {&x, gpu::Access::read_write}}, push, g.x,
               g.y, 1, "dequantize");
}

}  // namespace vkgate::ops
