// `vkgate run` on input_ids and `vkgate generate` on GLA model directories
// (model_type "gla", fla's config keys and tensor names), as child processes:
// logits against the double reference in fp32 and bf16, --stats, greedy ids,
// and malformed directories exiting 1 with a message naming the key or tensor.
#ifdef VKGATE_CLI

#include "doctest.hpp"

#include <nlohmann/json.hpp>

#include "cli_harness.hpp"
#include "model_dir.hpp"
#include "model_weights.hpp"
#include "vkgate/reference.hpp"
#include "vkgate/reference_model.hpp"

namespace test_cli_gla_model {

namespace {

using nlohmann::json;
using namespace vkgate;
using namespace vkgate::cli_test;

void check_logits(const std::string& out, const std::vector<double>& want, double bound) {
  const std::vector<float> got = SafetensorsFile(out).at("logits").to_f32();
  REQUIRE(got.size() == want.size());
  const reference::Diff d = reference::compare(got, want);
  INFO("nmse " << d.nmse << ", max abs " << d.max_abs);
  CHECK(d.first_bad == -1);
  CHECK(d.nmse <= bound);
}

}  // namespace

TEST_CASE("cli gla model: run writes the reference's logits (fp32, bf16) and max_activation, generate prints its greedy ids") {
  std::mt19937 rng(std::random_device{}());
  test::TinyGla shape;
  shape.feature_map = FeatureMap::relu;
  shape.norm_eps = test::TinyGla::kRoundingSafeEps;  // the bf16 run below
  ModelDir m(shape.config(), rng, DType::F32, true);
  const std::vector<int64_t> ids = test::random_ids(rng, 8, shape.vocab);
  const std::string input = m.ids_file("ids.safetensors", ids, 2, 4);
  const auto want = reference::model_forward(m.model.cfg, m.map, {ids, 2, 4});

  const std::string out = m.dir / "out.safetensors";
  const CliResult r = run_cli(with_device({"run", "--weights", m.path(), "--input", input, "--output", out, "--stats"}), m.dir.path);
  check_clean_exit(r);
  REQUIRE(r.code == 0);
  CHECK(r.out.find("model: 2 layers, batch 2, tokens 4, fp32") != std::string::npos);
  CHECK(r.out.find("stats: max_activation") != std::string::npos);
  check_logits(out, want.logits, 1e-8);
  const SafetensorsFile written(out);
  CHECK(!written.contains("stats.first_token_attn"));  // no attention probabilities in a GLA layer
  CHECK(!written.contains("stats.gate_mean"));
  const std::vector<double> max_act = written.at("stats.max_activation").to_f64();
  REQUIRE(max_act.size() == want.max_activation.size());
  for (size_t l = 0; l < max_act.size(); ++l) CHECK(max_act[l] == doctest::Approx(want.max_activation[l]).epsilon(1e-5));

  const std::string bf16 = m.dir / "bf16.safetensors";
  const CliResult b = run_cli(with_device({"run", "--weights", m.path(), "--input", input, "--output", bf16, "--precision", "bf16"}), m.dir.path);
  check_clean_exit(b);
  REQUIRE(b.code == 0);
  check_logits(bf16, want.logits, 1e-3);

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
  CHECK(g.err.find("gla, 2 layers") != std::string::npos);
}

TEST_CASE("cli gla model: malformed GLA model directories exit 1 naming the key or tensor, writing nothing") {
  std::mt19937 rng(23);
  test::TinyGla shape;
  ModelDir m(shape.config(), rng, DType::F32, true);
  const std::string ids = m.ids_file("ids.safetensors", {1, 2, 3}, 1, 3);
  struct Case {
    std::string name;
    std::function<void(const fs::path& dir)> damage;
    std::vector<std::string> mentions;
    bool generate = false;
  };
  const std::vector<Case> cases = {
      {"an attn tensor missing", [](const fs::path& d) { rewrite_tensor(d, "model.layers.1.attn.gk_proj.1.bias", {}); },
       {"model.layers.1.attn.gk_proj.1.bias"}},
      {"an attn tensor missing (generate)", [](const fs::path& d) { rewrite_tensor(d, "model.layers.0.attn.q_proj.weight", {}); },
       {"model.layers.0.attn.q_proj.weight"}, true},
      {"an attn tensor misshapen", [](const fs::path& d) { rewrite_tensor(d, "model.layers.0.attn.k_proj.weight", {8, 31}); },
       {"model.layers.0.attn.k_proj.weight", "[8, 31]", "[8, 32]"}},
      {"mlp_norm missing", [](const fs::path& d) { rewrite_tensor(d, "model.layers.1.mlp_norm.weight", {}); },
       {"model.layers.1.mlp_norm.weight"}},
      {"d_k not a whole number", [](const fs::path& d) { rewrite_config(d, {{"expand_k", 0.3}}); },
       {"config.json", "expand_k"}},
      {"num_kv_heads not dividing num_heads", [](const fs::path& d) { rewrite_config(d, {{"num_kv_heads", 3}}); },
       {"config.json", "num_kv_heads"}},
      {"an unknown feature_map", [](const fs::path& d) { rewrite_config(d, {{"feature_map", "tanh"}}); },
       {"config.json", "feature_map"}},
      {"use_short_conv", [](const fs::path& d) { rewrite_config(d, {{"use_short_conv", true}}); },
       {"config.json", "use_short_conv"}},
      {"a gelu hidden_act", [](const fs::path& d) { rewrite_config(d, {{"hidden_act", "gelu"}}); },
       {"config.json", "hidden_act", "swish"}},
      {"gate_low_rank_dim of the wrong type", [](const fs::path& d) { rewrite_config(d, {{"gate_low_rank_dim", "16"}}); },
       {"config.json", "gate_low_rank_dim"}},
  };
  for (const Case& c : cases) {
    CAPTURE(c.name);
    TempDir work("bad_gla_model");
    const fs::path dir = work.path / "model";
    fs::copy(m.dir.path, dir, fs::copy_options::recursive);
    c.damage(dir);
    const std::string out = work / "out.safetensors";
    const std::vector<std::string> args =
        c.generate ? std::vector<std::string>{"generate", "--weights", dir.string(), "--prompt-ids", "1,2", "--max-new-tokens", "2"}
                   : std::vector<std::string>{"run", "--weights", dir.string(), "--input", ids, "--output", out};
    const CliResult r = run_cli(with_device(args), work.path);
    check_clean_exit(r);
    INFO("stderr: " << r.err);
    CHECK(r.code == 1);
    for (const std::string& what : c.mentions) {
      CAPTURE(what);
      CHECK(r.err.find(what) != std::string::npos);
    }
    CHECK(!fs::exists(out));
    CHECK(r.out.empty());
  }
}

}  // namespace test_cli_gla_model
#endif  // VKGATE_CLI
