// `vkgate run` and `vkgate generate` on sparse MoE checkpoints, as child
// processes: the wave-3 golden qwen3_next and qwen3_moe models in every
// precision (logits, statistics with the expert load, greedy ids); a sharded
// BF16 qwen3_moe checkpoint storing its experts fused (transformers >= 5)
// against the reference; a missing expert and a misshapen router refused
// naming the tensor, with no output file.
#ifdef VKGATE_CLI

#include "doctest.hpp"

#include <nlohmann/json.hpp>

#include "cli_harness.hpp"
#include "golden.hpp"
#include "harness.hpp"
#include "model_dir.hpp"
#include "model_weights.hpp"
#include "vkgate/reference_model.hpp"

namespace test_cli_moe_model {

namespace {

using nlohmann::json;
using namespace vkgate;
using namespace vkgate::cli_test;

std::string wave3(const std::string& name) { return test::golden_dir() + "/wave3/models/" + name; }

json tiny_moe_json() {
  return {{"model_type", "qwen3_moe"}, {"hidden_size", 32}, {"num_attention_heads", 2},
          {"num_key_value_heads", 1}, {"head_dim", 16}, {"intermediate_size", 40},
          {"num_hidden_layers", 2}, {"vocab_size", 60}, {"num_experts", 4},
          {"num_experts_per_tok", 2}, {"moe_intermediate_size", 24}, {"norm_topk_prob", true},
          {"rms_norm_eps", 1e-6}, {"rope_theta", 10000.0}, {"eos_token_id", 1}};
}

}  // namespace

// bf16 at 1e-2: see test_moe_model.cpp (these cases flip an expert choice at bf16's rounding).
TEST_CASE("cli moe model: the golden qwen3_next and qwen3_moe through run --stats in every precision, and generate") {
  for (const char* name : {"qwen3_next_tiny", "qwen3_moe_tiny"}) {
    const std::string dir = wave3(name);
    const SafetensorsFile expected(dir + "/expected.safetensors");
    const int L = json::parse(test::read_file_text(dir + "/config.json")).at("num_hidden_layers").get<int>();
    TempDir tmp("moe");
    for (const auto& [precision, bound] : {std::pair{"fp32", 1e-8}, {"fp16", 1e-4}, {"bf16", 1e-2}}) {
      INFO(name << " " << precision);
      const std::string out = tmp / (std::string(precision) + ".safetensors");
      const CliResult r = run_cli(with_device({"run", "--weights", dir, "--input", dir + "/input.safetensors", "--output",
                                               out, "--stats", "--precision", precision}),
                                  tmp.path);
      check_clean_exit(r);
      REQUIRE(r.code == 0);
      const SafetensorsFile written(out);
      const reference::Diff d = reference::compare(written.at("logits").to_f32(), expected.at("logits").to_f64());
      CHECK(d.first_bad == -1);
      CHECK(d.nmse <= bound);
      CHECK(written.at("stats.expert_load").shape == std::vector<int64_t>{L, 8});
      CHECK(written.at("stats.moe_layers").to_i64().size() == size_t(L));
      double sum = 0;
      for (double v : written.at("stats.expert_load").to_f64()) sum += v;
      CHECK(sum == doctest::Approx(2.0 * L));  // top 2 of 8 in every layer
    }
    check_golden_generate(dir, tmp.path);
  }
}

TEST_CASE("cli moe model: a sharded BF16 qwen3_moe with fused experts, a missing expert and a misshapen router refused") {
  std::mt19937 rng(std::random_device{}());
  const json config = tiny_moe_json();
  const ModelConfig cfg = parse_model_config_json(config.dump(), "config.json");
  ModelDir m(cfg, rng, DType::BF16, true, config);
  const std::vector<int64_t> ids = test::random_ids(rng, 6, 60);
  const std::string input = m.ids_file("ids.safetensors", ids, 2, 3);
  const std::string out = m.dir / "out.safetensors";
  auto run = [&] { return run_cli(with_device({"run", "--weights", m.path(), "--input", input, "--output", out}), m.dir.path); };
  const auto want = reference::model_forward(cfg, m.map, {ids, 2, 3});
  auto check_logits = [&] {
    const CliResult r = run();
    check_clean_exit(r);
    REQUIRE(r.code == 0);
    const reference::Diff d = reference::compare(SafetensorsFile(out).at("logits").to_f32(), want.logits);
    CHECK(d.nmse <= 1e-8);
  };
  check_logits();

  // Layer 1's experts fused as transformers >= 5 stores them, in a third file.
  const int64_t E = 4, Im = 24, D = 32;
  std::vector<float> gate_up, down;
  for (int e = 0; e < E; ++e) {
    const std::string p = "model.layers.1.mlp.experts." + std::to_string(e) + ".";
    for (const char* part : {"gate_proj.weight", "up_proj.weight"})
      gate_up.insert(gate_up.end(), m.map.at(p + part).begin(), m.map.at(p + part).end());
    down.insert(down.end(), m.map.at(p + "down_proj.weight").begin(), m.map.at(p + "down_proj.weight").end());
    for (const char* part : {"gate_proj.weight", "up_proj.weight", "down_proj.weight"})
      rewrite_tensor(m.dir.path, p + part, {});
  }
  FileBuilder fused;
  fused.add("model.layers.1.mlp.experts.gate_up_proj", {E, 2 * Im, D}, gate_up, DType::BF16);
  fused.add("model.layers.1.mlp.experts.down_proj", {E, D, Im}, down, DType::BF16);
  fused.write(m.dir / "model-fused.safetensors");
  json index = json::parse(read_text(m.dir / "model.safetensors.index.json"));
  for (int e = 0; e < E; ++e)
    for (const char* part : {"gate_proj.weight", "up_proj.weight", "down_proj.weight"})
      index["weight_map"].erase("model.layers.1.mlp.experts." + std::to_string(e) + "." + part);
  for (const char* n : {"model.layers.1.mlp.experts.gate_up_proj", "model.layers.1.mlp.experts.down_proj"})
    index["weight_map"][n] = "model-fused.safetensors";
  write_text(m.dir / "model.safetensors.index.json", index.dump());
  fs::remove(out);
  check_logits();

  rewrite_tensor(m.dir.path, "model.layers.0.mlp.gate.weight", {5, 32});
  fs::remove(out);
  CliResult r = run();
  check_clean_exit(r);
  CHECK(r.code == 1);
  CHECK(r.err.find("model.layers.0.mlp.gate.weight") != std::string::npos);
  CHECK(!fs::exists(out));
  rewrite_tensor(m.dir.path, "model.layers.0.mlp.experts.3.up_proj.weight", {});
  r = run();
  check_clean_exit(r);
  CHECK(r.code == 1);
  CHECK(r.err.find("model.layers.0.mlp.experts.3.up_proj.weight") != std::string::npos);
  CHECK(!fs::exists(out));
}

}  // namespace test_cli_moe_model
#endif
