// `vkgate quantize DIR --type T --output FILE.gguf`, as child processes: small
// random qwen3 and llama checkpoints (F16, with a byte-level BPE
// tokenizer.json) written as GGUF read back with the types, shapes, metadata
// and tokenizer the converter would give them, and `vkgate run --weights
// out.gguf` gives the very logits of `vkgate run --weights DIR --quant T`
// (the same blocks reach the device), and with --int8 logits within 1e-3
// (NMSE) of those where the device has integer dot products; a bad --type, a missing directory, a
// missing tensor, an unsupported model type and an unwritable output fail
// cleanly, leaving no file.
#ifdef VKGATE_CLI

#include "doctest.hpp"

#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "cli_harness.hpp"
#include "harness.hpp"
#include "model_dir.hpp"
#include "model_weights.hpp"
#include "vkgate/gguf_model.hpp"
#include "vkgate/model.hpp"
#include "vkgate/quant.hpp"
#include "vkgate/tokenizer.hpp"

namespace test_cli_quantize {

namespace {

using nlohmann::json;
using namespace vkgate;
using namespace vkgate::cli_test;

// Exactly representable in fp32, which is how GGUF stores it.
constexpr double kEps = 1.0 / (1 << 20);

// A qwen3 or llama shape whose hidden size 256 makes whole k-quant rows of
// the q/k/v, gate and up projections (o_proj's and down's rows of 64 stay
// float for the k-quants), with the unit tokenizer's vocabulary padded to 272.
ModelConfig quantizable(const char* model_type, bool tied) {
  test::TinyModel s;
  s.model_type = model_type;
  s.hidden = 256;
  s.heads = 4;
  s.kv_heads = 2;
  s.head_dim = 16;
  s.inter = 64;
  s.vocab = 272;
  s.tied = tied;
  ModelConfig c = s.config();
  c.attention.rms_norm_eps = kEps;
  c.attention.max_position_embeddings = 4096;
  return c;
}

// The unit tokenizer as a GPT-2 tokenizer.json (no prefix space), beside the weights.
void add_tokenizer(const ModelDir& m) {
  json tok = json::parse(read_text(std::string(VKGATE_TOKENIZER_UNIT_DIR) + "/gpt2_style.json"));
  tok["pre_tokenizer"]["add_prefix_space"] = false;
  write_text(m.dir / "tokenizer.json", tok.dump(1));
}

std::vector<float> logits_of(const std::string& path) { return SafetensorsFile(path).at("logits").to_f32(); }

}  // namespace

TEST_CASE("cli quantize: qwen3 and llama directories read back as GGUF and run with the logits of run --quant") {
  std::mt19937 rng(std::random_device{}());
  struct Case {
    const char* model_type;
    bool tied;
    const char* type;
    DType quant;
  };
  const Case cases[] = {{"qwen3", true, "q4_k", DType::Q4_K},
                        {"qwen3", false, "q8_0", DType::Q8_0},
                        {"llama", false, "q6_k", DType::Q6_K},
                        {"llama", true, "Q5_1", DType::Q5_1},
                        {"qwen3", false, "iq4_xs", DType::IQ4_XS}};
  for (const Case& c : cases) {
    CAPTURE(c.model_type);
    CAPTURE(c.type);
    ModelDir m(quantizable(c.model_type, c.tied), rng, DType::F16, false);
    add_tokenizer(m);
    const ModelConfig& cfg = m.model.cfg;
    const std::string out = m.dir / "out.gguf";
    const CliResult q = run_cli({"quantize", m.path(), "--type", c.type, "--output", out}, m.dir.path);
    check_clean_exit(q);
    REQUIRE(q.code == 0);
    CHECK(q.out.find("-> " + out) != std::string::npos);
    CHECK(q.err.empty());

    // Read back: the config, each tensor's type and shape, the metadata, the tokenizer.
    const GgufFile f = GgufFile::open(out);
    const ModelConfig read = gguf_model_config(f);
    CHECK(read.model_type == cfg.model_type);
    CHECK(read.attention == load_model_config(m.path()).attention);
    CHECK(read.num_hidden_layers == cfg.num_hidden_layers);
    CHECK(read.intermediate_size == cfg.intermediate_size);
    CHECK(read.vocab_size == cfg.vocab_size);
    CHECK(read.tie_word_embeddings == cfg.tie_word_embeddings);
    CHECK(read.eos_token_ids == cfg.eos_token_ids);
    CHECK(f.string("general.architecture") == c.model_type);
    CHECK(f.integer("general.file_type") == gguf_file_type({.quant = c.quant}));
    CHECK(f.integer("general.quantization_version") == 2);
    CHECK(f.string("general.name") == m.dir.path.filename().string());
    const bool k_quant = block_elements(c.quant) == 256;
    for (int l = 0; l < cfg.num_hidden_layers; ++l) {
      const std::string blk = "blk." + std::to_string(l) + ".";
      for (const char* n : {"attn_q", "attn_k", "attn_v", "ffn_gate", "ffn_up"}) {
        CAPTURE(n);
        CHECK(f.tensor(blk + n + ".weight").dtype == c.quant);
      }
      for (const char* n : {"attn_output", "ffn_down"}) {  // rows of 64
        CAPTURE(n);
        CHECK(f.tensor(blk + n + ".weight").dtype == (k_quant ? DType::F16 : c.quant));
      }
      CHECK(f.tensor(blk + "attn_norm.weight").dtype == DType::F32);
      CHECK(f.tensor(blk + "ffn_norm.weight").dtype == DType::F32);
      CHECK(f.tensor(blk + "attn_q.weight").shape == std::vector<int64_t>{64, 256});
      CHECK(f.tensor(blk + "ffn_down.weight").shape == std::vector<int64_t>{256, 64});
    }
    CHECK(f.tensor("token_embd.weight").dtype == DType::F16);
    CHECK(f.tensor("output_norm.weight").dtype == DType::F32);
    CHECK((f.find_tensor("output.weight") == nullptr) == c.tied);
    if (!c.tied) CHECK(f.tensor("output.weight").dtype == c.quant);
    CHECK(f.strings("tokenizer.ggml.tokens").size() == size_t(cfg.vocab_size));
    CHECK(f.string("tokenizer.ggml.pre") == "gpt-2");
    const Tokenizer from_gguf = Tokenizer::load(out), from_json = Tokenizer::load(m.dir / "tokenizer.json");
    CHECK(from_gguf.encode("hello world, hello 12") == from_json.encode("hello world, hello 12"));

    // The file and the directory quantized on load: the same blocks, the same logits.
    const auto ids = test::random_ids(rng, 2 * 5, cfg.vocab_size);
    const std::string in = m.ids_file("in.safetensors", ids, 2, 5);
    std::vector<std::vector<std::string>> jobs = {
        with_device({"run", "--weights", out, "--input", in, "--output", m.dir / "gguf.safetensors"}),
        with_device({"run", "--weights", m.path(), "--quant", c.type, "--input", in, "--output", m.dir / "dir.safetensors"})};
    // --int8 reaches the model: int8 activations move the logits, within the int8 bound's reach.
    const bool int8 = c.quant == DType::Q8_0;
    if (int8) jobs.push_back(with_device({"run", "--weights", out, "--int8", "--input", in, "--output", m.dir / "int8.safetensors"}));
    const std::vector<CliResult> runs = run_all(jobs, m.dir.path);
    for (const CliResult& r : runs) {
      check_clean_exit(r);
      REQUIRE(r.code == 0);
    }
    const std::vector<float> gguf = logits_of(m.dir / "gguf.safetensors");
    CHECK(gguf == logits_of(m.dir / "dir.safetensors"));
    if (int8) {
      const std::vector<float> q8 = logits_of(m.dir / "int8.safetensors");
      REQUIRE(q8.size() == gguf.size());
      double err = 0, ref = 0;
      for (size_t i = 0; i < q8.size(); ++i) {
        err += (double(q8[i]) - gguf[i]) * (double(q8[i]) - gguf[i]);
        ref += double(gguf[i]) * gguf[i];
      }
      CHECK(err <= 1e-3 * ref);
      CHECK((err > 0) == test::context().device().integer_dot_product);  // without the feature: the fp32 product
    }
  }
}

TEST_CASE("cli quantize: --type f16 and f32 keep every matrix float, and the file runs as the directory does") {
  std::mt19937 rng(std::random_device{}());
  ModelDir m(quantizable("llama", false), rng, DType::F16, false);
  for (const auto& [type, dtype, ftype] : {std::tuple{"f16", DType::F16, 1}, std::tuple{"f32", DType::F32, 0}}) {
    CAPTURE(type);
    const std::string out = m.dir / (std::string(type) + ".gguf");
    const CliResult q = run_cli({"quantize", m.path(), "--type", type, "--output", out, "--quiet"}, m.dir.path);
    check_clean_exit(q);
    REQUIRE(q.code == 0);
    CHECK(q.out.empty());
    const GgufFile f = GgufFile::open(out);
    CHECK(f.integer("general.file_type") == ftype);
    CHECK(!f.contains("tokenizer.ggml.model"));  // no tokenizer.json in the directory
    for (const GgufTensor& t : f.tensors()) CHECK(t.dtype == (t.shape.size() == 1 ? DType::F32 : dtype));
  }
  const auto ids = test::random_ids(rng, 4, m.model.cfg.vocab_size);
  const std::string in = m.ids_file("in.safetensors", ids, 1, 4);
  const std::vector<CliResult> runs =
      run_all({with_device({"run", "--weights", m.dir / "f16.gguf", "--input", in, "--output", m.dir / "a.safetensors"}),
               with_device({"run", "--weights", m.path(), "--input", in, "--output", m.dir / "b.safetensors"})},
              m.dir.path);
  for (const CliResult& r : runs) REQUIRE(r.code == 0);
  CHECK(logits_of(m.dir / "a.safetensors") == logits_of(m.dir / "b.safetensors"));
}

TEST_CASE("cli quantize: a bad type, a missing directory or tensor, another model type and an unwritable output fail "
          "cleanly, writing nothing") {
  std::mt19937 rng(std::random_device{}());
  ModelDir m(quantizable("qwen3", false), rng, DType::F32, true);
  const std::string out = m.dir / "out.gguf";
  auto fails = [&](const std::vector<std::string>& args, int code, const std::vector<std::string>& parts) {
    CAPTURE(args.size() > 1 ? args[1] : std::string());
    const CliResult r = run_cli(args, m.dir.path);
    check_clean_exit(r);
    CHECK(r.code == code);
    CHECK(r.out.empty());
    INFO(r.err);
    for (const std::string& p : parts) CHECK(r.err.find(p) != std::string::npos);
    CHECK(!fs::exists(out));
  };
  fails({"quantize", m.path(), "--type", "iq3_s", "--output", out}, 2, {"--type", "iq3_s"});
  fails({"quantize", m.path(), "--output", out}, 2, {"--type is required"});
  fails({"quantize", m.path(), "--type", "q8_0"}, 2, {"--output is required"});
  fails({"quantize", "--type", "q8_0", "--output", out}, 2, {"directory is required"});
  fails({"quantize", m.dir / "absent", "--type", "q8_0", "--output", out}, 1, {m.dir / "absent", "does not exist"});
  // An output in a directory that does not exist, or a directory.
  const CliResult nodir = run_cli({"quantize", m.path(), "--type", "q8_0", "--output", m.dir / "no/such/out.gguf"}, m.dir.path);
  CHECK(nodir.code == 1);
  CHECK(nodir.err.find(m.dir / "no/such/out.gguf") != std::string::npos);
  CHECK(!fs::exists(m.dir / "no"));
  fs::create_directories(m.dir / "sub");
  const CliResult isdir = run_cli({"quantize", m.path(), "--type", "q8_0", "--output", m.dir / "sub"}, m.dir.path);
  CHECK(isdir.code == 1);
  CHECK(isdir.err.find(m.dir / "sub") != std::string::npos);
  // A tensor missing from the checkpoint: named, with its file.
  rewrite_tensor(m.dir.path, "model.layers.1.mlp.up_proj.weight", {});
  fails({"quantize", m.path(), "--type", "q8_0", "--output", out}, 1, {"model.layers.1.mlp.up_proj.weight"});
  // A model type GGUF export does not write.
  TempDir gla("quantize_gla");
  {
    ModelDir g(test::TinyGla{}.config(), rng, DType::F32, false);
    const CliResult r = run_cli({"quantize", g.path(), "--type", "q8_0", "--output", gla / "out.gguf"}, gla.path);
    CHECK(r.code == 1);
    CHECK(r.err.find("model_type \"gla\"") != std::string::npos);
    CHECK(!fs::exists(gla / "out.gguf"));
  }
}

}  // namespace test_cli_quantize
#endif
