// Benchmarks of single ops and of the whole block, timed with GPU timestamps.
// Every case first checks its result against the CPU reference, then runs
// warm-up and timed repetitions of one recorded command buffer.
//
// Thread safety: each function uses the Context like a GatedAttention does
// (its own command buffers and buffers), so benchmarks on one Context may run
// on several threads, though their timings then disturb each other. Results
// are plain values.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "vkgate/config.hpp"
#include "vkgate/gdn_config.hpp"
#include "vkgate/gla_config.hpp"
#include "vkgate/context.hpp"
#include "vkgate/dtype.hpp"
#include "vkgate/precision.hpp"

namespace vkgate::bench {

struct Options {
  int warmup = 3;
  int reps = 10;
};

struct Stat {
  double median_us = 0, min_us = 0, max_us = 0;  // over the timed repetitions
};

struct Case {
  std::string name;
  Stat time;                                        // all dispatches of one run
  std::vector<std::pair<std::string, Stat>> stages;  // per dispatch, in order
  double flop = 0;   // per run (dense count; causal attention does not halve it)
  double bytes = 0;  // per run: operands read once and results written once
  double nmse = 0, max_abs = 0;
  double nmse_bound = 0;    // the check's own bound (int8 activations), else 0: the precision's
  std::string check;        // what was compared with the reference
  uint64_t device_bytes = 0;  // device memory the case holds
  double gflops() const { return time.median_us > 0 ? flop / time.median_us / 1e3 : 0; }
  double gbps() const { return time.median_us > 0 ? bytes / time.median_us / 1e3 : 0; }
};

// The device's measured ceilings: a large buffer copy and a large fp32 matmul.
struct Peak {
  double copy_gbps = 0;       // (read + write) bytes / time: the faster of the two below
  double copy_command_gbps = 0, copy_shader_gbps = 0;  // vkCmdCopyBuffer; a vec4 copy shader
  double matmul_gflops = 0;
};

Case matmul(Context& ctx, int64_t M, int64_t N, int64_t K, Precision dtype, const Options& opt);
// `--op matmul --tiles LIST`: the fp16 product once per kernel of LIST on the
// same data ("direct": matmul_coopmat.comp; a gpu::StagedTile name; "all");
// tensor cores, or their emulation on CPU drivers. Kernels that cannot take
// the product are named on stderr and skipped.
std::vector<Case> matmul_tiles(Context& ctx, int64_t M, int64_t N, int64_t K, const Options& opt,
                               const std::string& list);
// Y = X·Wᵀ with W in a block format (ggml's, as a GGUF stores it), checked
// against the double product of the dequantized weights; bytes count W as stored.
// int8: X quantized to int8 blocks and multiplied with integer dot products
// (ops::quantize_q8 + ops::qmatmul_dot, both timed; Q8_0 and Q4_0).
// More than 8 rows of fp16 on tensor cores (ops::qmatmul_dequantizes, as a
// model's projection): W dequantized to fp16, then the fp16 matmul, both timed.
Case qmatmul(Context& ctx, int64_t M, int64_t N, int64_t K, DType wtype, Precision act, const Options& opt,
             bool int8 = false);
// `--op qmatmul --tiles LIST` (1 to 8 rows): the product once per GPU decode
// kernel of LIST on the same data ("chunks", a gpu::QrowsTile "slicesCxU",
// "all": ops::qrows_tile_candidates), on CPU drivers too.
std::vector<Case> qmatmul_tiles(Context& ctx, int64_t M, int64_t N, int64_t K, DType wtype, Precision act,
                                const Options& opt, const std::string& list);
// Attention of [batch, heads, T, head_dim] queries against T keys: the fused
// flash kernel, or (fused = false) scores → softmax → P·V through a T×T buffer.
Case attention(Context& ctx, int64_t batch, int64_t T, int64_t heads, int64_t kv_heads, int64_t head_dim,
               bool causal, Precision dtype, const Options& opt, bool fused = true);
// `--op attention --tiles LIST` (fp16): the fused product once per tile of
// flash_coopmat.comp in LIST (a gpu::FlashTile name; "all":
// ops::flash_tile_candidates) on the same data, on tensor cores or their
// emulation on CPU drivers. Tiles that do not fit are named on stderr and skipped.
std::vector<Case> attention_tiles(Context& ctx, int64_t batch, int64_t T, int64_t heads, int64_t kv_heads,
                                  int64_t head_dim, bool causal, const Options& opt, const std::string& list);
// Why `--op OP --tiles LIST` names no kernel the sweep knows (an item that is
// neither "all" nor, per op, "direct" or a StagedTile, "chunks" or a
// QrowsTile, a FlashTile), or "" when every item parses: the CLI refuses
// before a device opens, and the sweeps above with the same words.
std::string tile_list_problem(const std::string& op, const std::string& list);
Case rmsnorm(Context& ctx, int64_t rows, int64_t dim, const Options& opt);
// Each row's k largest of fp32 logits [rows, n] (ops::top_k: what a sampler reads instead of the row).
Case top_k(Context& ctx, int64_t rows, int64_t n, int64_t k, const Options& opt);
Case rope(Context& ctx, int64_t rows, int64_t heads, int64_t head_dim, int64_t rotary, const Options& opt);
Case softmax(Context& ctx, int64_t rows, int64_t keys, const Options& opt);
Case gate(Context& ctx, int64_t rows, int64_t heads, int64_t head_dim, int64_t gate_width, const Options& opt);
// The whole block with seeded random weights: prefill (past = 0) or decode.
Case block(Context& ctx, const BlockConfig& cfg, int batch, int tokens, int past, Precision precision,
           const Options& opt);
// A gated linear attention layer (fla's forms: low-rank forget gate of rank
// 16, swish-gate output norm, attn_norm) with seeded random weights on
// `tokens` tokens from a zero state; checked against reference::gla_forward.
// `form`: the recurrence's form, or the layer's own choice by token count
// (VKGATE_GLA_MODE when set).
enum class GlaForm { automatic, recurrent, chunk };
Case gla(Context& ctx, const GlaConfig& cfg, int batch, int tokens, Precision precision, const Options& opt,
         GlaForm form = GlaForm::automatic);
// A Gated DeltaNet layer (no input norm) with seeded random weights on
// `tokens` tokens from zero states; its first tokens checked against
// reference::gdn_forward. `form` as gla's (VKGATE_GDN_MODE for automatic).
Case gdn(Context& ctx, const GdnConfig& cfg, int batch, int tokens, Precision precision, const Options& opt,
         GlaForm form = GlaForm::automatic);
Peak peak(Context& ctx, const Options& opt);

// One JSON document: device, peak (if measured) and every case with at least
// median_us, gflops and gbps.
std::string to_json(const DeviceInfo& device, const std::vector<Case>& cases, const Peak* peak);

}  // namespace vkgate::bench
