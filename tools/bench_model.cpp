// `vkgate bench --model DIR | --model-shape NAME`: a whole model's prefill and
// decode speed, as llama-bench measures them (the lm_head on the last position
// only, as a generation runs it), and the device memory it holds.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli.hpp"
#include "vkgate/dtype.hpp"
#include "vkgate/error.hpp"
#include "vkgate/gguf.hpp"
#include "vkgate/gguf_model.hpp"
#include "vkgate/model.hpp"

namespace vkgate::cli {

namespace {

// Built-in shapes with seeded random weights (no checkpoint needed): the
// published config.json of each model, parsed as a checkpoint's would be,
// with --layers and --experts applied.
ModelConfig model_shape(const ModelBench& b) {
  static const std::map<std::string, const char*> kShapes{
      {"qwen3-0.6b", R"({"model_type": "qwen3", "hidden_size": 1024, "num_attention_heads": 16,
         "num_key_value_heads": 8, "head_dim": 128, "intermediate_size": 3072, "num_hidden_layers": 28,
         "vocab_size": 151936, "rope_theta": 1000000, "rms_norm_eps": 1e-6, "tie_word_embeddings": true,
         "max_position_embeddings": 40960})"},
      {"qwen3-30b-a3b", R"({"model_type": "qwen3_moe", "hidden_size": 2048, "num_attention_heads": 32,
         "num_key_value_heads": 4, "head_dim": 128, "intermediate_size": 6144, "num_hidden_layers": 48,
         "vocab_size": 151936, "rope_theta": 1000000, "rms_norm_eps": 1e-6, "tie_word_embeddings": false,
         "max_position_embeddings": 40960, "num_experts": 128, "num_experts_per_tok": 8,
         "moe_intermediate_size": 768, "norm_topk_prob": true, "decoder_sparse_step": 1, "mlp_only_layers": []})"},
      {"qwen3-next-80b-a3b", R"({"model_type": "qwen3_next", "hidden_size": 2048, "num_attention_heads": 16,
         "num_key_value_heads": 2, "head_dim": 256, "intermediate_size": 5120, "num_hidden_layers": 48,
         "vocab_size": 151936, "rope_theta": 10000000, "partial_rotary_factor": 0.25, "rms_norm_eps": 1e-6,
         "tie_word_embeddings": false, "max_position_embeddings": 262144, "full_attention_interval": 4,
         "linear_conv_kernel_dim": 4, "linear_key_head_dim": 128, "linear_value_head_dim": 128,
         "linear_num_key_heads": 16, "linear_num_value_heads": 32, "num_experts": 512,
         "num_experts_per_tok": 10, "moe_intermediate_size": 512, "shared_expert_intermediate_size": 512,
         "norm_topk_prob": true, "decoder_sparse_step": 1, "mlp_only_layers": []})"},
      // Qwen3.5-35B-A3B's text model: Qwen3-Next's stack with separate Gated
      // DeltaNet projections, 40 layers, 256 experts (top 8), vocabulary 248,320.
      {"qwen3.5-35b-a3b", R"({"model_type": "qwen3_5_moe_text", "hidden_size": 2048, "num_attention_heads": 16,
         "num_key_value_heads": 2, "head_dim": 256, "intermediate_size": 512, "num_hidden_layers": 40,
         "vocab_size": 248320, "rope_parameters": {"rope_type": "default", "rope_theta": 10000000,
         "partial_rotary_factor": 0.25, "mrope_section": [11, 11, 10], "mrope_interleaved": true},
         "rms_norm_eps": 1e-6, "tie_word_embeddings": false, "max_position_embeddings": 262144,
         "full_attention_interval": 4, "linear_conv_kernel_dim": 4, "linear_key_head_dim": 128,
         "linear_value_head_dim": 128, "linear_num_key_heads": 16, "linear_num_value_heads": 32,
         "num_experts": 256, "num_experts_per_tok": 8, "moe_intermediate_size": 512,
         "shared_expert_intermediate_size": 512, "norm_topk_prob": true})"}};
  const auto it = kShapes.find(b.shape);
  if (it == kShapes.end())
    throw UsageError("bench: unknown --model-shape '" + b.shape + "' (qwen3-0.6b, qwen3-30b-a3b, qwen3-next-80b-a3b, "
                     "qwen3.5-35b-a3b)");
  nlohmann::json j = nlohmann::json::parse(it->second);
  if (b.layers) j["num_hidden_layers"] = b.layers;
  if (b.hidden) j["hidden_size"] = b.hidden;
  if (b.vocab) j["vocab_size"] = b.vocab;
  if (b.experts) {
    if (!j.contains("num_experts")) throw UsageError("bench: --experts needs a sparse model (" + b.shape + " is dense)");
    if (b.experts < j["num_experts_per_tok"].get<int>())
      throw UsageError("bench: --experts " + std::to_string(b.experts) + " is fewer than the model's top-" +
                       j["num_experts_per_tok"].dump());
    j["num_experts"] = b.experts;
  }
  return parse_model_config_json(j.dump(), b.shape);
}

// Uniform values of standard deviation 1/√in (norms near 1), stored as `dtype`
// (F32 or F16): a fast generator, since the 0.6B shape has 600M values.
struct RandomTensors {
  std::map<std::string, std::vector<std::byte>> data;
  TensorMap map;
  RandomTensors(const ModelConfig& cfg, DType dtype) {
    uint64_t state = 0x9e3779b97f4a7c15ull;
    for (const TensorSpec& spec : expected_model_weights(cfg)) {
      const bool norm = spec.name.find("norm") != std::string::npos;
      // Zero-centred norms (x̂·(1 + w)) hold weights near 0, the Gated DeltaNet's plain one near 1.
      const bool zero_centered = cfg.norm_kind() == NormKind::zero_centered && spec.name.find("linear_attn.") == std::string::npos;
      const double half = std::sqrt(3.0 / double(spec.shape.back()));
      auto& bytes = data[spec.name];
      bytes.resize(size_t(spec.numel()) * dtype_size(dtype));
      for (int64_t i = 0; i < spec.numel(); ++i) {
        state ^= state << 13, state ^= state >> 7, state ^= state << 17;
        const float u = float(double(state >> 11) / double(1ull << 53) * 2 - 1);
        const float v = norm ? (zero_centered ? 0.0f : 1.0f) + 0.1f * u : float(half) * u;
        if (dtype == DType::F16) {
          const uint16_t h = float_to_half(v);
          std::memcpy(bytes.data() + 2 * i, &h, 2);
        } else {
          std::memcpy(bytes.data() + 4 * i, &v, 4);
        }
      }
      map[spec.name] = HostTensor{dtype, spec.shape, bytes};
    }
  }
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Where the last step's GPU time went, by kind of dispatch.
void print_dispatches(const Model& model, const char* step) {
  std::map<std::string, std::pair<double, int>> by_label;
  for (const StageTime& t : model.last_timings()) {
    auto& [us, n] = by_label[t.stage];
    us += t.microseconds;
    ++n;
  }
  std::vector<std::pair<double, std::string>> order;
  for (const auto& [label, v] : by_label) order.push_back({v.first, label});
  std::sort(order.rbegin(), order.rend());
  std::printf("%s by dispatch:", step);
  for (const auto& [us, label] : order)
    std::printf(" %s %.0f us (%d)%s", label.c_str(), us, by_label[label].second, &label == &order.back().second ? "" : ",");
  std::printf("\n");
}

double gpu_us(const Model& m) {
  double us = 0;
  for (const StageTime& t : m.last_timings()) us += t.microseconds;
  return us;
}

// Logits of the same positions from two routes must agree: a prompt's last
// position in one step, and the prompt in two halves (a prefill, then decode
// steps). Catches a wrong cache or position on this device; the kernels
// themselves are checked against the reference by the test suite.
double self_check(Model& model, const std::vector<int64_t>& ids) {
  const int T = int(ids.size());
  Sequence whole = model.start(1, T), split = model.start(1, T);
  const std::vector<float> a = model.extend(whole, ids, T);
  std::vector<float> b = model.extend(split, std::span(ids).first(size_t(T) / 2), T / 2);
  for (int t = T / 2; t < T; ++t) b = model.extend(split, std::span(ids).subspan(size_t(t), 1), 1);
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    num += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    den += double(a[i]) * a[i];
  }
  return std::isfinite(num) && den > 0 ? num / den : INFINITY;
}

}  // namespace

int bench_model(const ContextOptions& copts, const ModelBench& b) {
  // A shape's config before the device opens: an unknown --model-shape or a bad --experts is bad usage, told at once.
  std::optional<ModelConfig> shape;
  std::string name = b.dir;
  if (b.dir.empty()) {
    shape = model_shape(b);
    const ModelConfig full = model_shape(ModelBench{.shape = b.shape});
    name = b.shape + " (random weights";
    if (b.layers) name += "; " + std::to_string(shape->num_hidden_layers) + " of " + std::to_string(full.num_hidden_layers) + " layers";
    if (b.experts) name += "; " + std::to_string(shape->moe.num_experts) + " of " + std::to_string(full.moe.num_experts) + " experts";
    if (b.hidden) name += "; hidden " + std::to_string(shape->hidden_size()) + " of " + std::to_string(full.hidden_size());
    if (b.vocab) name += "; vocab " + std::to_string(shape->vocab_size) + " of " + std::to_string(full.vocab_size);
    name += ")";
  }
  Context ctx(copts);
  const DType dtype = b.precision == Precision::fp32 ? DType::F32 : DType::F16;
  std::unique_ptr<Model> model;
  if (!shape) {
    model = std::make_unique<Model>(Model::load(ctx, b.dir, {b.precision, true, false, b.quant, b.int8}));
  } else {
    const RandomTensors w(*shape, dtype);
    model = std::make_unique<Model>(ctx, *shape, w.map, ModelOptions{b.precision, false, false, b.quant, b.int8});
  }
  const ModelConfig& cfg = model->config();
  if (!b.json) {
    std::printf("device: %s\nmodel:  %s, %d layers, hidden %d, vocab %d, %s\n", ctx.device().summary().c_str(),
                name.c_str(), cfg.num_hidden_layers, cfg.hidden_size(), cfg.vocab_size,
                (std::string(to_string(b.precision)) + (b.quant ? std::string(", weights ") + to_string(*b.quant) : "") +
                 (!b.int8                                 ? ""
                  : ctx.device().integer_dot_product ? ", int8 activations"
                                                     : ", int8 activations asked for (no integer dot products: fp32 products)"))
                    .c_str());
    if (cfg.moe.num_experts > 0)
      std::printf("moe:    %zu sparse layers, %d experts of %d, top %d%s\n", cfg.moe_layers().size(), cfg.moe.num_experts,
                  cfg.moe.moe_intermediate_size, cfg.moe.num_experts_per_tok,
                  cfg.moe.shared_expert_intermediate_size ? ", a shared expert" : "");
  }
  // Enough ids for the longest prompt and for the self-check's 16, whichever is more.
  constexpr size_t kCheckTokens = 16;
  std::vector<int64_t> ids(std::max(kCheckTokens, size_t(*std::max_element(b.prompts.begin(), b.prompts.end()))));
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = int64_t((i * 7919 + 13) % size_t(cfg.vocab_size));
  const double check = self_check(*model, std::vector<int64_t>(ids.begin(), ids.begin() + kCheckTokens));
  // int8 activations round each block of X to 1/127 of its largest value: a
  // difference in the last bit of an input (another kernel's sum) may move a
  // rounding, so prefill and decode agree as 16-bit storage does.
  const double bound = b.precision == Precision::fp32 && !b.int8 ? 1e-8 : 1e-3;

  struct Row {
    int prompt;
    double prefill_ms, prefill_gpu_us, decode_ms, decode_gpu_us;
  };
  std::vector<Row> rows;
  MemoryUse mem;
  for (int T : b.prompts) {
    Sequence seq = model->start(1, T + b.decode + 1);
    const std::span<const int64_t> prompt(ids.data(), size_t(T));
    std::vector<double> wall, gpu;
    // The first run records; on a GPU, runs for at least 1 s more before the
    // timed ones: an idle GPU's clocks are low (an H100 prefilled 512 tokens
    // in 109 ms right after the self-check and several times faster warm).
    const auto warm_until = std::chrono::steady_clock::now() +
                            std::chrono::milliseconds(ctx.device().type == "cpu" ? 0 : 1000);
    for (int rep = 0; rep <= b.reps; ++rep) {
      seq.truncate(0);
      const auto t0 = std::chrono::steady_clock::now();
      model->extend(seq, prompt, T);
      if (rep == 0 && t0 < warm_until) {
        --rep;
        continue;
      }
      if (rep == 0) continue;
      wall.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
      gpu.push_back(gpu_us(*model));
    }
    std::vector<double> step_wall, step_gpu;
    int64_t id = ids[size_t(T) % ids.size()];
    Sequence* one = &seq;
    for (int s = 0; s <= b.decode; ++s) {  // the first step records and warms up
      const auto t0 = std::chrono::steady_clock::now();
      id = model->extend_greedy(std::span(&one, 1), std::span(&id, 1))[0];
      if (s == 0) continue;
      step_wall.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
      step_gpu.push_back(gpu_us(*model));
    }
    rows.push_back({T, median(wall), median(gpu), step_wall.empty() ? 0 : median(step_wall),
                    step_gpu.empty() ? 0 : median(step_gpu)});
    if (!b.json && T == b.prompts.back()) print_dispatches(*model, "decode step");
    mem = model->memory();
    const Row& r = rows.back();
    if (!b.json)
      std::printf("prompt %5d: prefill %10.1f ms (GPU %10.1f ms) %8.2f tokens/s | decode %8.1f ms/token (GPU %8.1f ms) "
                  "%7.2f tokens/s\n",
                  T, r.prefill_ms, r.prefill_gpu_us / 1000, 1000.0 * T / r.prefill_ms, r.decode_ms,
                  r.decode_gpu_us / 1000, r.decode_ms > 0 ? 1000.0 / r.decode_ms : 0.0);
  }
  // Several sequences decoding together (--sequences), each after a prompt of
  // the first length (its ids rotated, so that no two are the same).
  struct Together {
    int n;
    double step_ms, step_gpu_us;
  };
  std::vector<Together> together;
  for (int n : b.sequences) {
    const int T = b.prompts.front();
    std::vector<Sequence> seqs;
    std::vector<int64_t> next;
    for (int i = 0; i < n; ++i) {
      std::vector<int64_t> prompt(size_t(T), 0);
      for (size_t t = 0; t < prompt.size(); ++t) prompt[t] = ids[(t + size_t(i)) % ids.size()];
      seqs.push_back(model->start(1, T + b.decode + 1));
      const std::vector<float> logits = model->extend(seqs.back(), prompt, T);
      next.push_back(std::max_element(logits.begin(), logits.end()) - logits.begin());
    }
    std::vector<Sequence*> all;
    for (Sequence& s : seqs) all.push_back(&s);
    std::vector<double> wall, gpu;
    for (int s = 0; s <= b.decode; ++s) {  // the first step records and warms up
      const auto t0 = std::chrono::steady_clock::now();
      next = model->extend_greedy(all, next);
      if (s == 0) continue;
      wall.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
      gpu.push_back(gpu_us(*model));
    }
    const Together& t = together.emplace_back(Together{n, median(wall), median(gpu)});
    if (!b.json && n == b.sequences.back()) print_dispatches(*model, "the step of all sequences");
    if (!b.json) {
      const double rate = 1000.0 * n / t.step_ms;
      std::printf("%2d sequences together (after %d tokens each): decode %8.1f ms/step (GPU %8.1f ms) %7.2f tokens/s",
                  n, T, t.step_ms, t.step_gpu_us / 1000, rate);
      if (together.front().n == 1) std::printf(" (%.2fx one sequence's)", rate * together.front().step_ms / 1000.0);
      std::printf("\n");
    }
  }
  const double mib = 1 << 20;
  if (b.json) {
    std::printf("{\"device\": \"%s\", \"model\": \"%s\", \"precision\": \"%s\", \"quant\": \"%s\", \"int8_activations\": %s, \"self_check_nmse\": %.3e, "
                "\"memory_mib\": {\"weights\": %.1f, \"kv_cache\": %.1f, \"workspace\": %.1f}, "
                "\"weights_read_per_token_mib\": %.1f, \"runs\": [",
                ctx.device().name.c_str(), name.c_str(), to_string(b.precision), b.quant ? to_string(*b.quant) : "none",
                b.int8 && ctx.device().integer_dot_product ? "true" : "false", check, mem.weights / mib,
                mem.kv_cache / mib, mem.workspace / mib, mem.weights_per_token / mib);
    for (size_t i = 0; i < rows.size(); ++i)
      std::printf("%s{\"prompt\": %d, \"prefill_ms\": %.3f, \"prefill_gpu_ms\": %.3f, \"prefill_tokens_per_s\": %.3f, "
                  "\"decode_ms\": %.3f, \"decode_gpu_ms\": %.3f, \"decode_tokens_per_s\": %.3f}",
                  i ? ", " : "", rows[i].prompt, rows[i].prefill_ms, rows[i].prefill_gpu_us / 1000,
                  1000.0 * rows[i].prompt / rows[i].prefill_ms, rows[i].decode_ms, rows[i].decode_gpu_us / 1000,
                  rows[i].decode_ms > 0 ? 1000.0 / rows[i].decode_ms : 0.0);
    std::printf("], \"sequences\": [");
    for (size_t i = 0; i < together.size(); ++i)
      std::printf("%s{\"n\": %d, \"step_ms\": %.3f, \"step_gpu_ms\": %.3f, \"tokens_per_s\": %.3f}", i ? ", " : "",
                  together[i].n, together[i].step_ms, together[i].step_gpu_us / 1000,
                  1000.0 * together[i].n / together[i].step_ms);
    std::printf("]}\n");
  } else {
    // A GLA model's sequence holds a recurrent state per layer, not keys and values.
    // A GGUF's weights beside its tensors' bytes in the file (blocks stay as stored).
    std::string file;
    if (!b.dir.empty() && is_gguf_file(b.dir)) {
      const double bytes = double(GgufFile::open(b.dir).tensor_bytes());
      char text[96];
      std::snprintf(text, sizeof text, " (file tensors %.1f MiB: %+.1f %%)", bytes / mib,
                    100.0 * (double(mem.weights) - bytes) / bytes);
      file = text;
    }
    std::printf("memory: weights %.1f MiB%s, %s %.1f MiB (the last prompt's sequence), workspace %.1f MiB\n",
                mem.weights / mib, file.c_str(),
                cfg.gla ? "GLA states" : cfg.linear_attention ? "KV caches and Gated DeltaNet states" : "KV cache",
                mem.kv_cache / mib, mem.workspace / mib);
    // Every weight crosses memory once per decode step (the experts at their average share).
    const double step_us = rows.back().decode_gpu_us;
    std::printf("weights read per decode token: %.1f MiB (%.2f GB/s over the last prompt's median decode step)\n",
                mem.weights_per_token / mib, step_us > 0 ? double(mem.weights_per_token) / step_us / 1e3 : 0.0);
    std::printf("check: a 16-token prompt in one step vs a prefill of 8 and 8 decode steps, NMSE %.2e (bound %.0e)\n",
                check, bound);
  }
  if (validation_failed(ctx)) return 1;
  if (!(check <= bound)) {
    std::fprintf(stderr, "vkgate: the model's self-check failed (NMSE %.3e)\n", check);
    return 1;
  }
  return 0;
}

}  // namespace vkgate::cli
