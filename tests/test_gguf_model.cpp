// Whole models from GGUF files, written as llama.cpp's converter lays them out
// (gguf_convert.hpp): qwen3 (with and without the paper's gate), llama (q/k
// rows permuted, biases, tied, F16, Llama 3 RoPE scaling as rope_freqs, a
// fused attn_qkv) and qwen3_moe (stacked and fused experts) load through
// Model::load(ctx, "x.gguf") with the config and logits of the model they
// came from, and agree with the double reference; an unknown architecture, a
// missing key, a missing or misshapen tensor are errors naming the file and
// the key or tensor, raised before anything is allocated on the device; and
// `vkgate generate --weights x.gguf --prompt` and `vkgate run --weights x.gguf`
// run on the GGUF alone.
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include "gguf_convert.hpp"
#include "harness.hpp"
#include "model_check.hpp"
#include "model_weights.hpp"
#include "vkgate/error.hpp"
#include "vkgate/gguf_model.hpp"
#include "vkgate/model.hpp"
#include "vkgate/reference_model.hpp"
#include "vkgate/safetensors.hpp"
#include "vkgate/tokenizer.hpp"
#ifdef VKGATE_CLI
#include "cli_harness.hpp"

namespace test_gguf_model {
#endif

using namespace vkgate;
using test::check_load_refused;

namespace {

namespace fs = std::filesystem;

// Exactly representable in fp32, which is how the converter stores it.
constexpr double kEps = 1.0 / (1 << 20);

ModelConfig gguf_ready(ModelConfig cfg) {
  cfg.attention.model_type = cfg.model_type;
  cfg.attention.max_position_embeddings = 4096;
  cfg.attention.rms_norm_eps = kEps;
  return cfg;
}

ModelConfig moe_config() {
  const nlohmann::json j = {{"model_type", "qwen3_moe"}, {"hidden_size", 32}, {"num_attention_heads", 2},
                            {"num_key_value_heads", 1}, {"head_dim", 16}, {"intermediate_size", 40},
                            {"num_hidden_layers", 2}, {"vocab_size", 60}, {"num_experts", 6},
                            {"num_experts_per_tok", 2}, {"moe_intermediate_size", 24}, {"rms_norm_eps", kEps},
                            {"norm_topk_prob", true}, {"max_position_embeddings", 4096},
                            {"rope_theta", 10000.0}, {"eos_token_id", 1}};
  return parse_model_config_json(j.dump(), "config.json");
}

// The model `cfg` with random weights, converted to GGUF (F16 matrices: the
// original's values rounded to fp16 first), loaded from the file and built
// from the original tensors: the same config, the same logits, both as the
// reference's.
void check_roundtrip(test::GpuTest& t, const ModelConfig& cfg, const test::ConvertOptions& o) {
  test::RandomModel m(cfg, t.rng);
  if (o.f16)
    for (const TensorSpec& spec : expected_model_weights(cfg))
      if (spec.shape.size() > 1) test::round_to_half(m.data.at(spec.name));
  test::TempDir dir("gguf_model");
  const std::string path = dir / "model.gguf";
  test::convert_model(cfg, m.data, o).write(path);

  const GgufFile file = GgufFile::open(path);
  const ModelConfig read = gguf_model_config(file);
  CHECK(read.model_type == cfg.model_type);
  CHECK(read.attention == cfg.attention);
  CHECK(read.moe == cfg.moe);
  CHECK(read.num_hidden_layers == cfg.num_hidden_layers);
  CHECK(read.intermediate_size == cfg.intermediate_size);
  CHECK(read.vocab_size == cfg.vocab_size);
  CHECK(read.mlp_bias == cfg.mlp_bias);
  CHECK(read.tie_word_embeddings == cfg.tie_word_embeddings);
  CHECK(read.eos_token_ids == cfg.eos_token_ids);

  Model from_file = Model::load(t.ctx, path);
  Model from_map(t.ctx, m.cfg, m.tensors);
  from_file.set_poison(true);
  const int B = 2, T = 5;
  const auto ids = test::random_ids(t.rng, size_t(B) * T, cfg.vocab_size);
  const std::vector<float> got = from_file.logits(ids, B, T);
  const std::vector<float> want = from_map.logits(ids, B, T);
  CHECK(got == want);
  test::check_close(got, reference::model_forward(m.cfg, m.map, {ids, B, T}).logits, 1e-8);
}

}  // namespace

TEST_CASE_FIXTURE(test::GpuTest, "gguf model: qwen3 (no gate, headwise, elementwise) converted as llama.cpp does loads with the same logits") {
  for (GateKind gate : {GateKind::none, GateKind::headwise, GateKind::elementwise}) {
    INFO("gate " << to_string(gate));
    test::TinyModel s;
    s.gate = gate;
    check_roundtrip(*this, gguf_ready(s.config()), {});
  }
  test::TinyModel f16;  // F16 matrices, tied embeddings
  f16.tied = true;
  check_roundtrip(*this, gguf_ready(f16.config()), {.f16 = true});
}

TEST_CASE_FIXTURE(test::GpuTest, "gguf model: llama with permuted q/k rows, biases, tied, F16, fused attn_qkv and Llama 3 rope_freqs") {
  test::TinyModel l;
  l.model_type = "llama";
  l.bias = true;
  l.kv_heads = 1;
  ModelConfig cfg = gguf_ready(l.config());
  INFO("biases, MQA, f32");
  check_roundtrip(*this, cfg, {});
  INFO("biases, MQA, fused attn_qkv");
  check_roundtrip(*this, cfg, {.fuse_qkv = true});
  l.bias = false;
  l.tied = true;
  l.kv_heads = 2;
  cfg = gguf_ready(l.config());
  cfg.attention.rope_scaling = {.type = RopeType::llama3, .factor = 8, .original_max_position_embeddings = 8192,
                                .low_freq_factor = 1, .high_freq_factor = 4};
  INFO("tied, GQA, F16, llama3 RoPE scaling");
  check_roundtrip(*this, cfg, {.f16 = true});
}

TEST_CASE_FIXTURE(test::GpuTest, "gguf model: qwen3_moe with stacked ffn_*_exps and with fused ffn_gate_up_exps") {
  const ModelConfig cfg = moe_config();
  check_roundtrip(*this, cfg, {});
  check_roundtrip(*this, cfg, {.f16 = true, .fuse_gate_up = true});
}

TEST_CASE_FIXTURE(test::GpuTest, "gguf model: unknown architecture, missing key, missing and misshapen tensors are errors before any allocation") {
  test::TinyModel s;
  const ModelConfig cfg = gguf_ready(s.config());
  test::RandomModel m(cfg, rng);
  test::TempDir dir("gguf_model");
  const test::GgufDraft good = test::convert_model(cfg, m.data);

  test::GgufDraft g = good;
  g.set("general.architecture", GgufValue::of_string("gemma3"));
  g.write(dir / "arch.gguf");
  check_load_refused(*this, dir / "arch.gguf", ErrorCode::invalid_config,
                     {"general.architecture", "gemma3", "llama, qwen3"});

  g = good;
  g.erase("qwen3.block_count");
  g.write(dir / "key.gguf");
  check_load_refused(*this, dir / "key.gguf", ErrorCode::invalid_config, {"'qwen3.block_count'"});

  g = good;
  g.erase_tensor("blk.1.ffn_down.weight");
  g.write(dir / "missing.gguf");
  check_load_refused(*this, dir / "missing.gguf", ErrorCode::missing_tensor,
                     {"'blk.1.ffn_down.weight'", "model.layers.1.mlp.down_proj.weight"});

  g = good;
  test::add_floats(g, "blk.0.attn_k.weight", {16, 64}, std::vector<float>(16 * 64, 0.5f), DType::F32);
  g.write(dir / "shape.gguf");
  check_load_refused(*this, dir / "shape.gguf", ErrorCode::shape_mismatch,
                     {"'blk.0.attn_k.weight'", "[16, 64]", "[32, 64]"});

  // A .gguf name on a file that is not GGUF: the reader's error, naming the file.
  std::ofstream(dir / "bad.gguf") << "not a gguf file";
  check_load_refused(*this, dir / "bad.gguf", ErrorCode::io, {});
  check_load_refused(*this, dir / "absent.gguf", ErrorCode::io, {});  // the reader's error, not "not a directory"
}

#ifdef VKGATE_CLI
TEST_CASE("cli gguf: vkgate generate --weights x.gguf --prompt tokenizes with the GGUF's own tokenizer") {
  using namespace vkgate::cli_test;
  std::mt19937 rng(std::random_device{}());
  const std::string unit = std::string(VKGATE_TOKENIZER_UNIT_DIR) + "/gpt2_style.json";
  const nlohmann::json tok_json = nlohmann::json::parse(read_text(unit));
  test::TinyModel shape;
  shape.vocab = Tokenizer::load(unit).vocab_size();
  const ModelConfig cfg = gguf_ready(shape.config());
  test::RandomModel m(cfg, rng);
  TempDir dir("gguf_generate");
  test::GgufDraft g = test::convert_model(cfg, m.data);
  test::convert_tokenizer(g, tok_json, nullptr, "gpt-2", cfg.vocab_size);
  const std::string path = dir / "model.gguf";
  g.write(path);

  const Tokenizer tok = Tokenizer::load(path);
  const std::string prompt = "hello world, hello";
  const std::vector<int32_t> ids32 = tok.encode(prompt);
  const std::vector<int64_t> ids(ids32.begin(), ids32.end());
  const auto greedy = reference::greedy_generate(m.cfg, m.map, ids, 6, false);
  const std::vector<int32_t> greedy32(greedy.begin(), greedy.end());
  const CliResult r =
      run_cli(with_device({"generate", "--weights", path, "--prompt", prompt, "--max-new-tokens", "6", "--ignore-eos"}), dir.path);
  check_clean_exit(r);
  REQUIRE(r.code == 0);
  CHECK(r.out == tok.decode(greedy32));
  const CliResult j = run_cli(
      with_device({"generate", "--weights", path, "--prompt", prompt, "--max-new-tokens", "6", "--ignore-eos", "--json"}),
      dir.path);
  REQUIRE(j.code == 0);
  CHECK(nlohmann::json::parse(j.out).at("generated").get<std::vector<int64_t>>() == greedy);

  // run on input_ids: the logits of the reference.
  FileBuilder in;
  in.add_ids("input_ids", {1, int64_t(ids.size())}, ids, DType::I64);
  in.write(dir / "in.safetensors");
  const CliResult run = run_cli(with_device({"run", "--weights", path, "--input", dir / "in.safetensors", "--output",
                                             dir / "out.safetensors"}),
                                dir.path);
  check_clean_exit(run);
  REQUIRE(run.code == 0);
  test::check_close(SafetensorsFile(dir / "out.safetensors").at("logits").to_f32(),
                    reference::model_forward(m.cfg, m.map, {ids, 1, int64_t(ids.size())}).logits, 1e-8);

  // A GGUF without a tokenizer: --prompt fails naming the file and the key; --prompt-ids still runs.
  test::GgufDraft bare = test::convert_model(cfg, m.data);
  bare.write(dir / "bare.gguf");
  const CliResult no_tok =
      run_cli(with_device({"generate", "--weights", dir / "bare.gguf", "--prompt", prompt, "--max-new-tokens", "2"}), dir.path);
  CHECK(no_tok.code == 1);
  CHECK(no_tok.out.empty());
  CHECK(no_tok.err.find("tokenizer.ggml.model") != std::string::npos);
  const CliResult by_ids = run_cli(with_device({"generate", "--weights", dir / "bare.gguf", "--prompt-ids",
                                                "5,17,42", "--max-new-tokens", "3", "--ignore-eos"}),
                                   dir.path);
  check_clean_exit(by_ids);
  CHECK(by_ids.code == 0);
  CHECK(by_ids.out == id_line(reference::greedy_generate(m.cfg, m.map, std::vector<int64_t>{5, 17, 42}, 3, false)) + "\n");
}

}  // namespace test_gguf_model
#endif
