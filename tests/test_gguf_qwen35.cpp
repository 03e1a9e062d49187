// Qwen3.5 GGUF files (general.architecture qwen35 and qwen35moe) that
// llama.cpp's own tools wrote (tests/data/gguf/llama_cpp/README.md). The
// converter reorders the Gated DeltaNet's value heads from grouped by key
// head to tiled (so that ggml broadcasts the key heads); vkgate puts them
// back. qwen35moe-F16.gguf, convert_hf_to_gguf.py's of make_qwen35.py's MoE
// checkpoint with its multi-token-prediction block, reads back as that
// checkpoint bit for bit, with its config and logits. qwen35-Q4_K_M.gguf,
// llama-quantize's of the dense one, matches the reference on its dequantized
// tensors, and each tensor the checkpoint to within Q4_K's error (a value
// head out of place would be 100× that); its Gated DeltaNet input
// projections stay Q4_K on the device. Broken files are errors naming the
// tensor.
#include "doctest.hpp"

#include <cstring>
#include <nlohmann/json.hpp>

#include "converter_checkpoint.hpp"
#include "harness.hpp"
#include "model_check.hpp"
#include "test_util.hpp"
#include "vkgate/gguf_model.hpp"
#include "vkgate/model.hpp"
#include "vkgate/reference_model.hpp"

namespace test_gguf_qwen35 {

using namespace vkgate;
using test::llama_cpp_file;

namespace {

// make_qwen35.py's CONFIGS: the checkpoint's config.json.
ModelConfig checkpoint_config(bool moe) {
  nlohmann::json j = {
      {"vocab_size", 272}, {"num_hidden_layers", 2}, {"num_attention_heads", 2}, {"num_key_value_heads", 1},
      {"head_dim", 32}, {"max_position_embeddings", 512}, {"rms_norm_eps", 1e-6}, {"hidden_act", "silu"},
      {"attention_bias", false}, {"full_attention_interval", 2}, {"layer_types", {"linear_attention", "full_attention"}},
      {"linear_num_key_heads", 2}, {"linear_conv_kernel_dim", 4},
      {"rope_parameters", {{"rope_type", "default"}, {"rope_theta", 10000000.0}, {"partial_rotary_factor", 0.25},
                           {"mrope_section", {2, 1, 1}}, {"mrope_interleaved", true}}},
      {"tie_word_embeddings", true}, {"bos_token_id", 268}, {"eos_token_id", 268}, {"torch_dtype", "float16"},
      {"linear_key_head_dim", 32}, {"linear_value_head_dim", 32}, {"intermediate_size", 64}};
  if (moe) {
    j.update({{"architectures", {"Qwen3_5MoeForCausalLM"}}, {"model_type", "qwen3_5_moe_text"}, {"hidden_size", 128},
              {"linear_num_value_heads", 4}, {"num_experts", 4}, {"num_experts_per_tok", 2},
              {"moe_intermediate_size", 16}, {"shared_expert_intermediate_size", 16}, {"norm_topk_prob", true},
              {"mtp_num_hidden_layers", 1}});
  } else {
    j.update({{"architectures", {"Qwen3_5ForCausalLM"}}, {"model_type", "qwen3_5_text"}, {"hidden_size", 256},
              {"linear_num_value_heads", 8}});
  }
  return parse_model_config_json(j.dump(), "make_qwen35.py config.json");
}

std::vector<double> doubles(const std::vector<float>& v) { return std::vector<double>(v.begin(), v.end()); }

}  // namespace

TEST_CASE_FIXTURE(test::GpuTest, "gguf qwen35: qwen35moe F16 of convert_hf_to_gguf.py, its MTP block included, reads back as its checkpoint, value heads grouped again, the same logits") {
  const test::ConverterCheckpoint ckpt(checkpoint_config(true));
  const std::string path = llama_cpp_file("qwen35moe-F16.gguf");
  const ModelConfig cfg = test::check_converted(*this, path, ckpt);
  CHECK(cfg.model_type == "qwen3_5_moe_text");
  CHECK(cfg.linear_attention->separate_projections);
  const GgufFile file = GgufFile::open(path);
  CHECK(file.integer("qwen35moe.block_count") == 3);
  CHECK(file.integer("qwen35moe.nextn_predict_layers") == 1);
  CHECK(file.find_tensor("blk.2.nextn.eh_proj.weight") != nullptr);

  // The file's attn_gate holds value head g = j·r + i at tiled position
  // i·nk + j: its rows of position 1 are the checkpoint's z rows of head 2
  // (so the readback above found them put back).
  const GdnConfig& g = *cfg.linear_attention;
  const GgufTensor& gate = file.tensor("blk.0.attn_gate.weight");
  const std::vector<std::byte>& z = ckpt.bytes.at("model.layers.0.linear_attn.in_proj_z.weight");
  const size_t head = size_t(g.value_head_dim) * size_t(g.hidden_size) * 2;
  CHECK(std::memcmp(gate.bytes.data() + head, z.data() + 2 * head, head) == 0);
  CHECK(std::memcmp(gate.bytes.data() + head, z.data() + head, head) != 0);
}

TEST_CASE_FIXTURE(test::GpuTest, "gguf qwen35: qwen35 Q4_K_M of llama-quantize matches the reference and its checkpoint to Q4_K's error, the Gated DeltaNet input projections Q4_K on the device") {
  const std::string path = llama_cpp_file("qwen35-Q4_K_M.gguf");
  const test::FileWeights w(path);
  const GgufFile& f = w.file;
  CHECK(f.integer("general.file_type") == 15);
  for (const char* name : {"blk.0.attn_qkv.weight", "blk.0.attn_gate.weight", "blk.0.ssm_beta.weight",
                           "blk.0.ssm_alpha.weight", "blk.0.ssm_out.weight", "blk.1.attn_q.weight"})
    CHECK(f.tensor(name).dtype == DType::Q4_K);
  const test::ConverterCheckpoint ckpt(checkpoint_config(false));
  CHECK(w.cfg.model_type == "qwen3_5_text");
  ModelConfig want_cfg = ckpt.cfg;
  want_cfg.attention.rms_norm_eps = want_cfg.linear_attention->rms_norm_eps = double(float(1e-6));  // the key is f32
  CHECK(w.cfg.attention == want_cfg.attention);
  REQUIRE(w.cfg.linear_attention);
  CHECK(*w.cfg.linear_attention == *want_cfg.linear_attention);
  CHECK(w.cfg.linear_attention->separate_projections);
  CHECK(w.cfg.moe_layers().empty());

  // Q4_K of these values is off by an NMSE of about 5e-3 (Q5_0, Q6_K and Q8_0
  // less); a tensor with one value head in another's place would be off by ~2.
  const test::Dequantized expected(ckpt.tensors);
  for (const TensorSpec& spec : expected_model_weights(w.cfg)) {
    CAPTURE(spec.name);
    const std::vector<float>& a = w.data.at(spec.name);
    const std::vector<float>& b = expected.data.at(spec.name);
    REQUIRE(a.size() == b.size());
    CHECK(test::nmse(doubles(a), doubles(b)) <= (spec.shape.size() > 1 ? 1e-2 : 1e-12));
  }
  // out_proj's Q4_K blocks span all eight value heads: it is read as fp32
  // values to be put in order; the four input projections keep their blocks.
  TensorBuffers copies;
  const TensorMap tensors = gguf_model_tensors(f, w.cfg, copies);
  CHECK(tensors.at("model.layers.0.linear_attn.out_proj.weight").dtype == DType::F32);
  for (const char* p : {"in_proj_qkv", "in_proj_z", "in_proj_b", "in_proj_a"})
    CHECK(tensors.at(std::string("model.layers.0.linear_attn.") + p + ".weight").dtype == DType::Q4_K);

  const test::FileRun run = test::check_file_model(*this, path, w);

  // On the device: the file's tensor bytes, but out_proj as fp32 (its rows
  // padded to the matmul's operand stride: 16 KiB more on lavapipe) and 48
  // bytes of padding per block buffer. in_proj_qkv+z+b+a in fp32 would add 564 KiB.
  uint64_t file_bytes = 0;
  for (const GgufTensor& t : f.tensors()) file_bytes += t.bytes.size();
  const GgufTensor& out = f.tensor("blk.0.ssm_out.weight");
  const uint64_t expect = file_bytes - out.bytes.size() + uint64_t(out.host().numel()) * 4;
  const uint64_t weights = Model::load(ctx, path).memory().weights;
  INFO("weights " << weights << " bytes, file tensors " << file_bytes);
  CHECK(weights <= expect + 32768);

  if (vk.info.storage16) {
    INFO("fp16");
    Model half = Model::load(ctx, path, {Precision::fp16});
    test::check_close(half.logits(run.ids, run.B, run.T), run.want, 1e-4);
  }
}

TEST_CASE_FIXTURE(test::GpuTest, "gguf qwen35: a missing or misshapen ssm_alpha or ssm_beta is an error naming it and what it holds") {
  const GgufFile file = GgufFile::open(llama_cpp_file("qwen35moe-F16.gguf"));
  const GgufDraft good = test::draft_of(file);
  test::TempDir dir("gguf_qwen35");

  GgufDraft g = good;
  g.erase_tensor("blk.0.ssm_alpha.weight");
  g.write(dir / "no_alpha.gguf");
  test::check_load_refused(*this, dir / "no_alpha.gguf", ErrorCode::missing_tensor,
                           {"'blk.0.ssm_alpha.weight'", "model.layers.0.linear_attn.in_proj_a.weight"});

  g = good;
  const GgufTensor& beta = file.tensor("blk.0.ssm_beta.weight");
  g.add_tensor(beta.name, beta.dtype, {2, 128}, std::vector<std::byte>(beta.bytes.begin(), beta.bytes.begin() + 2 * 128 * 2));
  g.write(dir / "beta.gguf");
  test::check_load_refused(*this, dir / "beta.gguf", ErrorCode::shape_mismatch,
                           {"'blk.0.ssm_beta.weight'", "model.layers.0.linear_attn.in_proj_b.weight", "[2, 128]", "[4, 128]"});
}

}  // namespace test_gguf_qwen35
