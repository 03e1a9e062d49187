// Progress of long work (ContextOptions::on_progress): a first recording's
// pipelines compiled before it runs, a model's tensors, a long prompt's
// prefill in chunks (equal to the reference); and the CLI's progress line,
// drawn on a terminal only and never with --quiet.
#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>
#include <unistd.h>

#include <map>

#include "harness.hpp"
#include "model_weights.hpp"
#include "vkgate/model.hpp"
#include "vkgate/reference_model.hpp"

#ifdef VKGATE_CLI
#include "cli_harness.hpp"
#include "model_dir.hpp"

namespace test_progress {
#endif

using namespace vkgate;

TEST_CASE("progress: pipelines, tensors and a chunked prefill are reported, and the chunks equal the reference") {
  std::map<Progress::Task, std::vector<Progress>> seen;
  ContextOptions o;
  o.validation = true;
  o.on_progress = [&](const Progress& p) { seen[p.task].push_back(p); };
  Context ctx(o);
  std::mt19937 rng(std::random_device{}());
  test::TinyModel shape;
  shape.layers = 1;
  const test::RandomModel m(shape.config(), rng);
  Model model(ctx, m.cfg, m.tensors);
  // 600 tokens: a chunk of 512 and one of 88, the second attending to the first through the cache.
  const std::vector<int64_t> prompt = test::random_ids(rng, 600, shape.vocab);
  GenerateOptions g;
  g.max_new_tokens = 3;
  g.stop_at_eos = false;
  const GenerateResult r = model.generate(prompt, g);
  CHECK(r.ids == reference::greedy_generate(m.cfg, m.map, prompt, 3, false));
  CHECK(ctx.validation_messages() == 0);

  for (Progress::Task task : {Progress::Task::pipelines, Progress::Task::tensors, Progress::Task::prefill}) {
    CAPTURE(to_string(task));
    REQUIRE(!seen[task].empty());
    const std::vector<Progress>& v = seen[task];
    for (size_t i = 1; i < v.size(); ++i) {
      if (v[i].done == 1 && v[i - 1].done == v[i - 1].total) continue;  // a new task of the same kind
      CHECK(v[i].done >= v[i - 1].done);
      CHECK(v[i].total == v[i - 1].total);
    }
    CHECK(v.back().done == v.back().total);
  }
  const auto& tensors = seen[Progress::Task::tensors];
  CHECK(tensors.back().total == expected_model_weights(m.cfg).size());
  uint64_t bytes = 0;
  for (const TensorSpec& spec : expected_model_weights(m.cfg)) bytes += uint64_t(spec.numel()) * 4;
  CHECK(tensors.back().bytes == bytes);
  const auto& prefill = seen[Progress::Task::prefill];
  REQUIRE(prefill.size() == 2);
  CHECK(prefill[0].done == 512);
  CHECK(prefill[1].done == 600);
  CHECK(prefill[1].total == 600);
  // Every pipeline compiled by the first recordings: a second generation compiles none.
  seen.clear();
  model.generate(prompt, g);
  CHECK(seen[Progress::Task::pipelines].empty());
}

#ifdef VKGATE_CLI
namespace {

// `vkgate ARGS...` with its stderr on a pseudo-terminal (what a user's shell
// gives it), stdout to a file; returns what the terminal received.
std::string run_on_terminal(const std::vector<std::string>& args, const cli_test::TempDir& dir, int& code) {
  const int master = ::posix_openpt(O_RDWR | O_NOCTTY);
  REQUIRE(master >= 0);
  REQUIRE(::grantpt(master) == 0);
  REQUIRE(::unlockpt(master) == 0);
  const std::string slave = ::ptsname(master);
  std::vector<std::string> argv_s{VKGATE_CLI};
  argv_s.insert(argv_s.end(), args.begin(), args.end());
  const std::string out = dir / "tty.stdout";
  // Everything the child needs is made before fork: it only opens, dups and execs.
  std::vector<char*> argv;
  for (std::string& a : argv_s) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::vector<std::string> env = cli_test::child_env();
  std::vector<char*> envp;
  for (std::string& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    const int tty = ::open(slave.c_str(), O_RDWR);
    const int file = ::open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (tty < 0 || file < 0) ::_exit(127);
    ::dup2(file, 1);
    ::dup2(tty, 2);
    ::execve(argv[0], argv.data(), envp.data());
    ::_exit(127);
  }
  std::string got;
  int status = 0;
  for (bool exited = false;;) {
    pollfd p{master, POLLIN, 0};
    if (::poll(&p, 1, 50) > 0) {
      char buf[4096];
      const ssize_t n = ::read(master, buf, sizeof buf);
      if (n > 0) {
        got.append(buf, size_t(n));
        continue;
      }
    }
    if (exited) break;  // drained after the exit
    exited = ::waitpid(pid, &status, WNOHANG) == pid;
  }
  ::close(master);
  code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return got;
}

}  // namespace

TEST_CASE("cli progress: a terminal's stderr shows the progress line, --quiet and a file do not") {
  using namespace cli_test;
  std::mt19937 rng(5);
  test::TinyModel shape;
  shape.layers = 1;
  ModelDir m(shape, rng, DType::F32, false);
  const std::string ids = m.ids_file("ids.safetensors", {1, 2, 3}, 1, 3);
  const std::vector<std::string> run =
      with_device({"run", "--weights", m.path(), "--input", ids, "--output", m.dir / "out.safetensors"});
  int code = -1;
  const std::string shown = run_on_terminal(run, m.dir, code);
  INFO("terminal: " << shown);
  CHECK(code == 0);
  CHECK(shown.find("vkgate: loading tensors") != std::string::npos);
  CHECK(shown.find("vkgate: compiling pipelines") != std::string::npos);
  CHECK(shown.find("\033[K") != std::string::npos);  // redrawn in place

  std::vector<std::string> quiet = run;
  quiet.push_back("--quiet");
  const std::string silent = run_on_terminal(quiet, m.dir, code);
  CHECK(code == 0);
  CHECK(silent.find("vkgate: ") == std::string::npos);

  const CliResult file = run_cli(run, m.dir.path);  // stderr to a file
  CHECK(file.code == 0);
  CHECK(file.err.find("loading tensors") == std::string::npos);
  CHECK(file.err.find('\033') == std::string::npos);
}

}  // namespace test_progress
#endif  // VKGATE_CLI
