// Internal: a vocabulary matrix [V, D] — the embedding table, or lm_head, or
// both for a model with tied embeddings — on the device in row chunks that
// each fit one device buffer (a 151,936 × 2,048 bf16 table is 594 MiB;
// lavapipe's buffers hold 128 MiB), in the activation storage with operand
// rows (ops::operand_stride), or in its block format as stored.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "gpu/recorder.hpp"
#include "gpu/tuning.hpp"
#include "nn/storage.hpp"
#include "nn/workspace.hpp"
#include "vkgate/weights.hpp"

namespace vkgate::nn {

class VocabMatrix {
 public:
  // A table in a block format stays in it, for project() (ops::qmatmul) and
  // gather() (ops::embed_blocks: the gathered rows are dequantized on the
  // device); F32/F16/BF16 go to `act`.
  VocabMatrix(Context::Impl& vk, const gpu::Tuning& tuning, const HostTensor& t, uint32_t rows, uint32_t dim,
              Storage act, const std::string& name);

  // x (fp32 [n, D]) = the rows of the ids (int32 [n], checked on the host).
  void gather(gpu::Recorder& rec, const gpu::Buffer& ids, const gpu::Buffer& x, uint32_t n) const;

  // The scratch project() needs for m rows (roles "logits", "lm_rows").
  void reserve(uint32_t m, Workspace& ws) const;
  // out (fp32 [m, V], host-visible: it need not fit a device buffer) = x·Wᵀ
  // for x [m, D] in the activation storage, rows ld() apart; in blocks of rows
  // whose logits chunk fits a device buffer.
  void project(gpu::Recorder& rec, const Workspace& ws, const gpu::Buffer& x, uint32_t m,
               const gpu::Buffer& out) const;

  uint32_t ld() const { return ld_; }
  size_t chunk_count() const { return chunks_.size(); }
  uint64_t bytes() const;

 private:
  struct Chunk {
    uint32_t first, count;
    Buffer rows;
  };
  uint32_t block_rows(uint32_t m) const;  // rows of x per block of project()

  Context::Impl& vk_;
  const gpu::Tuning tuning_;
  uint32_t rows_, dim_, ld_;
  Storage act_;
  std::vector<Chunk> chunks_;
  uint32_t widest_ = 0;  // rows of the largest chunk
  std::optional<DType> blocks_;  // the block format the chunks are kept in
  size_t row_bytes_ = 0;
};

}  // namespace vkgate::nn
