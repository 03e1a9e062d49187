// Internal: the kernel choices the VKGATE_* switches change (README
// "Environment"), as one plain value. The Context reads the environment once,
// when it is made (Context::Impl::tuning); every plan copies that value when it
// is made and records with it (gpu::Recorder::tuning), so a plan replays and
// re-records exactly the kernels its buffers were sized for, whatever the
// environment says later. Nothing below the Context reads the environment.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace vkgate::gpu {

// A tensor-core kernel written for coopmat.glsl: off, on tensor cores, or its
// algorithm with the matrix products emulated in scalar code (CPU drivers;
// tests).
enum class Coopmat { off, tensor, emulated };

// The form of a linear-attention layer's recurrence (GLA, Gated DeltaNet): the
// layer's choice by token count, or forced (tests, triage).
enum class RecurrenceMode { automatic, recurrent, chunk };

// The tile of shaders/matmul_staged.comp, its specialization constants: wm × wn
// subgroups, each multiplying fm × fn fragments of 16 × 16, tk k per slice of
// shared memory, 1 or 2 slices (stages) in flight, fp16 partial sums per slice
// (acc16). Chosen per device (tuning_from_environment) and swept by `vkgate
// bench --op matmul --tiles`; written "WMxWNxFMxFNxTK" with "s1" for one
// stage and "h" for acc16, e.g. "2x4x4x2x32", "2x2x4x4x64s1h".
struct StagedTile {
  uint32_t wm = 2, wn = 4, fm = 4, fn = 2, tk = 32, stages = 2;
  bool acc16 = false;
  std::string name() const;
  // nullopt where `text` is not a tile written as above.
  static std::optional<StagedTile> parse(std::string_view text);
  bool operator==(const StagedTile&) const = default;
};

// The GPU decode kernel of the block formats (shaders/qmatmul.comp, ≤ 8 rows
// of X): 32-element slices per lane (SLICE_ROWS) with `columns` output columns
// per subgroup and `unroll` slices per lane in flight, or the first kernel's
// 8-element chunks per lane (ROWS, !slices). Chosen per device
// (tuning_from_environment) and swept by `vkgate bench --op qmatmul --tiles`;
// written "slicesCxU" or "chunks", e.g. "slices1x1", "slices2x2".
struct QrowsTile {
  bool slices = true;
  uint32_t columns = 1, unroll = 1;
  std::string name() const;
  // nullopt where `text` is not a tile written as above.
  static std::optional<QrowsTile> parse(std::string_view text);
  bool operator==(const QrowsTile&) const = default;
};

// The tile of shaders/flash_coopmat.comp (prefill attention on tensor cores):
// strips of 16 query rows per workgroup (one per subgroup; fewer where shared
// memory holds fewer), keys per block, and fp16 partial sums: of P·V per
// block (pv), or of P·V and q·k per 64 dims (both). Chosen per device
// (tuning_from_environment) and swept by `vkgate bench --op attention
// --tiles`; written "SxK" with "p" for pv and "h" for both, e.g. "4x32",
// "2x64h".
struct FlashTile {
  enum class Acc16 : uint32_t { none = 0, pv = 1, both = 3 };  // flash_coopmat.comp's ACC16
  uint32_t strips = 4, keys = 32;
  Acc16 acc16 = Acc16::none;
  std::string name() const;
  // nullopt where `text` is not a tile written as above.
  static std::optional<FlashTile> parse(std::string_view text);
  bool operator==(const FlashTile&) const = default;
};

// The most rows of X matvec.comp takes (its MAX_M: 8, or 16 where more rows
// are asked for).
constexpr uint32_t kMatvecMaxRows = 16;

struct Tuning {
  bool fused = true;            // !VKGATE_DISABLE_FUSED: fused flash attention where preferred
  // VKGATE_DEVICE_TOP_K (0/1; unset: on, except on CPU drivers): a generation
  // whose sampler needs only each row's most likely ids
  // (Sampler::top_candidates) has them chosen on the device
  // (Model::extend_top), not the whole row read back.
  bool device_top_k = true;
  bool pass_fusion = true;      // !VKGATE_DISABLE_PASS_FUSION: qkv_prepare, RMSNorm folded into matvec
  // !VKGATE_DISABLE_DECODE_PREPARE (with pass_fusion): a decode step's
  // qkv_prepare done by flash_decode_prep.comp (ops::flash_prepares_in_decode), not
  // a pass of its own. Unmeasured on a GPU: tools/gpu_run.sh sweep's `splits`
  // step times both.
  bool decode_prepare = true;
  bool split_kv = true;         // !VKGATE_DISABLE_SPLIT_KV: split-key (flash-decoding) passes
  bool flash_decode = true;     // !VKGATE_DISABLE_FLASH_DECODE: flash_decode.comp for few rows
  // VKGATE_DECODE_MERGE_SPLITS (0–65535; VKGATE_DISABLE_DECODE_MERGE=1: 0):
  // up to this many key splits, flash_decode.comp's last workgroup of a row
  // tile merges them, instead of an attention_combine.comp pass. One
  // workgroup's merge reads all its rows' partial results, the combine pass
  // a workgroup per row: 32 is a guess (2026-11-28, no GPU) that keeps
  // qwen3-0.6b's 8 splits over 512 keys merged and Qwen3-Next's 128 over 32k
  // in the pass; tools/gpu_run.sh sweep's `splits` step times both.
  uint32_t decode_merge_splits = 32;
  // VKGATE_DIRECT_DISPATCH (0/1; unset: on, except on CPU drivers):
  // dispatches carry their workgroup counts in the command buffer
  // (vkCmdDispatch) instead of reading them from the parameter arena
  // (vkCmdDispatchIndirect). A GPU's front end then need not fetch each
  // count before it launches, in a decode step of ~170 small dispatches in a
  // chain. An update that changes a count must record the step again, which
  // a decode step never does: its plan (key splits included) is sized for
  // the sequence's capacity. Unmeasured on a GPU: tools/gpu_run.sh sweep's
  // `splits` step times both.
  bool direct_dispatch = false;
  // VKGATE_FENCE_SPIN_US (0–100000; unset: 1000, except 0 on CPU drivers,
  // whose queue threads the polling would slow): a replayed recording's
  // wait sleeps through about 80 % of its last run's time, then polls the
  // fence for up to twice this many µs (at most 20 % of that time each way)
  // before sleeping again, so that the host sees the end of a decode step at
  // once rather than when the driver wakes it. 0: it sleeps throughout.
  uint32_t fence_spin_us = 0;
  bool direct_io = true;        // !VKGATE_DISABLE_DIRECT_IO: decode steps read/write mapped staging memory
  bool split_k = true;          // !VKGATE_DISABLE_SPLIT_K: split-K for matmuls with few output tiles
  bool matvec = true;           // !VKGATE_DISABLE_MATVEC: matrix-vector kernels for few rows
  // VKGATE_MATVEC_ROWS (1–16): the most rows a GPU's product takes in the
  // matrix-vector kernel, more in the tiled ones. 16 would serve a batched
  // decode step of 9–16 sequences (H200: the tiled kernel took 63 µs per
  // projection of 16 rows, 2026-11-28); unmeasured, so 8 until a sweep.
  uint32_t matvec_rows = 8;
  bool cpu_matmul = true;       // !VKGATE_DISABLE_CPU_MATMUL: the CPU-driver GEMMs (gemm_cpu.glsl)
  // VKGATE_CPU_GEMM_ROWS (a multiple of 8 up to 64): the tallest tile those
  // GEMMs take (matmul, the attention products, the MoE experts). A taller
  // tile runs faster, but llvmpipe compiles it far more slowly: once per
  // machine (its disk cache), and in part again in every process (2–4 s to
  // create the f32 matmul's 64-row pipeline with the cache warm). Its first
  // compile took 80 s against 20 s for 32 rows, and a golden qwen3_next run
  // through the CLI took 407 s with a cold cache against 20 s with 8-row
  // tiles (2 cores, GALLIVM_PERF=nopt, 2026-11-29). The test command takes 8
  // (tools/quickstart.sh); the op tests of these kernels take the default.
  uint32_t cpu_gemm_rows = 64;
  bool cpu_attention = true;    // !VKGATE_DISABLE_CPU_ATTENTION: unfused attention on CPU drivers
  bool step_attention = true;   // !VKGATE_DISABLE_STEP_ATTENTION: attention_step.comp for short steps on CPU drivers
  // VKGATE_STEP_ATTENTION_GPU=1: a batched step's attention in
  // attention_step.comp on GPUs too, up to 8 sequences a dispatch, where each
  // sequence otherwise takes its own qkv_prepare, flash_decode and combine
  // (H200, 16 sequences: 1,344 dispatches, 18.8 of the step's 27.4 ms,
  // 2026-11-28). Its workgroups walk every key, so long caches favour
  // flash_decode's splits; unmeasured, so off until a sweep.
  bool step_attention_gpu = false;
  // VKGATE_STEP_SEQUENCES: sequences per attention_step dispatch of a batched
  // step (0: as many as the device binds); for tests and triage of the groups.
  uint32_t step_sequences = 0;
  bool subgroup_reduce = true;  // !VKGATE_DISABLE_SUBGROUP_REDUCE: one-subgroup row reductions on CPU drivers
  uint32_t matmul_splits = 0;   // VKGATE_MATMUL_SPLITS: forced split-K count (0: the rule)
  uint32_t flash_splits = 0;    // VKGATE_FLASH_SPLITS: forced key splits (0: the plan's choice)
  uint32_t flash_split_keys = 0;  // VKGATE_FLASH_SPLIT_KEYS: the fewest keys the plan gives a split (0: per kernel)
  uint32_t flash_decode_rows = 0;  // VKGATE_FLASH_DECODE_ROWS: flash_decode.comp's most rows per workgroup (0: 8)
  uint64_t score_bytes = uint64_t(64) << 20;  // VKGATE_SCORE_BYTES: the unfused score matrix's budget
  // VKGATE_VOCAB_CHUNK_ROWS: rows per chunk of the embedding table and lm_head
  // (0: as many as one device buffer holds); for tests and triage.
  uint32_t vocab_chunk_rows = 0;
  // VKGATE_MOE_SHARD_EXPERTS: experts per device buffer of a sparse MLP's
  // weights (0: as many as one buffer holds); for tests and triage.
  uint32_t moe_shard_experts = 0;
  // VKGATE_GLA_SEGMENT_TOKENS: tokens per recording of a GLA layer's forward
  // (0: as many as its buffers hold); for tests and triage of the segments.
  uint32_t gla_segment_tokens = 0;
  RecurrenceMode gla_mode = RecurrenceMode::automatic;  // VKGATE_GLA_MODE (recurrent | chunk)
  RecurrenceMode gdn_mode = RecurrenceMode::automatic;  // VKGATE_GDN_MODE (recurrent | chunk)
  Coopmat coopmat_flash = Coopmat::tensor;    // VKGATE_COOPMAT_FLASH (0 | 1 | emulate)
  Coopmat coopmat_staged = Coopmat::off;      // VKGATE_COOPMAT_STAGED (0 | 1 | emulate)
  StagedTile staged_tile;                     // VKGATE_MATMUL_TILE (the device's default)
  QrowsTile qrows_tile;                       // VKGATE_QROWS_TILE
  FlashTile flash_tile;                       // VKGATE_FLASH_TILE
  // Not from the environment: a Model sets it from ModelOptions::int8_activations
  // (Q8_0/Q4_0 projections quantize their input to int8 blocks and take
  // integer dot products where DeviceInfo::integer_dot_product).
  bool int8_activations = false;
};

}  // namespace vkgate::gpu
