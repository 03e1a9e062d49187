// `vkgate bench`: ops, the block and whole models timed with GPU timestamps,
// each checked against the CPU reference first.
#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "cli.hpp"
#include "bench/bench.hpp"
#include "vkgate/error.hpp"

namespace vkgate::cli {

namespace {

constexpr const char* kBenchUsage = R"(usage: vkgate bench [--device SEL] [--json] [--quiet] [--peak] [--warmup N] [--reps N] [CASE]

Checks each case against the CPU reference, then times warm-up and repeated
runs with GPU timestamps: median and min..max µs, GFLOP/s, GB/s, and with
--peak the share of the device's measured peak (a large copy for bandwidth, a
large fp32 matmul for compute). Without a CASE: the standard set (matmul
1024³ f32 and f16, attention T 512 × 16 heads × 128, rmsnorm 512×2048,
softmax 16384×1024, the Qwen3-Next block at T 64). Runs go back to back (a
block's recorded commands are replayed) and, on a GPU, warm-up lasts at least
1 s, so the figures are at the clocks of a busy GPU.

CASE:
  --op matmul --m M --n N --k K [--dtype f32|f16|bf16] [--tiles all|LIST]
          --tiles (f16, on tensor cores, or their emulation on CPU drivers): the same product
          once per kernel of LIST, comma-separated: "direct" (matmul_coopmat.comp) or a
          tile of matmul_staged.comp, WMxWNxFMxFNxTK[s1][h] (VKGATE_MATMUL_TILE); "all": the
          direct kernel and every candidate tile; tiles the device cannot take are skipped
  --op qmatmul --m M --n N --k K --quant T [--dtype f32|f16] [--int8] [--tiles all|LIST]
          W in block format T (q8_0, q4_0, q4_1, q5_0, q5_1, q2_k, q3_k, q4_k, q5_k, q6_k, iq4_nl,
          iq4_xs) read as stored and
          X at --dtype, then the matmul case with W at --dtype too, and the ratio of their times;
          over 8 rows of f16 on tensor cores W is dequantized to f16 first, as a model does
          (both passes timed, "dequantized");
          --int8 (q8_0, q4_0) also X quantized to int8 blocks and multiplied with integer dot
          products (both passes timed), as a ratio to the first;
          --tiles (--m 1 to 8) first the same product once per GPU decode kernel of LIST:
          "chunks" or slicesCxU (VKGATE_QROWS_TILE); "all": every candidate
  --op attention --T T --heads H [--kv-heads KV] --head-dim Dh [--batch B] [--causal 0|1] [--dtype ...]
             [--unfused] [--tiles all|LIST]   (default: the fused flash kernel; --unfused: scores,
          softmax, P·V, which the block takes on CPU drivers while the scores fit 64 MiB);
          --tiles (f16, on tensor cores, or their emulation on CPU drivers): the fused kernel
          once per tile of LIST, SxK[p|h] (VKGATE_FLASH_TILE); "all": every candidate; tiles
          the device cannot take are skipped
  --op rmsnorm --rows R --dim D
  --op topk --rows R --n N --k K   each row's K (≤ 256) largest of fp32 logits [R, N], as a
          sampler reads them instead of the row (shaders/topk.comp)
  --op rope --rows R --heads H --head-dim Dh [--rotary N]
  --op softmax --rows R --keys S
  --op gate --rows R --heads H --head-dim Dh [--gate-width 1|Dh]
  --op gla --T T --heads H --dk DK --dv DV [--dim D] [--batch B] [--precision ...] [--mode M]
          a gated linear attention layer (hidden D, default 2048; low-rank forget gate,
          output norm and gate) from a zero state: the projections and the recurrence,
          M = recurrent, chunk, auto (the layer's choice) or both (default: the two
          forms, then the chunked form's speed-up on the recurrence's stages)
  --op gla --sweep [--sweep-max T] ...   the same at T = 128, 256, ... up to T
  --op gdn --T T [--dim D] [--key-heads NK] [--value-heads NV] [--dk DK] [--dv DV] [--conv K]
          [--batch B] [--precision ...] [--mode M]   (--sweep as gla's)
          a Gated DeltaNet layer (default: Qwen3-Next-80B's, hidden 2048, nk 16, nv 32,
          dk = dv = 128, K 4) from zero states: the projections, the conv, the delta rule
          and the output norm; M as gla's (the layer's own choice: VKGATE_GDN_MODE). The
          first 128 tokens of each row are checked against the reference; --T 1 times a
          decode step (a recurrent state: the same whatever came before)
  --block [--config FILE] [--batch B] [--T T] [--past P] [--precision fp32|fp16|bf16]
          (default: the Qwen3-Next attention shape, T 64; --past P --T 1 is a decode step)
  --block --sweep [--sweep-max T]   prefill at T = 128, 256, ... up to T (default 8192)
  --block --gate-positions   the block (--config's shape, or the default) with an elementwise
          sigmoid gate from gate_proj at each of the paper's positions G1 sdpa, G2 value,
          G3 key, G4 query, G5 dense, and without a gate; each time as a ratio to G1's
  --model DIR|FILE.gguf | --model-shape NAME [--layers N] [--experts E] [--hidden D] [--vocab V]
          [--prompts 64,512] [--decode N] [--sequences LIST] [--precision ...] [--quant T] [--int8]
          (--weights is --model, as run's) a whole model (a checkpoint directory or a GGUF
          file — its weights then also against the file's tensor bytes — or a built-in shape with seeded random
          weights: qwen3-0.6b, qwen3-30b-a3b, qwen3-next-80b-a3b, qwen3.5-35b-a3b, their real configs; where
          the device cannot hold them, --layers keeps the first N layers (Qwen3-Next's 3:1
          pattern stays), --experts E routes among E experts at the same top-k, --hidden D
          and --vocab V narrow the residual stream and the vocabulary; the model line says
          what was changed): prefill
          tokens/s per prompt length (the lm_head on the last position only, as a generation
          runs it), decode tokens/s over N greedy steps (default 16; the next id chosen as generation
          chooses it: on GPUs by the device, Model::extend_greedy), the weight bytes a decode step
          reads (sparse MoE layers: their experts' top-k share) and that over the step's time,
          and the device memory of the weights, the caches and the workspace (--int8: int8 activations for the Q8_0 and
          Q4_0 projections where the device has integer dot products, as run --int8). The
          check before timing: a 16-token prompt in one step against a prefill of 8 and 8
          decode steps (the kernels are checked against the reference by the test suite).
          --sequences 1,8: also decode N sequences together (a server's batched step: one
          device step for all, each with its own cache, after the first prompt length each),
          tokens/s of all of them and its ratio to one sequence's

  --tokenizer PATH [--text-file FILE] [--write-text FILE]
          a tokenizer.json (or a directory holding one): load time, and encoding and
          decoding throughput (MB/s, median of 5) on a 1 MiB text, generated (prose, code
          with tabs and CRLF, digits, CJK, emoji) unless --text-file gives one; checks that
          decode(encode(text)) is the text (after the normalizer, e.g. NFC). --write-text FILE writes the text used, so another
          tokenizer can be timed on the same bytes (alone, it only writes the file; - writes it
          to stdout and the report to stderr; FILE as run's --output). No device

  --json       print one JSON document instead of the table
  --quiet      no progress line on stderr (drawn only on a terminal: pipeline compilation,
               a model's tensors loading)
)";

void print_case(const vkgate::bench::Case& c, const vkgate::bench::Peak* peak) {
  std::printf("%-46s %11.1f us [%.1f..%.1f] %9.2f GFLOP/s %8.2f GB/s", c.name.c_str(), c.time.median_us,
              c.time.min_us, c.time.max_us, c.gflops(), c.gbps());
  if (peak && peak->matmul_gflops > 0)
    std::printf("  %5.1f%% compute %5.1f%% bandwidth", 100 * c.gflops() / peak->matmul_gflops,
                100 * c.gbps() / peak->copy_gbps);
  std::printf("  NMSE %.2e (%s)  mem %.1f MiB\n", c.nmse, c.check.c_str(), double(c.device_bytes) / (1 << 20));
  if (c.stages.size() > 1)
    for (const auto& [label, st] : c.stages)
      std::printf("    %-20s %11.1f us  %5.1f%%\n", label.c_str(), st.median_us,
                  c.time.median_us > 0 ? 100 * st.median_us / c.time.median_us : 0.0);
}

// After a --tiles sweep: the fastest of cases[first..], what a device's default should be.
void print_fastest(const std::vector<vkgate::bench::Case>& cases, size_t first) {
  if (cases.size() <= first) return;
  const auto best = std::min_element(cases.begin() + long(first), cases.end(), [](const auto& a, const auto& b) {
    return a.time.median_us < b.time.median_us;
  });
  std::printf("fastest of %zu: %s (%.1f us)\n", cases.size() - first, best->name.c_str(), best->time.median_us);
}

// The stages of a GLA or Gated DeltaNet case that run the recurrence in
// either form (the projections, norms, conv and output are the same in both).
double recurrence_us(const vkgate::bench::Case& c) {
  double us = 0;
  for (const auto& [label, st] : c.stages)
    if ((label.starts_with("gla.") && label != "gla.output") || label == "gdn.recurrent" ||
        label.starts_with("gdn.chunk"))
      us += st.median_us;
  return us;
}

// A comma-separated list of positive integers (--prompts, --sequences).
std::vector<int> positive_list(const std::string& option, const std::string& list) {
  std::vector<int> out;
  for (size_t at = 0; at <= list.size();) {
    const size_t comma = std::min(list.find(',', at), list.size());
    const std::string item = list.substr(at, comma - at);  // outlives `end`, which points into it
    char* end = nullptr;
    const long n = std::strtol(item.c_str(), &end, 10);
    if (comma == at || *end || n < 1 || n > (1 << 20))
      throw UsageError(option + " must be comma-separated positive integers, got '" + list + "'");
    out.push_back(int(n));
    at = comma + 1;
  }
  return out;
}

int cmd_bench(Args& args) {
  vkgate::ContextOptions copts;
  // The GPU times it reports; VKGATE_TIMESTAMPS=0 leaves them out, for wall
  // times without their cost (~75 µs a dispatch on CPU drivers).
  if (!std::getenv("VKGATE_TIMESTAMPS")) copts.timestamps = true;
  vkgate::bench::Options opt;
  std::map<std::string, std::string> v;  // case parameters by flag
  bool json = false, quiet = false, want_peak = false, block = false, sweep = false, unfused = false, gate_positions = false;
  ModelBench model;
  TokenizerBench text;
  std::string op, config, gla_mode = "both", tiles;
  while (!args.done()) {
    const std::string a = args.next();
    if (a == "--device") copts.device = args.value(a);
    else if (a == "--json") json = true;
    else if (a == "--quiet") quiet = true;
    else if (a == "--peak") want_peak = true;
    else if (a == "--warmup") opt.warmup = int(args.number(a, 0, 1000));
    else if (a == "--reps") opt.reps = int(args.number(a, 1, 100000));
    else if (a == "--op") op = args.value(a);
    else if (a == "--block") block = true;
    else if (a == "--model" || a == "--weights") model.dir = args.value(a);
    else if (a == "--model-shape") model.shape = args.value(a);
    else if (a == "--decode") model.decode = int(args.number(a, 1, 1 << 20));
    else if (a == "--layers") model.layers = int(args.number(a, 1, 4096));
    else if (a == "--experts") model.experts = int(args.number(a, 1, 65536));
    else if (a == "--hidden") model.hidden = int(args.number(a, 1, 1 << 16));
    else if (a == "--vocab") model.vocab = int(args.number(a, 1, 1 << 24));
    else if (a == "--prompts") model.prompts = positive_list(a, args.value(a));
    else if (a == "--sequences") model.sequences = positive_list(a, args.value(a));
    else if (a == "--tokenizer") text.tokenizer = args.value(a);
    else if (a == "--text-file") text.text_file = args.value(a);
    else if (a == "--write-text") text.write_text = args.value(a);
    else if (a == "--sweep") sweep = true;
    else if (a == "--gate-positions") gate_positions = true;
    else if (a == "--unfused") unfused = true;
    else if (a == "--config") config = args.value(a);
    else if (a == "--mode") gla_mode = args.value(a);
    else if (a == "--dtype" || a == "--precision") v["precision"] = args.value(a);
    else if (a == "--quant") model.quant = parse_quant_flag(a, args.value(a));
    else if (a == "--int8") model.int8 = true;
    else if (a == "--tiles") tiles = args.value(a);
    else if (a == "--past" || a == "--causal" || a == "--rotary")  // --rotary 0: RoPE on no dims
      v[a.substr(2)] = std::to_string(args.number(a, 0, a == "--causal" ? 1 : 1L << 30));
    else if (a == "--m" || a == "--n" || a == "--k" || a == "--T" || a == "--heads" || a == "--kv-heads" ||
             a == "--head-dim" || a == "--batch" || a == "--rows" || a == "--dim" || a == "--keys" ||
             a == "--gate-width" || a == "--sweep-max" || a == "--dk" || a == "--dv" || a == "--key-heads" ||
             a == "--value-heads" || a == "--conv")
      v[a.substr(2)] = std::to_string(args.number(a, 1, 1L << 30));  // sizes: an empty case is bad usage
    else throw UsageError("bench: unknown option '" + a + "'");
  }
  auto get = [&](const char* key, long fallback) -> int64_t {
    auto it = v.find(key);
    if (it != v.end()) return std::stol(it->second);
    if (fallback < 0) throw UsageError(std::string("bench: --op ") + op + " needs --" + key);
    return fallback;
  };
  const vkgate::Precision prec = v.count("precision") ? parse_precision("--dtype", v["precision"]) : vkgate::Precision::fp32;
  if (int(!op.empty()) + int(block) + int(!model.dir.empty() || !model.shape.empty()) > 1)
    throw UsageError("bench: give one of --op, --block and --model/--model-shape");
  if (model.quant && model.dir.empty() && model.shape.empty() && op != "qmatmul")
    throw UsageError("bench: --quant applies to --op qmatmul, --model and --model-shape");
  if (model.int8 && model.dir.empty() && model.shape.empty() && op != "qmatmul")
    throw UsageError("bench: --int8 applies to --op qmatmul, --model and --model-shape");
  if (!tiles.empty() && op != "matmul" && op != "qmatmul" && op != "attention")
    throw UsageError("bench: --tiles applies to --op matmul, qmatmul and attention");
  namespace b = vkgate::bench;
  // What the flags alone can refuse is refused before a device opens (seconds on a GPU, more under validation).
  static const std::vector<std::string> kOps{"matmul", "qmatmul", "attention", "rmsnorm", "topk",
                                             "rope",   "softmax", "gate",      "gla",     "gdn"};
  if (!op.empty() && std::find(kOps.begin(), kOps.end(), op) == kOps.end()) {
    std::string names;
    for (const std::string& o : kOps) names += (names.empty() ? "" : ", ") + o;
    throw UsageError("bench: unknown --op '" + op + "' (" + names + ")");
  }
  if (op == "qmatmul" && !model.quant) throw UsageError("bench: --op qmatmul needs --quant T");
  if (op == "matmul" && !tiles.empty() && prec != vkgate::Precision::fp16)
    throw UsageError("bench: --tiles times the fp16 tensor-core kernels: add --dtype f16");
  if (op == "attention" && !tiles.empty() && (prec != vkgate::Precision::fp16 || unfused))
    throw UsageError("bench: --tiles times the fused fp16 tensor-core kernel: add --dtype f16, leave out --unfused");
  if (op == "qmatmul" && !tiles.empty() && model.int8)
    throw UsageError("bench: --tiles sweeps the decode kernels of fp activations: leave out --int8");
  if (!tiles.empty())
    if (const std::string problem = b::tile_list_problem(op, tiles); !problem.empty()) throw UsageError(problem);
  std::vector<b::GlaForm> forms;  // --op gla / gdn
  if (gla_mode == "both") forms = {b::GlaForm::recurrent, b::GlaForm::chunk};
  else if (gla_mode == "recurrent") forms = {b::GlaForm::recurrent};
  else if (gla_mode == "chunk") forms = {b::GlaForm::chunk};
  else if (gla_mode == "auto") forms = {b::GlaForm::automatic};
  else throw UsageError("bench: --mode must be recurrent, chunk, auto or both, got '" + gla_mode + "'");
  if (!text.tokenizer.empty() || !text.text_file.empty() || !text.write_text.empty()) {
    if (!op.empty() || block || !model.dir.empty() || !model.shape.empty())
      throw UsageError("bench: --tokenizer does not combine with --op, --block or --model");
    if (text.tokenizer.empty() && text.write_text.empty()) throw UsageError("bench: --text-file needs --tokenizer");
    text.json = json;
    return bench_tokenizer(text);
  }
  if (!model.dir.empty() || !model.shape.empty()) {
    if (!model.dir.empty() && !model.shape.empty()) throw UsageError("bench: give --model or --model-shape, not both");
    if (!model.dir.empty() && (model.layers || model.experts || model.hidden || model.vocab))
      throw UsageError("bench: --layers, --experts, --hidden and --vocab shrink a --model-shape, not a --model directory");
    model.precision = prec;
    model.json = json;
    model.reps = opt.reps == vkgate::bench::Options{}.reps ? 2 : opt.reps;
    show_progress(copts, quiet);
    return bench_model(copts, model);
  }

  show_progress(copts, quiet);
  vkgate::Context ctx(copts);
  std::vector<vkgate::bench::Case> cases;
  auto add = [&](vkgate::bench::Case c) {
    if (!json) print_case(c, nullptr);
    cases.push_back(std::move(c));
  };
  if (!json) std::printf("device: %s\n", ctx.device().summary().c_str());
  if (op == "matmul" && !tiles.empty()) {
    for (auto& c : b::matmul_tiles(ctx, get("m", -1), get("n", -1), get("k", -1), opt, tiles)) add(std::move(c));
    if (!json) print_fastest(cases, 0);
  } else if (op == "matmul") {
    add(b::matmul(ctx, get("m", -1), get("n", -1), get("k", -1), prec, opt));
  } else if (op == "qmatmul") {
    const int64_t M = get("m", -1), N = get("n", -1), K = get("k", -1);
    if (!tiles.empty()) {
      for (auto& c : b::qmatmul_tiles(ctx, M, N, K, *model.quant, prec, opt, tiles)) add(std::move(c));
      if (!json) print_fastest(cases, 0);
    }
    // The peer in this process: the same product with W stored as X is.
    const size_t first = cases.size();
    add(b::qmatmul(ctx, M, N, K, *model.quant, prec, opt));
    add(b::matmul(ctx, M, N, K, prec, opt));
    if (!json)
      std::printf("%s weights take %.2fx the time of %s weights\n", vkgate::to_string(*model.quant),
                  cases[first].time.median_us / cases[first + 1].time.median_us, vkgate::to_string(prec));
    if (model.int8) {
      add(b::qmatmul(ctx, M, N, K, *model.quant, prec, opt, true));
      if (!json)
        std::printf("int8 activations (quantized and multiplied) take %.2fx the time of %s activations\n",
                    cases[first + 2].time.median_us / cases[first].time.median_us, vkgate::to_string(prec));
    }
  } else if (op == "attention") {
    const int64_t H = get("heads", -1);
    if (!tiles.empty()) {
      for (auto& c : b::attention_tiles(ctx, get("batch", 1), get("T", -1), H, get("kv-heads", H), get("head-dim", -1),
                                        get("causal", 1) != 0, opt, tiles))
        add(std::move(c));
      if (!json) print_fastest(cases, 0);
    } else {
      add(b::attention(ctx, get("batch", 1), get("T", -1), H, get("kv-heads", H), get("head-dim", -1),
                       get("causal", 1) != 0, prec, opt, !unfused));
    }
  } else if (op == "topk") {
    add(b::top_k(ctx, get("rows", -1), get("n", -1), get("k", -1), opt));
  } else if (op == "rmsnorm") {
    add(b::rmsnorm(ctx, get("rows", -1), get("dim", -1), opt));
  } else if (op == "rope") {
    const int64_t Dh = get("head-dim", -1);
    add(b::rope(ctx, get("rows", -1), get("heads", -1), Dh, get("rotary", Dh), opt));
  } else if (op == "softmax") {
    add(b::softmax(ctx, get("rows", -1), get("keys", -1), opt));
  } else if (op == "gate") {
    const int64_t Dh = get("head-dim", -1);
    add(b::gate(ctx, get("rows", -1), get("heads", -1), Dh, get("gate-width", Dh), opt));
  } else if (op == "gla" || op == "gdn") {
    std::function<b::Case(int64_t, b::GlaForm)> run;
    if (op == "gla") {
      vkgate::GlaConfig g;
      g.hidden_size = int(get("dim", 2048));
      g.num_heads = g.num_kv_heads = int(get("heads", -1));
      // fla's head sizes are int(D·expand) / H: expand = H·d / D gives them back.
      g.expand_k = double(get("dk", -1) * g.num_heads) / g.hidden_size;
      g.expand_v = double(get("dv", -1) * g.num_heads) / g.hidden_size;
      if (g.head_k_dim() != get("dk", -1) || g.head_v_dim() != get("dv", -1))
        throw UsageError("bench: --dk and --dv times --heads must not exceed --dim");
      run = [&, g](int64_t T, b::GlaForm f) { return b::gla(ctx, g, int(get("batch", 1)), int(T), prec, opt, f); };
    } else {
      vkgate::GdnConfig g = vkgate::GdnConfig::qwen3_next();
      g.hidden_size = int(get("dim", g.hidden_size));
      g.num_key_heads = int(get("key-heads", g.num_key_heads));
      g.num_value_heads = int(get("value-heads", g.num_value_heads));
      g.key_head_dim = int(get("dk", g.key_head_dim));
      g.value_head_dim = int(get("dv", g.value_head_dim));
      g.conv_kernel = int(get("conv", g.conv_kernel));
      run = [&, g](int64_t T, b::GlaForm f) { return b::gdn(ctx, g, int(get("batch", 1)), int(T), prec, opt, f); };
    }
    for (int64_t T = sweep ? 128 : get("T", -1); T <= (sweep ? get("sweep-max", 8192) : get("T", -1)); T *= 2) {
      for (b::GlaForm f : forms) add(run(T, f));
      if (forms.size() == 2 && !json) {
        const auto& rec = cases[cases.size() - 2];
        const auto& chunk = cases.back();
        std::printf("    T %lld: the recurrence %.1f ms (recurrent) / %.1f ms (chunk) = %.2fx; layer %.2fx; memory %.1f / %.1f MiB\n",
                    (long long)T, recurrence_us(rec) / 1e3, recurrence_us(chunk) / 1e3,
                    recurrence_us(rec) / recurrence_us(chunk), rec.time.median_us / chunk.time.median_us,
                    double(rec.device_bytes) / (1 << 20), double(chunk.device_bytes) / (1 << 20));
      }
    }
  } else if (block) {
    const vkgate::BlockConfig cfg = config.empty() ? vkgate::BlockConfig::qwen3_next_attention() : vkgate::load_config(config);
    if (sweep) {
      for (int64_t T = 128; T <= get("sweep-max", 8192); T *= 2)
        add(b::block(ctx, cfg, int(get("batch", 1)), int(T), 0, prec, opt));
    } else if (gate_positions) {
      // Each variant's config, the last without a gate. Two rounds, the first
      // untimed: on lavapipe whichever block runs first in a process measured
      // up to 1.6x slower at a decode step (BENCHMARKS.md).
      std::vector<std::pair<std::string, vkgate::BlockConfig>> variants;
      using P = vkgate::GatePosition;
      for (P at : {P::sdpa, P::value, P::key, P::query, P::dense}) {
        vkgate::BlockConfig c = cfg;
        c.gate_position = at;
        c.gate_kind = vkgate::GateKind::elementwise;
        c.gate_layout = vkgate::GateLayout::separate;
        c.gate_shared_heads = false;
        variants.emplace_back(std::string(" gate ") + to_string(at), c);
      }
      variants.emplace_back(" no gate", cfg);
      variants.back().second.gate_kind = vkgate::GateKind::none;
      for (int round = 0; round < 2; ++round)
        for (const auto& [suffix, c] : variants) {
          vkgate::bench::Case k = b::block(ctx, c, int(get("batch", 1)), int(get("T", 64)), int(get("past", 0)), prec, opt);
          k.name += suffix;
          if (round == 1) add(std::move(k));
        }
      if (!json)
        for (const auto& k : cases)
          std::printf("  %-44s %6.3f x G1 sdpa\n", k.name.c_str(), k.time.median_us / cases.front().time.median_us);
    } else {
      add(b::block(ctx, cfg, int(get("batch", 1)), int(get("T", 64)), int(get("past", 0)), prec, opt));
    }
  } else {
    add(b::matmul(ctx, 1024, 1024, 1024, vkgate::Precision::fp32, opt));
    if (ctx.device().storage16) add(b::matmul(ctx, 1024, 1024, 1024, vkgate::Precision::fp16, opt));
    add(b::attention(ctx, 1, 512, 16, 16, 128, true, vkgate::Precision::fp32, opt, true));
    add(b::attention(ctx, 1, 512, 16, 16, 128, true, vkgate::Precision::fp32, opt, false));
    add(b::rmsnorm(ctx, 512, 2048, opt));
    add(b::softmax(ctx, 16 * 1024, 1024, opt));
    add(b::block(ctx, vkgate::BlockConfig::qwen3_next_attention(), 1, 64, 0, vkgate::Precision::fp32, opt));
  }
  vkgate::bench::Peak peak;
  if (want_peak) {
    peak = b::peak(ctx, opt);
    if (!json) {
      std::printf("peak: copy %.2f GB/s (copy command %.2f, copy shader %.2f), fp32 matmul %.2f GFLOP/s; shares of peak:\n",
                  peak.copy_gbps, peak.copy_command_gbps, peak.copy_shader_gbps, peak.matmul_gflops);
      for (const auto& c : cases)
        std::printf("  %-46s %5.1f%% compute %5.1f%% bandwidth\n", c.name.c_str(), 100 * c.gflops() / peak.matmul_gflops,
                    100 * c.gbps() / peak.copy_gbps);
    }
  }
  if (json) std::printf("%s\n", b::to_json(ctx.device(), cases, want_peak ? &peak : nullptr).c_str());
  bool ok = true;
  for (const auto& c : cases)
    ok = ok && std::isfinite(c.nmse) &&
         c.nmse <= (c.nmse_bound > 0                      ? c.nmse_bound
                    : prec == vkgate::Precision::bf16 ? 1e-4
                    : prec == vkgate::Precision::fp16 ? 1e-5
                                                      : 1e-9);
  if (!ok) std::fprintf(stderr, "vkgate: a benchmark case failed its correctness check\n");
  return ok ? 0 : 1;
}

}  // namespace

const Command kBench{"bench", kBenchUsage, cmd_bench};

}  // namespace vkgate::cli
