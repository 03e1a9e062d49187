// Hugging Face checkpoints: one .safetensors file, or a model directory with
// model.safetensors or model.safetensors.index.json and its shards.
//
// Thread safety: a Checkpoint is immutable after construction — const members
// and block_tensors may run on several threads at once. A malformed index is
// rejected with an Error, never a crash (fuzzed: fuzz/fuzz_checkpoint_index.cpp).
#pragma once

#include <map>
#include <string>
#include <vector>

#include "vkgate/config.hpp"
#include "vkgate/gdn_config.hpp"
#include "vkgate/gla_config.hpp"
#include "vkgate/model_config.hpp"
#include "vkgate/safetensors.hpp"
#include "vkgate/weights.hpp"

namespace vkgate {

// A checkpoint's tensors, memory-mapped (each shard opened once) and looked up
// by full name. The views live as long as the Checkpoint. Move-only.
class Checkpoint {
 public:
  // `path`: a .safetensors file, or a directory holding model.safetensors (used
  // when present, as transformers does) or model.safetensors.index.json. The
  // index is validated: well-formed JSON, `weight_map` an object of plain shard
  // file names (no '/', not "." or ".."), every shard opens and holds the
  // tensors listed for it. Errors (io; missing_tensor for a tensor absent from
  // its shard) name the path, and the index and shard where they are involved.
  explicit Checkpoint(const std::string& path);
  Checkpoint(Checkpoint&&) noexcept = default;
  Checkpoint& operator=(Checkpoint&&) noexcept = default;
  Checkpoint(const Checkpoint&) = delete;
  Checkpoint& operator=(const Checkpoint&) = delete;

  const std::string& path() const { return path_; }
  bool is_directory() const { return is_directory_; }
  std::string config_path() const;  // <dir>/config.json for a directory, "" for a file
  bool contains(const std::string& name) const { return tensors_.count(name) != 0; }
  // Throws Error(missing_tensor) "PATH: tensor 'NAME' not found".
  const TensorView& at(const std::string& name) const;
  std::vector<std::string> names() const;  // sorted

 private:
  std::string path_;
  bool is_directory_ = false;
  std::vector<SafetensorsFile> shards_;
  // Points into shards_' tensor maps, whose nodes stay put when the vector or a file moves.
  std::map<std::string, const TensorView*> tensors_;
};

// The block's tensors, checked against expected_weights(cfg). With layer >= 0
// (checked by cfg.check_layer) they are read under "model.layers.{layer}.self_attn."
// and the norm as "model.layers.{layer}.input_layernorm.weight"; with layer < 0
// under their bare names ("q_proj.weight", ..., "input_layernorm.weight").
// The result is keyed by bare name and views the mapped data (no copy).
// Throws Error(missing_tensor) naming the full tensor name and the checkpoint,
// Error(shape_mismatch) with the expected and found shapes, or for a dtype
// other than F32/F16/BF16.
TensorMap block_tensors(const Checkpoint& ckpt, const BlockConfig& cfg, int layer);

// Every tensor of the model (expected_model_weights(cfg)) keyed by its full
// name, viewing the mapped data. Error(missing_tensor) names the checkpoint
// and the tensor (and the layer count, for a layer's tensor: a config whose
// num_hidden_layers goes beyond the tensors); Error(shape_mismatch) names
// the file holding the tensor and both shapes (e.g. an lm_head whose vocab
// disagrees with the embedding's) or its dtype. A gla model's embedding is
// read from model.embed_tokens.weight (older fla files) when the file has no
// model.embeddings.weight, and keyed model.embeddings.weight either way.
TensorMap model_tensors(const Checkpoint& ckpt, const ModelConfig& cfg);
// A GLA layer's tensors under their bare names (q_proj.weight, ...): the forms
// the checkpoint holds (gla_forms: low-rank or single forget gate, output
// norm, attn_norm), each tensor checked as block_tensors does.
TensorMap gla_layer_tensors(const Checkpoint& ckpt, const GlaConfig& cfg);
// A Gated DeltaNet layer's tensors under their bare names (in_proj_qkvz.weight,
// ..., gdn_expected_weights), each checked as block_tensors does.
TensorMap gdn_layer_tensors(const Checkpoint& ckpt, const GdnConfig& cfg);

}  // namespace vkgate
