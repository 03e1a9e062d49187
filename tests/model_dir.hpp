// A model checkpoint directory written by a CLI test: config.json under the
// keys Hugging Face (qwen3, llama) or fla (gla) write, random weights in one or
// two shards, and input files of token ids.
#pragma once

#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli_harness.hpp"
#include "golden.hpp"
#include "model_weights.hpp"
#include "vkgate/model_config.hpp"
#include "vkgate/tokenizer.hpp"

namespace vkgate::cli_test {

// The config.json that parse_model_config_json reads back as `c`. A GLA
// model's forms must be ones fla's keys describe (low-rank gate, an output norm).
inline nlohmann::json model_config_json(const ModelConfig& c) {
  using nlohmann::json;
  const json eos = c.eos_token_ids.empty() ? json(nullptr) : json(c.eos_token_ids[0]);
  if (c.gla) {
    const GlaConfig& g = *c.gla;
    REQUIRE(c.gla_forms.low_rank_dim > 0);
    REQUIRE(!c.gla_forms.output_norm.empty());
    return {{"model_type", "gla"},
            {"hidden_size", g.hidden_size},
            {"num_heads", g.num_heads},
            {"num_kv_heads", g.num_kv_heads},
            {"expand_k", g.expand_k},
            {"expand_v", g.expand_v},
            {"feature_map", g.feature_map == FeatureMap::none ? json(nullptr) : json(to_string(g.feature_map))},
            {"use_output_gate", g.use_output_gate},
            {"gla_key_coupling", to_string(g.key_coupling)},
            {"norm_eps", g.norm_eps},
            {"hidden_act", "swish"},
            {"gate_low_rank_dim", c.gla_forms.low_rank_dim},
            {"fuse_norm", c.gla_forms.output_norm == "g_norm_swish_gate.weight"},
            {"num_hidden_layers", c.num_hidden_layers},
            {"intermediate_size", c.intermediate_size},
            {"vocab_size", c.vocab_size},
            {"tie_word_embeddings", c.tie_word_embeddings},
            {"eos_token_id", eos}};
  }
  json cfg = {{"model_type", c.model_type},
              {"hidden_size", c.hidden_size()},
              {"num_attention_heads", c.attention.num_heads},
              {"num_key_value_heads", c.attention.num_kv_heads},
              {"head_dim", c.attention.head_dim},
              {"num_hidden_layers", c.num_hidden_layers},
              {"intermediate_size", c.intermediate_size},
              {"vocab_size", c.vocab_size},
              {"rope_theta", c.attention.rope_theta},
              {"rms_norm_eps", c.attention.rms_norm_eps},
              {"attention_bias", c.attention.qkv_bias},
              {"mlp_bias", c.mlp_bias},
              {"tie_word_embeddings", c.tie_word_embeddings},
              {"hidden_act", to_string(c.hidden_act)},
              {"eos_token_id", eos}};
  if (c.attention.gate_kind == GateKind::headwise) cfg["headwise_attn_output_gate"] = true;
  if (c.attention.gate_kind == GateKind::elementwise) cfg["elementwise_attn_output_gate"] = true;
  return cfg;
}

struct ModelDir {
  TempDir dir{"model"};
  test::RandomModel model;
  std::map<std::string, std::vector<float>> stored;  // the values as the file holds them
  WeightMap map;

  ModelDir(const ModelConfig& config, std::mt19937& rng, DType dtype, bool sharded,
           nlohmann::json extra = nlohmann::json::object())
      : model(config, rng) {
    const ModelConfig& c = model.cfg;
    nlohmann::json cfg = model_config_json(c);
    cfg.update(extra);
    write_text(dir / "config.json", cfg.dump(1));
    FileBuilder shards[2];
    nlohmann::json index = {{"metadata", nlohmann::json::object()}, {"weight_map", nlohmann::json::object()}};
    size_t i = 0;
    for (const TensorSpec& spec : expected_model_weights(c)) {
      const int part = sharded ? int(i++ % 2) : 0;
      stored[spec.name] = shards[part].add(spec.name, spec.shape, model.data.at(spec.name), dtype);
      index["weight_map"][spec.name] = "model-0000" + std::to_string(part + 1) + "-of-00002.safetensors";
    }
    for (auto& [name, v] : stored) map[name] = v;
    if (sharded) {
      shards[0].write(dir / "model-00001-of-00002.safetensors");
      shards[1].write(dir / "model-00002-of-00002.safetensors");
      write_text(dir / "model.safetensors.index.json", index.dump(1));
    } else {
      shards[0].write(dir / "model.safetensors");
    }
  }
  ModelDir(const test::TinyModel& shape, std::mt19937& rng, DType dtype, bool sharded,
           nlohmann::json extra = nlohmann::json::object())
      : ModelDir(shape.config(), rng, dtype, sharded, std::move(extra)) {}
  std::string path() const { return dir.path.string(); }
  // An input file of token ids [B, T].
  std::string ids_file(const std::string& name, const std::vector<int64_t>& ids, int64_t B, int64_t T,
                       DType dtype = DType::I64) const {
    FileBuilder f;
    f.add_ids("input_ids", {B, T}, ids, dtype);
    f.write(dir / name);
    return dir / name;
  }
};

// Damage done to a copy of a model directory (ModelDir, sharded): config.json
// with keys changed, or the shard holding `tensor` rewritten without it (shape
// {}) or with it reshaped.
inline void rewrite_config(const fs::path& dir, const nlohmann::json& change) {
  nlohmann::json cfg = nlohmann::json::parse(read_text(dir / "config.json"));
  cfg.update(change);
  write_text(dir / "config.json", cfg.dump());
}
inline void rewrite_tensor(const fs::path& dir, const std::string& tensor, std::vector<int64_t> shape) {
  const nlohmann::json index = nlohmann::json::parse(read_text(dir / "model.safetensors.index.json"));
  const std::string shard = (dir / index.at("weight_map").at(tensor).get<std::string>()).string();
  FileBuilder f;
  {
    const SafetensorsFile in(shard);
    for (const std::string& name : in.names()) {
      if (name == tensor && shape.empty()) continue;
      std::vector<float> v = in.at(name).to_f32();
      std::vector<int64_t> s = in.at(name).shape;
      if (name == tensor) {
        int64_t n = 1;
        for (int64_t d : shape) n *= d;
        v.resize(size_t(n), 0.5f);
        s = shape;
      }
      f.add(name, s, v, DType::F32);
    }
  }
  f.write(shard);
}

// A random model whose vocabulary is the unit tokenizer's, its tokenizer.json
// beside it, and with a chat template its tokenizer_config.json (`config`:
// config.json keys over the shape's).
struct TextModel {
  std::string unit = std::string(VKGATE_TOKENIZER_UNIT_DIR) + "/gpt2_style.json";
  Tokenizer tok = Tokenizer::load(unit);
  test::TinyModel shape = [&] {
    test::TinyModel t;
    t.vocab = tok.vocab_size();
    return t;
  }();
  ModelDir m;
  explicit TextModel(std::mt19937& rng, const std::string& chat_template = "",
                     const nlohmann::json& config = nlohmann::json::object())
      : m(shape, rng, DType::F32, false, config) {
    write_text(m.dir / "tokenizer.json", test::read_file_text(unit));
    if (!chat_template.empty())
      write_text(m.dir / "tokenizer_config.json", nlohmann::json{{"chat_template", chat_template}}.dump());
  }
};

}  // namespace vkgate::cli_test
