#include "nn/moe.hpp"

#include <algorithm>

#include "ops/ops.hpp"
#include "vkgate/error.hpp"

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
  auto weight = [&](const std::string& n) { return stored(w.at(name(n)), act); };
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

  // Whole experts per shard: [gate ; up] of each is 2·Im·D elements, its down Im·D.
  const uint64_t expert_bytes = 2 * uint64_t(inter_) * hidden_ * e;
  const uint64_t fit = vk.info.max_storage_buffer_range / expert_bytes;
  if (fit == 0)
    throw Error(ErrorCode::unsupported, name("mlp.experts.0.gate_proj.weight") + ": one expert's gate and up projections (" +
                                            std::to_string(expert_bytes) + " bytes) exceed the device's maxStorageBufferRange (" +
                                            std::to_string(vk.info.max_storage_buffer_range) + ")");
  const uint32_t per_shard = uint32_t(
      std::min<uint64_t>({fit, experts_, tuning.moe_shard_experts ? tuning.moe_shard_experts : experts_}));
  for (uint32_t first = 0; first < experts_; first += per_shard) {
    const uint32_t end = std::min(experts_, first + per_shard);
    std::vector<std::byte> gate_up, down;
    gate_up.reserve(size_t(end - first) * expert_bytes);
    down.reserve(size_t(end - first) * expert_bytes / 2);
    auto append = [](std::vector<std::byte>& to, const std::vector<std::byte>& part) {
      to.insert(to.end(), part.begin(), part.end());
    };
    for (uint32_t x = first; x < end; ++x) {
      const std::string ex = "mlp.experts." + std::to_string(x) + ".";
      append(gate_up, weight(ex + "gate_proj.weight"));
      append(gate_up, weight(ex + "up_proj.weight"));
      append(down, weight(ex + "down_proj.weight"));
    }
    const std::string range = "experts " + std::to_string(first) + ".." + std::to_string(end - 1);
    shards_.push_back({first, end, upload(vk, gate_up, name("mlp." + range + " gate_proj+up_proj")),
                       upload(vk, down, name("mlp." + range + " down_proj"))});
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

void Moe::reserve(uint32_t rows, Workspace& ws) const {
  const ops::MoeRouting r = routing(rows);
  const size_t e = ops::element_bytes(act_), R = rows, entries = r.entries();
  const size_t logits = experts_ + (shared_inter_ > 0 ? 1 : 0);
  ws.need("normed", R * ld_hidden_ * e);
  if (act_ != Storage::f32) ws.need("moe_normed_f32", R * ld_router_ * 4);
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
  ws.need("moe_shared_proj", R * 2 * shared_inter_ * e);
  ws.need("moe_shared_hidden", R * ld_shared_ * e);
  ws.need("moe_shared_out", R * hidden_ * 4);
  const size_t up = shared_gate_up_.splits(rows, ld_hidden_);
  const size_t down = shared_down_.splits(rows, ld_shared_);
  if (up > 1) ws.need("split_k", up * R * 2 * shared_inter_ * 4);
  if (down > 1) ws.need("split_k", down * R * hidden_ * 4);
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
  const Buffer* normed_f32 = &normed;
  if (act_ != Storage::f32) {
    normed_f32 = &ws["moe_normed_f32"];
    norm(*normed_f32, ld_router_, Storage::f32);
  }
  ops::matmul(vk_, rec, {.x = *normed_f32, .w = router_, .y = logits, .M = rows, .N = logits_ld, .K = hidden_,
                         .s = Storage::f32, .y_f32 = true, .ldx = ld_router_, .ldw = ld_router_, .partial = split_k});
  ops::moe_route(vk_, rec, r,
                 {.logits = logits, .ld = logits_ld, .norm_topk = norm_topk_, .route = route, .tiles = tiles,
                  .dispatch = dispatch,
                  .gx_up = ops::moe_matmul_groups(vk_.info, r, 2 * inter_, hidden_, ld_hidden_, act_),
                  .gx_down = ops::moe_matmul_groups(vk_.info, r, hidden_, inter_, inter_, act_)});
  // Buffer i's two GEMMs take the counts at 32·i and 32·i + 16 of `dispatch`.
  for (size_t i = 0; i < shards_.size(); ++i)
    ops::moe_matmul(vk_, rec, r, {.x = normed, .ldx = ld_hidden_, .gather = true, .w = shards_[i].gate_up,
                                  .e_begin = shards_[i].first, .e_end = shards_[i].end, .N = 2 * inter_, .K = hidden_,
                                  .y = proj, .ldy = 2 * inter_, .s = act_, .y_f32 = false, .route = route,
                                  .tiles = tiles, .dispatch = dispatch, .dispatch_at = uint32_t(32 * i)});
  ops::glu(vk_, rec, {.proj = proj, .h = hidden, .rows = r.entries(), .inter = inter_, .act = act_fn_, .s = act_,
                      .ld_p = 2 * inter_, .ld_h = inter_});
  for (size_t i = 0; i < shards_.size(); ++i)
    ops::moe_matmul(vk_, rec, r, {.x = hidden, .ldx = inter_, .gather = false, .w = shards_[i].down,
                                  .e_begin = shards_[i].first, .e_end = shards_[i].end, .N = hidden_, .K = inter_,
                                  .y = out, .ldy = hidden_, .s = act_, .y_f32 = true, .route = route, .tiles = tiles,
                                  .dispatch = dispatch, .dispatch_at = uint32_t(32 * i + 16)});
  const Buffer* shared = nullptr;
  if (shared_inter_ > 0) {
    const Buffer &sproj = ws["moe_shared_proj"], &shidden = ws["moe_shared_hidden"];
    shared = &ws["moe_shared_out"];
    shared_gate_up_.record(rec, {.x = normed, .y = sproj, .M = rows, .ldx = ld_hidden_, .partial = split_k});
    ops::glu(vk_, rec, {.proj = sproj, .h = shidden, .rows = rows, .inter = shared_inter_, .act = act_fn_, .s = act_,
                        .ld_p = 2 * shared_inter_, .ld_h = ld_shared_});
    shared_down_.record(rec, {.x = shidden, .y = *shared, .M = rows, .y_f32 = true, .ldx = ld_shared_, .partial = split_k});
  }
  ops::moe_combine(vk_, rec, r, {.x = x, .y = y, .experts = out, .route = route, .logits = logits,
                                 .ld_logits = logits_ld, .dim = hidden_, .shared = shared, .gate_at = experts_});
  if (stats.buffer)
    rec.copy(route, *stats.buffer, {{VkDeviceSize(r.off_load()) * 4, VkDeviceSize(stats.at) * 4, VkDeviceSize(experts_) * 4}});
}

uint64_t Moe::weight_bytes() const {
  uint64_t n = norm_w_.size() + router_.size() + shared_gate_up_.bytes() + shared_down_.bytes();
  for (const Shard& s : shards_) n += s.gate_up.size() + s.down.size();
  return n;
}

}  // namespace vkgate::nn
