// Models quantized on load (ModelOptions::quant): their logits against the
// double reference run on the dequantized weights (the blocks' own values),
// so the bound measures the device's products, not the quantization error
// (with int8 activations, ModelOptions::int8_activations, it also measures
// the rounding of X to int8 blocks: NMSE ≤ 1e-3).
#include "doctest.hpp"

#include <algorithm>
#include <functional>

#include "model_check.hpp"
#include "vkgate/quant.hpp"

namespace test_quant_model {

using namespace vkgate;

namespace {


// A random model of cfg quantized to `q`: logits (batch 2) within `nmse` of the
// reference on the dequantized weights, a second forward identical, greedy ids
// equal with fp32 activations (in 16 bits two close logits may swap, as in
// test_quant_moe), and fewer weight bytes on the device than the float model.
void check_quantized(test::GpuTest& t, const ModelConfig& cfg, DType q, Precision precision, double nmse) {
  CAPTURE(to_string(q));
  CAPTURE(to_string(precision));
  test::RandomModel m(cfg, t.rng);
  std::vector<std::vector<std::byte>> blocks;
  const TensorMap quantized = quantize_weights(m.cfg, m.tensors, q, blocks);
  REQUIRE(!blocks.empty());  // the shapes leave something to quantize
  const test::Dequantized ref(quantized);
  Model model(t.ctx, m.cfg, m.tensors, {precision, true, false, q});
  model.set_poison(true);
  const int B = 2, T = 5;
  const auto ids = test::random_ids(t.rng, size_t(B) * T, m.cfg.vocab_size);
  const auto want = reference::model_forward(m.cfg, ref.map, {ids, B, T});
  const std::vector<float> got = model.logits(ids, B, T);
  test::check_close(got, want.logits, nmse);
  CHECK(model.logits(ids, B, T) == got);
  if (precision == Precision::fp32) {
    const std::vector<int64_t> prompt(ids.begin(), ids.begin() + 3);
    const GenerateResult g = model.generate(prompt, {.max_new_tokens = 6, .stop_at_eos = false});
    CHECK(g.ids == reference::greedy_generate(m.cfg, ref.map, prompt, 6, false));
  }
  Model plain(t.ctx, m.cfg, m.tensors, {precision});
  CHECK(model.memory().weights < plain.memory().weights);
}

bool ran(const Model& model, const std::string& stage) {
  const std::vector<StageTime> t = model.last_timings();
  return std::any_of(t.begin(), t.end(), [&](const StageTime& s) { return s.stage == stage; });
}

// int8 activations (ModelOptions::int8_activations) on a model quantized to q
// (Q8_0 or Q4_0): logits (batch 2) within `nmse` of the reference on the
// dequantized weights, the int8 kernels among the step's dispatches (where
// the device times them), and with fp32 storage greedy ids equal to the
// reference's, except where the reference's top two at a step are closer
// than twice the largest logit error just measured (a near tie may flip).
void check_int8(test::GpuTest& t, const ModelConfig& cfg, DType q, Precision precision, double nmse) {
  const std::string what = std::string(to_string(q)) + ", " + to_string(precision) + " storage, int8 activations";
  CAPTURE(what);
  test::RandomModel m(cfg, t.rng);
  std::vector<std::vector<std::byte>> blocks;
  const test::Dequantized ref(quantize_weights(m.cfg, m.tensors, q, blocks));
  Model model(t.ctx, m.cfg, m.tensors, {.precision = precision, .quant = q, .int8_activations = true});
  model.set_poison(true);
  const int B = 2, T = 5;
  const auto ids = test::random_ids(t.rng, size_t(B) * T, m.cfg.vocab_size);
  const auto want = reference::model_forward(m.cfg, ref.map, {ids, B, T});
  const std::vector<float> got = model.logits(ids, B, T);
  test::check_close(got, want.logits, nmse);
  const reference::Diff diff = reference::compare(got, want.logits);
  MESSAGE(what << ": logits NMSE " << diff.nmse << ", max abs " << diff.max_abs);
  if (t.vk.info.timestamps) CHECK(ran(model, "qmatmul_dot"));
  CHECK(model.logits(ids, B, T) == got);
  if (precision != Precision::fp32) return;
  const std::vector<int64_t> prompt(ids.begin(), ids.begin() + 3);
  const std::vector<int64_t> gen = model.generate(prompt, {.max_new_tokens = 6, .stop_at_eos = false}).ids;
  const std::vector<int64_t> ref_gen = reference::greedy_generate(m.cfg, ref.map, prompt, 6, false);
  size_t same = 0;
  while (same < gen.size() && same < ref_gen.size() && gen[same] == ref_gen[same]) ++same;
  if (same == ref_gen.size()) return;
  std::vector<int64_t> seq = prompt;
  seq.insert(seq.end(), ref_gen.begin(), ref_gen.begin() + long(same));
  const std::vector<double> l = reference::model_forward(m.cfg, ref.map, {seq, 1, int64_t(seq.size())}).logits;
  std::vector<double> last(l.end() - m.cfg.vocab_size, l.end());
  std::partial_sort(last.begin(), last.begin() + 2, last.end(), std::greater<>());
  INFO("greedy ids differ at step " << same << ": the reference's top two " << last[0] << ", " << last[1]);
  CHECK(last[0] - last[1] <= 2 * diff.max_abs);
}

}  // namespace

TEST_CASE_FIXTURE(test::GpuTest, "quant model: int8 activations on Q8_0 and Q4_0 projections, logits NMSE at most 1e-3") {
  if (!vk.info.integer_dot_product) {
    MESSAGE("skipped: " << vk.info.name << " has no shaderIntegerDotProduct");
    return;
  }
  test::TinyModel s;
  s.hidden = 256;
  s.head_dim = 64;
  s.inter = 512;
  s.vocab = 160;
  check_int8(*this, s.config(), DType::Q8_0, Precision::fp32, 1e-3);
  check_int8(*this, s.config(), DType::Q4_0, Precision::fp32, 1e-3);
  if (vk.info.storage16) check_int8(*this, s.config(), DType::Q8_0, Precision::fp16, 1e-3);
}

TEST_CASE_FIXTURE(test::GpuTest, "quant model: int8 activations on a device without integer dot products run the fp32 product") {
  // The shared Context's record says no; its Models then choose as on such a device.
  struct NoDot {
    DeviceInfo& info;
    bool had = info.integer_dot_product;
    ~NoDot() { info.integer_dot_product = had; }
  } no_dot{vk.info};
  vk.info.integer_dot_product = false;
  test::TinyModel s;
  s.hidden = 128;
  s.inter = 256;
  test::RandomModel m(s.config(), rng);
  Model int8(ctx, m.cfg, m.tensors, {.quant = DType::Q8_0, .int8_activations = true});
  Model plain(ctx, m.cfg, m.tensors, {.quant = DType::Q8_0});
  const auto ids = test::random_ids(rng, 6, m.cfg.vocab_size);
  CHECK(int8.logits(ids, 2, 3) == plain.logits(ids, 2, 3));
  if (vk.info.timestamps) CHECK_FALSE(ran(int8, "qmatmul_dot"));
}

TEST_CASE_FIXTURE(test::GpuTest, "quant model: qwen3 in every block format, fp32 and fp16 activations") {
  test::TinyModel s;
  s.hidden = 256;
  s.head_dim = 64;
  s.inter = 512;
  s.vocab = 160;
  for (DType q : {DType::Q8_0, DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1, DType::Q2_K, DType::Q3_K, DType::Q4_K,
                  DType::Q5_K, DType::Q6_K, DType::IQ4_NL, DType::IQ4_XS})
    check_quantized(*this, s.config(), q, Precision::fp32, 1e-7);
  if (!vk.info.storage16) return;
  check_quantized(*this, s.config(), DType::Q4_K, Precision::fp16, 1e-4);
  check_quantized(*this, s.config(), DType::Q8_0, Precision::bf16, 1e-3);
}

TEST_CASE_FIXTURE(test::GpuTest, "quant model: llama with biases and tied embeddings, a gated qwen3, qwen3_next, qwen3_5 and GLA") {
  test::TinyModel llama;
  llama.model_type = "llama";
  llama.bias = true;
  llama.tied = true;
  check_quantized(*this, llama.config(), DType::Q8_0, Precision::fp32, 1e-7);
  test::TinyModel gated;
  gated.gate = GateKind::elementwise;
  check_quantized(*this, gated.config(), DType::Q4_0, Precision::fp32, 1e-7);
  const ModelConfig next = parse_model_config_json(test::tiny_qwen3_next_json().dump(), "config.json");
  check_quantized(*this, next, DType::Q8_0, Precision::fp32, 1e-7);
  nlohmann::json text = test::tiny_qwen3_next_json();
  text["model_type"] = "qwen3_5_text";
  const ModelConfig qwen35 = parse_model_config_json(text.dump(), "config.json");
  REQUIRE(qwen35.linear_attention->separate_projections);
  check_quantized(*this, qwen35, DType::Q8_0, Precision::fp32, 1e-7);
  // Its four Gated DeltaNet input projections keep their blocks, as
  // Qwen3-Next's two do: the same bytes on the device.
  const Model m35(ctx, qwen35, test::RandomModel(qwen35, rng).tensors, {.quant = DType::Q8_0});
  const Model m_next(ctx, next, test::RandomModel(next, rng).tensors, {.quant = DType::Q8_0});
  CHECK(m35.memory().weights == m_next.memory().weights);
  test::TinyGla gla;
  check_quantized(*this, gla.config(), DType::Q5_1, Precision::fp32, 1e-7);
}

TEST_CASE("quant model: quantize_weights takes projections (the routed experts too) and an untied lm_head only, whole blocks only") {
  CHECK(quantizable_weight("model.layers.0.self_attn.q_proj.weight"));
  CHECK(quantizable_weight("model.layers.3.linear_attn.in_proj_qkvz.weight"));
  CHECK(quantizable_weight("lm_head.weight"));
  CHECK_FALSE(quantizable_weight("model.embed_tokens.weight"));
  CHECK_FALSE(quantizable_weight("model.layers.0.mlp.gate.weight"));
  CHECK(quantizable_weight("model.layers.0.mlp.experts.3.up_proj.weight"));
  CHECK(quantizable_weight("model.layers.0.mlp.shared_expert.down_proj.weight"));
  CHECK_FALSE(quantizable_weight("model.layers.0.mlp.shared_expert_gate.weight"));
  CHECK_FALSE(quantizable_weight("model.layers.0.input_layernorm.weight"));
  std::mt19937 rng(7);
  test::TinyModel s;  // hidden 64, intermediate 96: Q4_K's 256-element blocks fit no row
  test::RandomModel m(s.config(), rng);
  std::vector<std::vector<std::byte>> blocks;
  const TensorMap k = quantize_weights(m.cfg, m.tensors, DType::Q4_K, blocks);
  for (const auto& [name, t] : k) CHECK(t.dtype == DType::F32);
  const TensorMap q = quantize_weights(m.cfg, m.tensors, DType::Q8_0, blocks);
  CHECK(q.at("model.layers.0.mlp.down_proj.weight").dtype == DType::Q8_0);  // rows of 96 = 3 blocks
  CHECK(q.at("model.layers.0.self_attn.q_proj.weight").dtype == DType::Q8_0);
  CHECK(q.at("model.embed_tokens.weight").dtype == DType::F32);
  CHECK_THROWS_AS(quantize_weights(m.cfg, m.tensors, DType::F16, blocks), Error);
}

// Prefill of fp16 activations on tensor cores (nn::Projection::dequantizes):
// the block weights dequantized to fp16 and multiplied by the dense kernels.
// On CPU drivers the tensor-core kernel runs emulated (forced here), so the
// path is checked everywhere: logits of 2 × 12 tokens within fp16's bound of
// the reference on the dequantized weights, the dequantize dispatch among the
// step's (where the device times them), and decode steps (≤ 8 rows) still on
// the block kernels.
TEST_CASE_FIXTURE(test::GpuTest, "quant model: fp16 prefill on the weights dequantized for tensor cores") {
  if (!vk.info.storage16) {
    MESSAGE("skipped: " << vk.info.name << " has no 16-bit storage");
    return;
  }
  test::ScopedTuning tuning(ctx);
  if (!vk.info.coopmat_f16 && !vk.info.coopmat_f16_khr) {
    tuning->coopmat_staged = gpu::Coopmat::emulated;
    tuning->cpu_matmul = false;
  }
  test::TinyModel s;
  s.hidden = 256;
  s.head_dim = 64;
  s.inter = 512;
  s.vocab = 160;
  for (DType q : {DType::Q8_0, DType::Q4_K}) {
    CAPTURE(to_string(q));
    test::RandomModel m(s.config(), rng);
    std::vector<std::vector<std::byte>> blocks;
    const TensorMap quantized = quantize_weights(m.cfg, m.tensors, q, blocks);
    const test::Dequantized ref(quantized);
    Model model(ctx, m.cfg, m.tensors, {Precision::fp16, true, false, q});
    model.set_poison(true);
    const int B = 2, T = 12;
    const auto ids = test::random_ids(rng, size_t(B) * T, m.cfg.vocab_size);
    test::check_close(model.logits(ids, B, T), reference::model_forward(m.cfg, ref.map, {ids, B, T}).logits, 1e-4);
    if (vk.info.timestamps) CHECK(ran(model, "dequantize"));
    const std::vector<int64_t> one(ids.begin(), ids.begin() + 1);
    CHECK(model.logits(one, 1, 1).size() == size_t(m.cfg.vocab_size));
    if (vk.info.timestamps) CHECK_FALSE(ran(model, "dequantize"));
  }
}

}  // namespace test_quant_model
