// The CLI tests' harness: temporary directories, `vkgate` run as a child
// process (with VKGATE_VALIDATION=1, output to files), and safetensors files
// written through the library.
#pragma once

#include "doctest.hpp"
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <limits>
#include <list>
#include <random>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "vkgate/config.hpp"
#include "vkgate/dtype.hpp"
#include "vkgate/safetensors.hpp"
#include "test_util.hpp"

extern char** environ;

namespace vkgate::cli_test {

namespace fs = std::filesystem;

// ---- temporary directories and child processes ----

using test::read_text;
using test::TempDir;
using test::write_text;

struct CliResult {
  std::string command;  // for messages
  bool exited = false;  // false: killed by a signal (or never ran)
  int code = -1;        // exit status when exited
  int signal = 0;
  std::string out, err;
};

struct Child {
  pid_t pid = -1;
  std::string command;
  fs::path out, err;
};

// Starts `vkgate ARGS...` with VKGATE_VALIDATION=1; stdout and stderr go to
// files in `dir` (no pipes, so no deadlock however much the child prints).
// A child's environment: VKGATE_VALIDATION=1 and extra_env ("NAME=value"), then
// every inherited variable they do not set. getenv takes the first entry, so
// appending extra_env after the inherited ones let the test command's
// VKGATE_CPU_GEMM_ROWS=8 hide a test's own value.
inline std::vector<std::string> child_env(const std::vector<std::string>& extra_env = {}) {
  std::vector<std::string> env{"VKGATE_VALIDATION=1"};
  env.insert(env.end(), extra_env.begin(), extra_env.end());
  const auto set_here = [&](const char* e) {
    const std::string_view name(e, std::strcspn(e, "="));
    return std::any_of(env.begin(), env.end(), [&](const std::string& v) {
      return v.size() > name.size() && v.compare(0, name.size(), name) == 0 && v[name.size()] == '=';
    });
  };
  for (char** e = environ; *e; ++e)
    if (!set_here(*e)) env.emplace_back(*e);
  return env;
}

inline Child spawn_cli(const std::vector<std::string>& args, const fs::path& dir,
                const std::vector<std::string>& extra_env = {}) {
  static std::atomic<unsigned> counter{0};
  const std::string tag = std::to_string(counter++);
  Child c;
  c.out = dir / ("child" + tag + ".stdout");
  c.err = dir / ("child" + tag + ".stderr");
  c.command = "vkgate";
  for (const auto& a : args) c.command += " " + a;

  std::vector<std::string> env = child_env(extra_env);
  std::vector<char*> envp;
  for (auto& s : env) envp.push_back(s.data());
  envp.push_back(nullptr);

  std::vector<std::string> argv_s{VKGATE_CLI};
  argv_s.insert(argv_s.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& s : argv_s) argv.push_back(s.data());
  argv.push_back(nullptr);

  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, c.out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_addopen(&fa, 2, c.err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  const int rc = posix_spawn(&c.pid, VKGATE_CLI, &fa, nullptr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0) {
    FAIL_CHECK("cannot start " << std::string(VKGATE_CLI) << ": " << std::string(std::strerror(rc)));
    c.pid = -1;
  }
  return c;
}

// Waits for the child (killing it after `timeout`) and collects its output.
inline CliResult finish(const Child& c, std::chrono::seconds timeout = std::chrono::seconds(300)) {
  CliResult r;
  r.command = c.command;
  if (c.pid < 0) return r;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  int status = 0;
  for (;;) {
    const pid_t w = ::waitpid(c.pid, &status, WNOHANG);
    if (w == c.pid) break;
    if (w < 0 && errno != EINTR) {
      FAIL_CHECK("waitpid failed: " << std::string(std::strerror(errno)));
      return r;
    }
    if (std::chrono::steady_clock::now() > deadline) {
      ::kill(c.pid, SIGKILL);
      ::waitpid(c.pid, &status, 0);
      r.err = "(killed after the timeout)\n";
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  r.exited = WIFEXITED(status);
  r.code = r.exited ? WEXITSTATUS(status) : -1;
  r.signal = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
  r.out = read_text(c.out);
  r.err += read_text(c.err);
  return r;
}

// Runs the jobs with a few children at a time: each CLI run JIT-compiles its
// pipelines on one core, so overlapping them roughly halves the wall time.
inline std::vector<CliResult> run_all(const std::vector<std::vector<std::string>>& jobs, const fs::path& dir) {
  const size_t width = std::clamp<size_t>(std::thread::hardware_concurrency(), 2, 4);
  std::vector<CliResult> results(jobs.size());
  std::deque<std::pair<size_t, Child>> running;
  size_t next = 0;
  while (next < jobs.size() || !running.empty()) {
    while (next < jobs.size() && running.size() < width) {
      running.emplace_back(next, spawn_cli(jobs[next], dir));
      ++next;
    }
    auto [i, child] = running.front();
    running.pop_front();
    results[i] = finish(child);
  }
  return results;
}

inline CliResult run_cli(const std::vector<std::string>& args, const fs::path& dir,
                  const std::vector<std::string>& extra_env = {}) {
  return finish(spawn_cli(args, dir, extra_env));
}

inline bool contains_ci(std::string text, std::string what) {
  auto lower = [](std::string& s) {
    for (char& ch : s) ch = char(std::tolower(static_cast<unsigned char>(ch)));
  };
  lower(text);
  lower(what);
  return text.find(what) != std::string::npos;
}

// Every child: ended by exit (never a signal) and no validation-layer message.
inline void check_clean_exit(const CliResult& r) {
  INFO("command: " << r.command);
  INFO("stdout: " << r.out);
  INFO("stderr: " << r.err);
  REQUIRE_MESSAGE(r.exited, "the child was killed by signal " << r.signal);
  // The library prints "vkgate: validation error|warning [...] ..." for each layer message; the
  // layer's own default output says "Validation Error"; a missing layer is refused by name.
  const bool validation = r.err.find("vkgate: validation") != std::string::npos ||
                          contains_ci(r.err, "validation error") || contains_ci(r.err, "validation warning") ||
                          contains_ci(r.err, "validation was requested");
  CHECK_MESSAGE(!validation, "the child printed a validation message");
}

// Device selection for the children: the test suite's device if one is named.
inline std::vector<std::string> device_args() {
  if (const char* d = std::getenv("VKGATE_TEST_DEVICE"); d && *d) return {"--device", d};
  return {};
}

// Ids as `vkgate generate --prompt-ids` prints them: "1 2 3".
inline std::string id_line(const std::vector<int64_t>& ids) {
  std::string s;
  for (int64_t id : ids) {
    if (!s.empty()) s += ' ';
    s += std::to_string(id);
  }
  return s;
}

// `args` with device_args() appended.
inline std::vector<std::string> with_device(std::vector<std::string> args) {
  for (const std::string& d : device_args()) args.push_back(d);
  return args;
}

// `vkgate generate` on a golden model directory (wave 3): the prompt ids and
// max_new_tokens of its generate.json in, its `generated` ids out, exit 0.
inline void check_golden_generate(const std::string& dir, const fs::path& cwd) {
  const nlohmann::json gen = nlohmann::json::parse(read_text(fs::path(dir) / "generate.json"));
  std::string prompt;
  for (int64_t id : gen.at("prompt_ids").get<std::vector<int64_t>>()) prompt += (prompt.empty() ? "" : ",") + std::to_string(id);
  const CliResult g = run_cli(with_device({"generate", "--weights", dir, "--prompt-ids", prompt, "--max-new-tokens",
                                           std::to_string(gen.at("max_new_tokens").get<int>())}),
                              cwd);
  check_clean_exit(g);
  REQUIRE(g.code == 0);
  CHECK(g.out == id_line(gen.at("generated").get<std::vector<int64_t>>()) + "\n");
}

// ---- writing safetensors files through the library ----

// Tensors for vkgate::write_safetensors, with storage that outlives the write.
struct FileBuilder {
  std::list<std::vector<std::byte>> store;
  std::vector<TensorToWrite> tensors;

  // Stores `v` as `dtype` and returns the values a reader gets back as float
  // (what the reference must see). F64 values get a perturbation below float
  // precision, so the reader's rounding is exercised.
  std::vector<float> add(const std::string& name, std::vector<int64_t> shape, std::span<const float> v, DType dtype) {
    std::vector<float> back(v.size());
    auto& bytes = store.emplace_back(v.size() * dtype_size(dtype));
    for (size_t i = 0; i < v.size(); ++i) {
      switch (dtype) {
        case DType::F32:
          back[i] = v[i];
          std::memcpy(bytes.data() + 4 * i, &v[i], 4);
          break;
        case DType::F64: {
          const double d = double(v[i]) * (1.0 + std::ldexp(1.0, -30));
          back[i] = static_cast<float>(d);
          std::memcpy(bytes.data() + 8 * i, &d, 8);
          break;
        }
        case DType::F16:
        case DType::BF16: {
          const uint16_t h = dtype == DType::F16 ? float_to_half(v[i]) : float_to_bf16(v[i]);
          back[i] = dtype == DType::F16 ? half_to_float(h) : bf16_to_float(h);
          std::memcpy(bytes.data() + 2 * i, &h, 2);
          break;
        }
        default:
          FAIL("FileBuilder::add stores F32, F64, F16 or BF16 values (ids: add_ids)");
      }
    }
    tensors.push_back({name, dtype, std::move(shape), bytes});
    return back;
  }
  // Token ids as I64 or I32.
  void add_ids(const std::string& name, std::vector<int64_t> shape, std::span<const int64_t> ids,
               DType dtype = DType::I64) {
    auto& bytes = store.emplace_back(ids.size() * dtype_size(dtype));
    for (size_t i = 0; i < ids.size(); ++i) {
      if (dtype == DType::I64) {
        std::memcpy(bytes.data() + 8 * i, &ids[i], 8);
      } else {
        const int32_t v = int32_t(ids[i]);
        std::memcpy(bytes.data() + 4 * i, &v, 4);
      }
    }
    tensors.push_back({name, dtype, std::move(shape), bytes});
  }
  void write(const std::string& path) const { write_safetensors(path, tensors, {{"format", "pt"}}); }
  size_t total_bytes() const {
    size_t n = 0;
    for (const auto& t : tensors) n += t.bytes.size();
    return n;
  }
};

inline std::vector<float> random_vec(std::mt19937& rng, size_t n, float sd = 1.0f) {
  std::normal_distribution<float> dist(0.0f, sd);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

// Additive mask: small random values and a scattering of −inf (never on key 0
// of every row, so no row is systematically empty).
inline std::vector<float> random_mask(std::mt19937& rng, size_t n) {
  auto m = random_vec(rng, n, 0.5f);
  for (size_t i = 3; i < n; i += 7) m[i] = -std::numeric_limits<float>::infinity();
  return m;
}

// Raw safetensors bytes: u64 little-endian header length, header, data.
inline void write_raw(const fs::path& p, const std::string& header, size_t data_bytes, uint64_t header_len = UINT64_MAX) {
  std::string bytes(8, '\0');
  const uint64_t n = header_len == UINT64_MAX ? header.size() : header_len;
  std::memcpy(bytes.data(), &n, 8);
  bytes += header;
  bytes.append(data_bytes, '\0');
  write_text(p, bytes);
}

// Block configs by the numbers, and the presets as the parser documents them (src/io/config_json.cpp).
inline BlockConfig shape(int D, int H, int KV, int Dh) {
  BlockConfig c;
  c.hidden_size = D;
  c.num_heads = H;
  c.num_kv_heads = KV;
  c.head_dim = Dh;
  return c;
}

inline BlockConfig qwen3_next(BlockConfig c) {
  c.gate_kind = GateKind::elementwise;
  c.gate_layout = GateLayout::qwen3_next;
  c.norm_kind = NormKind::zero_centered;
  c.use_qk_norm = true;
  return c;
}
inline BlockConfig qwen3(BlockConfig c, GateKind gate) {
  c.gate_kind = gate;
  c.gate_layout = GateLayout::official_grouped;
  c.norm_kind = NormKind::plain;
  c.use_qk_norm = true;
  return c;
}

}  // namespace vkgate::cli_test
