// Internal: a whole file mapped read-only, for the readers that validate a
// file in place (safetensors.cpp, gguf.cpp).
#pragma once

#include <cstddef>
#include <string>

namespace vkgate {

struct Mapping {
  void* data = nullptr;  // null for an empty file (mmap of zero bytes fails; the parsers report it as too short)
  size_t size = 0;
};
// Error(io) naming `path` when it cannot be opened, is not a regular file or cannot be mapped.
Mapping map_file(const std::string& path);
void unmap_file(Mapping& m) noexcept;

}  // namespace vkgate
