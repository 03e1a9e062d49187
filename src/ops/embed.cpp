#include "gpu/context_impl.hpp"
#include "gpu/pipeline.hpp"
#include "ops/ops.hpp"
#include "ops/qmatmul.hpp"
#include "vkgate/error.hpp"
#include "vkgate/quant.hpp"

namespace vkgate::ops {

namespace {
struct Push {
  uint32_t rows, dim, ld, first, count;
};
}  // namespace

void embed(Context::Impl& ctx, Recorder& rec, const EmbedArgs& a) {
  const auto& [ids, table, x, rows, dim, ld, first, count, s] = a;
  const uint32_t wg = cpu_kernels(ctx.info) ? 8 : 64;
  const Push push{rows, dim, ld ? ld : dim, first, count};
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
  const Push push{rows, dim, uint32_t(*row_bytes), first, count};
  const gpu::Grid g = gpu::grid_for(rows);
  rec.dispatch(ctx.pipelines->get("embed_blocks", {wg, ggml_type_of(format)}),
               {{&ids, gpu::Access::read}, {&table, gpu::Access::read}, {&x, gpu::Access::read_write}}, push, g.x, g.y,
               1, "embed");
}

}  // namespace vkgate::ops
