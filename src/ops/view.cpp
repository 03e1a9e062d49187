#include "gpu/context_impl.hpp"
#include "gpu/vk.hpp"
#include "ops/ops.hpp"

namespace vkgate::ops {

uint32_t element_bytes(Storage s) { return s == Storage::f32 ? 4 : 2; }

VkFormat texel_format(Storage s) {
  return s == Storage::f32 ? VK_FORMAT_R32_SFLOAT : s == Storage::f16 ? VK_FORMAT_R16_SFLOAT : VK_FORMAT_UNDEFINED;
}

VkFormat texel4_format(Storage s) {
  return s == Storage::f32   ? VK_FORMAT_R32G32B32A32_SFLOAT
         : s == Storage::f16 ? VK_FORMAT_R16G16B16A16_SFLOAT
                             : VK_FORMAT_UNDEFINED;
}

std::string variant(const char* source, Storage s, const char* tail) {
  const char* type = s == Storage::f16 ? "_f16" : s == Storage::bf16 ? "_bf16" : "";
  return std::string(source) + type + (s == Storage::f32 ? "" : tail);
}

bool cpu_kernels(const DeviceInfo& d) {
  return d.type == "cpu" && d.min_subgroup_size == 8 && d.max_subgroup_size == 8 &&
         d.max_texel_buffer_elements >= d.max_storage_buffer_range / 2;
}

Coopmat coopmat_usable(const DeviceInfo& d, Coopmat c) {
  if (c == Coopmat::tensor) return d.coopmat_f16 ? c : Coopmat::off;
  if (c == Coopmat::emulated) return cpu_kernels(d) && d.fp16_arithmetic ? c : Coopmat::off;
  return Coopmat::off;
}

uint32_t coopmat_lanes(Coopmat c) { return c == Coopmat::emulated ? 8 : 32; }  // EMU_SG in the shaders' variant lines

RowReduce row_reduce(const DeviceInfo& d, const Tuning& t, uint32_t len) {
  if (cpu_kernels(d) && d.subgroup_arithmetic && t.subgroup_reduce)
    return {8, "_sg"};
  uint32_t wg = 32;
  while (wg < len && wg < 256 && wg * 2 <= d.max_workgroup_invocations) wg *= 2;
  return {wg, ""};
}

View btd_view(uint32_t tokens, uint32_t heads, uint32_t dim) {
  return View{0, tokens * heads * dim, heads * dim, 1, dim, 0};
}

View bhsd_view(uint32_t heads, uint32_t seq, uint32_t dim, uint32_t first) {
  return View{first * dim, heads * seq * dim, dim, 1, seq * dim, 0};
}

}  // namespace vkgate::ops
