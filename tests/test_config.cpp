// config.json parsing, which layers are full attention, and checkpoints
// (single file, directory, sharded with an index).
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

namespace test_config {

namespace fs = std::filesystem;
using nlohmann::json;
using namespace vkgate;
using test::expect_error;
using test::read_text;
using test::TempDir;
using test::write_text;

namespace {

const std::string kSource = "model/config.json";




void check_same_block(const BlockConfig& a, const BlockConfig& b) {
  CHECK(a.hidden_size == b.hidden_size);
  CHECK(a.num_heads == b.num_heads);
  CHECK(a.num_kv_heads == b.num_kv_heads);
  CHECK(a.head_dim == b.head_dim);
  CHECK(a.rms_norm_eps == b.rms_norm_eps);
  CHECK(a.rope_theta == b.rope_theta);
  CHECK(a.partial_rotary_factor == b.partial_rotary_factor);
  CHECK(a.gate_kind == b.gate_kind);
  CHECK(a.gate_layout == b.gate_layout);
  CHECK(a.norm_kind == b.norm_kind);
  CHECK(a.use_qk_norm == b.use_qk_norm);
  CHECK(a.qkv_bias == b.qkv_bias);
  CHECK(a.o_bias == b.o_bias);
  CHECK(a.causal == b.causal);
  CHECK(a.residual == b.residual);
}

// The shape of Qwen3-Next-80B-A3B's config.json, with many keys vkgate does not read.
const char* const kQwen3NextConfig = R"({
  "architectures": ["Qwen3NextForCausalLM"],
  "attention_bias": false,
  "attention_dropout": 0.0,
  "bos_token_id": 151643,
  "decoder_sparse_step": 1,
  "eos_token_id": 151645,
  "full_attention_interval": 4,
  "head_dim": 256,
  "hidden_act": "silu",
  "hidden_size": 2048,
  "initializer_range": 0.02,
  "intermediate_size": 5120,
  "linear_conv_kernel_dim": 4,
  "linear_key_head_dim": 128,
  "linear_num_key_heads": 16,
  "linear_num_value_heads": 32,
  "linear_value_head_dim": 128,
  "max_position_embeddings": 262144,
  "mlp_only_layers": [],
  "model_type": "qwen3_next",
  "moe_intermediate_size": 512,
  "norm_topk_prob": true,
  "num_attention_heads": 16,
  "num_experts": 512,
  "num_experts_per_tok": 10,
  "num_hidden_layers": 48,
  "num_key_value_heads": 2,
  "output_router_logits": false,
  "partial_rotary_factor": 0.25,
  "rms_norm_eps": 1e-06,
  "rope_scaling": null,
  "rope_theta": 10000000,
  "router_aux_loss_coef": 0.001,
  "shared_expert_intermediate_size": 512,
  "tie_word_embeddings": false,
  "torch_dtype": "bfloat16",
  "transformers_version": "4.57.0.dev0",
  "use_cache": true,
  "use_sliding_window": false,
  "vocab_size": 151936
})";

// A small model of the paper's official code: Qwen3 with a headwise gate.
json official_base() {
  return json::parse(R"({
    "model_type": "qwen3", "hidden_size": 64, "num_attention_heads": 4,
    "num_key_value_heads": 2, "head_dim": 16, "rms_norm_eps": 1e-6, "rope_theta": 1000000,
    "headwise_attn_output_gate": true, "qkv_bias": false, "vocab_size": 1000,
    "rope_scaling": null, "sliding_window": null, "use_sliding_window": false
  })");
}

BlockConfig parse(const json& j) { return parse_config_json(j.dump(), kSource); }

}  // namespace

// ---- config.json ----

TEST_CASE("config: the golden files parse to the conventions they were generated with") {
  for (const char* name : {"g1_gqa_qwen3next_partial", "g2_gqa_official_headwise",
                           "g3_mqa_separate_bidir_residual", "g4_decode_qwen3next_cache"}) {
    CAPTURE(name);
    const std::string path = test::golden_dir() + "/" + name + ".json";
    const BlockConfig c = load_config(path);
    const json j = json::parse(read_text(path));
    CHECK(c.hidden_size == j.at("hidden_size").get<int>());
    CHECK(c.num_heads == j.at("num_attention_heads").get<int>());
    CHECK(c.num_kv_heads == j.at("num_key_value_heads").get<int>());
    CHECK(c.head_dim == j.at("head_dim").get<int>());
    CHECK(c.rms_norm_eps == j.at("rms_norm_eps").get<double>());
    CHECK(c.rope_theta == j.at("rope_theta").get<double>());
    CHECK(c.partial_rotary_factor == j.at("partial_rotary_factor").get<double>());
    CHECK(c.rotary_dim() == j.at("rotary_dim").get<int>());
    CHECK(to_string(c.gate_kind) == j.at("gate_kind").get<std::string>());
    CHECK(to_string(c.gate_layout) == j.at("gate_layout").get<std::string>());
    CHECK(to_string(c.norm_kind) == j.at("norm_kind").get<std::string>());
    CHECK(c.use_qk_norm == j.at("use_qk_norm").get<bool>());
    CHECK(c.causal == j.at("causal").get<bool>());
    CHECK(c.residual == j.at("residual").get<bool>());
    CHECK(c.qkv_bias == j.at("attention_bias").get<bool>());
    CHECK(c.o_bias == j.at("attention_bias").get<bool>());
    CHECK(c.num_hidden_layers == 0);
    CHECK_NOTHROW(c.check_layer(0));
  }
}

TEST_CASE("config: a real Qwen3-Next config.json gives the Qwen3-Next attention block") {
  const BlockConfig c = parse_config_json(kQwen3NextConfig, kSource);
  check_same_block(c, BlockConfig::qwen3_next_attention());
  CHECK(c.model_type == "qwen3_next");
  CHECK(c.num_hidden_layers == 48);
  CHECK(c.full_attention_interval == 4);
  CHECK(c.layer_types.empty());
  CHECK(c.q_proj_rows() == 8192);
  CHECK(c.attn_dim() == 4096);

  // transformers >= 5 moves the RoPE keys under rope_parameters.
  json moved = json::parse(kQwen3NextConfig);
  moved.erase("rope_theta");
  moved.erase("partial_rotary_factor");
  moved["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 10000000}, {"partial_rotary_factor", 0.25}};
  check_same_block(parse(moved), BlockConfig::qwen3_next_attention());
  // The preset does not depend on the keys vkgate would otherwise default.
  json bare = {{"model_type", "qwen3_next"}, {"hidden_size", 2048}, {"num_attention_heads", 16},
               {"num_key_value_heads", 2}, {"head_dim", 256}, {"rope_theta", 1e7},
               {"partial_rotary_factor", 0.25}};
  const BlockConfig b = parse(bare);
  check_same_block(b, BlockConfig::qwen3_next_attention());
  CHECK(b.full_attention_interval == 4);  // Qwen3NextConfig's default
  json biased = bare;
  biased["attention_bias"] = true;
  CHECK(parse(biased).qkv_bias);
  CHECK(parse(biased).o_bias);
}

TEST_CASE("config: the paper's official code (qwen3 + gate flags) is official_grouped with plain norms") {
  const BlockConfig h = parse(official_base());
  CHECK(h.gate_kind == GateKind::headwise);
  CHECK(h.gate_layout == GateLayout::official_grouped);
  CHECK(h.norm_kind == NormKind::plain);
  CHECK(h.use_qk_norm);
  CHECK_FALSE(h.qkv_bias);
  CHECK_FALSE(h.o_bias);
  CHECK(h.rope_theta == 1e6);
  CHECK(h.partial_rotary_factor == 1.0);
  CHECK(h.causal);
  CHECK_FALSE(h.residual);
  CHECK(h.q_proj_rows() == 4 * (16 + 1));

  json e = official_base();
  e["headwise_attn_output_gate"] = false;
  e["elementwise_attn_output_gate"] = true;
  e["qkv_bias"] = true;
  const BlockConfig ec = parse(e);
  CHECK(ec.gate_kind == GateKind::elementwise);
  CHECK(ec.gate_layout == GateLayout::official_grouped);
  CHECK(ec.qkv_bias);
  CHECK(ec.o_bias);  // the official code puts the bias on o_proj too

  json plain = official_base();
  plain.erase("headwise_attn_output_gate");
  CHECK(parse(plain).gate_kind == GateKind::none);
  CHECK(parse(plain).norm_kind == NormKind::plain);
  plain["model_type"] = "llama";
  CHECK(parse(plain).gate_kind == GateKind::none);
}

TEST_CASE("config: defaults for absent or null keys") {
  json j = {{"hidden_size", 96}, {"num_attention_heads", 6}, {"head_dim", nullptr}};
  const BlockConfig c = parse(j);
  CHECK(c.num_kv_heads == 6);
  CHECK(c.head_dim == 16);
  CHECK(c.rms_norm_eps == 1e-6);
  CHECK(c.rope_theta == 10000.0);
  CHECK(c.partial_rotary_factor == 1.0);
  CHECK(c.gate_kind == GateKind::none);
  CHECK(c.use_qk_norm);
  CHECK(c.causal);
  CHECK_FALSE(c.residual);
  CHECK(c.model_type.empty());
  CHECK(c.num_hidden_layers == 0);
  // Equal values at both places are fine (the golden files carry both).
  j["rope_theta"] = 5e5;
  j["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 5e5}};
  CHECK(parse(j).rope_theta == 5e5);
}

TEST_CASE("config: vkgate's own keys override the model_type preset") {
  json j = json::parse(kQwen3NextConfig);
  j["gate_kind"] = "headwise";
  j["gate_layout"] = "separate";
  j["norm_kind"] = "plain";
  j["use_qk_norm"] = false;
  j["causal"] = false;
  j["residual"] = true;
  const BlockConfig c = parse(j);
  CHECK(c.gate_kind == GateKind::headwise);
  CHECK(c.gate_layout == GateLayout::separate);
  CHECK(c.norm_kind == NormKind::plain);
  CHECK_FALSE(c.use_qk_norm);
  CHECK_FALSE(c.causal);
  CHECK(c.residual);

  json o = official_base();
  o["gate_kind"] = "none";
  o["norm_kind"] = "zero_centered";
  CHECK(parse(o).gate_kind == GateKind::none);
  CHECK(parse(o).norm_kind == NormKind::zero_centered);
}

TEST_CASE("config: impossible or mistyped keys are errors naming the file and the key") {
  struct Bad {
    const char* patch;    // merged into official_base(); null removes a key
    const char* mention;  // besides the file name
  };
  const Bad bad[] = {
      {R"({"num_attention_heads": "16"})", R"(key 'num_attention_heads' must be a positive integer, got "16")"},
      {R"({"hidden_size": 0})", "hidden_size"},
      {R"({"hidden_size": -64})", "hidden_size"},
      {R"({"hidden_size": 64.5})", "hidden_size"},
      {R"({"hidden_size": null})", "hidden_size"},
      {R"({"num_key_value_heads": 3})", "num_attention_heads (4) must be divisible by num_key_value_heads (3)"},
      {R"({"num_key_value_heads": true})", "num_key_value_heads"},
      // Without model_type (qwen3 defaults head_dim to 128), head_dim is hidden / heads.
      {R"({"model_type": null, "head_dim": null, "hidden_size": 66})", "head_dim"},
      {R"({"head_dim": 2048})", "head_dim"},
      {R"({"rms_norm_eps": -1e-6})", "rms_norm_eps"},
      {R"({"rms_norm_eps": "1e-6"})", "rms_norm_eps"},
      {R"({"rope_theta": 0})", "rope_theta"},
      {R"({"partial_rotary_factor": 1.5})", "partial_rotary_factor"},
      {R"({"partial_rotary_factor": 0.1875})", "partial_rotary_factor"},  // 16 · 0.1875 = 3 rotary dims
      {R"({"rope_parameters": "default"})", "rope_parameters"},
      {R"({"rope_parameters": {"rope_theta": 10000}})", "rope_theta"},  // disagrees with the top level
      {R"({"rope_parameters": {"partial_rotary_factor": "half"}})", "rope_parameters.partial_rotary_factor"},
      {R"({"rope_scaling": {"rope_type": "longrope", "factor": 4.0}})", "rope_scaling.rope_type"},
      {R"({"rope_scaling": {"rope_type": "yarn", "factor": 0.25}})", "rope_scaling.factor"},
      {R"({"attention_bias": "no"})", "attention_bias"},
      {R"({"qkv_bias": 1})", "qkv_bias"},
      {R"({"elementwise_attn_output_gate": true})", "'headwise_attn_output_gate' and 'elementwise_attn_output_gate'"},
      {R"({"gate_kind": "channelwise"})", "key 'gate_kind' must be one of none, headwise, elementwise"},
      {R"({"gate_layout": 2})", "gate_layout"},
      {R"({"norm_kind": "rms"})", "norm_kind"},
      {R"({"use_qk_norm": "yes"})", "use_qk_norm"},
      {R"({"causal": 1})", "causal"},
      {R"({"residual": "false"})", "residual"},
      {R"({"model_type": 3})", "model_type"},
      {R"({"num_hidden_layers": 0})", "num_hidden_layers"},
      {R"({"full_attention_interval": -4})", "full_attention_interval"},
      {R"({"num_hidden_layers": 4, "layer_types": ["full_attention", "full_attention"]})", "layer_types"},
      {R"({"layer_types": "full_attention"})", "layer_types"},
      {R"({"layer_types": ["full_attention", 1]})", "layer_types"},
      {R"({"full_attention_interval": 2, "layer_types": ["full_attention", "linear_attention"]})", "layer_types"},
  };
  CHECK(std::size(bad) >= 12);
  for (const Bad& b : bad) {
    json j = official_base();
    j.merge_patch(json::parse(b.patch));
    CAPTURE(b.patch);
    expect_error([&] { parse(j); }, ErrorCode::invalid_config, {kSource + ": ", b.mention});
  }
}

TEST_CASE("config: malformed JSON and unreadable files") {
  expect_error([] { parse_config_json("{\"hidden_size\": 64,\n \"x\": }", kSource); },
               ErrorCode::invalid_config, {kSource, "not valid JSON", "line 2"});
  expect_error([] { parse_config_json("[1, 2]", kSource); }, ErrorCode::invalid_config,
               {kSource, "not a JSON object"});
  expect_error([] { load_config("/nonexistent/vkgate/config.json"); }, ErrorCode::io,
               {"/nonexistent/vkgate/config.json", "cannot open"});
  expect_error([] { load_config(fs::temp_directory_path().string()); }, ErrorCode::io,
               {fs::temp_directory_path().string(), "directory"});
}

TEST_CASE("config: check_layer with full_attention_interval (Qwen3-Next's rule)") {
  const BlockConfig c = parse_config_json(kQwen3NextConfig, kSource);
  for (int layer : {3, 7, 11, 47}) CHECK_NOTHROW(c.check_layer(layer));
  expect_error([&] { c.check_layer(2); }, ErrorCode::invalid_argument,
               {"layer 2 is a 'linear_attention' layer (Gated DeltaNet), not full attention",
                "the full-attention layers are 3, 7, 11, 15, 19, 23, 27, 31, ..., 47"});
  expect_error([&] { c.check_layer(0); }, ErrorCode::invalid_argument, {"layer 0 is a 'linear_attention'"});
  expect_error([&] { c.check_layer(48); }, ErrorCode::invalid_argument, {"layer 48", "0..47"});
  expect_error([&] { c.check_layer(-1); }, ErrorCode::invalid_argument, {"layer -1", "0..47"});

  // Without num_hidden_layers the list cannot end.
  BlockConfig open = c;
  open.num_hidden_layers = 0;
  open.full_attention_interval = 2;
  CHECK_NOTHROW(open.check_layer(1001));
  expect_error([&] { open.check_layer(1000); }, ErrorCode::invalid_argument,
               {"the full-attention layers are 1, 3, 5, 7, 9, 11, 13, 15, ..."});
  // The list is computed, not scanned: a huge layer count costs nothing.
  BlockConfig huge = c;
  huge.num_hidden_layers = 2000000000;
  expect_error([&] { huge.check_layer(0); }, ErrorCode::invalid_argument,
               {"3, 7, 11, 15, 19, 23, 27, 31, ..., 1999999999"});
  BlockConfig nine = c;  // exactly nine full-attention layers: all listed
  nine.num_hidden_layers = 36;
  expect_error([&] { nine.check_layer(0); }, ErrorCode::invalid_argument,
               {"are 3, 7, 11, 15, 19, 23, 27, 31, 35"});
  // Neither key: every layer is full attention.
  CHECK_NOTHROW(BlockConfig::qwen3_next_attention().check_layer(12345));
  expect_error([] { BlockConfig::qwen3_next_attention().check_layer(-3); },
               ErrorCode::invalid_argument, {"layer -3"});
}

TEST_CASE("config: check_layer with layer_types") {
  json j = official_base();
  j["num_hidden_layers"] = 4;
  j["layer_types"] = {"sliding_attention", "full_attention", "linear_attention", "full_attention"};
  const BlockConfig c = parse(j);
  CHECK(c.layer_types.size() == 4);
  CHECK_NOTHROW(c.check_layer(1));
  CHECK_NOTHROW(c.check_layer(3));
  expect_error([&] { c.check_layer(0); }, ErrorCode::invalid_argument,
               {"layer 0 is a 'sliding_attention' layer, not full attention", "are 1, 3"});
  expect_error([&] { c.check_layer(4); }, ErrorCode::invalid_argument, {"0..3"});

  // Agreeing with full_attention_interval is fine; layer_types alone gives the count.
  j["full_attention_interval"] = 2;
  j["layer_types"] = {"linear_attention", "full_attention", "linear_attention", "full_attention"};
  j.erase("num_hidden_layers");
  const BlockConfig d = parse(j);
  CHECK_NOTHROW(d.check_layer(3));
  expect_error([&] { d.check_layer(4); }, ErrorCode::invalid_argument, {"0..3"});

  j["layer_types"] = {"linear_attention", "linear_attention"};
  j.erase("full_attention_interval");
  expect_error([&] { parse(j).check_layer(1); }, ErrorCode::invalid_argument,
               {"no full-attention layers"});
}

}  // namespace test_config
