// Internal: each op records its dispatch(es) into a Recorder: pipeline choice
// (tile sizes from the device's capabilities), push constants and grid size.
// Sizes and strides are in float elements. One .cpp per op beside this file.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "gpu/memory.hpp"
#include "gpu/recorder.hpp"
#include "gpu/tuning.hpp"
#include "vkgate/config.hpp"
#include "vkgate/dtype.hpp"
#include "vkgate/gdn_config.hpp"
#include "vkgate/gla_config.hpp"
#include "vkgate/model_config.hpp"

namespace vkgate::ops {

using gpu::Buffer;
using gpu::Coopmat;
using gpu::Recorder;
using gpu::Tuning;

// Element type of an activation or weight buffer on the device; arithmetic
// is fp32 whatever the storage.
enum class Storage { f32, f16, bf16 };
uint32_t element_bytes(Storage s);
// The texel format of a uniform texel buffer view of `s`: R32_SFLOAT or
// R16_SFLOAT; bfloat16 is never read as texels (shaders/storage.glsl).
VkFormat texel_format(Storage s);
// The same as RGBA texels (4 elements per fetch): R32G32B32A32 or R16G16B16A16_SFLOAT.
VkFormat texel4_format(Storage s);
// Shader module of `source` for storage `s`: "matmul", "matmul_f16", ... plus `tail`.
std::string variant(const char* source, Storage s, const char* tail = "");

// The CPU-driver kernels (suffix "_cpu"/"_sg", define TEXEL) are for llvmpipe-
// like devices: a CPU device with a fixed 8-lane subgroup whose texel buffers
// are as large as its storage buffers (they read operands through uniform
// texel views, Binding::texel_format: a gather there, where a storage-buffer
// load is a branchy loop over the lanes).
bool cpu_kernels(const DeviceInfo& d);

// The tensor-core kernels written for coopmat.glsl (flash_coopmat.comp,
// matmul_staged.comp) are chosen by Tuning::coopmat_flash / coopmat_staged.
// `c` where the device can run it (tensor cores, or a CPU driver with fp16
// arithmetic for the emulation), else off.
Coopmat coopmat_usable(const DeviceInfo& d, Coopmat c);
// Subgroup lanes the kernel is compiled for: 32 on tensor cores, 8 emulated.
uint32_t coopmat_lanes(Coopmat c);
// matmul_staged.comp's workgroup tile, and why it cannot take an M×N×K
// product on `d` (rows ldx, ldw apart) on kernel `c` (empty: it can).
// The tile kernel `c` runs for `t`: the emulation's 8-lane subgroups take 16 k
// per slice, to fit in 32 KiB of shared memory.
gpu::StagedTile staged_tile_run(gpu::StagedTile t, Coopmat c);
uint32_t staged_tile_m(const gpu::StagedTile& t);
uint32_t staged_tile_n(const gpu::StagedTile& t);
std::string staged_tile_misfit(const DeviceInfo& d, const gpu::StagedTile& t, Coopmat c, uint32_t M, uint32_t N,
                               uint32_t K, uint32_t ldx, uint32_t ldw);
// The tiles `vkgate bench --op matmul --tiles all` sweeps and the tests check.
std::vector<gpu::StagedTile> staged_tile_candidates();

// Workgroup size and shader-name suffix for a shader that reduces each row in
// one workgroup (shaders/reduce.glsl): with cpu_kernels and subgroup
// arithmetic, one subgroup ("_sg": no shared memory or barrier; texel reads)
// unless Tuning::subgroup_reduce is off; otherwise a power of two from
// 32 up to 256, no wider than `len` needs.
struct RowReduce {
  uint32_t wg;
  const char* suffix;
};
RowReduce row_reduce(const DeviceInfo& d, const Tuning& t, uint32_t len);

// Mirrors `View` in shaders/common.glsl: element (bt, h, d), bt = b·T + t, at
// base + b·sb + t·st + (h / groups)·sg + (h % groups)·sh + d.
struct View {
  uint32_t base = 0, sb = 0, st = 0, groups = 1, sg = 0, sh = 0;
};
// A contiguous [B, T, heads, dim] tensor.
View btd_view(uint32_t tokens, uint32_t heads, uint32_t dim);

// Mirrors `Gate` in shaders/gate.glsl: how a gate reads its raw scores out of
// the projections (element (bt, head at the gate's position, j < width) of
// `view`), activates them, shares them over the heads and combines them with
// the gated value.
struct Gate {
  View view;
  uint32_t width = 0;   // scores per head: 1, or the gated row's dim
  uint32_t heads = 1;   // heads at the position (the shared mean's count)
  uint32_t shared_heads = 0;  // 1: every head takes the mean over `heads`
  uint32_t activation = uint32_t(GateActivation::sigmoid);
  uint32_t combine = uint32_t(GateCombine::multiply);
};
// A contiguous [B, heads, S, dim] tensor whose token t sits at position `first + t`.
View bhsd_view(uint32_t heads, uint32_t seq, uint32_t dim, uint32_t first = 0);

// The dense gate (G5) in matmul's epilogue: each output y[m, n] (after the
// bias, before the residual) combined with act(scores[at + m·ld + n]), the
// raw scores stored as the product's storage.
struct EpilogueGate {
  const Buffer& scores;
  uint32_t at, ld;
  GateActivation activation;
  GateCombine combine;
};
// Its fields in the push constants of every kernel with shaders/epilogue.glsl
// (gate_act, gate_combine, gate_at, ldg; gate_act 0: no gate).
template <class Push>
void set_gate(Push& push, const EpilogueGate* gate) {
  if (!gate) return;
  push.gate_act = uint32_t(gate->activation) + 1;
  push.gate_combine = uint32_t(gate->combine);
  push.gate_at = gate->at;
  push.ldg = gate->ld;
}
// y[M,N] = x[M,K]·w[N,K]ᵀ (+ bias[N]) (gated) (+ residual[M,N]); bias/residual
// may be null and are fp32. x and w are stored as `s`; y as `s`, or fp32 when
// y_f32. Rows of x and w are ldx and ldw elements apart (0: K). With `partial`
// (at least matmul_splits(...)·M·N floats) the tiled GPU kernels may split K
// across workgroups and add the fp32 partial sums in a second pass.
struct MatmulArgs {
  const Buffer& x;
  const Buffer& w;
  const Buffer& y;
  uint32_t M, N, K;
  Storage s = Storage::f32;
  const Buffer* bias = nullptr;
  const Buffer* residual = nullptr;
  bool y_f32 = false;
  uint32_t ldx = 0, ldw = 0;
  const Buffer* partial = nullptr;
  const EpilogueGate* gate = nullptr;
};
void matmul(Context::Impl& ctx, Recorder& rec, const MatmulArgs& a);
// The K splits matmul() takes for this product when given a partial buffer (1:
// none): on GPUs, for the tiled and tensor-core kernels when the output has
// fewer than 256 tiles, each split at least 256 of K; Tuning::matmul_splits
// forces N (at most one per 16 of K), !Tuning::split_k none.
uint32_t matmul_splits(const DeviceInfo& d, const Tuning& t, uint32_t M, uint32_t N, uint32_t K,
                       Storage s = Storage::f32, uint32_t ldx = 0, uint32_t ldw = 0);

// y[M,N] = RMSNorm(x)·w[N,K]ᵀ (+ bias[N]) in one pass, for ≤ 8 rows on GPUs
// (matvec.comp, NORM_X): x fp32 [M, K] dense, norm_w fp32 [K], w and y stored
// as `s`. With `glu`, the MLP's gate and up projections and its GLU at once:
// w [2N, K] holds the gate's N rows then the up's (bias their 2N values), and
// y[m, n] = act(gate)·up, rows ldy apart (0: N). matmul_rmsnorm_applies says where the pass is used: not on CPU
// drivers, for more rows, rows not 8-element multiples, or without
// Tuning::matvec or pass_fusion (the caller then runs rmsnorm and matmul).
// matmul_rmsnorm throws for shapes its kernel cannot take.
bool matmul_rmsnorm_applies(const DeviceInfo& d, const Tuning& t, uint32_t M, uint32_t K, uint32_t ldw = 0);
struct MatmulRmsnormArgs {
  const Buffer& x;
  const Buffer& norm_w;
  NormKind kind;
  float eps;
  const Buffer& w;
  const Buffer& y;
  uint32_t M, N, K;
  Storage s = Storage::f32;
  const Buffer* bias = nullptr;
  uint32_t ldw = 0;
  std::optional<Activation> glu;
  uint32_t ldy = 0;
};
void matmul_rmsnorm(Context::Impl& ctx, Recorder& rec, const MatmulRmsnormArgs& a);
// An RMSNorm a product applies to its rows of X on the way (the quantized
// decode kernel: QmatmulArgs::norm).
struct RowNorm {
  const Buffer& w;  // fp32 [K]
  NormKind kind;
  float eps;
};

// The row stride (elements) for a GEMM operand of K elements per row in
// storage `s`: K, except under the CPU kernels when the row is a multiple of
// 128 bytes. There the 64 rows of X and of W that a tile reads at each k
// would fall into a few sets of the L1 cache (a 4 KiB row maps all of them to
// one) and evict each other; one 64-byte line of padding spreads them over
// every set. lavapipe, matmul 1024³ f32: 19.7 GFLOP/s dense, 28 padded.
uint32_t operand_stride(const DeviceInfo& d, const Tuning& t, uint32_t K, Storage s);
// `rows` rows of `row_bytes` each, copied `stride_bytes` apart (the gaps zero);
// `dense` itself, not a copy, when there are no gaps (weights can be large).
std::vector<std::byte> strided_rows(std::vector<std::byte> dense, size_t rows, size_t row_bytes,
                                    size_t stride_bytes);

// Whether GEMMs (matmul, the attention products) take the CPU-driver kernels
// of shaders/gemm_cpu.glsl: cpu_kernels with subgroup shuffles, unless
// Tuning::cpu_matmul is off.
bool cpu_gemm(const DeviceInfo& d, const Tuning& t);
// Columns per lane of gemm_cpu.glsl's register tile (RN), in every kernel that
// includes it (matmul, the attention products, the MoE experts).
inline constexpr uint32_t kCpuRN = 8;
// Spec constants {workgroup, RM, RN} of those kernels for M rows of
// operands in `s`, and the grid (x over columns, y over row blocks) for an
// M×N product.
std::vector<uint32_t> cpu_gemm_spec(const Tuning& t, uint32_t M, Storage s = Storage::f32);
gpu::Grid cpu_gemm_grid(const Tuning& t, uint32_t M, uint32_t N, Storage s = Storage::f32);

// RMSNorm of `dim` elements for every (bt, head), bt < rows. x and y may be the
// same buffer. y is stored as `s`; x as `s`, or fp32 when x_f32. w is fp32.
struct RmsnormArgs {
  const Buffer& x;
  View in;
  const Buffer& w;
  const Buffer& y;
  View out;
  uint32_t rows, tokens, heads, dim;
  NormKind kind;
  float eps;
  Storage s = Storage::f32;
  bool x_f32 = false;
};
void rmsnorm(Context::Impl& ctx, Recorder& rec, const RmsnormArgs& a);

// RoPE on the first `rotary` dims in `style`'s pairs, the rest copied. `table`
// holds cos then sin, each [tokens, rotary/2] (see rope_table). x and y may be
// the same buffer.
struct RopeArgs {
  const Buffer& x;
  View in;
  const Buffer& table;
  const Buffer& y;
  View out;
  uint32_t rows, tokens, heads, dim, rotary;
  Storage s = Storage::f32;
  RopeStyle style = RopeStyle::rotate_half;
};
void rope(Context::Impl& ctx, Recorder& rec, const RopeArgs& a);

// RoPE's inverse frequencies [rotary_dim/2] and the factor cos and sin are
// multiplied by, for c.rope_scaling as transformers' ROPE_INIT_FUNCTIONS
// compute them, in double. `seq_len` is the length of the sequence once the
// step is appended (the last position + 1): dynamic NTK's θ follows it, as
// transformers' dynamic_rope_update does (the cached keys keep the rotation
// of the step that wrote them). The reference computes its own.
struct RopeFrequencies {
  std::vector<double> inv_freq;
  double attention_factor = 1.0;
};
RopeFrequencies rope_frequencies(const BlockConfig& c, int64_t seq_len);
// cos then sin, each [tokens, rotary/2], for positions first..first+tokens−1,
// computed in double and times the attention factor, as floats (+1 float so
// that the buffer is never empty: rope_table_floats).
std::vector<float> rope_table(const RopeFrequencies& f, uint32_t tokens, uint32_t first);
// The table of a step of `tokens` new positions after `first` cached ones of a block of config c.
std::vector<float> rope_table(const BlockConfig& c, uint32_t tokens, uint32_t first);
size_t rope_table_floats(uint32_t tokens, uint32_t rotary);

// dst = src for the first `bytes` (a multiple of 16) by a shader, not a copy command.
void copy_shader(Context::Impl& ctx, Recorder& rec, const Buffer& src, const Buffer& dst, uint64_t bytes);

// y (bt, h, d) = gated(y, scores of g), for bt < rows, h < heads, d < dim, in
// place, y read and written through `y_view` (a pass of its own: the unfused
// attention's gate, and any position's gate when Tuning::pass_fusion is off).
struct GateArgs {
  const Buffer& g;
  const Gate& gating;
  const Buffer& y;
  View y_view;
  uint32_t rows, tokens, heads, dim;
  Storage s = Storage::f32;
};
void gate(Context::Impl& ctx, Recorder& rec, const GateArgs& a);

// The MLP's gated product (shaders/glu.comp): h[r, i] = act(g[r, i]) · u[r, i]
// for the fused projection P [rows, 2I] (gate outputs, then up outputs; rows
// ld_p apart) into h [rows, I] (rows ld_h apart). P and h stored as `s`.
struct GluArgs {
  const Buffer& proj;
  const Buffer& h;
  uint32_t rows, inter;
  Activation act;
  Storage s;
  uint32_t ld_p = 0, ld_h = 0;
};
void glu(Context::Impl& ctx, Recorder& rec, const GluArgs& a);

// The embedding gather (shaders/embed.comp): x[r, :] = table[ids[r] − first, :]
// for the ids within the table chunk of `count` rows starting at row `first`
// (others are left as they are: another chunk's dispatch writes them). ids
// int32 [rows], table rows `ld` elements apart stored as `s`, x fp32 [rows, dim].
struct EmbedArgs {
  const Buffer& ids;
  const Buffer& table;
  const Buffer& x;
  uint32_t rows, dim, ld, first, count;
  Storage s;
};
void embed(Context::Impl& ctx, Recorder& rec, const EmbedArgs& a);
// The same gather from a table chunk kept in one of ggml's block formats
// (`format`: a GGUF's token_embd as stored, rows stored_bytes(format, dim)
// bytes apart, the buffer padded by qmatmul_padding bytes): the rows the ids
// name are dequantized on the device, to the fp32 values vkgate::dequantize
// gives. dim is whole blocks.
struct EmbedBlocksArgs {
  const Buffer& ids;
  const Buffer& table;
  const Buffer& x;
  uint32_t rows, dim, first, count;
  DType format;
};
void embed_blocks(Context::Impl& ctx, Recorder& rec, const EmbedBlocksArgs& a);
// Every row of a block-format matrix (rows stored_bytes(format, dim) bytes
// apart, padded as above) dequantized into rows out0.. of x, dim apart, in
// storage s (f32 or f16): a quantized weight as a dense operand (nn::Projection's
// prefill on tensor cores).
struct DequantizeRowsArgs {
  const Buffer& table;
  DType format;
  const Buffer& x;
  uint32_t rows, dim, out0;
  Storage s;
};
void dequantize_rows(Context::Impl& ctx, Recorder& rec, const DequantizeRowsArgs& a);

// The paper's statistics, reduced on the device (shaders/stats.comp) into the
// fp32 buffer `out` at float offset `at`, deterministically:
// first_token_attn  out[at + h] = mean over (b, t) of probs[b, h, t, 0] (probs
//                   [B, H, T, ·] fp32, rows ld apart);
// gate_scores       out[at] = Σ s, out[at + 1] = the count of s < 0.1, over
//                   the activated scores s (before head sharing) of every
//                   (bt < rows, head, j < width) of the gate (g stored as `s`);
// max_abs           out[at] = max |x| over `count` fp32 values.
void first_token_attn(Context::Impl& ctx, Recorder& rec, const Buffer& probs, uint32_t batch, uint32_t heads,
                      uint32_t tokens, uint32_t ld, const Buffer& out, uint32_t at);
void gate_scores(Context::Impl& ctx, Recorder& rec, const Buffer& g, const Gate& gating, uint32_t rows,
                 uint32_t tokens, Storage s, const Buffer& out, uint32_t at);
void max_abs(Context::Impl& ctx, Recorder& rec, const Buffer& x, uint32_t count, const Buffer& out, uint32_t at);

// The k largest of each row of fp32 x [rows, n] (rows ld apart), for a
// sampler that reads k values instead of n (shaders/topk.comp): out [rows,
// k + 1] of uint32 pairs, out[r][0..k) = (value bits, id), largest first and
// equal values the lower id first; out[r][k] = (how many more ids equal the
// k-th value, 0). 1 ≤ k ≤ min(n, kTopKMax).
constexpr uint32_t kTopKMax = 256;
void top_k(Context::Impl& ctx, Recorder& rec, const Buffer& x, uint32_t rows, uint32_t n, uint32_t ld, uint32_t k,
           const Buffer& out);

// Gated linear attention by its recurrence (shaders/gla_recurrent.comp: a
// pass computing scale·φ(q), k̃ and α per element, then the scan), for
// `tokens` tokens against the carried state [B, H, dk, dv] (fp32, read at
// the start and written back at the end): o [B·T, H, dv] fp32. q, k, v and
// the forget gate's logits are read through views ((bt, head, d); q over the
// H query heads, the others over the KV heads, head h reading KV head
// h / (H/KV)); the projections stored as `s`. dk is a pipeline constant
// (the state's rows live in registers).
struct GlaScan {
  const Buffer& proj;
  const Buffer& gk;  // may be `proj`
  View q_view, k_view, v_view, gk_view;
  const Buffer& state;
  const Buffer& o;   // fp32 [B·T, H, parts, dv]: parts that gla_output sums (gla_row_blocks(dk) here)
  const Buffer& qs;  // scratch, fp32: [B·T, H, dk], and [B·T, KV, dk] each for ks and as
  const Buffer& ks;
  const Buffer& as;
  uint32_t batch, tokens, heads, kv_heads, dk, dv;
  FeatureMap feature_map;
  bool convex;
  float normalizer;
  std::optional<double> clamp_min;
  float scale;
};
void gla_recurrent(Context::Impl& ctx, Recorder& rec, const GlaScan& a, Storage s = Storage::f32);
// The blocks of state rows the scan splits d_k into (each ≤ 32 rows).
uint32_t gla_row_blocks(uint32_t dk);

// The same in GLA's chunkwise form (shaders/gla_chunk.comp), for prefill:
// chunks of kGlaChunk tokens, the state carried from chunk to chunk in
// registers, the intra-chunk part as matrix products. `a` as for the scan,
// with `as` holding the cumulative log gates and o gla_chunk_parts parts;
// the rest of the scratch below (fp32).
constexpr uint32_t kGlaChunk = 64;
struct GlaChunkScratch {
  const Buffer& qd;      // [B·T, H, dk]
  const Buffer& qr;      // [B·T, H, dk]
  const Buffer& kd;      // [B·T, KV, dk]
  const Buffer& kr;      // [B·T, KV, dk]
  const Buffer& scores;  // [B, H, chunks, kGlaChunk, kGlaChunk]
};
void gla_chunked(Context::Impl& ctx, Recorder& rec, const GlaScan& a, const GlaChunkScratch& c, Storage s);
// Whether a recording of `tokens` tokens per sequence takes the chunkwise
// form (Tuning::gla_mode), and the parts of o that form writes.
bool gla_chunkwise(const Tuning& t, uint32_t tokens);
uint32_t gla_chunk_parts(const DeviceInfo& d, const Tuning& t, uint32_t dk);

// GLA's per-head output before o_proj (shaders/gla_output.comp): y[bt,
// h·dv + d] = RMSNorm(o)·w (with `norm`) ⊙ swish(g) (with `gate`, g read
// through `g_view` in `proj`); y rows y_ld apart, stored as `s`.
struct GlaOutput {
  const Buffer& o;
  const Buffer& proj;
  View g_view;
  const Buffer* norm;  // the output norm's weight, fp32 [dv]; null: none
  bool gate;
  float eps;
  const Buffer& y;
  uint32_t y_ld, rows, tokens, heads, dv, parts;  // rows: B·T; parts: of o, summed
  // Head h = j·y_tile + i written at head position i·(heads / y_tile) + j
  // (Gated DeltaNet's value heads tiled for a Qwen3.5 GGUF's out_proj); 1: in order.
  uint32_t y_tile = 1;
};
void gla_output(Context::Impl& ctx, Recorder& rec, const GlaOutput& a, Storage s = Storage::f32);

// ---- Gated DeltaNet (include/vkgate/gdn_config.hpp gives the equations) ----
// A layer records, after its projections (matmul: in_proj_qkvz and in_proj_ba,
// possibly one fused product), gdn_forward — or its parts in this order:
//   gdn_prepare    the causal conv + SiLU + l2 norms + β and g (shaders/gdn_prepare.comp),
//                  then the conv state replaced by the last K−1 inputs (in place)
//   gdn_recurrent  the delta rule token by token (shaders/gdn_recurrent.comp)
//   gdn_output     RMSNorm(o)·norm.weight·silu(z) per value head (shaders/gla_output.comp)
// and then out_proj (matmul) on y. Steps (T = 1…8) are the same calls on few
// tokens against the carried states. For prefill, gdn_chunked (chunks of
// kGdnChunk tokens, the WY representation: shaders/gdn_chunk.comp) takes
// gdn_recurrent's place between the same passes; it needs the chunk scratch.
struct GdnShape {
  uint32_t batch = 1, tokens = 1;
  uint32_t nk = 0, nv = 0, dk = 0, dv = 0, kernel = 0;  // key/value heads, head dims, conv kernel K
  uint32_t group() const { return nv / nk; }                        // r
  uint32_t channels() const { return 2 * nk * dk + nv * dv; }       // C
  uint32_t qkvz_group() const { return 2 * dk + 2 * group() * dv; }  // in_proj_qkvz's columns per key head
  uint64_t rows() const { return uint64_t(batch) * tokens; }        // B·T
};
// The shape of a layer of config `c` on `batch` sequences of `tokens` tokens.
GdnShape gdn_shape(const GdnConfig& c, uint32_t batch, uint32_t tokens);

// The fp32 scratch a recording of `s` takes, in floats per buffer (each ≥ 1).
struct GdnScratchFloats {
  uint64_t mixed;  // [B·T, C]: q (scaled), k (normalised), v after the conv
  uint64_t bg;     // [B·T, nv, 2]: β and g
  uint64_t o;      // [B·T, nv, dv]: the delta rule's output
  // gdn_chunked only:
  uint64_t chunk_w;  // [B·T, nv, dk]: W
  uint64_t chunk_u;  // [B·T, nv, dv]: Ũ
  uint64_t chunk_p;  // [B, nv, chunks, kGdnChunk, kGdnChunk]: the decayed q·k of each chunk
};
constexpr uint32_t kGdnChunk = 64;
GdnScratchFloats gdn_scratch_floats(const GdnShape& s);
// The same scratch as buffers, each at least as large as gdn_scratch_floats says.
struct GdnScratch {
  const Buffer& mixed;
  const Buffer& bg;
  const Buffer& o;
  const Buffer* chunk_w = nullptr;  // gdn_chunked only (else may be null)
  const Buffer* chunk_u = nullptr;
  const Buffer* chunk_p = nullptr;
};

// Everything one layer's recording reads and writes. The projections are
// stored as the op's Storage; every other buffer is fp32.
struct GdnArgs {
  // in_proj_qkvz's output: row bt (= b·T + t) at bt·qkvz_ld + qkvz_base, grouped
  // per key head j as [q_j (dk) | k_j (dk) | v (r·dv) | z (r·dv)].
  const Buffer& qkvz;
  uint32_t qkvz_base, qkvz_ld;
  // in_proj_ba's output: row bt at bt·ba_ld + ba_base, per key head [b (r) | a (r)]
  // (may be the same buffer as qkvz: a fused projection).
  const Buffer& ba;
  uint32_t ba_base, ba_ld;
  const Buffer& conv_weight;  // [C, K] (conv1d.weight [C, 1, K])
  const Buffer& a_log;        // [nv]
  const Buffer& dt_bias;      // [nv]
  const Buffer& norm_weight;  // [dv]
  float eps;                  // rms_norm_eps
  const Buffer& conv_state;   // [B, C, K−1] oldest first: read, then replaced by the new one
  const Buffer& state;        // [B, nv, dk, dv]: read, then replaced by the final state
  const Buffer& y;            // out_proj's input: row bt at bt·y_ld, value head h at h·dv
  uint32_t y_ld;
  GdnScratch scratch;
  // y's value heads in llama.cpp's tiled order (GdnConfig::out_proj_tiled):
  // head h = j·r + i at (i·nk + j)·dv.
  bool y_tiled = false;
};
void gdn_prepare(Context::Impl& ctx, Recorder& rec, const GdnArgs& a, const GdnShape& s, Storage st = Storage::f32);
void gdn_recurrent(Context::Impl& ctx, Recorder& rec, const GdnArgs& a, const GdnShape& s);
// Throws Error(invalid_argument) without the chunk scratch.
void gdn_chunked(Context::Impl& ctx, Recorder& rec, const GdnArgs& a, const GdnShape& s);
void gdn_output(Context::Impl& ctx, Recorder& rec, const GdnArgs& a, const GdnShape& s, Storage st = Storage::f32);
// Prepare, the recurrence in `form`, output.
enum class GdnForm { recurrent, chunk };
void gdn_forward(Context::Impl& ctx, Recorder& rec, const GdnArgs& a, const GdnShape& s, Storage st = Storage::f32,
                 GdnForm form = GdnForm::recurrent);
// Columns of the state per workgroup of gdn_recurrent: where the device runs
// full subgroups with subgroup arithmetic (and Tuning::subgroup_reduce), a
// subgroup per column holding it in registers; else an invocation per column
// holding it in shared memory.
uint32_t gdn_recurrent_columns(const DeviceInfo& d, const Tuning& t, uint32_t dk, uint32_t dv);

}  // namespace vkgate::ops
