#include "nn/vocab.hpp"

#include <algorithm>

#include "ops/ops.hpp"
#include "ops/qmatmul.hpp"
#include "vkgate/quant.hpp"
#include "vkgate/error.hpp"

namespace vkgate::nn {

VocabMatrix::VocabMatrix(Context::Impl& vk, const gpu::Tuning& tuning, const HostTensor& t, uint32_t rows,
                         uint32_t dim, Storage act, const std::string& name)
    : vk_(vk), tuning_(tuning), rows_(rows), dim_(dim), act_(act) {
  const size_t e = ops::element_bytes(act);
  ld_ = ops::operand_stride(vk.info, tuning, dim, act);
  if (is_quantized(t.dtype)) {
    if (!ops::qmatmul_takes(t.dtype, dim))
      throw Error(ErrorCode::unsupported, name + ": rows of " + std::to_string(dim) + " " + to_string(t.dtype) +
                                              " elements, which the quantized product cannot take");
    blocks_ = t.dtype;
    row_bytes_ = *stored_bytes(t.dtype, dim);
  }
  const uint64_t row_bytes = blocks_ ? row_bytes_ : uint64_t(ld_) * e;
  const uint64_t fit = (vk.info.max_storage_buffer_range - ops::qmatmul_padding) / row_bytes;
  if (fit == 0)
    throw Error(ErrorCode::unsupported, name + ": one row of " + std::to_string(dim) +
                                            " elements exceeds the device's maxStorageBufferRange");
  const uint32_t per_chunk =
      uint32_t(std::min<uint64_t>({fit, rows, tuning.vocab_chunk_rows ? tuning.vocab_chunk_rows : rows}));
  // Block formats stay as stored (ops::qmatmul, ops::embed_blocks).
  const std::vector<std::byte> all = blocks_ ? std::vector<std::byte>(t.bytes.begin(), t.bytes.end()) : stored(t, act);
  const size_t dense_row = blocks_ ? row_bytes_ : size_t(dim) * e;
  for (uint32_t first = 0; first < rows; first += per_chunk) {
    const uint32_t count = std::min(per_chunk, rows - first);
    const auto begin = all.begin() + long(size_t(first) * dense_row);
    std::vector<std::byte> part(begin, begin + long(size_t(count) * dense_row));
    const std::string label = chunks_.empty() && count == rows ? name
                              : name + " rows " + std::to_string(first) + ".." + std::to_string(first + count - 1);
    if (blocks_) part.resize(part.size() + ops::qmatmul_padding);
    else part = ops::strided_rows(std::move(part), count, dim * e, ld_ * e);
    chunks_.push_back({first, count, upload(vk, part, label)});
    widest_ = std::max(widest_, count);
  }
}

void VocabMatrix::gather(gpu::Recorder& rec, const Buffer& ids, const Buffer& x, uint32_t n) const {
  for (const Chunk& c : chunks_) {
    if (blocks_)
      ops::embed_blocks(vk_, rec, {.ids = ids, .table = c.rows, .x = x, .rows = n, .dim = dim_, .first = c.first,
                                   .count = c.count, .format = *blocks_});
    else
      ops::embed(vk_, rec, {.ids = ids, .table = c.rows, .x = x, .rows = n, .dim = dim_, .ld = ld_,
                            .first = c.first, .count = c.count, .s = act_});
  }
}

uint32_t VocabMatrix::block_rows(uint32_t m) const {
  const uint64_t fit = vk_.info.max_storage_buffer_range / (uint64_t(widest_) * 4);
  return uint32_t(std::clamp<uint64_t>(fit, 1, m));
}

void VocabMatrix::reserve(uint32_t m, Workspace& ws) const {
  const uint32_t mb = block_rows(m);
  ws.need("logits", size_t(mb) * widest_ * 4);
  if (mb < m) ws.need("lm_rows", size_t(mb) * ld_ * ops::element_bytes(act_));
}

void VocabMatrix::project(gpu::Recorder& rec, const Workspace& ws, const Buffer& x, uint32_t m, const Buffer& out) const {
  const uint32_t mb = block_rows(m);
  const VkDeviceSize row_bytes = VkDeviceSize(ld_) * ops::element_bytes(act_);
  const Buffer& logits = ws["logits"];
  for (uint32_t m0 = 0; m0 < m; m0 += mb) {
    const uint32_t rows = std::min(mb, m - m0);
    // A block of x's rows, where x has more rows than one block's logits hold.
    const Buffer& xb = mb < m ? ws["lm_rows"] : x;
    if (mb < m) rec.copy(x, xb, std::vector<VkBufferCopy>{{m0 * row_bytes, 0, rows * row_bytes}});
    // One chunk and one block of rows into device memory (the device's top-k
    // reads them): its logits are `out` as they are, no copy. Logits read back
    // keep the copy: a shader writing host memory crosses the bus in small writes.
    const bool direct = chunks_.size() == 1 && mb >= m && !out.mapped();
    for (const Chunk& c : chunks_) {
      const Buffer& y = direct ? out : logits;
      if (blocks_)
        ops::qmatmul(vk_, rec, {.x = xb, .w = c.rows, .wtype = *blocks_, .y = y, .M = rows, .N = c.count,
                                .K = dim_, .s = act_, .y_f32 = true, .ldx = ld_});
      else
        ops::matmul(vk_, rec, {.x = xb, .w = c.rows, .y = y, .M = rows, .N = c.count, .K = dim_, .s = act_,
                               .y_f32 = true, .ldx = ld_, .ldw = ld_});
      if (direct) break;
      // Row r of the chunk's logits is out[m0 + r, first .. first + count).
      std::vector<VkBufferCopy> regions;
      for (uint32_t r = 0; r < rows; ++r)
        regions.push_back({VkDeviceSize(r) * c.count * 4, (VkDeviceSize(m0 + r) * rows_ + c.first) * 4,
                           VkDeviceSize(c.count) * 4});
      rec.copy(logits, out, std::move(regions));
    }
  }
}

uint64_t VocabMatrix::bytes() const {
  uint64_t n = 0;
  for (const Chunk& c : chunks_) n += c.rows.size();
  return n;
}

}  // namespace vkgate::nn
