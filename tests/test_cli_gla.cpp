// `vkgate run` on a gated linear attention layer file, as a child process: the
// golden fla case and a generated layer (fp32 and fp16) against the
// reference, and malformed configs, weights and states, each exiting 1 with a
// message naming the key or tensor and leaving no output file.
#ifdef VKGATE_CLI

#include "doctest.hpp"

#include <nlohmann/json.hpp>
#include <random>

#include "cli_harness.hpp"
#include "layer_files.hpp"
#include "golden.hpp"
#include "harness.hpp"
#include "vkgate/gla_config.hpp"
#include "vkgate/reference.hpp"
#include "vkgate/reference_gla.hpp"

namespace test_cli_gla {

namespace {

using nlohmann::json;
using namespace vkgate;
using namespace vkgate::cli_test;

// A GLA layer file (weights and inputs in one safetensors) and its config.
struct GlaFiles : LayerFiles {
  GlaFiles()
      : LayerFiles("gla", json({{"mixer", "gla"}, {"hidden_size", 64}, {"num_heads", 4}, {"num_kv_heads", 2},
                                {"feature_map", "elu_plus_one"}, {"gla_key_coupling", "convex"}, {"clamp_min", -0.05}})) {}

  // Writes every file; `skip` leaves one weight out, `state_shape` replaces initial_state's.
  void write(std::mt19937& rng, DType dtype, const std::string& skip = "", std::vector<int64_t> state_shape = {}) {
    write_text(cfg, config.dump());
    const GlaConfig c = parse_gla_config_json(config.dump(), cfg);
    const GlaForms forms{8, "g_norm_swish_gate.weight", true};
    FileBuilder f;
    std::normal_distribution<float> unit(0.0f, 1.0f);
    for (const TensorSpec& spec : gla_expected_weights(c, forms)) {
      if (spec.name == skip) continue;
      const bool norm = spec.name.find("norm") != std::string::npos, bias = spec.name.ends_with(".bias");
      std::vector<float> v(size_t(spec.numel()));
      for (float& x : v) x = norm ? 1 + 0.2f * unit(rng) : bias ? 2 + unit(rng) : unit(rng) / std::sqrt(float(spec.shape.back()));
      values[spec.name] = f.add(spec.name, spec.shape, v, dtype);
    }
    for (auto& [name, v] : values) map[name] = v;
    auto input = [&](const std::string& name, std::vector<int64_t> shape) {
      int64_t n = 1;
      for (int64_t d : shape) n *= d;
      std::vector<float> v(static_cast<size_t>(n));
      for (float& x : v) x = unit(rng);
      values[name] = f.add(name, shape, v, DType::F32);
    };
    input("hidden_states", {2, 7, 64});
    input("initial_state", state_shape.empty() ? std::vector<int64_t>{2, 4, 8, 16} : state_shape);
    f.write(layer);
  }
};

}  // namespace

TEST_CASE("cli gla: the golden fla layer (w3) writes its output and final state") {
  TempDir tmp("gla_golden");
  const std::string base = test::golden_dir() + "/wave2/w3_gla_fla_gqa_T5_state";
  const std::string out = tmp / "out.safetensors";
  std::vector<std::string> args{"run", "--weights", base + ".safetensors", "--config", base + ".json",
                                "--input", base + ".safetensors", "--output", out};
  for (const auto& d : device_args()) args.push_back(d);
  const CliResult r = run_cli(args, tmp.path);
  check_clean_exit(r);
  REQUIRE(r.code == 0);
  CHECK(r.out.find("gla layer: batch 1, tokens 5") != std::string::npos);
  const SafetensorsFile got(out), want(base + ".safetensors");
  test::check_close(got.at("output").to_f32(), want.at("output").to_f64(), 1e-9);
  test::check_close(got.at("final_state").to_f32(), want.at("final_state").to_f64(), 1e-9);
}

TEST_CASE("cli gla: a generated layer (elu + 1, convex, clamp_min, GQA, attn_norm) in fp32 and fp16 against the reference") {
  std::mt19937 rng(std::random_device{}());
  for (const auto& [precision, dtype, bound] : {std::tuple{"fp32", DType::F32, 1e-9}, std::tuple{"fp16", DType::F16, 1e-5}}) {
    CAPTURE(precision);
    GlaFiles g;
    g.write(rng, dtype);
    const CliResult r = run_cli(g.args(precision), g.dir.path);
    check_clean_exit(r);
    REQUIRE(r.code == 0);
    const GlaConfig c = load_gla_config(g.cfg);
    const auto want = reference::gla_forward(c, g.map, {g.values.at("hidden_states"), 2, 7, g.values.at("initial_state")});
    const SafetensorsFile got(g.out);
    test::check_close(got.at("output").to_f32(), want.output, bound);
    test::check_close(got.at("final_state").to_f32(), want.final_state, bound);
    CHECK(got.at("final_state").shape == std::vector<int64_t>{2, 4, 8, 16});
  }
}

TEST_CASE("cli gla: malformed configs, weights and states exit 1 naming the key or tensor, writing nothing") {
  std::mt19937 rng(std::random_device{}());
  struct Bad {
    const char* what;
    std::function<void(GlaFiles&)> setup;
    std::vector<std::string> says;
  };
  const Bad cases[] = {
      {"d_k not divisible", [&](GlaFiles& g) { g.write(rng, DType::F32); g.patch({{"expand_k", 0.3}}); }, {"config.json", "expand_k"}},
      {"an unknown feature map", [&](GlaFiles& g) { g.write(rng, DType::F32); g.patch({{"feature_map", "tanh"}}); }, {"config.json", "feature_map"}},
      {"the forget gate missing", [&](GlaFiles& g) { g.write(rng, DType::F32, "gk_proj.1.weight"); }, {"layer.safetensors", "gk_proj.1.weight"}},
      {"a state of the wrong shape", [&](GlaFiles& g) { g.write(rng, DType::F32, "", {2, 4, 16, 8}); }, {"layer.safetensors", "initial_state"}},
  };
  for (const Bad& b : cases) {
    CAPTURE(b.what);
    GlaFiles g;
    b.setup(g);
    g.check_refused(b.says);
  }
}

}  // namespace test_cli_gla
#endif
