// Sparse MoE models whose routed experts are in ggml's block formats (issue
// 28): quantized on load (ModelOptions::quant) and given as block-format
// tensors (a GGUF's experts), kept in their blocks on the device and
// dequantized by the grouped GEMMs (moe_matmul.comp's QUANT variants). Logits
// against the double reference on the dequantized weights, so the bound
// measures the device's products: a prefill (the tiled kernels), decode steps
// of 1-8 rows (the rows kernels), greedy ids, the experts split over buffers,
// the GPU kernels on CPU drivers too, and the weight bytes the blocks save.
#include "doctest.hpp"

#include <cstring>

#include "ops/qmatmul.hpp"
#include "model_check.hpp"
#include "vkgate/error.hpp"
#include "vkgate/quant.hpp"

namespace test_quant_moe {

using namespace vkgate;

namespace {

ModelConfig parse(const nlohmann::json& j) { return parse_model_config_json(j.dump(), "config.json"); }

// Rows of 256 (Q4_K's super-block) everywhere the experts are; otherwise tiny.
nlohmann::json tiny_moe_json() {
  return {{"model_type", "qwen3_moe"}, {"hidden_size", 256}, {"num_attention_heads", 2},
          {"num_key_value_heads", 1}, {"head_dim", 32}, {"intermediate_size", 64},
          {"num_hidden_layers", 1}, {"vocab_size", 48}, {"num_experts", 4},
          {"num_experts_per_tok", 2}, {"moe_intermediate_size", 256}, {"rms_norm_eps", 1e-6},
          {"rope_theta", 10000.0}, {"eos_token_id", 1}};
}

// A Gated DeltaNet layer and a gated-attention layer, both with sparse MLPs and a shared expert.
nlohmann::json tiny_next_json() {
  nlohmann::json j = test::tiny_qwen3_next_json();
  j["hidden_size"] = 256;
  j["num_hidden_layers"] = 2;
  j["vocab_size"] = 48;
  j["num_experts"] = 4;
  j["num_experts_per_tok"] = 2;
  j["moe_intermediate_size"] = 256;
  j["shared_expert_intermediate_size"] = 256;
  return j;
}

// Every token to every expert (k = E, weights renormalised): in fp16 and bf16
// a router logit moves past its neighbour's now and then on random inputs
// (test_moe_model.cpp), and that token is then another function; with k = E
// no choice can flip.
nlohmann::json every_expert(nlohmann::json j) {
  j["num_experts_per_tok"] = j["num_experts"];
  j["norm_topk_prob"] = true;
  return j;
}


std::string expert_name(int layer, int e, const char* proj) {
  return "model.layers." + std::to_string(layer) + ".mlp.experts." + std::to_string(e) + "." + proj + ".weight";
}

// `model` against the reference on `ref`: a prefill of 2 × 16 tokens (the
// tiled kernels: 64 entries over 4 experts make tiles of 32 rows), a second
// forward identical, decode steps (8 rows, then 2: the rows kernels) equal to
// the full forward's positions, and in fp32 greedy generation from a 2-token
// prompt (then steps of 1 row; in fp16 or bf16 two top logits within their
// rounding of each other may swap).
void check_forward(test::GpuTest& t, Model& model, const ModelConfig& cfg, const WeightMap& ref, double nmse,
                   bool greedy) {
  model.set_poison(true);
  const int B = 2, T = 16, P = 4, N = 7;
  const auto ids = test::random_ids(t.rng, size_t(B) * T, cfg.vocab_size);
  const auto full = reference::model_forward(cfg, ref, {ids, B, T});
  const std::vector<float> got = model.logits(ids, B, T);
  {
    INFO("prefill " << B << " x " << T);
    test::check_close(got, full.logits, nmse);
  }
  CHECK(model.logits(ids, B, T) == got);
  Sequence seq = model.start(B, N);
  {
    INFO("decode: a step of " << P << " tokens");
    test::check_close(model.extend(seq, test::positions(ids, B, T, 0, P), P), test::positions(full.logits, B, T, P - 1),
                      nmse);
  }
  for (int i = P; i < N; ++i) {
    INFO("decode: step " << i);
    test::check_close(model.extend(seq, test::positions(ids, B, T, i), 1), test::positions(full.logits, B, T, i), nmse);
  }
  if (!greedy) return;
  const std::vector<int64_t> prompt(ids.begin(), ids.begin() + 2);
  const GenerateResult g = model.generate(prompt, {.max_new_tokens = 4, .stop_at_eos = false});
  CHECK(g.ids == reference::greedy_generate(cfg, ref, prompt, 4, false));
}

// A random model of cfg quantized on load to `q`, its experts included,
// checked by check_forward; and its weights on the device against the same
// model with float experts: smaller by exactly the experts' float bytes less
// their blocks (and each buffer's padding).
void check_quantized(test::GpuTest& t, const ModelConfig& cfg, DType q, Precision precision, double nmse,
                     uint32_t shard_experts = 0) {
  CAPTURE(to_string(q));
  CAPTURE(to_string(precision));
  CAPTURE(shard_experts);
  test::ScopedTuning tuning(t.ctx);
  if (shard_experts) tuning->moe_shard_experts = shard_experts;
  test::RandomModel m(cfg, t.rng);
  std::vector<std::vector<std::byte>> blocks;
  const TensorMap quantized = quantize_weights(m.cfg, m.tensors, q, blocks);
  const std::vector<int> moe_layers = m.cfg.moe_layers();
  REQUIRE(!moe_layers.empty());
  TensorMap float_experts = quantized;  // as --quant left them before
  for (int l : moe_layers)
    for (int e = 0; e < m.cfg.moe.num_experts; ++e)
      for (const char* p : {"gate_proj", "up_proj", "down_proj"}) {
        const std::string n = expert_name(l, e, p);
        CHECK(quantized.at(n).dtype == q);
        float_experts[n] = m.tensors.at(n);
      }
  const test::Dequantized ref(quantized);
  Model model(t.ctx, m.cfg, m.tensors, {.precision = precision, .quant = q});
  check_forward(t, model, m.cfg, ref.map, nmse, precision == Precision::fp32);

  const Model with_float_experts(t.ctx, m.cfg, float_experts, {.precision = precision});
  const uint64_t E = uint64_t(m.cfg.moe.num_experts), D = uint64_t(m.cfg.hidden_size()),
                 Im = uint64_t(m.cfg.moe.moe_intermediate_size);
  const uint64_t e = precision == Precision::fp32 ? 4 : 2;
  const uint64_t shards = shard_experts ? (E + shard_experts - 1) / shard_experts : 1;
  const uint64_t per_layer =
      E * 3 * Im * D * e - (E * (2 * Im * *stored_bytes(q, int64_t(D)) + D * *stored_bytes(q, int64_t(Im))) + 2 * ops::qmatmul_padding * shards);
  CHECK(with_float_experts.memory().weights - model.memory().weights == per_layer * moe_layers.size());

  // A decode step reads the routed experts' top-k share: with top-1 instead
  // of top-k, k − 1 of E experts' bytes fewer per sparse layer.
  ModelConfig top1 = m.cfg;
  top1.moe.num_experts_per_tok = 1;
  const Model fewer(t.ctx, top1, float_experts, {.precision = precision});
  const uint64_t experts = E * 3 * Im * D * e, k = uint64_t(m.cfg.moe.num_experts_per_tok);
  CHECK(fewer.memory().weights == with_float_experts.memory().weights);
  CHECK(with_float_experts.memory().weights_per_token - fewer.memory().weights_per_token ==
        (experts * k / E - experts / E) * moe_layers.size());
}

}  // namespace

TEST_CASE_FIXTURE(test::GpuTest, "quant moe: qwen3_moe experts in Q8_0, Q4_0 and Q4_K, prefill and decode, fp32 and fp16") {
  const ModelConfig cfg = parse(tiny_moe_json());
  for (DType q : {DType::Q8_0, DType::Q4_0, DType::Q4_K}) check_quantized(*this, cfg, q, Precision::fp32, 1e-7);
  if (!vk.info.storage16) return;
  for (DType q : {DType::Q8_0, DType::Q4_K})
    check_quantized(*this, parse(every_expert(tiny_moe_json())), q, Precision::fp16, 1e-4);
}

TEST_CASE_FIXTURE(test::GpuTest, "quant moe: qwen3_next experts and shared expert in Q8_0, Q4_0 and Q4_K, fp32 and fp16") {
  const ModelConfig cfg = parse(tiny_next_json());
  for (DType q : {DType::Q8_0, DType::Q4_0, DType::Q4_K}) check_quantized(*this, cfg, q, Precision::fp32, 1e-7);
  if (!vk.info.storage16) return;
  check_quantized(*this, parse(every_expert(tiny_next_json())), DType::Q4_K, Precision::fp16, 1e-4);
}

TEST_CASE_FIXTURE(test::GpuTest, "quant moe: block-format experts split across buffers") {
  check_quantized(*this, parse(tiny_moe_json()), DType::Q4_0, Precision::fp32, 1e-7, 2);  // experts 0-1, 2-3
  check_quantized(*this, parse(tiny_next_json()), DType::Q4_K, Precision::fp32, 1e-7, 3);  // 0-2, 3
}

// On a CPU driver the f32/f16 runs above take the CPU kernels (texel views);
// here the GPU ones (32-element slices per lane, or one subgroup per column
// over 8-element chunks, for decode steps; shared-memory tiles), which bf16
// takes on CPU drivers too.
TEST_CASE_FIXTURE(test::GpuTest, "quant moe: the GPU kernels (rows and tiles), fp32 and bf16") {
  test::ScopedTuning tuning(ctx);
  tuning->cpu_matmul = false;
  for (const auto& tile : {gpu::QrowsTile{}, gpu::QrowsTile{true, 2, 2}, gpu::QrowsTile{false, 1, 1}}) {
    CAPTURE(tile.name());
    tuning->qrows_tile = tile;
    check_quantized(*this, parse(tiny_next_json()), DType::Q4_K, Precision::fp32, 1e-7, 3);
  }
  tuning->qrows_tile = {};
  if (!vk.info.storage16) return;
  tuning->cpu_matmul = true;
  check_quantized(*this, parse(every_expert(tiny_moe_json())), DType::Q8_0, Precision::bf16, 1e-3);
}

// The other block formats through the experts' kernels (blocks.glsl's
// dequant8): a prefill (tiles) and a decode step (rows) each.
TEST_CASE_FIXTURE(test::GpuTest, "quant moe: Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, Q5_K, Q6_K, IQ4_NL and IQ4_XS experts") {
  const ModelConfig cfg = parse(tiny_moe_json());
  for (DType q : {DType::Q4_1, DType::Q5_0, DType::Q5_1, DType::Q2_K, DType::Q3_K, DType::Q5_K, DType::Q6_K, DType::IQ4_NL,
                  DType::IQ4_XS}) {
    CAPTURE(to_string(q));
    test::RandomModel m(cfg, rng);
    std::vector<std::vector<std::byte>> blocks;
    const TensorMap quantized = quantize_weights(m.cfg, m.tensors, q, blocks);
    CHECK(quantized.at(expert_name(0, 3, "down_proj")).dtype == q);
    const test::Dequantized ref(quantized);
    Model model(ctx, m.cfg, m.tensors, {.quant = q});
    model.set_poison(true);
    for (const auto& [B, T] : {std::pair{2, 12}, std::pair{1, 3}}) {
      INFO(B << " x " << T);
      const auto ids = test::random_ids(rng, size_t(B) * T, cfg.vocab_size);
      test::check_close(model.logits(ids, B, T), reference::model_forward(cfg, ref.map, {ids, B, T}).logits, 1e-7);
    }
  }
}

// A GGUF's experts arrive as block-format tensors (the TensorMap built
// directly, no ModelOptions::quant): layer 0 as a Q4_K_M file stores them
// (Q4_K gate and up, Q6_K down); layer 1 a Q8_0 gate beside an F16 up (two
// dispatches into the [gate ; up] columns, the second a float part in the
// block kernel) and an F16 down (the float GEMM); layer 2 a down whose
// experts differ in format, so that the layer is dequantized.
TEST_CASE_FIXTURE(test::GpuTest, "quant moe: GGUF-style experts in block formats, per-projection formats, a mixed layer dequantized") {
  nlohmann::json j = tiny_moe_json();
  j["num_hidden_layers"] = 3;
  const ModelConfig cfg = parse(j);
  test::RandomModel m(cfg, rng);
  std::vector<std::vector<std::byte>> storage;
  TensorMap tensors = m.tensors;
  auto encode = [&](const std::string& name, DType d) {
    const std::vector<float>& v = m.data.at(name);
    std::vector<std::byte> bytes;
    if (d == DType::F16) {
      bytes.resize(v.size() * 2);
      for (size_t i = 0; i < v.size(); ++i) {
        const uint16_t h = float_to_half(v[i]);
        std::memcpy(bytes.data() + 2 * i, &h, 2);
      }
    } else {
      bytes = quantize(d, v);
    }
    storage.push_back(std::move(bytes));
    tensors[name] = HostTensor{d, m.tensors.at(name).shape, storage.back()};
  };
  for (int e = 0; e < cfg.moe.num_experts; ++e) {
    encode(expert_name(0, e, "gate_proj"), DType::Q4_K);
    encode(expert_name(0, e, "up_proj"), DType::Q4_K);
    encode(expert_name(0, e, "down_proj"), DType::Q6_K);
    encode(expert_name(1, e, "gate_proj"), DType::Q8_0);
    encode(expert_name(1, e, "up_proj"), DType::F16);
    encode(expert_name(1, e, "down_proj"), DType::F16);
    encode(expert_name(2, e, "gate_proj"), DType::Q4_0);
    encode(expert_name(2, e, "up_proj"), DType::Q4_0);
    encode(expert_name(2, e, "down_proj"), e == 1 ? DType::Q8_0 : DType::Q5_0);
  }
  const test::Dequantized ref(tensors);
  Model model(ctx, cfg, tensors, {});
  check_forward(*this, model, cfg, ref.map, 1e-7, true);
  const Model plain(ctx, cfg, m.tensors, {});
  // Layer 0 and layer 1's [gate ; up] keep their bytes; layer 1's down and layer 2 go as fp32.
  const uint64_t E = 4, D = 256, Im = 256;
  auto rb = [](DType d, uint64_t K) { return uint64_t(*stored_bytes(d, int64_t(K))); };
  const uint64_t saved0 = E * 3 * Im * D * 4 - (E * (2 * Im * rb(DType::Q4_K, D) + D * rb(DType::Q6_K, Im)) + 2 * ops::qmatmul_padding);
  const uint64_t saved1 = E * 2 * Im * D * 4 - (E * Im * (rb(DType::Q8_0, D) + rb(DType::F16, D)) + ops::qmatmul_padding);
  CHECK(plain.memory().weights - model.memory().weights == saved0 + saved1);
  if (!vk.info.storage16) return;
  const ModelConfig all = parse(every_expert(j));
  Model half(ctx, all, tensors, {.precision = Precision::fp16});
  check_forward(*this, half, all, ref.map, 1e-4, false);
}

}  // namespace test_quant_moe
