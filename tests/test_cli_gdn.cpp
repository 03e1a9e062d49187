// `vkgate run` on a Gated DeltaNet layer file, as a child process: the golden
// case in each forced form, a generated layer with both states (fp32 and
// fp16) against the reference, and malformed configs, weights and states,
// each exiting 1 with a message naming the key or tensor and leaving no output
// file.
#ifdef VKGATE_CLI

#include "doctest.hpp"

#include <nlohmann/json.hpp>
#include <random>

#include "cli_harness.hpp"
#include "layer_files.hpp"
#include "golden.hpp"
#include "harness.hpp"
#include "vkgate/gdn_config.hpp"
#include "vkgate/reference.hpp"
#include "vkgate/reference_gdn.hpp"

namespace test_cli_gdn {

namespace {

using nlohmann::json;
using namespace vkgate;
using namespace vkgate::cli_test;

// A Gated DeltaNet layer file (weights and inputs in one safetensors) and its
// config: hidden 40, nk 2, nv 4 (r = 2), dk 8, dv 6, K 3, so C = 56.
struct GdnFiles : LayerFiles {
  GdnFiles() : LayerFiles("gdn", json({{"mixer", "gated_deltanet"}, {"hidden_size", 40},
                                              {"linear_num_key_heads", 2}, {"linear_num_value_heads", 4},
                                              {"linear_key_head_dim", 8}, {"linear_value_head_dim", 6},
                                              {"linear_conv_kernel_dim", 3}, {"rms_norm_eps", 1e-6},
                                              {"hidden_act", "silu"}})) {}

  // Writes every file; `skip` leaves one weight out; `reshape` gives one
  // tensor (weight or state) another shape.
  void write(std::mt19937& rng, DType dtype, const std::string& skip = "",
             const std::pair<std::string, std::vector<int64_t>>& reshape = {}) {
    write_text(cfg, config.dump());
    const GdnConfig c = parse_gdn_config_json(config.dump(), cfg);
    FileBuilder f;
    std::normal_distribution<float> unit(0.0f, 1.0f);
    std::uniform_real_distribution<float> uni(0.0f, 1.0f);
    auto shape_of = [&](const std::string& name, std::vector<int64_t> shape) {
      return reshape.first == name ? reshape.second : shape;
    };
    for (const TensorSpec& spec : gdn_expected_weights(c)) {
      if (spec.name == skip) continue;
      const std::vector<int64_t> shape = shape_of(spec.name, spec.shape);
      int64_t n = 1;
      for (int64_t d : shape) n *= d;
      std::vector<float> v(static_cast<size_t>(n));
      for (float& x : v)
        x = spec.name == "norm.weight" ? 1 + 0.2f * unit(rng)
            : spec.name == "A_log"     ? std::log(0.05f + 3 * uni(rng))
            : spec.name == "dt_bias"   ? -3 + 4 * uni(rng)
                                       : unit(rng) / std::sqrt(float(shape.back()));
      values[spec.name] = f.add(spec.name, shape, v, dtype);
    }
    for (auto& [name, v] : values) map[name] = v;
    auto input = [&](const std::string& name, std::vector<int64_t> shape, float scale) {
      shape = shape_of(name, shape);
      int64_t n = 1;
      for (int64_t d : shape) n *= d;
      std::vector<float> v(static_cast<size_t>(n));
      for (float& x : v) x = scale * unit(rng);
      values[name] = f.add(name, shape, v, DType::F32);
    };
    input("hidden_states", {2, 7, 40}, 1.0f);
    input("conv_state", {2, 56, 2}, 1.0f);
    input("initial_state", {2, 4, 8, 6}, 0.3f);
    f.write(layer);
  }
};

}  // namespace

TEST_CASE("cli gdn: the golden layer (conv and initial states given) in each forced form writes its output and both "
          "final states") {
  const std::string base = test::golden_dir() + "/wave3/gdn_T80_r2_states";
  for (const char* mode : {"recurrent", "chunk"}) {
    CAPTURE(mode);
    TempDir tmp("gdn_golden");
    const std::string out = tmp / "out.safetensors";
    std::vector<std::string> args{"run", "--weights", base + ".safetensors", "--config", base + ".json",
                                  "--input", base + ".safetensors", "--output", out};
    for (const auto& d : device_args()) args.push_back(d);
    const CliResult r = run_cli(args, tmp.path, {std::string("VKGATE_GDN_MODE=") + mode});
    check_clean_exit(r);
    REQUIRE(r.code == 0);
    CHECK(r.out.find("gated deltanet layer: batch 1, tokens 80") != std::string::npos);
    CHECK(r.out.find(std::string(mode) == "chunk" ? "(chunked)" : "(recurrent)") != std::string::npos);
    const SafetensorsFile got(out), want(base + ".safetensors");
    for (const char* name : {"output", "final_state", "final_conv_state"}) {
      CAPTURE(name);
      CHECK(got.at(name).shape == want.at(name).shape);
      test::check_close(got.at(name).to_f32(), want.at(name).to_f64(), 1e-9);
    }
  }
}

TEST_CASE("cli gdn: a generated layer (r = 2, K = 3, batch 2, both states) in fp32 and fp16 against the reference") {
  std::mt19937 rng(std::random_device{}());
  for (const auto& [precision, dtype, bound] : {std::tuple{"fp32", DType::F32, 1e-9}, std::tuple{"fp16", DType::F16, 1e-5}}) {
    CAPTURE(precision);
    GdnFiles g;
    g.write(rng, dtype);
    const CliResult r = run_cli(g.args(precision), g.dir.path);
    check_clean_exit(r);
    REQUIRE(r.code == 0);
    const GdnConfig c = load_gdn_config(g.cfg);
    const auto want = reference::gdn_forward(
        c, g.map, {g.values.at("hidden_states"), 2, 7, g.values.at("conv_state"), g.values.at("initial_state")});
    const SafetensorsFile got(g.out);
    test::check_close(got.at("output").to_f32(), want.output, bound);
    test::check_close(got.at("final_state").to_f32(), want.final_state, bound);
    test::check_close(got.at("final_conv_state").to_f32(), want.final_conv_state, bound);
    CHECK(got.at("final_conv_state").shape == std::vector<int64_t>{2, 56, 2});
  }
}

TEST_CASE("cli gdn: malformed configs, weights and states exit 1 naming the key or tensor, writing nothing") {
  std::mt19937 rng(std::random_device{}());
  struct Bad {
    const char* what;
    std::function<void(GdnFiles&)> setup;
    std::vector<std::string> says;
  };
  const Bad cases[] = {
      {"nv not a multiple of nk", [&](GdnFiles& g) { g.write(rng, DType::F32); g.patch({{"linear_num_value_heads", 3}}); },
       {"config.json", "linear_num_value_heads"}},
      {"another activation", [&](GdnFiles& g) { g.write(rng, DType::F32); g.patch({{"hidden_act", "gelu"}}); },
       {"config.json", "hidden_act"}},
      {"A_log missing", [&](GdnFiles& g) { g.write(rng, DType::F32, "A_log"); }, {"layer.safetensors", "A_log"}},
      {"a conv weight of the wrong shape", [&](GdnFiles& g) { g.write(rng, DType::F32, "", {"conv1d.weight", {56, 1, 4}}); },
       {"layer.safetensors", "conv1d.weight", "[56, 1, 4]"}},
      {"an initial state of the wrong shape",
       [&](GdnFiles& g) { g.write(rng, DType::F32, "", {"initial_state", {2, 4, 6, 8}}); }, {"layer.safetensors", "initial_state"}},
      {"a conv state of the wrong shape", [&](GdnFiles& g) { g.write(rng, DType::F32, "", {"conv_state", {2, 56, 3}}); },
       {"layer.safetensors", "conv_state"}},
  };
  for (const Bad& b : cases) {
    CAPTURE(b.what);
    GdnFiles g;
    b.setup(g);
    g.check_refused(b.says);
  }
}

}  // namespace test_cli_gdn
#endif
