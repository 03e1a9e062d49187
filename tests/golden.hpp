// The golden cases of tests/golden (README there): config, weights and
// expected tensors from an independent float64 implementation.
#pragma once

#include <cstdlib>
#include <fstream>
#include <iterator>
#include <map>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

#include "vkgate/config.hpp"
#include "vkgate/safetensors.hpp"
#include "vkgate/weights.hpp"

#ifndef VKGATE_GOLDEN_DIR
#error "VKGATE_GOLDEN_DIR must name the directory of the golden cases"
#endif

namespace vkgate::test {

using nlohmann::json;

// The checkout's tests/golden, unless VKGATE_GOLDEN_DIR in the environment
// points elsewhere (a copy carried to another machine).
inline std::string golden_dir() {
  const char* env = std::getenv("VKGATE_GOLDEN_DIR");
  return env && *env ? env : VKGATE_GOLDEN_DIR;
}

// The golden qwen3 model most model tests run (gate elementwise, GQA): a
// checkpoint directory with config.json and model.safetensors.
inline std::string w1_dir() { return golden_dir() + "/wave2/w1_qwen3_elementwise_gqa_model"; }

// The whole text of a file (the golden cases are small).
inline std::string read_file_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot open " + path);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

struct Golden {
  json meta;
  BlockConfig cfg;
  SafetensorsFile file;
  std::map<std::string, std::vector<float>> floats;  // owns what `weights` points to
  WeightMap weights;

  explicit Golden(const std::string& name)
      : meta(json::parse(read_file_text(golden_dir() + "/" + name + ".json"))),
        cfg(load_config(golden_dir() + "/" + name + ".json")),
        file(golden_dir() + "/" + name + ".safetensors") {
    for (const TensorSpec& spec : expected_weights(cfg)) weights[spec.name] = f32(spec.name);
  }

  const std::vector<float>& f32(const std::string& name) {
    auto it = floats.find(name);
    if (it == floats.end()) it = floats.emplace(name, file.at(name).to_f32()).first;
    return it->second;
  }
  int64_t dim(const std::string& tensor, size_t axis) const {
    return file.at(tensor).shape.at(axis);
  }
};

}  // namespace vkgate::test
