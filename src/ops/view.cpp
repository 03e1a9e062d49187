#include "ops/ops.hpp"

namespace vkgate::ops {

View btd_view(uint32_t tokens, uint32_t heads, uint32_t dim) {
  return View{0, tokens * heads * dim, heads * dim, 1, dim, 0};
}

View bhsd_view(uint32_t heads, uint32_t seq, uint32_t dim, uint32_t first) {
  return View{first * dim, heads * seq * dim, dim, 1, seq * dim, 0};
}

}  // namespace vkgate::ops
