// GGUF files quantized by llama.cpp's own llama-quantize (Q4_K_M and Q8_0 of a
// small random qwen3 and llama model: tests/data/gguf/llama_cpp/README.md):
// each loads through Model::load and agrees with the double reference run on
// the file's own tensors dequantized (the blocks' values, so the bound
// measures the device's products, not the quantization error), greedy ids
// included; the Q4_K_M files mix Q4_K, Q5_0, Q6_K and Q8_0 (Q4_K q/k beside a
// Q6_K v in one fused projection); a Q2_K file and a Qwen3-Next IQ4_XS one
// bring Q2_K, Q3_K, IQ4_XS and IQ4_NL. `vkgate generate --prompt` with the file's
// own tokenizer and `vkgate run` run on them as child processes. Qwen3-Next:
// the F16 file llama.cpp's own convert_hf_to_gguf.py writes of a random
// checkpoint reads back as that checkpoint (rebuilt here from its generator's
// formula) with its logits, llama-quantize's Q4_K_M of it matches the
// reference (its Gated DeltaNet projections interleaved back into
// in_proj_qkvz, or read apart when their types differ), and broken files are
// errors naming the key or tensor.
#include "doctest.hpp"

#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "converter_checkpoint.hpp"
#include "gguf_convert.hpp"
#include "harness.hpp"
#include "model_check.hpp"
#include "model_weights.hpp"
#include "ops/qmatmul.hpp"
#include "vkgate/gguf_model.hpp"
#include "vkgate/model.hpp"
#include "vkgate/quant.hpp"
#include "vkgate/reference_model.hpp"
#include "vkgate/safetensors.hpp"
#include "vkgate/tokenizer.hpp"
#ifdef VKGATE_CLI
#include "cli_harness.hpp"

namespace test_gguf_llama_cpp {
#endif

using namespace vkgate;
using test::check_load_refused;
using test::draft_of;
using test::FileWeights;
using test::llama_cpp_file;

namespace {

const char* const kFiles[] = {"qwen3-Q4_K_M.gguf", "qwen3-Q8_0.gguf", "llama-Q4_K_M.gguf", "llama-Q8_0.gguf"};
// The CLI runs on these, on Qwen3-Next's (Gated DeltaNet, sparse MoE with a
// shared expert) and on Qwen3.5's (its value heads reordered: test_gguf_qwen35.cpp).
const char* const kCliFiles[] = {"qwen3-Q4_K_M.gguf", "qwen3-Q8_0.gguf", "llama-Q4_K_M.gguf", "llama-Q8_0.gguf",
                                 "qwen3next-Q4_K_M.gguf", "qwen3-Q2_K.gguf", "qwen35-Q4_K_M.gguf"};

}  // namespace

TEST_CASE_FIXTURE(test::GpuTest, "gguf llama.cpp: Q4_K_M and Q8_0 files of llama-quantize match the reference on their dequantized tensors") {
  for (const char* name : kFiles) {
    CAPTURE(name);
    const std::string path = llama_cpp_file(name);
    const FileWeights w(path);
    const bool q4 = std::string(name).find("Q4_K_M") != std::string::npos;
    if (q4) {
      // The k-quant rows llama-quantize chose, and its fallbacks for rows of 64.
      CHECK(w.types.count(DType::Q4_K));
      CHECK(w.types.count(DType::Q6_K));
      CHECK(w.types.count(DType::Q5_0));
      CHECK(w.types.count(DType::Q8_0));
      const GgufFile& f = w.file;
      CHECK(f.tensor("blk.1.attn_q.weight").dtype == DType::Q4_K);
      CHECK(f.tensor("blk.1.attn_k.weight").dtype == DType::Q4_K);
      CHECK(f.tensor("blk.1.attn_v.weight").dtype == DType::Q6_K);
      CHECK(f.integer("general.file_type") == 15);  // LLAMA_FTYPE_MOSTLY_Q4_K_M
    } else {
      CHECK(w.types == std::set<DType>{DType::Q8_0});
      CHECK(w.file.integer("general.file_type") == 7);
    }
    CHECK(w.cfg.hidden_size() == 256);
    CHECK(w.cfg.num_hidden_layers == 2);
    CHECK(w.cfg.tie_word_embeddings == (w.cfg.model_type == "qwen3"));

    const int B = 2, T = 6;
    const auto ids = test::random_ids(rng, size_t(B) * T, w.cfg.vocab_size);
    const auto want = reference::model_forward(w.cfg, w.map, {ids, B, T});
    for (const auto& [precision, bound] : {std::pair{Precision::fp32, 1e-7}, std::pair{Precision::fp16, 1e-4}}) {
      CAPTURE(to_string(precision));
      Model model = Model::load(ctx, path, {precision});
      model.set_poison(true);
      const std::vector<float> got = model.logits(ids, B, T);
      test::check_close(got, want.logits, bound);
      CHECK(model.logits(ids, B, T) == got);
      if (precision == Precision::fp32) {
        const std::vector<int64_t> prompt(ids.begin(), ids.begin() + 4);
        const GenerateResult g = model.generate(prompt, {.max_new_tokens = 6, .stop_at_eos = false});
        CHECK(g.ids == reference::greedy_generate(w.cfg, w.map, prompt, 6, false));
      }
    }
  }
}

// A quantized token_embd (qwen3 Q4_K_M: Q6_K, tied, also the output; llama
// Q4_K_M: Q4_K beside its own Q6_K output; Q8_0) stays in its blocks on the
// device, one copy for the gather and a tied lm_head, whole or in buffers of
// rows: the logits equal, bit for bit, those of the layout that dequantized
// the table for the gather (a fp32 table, with the blocks as a separate
// lm_head), and the weights take about the file's tensor bytes (before: a
// fp32 table beside the blocks).
TEST_CASE_FIXTURE(test::GpuTest, "gguf llama.cpp: a quantized token_embd is gathered from its blocks, one copy, the same logits") {
  for (const char* name : kFiles) {
    CAPTURE(name);
    const std::string path = llama_cpp_file(name);
    const GgufFile file = GgufFile::open(path);
    const ModelConfig cfg = gguf_model_config(file);
    TensorBuffers copies;
    const TensorMap tensors = gguf_model_tensors(file, cfg, copies);
    const HostTensor& table = tensors.at(cfg.embedding_name());
    REQUIRE(is_quantized(table.dtype));
    const int B = 2, T = 5;
    auto ids = test::random_ids(rng, size_t(B) * T, cfg.vocab_size);
    ids[0] = 0;
    ids[1] = cfg.vocab_size - 1;  // the table's last row
    Model model(ctx, cfg, tensors, {Precision::fp32});
    model.set_poison(true);
    const std::vector<float> got = model.logits(ids, B, T);
    {
      test::ScopedTuning tuning(ctx);
      tuning->vocab_chunk_rows = 100;  // the blocks in buffers of 100, 100 and 72 rows
      Model chunked(ctx, cfg, tensors, {Precision::fp32});
      chunked.set_poison(true);
      CHECK(chunked.logits(ids, B, T) == got);
    }

    // The table dequantized on the host for the gather; lm_head the blocks (tied) or the file's output.
    ModelConfig untied = cfg;
    untied.tie_word_embeddings = false;
    TensorMap before = tensors;
    std::vector<float> dense(size_t(table.numel()));
    dequantize(table.dtype, table.bytes, dense);
    before[cfg.embedding_name()] = HostTensor{DType::F32, table.shape, std::as_bytes(std::span(dense))};
    if (cfg.tie_word_embeddings) before["lm_head.weight"] = table;
    Model old(ctx, untied, before, {Precision::fp32});
    CHECK(old.logits(ids, B, T) == got);

    // Device memory for the weights: the file's tensor bytes, the padding the
    // quantized kernels read past each block buffer (ops::qmatmul_padding,
    // 48 bytes) and norms held fp32 at most; the dequantized table alone
    // would be 272 × 256 × 4 bytes, more than all of the file's tensors.
    const uint64_t file_bytes = file.tensor_bytes(), weights = model.memory().weights;
    CAPTURE(file_bytes);
    CAPTURE(weights);
    CHECK(weights <= file_bytes + file_bytes / 20);  // the target: within 5 %
    CHECK(weights >= file_bytes - file_bytes / 20);
    CHECK(weights <= file_bytes + ops::qmatmul_padding * file.tensors().size());
    CHECK(old.memory().weights > weights + dense.size() * 4 / 2);

    // An id past the vocabulary is still refused before anything runs.
    std::vector<int64_t> bad = ids;
    bad[3] = cfg.vocab_size;
    CHECK_THROWS_WITH_AS(model.logits(bad, B, T), doctest::Contains("is outside the vocabulary"), Error);
    CHECK(model.logits(ids, B, T) == got);
  }
}

// ---- Qwen3-Next: qwen3next-F16.gguf, written by llama.cpp's own
// convert_hf_to_gguf.py from make_qwen3next.py's checkpoint, and
// qwen3next-Q4_K_M.gguf, llama-quantize's of it (README.md) ----

namespace {

std::vector<double> doubles(const std::vector<float>& v) { return std::vector<double>(v.begin(), v.end()); }

}  // namespace

TEST_CASE_FIXTURE(test::GpuTest, "gguf llama.cpp: qwen3next F16 of convert_hf_to_gguf.py reads back as its checkpoint, the same config and logits") {
  // in_proj_qkvz's rows gathered from attn_qkv and attn_gate, routers F32 of the F16 values.
  const ModelConfig cfg =
      test::check_converted(*this, llama_cpp_file("qwen3next-F16.gguf"), test::ConverterCheckpoint(test::qwen3next_checkpoint_config()));
  CHECK(cfg.model_type == "qwen3_next");
  CHECK(cfg.num_hidden_layers == 2);
  CHECK(!cfg.linear_attention->separate_projections);  // attn_qkv and attn_gate both F16: in_proj_qkvz again
}

TEST_CASE_FIXTURE(test::GpuTest, "gguf llama.cpp: qwen3next Q4_K_M of llama-quantize matches the reference on its dequantized tensors, its Gated DeltaNet projections interleaved or apart") {
  const std::string path = llama_cpp_file("qwen3next-Q4_K_M.gguf");
  const FileWeights w(path);
  const GgufFile& f = w.file;
  CHECK(f.integer("general.file_type") == 15);
  for (const char* name : {"blk.0.attn_qkv.weight", "blk.0.attn_gate.weight", "blk.0.ssm_ba.weight",
                           "blk.0.ffn_gate_exps.weight", "blk.1.attn_q.weight"})
    CHECK(f.tensor(name).dtype == DType::Q4_K);
  CHECK(f.tensor("blk.0.ssm_out.weight").dtype == DType::Q5_0);    // rows of 64: llama-quantize's fallback
  CHECK(f.tensor("blk.1.attn_v.weight").dtype == DType::Q6_K);
  CHECK(f.tensor("blk.0.ffn_down_exps.weight").dtype == DType::F16);  // rows of 16: no block format fits
  CHECK(w.types.count(DType::Q4_K));
  CHECK(w.types.count(DType::F16));
  REQUIRE(w.cfg.linear_attention);
  CHECK(!w.cfg.linear_attention->separate_projections);
  CHECK(w.cfg.moe_layers() == std::vector<int>{0, 1});

  const test::FileRun run = test::check_file_model(*this, path, w);
  const std::vector<int64_t>& ids = run.ids;
  const std::vector<float>& got = run.logits;
  const int B = run.B, T = run.T;

  if (vk.info.storage16) {
    // fp16: every token to every expert, so that no routing choice can flip
    // between a fp16 router logit and the reference's (test_quant_moe.cpp).
    INFO("fp16, k = E");
    ModelConfig every = w.cfg;
    every.moe.num_experts_per_tok = every.moe.num_experts;
    TensorBuffers copies;
    Model half(ctx, every, gguf_model_tensors(f, every, copies), {Precision::fp16});
    test::check_close(half.logits(ids, B, T), reference::model_forward(every, w.map, {ids, B, T}).logits, 1e-4);
  }

  // attn_gate in another dtype than attn_qkv (here F32, its dequantized
  // values): the layer reads them apart, with ssm_ba's b and a rows apart too.
  INFO("separate projections");
  test::TempDir dir("gguf_qwen3next");
  GgufDraft d = draft_of(f);
  const GgufTensor& gate = f.tensor("blk.0.attn_gate.weight");
  std::vector<float> dense(size_t(gate.host().numel()));
  dequantize(gate.dtype, gate.bytes, dense);
  test::add_floats(d, gate.name, gate.shape, dense, DType::F32);
  d.write(dir / "apart.gguf");
  const FileWeights apart(dir / "apart.gguf");
  CHECK(apart.cfg.linear_attention->separate_projections);
  Model model_apart = Model::load(ctx, dir / "apart.gguf");
  model_apart.set_poison(true);
  const std::vector<float> got_apart = model_apart.logits(ids, B, T);
  test::check_close(got_apart, reference::model_forward(apart.cfg, apart.map, {ids, B, T}).logits, 1e-7);
  test::check_close(got_apart, doubles(got), 1e-10);
}

TEST_CASE_FIXTURE(test::GpuTest, "gguf llama.cpp: qwen3next missing or misshapen ssm tensors and keys are errors naming them, MTP blocks and an older ssm_in are read") {
  const GgufFile file = GgufFile::open(llama_cpp_file("qwen3next-F16.gguf"));
  const GgufDraft good = draft_of(file);
  test::TempDir dir("gguf_qwen3next");

  GgufDraft g = good;
  g.erase_tensor("blk.0.ssm_a");
  g.write(dir / "no_a.gguf");
  check_load_refused(*this, dir / "no_a.gguf", ErrorCode::missing_tensor,
                     {"'blk.0.ssm_a'", "model.layers.0.linear_attn.A_log"});

  g = good;
  g.erase_tensor("blk.0.attn_gate.weight");
  g.write(dir / "no_gate.gguf");
  check_load_refused(*this, dir / "no_gate.gguf", ErrorCode::missing_tensor,
                     {"'blk.0.attn_gate.weight'", "model.layers.0.linear_attn.in_proj_qkvz.weight"});

  g = good;
  test::add_floats(g, "blk.0.ssm_conv1d.weight", {128, 3}, std::vector<float>(128 * 3, 0.5f), DType::F32);
  g.write(dir / "conv.gguf");
  check_load_refused(*this, dir / "conv.gguf", ErrorCode::shape_mismatch,
                     {"'blk.0.ssm_conv1d.weight'", "model.layers.0.linear_attn.conv1d.weight", "[128, 3]", "[128, 1, 4]"});

  g = good;
  test::add_floats(g, "blk.0.ssm_a", {4}, {-1.0f, -2.0f, 0.5f, -1.0f}, DType::F32);
  g.write(dir / "positive_a.gguf");
  check_load_refused(*this, dir / "positive_a.gguf", ErrorCode::invalid_config, {"'blk.0.ssm_a'", "negative"});

  g = good;
  g.erase("qwen3next.ssm.state_size");
  g.write(dir / "no_key.gguf");
  check_load_refused(*this, dir / "no_key.gguf", ErrorCode::invalid_config, {"'qwen3next.ssm.state_size'"});

  g = good;
  g.set("qwen3next.ssm.inner_size", GgufValue::of_u32(62));  // not a multiple of the 4 value heads
  g.write(dir / "inner.gguf");
  check_load_refused(*this, dir / "inner.gguf", ErrorCode::invalid_config, {"'qwen3next.ssm.inner_size'", "62"});

  g = good;
  GgufValue three = *good.find("qwen3next.attention.recurrent_layers");
  three.integers.push_back(0);
  g.set("qwen3next.attention.recurrent_layers", three);
  g.write(dir / "layers.gguf");
  check_load_refused(*this, dir / "layers.gguf", ErrorCode::invalid_config,
                     {"'qwen3next.attention.recurrent_layers'", "3"});

  TensorBuffers copies;
  const ModelConfig cfg = gguf_model_config(file);
  const TensorMap tensors = gguf_model_tensors(file, cfg, copies);
  auto same_tensors = [&](const std::string& path) {
    const GgufFile f = GgufFile::open(path);
    const ModelConfig c = gguf_model_config(f);
    CHECK(c.num_hidden_layers == cfg.num_hidden_layers);
    CHECK(c.attention == cfg.attention);
    CHECK(*c.linear_attention == *cfg.linear_attention);
    TensorBuffers held;
    const TensorMap t = gguf_model_tensors(f, c, held);
    REQUIRE(t.size() == tensors.size());
    for (const auto& [name, v] : tensors) {
      CAPTURE(name);
      CHECK(t.at(name).dtype == v.dtype);
      CHECK(std::equal(t.at(name).bytes.begin(), t.at(name).bytes.end(), v.bytes.begin(), v.bytes.end()));
    }
  };

  // A multi-token-prediction block after the model's (the converter without
  // --no-mtp): block_count 3, nextn_predict_layers 1, blk.2 not read.
  g = good;
  g.set("qwen3next.block_count", GgufValue::of_u32(3));
  g.set("qwen3next.nextn_predict_layers", GgufValue::of_u32(1));
  g.set("qwen3next.attention.recurrent_layers", three);
  for (const GgufTensor& t : file.tensors())
    if (t.name.starts_with("blk.1."))
      g.add_tensor("blk.2." + t.name.substr(6), t.dtype, t.shape, std::vector<std::byte>(t.bytes.begin(), t.bytes.end()));
  test::add_floats(g, "blk.2.nextn.eh_proj.weight", {256, 512}, std::vector<float>(256 * 512, 0.0f), DType::F16);
  g.write(dir / "mtp.gguf");
  same_tensors(dir / "mtp.gguf");

  // An older converter's in_proj_qkvz as it is (ssm_in) instead of attn_qkv and attn_gate.
  g = good;
  g.erase_tensor("blk.0.attn_qkv.weight");
  g.erase_tensor("blk.0.attn_gate.weight");
  const HostTensor& qkvz = tensors.at("model.layers.0.linear_attn.in_proj_qkvz.weight");
  g.add_tensor("blk.0.ssm_in.weight", qkvz.dtype, qkvz.shape, std::vector<std::byte>(qkvz.bytes.begin(), qkvz.bytes.end()));
  g.write(dir / "ssm_in.gguf");
  same_tensors(dir / "ssm_in.gguf");
}
// The smaller files users download: llama-quantize's Q2_K of the qwen3 model
// (Q2_K q and k beside a Q3_K v in one fused projection, Q4_0 for rows of 64)
// and its IQ4_XS of the Qwen3-Next one (IQ4_XS in the Gated DeltaNet, the
// attention and the experts, IQ4_NL for rows of 64 and 32).
TEST_CASE_FIXTURE(test::GpuTest, "gguf llama.cpp: Q2_K and IQ4_XS files of llama-quantize match the reference on their dequantized tensors") {
  struct Expect {
    const char* file;
    int64_t file_type;
    std::vector<std::pair<const char*, DType>> tensors;
  };
  const Expect files[] = {
      {"qwen3-Q2_K.gguf", 10,  // LLAMA_FTYPE_MOSTLY_Q2_K
       {{"blk.1.attn_q.weight", DType::Q2_K}, {"blk.1.attn_k.weight", DType::Q2_K},
        {"blk.1.attn_v.weight", DType::Q3_K}, {"blk.0.ffn_up.weight", DType::Q2_K},
        {"blk.0.ffn_down.weight", DType::Q4_0}, {"token_embd.weight", DType::Q6_K}}},
      {"qwen3next-IQ4_XS.gguf", 30,  // LLAMA_FTYPE_MOSTLY_IQ4_XS
       {{"blk.0.attn_qkv.weight", DType::IQ4_XS}, {"blk.0.ssm_ba.weight", DType::IQ4_XS},
        {"blk.0.ffn_gate_exps.weight", DType::IQ4_XS}, {"blk.1.attn_q.weight", DType::IQ4_XS},
        {"blk.0.ssm_out.weight", DType::IQ4_NL}, {"blk.1.attn_output.weight", DType::IQ4_NL},
        {"blk.0.ffn_down_exps.weight", DType::F16}}},
  };
  for (const Expect& e : files) {
    CAPTURE(e.file);
    const std::string path = llama_cpp_file(e.file);
    const FileWeights w(path);
    CHECK(w.file.integer("general.file_type") == e.file_type);
    for (const auto& [name, dtype] : e.tensors) {
      CAPTURE(name);
      CHECK(w.file.tensor(name).dtype == dtype);
    }
    const test::FileRun run = test::check_file_model(*this, path, w);
    if (vk.info.storage16 && w.cfg.model_type == "qwen3") {
      Model half = Model::load(ctx, path, {Precision::fp16});
      test::check_close(half.logits(run.ids, run.B, run.T), run.want, 1e-4);
    }
  }
}

// vkgate::quantize of the F16 file's tensors gives llama-quantize's own bytes
// for every IQ4_XS and IQ4_NL tensor of its IQ4_XS file (no importance
// matrix): the same codes and scales, not only the same values.
TEST_CASE("gguf llama.cpp: quantize gives the bytes llama-quantize wrote for the IQ4_XS and IQ4_NL tensors") {
  const GgufFile f16 = GgufFile::open(llama_cpp_file("qwen3next-F16.gguf"));
  const GgufFile iq4 = GgufFile::open(llama_cpp_file("qwen3next-IQ4_XS.gguf"));
  int compared = 0;
  for (const GgufTensor& t : iq4.tensors()) {
    if (t.dtype != DType::IQ4_XS && t.dtype != DType::IQ4_NL) continue;
    CAPTURE(t.name);
    const GgufTensor& source = f16.tensor(t.name);
    REQUIRE(source.dtype == DType::F16);
    std::vector<float> values(source.bytes.size() / 2);
    for (size_t i = 0; i < values.size(); ++i) {
      uint16_t h;
      std::memcpy(&h, source.bytes.data() + 2 * i, 2);
      values[i] = half_to_float(h);
    }
    const std::vector<std::byte> q = quantize(t.dtype, values);
    CHECK(std::equal(q.begin(), q.end(), t.bytes.begin(), t.bytes.end()));
    ++compared;
  }
  CHECK(compared == 16);  // 14 IQ4_XS, 2 IQ4_NL (ssm_out, attn_output)
}

#ifdef VKGATE_CLI
TEST_CASE("cli gguf llama.cpp: generate --prompt with the file's own tokenizer and run on llama-quantize's files") {
  using namespace vkgate::cli_test;
  TempDir dir("gguf_llama_cpp");
  const std::string prompt = "hello world, hello";
  std::vector<std::vector<std::string>> jobs;
  std::vector<std::vector<int64_t>> greedy;
  std::vector<std::string> texts;
  std::vector<std::vector<double>> want_logits;
  for (const char* name : kCliFiles) {
    const std::string path = llama_cpp_file(name);
    const FileWeights w(path);
    const Tokenizer tok = Tokenizer::load(path);
    const std::vector<int32_t> ids32 = tok.encode(prompt);
    const std::vector<int64_t> ids(ids32.begin(), ids32.end());
    REQUIRE(ids.size() > 2);
    greedy.push_back(reference::greedy_generate(w.cfg, w.map, ids, 4, false));
    texts.push_back(tok.decode(std::vector<int32_t>(greedy.back().begin(), greedy.back().end())));
    want_logits.push_back(reference::model_forward(w.cfg, w.map, {ids, 1, int64_t(ids.size())}).logits);
    const std::string stem = std::string(name).substr(0, std::string(name).size() - 5);
    FileBuilder in;
    in.add_ids("input_ids", {1, int64_t(ids.size())}, ids, DType::I64);
    in.write(dir / (stem + ".in.safetensors"));
    jobs.push_back(with_device({"generate", "--weights", path, "--prompt", prompt, "--max-new-tokens", "4", "--ignore-eos",
                                "--json"}));
    jobs.push_back(with_device({"run", "--weights", path, "--input", dir / (stem + ".in.safetensors"), "--output",
                                dir / (stem + ".out.safetensors")}));
  }
  const std::vector<CliResult> results = run_all(jobs, dir.path);
  for (size_t i = 0; i < std::size(kCliFiles); ++i) {
    CAPTURE(kCliFiles[i]);
    const CliResult& gen = results[2 * i];
    const CliResult& run = results[2 * i + 1];
    check_clean_exit(gen);
    check_clean_exit(run);
    REQUIRE(gen.code == 0);
    REQUIRE(run.code == 0);
    const nlohmann::json doc = nlohmann::json::parse(gen.out);
    CHECK(doc.at("generated").get<std::vector<int64_t>>() == greedy[i]);
    const std::string stem = std::string(kCliFiles[i]).substr(0, std::string(kCliFiles[i]).size() - 5);
    test::check_close(SafetensorsFile(dir / (stem + ".out.safetensors")).at("logits").to_f32(), want_logits[i], 1e-7);
  }
  // And the text itself, once.
  const CliResult text = run_cli(with_device({"generate", "--weights", llama_cpp_file(kFiles[0]), "--prompt", prompt,
                                              "--max-new-tokens", "4", "--ignore-eos"}),
                                 dir.path);
  check_clean_exit(text);
  REQUIRE(text.code == 0);
  CHECK(text.out == texts[0]);
}

}  // namespace test_gguf_llama_cpp
#endif
