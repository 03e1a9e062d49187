// The environment, read by the Context only: the VKGATE_* switches become one
// gpu::Tuning value when a Context is made (README "Environment").
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <string>

#include "gpu/context_impl.hpp"
#include "vkgate/error.hpp"

namespace vkgate::gpu {

bool env_flag(const char* name) {
  const char* v = std::getenv(name);
  return v && *v && std::strcmp(v, "0") != 0;
}

namespace {
// Unset: `fallback`; "emulate": emulated; "0" (or empty): off; anything else: tensor cores.
Coopmat coopmat_switch(const char* name, Coopmat fallback) {
  const char* v = std::getenv(name);
  if (!v) return fallback;
  if (std::strcmp(v, "emulate") == 0) return Coopmat::emulated;
  return env_flag(name) ? Coopmat::tensor : Coopmat::off;
}

// Unset or empty: by token count; a value other than the two forms is an error.
RecurrenceMode recurrence_mode_switch(const char* name) {
  const char* v = std::getenv(name);
  if (!v || !*v) return RecurrenceMode::automatic;
  if (std::strcmp(v, "recurrent") == 0) return RecurrenceMode::recurrent;
  if (std::strcmp(v, "chunk") == 0) return RecurrenceMode::chunk;
  throw Error(ErrorCode::invalid_argument,
              std::string(name) + "='" + v + "' is not a GLA form: use recurrent or chunk (or leave it unset)");
}

// Unset or empty: `tile` as it is; a value Tile::parse refuses is an error
// saying it is not `what`.
template <typename Tile>
void tile_switch(const char* name, Tile& tile, const char* what) {
  const char* v = std::getenv(name);
  if (!v || !*v) return;
  const std::optional<Tile> parsed = Tile::parse(v);
  if (!parsed) throw Error(ErrorCode::invalid_argument, std::string(name) + "='" + v + "' is not " + what);
  tile = *parsed;
}

uint64_t number(const char* name, uint64_t fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::strtoull(v, nullptr, 10) : fallback;
}

// Unset or empty: `fallback`; a value outside [lo, hi] (or not a number) is an error.
uint32_t bounded(const char* name, uint32_t fallback, uint32_t lo, uint32_t hi) {
  const char* v = std::getenv(name);
  if (!v || !*v) return fallback;
  uint32_t n = 0;
  const auto r = std::from_chars(v, v + std::strlen(v), n);
  if (r.ec != std::errc() || *r.ptr || n < lo || n > hi)
    throw Error(ErrorCode::invalid_argument, std::string(name) + "='" + v + "' is not a number from " +
                                                 std::to_string(lo) + " to " + std::to_string(hi));
  return n;
}
}  // namespace

std::string StagedTile::name() const {
  std::string s;
  for (uint32_t v : {wm, wn, fm, fn, tk}) {
    if (!s.empty()) s += 'x';
    s += std::to_string(v);
  }
  if (stages == 1) s += "s1";
  if (acc16) s += 'h';
  return s;
}

std::optional<StagedTile> StagedTile::parse(std::string_view text) {
  StagedTile t;
  const char* at = text.data();
  const char* end = at + text.size();
  uint32_t* fields[] = {&t.wm, &t.wn, &t.fm, &t.fn, &t.tk};
  for (size_t i = 0; i < 5; ++i) {
    if (i && (at == end || *at++ != 'x')) return std::nullopt;
    const auto r = std::from_chars(at, end, *fields[i]);
    if (r.ec != std::errc() || *fields[i] == 0 || *fields[i] > 1024) return std::nullopt;
    at = r.ptr;
  }
  const std::string_view rest(at, size_t(end - at));
  if (rest.starts_with("s1")) t.stages = 1;
  t.acc16 = rest.ends_with("h");
  if (rest.size() != (t.stages == 1 ? 2u : 0u) + (t.acc16 ? 1u : 0u)) return std::nullopt;
  return t;
}

std::string QrowsTile::name() const {
  return slices ? "slices" + std::to_string(columns) + "x" + std::to_string(unroll) : "chunks";
}

std::optional<QrowsTile> QrowsTile::parse(std::string_view text) {
  if (text == "chunks") return QrowsTile{false, 1, 1};
  if (!text.starts_with("slices")) return std::nullopt;
  QrowsTile t;
  const char* at = text.data() + 6;
  const char* end = text.data() + text.size();
  for (uint32_t* field : {&t.columns, &t.unroll}) {
    if (field == &t.unroll && (at == end || *at++ != 'x')) return std::nullopt;
    const auto r = std::from_chars(at, end, *field);
    if (r.ec != std::errc() || *field == 0 || *field > 8) return std::nullopt;
    at = r.ptr;
  }
  if (at != end) return std::nullopt;
  return t;
}

std::string FlashTile::name() const {
  return std::to_string(strips) + "x" + std::to_string(keys) +
         (acc16 == Acc16::pv ? "p" : acc16 == Acc16::both ? "h" : "");
}

std::optional<FlashTile> FlashTile::parse(std::string_view text) {
  FlashTile t;
  const char* at = text.data();
  const char* end = at + text.size();
  for (uint32_t* field : {&t.strips, &t.keys}) {
    if (field == &t.keys && (at == end || *at++ != 'x')) return std::nullopt;
    const auto r = std::from_chars(at, end, *field);
    if (r.ec != std::errc()) return std::nullopt;
    at = r.ptr;
  }
  const std::string_view rest(at, size_t(end - at));
  if (rest == "p") t.acc16 = FlashTile::Acc16::pv;
  else if (rest == "h") t.acc16 = FlashTile::Acc16::both;
  else if (!rest.empty()) return std::nullopt;
  const bool strips_ok = t.strips == 1 || t.strips == 2 || t.strips == 4 || t.strips == 8;
  if (!strips_ok || (t.keys != 32 && t.keys != 64)) return std::nullopt;
  return t;
}

namespace {
// What a device of this kind runs best without being told (BENCHMARKS.md,
// the sweeps of `vkgate bench --op matmul --tiles all`); the environment
// overrides it.
Tuning device_defaults(const DeviceInfo& d) {
  Tuning t;
  // NVIDIA (H100, driver 580, 2026-11-27): the staged kernel with 64×64 tiles
  // of four subgroups, 64 k per slice and fp16 partial sums per slice
  // (2x2x2x2x64h) ran 2.3–2.6× the direct-load kernel at prefill shapes
  // (512 × 4096 × 14336: 97.6 against 37.4 TFLOP/s) and 2.2× at 8192³; every
  // fp32-accumulating tile was slower than the direct kernel. NMSE 1.1e-7
  // against the double reference, the size of fp16 storage's own rounding.
  //
  // NVIDIA (H200, driver 580, 2026-11-28, tools/gpu_run.sh sweep):
  // flash_coopmat.comp's 2x32 tile (2 strips, 32 keys per block, fp32 sums)
  // was the fastest of nine at qwen3-0.6b's prefill attention (165.5 µs
  // against 175.4 for 4x32; fp16 partial sums 1–8 % slower, unlike the
  // matmul's) and of the three that fit head_dim 256. A decode step's splits
  // of at least 64 keys (not 128) took flash_decode from 633 to 417 µs per
  // token over 512 keys (28 layers); 256 took 848.
  if (d.vendor_id == 0x10de) {
    t.coopmat_staged = Coopmat::tensor;
    t.staged_tile = {2, 2, 2, 2, 64, 2, true};
    t.flash_tile = {2, 32, FlashTile::Acc16::none};
    t.flash_split_keys = 64;
  }
  // A CPU driver's logits are in host memory already, and one workgroup per
  // row runs on one core: lavapipe took 31 ms for 8 rows of 151,936 at k 40
  // (vkgate bench --op topk), where the host's sampler takes about 1 ms a row.
  t.device_top_k = d.type != "cpu";
  t.direct_dispatch = d.type != "cpu";
  t.fence_spin_us = d.type != "cpu" ? 1000 : 0;
  return t;
}
}  // namespace

Tuning tuning_from_environment(const DeviceInfo& device) {
  Tuning t = device_defaults(device);
  t.fused = !env_flag("VKGATE_DISABLE_FUSED");
  if (std::getenv("VKGATE_DEVICE_TOP_K")) t.device_top_k = env_flag("VKGATE_DEVICE_TOP_K");
  t.pass_fusion = !env_flag("VKGATE_DISABLE_PASS_FUSION");
  t.decode_prepare = !env_flag("VKGATE_DISABLE_DECODE_PREPARE");
  t.split_kv = !env_flag("VKGATE_DISABLE_SPLIT_KV");
  t.flash_decode = !env_flag("VKGATE_DISABLE_FLASH_DECODE");
  t.decode_merge_splits = env_flag("VKGATE_DISABLE_DECODE_MERGE")
                              ? 0
                              : bounded("VKGATE_DECODE_MERGE_SPLITS", t.decode_merge_splits, 0, 65535);
  if (std::getenv("VKGATE_DIRECT_DISPATCH")) t.direct_dispatch = env_flag("VKGATE_DIRECT_DISPATCH");
  t.fence_spin_us = bounded("VKGATE_FENCE_SPIN_US", t.fence_spin_us, 0, 100000);
  t.direct_io = !env_flag("VKGATE_DISABLE_DIRECT_IO");
  t.split_k = !env_flag("VKGATE_DISABLE_SPLIT_K");
  t.matvec = !env_flag("VKGATE_DISABLE_MATVEC");
  t.matvec_rows = bounded("VKGATE_MATVEC_ROWS", t.matvec_rows, 1, kMatvecMaxRows);
  t.cpu_matmul = !env_flag("VKGATE_DISABLE_CPU_MATMUL");
  t.cpu_gemm_rows = bounded("VKGATE_CPU_GEMM_ROWS", t.cpu_gemm_rows, 8, 64);
  if (t.cpu_gemm_rows % 8)
    throw Error(ErrorCode::invalid_argument, "VKGATE_CPU_GEMM_ROWS='" + std::to_string(t.cpu_gemm_rows) +
                                                 "' is not a multiple of 8 (the CPU GEMMs' subgroups have 8 lanes) from 8 to 64");
  t.cpu_attention = !env_flag("VKGATE_DISABLE_CPU_ATTENTION");
  t.step_attention = !env_flag("VKGATE_DISABLE_STEP_ATTENTION");
  t.step_attention_gpu = env_flag("VKGATE_STEP_ATTENTION_GPU");
  t.step_sequences = uint32_t(number("VKGATE_STEP_SEQUENCES", 0));
  t.subgroup_reduce = !env_flag("VKGATE_DISABLE_SUBGROUP_REDUCE");
  t.matmul_splits = uint32_t(number("VKGATE_MATMUL_SPLITS", 0));
  t.flash_splits = uint32_t(number("VKGATE_FLASH_SPLITS", 0));
  t.flash_split_keys = uint32_t(number("VKGATE_FLASH_SPLIT_KEYS", t.flash_split_keys));
  t.flash_decode_rows = uint32_t(number("VKGATE_FLASH_DECODE_ROWS", t.flash_decode_rows));
  t.score_bytes = number("VKGATE_SCORE_BYTES", t.score_bytes);
  t.vocab_chunk_rows = uint32_t(number("VKGATE_VOCAB_CHUNK_ROWS", 0));
  t.moe_shard_experts = uint32_t(number("VKGATE_MOE_SHARD_EXPERTS", 0));
  t.gla_segment_tokens = uint32_t(number("VKGATE_GLA_SEGMENT_TOKENS", 0));
  t.gla_mode = recurrence_mode_switch("VKGATE_GLA_MODE");
  t.gdn_mode = recurrence_mode_switch("VKGATE_GDN_MODE");
  t.coopmat_flash = coopmat_switch("VKGATE_COOPMAT_FLASH", t.coopmat_flash);
  t.coopmat_staged = coopmat_switch("VKGATE_COOPMAT_STAGED", t.coopmat_staged);
  tile_switch("VKGATE_MATMUL_TILE", t.staged_tile,
              "a tile: write WMxWNxFMxFNxTK, then s1 for one stage and h for fp16 partial sums (e.g. 2x4x4x2x32)");
  tile_switch("VKGATE_QROWS_TILE", t.qrows_tile,
              "a decode tile: write chunks, or slicesCxU with C columns per subgroup and U slices per lane in "
              "flight, each 1 to 8 (e.g. slices2x1)");
  tile_switch("VKGATE_FLASH_TILE", t.flash_tile,
              "a flash attention tile: write SxK with S strips of 16 rows (1, 2, 4 or 8) and K keys per block (32 "
              "or 64), then p for fp16 partial sums of P·V or h for those of q·k too (e.g. 2x64p)");
  return t;
}

}  // namespace vkgate::gpu
