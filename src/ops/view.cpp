#include "ops/ops.hpp"

namespace vkgate::ops {

uint32_t element_bytes(Storage s) { return s == Storage::f32 ? 4 : 2; }

std::string variant(const char* source, Storage s, const char* tail) {
  const char* type = s == Storage::f16 ? "_f16" : s == Storage::bf16 ? "_bf16" : "";
  return std::string(source) + type + (s == Storage::f32 ? "" : tail);
}

View btd_view(uint32_t tokens, uint32_t heads, uint32_t dim) {
  return View{0, tokens * heads * dim, heads * dim, 1, dim, 0};
}

View bhsd_view(uint32_t heads, uint32_t seq, uint32_t dim, uint32_t first) {
  return View{first * dim, heads * seq * dim, dim, 1, seq * dim, 0};
}

}  // namespace vkgate::ops
