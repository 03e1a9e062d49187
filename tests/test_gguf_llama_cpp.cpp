// GGUF files quantized by llama.cpp's own llama-quantize (Q4_K_M and Q8_0 of a
// small random qwen3 and llama model: tests/data/gguf/llama_cpp/README.md):
// each loads through Model::load and agrees with the double reference run on
// the file's own tensors dequantized (the blocks' values, so the bound
// measures the device's products, not the quantization error), greedy ids
// included; the Q4_K_M files mix Q4_K, Q5_0, Q6_K and Q8_0 (Q4_K q/k beside a
// Q6_K v in one fused projection). `vkgate generate --prompt` with the file's
// own tokenizer and `vkgate run` run on them as child processes.
#include <doctest/doctest.h>

#include <set>
#include <string>
#include <vector>

#include "harness.hpp"
#include "model_check.hpp"
#include "model_weights.hpp"
#include "vkgate/gguf_model.hpp"
#include "vkgate/model.hpp"
#include "vkgate/quant.hpp"
#include "vkgate/reference_model.hpp"
#include "vkgate/safetensors.hpp"
#include "vkgate/tokenizer.hpp"
#ifdef VKGATE_CLI
#include "cli_harness.hpp"
#endif

using namespace vkgate;

namespace {

const char* const kFiles[] = {"qwen3-Q4_K_M.gguf", "qwen3-Q8_0.gguf", "llama-Q4_K_M.gguf", "llama-Q8_0.gguf"};

std::string data_file(const std::string& name) { return std::string(VKGATE_TEST_DATA_DIR) + "/gguf/llama_cpp/" + name; }

// The file's tensors under their Hugging Face names (llama's q/k rows
// un-permuted by gguf_model_tensors), every one as fp32 for the reference.
struct FileWeights {
  GgufFile file;
  ModelConfig cfg;
  std::map<std::string, std::vector<float>> data;
  WeightMap map;
  std::set<DType> types;  // of the projections

  explicit FileWeights(const std::string& path) : file(GgufFile::open(path)), cfg(gguf_model_config(file)) {
    TensorBuffers copies;
    const TensorMap tensors = gguf_model_tensors(file, cfg, copies);
    for (const auto& [name, t] : tensors)
      if (name.find("_proj.") != std::string::npos) types.insert(t.dtype);
    const test::Dequantized d(tensors);
    data = d.data;
    for (const auto& [name, v] : data) map[name] = v;
  }
};

}  // namespace

TEST_CASE_FIXTURE(test::GpuTest, "gguf llama.cpp: Q4_K_M and Q8_0 files of llama-quantize match the reference on their dequantized tensors") {
  for (const char* name : kFiles) {
    CAPTURE(name);
    const std::string path = data_file(name);
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

#ifdef VKGATE_CLI
TEST_CASE("cli gguf llama.cpp: generate --prompt with the file's own tokenizer and run on llama-quantize's files") {
  using namespace vkgate::cli_test;
  TempDir dir("gguf_llama_cpp");
  const std::string prompt = "hello world, hello";
  std::vector<std::vector<std::string>> jobs;
  std::vector<std::vector<int64_t>> greedy;
  std::vector<std::string> texts;
  std::vector<std::vector<double>> want_logits;
  for (const char* name : kFiles) {
    const std::string path = data_file(name);
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
  for (size_t i = 0; i < std::size(kFiles); ++i) {
    CAPTURE(kFiles[i]);
    const CliResult& gen = results[2 * i];
    const CliResult& run = results[2 * i + 1];
    check_clean_exit(gen);
    check_clean_exit(run);
    REQUIRE(gen.code == 0);
    REQUIRE(run.code == 0);
    const nlohmann::json doc = nlohmann::json::parse(gen.out);
    CHECK(doc.at("generated").get<std::vector<int64_t>>() == greedy[i]);
    const std::string stem = std::string(kFiles[i]).substr(0, std::string(kFiles[i]).size() - 5);
    test::check_close(SafetensorsFile(dir / (stem + ".out.safetensors")).at("logits").to_f32(), want_logits[i], 1e-7);
  }
  // And the text itself, once.
  const CliResult text = run_cli(with_device({"generate", "--weights", data_file(kFiles[0]), "--prompt", prompt,
                                              "--max-new-tokens", "4", "--ignore-eos"}),
                                 dir.path);
  check_clean_exit(text);
  REQUIRE(text.code == 0);
  CHECK(text.out == texts[0]);
}
#endif
