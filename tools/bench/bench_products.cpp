// `vkgate bench`'s products: the dense matmul (and its tensor-core tiles
// swept, --tiles), and the block-format products (their GPU decode tiles
// swept, the dequantized prefill, int8 activations), each against the double
// reference on the same data.
#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "bench/bench.hpp"
#include "bench/bench_internal.hpp"
#include "ops/qmatmul.hpp"
#include "ops/qmatmul_dot.hpp"
#include "vkgate/error.hpp"
#include "vkgate/quant.hpp"

namespace vkgate::bench {

using namespace detail;

namespace {
// The same product once per (name suffix, tuning), on the same data.
std::vector<Case> matmul_tunings(Context& ctx, int64_t M, int64_t N, int64_t K, Precision dtype, const Options& opt,
                                 const std::vector<std::pair<std::string, gpu::Tuning>>& tunings) {
  Bench b(ctx);
  const Storage s = storage_of(dtype);
  const std::string name =
      "matmul " + std::to_string(M) + "x" + std::to_string(N) + "x" + std::to_string(K) + " " + dtype_name(dtype);
  HostData x = random_data(size_t(M * K), s, b.rng), w = random_data(size_t(N * K), s, b.rng, 0.05f);
  // Rows as the block lays them out on this device (ops::operand_stride).
  const uint32_t ld = ops::operand_stride(b.vk.info, b.vk.tuning, uint32_t(K), s), e = ops::element_bytes(s);
  x.stored = ops::strided_rows(std::move(x.stored), size_t(M), size_t(K) * e, size_t(ld) * e);
  w.stored = ops::strided_rows(std::move(w.stored), size_t(N), size_t(K) * e, size_t(ld) * e);
  const Buffer& gx = b.upload(x, "x");
  const Buffer& gw = b.upload(w, "w");
  const Buffer& gy = b.device(size_t(M * N) * 4, "y");
  // Check up to 64 rows spread over M against the double reference.
  const auto rows = sample_rows(size_t(M), 64);
  const auto want =
      reference::linear(pick_rows(x.values, size_t(K), rows), w.values, {}, int64_t(rows.size()), N, K);
  std::vector<Case> out;
  for (const auto& [suffix, tuning] : tunings) {
    Case c;
    c.name = name + suffix;
    const uint32_t splits = ops::matmul_splits(b.vk.info, tuning, uint32_t(M), uint32_t(N), uint32_t(K), s, ld, ld);
    const Buffer& gp = b.device(size_t(splits > 1 ? splits : 0) * size_t(M * N) * 4 + 4, "split-K partial sums");
    b.poison(gy, size_t(M * N));
    b.time(c, opt, [&](gpu::Recorder& rec) {
      ops::matmul(b.vk, rec, {.x = gx, .w = gw, .y = gy, .M = uint32_t(M), .N = uint32_t(N), .K = uint32_t(K), .s = s,
                              .y_f32 = true, .ldx = ld, .ldw = ld, .partial = &gp});
    }, &tuning);
    record_check(c, pick_rows(b.download(gy, size_t(M * N)), size_t(N), rows), want,
                 std::to_string(rows.size()) + " of " + std::to_string(M) + " rows");
    c.flop = 2.0 * double(M) * double(N) * double(K);
    c.bytes = double(M * K + N * K) * ops::element_bytes(s) + double(M * N) * 4;
    out.push_back(std::move(c));
  }
  return out;
}
}  // namespace

Case matmul(Context& ctx, int64_t M, int64_t N, int64_t K, Precision dtype, const Options& opt) {
  return matmul_tunings(ctx, M, N, K, dtype, opt, {{"", ctx.impl().tuning}})[0];
}

std::string tile_list_problem(const std::string& op, const std::string& list) {
  for (const std::string& item : split_list(list)) {
    if (item == "all") continue;
    if (op == "matmul" && item != "direct" && !gpu::StagedTile::parse(item))
      return "bench: --tiles: '" + item + "' is neither all, direct nor a tile WMxWNxFMxFNxTK[s1][h]";
    if (op == "qmatmul" && !gpu::QrowsTile::parse(item))
      return "bench: --tiles: '" + item + "' is neither all, chunks nor a tile slicesCxU";
    if (op == "attention" && !gpu::FlashTile::parse(item))
      return "bench: --tiles: '" + item + "' is neither all nor a tile SxK[p|h]";
  }
  return "";
}

namespace {
// --tiles: (name suffix, tuning) per kernel of `list` that takes an M×N×K
// product here; the others are named on stderr as skipped.
std::vector<std::pair<std::string, gpu::Tuning>> tile_tunings(Context& ctx, const std::string& list, int64_t M,
                                                               int64_t N, int64_t K) {
  using gpu::Coopmat;
  const DeviceInfo& d = ctx.device();
  const Coopmat kind = tile_products(d);
  if (kind == Coopmat::off)
    throw Error(ErrorCode::unsupported,
                        "bench: --tiles: " + d.name + " has no VK_NV_cooperative_matrix fp16 products and is no CPU "
                        "driver that emulates them");
  std::vector<std::string> names;
  for (const std::string& item : split_list(list)) {
    if (item == "all") {
      names.push_back("direct");
      for (const auto& t : ops::staged_tile_candidates()) names.push_back(t.name());
    } else {
      names.push_back(item);
    }
  }
  std::vector<std::pair<std::string, gpu::Tuning>> out;
  for (const std::string& name : names) {
    gpu::Tuning t = ctx.impl().tuning;
    if (name == "direct") {
      if (kind == Coopmat::emulated) {
        std::fprintf(stderr, "bench: tile direct skipped: matmul_coopmat.comp has no emulation\n");
        continue;
      }
      t.coopmat_staged = Coopmat::off;
      out.emplace_back(" direct", t);
      continue;
    }
    const auto tile = gpu::StagedTile::parse(name);
    if (!tile) throw Error(ErrorCode::invalid_argument, tile_list_problem("matmul", name));
    const gpu::StagedTile used = ops::staged_tile_run(*tile, kind);
    const std::string why = ops::staged_tile_misfit(d, used, kind, uint32_t(M), uint32_t(N), uint32_t(K),
                                                    uint32_t(K), uint32_t(K));
    if (!why.empty()) {
      std::fprintf(stderr, "bench: tile %s skipped: %s\n", name.c_str(), why.c_str());
      continue;
    }
    t.coopmat_staged = kind;
    t.staged_tile = *tile;
    t.cpu_matmul = false;  // CPU drivers: their own GEMM would take the product
    out.emplace_back(" tile " + used.name(), t);
  }
  if (out.empty()) throw Error(ErrorCode::invalid_argument, "bench: --tiles: no kernel of '" + list + "' takes this product here");
  return out;
}

}  // namespace

std::vector<Case> matmul_tiles(Context& ctx, int64_t M, int64_t N, int64_t K, const Options& opt,
                               const std::string& list) {
  return matmul_tunings(ctx, M, N, K, Precision::fp16, opt, tile_tunings(ctx, list, M, N, K));
}

namespace {
// One way to run a block-format product: the kernels `tuning` picks, X quantized
// to int8 blocks first (int8), or W dequantized to X's storage first
// (dequantized: prefill on tensor cores).
struct QRoute {
  std::string suffix;
  gpu::Tuning tuning;
  bool int8 = false, dequantized = false;
};

// The same product once per route, on the same data.
std::vector<Case> qmatmul_routes(Context& ctx, int64_t M, int64_t N, int64_t K, DType wtype, Precision act,
                                 const Options& opt, const std::vector<QRoute>& routes) {
  Bench b(ctx);
  const Storage s = storage_of(act);
  const std::string name = "qmatmul " + std::to_string(M) + "x" + std::to_string(N) + "x" + std::to_string(K) + " " +
                           to_string(wtype) + " " + dtype_name(act);
  if (!ops::qmatmul_takes(wtype, uint32_t(K)))
    throw Error(ErrorCode::invalid_argument, "bench: --k " + std::to_string(K) + " is not a whole number of " +
                                                 to_string(wtype) + " blocks");
  const HostData x = random_data(size_t(M * K), s, b.rng), w = random_data(size_t(N * K), Storage::f32, b.rng, 0.05f);
  HostData q;
  q.stored = quantize(wtype, w.values);
  q.values.resize(w.values.size());
  dequantize(wtype, q.stored, q.values);
  const size_t weight_bytes = q.stored.size();
  q.stored.resize(weight_bytes + ops::qmatmul_padding);
  const Buffer& gx = b.upload(x, "x");
  const Buffer& gw = b.upload(q, "w");
  const Buffer& gy = b.device(size_t(M * N) * 4, "y");
  const auto rows = sample_rows(size_t(M), 64);
  const auto want = reference::linear(pick_rows(x.values, size_t(K), rows), q.values, {}, int64_t(rows.size()), N, K);
  std::vector<Case> out;
  for (const QRoute& r : routes) {
    Case c;
    c.name = name + r.suffix;
    const Buffer* gq = r.int8 ? &b.device(ops::q8_bytes(uint32_t(M), uint32_t(K)), "x (int8 blocks)") : nullptr;
    const Buffer* dense = r.dequantized ? &b.device(size_t(N * K) * ops::element_bytes(s), "w dequantized") : nullptr;
    b.poison(gy, size_t(M * N));
    b.time(c, opt, [&](gpu::Recorder& rec) {
      const uint32_t m = uint32_t(M), n = uint32_t(N), k = uint32_t(K);
      if (r.int8) {
        ops::quantize_q8(b.vk, rec, {.x = gx, .q = *gq, .M = m, .K = k, .s = s});
        ops::qmatmul_dot(b.vk, rec, {.x = *gq, .w = gw, .wtype = wtype, .y = gy, .M = m, .N = n, .K = k, .s = s,
                                     .y_f32 = true});
      } else if (dense) {
        ops::dequantize_rows(b.vk, rec, {.table = gw, .format = wtype, .x = *dense, .rows = n, .dim = k, .out0 = 0, .s = s});
        ops::matmul(b.vk, rec, {.x = gx, .w = *dense, .y = gy, .M = m, .N = n, .K = k, .s = s, .y_f32 = true});
      } else {
        ops::qmatmul(b.vk, rec, {.x = gx, .w = gw, .wtype = wtype, .y = gy, .M = m, .N = n, .K = k, .s = s,
                                 .y_f32 = true});
      }
    }, &r.tuning);
    record_check(c, pick_rows(b.download(gy, size_t(M * N)), size_t(N), rows), want,
                 std::to_string(rows.size()) + " of " + std::to_string(M) + " rows, dequantized weights");
    if (r.int8) c.nmse_bound = 1e-3;  // X's int8 rounding: about 3e-5 on normal data
    c.flop = 2.0 * double(M) * double(N) * double(K);
    c.bytes = double(M * K) * ops::element_bytes(s) + double(weight_bytes) + double(M * N) * 4;
    out.push_back(std::move(c));
  }
  return out;
}
}  // namespace

Case qmatmul(Context& ctx, int64_t M, int64_t N, int64_t K, DType wtype, Precision act, const Options& opt,
             bool int8) {
  const gpu::Tuning& t = ctx.impl().tuning;
  if (int8 && !ops::qmatmul_dot_takes(ctx.device(), wtype, uint32_t(K)))
    throw Error(ErrorCode::unsupported, "bench: --int8 takes Q8_0 or Q4_0 weights on a device with integer dot "
                                        "products (" + ctx.device().name + ": int8_dot=" +
                                        (ctx.device().integer_dot_product ? "yes)" : "no)"));
  // A model's projection dequantizes for prefill on tensor cores: time what it runs.
  const bool dequantized = !int8 && ops::qmatmul_dequantizes(ctx.device(), t, storage_of(act), uint32_t(M));
  const std::string suffix = int8 ? " int8" : dequantized ? " dequantized" : "";
  return qmatmul_routes(ctx, M, N, K, wtype, act, opt, {{suffix, t, int8, dequantized}})[0];
}

std::vector<Case> qmatmul_tiles(Context& ctx, int64_t M, int64_t N, int64_t K, DType wtype, Precision act,
                                const Options& opt, const std::string& list) {
  if (M > 8) throw Error(ErrorCode::invalid_argument, "bench: --op qmatmul --tiles sweeps the decode kernels: --m 1 to 8");
  if (!ctx.device().subgroup_arithmetic)
    throw Error(ErrorCode::unsupported, "bench: --tiles: " + ctx.device().name + " has no subgroup arithmetic, "
                                        "which the GPU decode kernels need");
  std::vector<QRoute> routes;
  for (const std::string& item : split_list(list)) {
    std::vector<gpu::QrowsTile> tiles;
    if (item == "all") {
      tiles = ops::qrows_tile_candidates();
    } else if (const auto tile = gpu::QrowsTile::parse(item)) {
      tiles.push_back(*tile);
    } else {
      throw Error(ErrorCode::invalid_argument, tile_list_problem("qmatmul", item));
    }
    for (const gpu::QrowsTile& tile : tiles) {
      gpu::Tuning t = ctx.impl().tuning;
      t.qrows_tile = tile;
      t.cpu_matmul = false;  // CPU drivers: their own kernel would take the product
      routes.push_back({" tile " + tile.name(), t});
    }
  }
  return qmatmul_routes(ctx, M, N, K, wtype, act, opt, routes);
}

}  // namespace vkgate::bench
