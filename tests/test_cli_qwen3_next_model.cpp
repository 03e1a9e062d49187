// `vkgate run` on input_ids and `vkgate generate` on a Qwen3-Next model
// directory with dense MLPs (Gated DeltaNet and gated-attention layers), as
// child processes: logits and statistics against the double reference, greedy
// ids, and a sparse-MoE config refused naming the key.
#ifdef VKGATE_CLI

#include "doctest.hpp"

#include <cmath>
#include <nlohmann/json.hpp>

#include "cli_harness.hpp"
#include "golden.hpp"
#include "model_dir.hpp"
#include "model_weights.hpp"
#include "vkgate/reference.hpp"
#include "vkgate/reference_model.hpp"

namespace test_cli_qwen3_next_model {

namespace {

using namespace vkgate;
using namespace vkgate::cli_test;

}  // namespace

TEST_CASE("cli qwen3_next model: run writes the reference's logits and per-layer statistics, generate its greedy ids") {
  std::mt19937 rng(std::random_device{}());
  const nlohmann::json config = test::tiny_qwen3_next_json();
  ModelDir m(parse_model_config_json(config.dump(), "config.json"), rng, DType::F32, true, config);
  const std::vector<int64_t> ids = test::random_ids(rng, 8, 60);
  const std::string input = m.ids_file("ids.safetensors", ids, 2, 4);
  const auto want = reference::model_forward(m.model.cfg, m.map, {ids, 2, 4});

  const std::string out = m.dir / "out.safetensors";
  const CliResult r = run_cli(with_device({"run", "--weights", m.path(), "--input", input, "--output", out, "--stats"}), m.dir.path);
  check_clean_exit(r);
  REQUIRE(r.code == 0);
  const SafetensorsFile written(out);
  const reference::Diff d = reference::compare(written.at("logits").to_f32(), want.logits);
  CHECK(d.first_bad == -1);
  CHECK(d.nmse <= 1e-8);
  // [L_attn, H] and [L_attn] for the attention layers 1 and 3 (0 and 2 are Gated DeltaNet).
  CHECK(written.at("stats.first_token_attn").shape == std::vector<int64_t>{2, 2});
  CHECK(written.at("stats.attention_layers").to_i64() == std::vector<int64_t>{1, 3});
  const std::vector<double> gate = written.at("stats.gate_mean").to_f64();
  REQUIRE(gate.size() == 2);
  for (size_t i = 0; i < 2; ++i) CHECK(gate[i] == doctest::Approx(want.gate_mean[i]).epsilon(1e-5));
  CHECK(!written.contains("stats.expert_load"));  // dense MLPs

  const std::vector<int64_t> prompt(ids.begin(), ids.begin() + 3);
  const std::string expected = id_line(reference::greedy_generate(m.model.cfg, m.map, prompt, 5, false));
  const CliResult g = run_cli(with_device({"generate", "--weights", m.path(), "--prompt-ids",
                                           std::to_string(prompt[0]) + "," + std::to_string(prompt[1]) + "," +
                                               std::to_string(prompt[2]),
                                           "--max-new-tokens", "5", "--ignore-eos"}),
                              m.dir.path);
  check_clean_exit(g);
  REQUIRE(g.code == 0);
  CHECK(g.out == expected + "\n");

  nlohmann::json sparse = config;
  sparse.erase("num_experts");
  write_text(m.dir / "config.json", sparse.dump());
  fs::remove(out);
  const CliResult s = run_cli(with_device({"run", "--weights", m.path(), "--input", input, "--output", out}), m.dir.path);
  check_clean_exit(s);
  // Qwen3NextConfig's default of 512 experts per layer: the router the file lacks is named.
  CHECK(s.code == 1);
  CHECK(s.err.find("model.layers.0.mlp.gate.weight") != std::string::npos);
  CHECK(!fs::exists(out));
}

TEST_CASE("cli qwen3_5 model: the golden multimodal-form checkpoint through run --stats and generate") {
  const std::string dir = test::golden_dir() + "/wave3/models/qwen3_5_tiny_vlm_form";
  TempDir tmp("qwen3_5");
  const std::string out = tmp / "out.safetensors";
  const CliResult r = run_cli(with_device({"run", "--weights", dir, "--input", dir + "/input.safetensors", "--output",
                                           out, "--stats"}),
                              tmp.path);
  check_clean_exit(r);
  REQUIRE(r.code == 0);
  const SafetensorsFile written(out), expected(dir + "/expected.safetensors");
  const reference::Diff d = reference::compare(written.at("logits").to_f32(), expected.at("logits").to_f64());
  CHECK(d.first_bad == -1);
  CHECK(d.nmse <= 1e-8);
  CHECK(written.at("stats.attention_layers").to_i64() == std::vector<int64_t>{3});
  check_golden_generate(dir, tmp.path);
}

}  // namespace test_cli_qwen3_next_model
#endif
