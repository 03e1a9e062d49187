// Checkpoints: a single file, a model directory, a sharded directory with
// an index, and broken ones rejected naming the file.
#include "doctest.hpp"
#include <unistd.h>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>
#include "test_util.hpp"
#include "golden.hpp"
#include "vkgate/checkpoint.hpp"
#include "vkgate/config.hpp"
#include "vkgate/error.hpp"
#include "vkgate/safetensors.hpp"
#include "vkgate/weights.hpp"

namespace test_checkpoint {

namespace fs = std::filesystem;
using nlohmann::json;
using namespace vkgate;
using test::expect_error;
using test::read_text;
using test::TempDir;
using test::write_text;

// ---- checkpoints ----

namespace {


// Tensors to write, owning their bytes; element i of a tensor is (seed + i) / 64.
struct Tensors {
  std::vector<std::vector<std::byte>> storage;
  std::vector<TensorToWrite> list;

  void add(const std::string& name, DType dtype, std::vector<int64_t> shape, int seed = 0) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    std::vector<std::byte> bytes(size_t(n) * dtype_size(dtype));
    for (int64_t i = 0; i < n; ++i) {
      const float v = float(seed + i) / 64.0f;
      std::byte* p = bytes.data() + size_t(i) * dtype_size(dtype);
      if (dtype == DType::F32) std::memcpy(p, &v, 4);
      else if (dtype == DType::F64) { const double d = v; std::memcpy(p, &d, 8); }
      else {
        const uint16_t b = dtype == DType::F16 ? float_to_half(v) : float_to_bf16(v);
        std::memcpy(p, &b, 2);
      }
    }
    storage.push_back(std::move(bytes));
    list.push_back({name, dtype, std::move(shape), storage.back()});
  }
  // Every tensor of the block, named prefix + bare name (the norm under norm_prefix).
  void add_block(const BlockConfig& cfg, const std::string& prefix, const std::string& norm_prefix,
                 DType dtype) {
    int seed = 0;
    for (const TensorSpec& s : expected_weights(cfg))
      add((s.name == "input_layernorm.weight" ? norm_prefix : prefix) + s.name, dtype, s.shape, seed += 7);
  }
  const TensorToWrite& get(const std::string& name) const {
    for (const TensorToWrite& t : list)
      if (t.name == name) return t;
    FAIL("no tensor " << name);
    return list.front();
  }
};

// Small, with every kind of tensor: gate rows, biases, q/k norms.
BlockConfig small_config() {
  return parse_config_json(R"({"model_type": "qwen3_next", "hidden_size": 32,
      "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 8,
      "partial_rotary_factor": 0.5, "attention_bias": true, "num_hidden_layers": 8,
      "full_attention_interval": 4})", "small/config.json");
}

void check_views(const TensorMap& got, const BlockConfig& cfg, const Tensors& written,
                 const std::string& prefix, const std::string& norm_prefix) {
  CHECK(got.size() == expected_weights(cfg).size());
  for (const TensorSpec& s : expected_weights(cfg)) {
    CAPTURE(s.name);
    REQUIRE(got.count(s.name) == 1);
    const HostTensor& t = got.at(s.name);
    const TensorToWrite& w =
        written.get((s.name == "input_layernorm.weight" ? norm_prefix : prefix) + s.name);
    CHECK(t.dtype == w.dtype);
    CHECK(t.shape == s.shape);
    REQUIRE(t.bytes.size() == w.bytes.size());
    CHECK(std::memcmp(t.bytes.data(), w.bytes.data(), w.bytes.size()) == 0);
  }
  CHECK_NOTHROW(check_weights(cfg, got));
}

}  // namespace

TEST_CASE("checkpoint: a single .safetensors file with bare names") {
  TempDir dir;
  const BlockConfig cfg = small_config();
  Tensors t;
  t.add_block(cfg, "", "", DType::F32);
  t.add("unrelated.weight", DType::F64, {3});
  const std::string path = dir.file("block.safetensors");
  write_safetensors(path, t.list);

  const Checkpoint ck(path);
  CHECK(ck.path() == path);
  CHECK_FALSE(ck.is_directory());
  CHECK(ck.config_path().empty());
  CHECK(ck.contains("q_proj.weight"));
  CHECK(ck.names().size() == t.list.size());
  CHECK(ck.at("q_proj.weight").shape == std::vector<int64_t>{cfg.q_proj_rows(), 32});
  expect_error([&] { ck.at("nope"); }, ErrorCode::missing_tensor, {path + ": tensor 'nope' not found"});

  check_views(block_tensors(ck, cfg, -1), cfg, t, "", "");
  // Full-model names are not there: the message says so and how to read bare names.
  expect_error([&] { block_tensors(ck, cfg, 3); }, ErrorCode::missing_tensor,
               {path, "'model.layers.3.input_layernorm.weight' not found", "layer -1"});
  // A moved checkpoint keeps its views valid.
  Checkpoint moved = Checkpoint(path);
  const Checkpoint other = std::move(moved);
  CHECK(other.at("k_norm.weight").to_f32().at(1) == ck.at("k_norm.weight").to_f32().at(1));
}

TEST_CASE("checkpoint: a model directory with bf16 tensors under model.layers.3.") {
  TempDir dir;
  const BlockConfig small = small_config();
  write_text(dir.file("config.json"), R"({"model_type": "qwen3_next", "hidden_size": 32,
      "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 8,
      "partial_rotary_factor": 0.5, "attention_bias": true, "num_hidden_layers": 8,
      "full_attention_interval": 4, "vocab_size": 17})");
  Tensors t;
  t.add("model.embed_tokens.weight", DType::BF16, {17, 32});
  t.add_block(small, "model.layers.3.self_attn.", "model.layers.3.", DType::BF16);
  t.add("model.layers.2.linear_attn.in_proj_qkvz.weight", DType::BF16, {4, 32});
  write_safetensors(dir.file("model.safetensors"), t.list);

  const Checkpoint ck(dir.path.string());
  CHECK(ck.is_directory());
  CHECK(ck.config_path() == dir.file("config.json"));
  const BlockConfig cfg = load_config(ck.config_path());
  check_views(block_tensors(ck, cfg, 3), cfg, t, "model.layers.3.self_attn.", "model.layers.3.");
  CHECK(block_tensors(ck, cfg, 3).at("q_proj.weight").dtype == DType::BF16);

  expect_error([&] { block_tensors(ck, cfg, 2); }, ErrorCode::invalid_argument,
               {"layer 2 is a 'linear_attention' layer", "are 3, 7"});
  expect_error([&] { block_tensors(ck, cfg, 7); }, ErrorCode::missing_tensor,
               {dir.path.string(), "'model.layers.7.input_layernorm.weight' not found"});
  expect_error([&] { block_tensors(ck, cfg, 8); }, ErrorCode::invalid_argument, {"0..7"});
  expect_error([&] { block_tensors(ck, cfg, -1); }, ErrorCode::missing_tensor,
               {"'input_layernorm.weight' not found", "choose a layer"});

  // A config that expects other shapes or more tensors.
  BlockConfig wider = cfg;
  wider.num_kv_heads = 4;
  expect_error([&] { block_tensors(ck, wider, 3); }, ErrorCode::shape_mismatch,
               {dir.path.string(), "'model.layers.3.self_attn.k_proj.weight' has shape [16, 32], expected [32, 32]"});
  BlockConfig separate = cfg;
  separate.gate_layout = GateLayout::separate;
  expect_error([&] { block_tensors(ck, separate, 3); }, ErrorCode::shape_mismatch,
               {"q_proj.weight", "expected [32, 32]"});
}

TEST_CASE("checkpoint: a tensor of an unsupported dtype") {
  TempDir dir;
  const BlockConfig cfg = small_config();
  Tensors t;
  for (const TensorSpec& s : expected_weights(cfg))
    t.add(s.name, s.name == "o_proj.weight" ? DType::F64 : DType::F16, s.shape);
  write_safetensors(dir.file("model.safetensors"), t.list);
  const Checkpoint ck(dir.path.string());
  expect_error([&] { block_tensors(ck, cfg, -1); }, ErrorCode::shape_mismatch,
               {"'o_proj.weight' has dtype F64"});
}

TEST_CASE("checkpoint: a sharded directory with model.safetensors.index.json") {
  TempDir dir;
  const BlockConfig cfg = small_config();
  Tensors all;
  all.add_block(cfg, "model.layers.3.self_attn.", "model.layers.3.", DType::BF16);
  // Split the block across two shards, as transformers does by size.
  Tensors a, b;
  json weight_map = json::object();
  for (size_t i = 0; i < all.list.size(); ++i) {
    const TensorToWrite& w = all.list[i];
    const bool first = i % 2 == 0;
    (first ? a : b).list.push_back(w);
    weight_map[w.name] = first ? "model-00001-of-00002.safetensors" : "model-00002-of-00002.safetensors";
  }
  write_safetensors(dir.file("model-00001-of-00002.safetensors"), a.list);
  write_safetensors(dir.file("model-00002-of-00002.safetensors"), b.list);
  const json index = {{"metadata", {{"total_size", 1234}}}, {"weight_map", weight_map}};
  write_text(dir.file("model.safetensors.index.json"), index.dump(2));

  const Checkpoint ck(dir.path.string());
  CHECK(ck.is_directory());
  CHECK(ck.names().size() == all.list.size());
  check_views(block_tensors(ck, cfg, 3), cfg, all, "model.layers.3.self_attn.", "model.layers.3.");
  expect_error([&] { ck.at("lm_head.weight"); }, ErrorCode::missing_tensor,
               {dir.path.string() + ": tensor 'lm_head.weight' not found"});

  // model.safetensors wins over the index when both are present, as in transformers.
  Tensors single;
  single.add("only.weight", DType::F32, {2});
  write_safetensors(dir.file("model.safetensors"), single.list);
  CHECK(Checkpoint(dir.path.string()).names() == std::vector<std::string>{"only.weight"});
}

TEST_CASE("checkpoint: broken indexes and paths are errors naming the file") {
  TempDir dir;
  Tensors t;
  t.add("a.weight", DType::F32, {2});
  t.add("b.weight", DType::F32, {3});
  write_safetensors(dir.file("shard1.safetensors"), t.list);
  const std::string index = dir.file("model.safetensors.index.json");
  const std::string root = dir.path.string();
  auto with_index = [&](const std::string& text) {
    write_text(index, text);
    return [root] { Checkpoint ck(root); };
  };

  CHECK_NOTHROW(with_index(R"({"weight_map": {"a.weight": "shard1.safetensors"}})")());
  expect_error(with_index(R"({"weight_map": {"a.weight": "shard1.safetensors",
                                             "c.weight": "shard2.safetensors"}})"),
               ErrorCode::io, {index, "shard 'shard2.safetensors'", "c.weight", dir.file("shard2.safetensors")});
  expect_error(with_index(R"({"weight_map": {"a.weight": "shard1.safetensors",
                                             "z.weight": "shard1.safetensors"}})"),
               ErrorCode::missing_tensor, {index, "'z.weight'", "shard1.safetensors"});
  expect_error(with_index(R"({"weight_map": {"a.weight": "shard1.safetensors",}})"),
               ErrorCode::io, {index, "not valid JSON", "line 1"});
  expect_error(with_index(R"({"weight_map": {"a.weight": "../shard1.safetensors"}})"),
               ErrorCode::io, {index, "'../shard1.safetensors'", "plain file name"});
  expect_error(with_index(R"({"weight_map": {"a.weight": ".."}})"), ErrorCode::io,
               {index, "'..'"});
  expect_error(with_index(R"({"metadata": {}})"), ErrorCode::io, {index, "weight_map"});
  expect_error(with_index(R"({"weight_map": ["shard1.safetensors"]})"), ErrorCode::io,
               {index, "weight_map"});
  expect_error(with_index(R"({"weight_map": {"a.weight": 1}})"), ErrorCode::io,
               {index, "'a.weight'"});
  expect_error(with_index(R"([])"), ErrorCode::io, {index, "not a JSON object"});
  // A shard that is not a safetensors file.
  write_text(dir.file("junk.safetensors"), "junk");
  expect_error(with_index(R"({"weight_map": {"a.weight": "junk.safetensors"}})"), ErrorCode::io,
               {index, "shard 'junk.safetensors'", dir.file("junk.safetensors")});

  fs::remove(index);
  expect_error([&] { Checkpoint ck(root); }, ErrorCode::io,
               {root, "model.safetensors", "model.safetensors.index.json"});
  expect_error([&] { Checkpoint ck(dir.file("missing")); }, ErrorCode::io,
               {dir.file("missing"), "no such file"});
  expect_error([&] { Checkpoint ck(dir.file("junk.safetensors")); }, ErrorCode::io,
               {dir.file("junk.safetensors")});
}

}  // namespace test_checkpoint
