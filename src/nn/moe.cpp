#include "nn/moe.hpp"

#include <algorithm>
#include <optional>

#include "ops/ops.hpp"
#include "ops/qmatmul.hpp"
#include "vkgate/error.hpp"
#include "vkgate/quant.hpp"

namespace vkgate::nn {

Moe::Moe(Context::Impl& vk, const gpu::Tuning& tuning, const ModelConfig& cfg, const TensorMap& w, int layer,
         Storage act)
    : vk_(vk),
      tuning_(tuning),
      hidden_(uint32_t(cfg.hidden_size())),
      experts_(uint32_t(cfg.moe.num_experts)),
      k_(uint32_t(cfg.moe.num_experts_per_tok)),
      inter_(uint32_t(cfg.moe.moe_intermediate_size)),
      shared_inter_(uint32_t(cfg.moe.shared_expert_intermediate_size)),
      norm_topk_(cfg.moe.norm_topk_prob),
      norm_kind_(cfg.norm_kind()),
      eps_(float(cfg.norm_eps())),
      act_fn_(cfg.hidden_act),
      act_(act) {
  auto name = [&](const std::string& n) { return layer_tensor_name(layer, n); };
  const size_t e = ops::element_bytes(act);
  ld_hidden_ = ops::operand_stride(vk.info, tuning, hidden_, act);
  norm_w_ = upload(vk, stored(w.at(name(cfg.mlp_norm_name())), Storage::f32), name(cfg.mlp_norm_name()));
  // The router in fp32 whatever the storage: rounding its logits to fp16 or
  // bf16 swaps experts whose probabilities are close, a different function
  // rather than a slightly perturbed one. It is E·D, small beside the experts.
  auto f32 = [&](const std::string& n) { return stored(w.at(name(n)), Storage::f32); };
  std::vector<std::byte> router = f32("mlp.gate.weight");
  if (shared_inter_ > 0) router = concat({std::move(router), f32("mlp.shared_expert_gate.weight")});
  const size_t router_rows = experts_ + (shared_inter_ > 0 ? 1 : 0);
  ld_router_ = ops::operand_stride(vk.info, tuning, hidden_, Storage::f32);
  router_ = upload(vk, ops::strided_rows(std::move(router), router_rows, hidden_ * 4, ld_router_ * 4),
                   name(shared_inter_ > 0 ? "mlp.gate+shared_expert_gate.weight" : "mlp.gate.weight"));

  // The experts' dtypes, one per projection across the layer (nullopt: mixed).
  auto expert = [&](uint32_t x, const std::string& proj) -> const HostTensor& {
    return w.at(name("mlp.experts." + std::to_string(x) + "." + proj + ".weight"));
  };
  bool any_blocks = false;
  auto shared_dtype = [&](const std::string& proj) -> std::optional<DType> {
    const DType first = expert(0, proj).dtype;
    bool same = true;
    for (uint32_t x = 0; x < experts_; ++x) {
      const DType d = expert(x, proj).dtype;
      any_blocks = any_blocks || is_quantized(d);
      same = same && d == first;
    }
    return same ? std::optional<DType>(first) : std::nullopt;
  };
  const std::vector<std::string> gate_up_projs{"gate_proj", "up_proj"}, down_projs{"down_proj"};
  const std::optional<DType> gate_t = shared_dtype("gate_proj"), up_t = shared_dtype("up_proj"),
                             down_t = shared_dtype("down_proj");
  // A GEMM whose parts include a block format keeps its bytes when every part
  // is rows of whole blocks (and 8-element chunks) the kernel reads.
  auto kernel_reads = [](std::optional<DType> d, uint32_t K) { return d && ops::qmatmul_takes(*d, K); };
  const bool gate_up_blocks = (gate_t && is_quantized(*gate_t)) || (up_t && is_quantized(*up_t));
  const bool down_blocks = down_t && is_quantized(*down_t);
  const bool keep_blocks = any_blocks && gate_t && up_t && down_t &&
                           (!gate_up_blocks || (kernel_reads(gate_t, hidden_) && kernel_reads(up_t, hidden_))) &&
                           (!down_blocks || kernel_reads(down_t, inter_));
  auto align4 = [](uint64_t n) { return (n + 3) / 4 * 4; };
  // Parts of stacked rows, one per run of projections in one dtype, each 4-byte aligned.
  auto block_layout = [&](const std::vector<std::string>& projs, const std::vector<DType>& dtypes, uint32_t rows,
                          uint32_t K) {
    Layout l;
    uint64_t end = 0;
    for (size_t i = 0; i < projs.size(); ++i) {
      if (l.parts.empty() || l.parts.back().dtype != dtypes[i]) {
        end = align4(end);
        l.parts.push_back({dtypes[i], 0, uint32_t(i) * rows, uint32_t(end)});
      }
      l.parts.back().rows += rows;
      end += uint64_t(rows) * *stored_bytes(dtypes[i], K);
    }
    l.expert_bytes = align4(end);
    return l;
  };
  if (keep_blocks && gate_up_blocks) gate_up_layout_ = block_layout(gate_up_projs, {*gate_t, *up_t}, inter_, hidden_);
  else gate_up_layout_.expert_bytes = 2 * uint64_t(inter_) * hidden_ * e;
  if (keep_blocks && down_blocks) down_layout_ = block_layout(down_projs, {*down_t}, hidden_, inter_);
  else down_layout_.expert_bytes = uint64_t(hidden_) * inter_ * e;

  // Whole experts per shard, each shard within maxStorageBufferRange (less the blocks' padding).
  const bool padded = gate_up_layout_.blocks() || down_layout_.blocks();
  const uint64_t expert_bytes = std::max(gate_up_layout_.expert_bytes, down_layout_.expert_bytes);
  const uint64_t range = vk.info.max_storage_buffer_range - (padded ? ops::qmatmul_padding : 0);
  const uint64_t fit = range / expert_bytes;
  if (fit == 0)
    throw Error(ErrorCode::unsupported, name("mlp.experts.0.gate_proj.weight") + ": one expert's [gate ; up] or down projection (" +
                                            std::to_string(expert_bytes) + " bytes) exceed the device's maxStorageBufferRange (" +
                                            std::to_string(vk.info.max_storage_buffer_range) + ")");
  const uint32_t per_shard = uint32_t(
      std::min<uint64_t>({fit, experts_, tuning.moe_shard_experts ? tuning.moe_shard_experts : experts_}));
  // One shard's weights of a GEMM: the experts' parts as stored at their
  // offsets (block layouts), or their values in the activation storage.
  auto shard_bytes = [&](const Layout& l, const std::vector<std::string>& projs, uint32_t first, uint32_t end) {
    std::vector<std::byte> out;
    if (!l.blocks()) {
      out.reserve(size_t(end - first) * l.expert_bytes);
      for (uint32_t x = first; x < end; ++x)
        for (const std::string& proj : projs) {
          const std::vector<std::byte> v = stored(expert(x, proj), act);
          out.insert(out.end(), v.begin(), v.end());
        }
      return out;
    }
    out.assign(size_t(end - first) * l.expert_bytes + ops::qmatmul_padding, std::byte{0});
    for (uint32_t x = first; x < end; ++x) {
      size_t part = 0, at = l.parts[0].at;
      for (const std::string& proj : projs) {
        const HostTensor& t = expert(x, proj);
        if (t.dtype != l.parts[part].dtype) at = l.parts[++part].at;
        std::copy(t.bytes.begin(), t.bytes.end(), out.begin() + long(size_t(x - first) * l.expert_bytes + at));
        at += t.bytes.size();
      }
    }
    return out;
  };
  for (uint32_t first = 0; first < experts_; first += per_shard) {
    const uint32_t end = std::min(experts_, first + per_shard);
    const std::string range_name = "experts " + std::to_string(first) + ".." + std::to_string(end - 1);
    shards_.push_back({first, end,
                       upload(vk, shard_bytes(gate_up_layout_, gate_up_projs, first, end),
                              name("mlp." + range_name + " gate_proj+up_proj")),
                       upload(vk, shard_bytes(down_layout_, down_projs, first, end), name("mlp." + range_name + " down_proj"))});
  }
  if (shared_inter_ > 0) {
    ld_shared_ = ops::operand_stride(vk.info, tuning, shared_inter_, act);
    auto tensor = [&](const std::string& n) { return &w.at(name(n)); };
    shared_gate_up_ = Projection(vk, tuning,
                                 {tensor("mlp.shared_expert.gate_proj.weight"), tensor("mlp.shared_expert.up_proj.weight")},
                                 hidden_, act, name("mlp.shared_expert.gate_proj+up_proj.weight"));
    shared_down_ = Projection(vk, tuning, {tensor("mlp.shared_expert.down_proj.weight")}, shared_inter_, act,
                              name("mlp.shared_expert.down_proj.weight"));
  }
}

ops::MoeRouting Moe::routing(uint32_t rows) const {
  return ops::moe_routing(vk_.info, tuning_, rows, experts_, k_, shards_.front().end - shards_.front().first);
}

uint32_t Moe::max_step_rows() const {
  // The grouped GEMM's grid has a workgroup row per tile (at most 65535), and
  // its largest buffers (the experts' outputs, [rows·k, D] fp32) stay within
  // maxStorageBufferRange.
  const uint64_t by_range = vk_.info.max_storage_buffer_range / (uint64_t(k_) * std::max(hidden_, 2 * inter_) * 4);
  uint64_t rows = std::min<uint64_t>(by_range, UINT32_MAX / (4 * uint64_t(k_) + 3));
  while (rows > 0 && routing(uint32_t(rows)).max_tiles() > 65535) rows = rows * 15 / 16;
  return uint32_t(rows);
}

bool Moe::router_norm_folded(uint32_t rows) const {
  return ops::matmul_rmsnorm_applies(vk_.info, tuning_, rows, hidden_, ld_router_);
}

bool Moe::shared_glu_folded(uint32_t rows) const { return shared_inter_ > 0 && shared_gate_up_.glu_applies(rows); }

void Moe::reserve(uint32_t rows, Workspace& ws) const {
  const ops::MoeRouting r = routing(rows);
  const size_t e = ops::element_bytes(act_), R = rows, entries = r.entries();
  const size_t logits = experts_ + (shared_inter_ > 0 ? 1 : 0);
  ws.need("normed", R * ld_hidden_ * e);
  if (act_ != Storage::f32 && !router_norm_folded(rows)) ws.need("moe_normed_f32", R * ld_router_ * 4);
  ws.need("moe_logits", R * logits * 4);
  ws.need("moe_route", r.route_bytes());
  ws.need("moe_tiles", r.tile_bytes());
  ws.need("moe_dispatch", r.dispatch_bytes());
  ws.need("moe_proj", entries * 2 * inter_ * e);
  ws.need("moe_hidden", entries * inter_ * e);
  ws.need("moe_out", entries * hidden_ * 4);
  const size_t router_splits =
      ops::matmul_splits(vk_.info, tuning_, rows, uint32_t(logits), hidden_, Storage::f32, ld_router_, ld_router_);
  if (router_splits > 1) ws.need("split_k", router_splits * R * logits * 4);
  if (shared_inter_ == 0) return;
  if (!shared_glu_folded(rows)) ws.need("moe_shared_proj", R * 2 * shared_inter_ * e);
  ws.need("moe_shared_hidden", R * ld_shared_ * e);
  ws.need("moe_shared_out", R * hidden_ * 4);
  const size_t up = shared_gate_up_.splits(rows, ld_hidden_);
  const size_t down = shared_down_.splits(rows, ld_shared_);
  if (up > 1) ws.need("split_k", up * R * 2 * shared_inter_ * 4);
  if (down > 1) ws.need("split_k", down * R * hidden_ * 4);
  shared_gate_up_.reserve(ws, rows);
  shared_down_.reserve(ws, rows);
}

void Moe::record(gpu::Recorder& rec, const Workspace& ws, uint32_t rows, const Buffer& x, const Buffer& y,
                 StatsSlot stats, bool poison) const {
  const ops::MoeRouting r = routing(rows);
  const uint32_t logits_ld = experts_ + (shared_inter_ > 0 ? 1 : 0);
  const Buffer &normed = ws["normed"], &logits = ws["moe_logits"], &route = ws["moe_route"],
               &tiles = ws["moe_tiles"], &dispatch = ws["moe_dispatch"], &proj = ws["moe_proj"],
               &hidden = ws["moe_hidden"], &out = ws["moe_out"];
  const Buffer* split_k = ws.find("split_k");
  if (poison) {
    for (const char* role : {"normed", "moe_proj", "moe_hidden", "moe_shared_proj", "moe_shared_hidden"})
      if (const Buffer* b = ws.find(role)) rec.fill(*b, nan_word(act_));
    for (const char* role : {"moe_normed_f32", "moe_logits", "moe_out", "moe_shared_out"})
      if (const Buffer* b = ws.find(role)) rec.fill(*b, nan_word(Storage::f32));
  }
  auto norm = [&](const Buffer& out, uint32_t ld, Storage s) {
    ops::rmsnorm(vk_, rec, {.x = x, .in = ops::btd_view(rows, 1, hidden_), .w = norm_w_, .y = out,
                            .out = {0, rows * ld, ld, 1, ld, 0}, .rows = rows, .tokens = rows, .heads = 1,
                            .dim = hidden_, .kind = norm_kind_, .eps = eps_, .s = s, .x_f32 = true});
  };
  norm(normed, ld_hidden_, act_);
  // The router in fp32: the norm folded into its decode product, or over an fp32 copy of the normed rows.
  if (router_norm_folded(rows)) {
    ops::matmul_rmsnorm(vk_, rec, {.x = x, .norm_w = norm_w_, .kind = norm_kind_, .eps = eps_, .w = router_,
                                   .y = logits, .M = rows, .N = logits_ld, .K = hidden_, .s = Storage::f32,
                                   .ldw = ld_router_});
  } else {
    const Buffer* normed_f32 = &normed;
    if (act_ != Storage::f32) {
      normed_f32 = &ws["moe_normed_f32"];
      norm(*normed_f32, ld_router_, Storage::f32);
    }
    ops::matmul(vk_, rec, {.x = *normed_f32, .w = router_, .y = logits, .M = rows, .N = logits_ld, .K = hidden_,
                           .s = Storage::f32, .y_f32 = true, .ldx = ld_router_, .ldw = ld_router_, .partial = split_k});
  }
  ops::moe_route(vk_, rec, r,
                 {.logits = logits, .ld = logits_ld, .norm_topk = norm_topk_, .route = route, .tiles = tiles,
                  .dispatch = dispatch,
                  .gx_up = ops::moe_matmul_groups(vk_.info, r, 2 * inter_, hidden_, ld_hidden_, act_,
                                                  gate_up_layout_.blocks()),
                  .gx_down = ops::moe_matmul_groups(vk_.info, r, hidden_, inter_, inter_, act_, down_layout_.blocks())});
  // One shard's GEMM: float weights in one dispatch, block formats one per part.
  auto gemm = [&](const Layout& l, const Buffer& w, const Shard& s, uint32_t dispatch_at, const Buffer& x,
                  uint32_t ldx, bool gather, const Buffer& y, uint32_t ldy, uint32_t N, uint32_t K, bool y_f32) {
    if (!l.blocks()) {
      ops::moe_matmul(vk_, rec, r, {.x = x, .ldx = ldx, .gather = gather, .w = w, .e_begin = s.first, .e_end = s.end,
                                    .N = N, .K = K, .y = y, .ldy = ldy, .s = act_, .y_f32 = y_f32, .route = route,
                                    .tiles = tiles, .dispatch = dispatch, .dispatch_at = dispatch_at});
      return;
    }
    for (const Part& part : l.parts) {
      const ops::MoeBlocks b{part.dtype, uint32_t(l.expert_bytes), part.at, part.first_row};
      ops::moe_matmul(vk_, rec, r, {.x = x, .ldx = ldx, .gather = gather, .w = w, .e_begin = s.first, .e_end = s.end,
                                    .N = part.rows, .K = K, .y = y, .ldy = ldy, .s = act_, .y_f32 = y_f32,
                                    .route = route, .tiles = tiles, .dispatch = dispatch, .dispatch_at = dispatch_at,
                                    .blocks = &b});
    }
  };
  // Buffer i's two GEMMs take the counts at 32·i and 32·i + 16 of `dispatch`.
  for (size_t i = 0; i < shards_.size(); ++i)
    gemm(gate_up_layout_, shards_[i].gate_up, shards_[i], uint32_t(32 * i), normed, ld_hidden_, true, proj, 2 * inter_,
         2 * inter_, hidden_, false);
  ops::glu(vk_, rec, {.proj = proj, .h = hidden, .rows = r.entries(), .inter = inter_, .act = act_fn_, .s = act_,
                      .ld_p = 2 * inter_, .ld_h = inter_});
  for (size_t i = 0; i < shards_.size(); ++i)
    gemm(down_layout_, shards_[i].down, shards_[i], uint32_t(32 * i + 16), hidden, inter_, false, out, hidden_, hidden_,
         inter_, true);
  const Buffer* shared = nullptr;
  if (shared_inter_ > 0) {
    const Buffer& shidden = ws["moe_shared_hidden"];
    shared = &ws["moe_shared_out"];
    if (shared_glu_folded(rows)) {  // the norm, the shared expert's gate/up and its GLU in one pass
      const ops::RowNorm rn{norm_w_, norm_kind_, eps_};
      shared_gate_up_.record(rec, {.x = x, .y = shidden, .M = rows, .ws = &ws, .norm = &rn, .glu = act_fn_,
                                   .ldy = ld_shared_});
    } else {
      const Buffer& sproj = ws["moe_shared_proj"];
      shared_gate_up_.record(rec, {.x = normed, .y = sproj, .M = rows, .ldx = ld_hidden_, .partial = split_k, .ws = &ws});
      ops::glu(vk_, rec, {.proj = sproj, .h = shidden, .rows = rows, .inter = shared_inter_, .act = act_fn_, .s = act_,
                          .ld_p = 2 * shared_inter_, .ld_h = ld_shared_});
    }
    shared_down_.record(rec, {.x = shidden, .y = *shared, .M = rows, .y_f32 = true, .ldx = ld_shared_, .partial = split_k,
                              .ws = &ws});
  }
  ops::moe_combine(vk_, rec, r, {.x = x, .y = y, .experts = out, .route = route, .logits = logits,
                                 .ld_logits = logits_ld, .dim = hidden_, .shared = shared, .gate_at = experts_});
  if (stats.buffer)
    rec.copy(route, *stats.buffer, {{VkDeviceSize(r.off_load()) * 4, VkDeviceSize(stats.at) * 4, VkDeviceSize(experts_) * 4}});
}

uint64_t Moe::weight_bytes() const { return dense_bytes() + expert_bytes(); }

uint64_t Moe::token_read_bytes() const { return dense_bytes() + expert_bytes() * k_ / experts_; }

uint64_t Moe::dense_bytes() const {
  return norm_w_.size() + router_.size() + shared_gate_up_.bytes() + shared_down_.bytes();
}

uint64_t Moe::expert_bytes() const {
  uint64_t n = 0;
  for (const Shard& s : shards_) n += s.gate_up.size() + s.down.size();
  return n;
}

}  // namespace vkgate::nn
