// Smaller things a new user meets, as child processes (issue 25, item 6):
// bench sizes of zero are bad usage; generate names the weights directory on a
// NaN weight and takes --no-check-finite as run does; an input file holding no
// tensor run knows says what it looked for and what it found; "1 prompt id",
// "1 id"; no tokens/s when no decode step ran; run --stats times the recorded
// work, not the driver's first compilation of the pipelines; --version; bench
// --model with prompts shorter than its self-check.
#ifdef VKGATE_CLI

#include "doctest.hpp"

#include <chrono>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "cli_harness.hpp"
#include "golden.hpp"
#include "model_dir.hpp"
#include "model_weights.hpp"
#include "vkgate/version.hpp"

namespace test_cli_usage {

namespace {

using nlohmann::json;
using namespace vkgate;
using namespace vkgate::cli_test;

using test::w1_dir;

// Rewrites a single-file model's weights with element `index` of `tensor` set to NaN.
void put_nan(const fs::path& file, const std::string& tensor, size_t index) {
  FileBuilder f;
  {
    const SafetensorsFile in(file.string());
    for (const std::string& name : in.names()) {
      std::vector<float> v = in.at(name).to_f32();
      if (name == tensor) v.at(index) = NAN;
      f.add(name, in.at(name).shape, v, DType::F32);
    }
  }
  f.write(file.string());
}

size_t line_count(const std::string& s) { return size_t(std::count(s.begin(), s.end(), '\n')); }

// `op`'s arguments, then `extra`, on the test device.
std::vector<std::string> with_args(const std::vector<std::string>& op, const std::vector<std::string>& extra) {
  std::vector<std::string> a = op;
  a.insert(a.end(), extra.begin(), extra.end());
  return with_device(a);
}

// Each of `runs` refused (a non-zero exit, cleanly) with its `messages` entry on stderr.
void check_refused(const std::vector<CliResult>& runs, const std::vector<std::string>& messages) {
  REQUIRE(runs.size() == messages.size());
  for (size_t i = 0; i < runs.size(); ++i) {
    INFO(runs[i].command << "\nstderr: " << runs[i].err);
    check_clean_exit(runs[i]);
    CHECK(runs[i].code != 0);
    CHECK(runs[i].err.find(messages[i]) != std::string::npos);
  }
}

// `args` run with `env` (a tile switch set wrong) refused with `message`, before any `row` was printed.
void check_env_refused(const std::vector<std::string>& args, const fs::path& dir, const std::string& env,
                       const std::string& message, const std::string& row) {
  const CliResult r = run_cli(args, dir, {env});
  INFO("stderr: " << r.err);
  check_clean_exit(r);
  CHECK(r.code != 0);
  CHECK(r.err.find(message) != std::string::npos);
  CHECK(r.out.find(row) == std::string::npos);
}

}  // namespace

TEST_CASE("cli: bench with a size of zero (or below) is bad usage for every op: exit 2 naming the flag") {
  // {the flag that is wrong, the arguments}
  const std::vector<std::pair<std::string, std::vector<std::string>>> cases = {
      {"--m", {"--op", "matmul", "--m", "0", "--n", "8", "--k", "8"}},
      {"--n", {"--op", "matmul", "--m", "8", "--n", "0", "--k", "8"}},
      {"--k", {"--op", "matmul", "--m", "8", "--n", "8", "--k", "0"}},
      {"--m", {"--op", "matmul", "--m", "-1", "--n", "8", "--k", "8"}},
      {"--T", {"--op", "attention", "--T", "0", "--heads", "2", "--head-dim", "8"}},
      {"--heads", {"--op", "attention", "--T", "4", "--heads", "0", "--head-dim", "8"}},
      {"--kv-heads", {"--op", "attention", "--T", "4", "--heads", "2", "--kv-heads", "0", "--head-dim", "8"}},
      {"--head-dim", {"--op", "attention", "--T", "4", "--heads", "2", "--head-dim", "0"}},
      {"--batch", {"--op", "attention", "--T", "4", "--heads", "2", "--head-dim", "8", "--batch", "0"}},
      {"--causal", {"--op", "attention", "--T", "4", "--heads", "2", "--head-dim", "8", "--causal", "2"}},
      {"--rows", {"--op", "rmsnorm", "--rows", "0", "--dim", "8"}},
      {"--dim", {"--op", "rmsnorm", "--rows", "2", "--dim", "0"}},
      {"--rows", {"--op", "rope", "--rows", "0", "--heads", "2", "--head-dim", "8"}},
      {"--heads", {"--op", "rope", "--rows", "2", "--heads", "0", "--head-dim", "8"}},
      {"--head-dim", {"--op", "rope", "--rows", "2", "--heads", "2", "--head-dim", "0"}},
      {"--rotary", {"--op", "rope", "--rows", "2", "--heads", "2", "--head-dim", "8", "--rotary", "-2"}},
      {"--rows", {"--op", "softmax", "--rows", "0", "--keys", "8"}},
      {"--keys", {"--op", "softmax", "--rows", "2", "--keys", "0"}},
      {"--rows", {"--op", "gate", "--rows", "0", "--heads", "2", "--head-dim", "8"}},
      {"--heads", {"--op", "gate", "--rows", "2", "--heads", "0", "--head-dim", "8"}},
      {"--head-dim", {"--op", "gate", "--rows", "2", "--heads", "2", "--head-dim", "0"}},
      {"--gate-width", {"--op", "gate", "--rows", "2", "--heads", "2", "--head-dim", "8", "--gate-width", "0"}},
      {"--T", {"--op", "gla", "--T", "0", "--heads", "2", "--dk", "8", "--dv", "8", "--dim", "32"}},
      {"--heads", {"--op", "gla", "--T", "4", "--heads", "0", "--dk", "8", "--dv", "8", "--dim", "32"}},
      {"--dk", {"--op", "gla", "--T", "4", "--heads", "2", "--dk", "0", "--dv", "8", "--dim", "32"}},
      {"--dv", {"--op", "gla", "--T", "4", "--heads", "2", "--dk", "8", "--dv", "0", "--dim", "32"}},
      {"--dim", {"--op", "gla", "--T", "4", "--heads", "2", "--dk", "8", "--dv", "8", "--dim", "0"}},
      {"--sweep-max", {"--op", "gla", "--sweep", "--sweep-max", "0", "--heads", "2", "--dk", "8", "--dv", "8"}},
      {"--T", {"--block", "--T", "0"}},
      {"--batch", {"--block", "--batch", "0"}},
  };
  TempDir dir("bench_zero");
  std::vector<std::vector<std::string>> jobs;
  for (const auto& [flag, args] : cases) {
    std::vector<std::string> a{"bench"};
    a.insert(a.end(), args.begin(), args.end());
    jobs.push_back(with_device(a));
  }
  const std::vector<CliResult> results = run_all(jobs, dir.path);
  for (size_t i = 0; i < cases.size(); ++i) {
    const CliResult& r = results[i];
    check_clean_exit(r);
    INFO("stderr: " << r.err);
    CHECK(r.code == 2);
    CHECK(line_count(r.err) == 1);
    CHECK(r.err.rfind("vkgate: " + cases[i].first + " must be an integer in ", 0) == 0);
    CHECK(r.out.empty());  // refused before a device was opened
  }
}

TEST_CASE("cli: bench refuses what its flags alone make wrong before it opens a device (exit 2, not the device's error)") {
  // A device no selector matches: an argument checked only after the device
  // opened would end in the selector's error (exit 1) instead.
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases{
      {{"--op", "matmull"}, "unknown --op 'matmull'"},
      {{"--model-shape", "qwen3-7b"}, "unknown --model-shape 'qwen3-7b' (qwen3-0.6b, qwen3-30b-a3b, qwen3-next-80b-a3b, qwen3.5-35b-a3b)"},
      {{"--model-shape", "qwen3-0.6b", "--experts", "8"}, "--experts needs a sparse model (qwen3-0.6b is dense)"},
      {{"--model-shape", "qwen3-30b-a3b", "--experts", "4"}, "--experts 4 is fewer than the model's top-8"},
      {{"--op", "gdn", "--T", "4", "--mode", "chunked"}, "--mode must be recurrent, chunk, auto or both, got 'chunked'"},
      {{"--op", "qmatmul", "--m", "1", "--n", "8", "--k", "256"}, "--op qmatmul needs --quant T"},
      {{"--op", "matmul", "--m", "8", "--n", "8", "--k", "8", "--tiles", "all"}, "add --dtype f16"},
      {{"--op", "matmul", "--m", "8", "--n", "8", "--k", "8", "--dtype", "f16", "--tiles", "direct,2x2"},
       "--tiles: '2x2' is neither all, direct nor a tile WMxWNxFMxFNxTK[s1][h]"},
      {{"--op", "qmatmul", "--m", "1", "--n", "8", "--k", "256", "--quant", "q4_k", "--tiles", "slices9"},
       "--tiles: 'slices9' is neither all, chunks nor a tile slicesCxU"},
      {{"--op", "attention", "--T", "8", "--heads", "2", "--head-dim", "64", "--dtype", "f16", "--tiles", "all,,"},
       "--tiles: '' is neither all nor a tile SxK[p|h]"},
  };
  TempDir dir("bench_early");
  std::vector<std::vector<std::string>> jobs;
  for (const auto& [args, message] : cases) {
    std::vector<std::string> a{"bench", "--device", "no device is named this"};
    a.insert(a.end(), args.begin(), args.end());
    jobs.push_back(a);
  }
  const std::vector<CliResult> results = run_all(jobs, dir.path);
  for (size_t i = 0; i < cases.size(); ++i) {
    const CliResult& r = results[i];
    INFO(r.command << "\nstderr: " << r.err);
    check_clean_exit(r);
    CHECK(r.code == 2);
    CHECK(r.err.find(cases[i].second) != std::string::npos);
    CHECK(r.out.empty());
  }
}

TEST_CASE("cli: generate on a NaN weight names the weights directory and --no-check-finite, which lets it through") {
  std::mt19937 rng(25);
  test::TinyModel shape;
  ModelDir m(shape, rng, DType::F32, false);
  put_nan(m.dir / "model.safetensors", "model.layers.1.mlp.down_proj.weight", 5);
  const std::string ids = m.ids_file("ids.safetensors", {5, 17}, 1, 2);
  auto generate = [&](std::vector<std::string> extra) {
    std::vector<std::string> a{"generate", "--weights", m.path(), "--prompt-ids", "5,17", "--max-new-tokens", "2"};
    a.insert(a.end(), extra.begin(), extra.end());
    return with_device(a);
  };
  const std::vector<CliResult> r =
      run_all({generate({}), generate({"--check-finite"}), generate({"--no-check-finite"}),
               with_device({"run", "--weights", m.path(), "--input", ids, "--output", m.dir / "out.safetensors"})},
              m.dir.path);
  const std::string want = "vkgate: " + m.path() +
                           ": weight 'model.layers.1.mlp.down_proj.weight' holds NaN at [0, 5] (--no-check-finite lets it through)\n";
  for (const size_t i : {0, 1, 3}) {
    check_clean_exit(r[i]);
    CHECK(r[i].code == 1);
    CHECK(r[i].err == want);  // generate says what run says
    CHECK(r[i].out.empty());
  }
  check_clean_exit(r[2]);
  INFO("stderr: " << r[2].err);
  CHECK(r[2].code == 0);
  CHECK(!fs::exists(m.dir / "out.safetensors"));
  // Documented with run's.
  const CliResult help = run_cli({"generate", "--help"}, m.dir.path);
  CHECK(help.out.find("--no-check-finite") != std::string::npos);
}

TEST_CASE("cli: run on an input file holding neither input_ids nor hidden_states says which it looked for and what it found") {
  std::mt19937 rng(26);
  test::TinyModel shape;
  ModelDir m(shape, rng, DType::F32, false);
  const std::string typo = m.dir / "typo.safetensors", empty = m.dir / "empty.safetensors";
  {
    FileBuilder f;
    const std::vector<int64_t> ids{1, 2, 3};
    f.add_ids("input_id", {1, 3}, ids);
    const std::vector<float> x{1, 2};
    f.add("other", {2}, x, DType::F32);
    f.write(typo);
    FileBuilder none;
    none.write(empty);
  }
  const std::string out = m.dir / "out.safetensors";
  const std::vector<CliResult> r =
      run_all({with_device({"run", "--weights", m.path(), "--input", typo, "--output", out}),
               with_device({"run", "--weights", w1_dir(), "--input", empty, "--output", out})},
              m.dir.path);
  const std::string looked = ": holds neither 'input_ids' [B, T] (to run the whole model) nor 'hidden_states' [B, T, D] "
                             "(to run one block or layer); it holds ";
  check_clean_exit(r[0]);
  CHECK(r[0].code == 1);
  CHECK(r[0].err == "vkgate: " + typo + looked + "'input_id', 'other'\n");
  check_clean_exit(r[1]);
  CHECK(r[1].code == 1);
  CHECK(r[1].err == "vkgate: " + empty + looked + "no tensors\n");
  CHECK(!fs::exists(out));
}

TEST_CASE("cli: generate counts 1 prompt id and 1 id in the singular, and gives no tokens/s when no decode step ran") {
  std::mt19937 rng(27);
  test::TinyModel shape;
  ModelDir m(shape, rng, DType::F32, false);
  auto generate = [&](const char* prompt, const char* n, bool json_out) {
    std::vector<std::string> a{"generate", "--weights", m.path(), "--prompt-ids", prompt, "--max-new-tokens", n, "--ignore-eos"};
    if (json_out) a.push_back("--json");
    return with_device(a);
  };
  const std::vector<CliResult> r =
      run_all({generate("5", "1", false), generate("5", "1", true), generate("5,17", "3", false), generate("5,17", "3", true)},
              m.dir.path);
  for (const CliResult& c : r) {
    check_clean_exit(c);
    CHECK(c.code == 0);
  }
  INFO("stderr: " << r[0].err);
  CHECK(r[0].err.find(": 1 prompt id, up to 1 new\n") != std::string::npos);
  CHECK(r[0].err.find("vkgate: 1 id (length); prompt ") != std::string::npos);
  CHECK(r[0].err.find("tokens/s n/a (no decode step)") != std::string::npos);
  CHECK(r[0].err.find("0.00 tokens/s") == std::string::npos);
  const json one = json::parse(r[1].out);
  CHECK(one.at("tokens_per_s").is_null());
  CHECK(one.at("step_ms").empty());
  CHECK(one.at("generated").size() == 1);

  CHECK(r[2].err.find(": 2 prompt ids, up to 3 new\n") != std::string::npos);
  CHECK(r[2].err.find("vkgate: 3 ids (length); prompt ") != std::string::npos);
  CHECK(r[2].err.find(" tokens/s decoding") != std::string::npos);
  const json three = json::parse(r[3].out);
  CHECK(three.at("tokens_per_s").get<double>() > 0);
  CHECK(three.at("step_ms").size() == 2);
}

// CPU drivers (llvmpipe) compile a pipeline's code at its first dispatch; with
// Mesa's shader cache off every run compiles. The GPU time run reports must be
// that of the recorded work alone: before the fix the first run's "GPU" time
// was nearly the whole run, compilation included.
TEST_CASE("cli: run --stats reports the recorded work's GPU time, not the pipelines' first compilation") {
  TempDir dir("stats_time");
  const auto t0 = std::chrono::steady_clock::now();
  const CliResult r = run_cli(with_device({"run", "--weights", w1_dir(), "--input", w1_dir() + "/input.safetensors", "--output",
                                           dir / "out.safetensors", "--stats"}),
                              dir.path, {"MESA_SHADER_CACHE_DISABLE=true"});
  const double wall_us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
  check_clean_exit(r);
  REQUIRE(r.code == 0);
  const size_t at = r.out.find(", GPU ");
  REQUIRE(at != std::string::npos);
  const double gpu_us = std::strtod(r.out.c_str() + at + 6, nullptr);
  INFO("stdout: " << r.out);
  INFO("GPU " << gpu_us << " us of a run of " << wall_us << " us");
  CHECK(gpu_us > 0);
  CHECK(gpu_us < 0.2 * wall_us);
}

TEST_CASE("cli: --version and version print the project's version") {
  TempDir dir("version");
  const std::vector<CliResult> r = run_all({{"--version"}, {"version"}, {"--version", "x"}, {"--help"}}, dir.path);
  for (const CliResult& c : r) check_clean_exit(c);
  CHECK(r[0].code == 0);
  CHECK(r[0].out == std::string("vkgate ") + VKGATE_VERSION_STRING + "\n");
  CHECK(r[1].code == 0);
  CHECK(r[1].out == r[0].out);
  CHECK(r[2].code == 2);
  CHECK(r[3].out.find("vkgate --version") != std::string::npos);
  CHECK(std::string(kVersion) == VKGATE_VERSION_STRING);
}

TEST_CASE("cli: bench --model with prompts shorter than the self-check's 16 tokens") {
  std::mt19937 rng(28);
  test::TinyModel shape;
  ModelDir m(shape, rng, DType::F32, false);
  const std::vector<CliResult> r = run_all(
      {with_device({"bench", "--model", m.path(), "--prompts", "4", "--decode", "2", "--reps", "1"}),
       with_device({"bench", "--model", m.path(), "--prompts", "1,3", "--decode", "1", "--reps", "1", "--json"})},
      m.dir.path);
  for (const CliResult& c : r) {
    check_clean_exit(c);
    INFO("stderr: " << c.err);
    CHECK(c.code == 0);
  }
  CHECK(r[0].out.find("prompt     4: prefill") != std::string::npos);
  CHECK(r[0].out.find("check: a 16-token prompt in one step") != std::string::npos);
  const json doc = json::parse(r[1].out);
  CHECK(doc.at("self_check_nmse").get<double>() <= 1e-8);
  CHECK(doc.at("runs").size() == 2);
}

TEST_CASE("cli: bench --op qmatmul --tiles, and VKGATE_QROWS_TILE, refuse what is not a decode tile by name") {
  TempDir dir("qrows_tiles");
  const std::vector<std::string> product{"bench", "--op", "qmatmul", "--n", "8", "--k", "256", "--quant", "q4_k"};
  check_refused(run_all({with_args(product, {"--m", "1", "--tiles", "slices3"}),
                         with_args(product, {"--m", "9", "--tiles", "all"}),
                         with_args(product, {"--m", "1", "--tiles", "chunks", "--int8"})},
                        dir.path),
                {"'slices3' is neither all, chunks nor a tile slicesCxU", "sweeps the decode kernels: --m 1 to 8",
                 "leave out --int8"});
  check_env_refused(with_args(product, {"--m", "1"}), dir.path, "VKGATE_QROWS_TILE=slices9x1",
                    "VKGATE_QROWS_TILE='slices9x1' is not a decode tile", "qmatmul");
}

TEST_CASE("cli: bench --op attention --tiles, and VKGATE_FLASH_TILE, refuse what is not a flash tile by name") {
  TempDir dir("flash_tiles");
  const std::vector<std::string> op{"bench", "--op", "attention", "--T", "16", "--heads", "2", "--head-dim", "64"};
  check_refused(run_all({with_args(op, {"--dtype", "f16", "--tiles", "4x48"}), with_args(op, {"--tiles", "all"}),
                         with_args(op, {"--dtype", "f16", "--unfused", "--tiles", "all"}),
                         with_device({"bench", "--op", "rmsnorm", "--rows", "2", "--dim", "64", "--tiles", "all"})},
                        dir.path),
                {"'4x48' is neither all nor a tile SxK[p|h]", "add --dtype f16, leave out --unfused",
                 "add --dtype f16, leave out --unfused", "--tiles applies to --op matmul, qmatmul and attention"});
  check_env_refused(with_args(op, {"--dtype", "f16"}), dir.path, "VKGATE_FLASH_TILE=4x32x",
                    "VKGATE_FLASH_TILE='4x32x' is not a flash attention tile", "attention");
}

TEST_CASE("cli: VKGATE_MATVEC_ROWS outside 1 to 16 and VKGATE_CPU_GEMM_ROWS not a multiple of 8 to 64 are refused by name") {
  TempDir dir("tile_rows");
  const std::vector<std::string> product{"bench", "--op", "matmul", "--m", "1", "--n", "8", "--k", "64"};
  for (const char* v : {"0", "17", "8x"})
    check_env_refused(with_args(product, {}), dir.path, std::string("VKGATE_MATVEC_ROWS=") + v,
                      std::string("VKGATE_MATVEC_ROWS='") + v + "' is not a number from 1 to 16", "matmul 1x8x64");
  for (const char* v : {"0", "72", "x"})
    check_env_refused(with_args(product, {}), dir.path, std::string("VKGATE_CPU_GEMM_ROWS=") + v,
                      std::string("VKGATE_CPU_GEMM_ROWS='") + v + "' is not a number from 8 to 64", "matmul 1x8x64");
  check_env_refused(with_args(product, {}), dir.path, "VKGATE_CPU_GEMM_ROWS=12",
                    "VKGATE_CPU_GEMM_ROWS='12' is not a multiple of 8", "matmul 1x8x64");
}

}  // namespace test_cli_usage
#endif  // VKGATE_CLI
