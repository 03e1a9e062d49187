// ggml's block formats on the host: Q8_0, Q4_0, Q4_1, Q5_0, Q5_1 (blocks of
// 32 with an fp16 scale, and min for the _1 forms), the k-quants Q2_K, Q3_K,
// Q4_K, Q5_K, Q6_K (super-blocks of 256 with quantized sub-block scales) and
// the non-linear IQ4_NL (32) and IQ4_XS (256), whose 4-bit codes index a
// 16-value table (ggml's kvalues_iq4nl) rather than a uniform grid, laid out
// bit for bit as ggml and GGUF store them, so that a GGUF tensor goes to the
// device as it is in the file. Rows are quantized along their last dimension
// (the input features of a [out, in] weight), `block_elements` at a time.
//
// Thread safety: pure functions; call them from any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "vkgate/dtype.hpp"

namespace vkgate {

// Bytes of `elements` elements of `dtype` (a whole number of blocks), or
// nullopt when `elements` is not a multiple of block_elements(dtype).
std::optional<size_t> stored_bytes(DType dtype, int64_t elements) noexcept;

// The fp32 values of `out.size()` elements stored as `dtype` in `blocks`
// (ggml's dequantize_row_*: y = d·q (Q*_0), d·q + m (Q*_1), the k-quants'
// d·scale·q − dmin·min per sub-block, the IQ4 forms' d·scale·table[q], in
// fp32 as ggml computes them). Throws Error(shape_mismatch) when the sizes disagree.
void dequantize(DType dtype, std::span<const std::byte> blocks, std::span<float> out);

// `values` (a whole number of blocks) quantized to `dtype` by ggml's
// reference quantizers (quantize_row_*_ref; for IQ4_NL quantize_iq4_nl,
// which llama-quantize runs where the _ref takes no trials): the bytes
// llama-quantize writes without an importance matrix, deterministic, so a
// test can compare bytes with ggml's. Throws Error(invalid_argument) for a dtype that
// is not a block format or a length that is not whole blocks.
std::vector<std::byte> quantize(DType dtype, std::span<const float> values);

// The block format a `--quant` / `--type` spelling names: "q8_0", "q4_0",
// "q4_1", "q5_0", "q5_1", "q2_k", "q3_k", "q4_k", "q5_k", "q6_k", "iq4_nl",
// "iq4_xs" (case-insensitive); nullopt otherwise.
std::optional<DType> parse_quant(std::string_view name) noexcept;
// Those spellings, in the order the help and error texts list them.
std::vector<std::string_view> quant_spellings();

// ggml's type ids (enum ggml_type: F32 0, F16 1, Q4_0 2, Q4_1 3, Q5_0 6,
// Q5_1 7, Q8_0 8, Q2_K 10, Q3_K 11, Q4_K 12, Q5_K 13, Q6_K 14, IQ4_NL 20,
// IQ4_XS 23, BF16 30) and back; nullopt for the ids vkgate does not read
// (IQ1-IQ3, TQ*, MXFP4, ...).
std::optional<DType> dtype_from_ggml(uint32_t ggml_type) noexcept;
uint32_t ggml_type_of(DType dtype) noexcept;  // F32/F16/BF16 and the block formats
// ggml's name of a type id ("q4_K", "iq2_xxs", ...), for error messages: "type 42" when unknown.
std::string ggml_type_name(uint32_t ggml_type);

}  // namespace vkgate
