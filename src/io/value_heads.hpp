// Internal: Qwen3.5's value-head order in GGUF files. llama.cpp's converter
// (_LinearAttentionVReorderBase) stores the Gated DeltaNet's value heads
// tiled, position i·nk + j for the checkpoint's grouped head g = j·r + i
// (value head g reads key head j = g / r), so that ggml broadcasts the key
// heads; gguf_model_tensors puts them back, gguf_export_model tiles them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include "vkgate/gdn_config.hpp"

namespace vkgate::value_heads {

// The model types whose GGUF files hold their value heads tiled.
inline bool tiled_in_gguf(const std::string& model_type) {
  return model_type == "qwen3_5_text" || model_type == "qwen3_5_moe_text";
}

struct Order {
  static Order of(const GdnConfig& g) { return {g.num_key_heads, g.group_size()}; }
  int64_t nk = 1, r = 1;  // key heads, value heads per key head
  int64_t heads() const { return nk * r; }
  bool identity() const { return nk == 1 || r == 1; }
  int64_t grouped(int64_t tiled) const { return (tiled % nk) * r + tiled / nk; }
  int64_t tiled(int64_t grouped) const { return (grouped % r) * nk + grouped / r; }
};

// `bytes` (whole rows of `row_bytes`) with the heads() blocks of `unit` rows
// from row `first` on moved, block h to block to(h); the other rows kept.
template <class To>
std::vector<std::byte> move_row_blocks(std::span<const std::byte> bytes, size_t row_bytes, int64_t first, int64_t unit,
                                       const Order& o, To to) {
  std::vector<std::byte> out(bytes.begin(), bytes.end());
  const size_t base = size_t(first) * row_bytes, block = size_t(unit) * row_bytes;
  for (int64_t h = 0; h < o.heads(); ++h)
    std::memcpy(out.data() + base + size_t(to(h)) * block, bytes.data() + base + size_t(h) * block, block);
  return out;
}

// Each row of `bytes` (rows of heads() chunks of `chunk` bytes: a weight's
// input columns, by value head) with chunk h moved to chunk to(h).
template <class To>
std::vector<std::byte> move_column_blocks(std::span<const std::byte> bytes, size_t chunk, const Order& o, To to) {
  std::vector<std::byte> out(bytes.size());
  const size_t row = chunk * size_t(o.heads());
  for (size_t at = 0; at < bytes.size(); at += row)
    for (int64_t h = 0; h < o.heads(); ++h)
      std::memcpy(out.data() + at + size_t(to(h)) * chunk, bytes.data() + at + size_t(h) * chunk, chunk);
  return out;
}

}  // namespace vkgate::value_heads
