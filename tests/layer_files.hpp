// A one-layer file for `vkgate run` (weights and inputs in one safetensors)
// and its config.json, shared by the GLA and Gated DeltaNet CLI tests; each
// kind's test fills the file (its write()).
#pragma once

#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli_harness.hpp"
#include "vkgate/weights.hpp"

namespace vkgate::cli_test {

struct LayerFiles {
  TempDir dir;
  nlohmann::json config;
  std::map<std::string, std::vector<float>> values;  // as the file holds them
  WeightMap map;
  std::string layer = dir / "layer.safetensors", cfg = dir / "config.json", out = dir / "out.safetensors";

  LayerFiles(const char* name, nlohmann::json c) : dir(name), config(std::move(c)) {}
  // Rewrites the config with `patch` applied (after write: the weights stay those of the good one).
  void patch(const nlohmann::json& patch) {
    nlohmann::json j = config;
    j.merge_patch(patch);
    write_text(cfg, j.dump());
  }
  std::vector<std::string> args(const char* precision = "fp32") const {
    std::vector<std::string> a{"run", "--weights", layer, "--config", cfg, "--input", layer, "--output", out,
                               "--precision", precision};
    for (const auto& d : device_args()) a.push_back(d);
    return a;
  }
  // The run exits 1 with a message holding each of `says`, and writes no output.
  void check_refused(const std::vector<std::string>& says) const {
    const CliResult r = run_cli(args(), dir.path);
    check_clean_exit(r);
    INFO("stderr: " << r.err);
    CHECK(r.code == 1);
    for (const std::string& s : says) CHECK(r.err.find(s) != std::string::npos);
    CHECK(!fs::exists(out));
  }
};

}  // namespace vkgate::cli_test
