#include "vkgate/block.hpp"

#include <cmath>
#include <cstring>
#include <limits>
#include <map>

#include "finite.hpp"
#include "gpu/context_impl.hpp"
#include "gpu/memory.hpp"
#include "gpu/recorder.hpp"
#include "gpu/transfer.hpp"
#include "ops/ops.hpp"
#include "vkgate/error.hpp"

namespace vkgate {

using gpu::Buffer;
using gpu::MemoryKind;

namespace {

// Up to this many tokens (decode steps) the shaders read the hidden states and
// write the output through mapped staging memory (Plan::x_in, y_out); longer
// inputs are copied, in bulk, to and from device memory.
constexpr size_t kDirectIoTokens = 8;

// q_proj (and gate_proj) output columns, seen as views over the projection
// output P [B·T, n_cols]. DESIGN.md §3: Qwen3-Next interleaves [q_h | g_h] per
// head, the official code groups [q of G heads | G gates] per KV group, and
// the separate layout appends gate_proj's rows after all queries. All three
// are "groups of Gl heads, each group [Gl·Dh queries | Gl·gw gates]" with
// Gl = 1, G and H respectively.
struct ProjectionLayout {
  uint32_t cols = 0;                  // columns of P
  uint32_t k_col = 0, v_col = 0;      // first column of k and v
  uint32_t groups = 1, group_stride = 0;
  uint32_t head_dim = 0, gate_width = 0;

  explicit ProjectionLayout(const BlockConfig& c) {
    head_dim = uint32_t(c.head_dim);
    gate_width = uint32_t(c.gate_width());
    groups = c.gate_layout == GateLayout::qwen3_next         ? 1
             : c.gate_layout == GateLayout::official_grouped ? uint32_t(c.group_size())
                                                             : uint32_t(c.num_heads);
    group_stride = groups * (head_dim + gate_width);
    const uint32_t qg = uint32_t(c.num_heads) * (head_dim + gate_width);
    k_col = qg;
    v_col = qg + uint32_t(c.kv_dim());
    cols = v_col + uint32_t(c.kv_dim());
  }
  ops::View query(uint32_t tokens) const { return {0, tokens * cols, cols, groups, group_stride, head_dim}; }
  ops::View gate(uint32_t tokens) const {
    return {groups * head_dim, tokens * cols, cols, groups, group_stride, gate_width};
  }
  ops::View key(uint32_t tokens) const { return {k_col, tokens * cols, cols, 1, head_dim, 0}; }
  ops::View value(uint32_t tokens) const { return {v_col, tokens * cols, cols, 1, head_dim, 0}; }
};

// Row blocks of the fused projection weight [q_proj (+ gate_proj) ; k_proj ; v_proj].
std::vector<float> to_f32(const HostTensor& t) {
  const size_t n = size_t(t.numel());
  std::vector<float> out(n);
  const std::byte* p = t.bytes.data();
  for (size_t i = 0; i < n; ++i) {
    uint16_t h;
    switch (t.dtype) {
      case DType::F32: std::memcpy(&out[i], p + 4 * i, 4); break;
      case DType::F16: std::memcpy(&h, p + 2 * i, 2); out[i] = half_to_float(h); break;
      case DType::BF16: std::memcpy(&h, p + 2 * i, 2); out[i] = bf16_to_float(h); break;
      case DType::F64: { double d; std::memcpy(&d, p + 8 * i, 8); out[i] = float(d); break; }
    }
  }
  return out;
}

using ops::Storage;

Storage storage_of(Precision p) {
  return p == Precision::fp16 ? Storage::f16 : p == Precision::bf16 ? Storage::bf16 : Storage::f32;
}

// fp32 values as `s` elements at dst (the host side of activations that cross
// the API: KV cache in and out, gate rows for statistics).
void encode(std::span<const float> v, Storage s, void* dst) {
  if (s == Storage::f32) {
    std::memcpy(dst, v.data(), v.size_bytes());
    return;
  }
  auto* out = static_cast<uint16_t*>(dst);
  for (size_t i = 0; i < v.size(); ++i) out[i] = s == Storage::f16 ? float_to_half(v[i]) : float_to_bf16(v[i]);
}

std::vector<float> decode(const void* src, size_t n, Storage s) {
  std::vector<float> out(n);
  if (s == Storage::f32) {
    std::memcpy(out.data(), src, n * 4);
    return out;
  }
  const auto* in = static_cast<const uint16_t*>(src);
  for (size_t i = 0; i < n; ++i) out[i] = s == Storage::f16 ? half_to_float(in[i]) : bf16_to_float(in[i]);
  return out;
}

// A weight in storage type `s`: its bytes as they are when the dtype already
// matches (a bf16 checkpoint run in bf16 is never converted), else via fp32.
std::vector<std::byte> stored(const HostTensor& t, Storage s) {
  const bool same = (s == Storage::f32 && t.dtype == DType::F32) || (s == Storage::f16 && t.dtype == DType::F16) ||
                    (s == Storage::bf16 && t.dtype == DType::BF16);
  if (same) return std::vector<std::byte>(t.bytes.begin(), t.bytes.end());
  const std::vector<float> f = to_f32(t);
  std::vector<std::byte> out(f.size() * ops::element_bytes(s));
  encode(f, s, out.data());
  return out;
}

std::vector<std::byte> concat(std::initializer_list<std::vector<std::byte>> parts) {
  std::vector<std::byte> out;
  for (const auto& p : parts) out.insert(out.end(), p.begin(), p.end());
  return out;
}

// NaN in every element, for each storage type.
uint32_t nan_word(Storage s) {
  return s == Storage::f32 ? 0x7fc00000u : s == Storage::f16 ? 0x7e007e00u : 0x7fc07fc0u;
}

}  // namespace

struct GatedAttention::Impl {
  Context& ctx;
  Context::Impl& vk;
  BlockConfig cfg;
  BlockOptions options;
  // The Context's kernel choices when the block was made: its weight layout
  // and every plan follow them (gpu/tuning.hpp).
  const gpu::Tuning tuning;
  ProjectionLayout layout;
  bool poison = false;

  Storage act;  // weights and activations on the device
  Buffer norm_w, w_qkv, b_qkv, qn_w, kn_w, w_o, b_o;
  // Row strides (elements) of w_qkv and w_o, and of the activations that meet
  // them: padded under the CPU kernels (ops::operand_stride).
  uint32_t ld_hidden = 0, ld_heads = 0;

  // A resident-cache plan is keyed with past = −1 and re-recorded when the
  // cache length changes (the positions are in its push constants).
  struct Key {
    int batch, tokens, past;
    bool mask, cache, stats;
    auto operator<=>(const Key&) const = default;
  };
  bool resident(const Key& k) const { return k.past < 0; }
  struct Plan {
    Key key;
    Buffer x_up, x, xn, proj, q, k, v, scores, attn, y, y_down, rope_up, rope;
    // What the shaders read as hidden states and the rope table, and write the
    // output to: the device copies, or for a few tokens the mapped staging
    // buffers themselves, which saves a copy each way and its barrier.
    const Buffer *x_in = nullptr, *rope_in = nullptr, *y_out = nullptr;
    int past = 0;  // positions before the new tokens (for a resident plan: as last recorded)
    Buffer kv_up, mask_up, mask;          // inputs beyond hidden_states, when used
    Buffer k_down, v_down, scores_down, proj_down;  // outputs beyond y, when asked for
    // Fused flash attention (no score matrix) unless statistics need the
    // probabilities, VKGATE_DISABLE_FUSED is set or the device runs the
    // unfused path faster (ops::flash_preferred).
    bool fused = false;
    // The projection applies the input RMSNorm (ops::matmul_rmsnorm), so xn
    // is not allocated. Decided once: re-recording must not read the
    // environment again.
    bool norm_in_projection = false;
    uint32_t chunk = 0;  // queries per chunk of the unfused attention
    uint32_t attn_ld = 0;  // row stride of attn
    // Row stride of the scores and the mask: the keys (past + T), or for a
    // resident plan its capacity rounded to 4, which whatever the cache's
    // length keeps the kernels it was recorded with.
    uint32_t score_ld = 0;
    ops::FlashPlan flash;
    Buffer partial;  // split-key partial results
    Buffer mm_partial;  // split-K partial sums of the projections (shared: they run in turn)
    std::unique_ptr<gpu::Recorder> rec;
  };
  std::map<Key, std::unique_ptr<Plan>> plans;
  Plan* last = nullptr;
  Buffer cache_k, cache_v;  // resident cache [B, KV, capacity, Dh] in the activation type
  int cache_batch = 0, cache_capacity = 0, cache_len = 0;

  Impl(Context& c, const BlockConfig& config, const BlockOptions& opts)
      : ctx(c), vk(c.impl()), cfg(config), options(opts), tuning(vk.tuning), layout(config),
        act(storage_of(opts.precision)) {
    if (act != Storage::f32 && !vk.info.storage16)
      throw Error(ErrorCode::unsupported, std::string("precision ") + to_string(opts.precision) + " needs 16-bit storage buffers (storageBuffer16BitAccess), which " +
                                              vk.info.name + " does not support");
  }

  Buffer buffer(size_t elements, Storage s, MemoryKind kind, const std::string& name) {
    return vk.allocator->allocate(elements * ops::element_bytes(s), kind, name);
  }
  Buffer device(size_t elements, Storage s, const std::string& name) {
    return buffer(elements, s, MemoryKind::device, name);
  }
  Buffer upload(const std::vector<std::byte>& bytes, const std::string& name) {
    Buffer b = vk.allocator->allocate(bytes.size(), MemoryKind::device, name);
    gpu::upload(vk, b, bytes.data(), bytes.size());
    return b;
  }

  // Projection weights in the activation storage type; norm weights and biases in fp32.
  void upload_weights(const TensorMap& w) {
    auto weight = [&](const std::string& name) { return stored(w.at(name), act); };
    auto f32 = [&](const std::string& name) { return stored(w.at(name), Storage::f32); };
    const bool separate_gate = cfg.gate_layout == GateLayout::separate && cfg.gate_kind != GateKind::none;
    const std::vector<std::byte> none;
    norm_w = upload(f32("input_layernorm.weight"), "input_layernorm.weight");
    const size_t D = size_t(cfg.hidden_size), HDh = size_t(cfg.num_heads) * size_t(cfg.head_dim),
                 e = ops::element_bytes(act);
    ld_hidden = ops::operand_stride(vk.info, tuning, uint32_t(D), act);
    ld_heads = ops::operand_stride(vk.info, tuning, uint32_t(HDh), act);
    w_qkv = upload(ops::strided_rows(concat({weight("q_proj.weight"), separate_gate ? weight("gate_proj.weight") : none,
                                             weight("k_proj.weight"), weight("v_proj.weight")}),
                                     layout.cols, D * e, ld_hidden * e),
                   "q_proj+k_proj+v_proj.weight");
    if (cfg.qkv_bias)
      b_qkv = upload(concat({f32("q_proj.bias"), separate_gate ? f32("gate_proj.bias") : none, f32("k_proj.bias"),
                             f32("v_proj.bias")}),
                     "q_proj+k_proj+v_proj.bias");
    if (cfg.use_qk_norm) {
      qn_w = upload(f32("q_norm.weight"), "q_norm.weight");
      kn_w = upload(f32("k_norm.weight"), "k_norm.weight");
    }
    w_o = upload(ops::strided_rows(weight("o_proj.weight"), D, HDh * e, ld_heads * e), "o_proj.weight");
    if (cfg.o_bias) b_o = upload(f32("o_proj.bias"), "o_proj.bias");
  }

  Plan& plan(const Key& key) {
    if (auto it = plans.find(key); it != plans.end()) return *it->second;
    auto p = std::make_unique<Plan>();
    p->key = key;
    p->past = resident(key) ? cache_len : key.past;
    // Keys allocated per (batch, KV head): the resident cache's capacity, or past + T.
    const size_t B = size_t(key.batch), T = size_t(key.tokens), BT = B * T;
    const size_t S = resident(key) ? size_t(cache_capacity) : T + size_t(key.past);
    const size_t D = size_t(cfg.hidden_size), H = size_t(cfg.num_heads), KV = size_t(cfg.num_kv_heads),
                 Dh = size_t(cfg.head_dim);
    const Storage f32 = Storage::f32;
    p->x_up = buffer(BT * D, f32, MemoryKind::upload, "hidden_states (staging)");
    const bool direct_io = BT <= kDirectIoTokens && tuning.direct_io;
    if (!direct_io) p->x = device(BT * D, f32, "hidden_states");
    p->x_in = direct_io ? &p->x_up : &p->x;
    p->norm_in_projection = ops::matmul_rmsnorm_applies(vk.info, tuning, uint32_t(BT), uint32_t(D), ld_hidden);
    if (!p->norm_in_projection) p->xn = device(BT * ld_hidden, act, "normed hidden_states");
    p->proj = device(BT * layout.cols, act, "projections");
    p->q = device(B * H * T * Dh, act, "q");
    if (!resident(key)) {
      p->k = device(B * KV * S * Dh, act, "key cache");
      p->v = device(B * KV * S * Dh, act, "value cache");
    }
    // Split-key planning sees the longest attention this plan can run.
    p->score_ld = uint32_t(resident(key) ? (S + 3) / 4 * 4 : S);
    const size_t L = p->score_ld;
    ops::AttentionShape shape{uint32_t(B), uint32_t(H), uint32_t(KV), uint32_t(T), uint32_t(S), uint32_t(Dh)};
    shape.score_stride = p->score_ld;
    p->fused = !key.stats && tuning.fused && ops::flash_preferred(vk.info, tuning);
    if (p->fused) {
      p->flash = ops::flash_plan(vk.info, shape, act, ops::flash_options(tuning));
      p->partial = device(ops::flash_partial_floats(shape, p->flash), f32, "attention partial results");
    } else {
      // Statistics need every probability; otherwise the queries go in chunks
      // whose score matrix stays within ops::query_chunk's budget.
      p->chunk = key.stats ? uint32_t(T) : ops::query_chunk(tuning, shape);
      p->scores = device(B * H * size_t(p->chunk) * L, f32, "attention scores");
    }
    // The fused kernel writes dense rows.
    p->attn_ld = p->fused ? uint32_t(H * Dh) : ld_heads;
    p->attn = device(BT * p->attn_ld, act, "attention output");
    // Split-K where a projection's tiles would leave the GPU idle (ops::matmul_splits).
    const size_t proj_splits =
        ops::matmul_splits(vk.info, tuning, uint32_t(BT), layout.cols, uint32_t(D), act, ld_hidden, ld_hidden);
    const size_t o_splits =
        ops::matmul_splits(vk.info, tuning, uint32_t(BT), uint32_t(D), uint32_t(H * Dh), act, p->attn_ld, ld_heads);
    const size_t mm_floats =
        std::max(proj_splits > 1 ? proj_splits * BT * layout.cols : 0, o_splits > 1 ? o_splits * BT * D : 0);
    if (mm_floats) p->mm_partial = device(mm_floats, f32, "projection split-K partial sums");
    p->y_down = buffer(BT * D, f32, MemoryKind::readback, "output (readback)");
    if (!direct_io) p->y = device(BT * D, f32, "output");
    p->y_out = direct_io ? &p->y_down : &p->y;
    const size_t table_floats = ops::rope_table(uint32_t(T), uint32_t(cfg.rotary_dim()), cfg.rope_theta, 0).size();
    p->rope_up = buffer(table_floats, f32, MemoryKind::upload, "rope cos/sin table (staging)");
    if (!direct_io) p->rope = device(table_floats, f32, "rope cos/sin table");
    p->rope_in = direct_io ? &p->rope_up : &p->rope;
    if (key.past > 0)
      p->kv_up = buffer(2 * B * KV * size_t(key.past) * Dh, act, MemoryKind::upload, "past_key/past_value (staging)");
    if (key.mask) {
      p->mask_up = buffer(B * T * L, f32, MemoryKind::upload, "attention_mask (staging)");
      p->mask = device(B * T * L, f32, "attention_mask");
    }
    if (key.cache) {
      p->k_down = buffer(B * KV * S * Dh, act, MemoryKind::readback, "present_key (readback)");
      p->v_down = buffer(B * KV * S * Dh, act, MemoryKind::readback, "present_value (readback)");
    }
    if (key.stats) {
      p->scores_down = buffer(B * H * T * L, f32, MemoryKind::readback, "attention probabilities (readback)");
      p->proj_down = buffer(BT * layout.cols, act, MemoryKind::readback, "projections (readback)");
    }
    p->rec = std::make_unique<gpu::Recorder>(vk, tuning);
    record(*p);
    Plan& ref = *p;
    plans.emplace(key, std::move(p));
    return ref;
  }

  const Buffer& keys(const Plan& p) const { return resident(p.key) ? cache_k : p.k; }
  const Buffer& values(const Plan& p) const { return resident(p.key) ? cache_v : p.v; }

  // Mode::update rewrites only the parameters of a recorded plan (its
  // resident cache grew): the command buffer is replayed as it is.
  void record(Plan& p, gpu::Recorder::Mode mode = gpu::Recorder::Mode::record) {
    gpu::Recorder& rec = *p.rec;
    const uint32_t B = uint32_t(p.key.batch), T = uint32_t(p.key.tokens), P = uint32_t(p.past), S = T + P,
                   BT = B * T, stride = resident(p.key) ? uint32_t(cache_capacity) : S;
    const Buffer& kbuf = keys(p);
    const Buffer& vbuf = values(p);
    const uint32_t D = uint32_t(cfg.hidden_size), H = uint32_t(cfg.num_heads), KV = uint32_t(cfg.num_kv_heads),
                   Dh = uint32_t(cfg.head_dim), rd = uint32_t(cfg.rotary_dim());
    const float eps = float(cfg.rms_norm_eps);
    rec.begin(mode);
    if (poison) {
      for (const Buffer* b : {&p.xn, &p.proj, &p.q, &p.attn})
        if (b->valid()) rec.fill(*b, nan_word(act));
      if (!resident(p.key))
        for (const Buffer* b : {&p.k, &p.v}) rec.fill(*b, nan_word(act));
      rec.fill(*p.y_out, nan_word(Storage::f32));
      if (!p.fused) rec.fill(p.scores, nan_word(Storage::f32));
    }
    if (p.x_in != &p.x_up) {
      rec.copy(p.x_up, p.x, p.x.size());
      rec.copy(p.rope_up, p.rope, p.rope.size());
    }
    if (P && !resident(p.key)) {
      // past_key then past_value, each [B, KV, P, Dh], into positions 0..P−1 of [B, KV, S, Dh].
      const VkDeviceSize e = ops::element_bytes(act), row = VkDeviceSize(P) * Dh * e, half = VkDeviceSize(B) * KV * row;
      std::vector<VkBufferCopy> keys, values;
      for (uint32_t bk = 0; bk < B * KV; ++bk) {
        keys.push_back({bk * row, VkDeviceSize(bk) * S * Dh * e, row});
        values.push_back({half + bk * row, VkDeviceSize(bk) * S * Dh * e, row});
      }
      rec.copy(p.kv_up, p.k, keys);
      rec.copy(p.kv_up, p.v, values);
    }
    if (p.key.mask) rec.copy(p.mask_up, p.mask, p.mask.size());
    rec.mark("upload inputs");
    const ops::View rows = ops::btd_view(T, 1, D);
    const ops::View normed{0, T * ld_hidden, ld_hidden, 1, ld_hidden, 0};
    const Buffer* qkv_bias = cfg.qkv_bias ? &b_qkv : nullptr;
    const Buffer* mm_partial = p.mm_partial.valid() ? &p.mm_partial : nullptr;
    if (p.norm_in_projection) {
      ops::matmul_rmsnorm(vk, rec, *p.x_in, norm_w, cfg.norm_kind, eps, w_qkv, qkv_bias, p.proj, BT, layout.cols, D, act,
                          ld_hidden);
    } else {
      ops::rmsnorm(vk, rec, *p.x_in, rows, norm_w, p.xn, normed, BT, T, 1, D, cfg.norm_kind, eps, act, true);
      ops::matmul(vk, rec, p.xn, w_qkv, qkv_bias, nullptr, p.proj, BT, layout.cols, D, act, false, ld_hidden, ld_hidden,
                  mm_partial);
    }

    // q, and the new keys and values into the cache at positions P..: q/k
    // norm and RoPE, values as they are. One pass, or (VKGATE_DISABLE_PASS_FUSION)
    // the reference path of a pass per op and tensor.
    const bool qk_norm = cfg.use_qk_norm;
    if (tuning.pass_fusion) {
      const ops::QkvPrepare args{p.proj, layout.query(T), layout.key(T), layout.value(T), qk_norm ? &qn_w : nullptr,
                                 qk_norm ? &kn_w : nullptr, cfg.norm_kind, eps, *p.rope_in, rd, p.q, kbuf, vbuf,
                                 stride, P};
      ops::qkv_prepare(vk, rec, args, BT, T, H, KV, Dh, act);
    } else {
      auto prepare = [&](ops::View src, const Buffer& norm, const Buffer& dst, uint32_t heads, uint32_t seq,
                         uint32_t first) {
        const ops::View out = ops::bhsd_view(heads, seq, Dh, first);
        if (qk_norm) {
          ops::rmsnorm(vk, rec, p.proj, src, norm, dst, out, BT, T, heads, Dh, cfg.norm_kind, eps, act);
          src = out;  // rotated in place
        }
        ops::rope(vk, rec, qk_norm ? dst : p.proj, src, *p.rope_in, dst, out, BT, T, heads, Dh, rd, act);
      };
      prepare(layout.query(T), qn_w, p.q, H, T, 0);
      prepare(layout.key(T), kn_w, kbuf, KV, stride, P);
      ops::rope(vk, rec, p.proj, layout.value(T), *p.rope_in, vbuf, ops::bhsd_view(KV, stride, Dh, P), BT, T, KV, Dh,
                0, act);
    }

    const ops::AttentionShape shape{B, H, KV, T, S, Dh, stride, 0, 0, p.attn_ld, p.score_ld};
    const float scale = float(1.0 / std::sqrt(double(Dh)));
    const bool gated = cfg.gate_kind != GateKind::none;
    if (p.fused) {
      const ops::FlashArgs args{p.q,  kbuf, vbuf, p.key.mask ? &p.mask : nullptr, gated ? &p.proj : nullptr,
                                layout.gate(T), layout.gate_width, p.attn, &p.partial};
      ops::flash_attention(vk, rec, args, shape, p.flash, cfg.causal, scale, act);
    } else {
      for (uint32_t first = 0; first < T; first += p.chunk) {
        ops::AttentionShape part = shape;
        part.first = first;
        part.count = std::min(p.chunk, T - first);
        ops::attention_scores(vk, rec, p.q, kbuf, p.scores, part, act, cfg.causal);
        ops::softmax(vk, rec, p.scores, p.key.mask ? &p.mask : nullptr, B, H, part.count, S, cfg.causal, scale, first, T,
                     p.score_ld);
        ops::attention_values(vk, rec, p.scores, vbuf, p.attn, part, act, cfg.causal);
      }
      if (gated) ops::gate(vk, rec, p.proj, layout.gate(T), p.attn, BT, T, H, Dh, layout.gate_width, act, p.attn_ld);
    }
    ops::matmul(vk, rec, p.attn, w_o, cfg.o_bias ? &b_o : nullptr, cfg.residual ? p.x_in : nullptr, *p.y_out, BT, D, H * Dh,
                act, true, p.attn_ld, ld_heads, mm_partial);
    if (p.y_out != &p.y_down) rec.copy(p.y, p.y_down, p.y.size());
    if (p.key.cache) {
      rec.copy(p.k, p.k_down, p.k.size());
      rec.copy(p.v, p.v_down, p.v.size());
    }
    if (p.key.stats) {
      rec.copy(p.scores, p.scores_down, p.scores.size());
      rec.copy(p.proj, p.proj_down, p.proj.size());
    }
    rec.mark("download outputs");
    rec.end();
  }

  // Host-side reduction of the GPU's own probabilities and gate rows. The
  // probability rows are score_ld apart (a resident plan's key holds past = −1).
  BlockStats stats(const Plan& p) const {
    const size_t B = size_t(p.key.batch), T = size_t(p.key.tokens), L = p.score_ld,
                 H = size_t(cfg.num_heads);
    const float* probs = static_cast<const float*>(p.scores_down.mapped());
    BlockStats st;
    st.first_token_attn.assign(H, 0.0);
    for (size_t b = 0; b < B; ++b)
      for (size_t h = 0; h < H; ++h)
        for (size_t t = 0; t < T; ++t) st.first_token_attn[h] += probs[((b * H + h) * T + t) * L] / double(B * T);
    if (cfg.gate_kind == GateKind::none) {
      st.gate_mean = st.gate_frac_below_0_1 = std::numeric_limits<double>::quiet_NaN();
      return st;
    }
    const std::vector<float> proj = decode(p.proj_down.mapped(), p.proj_down.size() / ops::element_bytes(act), act);
    const ops::View g = layout.gate(uint32_t(T));
    double sum = 0;
    size_t below = 0, n = 0;
    for (size_t bt = 0; bt < B * T; ++bt)
      for (size_t h = 0; h < H; ++h)
        for (uint32_t j = 0; j < layout.gate_width; ++j) {
          const size_t b = bt / T, t = bt % T;
          const size_t off = g.base + b * g.sb + t * g.st + (h / g.groups) * g.sg + (h % g.groups) * g.sh + j;
          const double s = 1.0 / (1.0 + std::exp(-double(proj[off])));
          sum += s;
          below += s < 0.1;
          ++n;
        }
    st.gate_mean = sum / double(n);
    st.gate_frac_below_0_1 = double(below) / double(n);
    return st;
  }
};

const char* to_string(Precision p) noexcept {
  switch (p) {
    case Precision::fp32: return "fp32";
    case Precision::fp16: return "fp16";
    case Precision::bf16: return "bf16";
  }
  return "?";
}

namespace {
// The config, once validate() has accepted it: Impl derives its layout (which
// divides by the KV heads) from it, so nothing may see it before.
const BlockConfig& validated(const BlockConfig& cfg) {
  cfg.validate();
  return cfg;
}
}  // namespace

GatedAttention::GatedAttention(Context& ctx, const BlockConfig& cfg, const TensorMap& weights,
                               const BlockOptions& options)
    : impl_(std::make_unique<Impl>(ctx, validated(cfg), options)) {
  check_weights(cfg, weights);
  if (options.check_finite)
    for (const TensorSpec& spec : expected_weights(cfg)) {
      const HostTensor& t = weights.at(spec.name);
      detail::require_finite(t, "weight '" + spec.name + "'", spec.shape);
      if (options.precision == Precision::fp16) detail::require_fp16_range(t, "weight '" + spec.name + "'", spec.shape);
    }
  impl_->upload_weights(weights);
}

GatedAttention::GatedAttention(Context& ctx, const BlockConfig& cfg, const WeightMap& weights,
                               const BlockOptions& options)
    : GatedAttention(ctx, cfg, as_tensors(weights), options) {}

GatedAttention::~GatedAttention() = default;

namespace {
// a·b·..., or Error(unsupported) when the product does not fit 64 bits or
// exceeds `limit` (a device buffer's element count).
size_t checked_product(std::initializer_list<size_t> factors, uint64_t limit, const std::string& what) {
  uint64_t n = 1;
  bool overflow = false;
  for (size_t f : factors) overflow = overflow || __builtin_mul_overflow(n, uint64_t(f), &n);
  if (overflow || n > limit) {
    std::string dims;
    for (size_t f : factors) dims += (dims.empty() ? "" : " × ") + std::to_string(f);
    throw Error(ErrorCode::unsupported, "forward: " + what + " needs " + dims +
                                            " elements, more than one device buffer holds (maxStorageBufferRange " +
                                            std::to_string(limit * 4) + " bytes); split the batch or the sequence");
  }
  return size_t(n);
}

void check_size(std::span<const float> t, size_t want, const char* name, const std::string& shape) {
  if (t.size() != want)
    throw Error(ErrorCode::shape_mismatch, std::string("forward: ") + name + " has " + std::to_string(t.size()) +
                                               " elements, expected " + shape + " = " + std::to_string(want));
}
std::string dims(std::initializer_list<size_t> d) {
  std::string s = "[";
  for (size_t x : d) s += (s.size() > 1 ? ", " : "") + std::to_string(x);
  return s + "]";
}
}  // namespace

ForwardOutputs GatedAttention::run(const ForwardInputs& in) {
  const BlockConfig& c = impl_->cfg;
  if (in.batch <= 0 || in.tokens <= 0 || in.past < 0)
    throw Error(ErrorCode::invalid_argument, "forward: batch and tokens must be positive and past ≥ 0, got batch " +
                                                 std::to_string(in.batch) + ", tokens " + std::to_string(in.tokens) +
                                                 ", past " + std::to_string(in.past));
  Impl& im = *impl_;
  const bool resident = in.use_device_cache;
  if (resident) {
    if (im.cache_capacity == 0)
      throw Error(ErrorCode::invalid_argument, "forward: use_device_cache needs reserve_cache or load_cache first");
    if (in.batch != im.cache_batch || in.past != 0 || !in.past_key.empty() || !in.past_value.empty() || in.want_cache)
      throw Error(ErrorCode::invalid_argument,
                  "forward: with use_device_cache the batch must be the cache's (" + std::to_string(im.cache_batch) +
                      ") and past, past_key, past_value and want_cache must be left unset");
    if (im.cache_len + in.tokens > im.cache_capacity)
      throw Error(ErrorCode::invalid_argument, "forward: the device cache holds " + std::to_string(im.cache_len) +
                                                   " of " + std::to_string(im.cache_capacity) + " positions; " +
                                                   std::to_string(in.tokens) + " more do not fit");
  }
  const size_t B = size_t(in.batch), T = size_t(in.tokens), P = size_t(resident ? im.cache_len : in.past),
               D = size_t(c.hidden_size), H = size_t(c.num_heads), KV = size_t(c.num_kv_heads),
               Dh = size_t(c.head_dim);
  // Every buffer the plan allocates, counted without overflow before anything is allocated.
  const uint64_t most = im.vk.info.max_storage_buffer_range / 4;
  const size_t S = resident ? size_t(im.cache_capacity) : T + P;
  checked_product({B, T, D}, most, "hidden_states");
  checked_product({B, T, size_t(im.layout.cols)}, most, "the projections");
  checked_product({B, H, T, Dh}, most, "q");
  checked_product({B, KV, S, Dh}, most, "the key and value cache");
  if (!in.attention_mask.empty()) checked_product({B, T, S}, most, "attention_mask");
  if (in.want_stats) checked_product({B, H, T, S}, most, "the attention scores");
  check_size(in.hidden, B * T * D, "hidden_states", dims({B, T, D}));
  if (!resident) {
    check_size(in.past_key, B * KV * P * Dh, "past_key", dims({B, KV, P, Dh}));
    check_size(in.past_value, B * KV * P * Dh, "past_value", dims({B, KV, P, Dh}));
  }
  const bool mask = !in.attention_mask.empty();
  if (mask) check_size(in.attention_mask, B * T * (P + T), "attention_mask", dims({B, 1, T, P + T}));
  if (im.options.check_finite) {
    const std::vector<int64_t> hs{int64_t(B), int64_t(T), int64_t(D)}, ks{int64_t(B), int64_t(KV), int64_t(P), int64_t(Dh)};
    detail::require_finite(in.hidden, "forward: hidden_states", hs);
    detail::require_norm_in_range(in.hidden, D, "forward: hidden_states", hs);
    if (!resident) {
      detail::require_finite(in.past_key, "forward: past_key", ks);
      detail::require_finite(in.past_value, "forward: past_value", ks);
      if (im.act == Storage::f16) {
        detail::require_fp16_range(in.past_key, "forward: past_key", ks);
        detail::require_fp16_range(in.past_value, "forward: past_value", ks);
      }
    }
    if (mask)
      detail::require_finite(in.attention_mask, "forward: attention_mask",
                             {int64_t(B), 1, int64_t(T), int64_t(P + T)}, true);
  }

  const Impl::Key key{in.batch, in.tokens, resident ? -1 : in.past, mask, in.want_cache, in.want_stats};
  Impl::Plan& p = im.plan(key);
  if (p.past != int(P)) {  // a resident plan whose cache has grown since it was recorded
    p.past = int(P);
    try {
      im.record(p, gpu::Recorder::Mode::update);
    } catch (...) {  // a half-updated plan must not be replayed: drop it
      if (im.last == &p) im.last = nullptr;
      im.plans.erase(key);
      throw;
    }
  }
  std::memcpy(p.x_up.mapped(), in.hidden.data(), in.hidden.size_bytes());
  const auto table = ops::rope_table(uint32_t(T), uint32_t(c.rotary_dim()), c.rope_theta, uint32_t(P));
  std::memcpy(p.rope_up.mapped(), table.data(), table.size() * sizeof(float));
  const Storage act = im.act;
  if (P && !resident) {
    encode(in.past_key, act, p.kv_up.mapped());
    encode(in.past_value, act, static_cast<char*>(p.kv_up.mapped()) + in.past_key.size() * ops::element_bytes(act));
  }
  if (mask)  // rows of P + T into rows score_ld apart
    for (size_t row = 0; row < B * T; ++row)
      std::memcpy(static_cast<float*>(p.mask_up.mapped()) + row * p.score_ld, in.attention_mask.data() + row * (P + T),
                  (P + T) * sizeof(float));
  p.rec->submit("running the gated attention block");
  im.last = &p;
  if (resident) im.cache_len += in.tokens;

  ForwardOutputs out;
  out.output = decode(p.y_down.mapped(), p.y_down.size() / 4, Storage::f32);
  if (in.want_cache) {
    out.present_key = decode(p.k_down.mapped(), p.k_down.size() / ops::element_bytes(act), act);
    out.present_value = decode(p.v_down.mapped(), p.v_down.size() / ops::element_bytes(act), act);
  }
  if (in.want_stats) out.stats = impl_->stats(p);
  if (im.options.check_finite) {
    const std::string why = " (the inputs and weights are finite: an intermediate overflowed the " +
                            std::string(to_string(im.options.precision)) + " storage or fp32 arithmetic)";
    try {
      detail::require_finite(out.output, "forward: the output", {int64_t(B), int64_t(T), int64_t(D)});
      detail::require_finite(out.present_key, "forward: present_key", {int64_t(B), int64_t(KV), int64_t(P + T), int64_t(Dh)});
      detail::require_finite(out.present_value, "forward: present_value", {int64_t(B), int64_t(KV), int64_t(P + T), int64_t(Dh)});
    } catch (const Error& e) {
      throw Error(e.code(), e.what() + why);
    }
  }
  return out;
}

std::vector<float> GatedAttention::forward(std::span<const float> hidden, int batch, int tokens) {
  ForwardInputs in;
  in.hidden = hidden;
  in.batch = batch;
  in.tokens = tokens;
  return run(in).output;
}

void GatedAttention::reserve_cache(int batch, int capacity) {
  Impl& im = *impl_;
  if (batch <= 0 || capacity <= 0)
    throw Error(ErrorCode::invalid_argument, "reserve_cache: batch and capacity must be positive");
  // Resident plans were recorded against the old buffers.
  // (`last` first: it may point into a plan erased below.)
  if (im.last && im.resident(im.last->key)) im.last = nullptr;
  for (auto it = im.plans.begin(); it != im.plans.end();)
    it = im.resident(it->first) ? im.plans.erase(it) : std::next(it);
  const size_t n = checked_product({size_t(batch), size_t(im.cfg.num_kv_heads), size_t(capacity), size_t(im.cfg.head_dim)},
                                   im.vk.info.max_storage_buffer_range / ops::element_bytes(im.act),
                                   "reserve_cache: the resident key cache");
  // No cache until both halves exist: a failed allocation leaves none (not a stale capacity).
  im.cache_k = Buffer();
  im.cache_v = Buffer();
  im.cache_batch = im.cache_capacity = im.cache_len = 0;
  im.cache_k = im.device(n, im.act, "resident key cache");
  try {
    im.cache_v = im.device(n, im.act, "resident value cache");
  } catch (...) {
    im.cache_k = Buffer();
    throw;
  }
  im.cache_batch = batch;
  im.cache_capacity = capacity;
  im.cache_len = 0;
}

void GatedAttention::load_cache(std::span<const float> key, std::span<const float> value, int batch, int length,
                                int capacity) {
  Impl& im = *impl_;
  if (length < 0 || length > capacity)
    throw Error(ErrorCode::invalid_argument, "load_cache: length must be in 0..capacity");
  if (batch <= 0) throw Error(ErrorCode::invalid_argument, "load_cache: batch must be positive");
  const size_t KV = size_t(im.cfg.num_kv_heads), Dh = size_t(im.cfg.head_dim), L = size_t(length);
  const uint64_t most = im.vk.info.max_storage_buffer_range / ops::element_bytes(im.act);
  checked_product({size_t(batch), KV, size_t(capacity), Dh}, most, "load_cache: the resident key cache");
  check_size(key, size_t(batch) * KV * L * Dh, "past_key", dims({size_t(batch), KV, L, Dh}));
  check_size(value, size_t(batch) * KV * L * Dh, "past_value", dims({size_t(batch), KV, L, Dh}));
  if (im.options.check_finite) {
    const std::vector<int64_t> ks{batch, int64_t(KV), length, int64_t(Dh)};
    detail::require_finite(key, "load_cache: past_key", ks);
    detail::require_finite(value, "load_cache: past_value", ks);
    if (im.act == Storage::f16) {
      detail::require_fp16_range(key, "load_cache: past_key", ks);
      detail::require_fp16_range(value, "load_cache: past_value", ks);
    }
  }
  reserve_cache(batch, capacity);
  const size_t e = ops::element_bytes(im.act), C = size_t(capacity);
  for (auto [src, dst] : {std::pair{key, &im.cache_k}, std::pair{value, &im.cache_v}}) {
    // [B, KV, length, Dh] rows into [B, KV, capacity, Dh], the rest zero.
    std::vector<std::byte> host(size_t(batch) * KV * C * Dh * e);
    for (size_t bk = 0; bk < size_t(batch) * KV; ++bk)
      encode(src.subspan(bk * L * Dh, L * Dh), im.act, host.data() + bk * C * Dh * e);
    gpu::upload(im.vk, *dst, host.data(), host.size());
  }
  im.cache_len = length;
}

int GatedAttention::cache_length() const { return impl_->cache_len; }

void GatedAttention::truncate_cache(int length) {
  if (length < 0 || length > impl_->cache_len)
    throw Error(ErrorCode::invalid_argument, "truncate_cache: length " + std::to_string(length) +
                                                 " is outside 0.." + std::to_string(impl_->cache_len));
  impl_->cache_len = length;
}

std::vector<StageTime> GatedAttention::last_timings() const {
  std::vector<StageTime> out;
  if (!impl_->last) return out;
  for (const auto& t : impl_->last->rec->timings()) out.push_back({t.label, t.microseconds});
  return out;
}

void GatedAttention::replay(int times) {
  if (!impl_->last) throw Error(ErrorCode::invalid_argument, "replay: no forward has run yet");
  for (int i = 0; i < times; ++i) impl_->last->rec->submit("replaying the gated attention block");
}

void GatedAttention::set_poison(bool on) {
  if (impl_->poison == on) return;
  impl_->poison = on;
  for (auto& [key, plan] : impl_->plans) impl_->record(*plan);
}

const BlockConfig& GatedAttention::config() const { return impl_->cfg; }
Precision GatedAttention::precision() const { return impl_->options.precision; }
size_t GatedAttention::recorded_shapes() const { return impl_->plans.size(); }
size_t GatedAttention::recordings() const {
  size_t n = 0;
  for (const auto& [key, plan] : impl_->plans) n += plan->rec->recordings();
  return n;
}

}  // namespace vkgate
