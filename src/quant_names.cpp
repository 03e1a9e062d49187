// The names of ggml's types (vkgate/quant.hpp): the --quant spellings and
// ggml's type ids, apart from the block algorithms in quant.cpp.
#include <algorithm>
#include <array>
#include <cctype>
#include <utility>

#include "vkgate/quant.hpp"

namespace vkgate {

namespace {
constexpr std::pair<std::string_view, DType> kQuantNames[] = {
    {"q8_0", DType::Q8_0}, {"q4_0", DType::Q4_0}, {"q4_1", DType::Q4_1}, {"q5_0", DType::Q5_0},
    {"q5_1", DType::Q5_1}, {"q2_k", DType::Q2_K}, {"q3_k", DType::Q3_K}, {"q4_k", DType::Q4_K},
    {"q5_k", DType::Q5_K}, {"q6_k", DType::Q6_K}, {"iq4_nl", DType::IQ4_NL}, {"iq4_xs", DType::IQ4_XS},
};
}  // namespace

std::vector<std::string_view> quant_spellings() {
  std::vector<std::string_view> out;
  for (const auto& [spelling, dtype] : kQuantNames) out.push_back(spelling);
  return out;
}

std::optional<DType> parse_quant(std::string_view name) noexcept {
  for (const auto& [spelling, dtype] : kQuantNames) {
    if (name.size() == spelling.size() &&
        std::equal(name.begin(), name.end(), spelling.begin(),
                   [](char a, char b) { return std::tolower(static_cast<unsigned char>(a)) == b; })) {
      return dtype;
    }
  }
  return std::nullopt;
}

namespace {

// enum ggml_type (ggml/include/ggml.h at llama.cpp de3ff81) by id, with the
// names ggml_type_name gives; ids ggml has removed are marked so.
constexpr std::array<const char*, 43> kGgmlTypeNames = {
    "f32",     "f16",     "q4_0",    "q4_1",    "q4_2 (removed from ggml)", "q4_3 (removed from ggml)",
    "q5_0",    "q5_1",    "q8_0",    "q8_1",    "q2_K",    "q3_K",    "q4_K",    "q5_K",
    "q6_K",    "q8_K",    "iq2_xxs", "iq2_xs",  "iq3_xxs", "iq1_s",   "iq4_nl",  "iq3_s",
    "iq2_s",   "iq4_xs",  "i8",      "i16",     "i32",     "i64",     "f64",     "iq1_m",
    "bf16",    "q4_0_4_4 (removed from ggml)", "q4_0_4_8 (removed from ggml)", "q4_0_8_8 (removed from ggml)",
    "tq1_0",   "tq2_0",   "iq4_nl_4_4 (removed from ggml)", "iq4_nl_4_8 (removed from ggml)",
    "iq4_nl_8_8 (removed from ggml)", "mxfp4", "nvfp4", "q1_0", "q2_0",
};

struct GgmlId {
  DType dtype;
  uint32_t id;
};

constexpr GgmlId kGgmlIds[] = {
    {DType::F32, 0},   {DType::F16, 1},   {DType::Q4_0, 2},  {DType::Q4_1, 3},  {DType::Q5_0, 6},
    {DType::Q5_1, 7},  {DType::Q8_0, 8},  {DType::Q2_K, 10}, {DType::Q3_K, 11}, {DType::Q4_K, 12},
    {DType::Q5_K, 13}, {DType::Q6_K, 14}, {DType::IQ4_NL, 20}, {DType::IQ4_XS, 23},
    {DType::I32, 26},  {DType::I64, 27},  {DType::F64, 28},  {DType::BF16, 30},
};

}  // namespace

std::optional<DType> dtype_from_ggml(uint32_t ggml_type) noexcept {
  for (const GgmlId& g : kGgmlIds) {
    if (g.id == ggml_type) return g.dtype;
  }
  return std::nullopt;
}

uint32_t ggml_type_of(DType dtype) noexcept {
  for (const GgmlId& g : kGgmlIds) {
    if (g.dtype == dtype) return g.id;
  }
  return UINT32_MAX;  // unreachable: every DType has a ggml id
}

std::string ggml_type_name(uint32_t ggml_type) {
  if (ggml_type < kGgmlTypeNames.size()) return kGgmlTypeNames[ggml_type];
  return "type " + std::to_string(ggml_type);
}

}  // namespace vkgate
