// The tests' stand-in for llama.cpp's convert_hf_to_gguf.py: a model's
// tensors (Hugging Face names, fp32 values) and a tokenizer.json written as a
// GGUF file the way the converter lays them out, through the library's own
// writer (gguf_export_model, gguf_export_tokenizer: its names, its metadata
// keys, llama's permuted q/k rows, stacked experts, [PADn] vocabulary padding,
// token types), so that vkgate's GGUF reader can be checked against the model
// or tokenizer it came from. GgufDraft (vkgate/gguf_model.hpp) lets a test
// change or drop keys and tensors before writing.
#pragma once

#include <cstddef>
#include <cstring>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "vkgate/dtype.hpp"
#include "vkgate/gguf.hpp"
#include "vkgate/gguf_model.hpp"
#include "vkgate/model_config.hpp"
#include "vkgate/weights.hpp"
#include "test_util.hpp"

namespace vkgate::test {

using vkgate::GgufDraft;

// fp32 values stored as F32 or F16 under `name` (replacing one of that name).
inline void add_floats(GgufDraft& g, const std::string& name, std::vector<int64_t> shape, const std::vector<float>& v,
                       DType dtype) {
  std::vector<std::byte> bytes(v.size() * (dtype == DType::F16 ? 2 : 4));
  if (dtype == DType::F16) {
    for (size_t i = 0; i < v.size(); ++i) {
      const uint16_t h = float_to_half(v[i]);
      std::memcpy(bytes.data() + 2 * i, &h, 2);
    }
  } else {
    std::memcpy(bytes.data(), v.data(), bytes.size());
  }
  g.add_tensor(name, dtype, std::move(shape), std::move(bytes));
}

// How the converter was run: --outtype f16 (matrices F16, 1-D tensors F32)
// or f32; --fuse-qkv; --fuse-gate-up-exps.
struct ConvertOptions {
  bool f16 = false;
  bool fuse_qkv = false;
  bool fuse_gate_up = false;
};

// Values as fp16 would store them (F16 conversion tests compare against these).
inline void round_to_half(std::vector<float>& v) {
  for (float& x : v) x = half_to_float(float_to_half(x));
}

// The model `cfg` with weights `data` (every tensor of expected_model_weights)
// as the converter writes it.
inline GgufDraft convert_model(const ModelConfig& cfg, const std::map<std::string, std::vector<float>>& data,
                               const ConvertOptions& o = {}) {
  TensorMap tensors;
  for (const auto& [name, v] : data)
    tensors[name] = HostTensor{DType::F32, {}, std::as_bytes(std::span<const float>(v))};
  for (const TensorSpec& spec : expected_model_weights(cfg))
    if (auto it = tensors.find(spec.name); it != tensors.end()) it->second.shape = spec.shape;
  return gguf_export_model(cfg, tensors,
                           {.float_type = o.f16 ? DType::F16 : DType::F32, .fuse_qkv = o.fuse_qkv,
                            .fuse_gate_up_exps = o.fuse_gate_up});
}

// A tokenizer.json (and its tokenizer_config.json, may be null) as the
// converter's _set_vocab_gpt2 writes it (gguf_export_tokenizer, which reads
// them as files: written to a scratch directory first).
inline void convert_tokenizer(GgufDraft& g, const nlohmann::json& tok, const nlohmann::json& config, const std::string& pre,
                              int64_t vocab_size) {
  const TempDir dir("convert_tokenizer");
  write_text(dir / "tokenizer.json", tok.dump());
  if (config.is_object()) write_text(dir / "tokenizer_config.json", config.dump());
  gguf_export_tokenizer(g, dir / "tokenizer.json", vocab_size, pre);
}

}  // namespace vkgate::test
