// tests/data/gguf/llama_cpp: the files llama.cpp's tools wrote, read as a
// test needs them (FileWeights), and the random checkpoints of
// make_qwen3next.py and make_qwen35.py rebuilt without reading them: every
// value a function of the tensor's name and the element's index (their
// value()), so a test compares what llama.cpp's converter wrote with the
// checkpoint it read.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "harness.hpp"
#include "model_check.hpp"
#include "vkgate/gguf.hpp"
#include "vkgate/gguf_model.hpp"
#include "vkgate/model.hpp"
#include "vkgate/model_config.hpp"
#include "vkgate/reference_model.hpp"
#include "vkgate/weights.hpp"

namespace vkgate::test {

inline std::string llama_cpp_file(const std::string& name) {
  return std::string(VKGATE_TEST_DATA_DIR) + "/gguf/llama_cpp/" + name;
}

// The file's tensors under their Hugging Face names (as gguf_model_tensors
// gives them), every one as fp32 for the reference.
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
    const Dequantized d(tensors);
    data = d.data;
    for (const auto& [name, v] : data) map[name] = v;
  }
};

// make_qwen3next.py's CONFIG, the checkpoint's config.json.
inline ModelConfig qwen3next_checkpoint_config() {
  const nlohmann::json j = {
      {"architectures", {"Qwen3NextForCausalLM"}}, {"model_type", "qwen3_next"}, {"hidden_size", 256},
      {"num_hidden_layers", 2}, {"vocab_size", 272}, {"num_attention_heads", 2}, {"num_key_value_heads", 1},
      {"head_dim", 16}, {"partial_rotary_factor", 0.25}, {"rope_theta", 10000000.0},
      {"max_position_embeddings", 512}, {"rms_norm_eps", 1e-6}, {"hidden_act", "silu"}, {"attention_bias", false},
      {"intermediate_size", 64}, {"full_attention_interval", 2}, {"layer_types", {"linear_attention", "full_attention"}},
      {"linear_num_key_heads", 2}, {"linear_num_value_heads", 4}, {"linear_key_head_dim", 16},
      {"linear_value_head_dim", 16}, {"linear_conv_kernel_dim", 4}, {"num_experts", 4}, {"num_experts_per_tok", 2},
      {"moe_intermediate_size", 16}, {"shared_expert_intermediate_size", 16}, {"norm_topk_prob", true},
      {"decoder_sparse_step", 1}, {"mlp_only_layers", nlohmann::json::array()}, {"tie_word_embeddings", true},
      {"bos_token_id", 268}, {"eos_token_id", 268}, {"torch_dtype", "float16"}};
  return parse_model_config_json(j.dump(), "make_qwen3next.py config.json");
}

// make_qwen35.py's CONFIGS: the checkpoint's config.json.
inline ModelConfig qwen35_checkpoint_config(bool moe) {
  nlohmann::json j = {
      {"vocab_size", 272}, {"num_hidden_layers", 2}, {"num_attention_heads", 2}, {"num_key_value_heads", 1},
      {"head_dim", 32}, {"max_position_embeddings", 512}, {"rms_norm_eps", 1e-6}, {"hidden_act", "silu"},
      {"attention_bias", false}, {"full_attention_interval", 2}, {"layer_types", {"linear_attention", "full_attention"}},
      {"linear_num_key_heads", 2}, {"linear_conv_kernel_dim", 4},
      {"rope_parameters", {{"rope_type", "default"}, {"rope_theta", 10000000.0}, {"partial_rotary_factor", 0.25},
                           {"mrope_section", {2, 1, 1}}, {"mrope_interleaved", true}}},
      {"tie_word_embeddings", true}, {"bos_token_id", 268}, {"eos_token_id", 268}, {"torch_dtype", "float16"},
      {"linear_key_head_dim", 32}, {"linear_value_head_dim", 32}, {"intermediate_size", 64}};
  if (moe) {
    j.update({{"architectures", {"Qwen3_5MoeForCausalLM"}}, {"model_type", "qwen3_5_moe_text"}, {"hidden_size", 128},
              {"linear_num_value_heads", 4}, {"num_experts", 4}, {"num_experts_per_tok", 2},
              {"moe_intermediate_size", 16}, {"shared_expert_intermediate_size", 16}, {"norm_topk_prob", true},
              {"mtp_num_hidden_layers", 1}});
  } else {
    j.update({{"architectures", {"Qwen3_5ForCausalLM"}}, {"model_type", "qwen3_5_text"}, {"hidden_size", 256},
              {"linear_num_value_heads", 8}});
  }
  return parse_model_config_json(j.dump(), "make_qwen35.py config.json");
}

// value(): element i of tensor `name` from splitmix64(fnv1a64(name) + i), the
// same double operations in the same order.
inline double converter_value(const std::string& name, const std::vector<int64_t>& shape, uint64_t i) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : name) h = (h ^ c) * 0x100000001b3ull;
  uint64_t x = h + i + 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  x = x ^ (x >> 31);
  const double r = double(x >> 11) * 0x1p-52 - 1.0;
  if (name.ends_with("linear_attn.norm.weight")) return 1.0 + 0.2 * r;
  if (name.ends_with("norm.weight")) return 0.2 * r;
  if (name.ends_with("A_log")) return r;
  if (name.ends_with("dt_bias")) return 0.5 + 0.5 * r;
  if (name.ends_with("embed_tokens.weight")) return r;
  return r / std::sqrt(double(shape.back()));
}

// The checkpoint of `cfg` as the scripts write it (model.safetensors):
// matrices F16, vectors F32.
struct ConverterCheckpoint {
  ModelConfig cfg;
  std::map<std::string, std::vector<std::byte>> bytes;
  TensorMap tensors;
  explicit ConverterCheckpoint(ModelConfig config) : cfg(std::move(config)) {
    for (const TensorSpec& spec : expected_model_weights(cfg)) {
      const bool matrix = spec.shape.size() > 1;
      std::vector<std::byte>& b = bytes[spec.name];
      b.resize(size_t(spec.numel()) * (matrix ? 2 : 4));
      for (int64_t i = 0; i < spec.numel(); ++i) {
        const float v = float(converter_value(spec.name, spec.shape, uint64_t(i)));
        if (matrix) {
          const uint16_t h = float_to_half(v);
          std::memcpy(b.data() + 2 * i, &h, 2);
        } else {
          std::memcpy(b.data() + 4 * i, &v, 4);
        }
      }
      tensors[spec.name] = HostTensor{matrix ? DType::F16 : DType::F32, spec.shape, b};
    }
  }
};

// Model::load(path), outputs poisoned, against the reference run on the
// file's own tensors dequantized (w): logits of fresh ids [2, 6] within 1e-7,
// a second forward the same, greedy ids from their first 4 equal.
struct FileRun {
  static constexpr int B = 2, T = 6;
  std::vector<int64_t> ids;
  std::vector<float> logits;
  std::vector<double> want;
};
inline FileRun check_file_model(GpuTest& t, const std::string& path, const FileWeights& w) {
  FileRun r;
  r.ids = random_ids(t.rng, size_t(FileRun::B) * FileRun::T, w.cfg.vocab_size);
  r.want = reference::model_forward(w.cfg, w.map, {r.ids, FileRun::B, FileRun::T}).logits;
  Model model = Model::load(t.ctx, path);
  model.set_poison(true);
  r.logits = model.logits(r.ids, FileRun::B, FileRun::T);
  check_close(r.logits, r.want, 1e-7);
  CHECK(model.logits(r.ids, FileRun::B, FileRun::T) == r.logits);
  const std::vector<int64_t> prompt(r.ids.begin(), r.ids.begin() + 4);
  CHECK(model.generate(prompt, {.max_new_tokens = 6, .stop_at_eos = false}).ids ==
        reference::greedy_generate(w.cfg, w.map, prompt, 6, false));
  return r;
}

// `path`, the converter's F16 file of `ckpt` (272 ids, tied, eos 268, as
// the scripts' checkpoints): the checkpoint's config (its eps as the f32 key
// holds it); every tensor the checkpoint's, matrices bit for bit, the 1 + w
// norms and −exp(A_log) undone to fp32 rounding; the checkpoint's logits.
// Returns the file's config.
inline ModelConfig check_converted(GpuTest& t, const std::string& path, const ConverterCheckpoint& ckpt) {
  const GgufFile file = GgufFile::open(path);
  const ModelConfig cfg = gguf_model_config(file);
  ModelConfig want = ckpt.cfg;
  want.attention.rms_norm_eps = want.linear_attention->rms_norm_eps = double(float(1e-6));
  CHECK(cfg.model_type == want.model_type);
  CHECK(cfg.attention == want.attention);
  REQUIRE(cfg.linear_attention);
  CHECK(*cfg.linear_attention == *want.linear_attention);
  CHECK(cfg.moe == want.moe);
  CHECK(cfg.num_hidden_layers == want.num_hidden_layers);
  CHECK(cfg.intermediate_size == want.intermediate_size);
  CHECK(cfg.vocab_size == 272);
  CHECK(cfg.tie_word_embeddings);
  CHECK(cfg.eos_token_ids == std::vector<int64_t>{268});

  TensorBuffers copies;
  const Dequantized got(gguf_model_tensors(file, cfg, copies));
  const Dequantized expected(ckpt.tensors);
  for (const TensorSpec& spec : expected_model_weights(cfg)) {
    CAPTURE(spec.name);
    const std::vector<float>& a = got.data.at(spec.name);
    const std::vector<float>& b = expected.data.at(spec.name);
    REQUIRE(a.size() == b.size());
    double worst = 0;
    for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::abs(double(a[i]) - double(b[i])));
    CHECK(worst <= (spec.shape.size() > 1 ? 0.0 : 1e-6));
  }

  const int B = 2, T = 6;
  const auto ids = random_ids(t.rng, size_t(B) * T, cfg.vocab_size);
  Model from_file = Model::load(t.ctx, path);
  from_file.set_poison(true);
  Model from_checkpoint(t.ctx, ckpt.cfg, ckpt.tensors);
  const std::vector<float> logits = from_file.logits(ids, B, T);
  const std::vector<float> want_logits = from_checkpoint.logits(ids, B, T);
  check_close(logits, std::vector<double>(want_logits.begin(), want_logits.end()), 1e-10);
  check_close(logits, reference::model_forward(ckpt.cfg, expected.map, {ids, B, T}).logits, 1e-7);
  return cfg;
}

// A file's keys and tensors as a draft to change and write again.
inline GgufDraft draft_of(const GgufFile& f) {
  GgufDraft d;
  for (const auto& [key, value] : f.metadata())
    if (key != "general.alignment") d.set(key, value);
  for (const GgufTensor& t : f.tensors())
    d.add_tensor(t.name, t.dtype, t.shape, std::vector<std::byte>(t.bytes.begin(), t.bytes.end()));
  return d;
}

}  // namespace vkgate::test
