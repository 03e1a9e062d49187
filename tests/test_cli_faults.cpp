// `vkgate run` on bad input, as a child process: a table of malformed files
// and options, each of which must exit 1 or 2 with one line naming the
// problem and leave no output file behind; numbers out of range in
// config.json, a failed write, no Vulkan driver, NaN and Inf, byte-identical
// reruns and pipeline statistics. Every child runs with VKGATE_VALIDATION=1.
#ifdef VKGATE_CLI

#include "doctest.hpp"

#include <cmath>
#include <filesystem>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "block_weights.hpp"
#include "cli_harness.hpp"
#include "vkgate/block.hpp"
#include "vkgate/config.hpp"
#include "vkgate/dtype.hpp"
#include "vkgate/reference.hpp"
#include "vkgate/safetensors.hpp"
#include "vkgate/weights.hpp"

namespace test_cli_faults {

namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using namespace vkgate;
using namespace vkgate::cli_test;

// A valid small problem that each malformed case breaks in one place.
struct Fixture {
  fs::path root;
  std::string weights, config, input, output;
  BlockConfig cfg;
  json config_json;
  std::mt19937& rng;

  Fixture(const fs::path& dir, std::mt19937& r) : root(dir), rng(r) {
    weights = (root / "w.safetensors").string();
    config = (root / "config.json").string();
    input = (root / "in.safetensors").string();
    output = (root / "out.safetensors").string();
    cfg = qwen3(shape(64, 4, 2, 32), GateKind::elementwise);
    config_json = {{"model_type", "qwen3"}, {"hidden_size", 64}, {"num_attention_heads", 4},
                   {"num_key_value_heads", 2}, {"head_dim", 32}, {"elementwise_attn_output_gate", true}};
    write_text(config, config_json.dump());
    write_weights();
    write_input({1, 3, 64});
  }
  // The weights, minus `skip`, with `replace` swapped in (name → shape, F32 zeros) or written as `dtype`.
  void write_weights(const std::string& skip = "", const std::map<std::string, std::vector<int64_t>>& replace = {},
                     DType dtype = DType::F32) {
    FileBuilder f;
    test::RandomWeights w(cfg, rng);
    for (const TensorSpec& spec : expected_weights(cfg)) {
      if (spec.name == skip) continue;
      if (const auto it = replace.find(spec.name); it != replace.end()) {
        int64_t n = 1;
        for (int64_t d : it->second) n *= d;
        f.add(spec.name, it->second, std::vector<float>(size_t(n), 0.0f), DType::F32);
      } else {
        f.add(spec.name, spec.shape, w.data.at(spec.name), dtype);
      }
    }
    f.write(weights);
  }
  // An input file with hidden_states of `shape` and any extra tensors (name → shape).
  void write_input(const std::vector<int64_t>& hidden_shape,
                   const std::vector<std::pair<std::string, std::vector<int64_t>>>& extra = {},
                   bool with_hidden = true) {
    FileBuilder f;
    auto add = [&](const std::string& name, const std::vector<int64_t>& s) {
      int64_t n = 1;
      for (int64_t d : s) n *= d;
      f.add(name, s, random_vec(rng, size_t(n)), DType::F32);
    };
    if (with_hidden) add("hidden_states", hidden_shape);
    for (const auto& [name, s] : extra) add(name, s);
    f.write(input);
  }
  void patch_config(const json& patch) {
    json j = config_json;
    j.merge_patch(patch);
    write_text(config, j.dump());
  }
  std::vector<std::string> args() const {
    return {"run", "--weights", weights, "--config", config, "--input", input, "--output", output};
  }
};

struct Malformed {
  const char* name;
  // Breaks the fixture and returns the command line.
  std::function<std::vector<std::string>(Fixture&)> setup;
  int exit_code;
  std::vector<std::string> mentions;  // substrings of stderr
};

std::vector<std::string> with(std::vector<std::string> a, const std::vector<std::string>& more) {
  a.insert(a.end(), more.begin(), more.end());
  return a;
}

const std::vector<Malformed>& malformed_table() {
  static const std::vector<Malformed> table = {
      {"truncated weights file (cut in the data section)",
       [](Fixture& f) {
         fs::resize_file(f.weights, fs::file_size(f.weights) / 2);
         return f.args();
       },
       1, {"w.safetensors: tensor '", "run past the"}},
      {"file shorter than the 8-byte header length",
       [](Fixture& f) {
         write_text(f.weights, "abc");
         return f.args();
       },
       1, {"w.safetensors", "too short for the 8-byte header length"}},
      {"header length beyond the file",
       [](Fixture& f) {
         write_raw(f.weights, "{}", 8, 4096);
         return f.args();
       },
       1, {"w.safetensors", "header length 4096 exceeds"}},
      {"header that is not JSON",
       [](Fixture& f) {
         write_raw(f.input, R"({"hidden_states": {"dtype": "F32", "shape": [1, 3,)", 16);
         return f.args();
       },
       1, {"in.safetensors", "header is not valid JSON"}},
      {"data_offsets out of range",
       [](Fixture& f) {
         write_raw(f.input, R"({"hidden_states":{"dtype":"F32","shape":[1,3,64],"data_offsets":[0,768]}})", 100);
         return f.args();
       },
       1, {"in.safetensors", "tensor 'hidden_states'", "data_offsets [0, 768) run past the 100-byte data section"}},
      {"overlapping data_offsets",
       [](Fixture& f) {
         write_raw(f.input,
                   R"({"hidden_states":{"dtype":"F32","shape":[1,3,64],"data_offsets":[0,768]},)"
                   R"("past_key":{"dtype":"F32","shape":[4],"data_offsets":[760,776]}})",
                   776);
         return f.args();
       },
       1, {"in.safetensors", "tensors 'hidden_states' and 'past_key' overlap"}},
      {"unknown dtype",
       [](Fixture& f) {
         write_raw(f.input, R"({"hidden_states":{"dtype":"I64","shape":[1,3,64],"data_offsets":[0,1536]}})", 1536);
         return f.args();
       },
       1, {"in.safetensors", "tensor 'hidden_states'", "unsupported dtype 'I64'"}},
      {"shape and byte count disagree",
       [](Fixture& f) {
         write_raw(f.input, R"({"hidden_states":{"dtype":"F32","shape":[1,3,64],"data_offsets":[0,760]}})", 760);
         return f.args();
       },
       1, {"in.safetensors", "tensor 'hidden_states'", "needs 768 bytes but data_offsets [0, 760) hold 760"}},
      {"weight tensor missing",
       [](Fixture& f) {
         f.write_weights("k_norm.weight");
         return f.args();
       },
       1, {"w.safetensors", "tensor 'k_norm.weight' not found"}},
      {"weight tensor with the wrong shape (transposed o_proj)",
       [](Fixture& f) {
         f.write_weights("", {{"o_proj.weight", {128, 64}}});
         return f.args();
       },
       1, {"w.safetensors", "tensor 'o_proj.weight' has shape [128, 64], expected [64, 128]"}},
      {"weight tensor in F64",
       [](Fixture& f) {
         f.write_weights("", {}, DType::F64);
         return f.args();
       },
       1, {"w.safetensors", "has dtype F64, expected F32, F16 or BF16"}},
      {"input tensor hidden_states missing",
       [](Fixture& f) {
         f.write_input({}, {{"other", {2}}}, false);
         return f.args();
       },
       1, {"in.safetensors: holds neither 'input_ids' [B, T] (to run the whole model) nor 'hidden_states' [B, T, D]",
           "it holds 'other'"}},
      {"hidden_states with the wrong hidden size",
       [](Fixture& f) {
         f.write_input({1, 3, 48});
         return f.args();
       },
       1, {"in.safetensors", "tensor 'hidden_states' has shape [1, 3, 48], expected [B, T, 64]"}},
      {"past_key with the wrong head_dim",
       [](Fixture& f) {
         f.write_input({1, 3, 64}, {{"past_key", {1, 2, 4, 16}}, {"past_value", {1, 2, 4, 16}}});
         return f.args();
       },
       1, {"in.safetensors", "tensor 'past_key' has shape [1, 2, 4, 16], expected [1, 2, 4, 32]"}},
      {"attention_mask with the wrong key count",
       [](Fixture& f) {
         f.write_input({1, 3, 64}, {{"attention_mask", {1, 1, 3, 4}}});
         return f.args();
       },
       1, {"in.safetensors", "tensor 'attention_mask' has shape [1, 1, 3, 4], expected [1, 1, 3, 3]"}},
      {"T = 0",
       [](Fixture& f) {
         f.write_input({1, 0, 64});
         return f.args();
       },
       1, {"in.safetensors", "hidden_states", "batch and tokens must be at least 1"}},
      {"past_key without past_value",
       [](Fixture& f) {
         f.write_input({1, 3, 64}, {{"past_key", {1, 2, 4, 32}}});
         return f.args();
       },
       1, {"in.safetensors", "tensor 'past_value' is missing"}},
      {"heads not divisible by KV heads",
       [](Fixture& f) {
         f.patch_config({{"num_attention_heads", 6}, {"num_key_value_heads", 4}});
         return f.args();
       },
       1, {"config.json", "num_attention_heads (6) must be divisible by num_key_value_heads (4)"}},
      {"odd rotary dimension",
       [](Fixture& f) {
         f.patch_config({{"partial_rotary_factor", 0.3}});
         return f.args();
       },
       1, {"config.json", "partial_rotary_factor", "odd rotary dimension 9"}},
      {"config key with the wrong type",
       [](Fixture& f) {
         f.patch_config({{"num_attention_heads", "4"}});
         return f.args();
       },
       1, {"config.json", "key 'num_attention_heads' must be a positive integer, got \"4\""}},
      {"config.json that is not JSON",
       [](Fixture& f) {
         write_text(f.config, "{\"hidden_size\": 64,");
         return f.args();
       },
       1, {"config.json", "not valid JSON"}},
      {"an unknown RoPE type (longrope) refused",
       [](Fixture& f) {
         f.patch_config({{"rope_scaling", {{"rope_type", "longrope"}, {"factor", 4.0}}}});
         return f.args();
       },
       1, {"config.json", "rope_scaling.rope_type", "\"longrope\"", "default, linear, dynamic, yarn, llama3"}},
      {"a RoPE scaling factor below 1",
       [](Fixture& f) {
         f.patch_config({{"rope_scaling", {{"rope_type", "linear"}, {"factor", 0.5}}}});
         return f.args();
       },
       1, {"config.json", "rope_scaling.factor", ">= 1", "0.5"}},
      {"both gate flags true",
       [](Fixture& f) {
         f.patch_config({{"headwise_attn_output_gate", true}});
         return f.args();
       },
       1, {"config.json", "'headwise_attn_output_gate' and 'elementwise_attn_output_gate' are both true"}},
      {"a value gate with its rows in q_proj (official_grouped)",
       [](Fixture& f) {
         f.patch_config({{"gate_position", "value"}});
         return f.args();
       },
       1, {"config.json", "gate_layout", "'official_grouped' cannot be used with gate_position 'value'"}},
      {"a dense headwise gate",
       [](Fixture& f) {
         f.patch_config({{"gate_position", "dense"}, {"gate_layout", "separate"}, {"gate_kind", "headwise"}});
         return f.args();
       },
       1, {"config.json", "gate_kind", "elementwise only"}},
      {"an unknown gate activation",
       [](Fixture& f) {
         f.patch_config({{"gate_activation", "tanh"}});
         return f.args();
       },
       1, {"config.json", "gate_activation", "one of sigmoid, silu, ns_sigmoid, identity"}},
      {"a value gate_proj of the sdpa gate's shape",
       [](Fixture& f) {
         f.patch_config({{"gate_position", "value"}, {"gate_layout", "separate"}});
         f.cfg.gate_position = GatePosition::value;
         f.cfg.gate_layout = GateLayout::separate;
         f.write_weights("", {{"gate_proj.weight", {128, 64}}});
         return f.args();
       },
       1, {"w.safetensors", "tensor 'gate_proj.weight' has shape [128, 64], expected [64, 64]"}},
      {"input file missing",
       [](Fixture& f) {
         fs::remove(f.input);
         return f.args();
       },
       1, {"in.safetensors: cannot open: No such file or directory"}},
      {"input that is a directory",
       [](Fixture& f) {
         fs::remove(f.input);
         fs::create_directories(f.input);
         return f.args();
       },
       1, {"in.safetensors: not a regular file"}},
      {"weights path missing",
       [](Fixture& f) {
         fs::remove(f.weights);
         return f.args();
       },
       1, {"w.safetensors: no such file or directory"}},
      {"config file missing",
       [](Fixture& f) {
         fs::remove(f.config);
         return f.args();
       },
       1, {"config.json: cannot open"}},
      {"directory with a bad model.safetensors.index.json",
       [](Fixture& f) {
         const fs::path d = f.root / "model";
         fs::create_directories(d);
         write_text(d / "config.json", f.config_json.dump());
         write_text(d / "model.safetensors.index.json", "{\"weight_map\": {\"q_proj.weight\": ");
         return std::vector<std::string>{"run", "--weights", d.string(), "--input", f.input, "--output", f.output};
       },
       1, {"model.safetensors.index.json: not valid JSON"}},
      {"index naming a shard outside the directory",
       [](Fixture& f) {
         const fs::path d = f.root / "model";
         fs::create_directories(d);
         write_text(d / "config.json", f.config_json.dump());
         write_text(d / "model.safetensors.index.json",
                    R"({"weight_map": {"q_proj.weight": "../w.safetensors"}})");
         return std::vector<std::string>{"run", "--weights", d.string(), "--input", f.input, "--output", f.output};
       },
       1, {"model.safetensors.index.json", "'../w.safetensors'", "not a plain file name"}},
      {"index listing a tensor its shard lacks",
       [](Fixture& f) {
         const fs::path d = f.root / "model";
         fs::create_directories(d);
         write_text(d / "config.json", f.config_json.dump());
         fs::copy_file(f.weights, d / "model-00001-of-00001.safetensors");
         write_text(d / "model.safetensors.index.json",
                    R"({"weight_map": {"q_proj.weight": "model-00001-of-00001.safetensors",)"
                    R"( "lm_head.weight": "model-00001-of-00001.safetensors"}})");
         return std::vector<std::string>{"run", "--weights", d.string(), "--input", f.input, "--output", f.output};
       },
       1, {"model.safetensors.index.json", "tensor 'lm_head.weight'", "does not hold it"}},
      {"directory with neither model.safetensors nor an index",
       [](Fixture& f) {
         const fs::path d = f.root / "model";
         fs::create_directories(d);
         write_text(d / "config.json", f.config_json.dump());
         return std::vector<std::string>{"run", "--weights", d.string(), "--input", f.input, "--output", f.output};
       },
       1, {"model: directory holds neither model.safetensors nor model.safetensors.index.json"}},
      {"index naming a shard that does not exist",
       [](Fixture& f) {
         const fs::path d = f.root / "model";
         fs::create_directories(d);
         write_text(d / "config.json", f.config_json.dump());
         write_text(d / "model.safetensors.index.json",
                    R"({"metadata": {"total_size": 0}, "weight_map": {"q_proj.weight": "model-00001-of-00002.safetensors"}})");
         return std::vector<std::string>{"run", "--weights", d.string(), "--input", f.input, "--output", f.output};
       },
       1, {"model.safetensors.index.json: shard 'model-00001-of-00002.safetensors'", "cannot open"}},
      {"directory without config.json",
       [](Fixture& f) {
         const fs::path d = f.root / "model";
         fs::create_directories(d);
         fs::copy_file(f.weights, d / "model.safetensors");
         return std::vector<std::string>{"run", "--weights", d.string(), "--input", f.input, "--output", f.output};
       },
       1, {"config.json: cannot open"}},
      {"--layer on a file with bare names",
       [](Fixture& f) { return with(f.args(), {"--layer", "0"}); },
       1, {"w.safetensors: tensor 'model.layers.0.", "not found (the checkpoint has bare names", "use layer -1"}},
      {"a device index that does not exist",
       [](Fixture& f) { return with(f.args(), {"--device", "99"}); },
       1, {"device index 99 does not exist"}},
      {"unknown option",
       [](Fixture& f) { return with(f.args(), {"--bogus"}); },
       2, {"unknown option '--bogus'"}},
      {"--output is the input file",
       [](Fixture& f) {
         return std::vector<std::string>{"run", "--weights", f.weights, "--config", f.config, "--input", f.input,
                                         "--output", f.input};
       },
       2, {"is the same file as", "in.safetensors"}},
      {"missing --output",
       [](Fixture& f) {
         return std::vector<std::string>{"run", "--weights", f.weights, "--config", f.config, "--input", f.input};
       },
       2, {"--output is required"}},
      {"missing --input",
       [](Fixture& f) {
         return std::vector<std::string>{"run", "--weights", f.weights, "--config", f.config, "--output", f.output};
       },
       2, {"--input is required"}},
      {"--config missing for a .safetensors file",
       [](Fixture& f) {
         return std::vector<std::string>{"run", "--weights", f.weights, "--input", f.input, "--output", f.output};
       },
       2, {"--config is required", "w.safetensors"}},
      {"--precision not one of fp32/fp16/bf16",
       [](Fixture& f) { return with(f.args(), {"--precision", "fp8"}); },
       2, {"--precision must be fp32, fp16 or bf16, got 'fp8'"}},
      {"--layer not a number",
       [](Fixture& f) { return with(f.args(), {"--layer", "three"}); },
       2, {"--layer must be an integer", "'three'"}},
      {"option without its value",
       [](Fixture& f) { return with(f.args(), {"--device"}); },
       2, {"--device needs a value"}},
  };
  return table;
}

}  // namespace

TEST_CASE("cli: malformed inputs exit 1 or 2 with a message naming the problem, and write nothing") {
  const uint32_t seed = std::random_device{}();
  std::mt19937 rng(seed);
  TempDir dir("malformed");
  const auto& table = malformed_table();
  CHECK(table.size() >= 15);
  std::vector<std::vector<std::string>> jobs;
  std::vector<std::string> outputs;
  for (size_t i = 0; i < table.size(); ++i) {
    const fs::path sub = dir.path / "m" += std::to_string(i);
    fs::create_directories(sub);
    Fixture f(sub, rng);
    jobs.push_back(table[i].setup(f));
    outputs.push_back(f.output);
  }
  const auto results = run_all(jobs, dir.path);
  for (size_t i = 0; i < table.size(); ++i) {
    const Malformed& m = table[i];
    const CliResult& r = results[i];
    const std::string name = m.name;
    CAPTURE(name);
    INFO("command: " << r.command);
    INFO("stderr: " << r.err);
    check_clean_exit(r);
    CHECK((r.code == 1 || r.code == 2));
    CHECK(r.code == m.exit_code);
    for (const std::string& s : m.mentions) {
      CAPTURE(s);
      CHECK(r.err.find(s) != std::string::npos);
    }
    CHECK(r.err.starts_with("vkgate: "));
    CHECK(r.out.empty());
    // Nothing written: neither the output nor a leftover temporary next to it.
    const fs::path out(outputs[i]);
    CHECK_MESSAGE(!fs::exists(out), "the output file exists after a failed run");
    for (const auto& e : fs::directory_iterator(out.parent_path()))
      CHECK_MESSAGE(!e.path().filename().string().starts_with(out.filename().string()),
                    "leftover " << e.path());
  }
}

// Regressions: a JSON number beyond the range of double (1e400) is an
// out_of_range error of the parser, not a parse_error, and huge head counts
// once overflowed int in BlockConfig::q_proj_rows(). Both must name the file.
TEST_CASE("cli: numbers beyond double range and int overflow in config.json name the file") {
  const uint32_t seed = std::random_device{}();
  std::mt19937 rng(seed);
  TempDir dir("known");
  struct Row {
    const char* name;
    std::function<std::vector<std::string>(Fixture&)> setup;
    std::vector<std::string> mentions;
  };
  const std::vector<Row> rows = {
      {"rms_norm_eps 1e400 in config.json",
       [](Fixture& f) {
         write_text(f.config, R"({"model_type": "qwen3", "hidden_size": 64, "num_attention_heads": 4, "rms_norm_eps": 1e400})");
         return f.args();
       },
       {"config.json"}},
      {"total_size 1e400 in model.safetensors.index.json",
       [](Fixture& f) {
         const fs::path d = f.root / "model";
         fs::create_directories(d);
         write_text(d / "config.json", f.config_json.dump());
         write_text(d / "model.safetensors.index.json", R"({"metadata": {"total_size": 1e400}, "weight_map": {}})");
         return std::vector<std::string>{"run", "--weights", d.string(), "--input", f.input, "--output", f.output};
       },
       {"model.safetensors.index.json"}},
      {"2147483647 heads of 1024 dims",
       [](Fixture& f) {
         f.patch_config({{"num_attention_heads", 2147483647}, {"num_key_value_heads", 1}, {"head_dim", 1024}});
         return f.args();
       },
       {"config.json"}},
  };
  std::vector<std::vector<std::string>> jobs;
  std::vector<std::string> outputs;
  for (size_t i = 0; i < rows.size(); ++i) {
    const fs::path sub = dir.path / "k" += std::to_string(i);
    fs::create_directories(sub);
    Fixture f(sub, rng);
    jobs.push_back(rows[i].setup(f));
    outputs.push_back(f.output);
  }
  const auto results = run_all(jobs, dir.path);
  for (size_t i = 0; i < rows.size(); ++i) {
    const std::string name = rows[i].name;
    CAPTURE(name);
    const CliResult& r = results[i];
    INFO("stderr: " << r.err);
    check_clean_exit(r);
    CHECK(r.code == 1);
    for (const std::string& m : rows[i].mentions) {
      CAPTURE(m);
      CHECK(r.err.find(m) != std::string::npos);
    }
    CHECK(r.err.find("[json.exception") == std::string::npos);
    CHECK(r.err.find("[-") == std::string::npos);  // a negative expected dimension
    CHECK(!fs::exists(outputs[i]));
  }
}

TEST_CASE("cli: a failed write leaves no output and no temporary file") {
  // The run succeeds on the device, then the output directory is missing.
  const uint32_t seed = std::random_device{}();
  std::mt19937 rng(seed);
  TempDir dir("write");
  Fixture f(dir.path, rng);
  const std::string out = (dir.path / "missing_dir" / "out.safetensors").string();
  auto args = f.args();
  args.back() = out;
  for (const auto& d : device_args()) args.push_back(d);
  const auto r = run_cli(args, dir.path);
  INFO("stderr: " << r.err);
  check_clean_exit(r);
  CHECK(r.code == 1);
  CHECK(r.err.find("missing_dir/out.safetensors") != std::string::npos);
  CHECK(!fs::exists(dir.path / "missing_dir"));
}


namespace {

// A small block's weights, config and input in `dir`; returns the `run` arguments without --output.
std::vector<std::string> small_run(const TempDir& dir, std::mt19937& rng, const std::function<void(std::vector<float>&)>& edit_hidden = {},
                                   const std::function<void(std::map<std::string, std::vector<float>>&)>& edit_weights = {}) {
  const BlockConfig c = qwen3_next(shape(64, 4, 2, 16));
  test::RandomWeights w(c, rng);
  if (edit_weights) edit_weights(w.data);
  FileBuilder wfile, ifile;
  for (const TensorSpec& spec : expected_weights(c)) wfile.add(spec.name, spec.shape, w.data.at(spec.name), DType::F32);
  auto hidden = random_vec(rng, 2 * 3 * 64);
  if (edit_hidden) edit_hidden(hidden);
  ifile.add("hidden_states", {2, 3, 64}, hidden, DType::F32);
  wfile.write(dir / "weights.safetensors");
  ifile.write(dir / "input.safetensors");
  write_text(dir / "config.json",
             json{{"model_type", "qwen3_next"}, {"hidden_size", 64}, {"num_attention_heads", 4},
                  {"num_key_value_heads", 2}, {"head_dim", 16}}
                 .dump());
  std::vector<std::string> args{"run", "--weights", dir / "weights.safetensors", "--config", dir / "config.json",
                                "--input", dir / "input.safetensors"};
  for (const auto& a : device_args()) args.push_back(a);
  return args;
}

std::vector<std::string> with(std::vector<std::string> args, std::initializer_list<std::string> more) {
  args.insert(args.end(), more);
  return args;
}

size_t line_count(const std::string& s) { return size_t(std::count(s.begin(), s.end(), '\n')); }

}  // namespace

TEST_CASE("cli: no Vulkan driver at all (VK_LOADER_DRIVERS_DISABLE='*'): one line on stderr, exit 1") {
  TempDir dir("nodriver");
  std::mt19937 rng(11);
  const auto run = small_run(dir, rng);
  const std::vector<std::vector<std::string>> commands = {
      {"devices"}, {"demo", "--tokens", "2"}, {"bench", "--op", "rmsnorm", "--rows", "2", "--dim", "8"},
      with(run, {"--output", dir / "out.safetensors"})};
  for (const auto& args : commands) {
    const CliResult r = run_cli(args, dir.path, {"VK_LOADER_DRIVERS_DISABLE=*"});
    INFO("command: " << r.command);
    INFO("stderr: " << r.err);
    REQUIRE(r.exited);
    CHECK(r.code == 1);
    CHECK(line_count(r.err) == 1);
    CHECK(r.err.rfind("vkgate: creating the Vulkan instance: no Vulkan driver was found", 0) == 0);
    CHECK(r.err.find("VK_LOADER_DRIVERS_DISABLE='*' disables drivers") != std::string::npos);
    CHECK(r.out.find("device:") == std::string::npos);
  }
  CHECK_FALSE(fs::exists(dir / "out.safetensors"));
}

TEST_CASE("cli: NaN and Inf in the input or the weights are refused by default, --no-check-finite lets them through") {
  TempDir dir("finite");
  std::mt19937 rng(12);
  const std::string out = dir / "out.safetensors";
  SUBCASE("NaN in hidden_states: the input file, the tensor and the element are named") {
    const auto args = small_run(dir, rng, [](std::vector<float>& h) { h[(1 * 3 + 2) * 64 + 7] = NAN; });
    CliResult r = run_cli(with(args, {"--output", out}), dir.path);
    check_clean_exit(r);
    CHECK(r.code == 1);
    CHECK(r.err == "vkgate: " + (dir / "input.safetensors") +
                       ": tensor 'hidden_states' holds NaN at [1, 2, 7] (--no-check-finite lets it through)\n");
    CHECK_FALSE(fs::exists(out));
    r = run_cli(with(args, {"--output", out, "--check-finite"}), dir.path);
    CHECK(r.code == 1);
    r = run_cli(with(args, {"--output", out, "--no-check-finite"}), dir.path);
    check_clean_exit(r);
    REQUIRE(r.code == 0);
    const SafetensorsFile f(out);
    const auto y = f.at("output").to_f32();
    CHECK(std::isnan(y[(1 * 3 + 2) * 64 + 7]));
  }
  SUBCASE("+Inf in a weight: the weights file and the weight are named") {
    const auto args = small_run(dir, rng, {}, [](auto& w) { w["o_proj.weight"][65] = INFINITY; });
    const CliResult r = run_cli(with(args, {"--output", out}), dir.path);
    check_clean_exit(r);
    CHECK(r.code == 1);
    CHECK(r.err == "vkgate: " + (dir / "weights.safetensors") +
                       ": weight 'o_proj.weight' holds +Inf at [1, 1] (--no-check-finite lets it through)\n");
    CHECK_FALSE(fs::exists(out));
  }
  SUBCASE("a hidden_states row of 1e30 (fp32 RMSNorm overflow) is refused, naming the row") {
    const auto args = small_run(dir, rng, [](std::vector<float>& h) {
      for (int d = 0; d < 64; ++d) h[size_t(64 + d)] = 1e30f;
    });
    const CliResult r = run_cli(with(args, {"--output", out}), dir.path);
    check_clean_exit(r);
    CHECK(r.code == 1);
    CHECK(r.err.rfind("vkgate: " + (dir / "input.safetensors") + ": hidden_states row [0, 1] has a root mean square of 1e+30", 0) == 0);
    CHECK_FALSE(fs::exists(out));
  }
}

TEST_CASE("cli: the same run twice, in two processes, writes byte-identical output files") {
  TempDir dir("determinism");
  std::mt19937 rng(13);
  const auto args = small_run(dir, rng);
  const auto results = run_all({with(args, {"--output", dir / "a.safetensors"}), with(args, {"--output", dir / "b.safetensors"})}, dir.path);
  for (const auto& r : results) {
    check_clean_exit(r);
    REQUIRE(r.code == 0);
  }
  const std::string a = read_text(dir / "a.safetensors"), b = read_text(dir / "b.safetensors");
  CHECK(a.size() > 2 * 3 * 64 * 4);
  CHECK(a == b);
}

// VKGATE_PIPELINE_STATS is a tuning aid: with the extension each pipeline's
// statistics are printed, without it one line says so; the run itself is unchanged.
TEST_CASE("cli: VKGATE_PIPELINE_STATS prints each pipeline's compiler statistics, or why it cannot") {
  TempDir dir("pipeline_stats");
  std::vector<std::string> args{"bench", "--op", "rmsnorm", "--rows", "2", "--dim", "64", "--reps", "1"};
  for (const auto& a : device_args()) args.push_back(a);
  const auto r = run_cli(args, dir.path, {"VKGATE_PIPELINE_STATS=1"});
  check_clean_exit(r);
  CHECK(r.code == 0);
  CHECK(r.out.find("rmsnorm 2x64") != std::string::npos);
  const bool stats = r.err.find("vkgate: pipeline rmsnorm") != std::string::npos;
  const bool lacks = r.err.find("lacks VK_KHR_pipeline_executable_properties") != std::string::npos;
  CHECK_MESSAGE(stats != lacks, "stderr: " << r.err);
}

}  // namespace test_cli_faults
#endif  // VKGATE_CLI
