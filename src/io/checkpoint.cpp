#include "vkgate/checkpoint.hpp"
#include "vkgate/model_config.hpp"

#include "io/json_error.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string_view>

#include "vkgate/error.hpp"

namespace vkgate {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr const char* kSingleFile = "model.safetensors";
constexpr const char* kIndexFile = "model.safetensors.index.json";

// Parses the index into tensor name -> shard file name; every error names the index.
std::map<std::string, std::string> read_index(const std::string& index_path) {
  auto fail = [&](ErrorCode code, const std::string& message) {
    throw Error(code, index_path + ": " + message);
  };
  std::ifstream in(index_path, std::ios::binary);
  if (!in) fail(ErrorCode::io, std::string("cannot open: ") + std::strerror(errno));
  const std::string text{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  if (in.bad()) fail(ErrorCode::io, std::string("cannot read: ") + std::strerror(errno));

  json index;
  try {
    index = json::parse(text);
  } catch (const json::exception& e) {
    fail(ErrorCode::io, "not valid JSON: " + json_error_text(e));
  }
  if (!index.is_object()) fail(ErrorCode::io, "the top level is not a JSON object");
  const auto map_it = index.find("weight_map");
  if (map_it == index.end() || !map_it->is_object())
    fail(ErrorCode::io, "'weight_map' is missing or not a JSON object");

  std::map<std::string, std::string> out;
  for (const auto& [tensor, shard] : map_it->items()) {
    if (!shard.is_string())
      fail(ErrorCode::io, "weight_map entry '" + tensor + "' is " + shard.dump() +
                              ", not a shard file name");
    const std::string file = shard.get<std::string>();
    // The shards must sit next to the index: a path could reach any file on the system.
    if (file.empty() || file == "." || file == ".." || file.find('/') != std::string::npos ||
        file.find('\0') != std::string::npos)
      fail(ErrorCode::io, "weight_map entry '" + tensor + "' names shard '" + file +
                              "', which is not a plain file name in the directory");
    out.emplace(tensor, file);
  }
  return out;
}

}  // namespace

Checkpoint::Checkpoint(const std::string& path) : path_(path) {
  std::error_code ec;
  const fs::file_status status = fs::status(path, ec);
  if (!fs::exists(status))
    throw Error(ErrorCode::io, path + ": " +
                                   (ec && ec != std::errc::no_such_file_or_directory
                                        ? "cannot access: " + ec.message()
                                        : std::string("no such file or directory")));
  is_directory_ = fs::is_directory(status);

  if (!is_directory_ || fs::exists(fs::path(path) / kSingleFile)) {
    shards_.emplace_back(is_directory_ ? (fs::path(path) / kSingleFile).string() : path);
    for (const std::string& name : shards_.back().names()) tensors_[name] = &shards_.back().at(name);
    return;
  }

  const std::string index_path = (fs::path(path) / kIndexFile).string();
  if (!fs::exists(index_path))
    throw Error(ErrorCode::io, path + ": directory holds neither " + kSingleFile + " nor " +
                                   kIndexFile);
  const std::map<std::string, std::string> weight_map = read_index(index_path);

  std::map<std::string, size_t> shard_of_file;  // opens each shard once
  for (const auto& [tensor, file] : weight_map) {
    auto it = shard_of_file.find(file);
    if (it == shard_of_file.end()) {
      try {
        shards_.emplace_back((fs::path(path) / file).string());
      } catch (const Error& e) {
        throw Error(e.code(), index_path + ": shard '" + file + "' (listed for tensor '" +
                                  tensor + "') cannot be used: " + e.what());
      }
      it = shard_of_file.emplace(file, shards_.size() - 1).first;
    }
    const SafetensorsFile& shard = shards_[it->second];
    if (!shard.contains(tensor))
      throw Error(ErrorCode::missing_tensor, index_path + ": tensor '" + tensor +
                                                 "' is listed in shard '" + file +
                                                 "', which does not hold it");
    tensors_[tensor] = &shard.at(tensor);
  }
}

std::string Checkpoint::config_path() const {
  return is_directory_ ? (fs::path(path_) / "config.json").string() : std::string();
}

const TensorView& Checkpoint::at(const std::string& name) const {
  const auto it = tensors_.find(name);
  if (it == tensors_.end())
    throw Error(ErrorCode::missing_tensor, path_ + ": tensor '" + name + "' not found");
  return *it->second;
}

std::vector<std::string> Checkpoint::names() const {
  std::vector<std::string> out;
  for (const auto& entry : tensors_) out.push_back(entry.first);
  return out;
}

namespace {
// The tensor `full` of the checkpoint with the dtype and shape a model needs;
// errors name the file that holds it (a shard, for an index).
HostTensor checked_tensor(const Checkpoint& ckpt, const std::string& full, const std::vector<int64_t>& shape) {
  const TensorView& t = ckpt.at(full);
  const std::string& file = t.file.empty() ? ckpt.path() : t.file;
  if (t.dtype != DType::F32 && t.dtype != DType::F16 && t.dtype != DType::BF16)
    throw Error(ErrorCode::shape_mismatch, file + ": tensor '" + full + "' has dtype " + to_string(t.dtype) +
                                               ", expected F32, F16 or BF16");
  if (t.shape != shape)
    throw Error(ErrorCode::shape_mismatch, file + ": tensor '" + full + "' has shape " + shape_text(t.shape) +
                                               ", expected " + shape_text(shape));
  return HostTensor{t.dtype, t.shape, t.bytes};
}

// Every tensor of `specs` under its bare name, each present and checked.
TensorMap expected_tensors(const Checkpoint& ckpt, const std::vector<TensorSpec>& specs) {
  TensorMap out;
  for (const TensorSpec& spec : specs) {
    if (!ckpt.contains(spec.name))
      throw Error(ErrorCode::missing_tensor, ckpt.path() + ": tensor '" + spec.name + "' not found");
    out[spec.name] = checked_tensor(ckpt, spec.name, spec.shape);
  }
  return out;
}
}  // namespace

TensorMap block_tensors(const Checkpoint& ckpt, const BlockConfig& cfg, int layer) {
  cfg.validate();
  if (layer >= 0) cfg.check_layer(layer);

  TensorMap out;
  for (const TensorSpec& spec : expected_weights(cfg)) {
    const std::string full = layer < 0 ? spec.name : layer_attention_name(layer, spec.name);
    if (!ckpt.contains(full)) {
      std::string hint;
      if (layer >= 0 && ckpt.contains(spec.name))
        hint = " (the checkpoint has bare names like '" + spec.name + "': use layer -1)";
      else if (layer < 0)
        for (const std::string& name : ckpt.names())
          if (name.ends_with("." + spec.name)) {
            hint = " (the checkpoint has '" + name + "': choose a layer)";
            break;
          }
      throw Error(ErrorCode::missing_tensor,
                  ckpt.path() + ": tensor '" + full + "' not found" + hint);
    }
    out[spec.name] = checked_tensor(ckpt, full, spec.shape);
  }
  return out;
}

TensorMap gla_layer_tensors(const Checkpoint& ckpt, const GlaConfig& cfg) {
  cfg.validate();
  TensorMap present;  // which optional forms the file holds decides what is expected
  for (const std::string& name : ckpt.names()) {
    const TensorView& t = ckpt.at(name);
    present[name] = HostTensor{t.dtype, t.shape, t.bytes};
  }
  GlaForms forms;
  try {
    forms = gla_forms(cfg, present);
  } catch (const Error& e) {
    throw Error(e.code(), ckpt.path() + ": " + e.what());
  }
  return expected_tensors(ckpt, gla_expected_weights(cfg, forms));
}

TensorMap gdn_layer_tensors(const Checkpoint& ckpt, const GdnConfig& cfg) {
  cfg.validate();
  return expected_tensors(ckpt, gdn_expected_weights(cfg));
}

namespace {

// The layers the checkpoint holds tensors for: 1 + the largest N of a name
// "{model}layers.N.…" (0 without any), `model` the text model's prefix.
int64_t layers_present(const Checkpoint& ckpt, const std::string& model) {
  const std::string prefix = model + "layers.";
  int64_t count = 0;
  for (const std::string& name : ckpt.names()) {
    if (!name.starts_with(prefix)) continue;
    int64_t n = 0;
    size_t i = prefix.size();
    for (; i < name.size() && i < prefix.size() + 9 && name[i] >= '0' && name[i] <= '9'; ++i) n = n * 10 + (name[i] - '0');
    if (i > prefix.size() && i < name.size() && name[i] == '.') count = std::max(count, n + 1);
  }
  return count;
}

// The expert tensor `name` (model.layers.{i}.mlp.experts.{e}.{gate,up,down}_proj.weight)
// as a view into the fused form transformers >= 5 writes: mlp.experts.gate_up_proj
// [E, 2·Im, D] (each expert's gate rows, then its up rows) and mlp.experts.down_proj
// [E, D, Im]. Nothing when `name` is no expert tensor or the file has no fused form.
std::optional<HostTensor> fused_expert(const Checkpoint& ckpt, const ModelConfig& cfg, const std::string& name,
                                       const std::vector<int64_t>& shape) {
  const size_t at = name.find(".mlp.experts.");
  if (at == std::string::npos || !name.ends_with("_proj.weight")) return std::nullopt;
  const std::string prefix = name.substr(0, at) + ".mlp.experts.";
  const std::string rest = name.substr(prefix.size());  // "{e}.gate_proj.weight"
  const size_t dot = rest.find('.');
  const int e = std::stoi(rest.substr(0, dot));
  const std::string proj = rest.substr(dot + 1, rest.size() - dot - 1 - std::string(".weight").size());
  const bool down = proj == "down_proj";
  const std::string fused = prefix + (down ? "down_proj" : "gate_up_proj");
  if (!ckpt.contains(fused)) return std::nullopt;
  const int64_t E = cfg.moe.num_experts, D = cfg.hidden_size(), Im = cfg.moe.moe_intermediate_size;
  const HostTensor all = checked_tensor(ckpt, fused, down ? std::vector<int64_t>{E, D, Im}
                                                          : std::vector<int64_t>{E, 2 * Im, D});
  const size_t per_expert = all.bytes.size() / size_t(E), part = down ? per_expert : per_expert / 2;
  const size_t offset = size_t(e) * per_expert + (proj == "up_proj" ? part : 0);
  return HostTensor{all.dtype, shape, all.bytes.subspan(offset, part)};
}

}  // namespace

TensorMap model_tensors(const Checkpoint& ckpt, const ModelConfig& cfg) {
  cfg.validate();
  // The declared layers against the tensors present, before the per-layer names are made.
  // The text model's tensors sit under cfg.checkpoint_prefix where it is set (model.* elsewhere).
  const std::string model = cfg.checkpoint_prefix.empty() ? "model." : cfg.checkpoint_prefix;
  auto stored_name = [&](const std::string& name) {
    return name.starts_with("model.") ? model + name.substr(6) : name;
  };
  if (const int64_t present = layers_present(ckpt, model); cfg.num_hidden_layers > present)
    throw Error(ErrorCode::missing_tensor,
                ckpt.path() + ": num_hidden_layers is " + std::to_string(cfg.num_hidden_layers) + " but " +
                    (present == 0 ? "the checkpoint holds no " + model + "layers.* tensors"
                                  : "the checkpoint holds layers 0.." + std::to_string(present - 1) + " only (no " +
                                        model + "layers." + std::to_string(present) + ".* tensors)"));
  TensorMap out;
  for (const TensorSpec& spec : expected_model_weights(cfg)) {
    // Older fla GLA files name the embedding model.embed_tokens.weight; it is
    // read under the one name the rest of vkgate knows.
    if (cfg.gla && spec.name == cfg.embedding_name() && !ckpt.contains(spec.name) &&
        ckpt.contains("model.embed_tokens.weight")) {
      out[spec.name] = checked_tensor(ckpt, "model.embed_tokens.weight", spec.shape);
      continue;
    }
    const std::string name = stored_name(spec.name);
    if (!ckpt.contains(name)) {
      if (std::optional<HostTensor> t = fused_expert(ckpt, cfg, name, spec.shape)) {
        out[spec.name] = *t;
        continue;
      }
      throw Error(ErrorCode::missing_tensor, ckpt.path() + ": tensor '" + name + "' not found" +
                                                 (spec.name.starts_with("model.layers.")
                                                      ? " (num_hidden_layers is " + std::to_string(cfg.num_hidden_layers) + ")"
                                                      : ""));
    }
    out[spec.name] = checked_tensor(ckpt, name, spec.shape);
  }
  return out;
}

}  // namespace vkgate
