// `vkgate bench`'s single ops (attention, RMSNorm, top-k, RoPE, softmax, the
// gate) and the block; the products are in bench_products.cpp.
#include "bench/bench.hpp"

#include <cmath>
#include <map>
#include <nlohmann/json.hpp>

#include "bench/bench_internal.hpp"
#include "vkgate/block.hpp"
#include "ops/attention.hpp"
#include "vkgate/error.hpp"

namespace vkgate::bench {

using namespace detail;

namespace {
// The attention product once per (name suffix, tuning) of `runs`, on the same
// data, the output poisoned before each.
std::vector<Case> attention_runs(Context& ctx, int64_t B, int64_t T, int64_t H, int64_t KV, int64_t Dh, bool causal,
                                 Precision dtype, const Options& opt, bool fused,
                                 const std::vector<std::pair<std::string, gpu::Tuning>>& runs) {
  Bench b(ctx);
  const Storage s = storage_of(dtype);
  const std::string name = "attention B" + std::to_string(B) + " T" + std::to_string(T) + " H" + std::to_string(H) +
                           "/" + std::to_string(KV) + " Dh" + std::to_string(Dh) + (causal ? " causal " : " ") +
                           dtype_name(dtype) + (fused ? " fused" : " unfused");
  const HostData q = random_data(size_t(B * H * T * Dh), s, b.rng), k = random_data(size_t(B * KV * T * Dh), s, b.rng),
                 v = random_data(size_t(B * KV * T * Dh), s, b.rng);
  const Buffer& gq = b.upload(q, "q");
  const Buffer& gk = b.upload(k, "k");
  const Buffer& gv = b.upload(v, "v");
  const size_t out_bytes = size_t(B * T * H * Dh) * ops::element_bytes(s);
  const Buffer& go = b.device(out_bytes, "out");
  const ops::AttentionShape shape{uint32_t(B), uint32_t(H), uint32_t(KV), uint32_t(T), uint32_t(T), uint32_t(Dh)};
  const double scale = 1.0 / std::sqrt(double(Dh));
  // The reference for a few query positions: query t alone against keys 0..t (causal) or all keys.
  const auto ts = sample_rows(size_t(T), 4);
  std::vector<double> want;
  for (size_t t : ts) {
    const size_t S = causal ? t + 1 : size_t(T);
    std::vector<float> qt, kt, vt;
    for (int64_t bb = 0; bb < B; ++bb) {
      for (int64_t h = 0; h < H; ++h) {
        const auto* row = &q.values[size_t(((bb * H + h) * T + int64_t(t)) * Dh)];
        qt.insert(qt.end(), row, row + Dh);
      }
      for (int64_t g = 0; g < KV; ++g) {
        const size_t base = size_t((bb * KV + g) * T) * size_t(Dh);
        kt.insert(kt.end(), k.values.begin() + long(base), k.values.begin() + long(base + S * size_t(Dh)));
        vt.insert(vt.end(), v.values.begin() + long(base), v.values.begin() + long(base + S * size_t(Dh)));
      }
    }
    const auto r = reference::attention(qt, kt, vt, B, H, KV, 1, int64_t(S), Dh, scale, false, {});
    want.insert(want.end(), r.begin(), r.end());
  }
  std::vector<Case> out;
  for (const auto& [suffix, tuning] : runs) {
    Case c;
    c.name = name + suffix;
    b.poison(go, out_bytes / 4);  // all-ones bytes: NaN in every storage type
    if (fused) {
      const ops::FlashPlan plan = ops::flash_plan(ctx.device(), shape, s, ops::flash_options(tuning));
      const Buffer& partial = b.device(ops::flash_partial_floats(shape, plan) * 4, "partial");
      const Buffer& counters = b.zeroed(std::max<size_t>(1, ops::flash_counter_words(shape, plan)) * 4, "counters");
      b.time(c, opt, [&](gpu::Recorder& rec) {
        const ops::FlashArgs a{gq, gk, gv, nullptr, nullptr, ops::Gate{}, go, &partial, &counters};
        ops::flash_attention(b.vk, rec, a, shape, plan, causal, float(scale), s);
      }, &tuning);
    } else {
      const Buffer& gs = b.device(size_t(B * H * T * T) * 4, "scores");
      b.time(c, opt, [&](gpu::Recorder& rec) {
        ops::attention_scores(b.vk, rec, gq, gk, gs, shape, s, causal);
        ops::softmax(b.vk, rec, {.scores = gs, .batch = uint32_t(B), .heads = uint32_t(H), .tokens = uint32_t(T),
                                 .keys = uint32_t(T), .causal = causal, .scale = float(scale)});
        ops::attention_values(b.vk, rec, gs, gv, go, shape, s, causal);
      }, &tuning);
    }
    std::vector<uint16_t> raw(size_t(B * T * H * Dh));
    std::vector<float> all(raw.size()), got;
    if (s == Storage::f32) {
      gpu::download(b.vk, go, all.data(), all.size() * 4);
    } else {
      gpu::download(b.vk, go, raw.data(), raw.size() * 2);
      for (size_t i = 0; i < raw.size(); ++i) all[i] = s == Storage::f16 ? half_to_float(raw[i]) : bf16_to_float(raw[i]);
    }
    for (size_t t : ts)
      for (int64_t bb = 0; bb < B; ++bb) {
        const auto* row = &all[size_t((bb * T + int64_t(t)) * H * Dh)];
        got.insert(got.end(), row, row + H * Dh);
      }
    record_check(c, got, want, std::to_string(ts.size()) + " of " + std::to_string(T) + " query positions");
    c.flop = 4.0 * double(B * H) * double(T) * double(T) * double(Dh);
    c.bytes = double(B * (H + 2 * KV) * T * Dh + B * T * H * Dh) * ops::element_bytes(s);
    out.push_back(std::move(c));
  }
  return out;
}
}  // namespace

Case attention(Context& ctx, int64_t B, int64_t T, int64_t H, int64_t KV, int64_t Dh, bool causal, Precision dtype,
               const Options& opt, bool fused) {
  return attention_runs(ctx, B, T, H, KV, Dh, causal, dtype, opt, fused, {{"", ctx.impl().tuning}})[0];
}

std::vector<Case> attention_tiles(Context& ctx, int64_t B, int64_t T, int64_t H, int64_t KV, int64_t Dh, bool causal,
                                  const Options& opt, const std::string& list) {
  using gpu::Coopmat;
  const DeviceInfo& d = ctx.device();
  const Coopmat kind = tile_products(d);
  if (kind == Coopmat::off || !d.subgroup_shuffle)
    throw Error(ErrorCode::unsupported, "bench: --tiles: " + d.name + " has no VK_NV_cooperative_matrix fp16 products "
                                        "with subgroup shuffles, and is no CPU driver that emulates them");
  std::vector<gpu::FlashTile> tiles;
  for (const std::string& item : split_list(list)) {
    if (item == "all") {
      const auto all = ops::flash_tile_candidates();
      tiles.insert(tiles.end(), all.begin(), all.end());
    } else if (const auto tile = gpu::FlashTile::parse(item)) {
      tiles.push_back(*tile);
    } else {
      throw Error(ErrorCode::invalid_argument, tile_list_problem("attention", item));
    }
  }
  std::vector<std::pair<std::string, gpu::Tuning>> runs;
  for (const gpu::FlashTile& tile : tiles) {
    if (const std::string why = ops::flash_tile_misfit(d, tile, kind, uint32_t(Dh)); !why.empty()) {
      std::fprintf(stderr, "bench: tile %s skipped: %s\n", tile.name().c_str(), why.c_str());
      continue;
    }
    gpu::Tuning t = ctx.impl().tuning;
    t.coopmat_flash = kind;
    t.flash_tile = tile;
    runs.emplace_back(" tile " + tile.name(), t);
  }
  if (runs.empty()) throw Error(ErrorCode::invalid_argument, "bench: --tiles: no tile of '" + list + "' fits head_dim " +
                                                                 std::to_string(Dh) + " here");
  return attention_runs(ctx, B, T, H, KV, Dh, causal, Precision::fp16, opt, true, runs);
}

Case rmsnorm(Context& ctx, int64_t rows, int64_t dim, const Options& opt) {
  Bench b(ctx);
  Case c;
  c.name = "rmsnorm " + std::to_string(rows) + "x" + std::to_string(dim);
  const HostData x = random_data(size_t(rows * dim), Storage::f32, b.rng), w = random_data(size_t(dim), Storage::f32, b.rng);
  const Buffer& gx = b.upload(x, "x");
  const Buffer& gw = b.upload(w, "w");
  const Buffer& gy = b.device(size_t(rows * dim) * 4, "y");
  const ops::View v = ops::btd_view(uint32_t(rows), 1, uint32_t(dim));
  b.time(c, opt, [&](gpu::Recorder& rec) {
    ops::rmsnorm(b.vk, rec, {.x = gx, .in = v, .w = gw, .y = gy, .out = v, .rows = uint32_t(rows),
                             .tokens = uint32_t(rows), .heads = 1, .dim = uint32_t(dim), .kind = NormKind::plain,
                             .eps = 1e-6f});
  });
  record_check(c, b.download(gy, size_t(rows * dim)),
               reference::rms_norm(x.values, w.values, rows, dim, 1e-6, NormKind::plain), "all rows");
  c.flop = 4.0 * double(rows * dim);
  c.bytes = 2.0 * double(rows * dim) * 4 + double(dim) * 4;
  return c;
}

Case top_k(Context& ctx, int64_t rows, int64_t n, int64_t k, const Options& opt) {
  Bench b(ctx);
  Case c;
  c.name = "top_k " + std::to_string(rows) + "x" + std::to_string(n) + " k " + std::to_string(k);
  const HostData x = random_data(size_t(rows * n), Storage::f32, b.rng, 3.0f);
  const Buffer& gx = b.upload(x, "logits");
  const size_t words = size_t(rows) * size_t(k + 1) * 2;
  const Buffer& gout = b.device(words * 4, "top");
  b.time(c, opt, [&](gpu::Recorder& rec) {
    ops::top_k(b.vk, rec, gx, uint32_t(rows), uint32_t(n), uint32_t(n), uint32_t(k), gout);
  });
  // The values against a stable sort of each row; a wrong id makes its value NaN.
  const std::vector<float> raw = b.download(gout, words);
  std::vector<float> got;
  std::vector<double> want;
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = x.values.data() + r * n;
    std::vector<uint32_t> order(static_cast<size_t>(n));
    std::iota(order.begin(), order.end(), 0u);
    std::stable_sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b2) { return row[a] > row[b2]; });
    for (int64_t i = 0; i < k; ++i) {
      const float* pair = raw.data() + (size_t(r) * size_t(k + 1) + size_t(i)) * 2;
      uint32_t id = 0;
      std::memcpy(&id, pair + 1, 4);
      got.push_back(id == order[size_t(i)] ? pair[0] : std::numeric_limits<float>::quiet_NaN());
      want.push_back(row[order[size_t(i)]]);
    }
  }
  record_check(c, got, want, "every row's k values and ids");
  c.flop = 0;
  c.bytes = double(rows * n) * 4 + double(words) * 4;
  return c;
}

Case rope(Context& ctx, int64_t rows, int64_t heads, int64_t head_dim, int64_t rotary, const Options& opt) {
  Bench b(ctx);
  Case c;
  c.name = "rope " + std::to_string(rows) + "x" + std::to_string(heads) + "x" + std::to_string(head_dim) + " rotary " +
           std::to_string(rotary);
  const size_t n = size_t(rows * heads * head_dim);
  const HostData x = random_data(n, Storage::f32, b.rng);
  BlockConfig plain;  // default RoPE on `rotary` dims: only rotary_dim() and θ are read
  plain.head_dim = int(rotary);
  plain.rope_theta = 1e6;
  const auto table = ops::rope_table(plain, uint32_t(rows), 0);
  HostData t{table, std::vector<std::byte>(reinterpret_cast<const std::byte*>(table.data()),
                                           reinterpret_cast<const std::byte*>(table.data() + table.size()))};
  const Buffer& gx = b.upload(x, "x");
  const Buffer& gt = b.upload(t, "table");
  const Buffer& gy = b.device(n * 4, "y");
  const ops::View v = ops::btd_view(uint32_t(rows), uint32_t(heads), uint32_t(head_dim));
  b.time(c, opt, [&](gpu::Recorder& rec) {
    ops::rope(b.vk, rec, {.x = gx, .in = v, .table = gt, .y = gy, .out = v, .rows = uint32_t(rows),
                          .tokens = uint32_t(rows), .heads = uint32_t(heads), .dim = uint32_t(head_dim),
                          .rotary = uint32_t(rotary)});
  });
  record_check(c, b.download(gy, n), reference::rope(x.values, 1, rows, heads, head_dim, rotary, 1e6, 0), "all rows");
  c.flop = 6.0 * double(rows * heads) * double(rotary / 2);
  c.bytes = 2.0 * double(n) * 4;
  return c;
}

Case softmax(Context& ctx, int64_t rows, int64_t keys, const Options& opt) {
  Bench b(ctx);
  Case c;
  c.name = "softmax " + std::to_string(rows) + "x" + std::to_string(keys);
  const HostData s = random_data(size_t(rows * keys), Storage::f32, b.rng, 3.0f);
  const Buffer& gs = b.upload(s, "scores");
  b.time(c, opt, [&](gpu::Recorder& rec) {
    ops::softmax(b.vk, rec, {.scores = gs, .batch = 1, .heads = 1, .tokens = uint32_t(rows), .keys = uint32_t(keys),
                             .causal = false, .scale = 1.0f});
  });
  // The timed runs repeated the in-place softmax; check one run on fresh data.
  gpu::upload(b.vk, gs, s.stored.data(), s.stored.size());
  {
    gpu::Recorder rec(b.vk);
    rec.begin();
    ops::softmax(b.vk, rec, {.scores = gs, .batch = 1, .heads = 1, .tokens = uint32_t(rows), .keys = uint32_t(keys),
                             .causal = false, .scale = 1.0f});
    rec.end();
    rec.submit("softmax check");
  }
  record_check(c, b.download(gs, size_t(rows * keys)), reference::softmax(s.values, 1, 1, rows, keys, 1.0, false, {}),
               "all rows");
  c.flop = 4.0 * double(rows * keys);
  c.bytes = 2.0 * double(rows * keys) * 4;
  return c;
}

Case gate(Context& ctx, int64_t rows, int64_t heads, int64_t head_dim, int64_t gate_width, const Options& opt) {
  Bench b(ctx);
  Case c;
  c.name = "gate " + std::to_string(rows) + "x" + std::to_string(heads) + "x" + std::to_string(head_dim) + " width " +
           std::to_string(gate_width);
  const size_t n = size_t(rows * heads * head_dim), ng = size_t(rows * heads * gate_width);
  const HostData y = random_data(n, Storage::f32, b.rng), g = random_data(ng, Storage::f32, b.rng, 3.0f);
  const Buffer& gy = b.upload(y, "y");
  const Buffer& gg = b.upload(g, "g");
  ops::Gate gating;
  gating.view = ops::btd_view(uint32_t(rows), uint32_t(heads), uint32_t(gate_width));
  gating.width = uint32_t(gate_width);
  gating.heads = uint32_t(heads);
  const ops::View yv = ops::btd_view(uint32_t(rows), uint32_t(heads), uint32_t(head_dim));
  auto record = [&](gpu::Recorder& rec) {
    ops::gate(b.vk, rec, {.g = gg, .gating = gating, .y = gy, .y_view = yv, .rows = uint32_t(rows),
                          .tokens = uint32_t(rows), .heads = uint32_t(heads), .dim = uint32_t(head_dim)});
  };
  b.time(c, opt, record);
  gpu::upload(b.vk, gy, y.stored.data(), y.stored.size());
  {
    gpu::Recorder rec(b.vk);
    rec.begin();
    record(rec);
    rec.end();
    rec.submit("gate check");
  }
  record_check(c, b.download(gy, n), reference::gate(y.values, g.values, rows, heads, head_dim, gate_width),
               "all rows");
  c.flop = 5.0 * double(n);
  c.bytes = 2.0 * double(n) * 4 + double(ng) * 4;
  return c;
}

Case block(Context& ctx, const BlockConfig& cfg, int batch, int tokens, int past, Precision precision,
           const Options& opt) {
  cfg.validate();
  std::mt19937 rng(7);
  std::map<std::string, std::vector<float>> data;
  WeightMap weights;
  double weight_elems = 0;
  for (const TensorSpec& spec : expected_weights(cfg)) {
    const bool norm = spec.name.find("norm") != std::string::npos;
    std::normal_distribution<float> dist(0.0f, norm ? 0.1f : float(1.0 / std::sqrt(double(spec.shape.back()))));
    auto& v = data[spec.name];
    v.resize(size_t(spec.numel()));
    for (float& x : v) x = dist(rng);
    weights[spec.name] = v;
    weight_elems += double(spec.numel());
  }
  const size_t D = size_t(cfg.hidden_size), KV = size_t(cfg.num_kv_heads), Dh = size_t(cfg.head_dim);
  std::normal_distribution<float> unit(0.0f, 1.0f);
  auto randoms = [&](size_t n) {
    std::vector<float> v(n);
    for (float& x : v) x = unit(rng);
    return v;
  };
  const auto x = randoms(size_t(batch) * size_t(tokens) * D);
  const auto pk = randoms(size_t(batch) * KV * size_t(past) * Dh), pv = randoms(pk.size());

  GatedAttention blk(ctx, cfg, weights, BlockOptions{precision});
  Case c;
  c.name = std::string(past ? "block decode" : "block prefill") + " B" + std::to_string(batch) + " T" +
           std::to_string(tokens) + (past ? " past " + std::to_string(past) : "") + " " + to_string(precision);
  // A cache, when there is one, stays on the device (as in a decode loop):
  // each timed run appends to it and is rolled back after.
  if (past) blk.load_cache(pk, pv, batch, past, past + tokens);
  ForwardInputs in;
  in.hidden = x;
  in.batch = batch;
  in.tokens = tokens;
  in.use_device_cache = past > 0;
  auto run = [&](const ForwardInputs& fin) {
    auto out = blk.run(fin).output;
    if (past) blk.truncate_cache(past);
    return out;
  };

  // Check against the reference where it is affordable on the CPU (~10 GFLOP in
  // double), else check the first 64 new tokens of the same block.
  const double ref_flop = 2.0 * double(batch) * double(tokens) * (weight_elems + 2.0 * double(cfg.num_heads) *
                                                                               double(past + tokens) * double(Dh));
  reference::Inputs rin;
  rin.batch = batch;
  rin.past = past;
  rin.past_key = pk;
  rin.past_value = pv;
  std::vector<float> xs = x;
  int check_tokens = tokens;
  if (ref_flop > 1e10 && tokens > 64) {
    check_tokens = 64;
    xs.clear();
    for (int bb = 0; bb < batch; ++bb)
      xs.insert(xs.end(), x.begin() + long(size_t(bb) * size_t(tokens) * D),
                x.begin() + long((size_t(bb) * size_t(tokens) + 64) * D));
  }
  rin.hidden = xs;
  rin.tokens = check_tokens;
  ForwardInputs cin = in;
  cin.hidden = xs;
  cin.tokens = check_tokens;
  const auto got = run(cin);
  record_check(c, got, reference::forward(cfg, weights, rin).output,
               check_tokens == tokens ? "whole output" : "the first 64 tokens (same block, separate run)");

  // Timed: the recorded run replayed back to back, so the GPU does not idle
  // (and slow down) while the host converts and checks between runs.
  run(in);
  warm_up(ctx.device(), opt.warmup, [&] { blk.replay(1); });
  Timer t;
  for (int i = 0; i < std::max(1, opt.reps); ++i) {
    blk.replay(1);
    std::vector<std::pair<std::string, double>> run;
    for (const auto& st : blk.last_timings()) run.emplace_back(st.stage, st.microseconds);
    t.add(run);
  }
  t.fill(c);
  c.device_bytes = ctx.impl().allocator->bytes_in_use();
  const double S = double(past + tokens), BT = double(batch) * double(tokens);
  c.flop = 2.0 * BT * weight_elems + 4.0 * double(batch) * double(cfg.num_heads) * double(tokens) * S * double(Dh);
  const double elt = precision == Precision::fp32 ? 4 : 2;
  c.bytes = weight_elems * elt + 2.0 * BT * double(D) * 4 + 2.0 * double(batch) * double(KV) * S * double(Dh) * elt;
  return c;
}

Peak peak(Context& ctx, const Options& opt) {
  Peak p;
  Bench b(ctx);
  // Copy: as large as the device allows, up to 256 MiB.
  const size_t bytes = size_t(std::min<uint64_t>(256ull << 20, ctx.device().max_storage_buffer_range / 2));
  const Buffer& src = b.device(bytes, "copy source");
  const Buffer& dst = b.device(bytes, "copy destination");
  gpu::Recorder rec(b.vk);
  rec.begin();
  rec.fill(src, 0x3f800000u);
  rec.end();
  rec.submit("filling the copy source");
  // A copy command (timed by a timestamp pair around it) and a copy shader.
  auto rate = [&](const std::function<void(gpu::Recorder&)>& record) {
    gpu::Recorder r(b.vk);
    r.begin();
    record(r);
    r.end();
    warm_up(ctx.device(), opt.warmup, [&] { r.submit("copy bandwidth"); });
    Timer t;
    for (int i = 0; i < std::max(1, opt.reps); ++i) {
      r.submit("copy bandwidth");
      std::vector<std::pair<std::string, double>> run;
      for (const auto& d : r.timings()) run.emplace_back(d.label, d.microseconds);
      t.add(run);
    }
    Case c;
    t.fill(c);
    return 2.0 * double(bytes) / c.time.median_us / 1e3;
  };
  p.copy_command_gbps = rate([&](gpu::Recorder& r) {
    r.copy(src, dst, bytes);
    r.mark("copy");
  });
  p.copy_shader_gbps = rate([&](gpu::Recorder& r) { ops::copy_shader(b.vk, r, src, dst, bytes); });
  p.copy_gbps = std::max(p.copy_command_gbps, p.copy_shader_gbps);
  const bool big = ctx.device().type == "discrete" || ctx.device().type == "integrated";
  const int64_t n = big ? 4096 : 1024;
  p.matmul_gflops = matmul(ctx, n, n, n, Precision::fp32, opt).gflops();
  return p;
}

std::string to_json(const DeviceInfo& device, const std::vector<Case>& cases, const Peak* peak) {
  nlohmann::json j;
  j["device"] = {{"name", device.name}, {"type", device.type}, {"driver", device.driver},
                 {"api_version", device.api_version}};
  if (peak)
    j["peak"] = {{"copy_gbps", peak->copy_gbps},
                 {"copy_command_gbps", peak->copy_command_gbps},
                 {"copy_shader_gbps", peak->copy_shader_gbps},
                 {"matmul_gflops", peak->matmul_gflops}};
  j["cases"] = nlohmann::json::array();
  for (const Case& c : cases) {
    nlohmann::json jc = {{"name", c.name},         {"median_us", c.time.median_us}, {"min_us", c.time.min_us},
                         {"max_us", c.time.max_us}, {"gflops", c.gflops()},          {"gbps", c.gbps()},
                         {"flop", c.flop},          {"bytes", c.bytes},              {"nmse", c.nmse},
                         {"max_abs", c.max_abs},    {"check", c.check},              {"device_bytes", c.device_bytes}};
    if (peak && peak->matmul_gflops > 0) jc["share_of_peak_compute"] = c.gflops() / peak->matmul_gflops;
    if (peak && peak->copy_gbps > 0) jc["share_of_peak_bandwidth"] = c.gbps() / peak->copy_gbps;
    jc["stages"] = nlohmann::json::array();
    for (const auto& [label, s] : c.stages)
      jc["stages"].push_back({{"name", label}, {"median_us", s.median_us}, {"min_us", s.min_us}, {"max_us", s.max_us}});
    j["cases"].push_back(jc);
  }
  return j.dump(2);
}

}  // namespace vkgate::bench
