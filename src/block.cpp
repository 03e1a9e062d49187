#include "vkgate/block.hpp"

#include <cmath>
#include <cstring>
#include <limits>
#include <map>

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
std::vector<float> concat(std::initializer_list<std::span<const float>> parts) {
  size_t n = 0;
  for (auto p : parts) n += p.size();
  std::vector<float> out;
  out.reserve(n);
  for (auto p : parts) out.insert(out.end(), p.begin(), p.end());
  return out;
}

constexpr uint32_t kNaN = 0x7fc00000u;

}  // namespace

struct GatedAttention::Impl {
  Context& ctx;
  Context::Impl& vk;
  BlockConfig cfg;
  ProjectionLayout layout;
  bool poison = false;

  Buffer norm_w, w_qkv, b_qkv, qn_w, kn_w, w_o, b_o;

  struct Plan {
    int batch, tokens;
    Buffer x_up, x, xn, proj, q, k, v, scores, attn, y, y_down, rope;
    std::unique_ptr<gpu::Recorder> rec;
  };
  std::map<std::pair<int, int>, std::unique_ptr<Plan>> plans;
  Plan* last = nullptr;

  Impl(Context& c, const BlockConfig& config) : ctx(c), vk(c.impl()), cfg(config), layout(config) {}

  Buffer device(size_t floats, const std::string& name) {
    return vk.allocator->allocate(floats * sizeof(float), MemoryKind::device, name);
  }
  Buffer upload(std::span<const float> data, const std::string& name) {
    Buffer b = device(data.size(), name);
    gpu::upload(vk, b, data.data(), data.size_bytes());
    return b;
  }

  void upload_weights(const WeightMap& w) {
    auto get = [&](const std::string& name) { return w.at(name); };
    auto opt = [&](const std::string& name) -> std::span<const float> {
      auto it = w.find(name);
      return it == w.end() ? std::span<const float>{} : it->second;
    };
    const bool separate_gate = cfg.gate_layout == GateLayout::separate && cfg.gate_kind != GateKind::none;
    norm_w = upload(get("input_layernorm.weight"), "input_layernorm.weight");
    w_qkv = upload(concat({get("q_proj.weight"), separate_gate ? get("gate_proj.weight") : std::span<const float>{},
                           get("k_proj.weight"), get("v_proj.weight")}),
                   "q_proj+k_proj+v_proj.weight");
    if (cfg.qkv_bias)
      b_qkv = upload(concat({get("q_proj.bias"), separate_gate ? get("gate_proj.bias") : std::span<const float>{},
                             get("k_proj.bias"), get("v_proj.bias")}),
                     "q_proj+k_proj+v_proj.bias");
    if (cfg.use_qk_norm) {
      qn_w = upload(get("q_norm.weight"), "q_norm.weight");
      kn_w = upload(get("k_norm.weight"), "k_norm.weight");
    }
    w_o = upload(get("o_proj.weight"), "o_proj.weight");
    if (cfg.o_bias) b_o = upload(opt("o_proj.bias"), "o_proj.bias");
  }

  Plan& plan(int batch, int tokens) {
    auto key = std::make_pair(batch, tokens);
    if (auto it = plans.find(key); it != plans.end()) return *it->second;
    auto p = std::make_unique<Plan>();
    p->batch = batch;
    p->tokens = tokens;
    const uint32_t B = uint32_t(batch), T = uint32_t(tokens), S = T;  // no cache yet: keys = new tokens
    const size_t BT = size_t(B) * T, D = size_t(cfg.hidden_size), H = size_t(cfg.num_heads),
                 KV = size_t(cfg.num_kv_heads), Dh = size_t(cfg.head_dim);
    p->x_up = vk.allocator->allocate(BT * D * 4, MemoryKind::upload, "hidden_states (staging)");
    p->x = device(BT * D, "hidden_states");
    p->xn = device(BT * D, "normed hidden_states");
    p->proj = device(BT * layout.cols, "projections");
    p->q = device(B * H * T * Dh, "q");
    p->k = device(B * KV * S * Dh, "k");
    p->v = device(B * KV * S * Dh, "v");
    p->scores = device(B * H * T * S, "attention scores");
    p->attn = device(BT * H * Dh, "attention output");
    p->y = device(BT * D, "output");
    p->y_down = vk.allocator->allocate(BT * D * 4, MemoryKind::readback, "output (readback)");
    p->rope = upload(ops::rope_table(T, uint32_t(cfg.rotary_dim()), cfg.rope_theta, 0), "rope cos/sin table");
    p->rec = std::make_unique<gpu::Recorder>(vk);
    record(*p);
    Plan& ref = *p;
    plans.emplace(key, std::move(p));
    return ref;
  }

  void record(Plan& p) {
    gpu::Recorder& rec = *p.rec;
    const uint32_t B = uint32_t(p.batch), T = uint32_t(p.tokens), S = T, BT = B * T;
    const uint32_t D = uint32_t(cfg.hidden_size), H = uint32_t(cfg.num_heads), KV = uint32_t(cfg.num_kv_heads),
                   Dh = uint32_t(cfg.head_dim), rd = uint32_t(cfg.rotary_dim());
    const float eps = float(cfg.rms_norm_eps);
    rec.begin();
    if (poison)
      for (const Buffer* b : {&p.xn, &p.proj, &p.q, &p.k, &p.v, &p.scores, &p.attn, &p.y}) rec.fill(*b, kNaN);
    rec.copy(p.x_up, p.x, p.x.size());
    const ops::View rows = ops::btd_view(T, 1, D);
    ops::rmsnorm(vk, rec, p.x, rows, norm_w, p.xn, rows, BT, T, 1, D, cfg.norm_kind, eps);
    ops::matmul(vk, rec, p.xn, w_qkv, cfg.qkv_bias ? &b_qkv : nullptr, nullptr, p.proj, BT, layout.cols, D);

    // q and k: norm per head into [B, heads, S, Dh], then rotate in place.
    auto prepare = [&](ops::View src, const Buffer& norm, const Buffer& dst, uint32_t heads) {
      const ops::View out = ops::bhsd_view(heads, S, Dh, S - T);
      if (cfg.use_qk_norm) {
        ops::rmsnorm(vk, rec, p.proj, src, norm, dst, out, BT, T, heads, Dh, cfg.norm_kind, eps);
        if (rd) ops::rope(vk, rec, dst, out, p.rope, dst, out, BT, T, heads, Dh, rd);
      } else {
        ops::rope(vk, rec, p.proj, src, p.rope, dst, out, BT, T, heads, Dh, rd);
      }
    };
    prepare(layout.query(T), qn_w, p.q, H);
    prepare(layout.key(T), kn_w, p.k, KV);
    ops::rope(vk, rec, p.proj, layout.value(T), p.rope, p.v, ops::bhsd_view(KV, S, Dh, S - T), BT, T, KV, Dh, 0);

    const ops::AttentionShape shape{B, H, KV, T, S, Dh};
    ops::attention_scores(vk, rec, p.q, p.k, p.scores, shape);
    ops::softmax(vk, rec, p.scores, nullptr, B, H, T, S, cfg.causal, float(1.0 / std::sqrt(double(Dh))));
    ops::attention_values(vk, rec, p.scores, p.v, p.attn, shape);
    if (cfg.gate_kind != GateKind::none)
      ops::gate(vk, rec, p.proj, layout.gate(T), p.attn, BT, T, H, Dh, layout.gate_width);
    ops::matmul(vk, rec, p.attn, w_o, cfg.o_bias ? &b_o : nullptr, cfg.residual ? &p.x : nullptr, p.y, BT, D, H * Dh);
    rec.copy(p.y, p.y_down, p.y.size());
    rec.end();
  }
};

GatedAttention::GatedAttention(Context& ctx, const BlockConfig& cfg, const WeightMap& weights)
    : impl_(std::make_unique<Impl>(ctx, cfg)) {
  cfg.validate();
  check_weights(cfg, weights);
  impl_->upload_weights(weights);
}

GatedAttention::~GatedAttention() = default;

std::vector<float> GatedAttention::forward(std::span<const float> hidden, int batch, int tokens) {
  const BlockConfig& c = impl_->cfg;
  if (batch <= 0 || tokens <= 0)
    throw Error(ErrorCode::invalid_argument, "forward: batch and tokens must be positive, got batch " +
                                                 std::to_string(batch) + ", tokens " + std::to_string(tokens));
  const size_t n = size_t(batch) * size_t(tokens) * size_t(c.hidden_size);
  if (hidden.size() != n)
    throw Error(ErrorCode::shape_mismatch, "forward: hidden_states has " + std::to_string(hidden.size()) +
                                               " elements, expected [" + std::to_string(batch) + ", " +
                                               std::to_string(tokens) + ", " + std::to_string(c.hidden_size) +
                                               "] = " + std::to_string(n));
  Impl::Plan& p = impl_->plan(batch, tokens);
  std::memcpy(p.x_up.mapped(), hidden.data(), hidden.size_bytes());
  p.rec->submit("running the gated attention block");
  impl_->last = &p;
  std::vector<float> out(n);
  std::memcpy(out.data(), p.y_down.mapped(), n * sizeof(float));
  return out;
}

std::vector<StageTime> GatedAttention::last_timings() const {
  std::vector<StageTime> out;
  if (!impl_->last) return out;
  for (const auto& t : impl_->last->rec->timings()) out.push_back({t.label, t.microseconds});
  return out;
}

void GatedAttention::set_poison(bool on) {
  if (impl_->poison == on) return;
  impl_->poison = on;
  for (auto& [key, plan] : impl_->plans) impl_->record(*plan);
}

const BlockConfig& GatedAttention::config() const { return impl_->cfg; }
size_t GatedAttention::recorded_shapes() const { return impl_->plans.size(); }

}  // namespace vkgate
