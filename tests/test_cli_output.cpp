// What `--output` (run, tokenize, detokenize) and `bench --write-text` do with
// what their path names, as child processes: "-" is stdout (the summary line
// then goes to stderr), a FIFO is written directly and stays a FIFO, a
// symbolic link (also a dangling one) has its target replaced and stays a
// link, an existing file keeps its mode, a read-only file is refused naming it
// and left as it was, a directory is refused. Every special file lives in a
// temporary folder (never a real device node). Interrupting a write is tested
// on the library's writer (test_safetensors.cpp).
#ifdef VKGATE_CLI

#include "doctest.hpp"
#include <fcntl.h>
#include <poll.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <functional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "cli_harness.hpp"
#include "fifo_reader.hpp"
#include "golden.hpp"

namespace test_cli_output {

namespace {

using namespace vkgate;
using namespace vkgate::cli_test;


mode_t mode_of(const fs::path& p) {
  struct stat st {};
  REQUIRE(::stat(p.c_str(), &st) == 0);
  return st.st_mode & 07777;
}

bool is_fifo(const fs::path& p) {
  struct stat st {};
  return ::lstat(p.c_str(), &st) == 0 && S_ISFIFO(st.st_mode);
}

// No writer's temporary file anywhere under `dir`.
void check_no_temporaries(const fs::path& dir) {
  for (const auto& e : fs::recursive_directory_iterator(dir))
    CHECK_MESSAGE(e.path().filename().string().find(".tmp.") == std::string::npos, e.path().string());
}

// A command that writes a file: its arguments with OUT as the path, and the
// one line its summary on stdout starts with (none for the text commands).
struct Writer {
  std::function<std::vector<std::string>(const std::string& out)> args;
  std::string summary;
};

// Every case of the path rules for one command. `want` is what the command
// writes (from a first run into a fresh file); each case must write exactly it.
void check_output_rules(const Writer& w) {
  TempDir dir("output");
  const fs::path d = dir.path;
  fs::create_directories(d / "real");

  // A fresh file: the bytes every other case is compared with.
  const CliResult first = run_cli(w.args(dir / "fresh"), d);
  check_clean_exit(first);
  REQUIRE(first.code == 0);
  const std::string want = read_text(d / "fresh");
  REQUIRE(!want.empty());
  if (!w.summary.empty()) CHECK(first.out.rfind(w.summary, 0) == 0);

  // An existing file of mode 0640, a link to one, a dangling link, a read-only
  // file, a directory, and "-".
  write_text(d / "kept", "old");
  REQUIRE(::chmod((d / "kept").c_str(), 0640) == 0);
  write_text(d / "real" / "target", "old");
  REQUIRE(::chmod((d / "real" / "target").c_str(), 0600) == 0);
  fs::create_symlink("real/target", d / "link");
  fs::create_symlink("real/new", d / "dangling");
  write_text(d / "ro", "old read-only");
  REQUIRE(::chmod((d / "ro").c_str(), 0444) == 0);
  fs::create_directories(d / "a_directory");
  const std::vector<CliResult> r = run_all(
      {w.args(dir / "kept"), w.args(dir / "link"), w.args(dir / "dangling"), w.args(dir / "ro"),
       w.args(dir / "a_directory"), w.args("-")},
      d);
  for (const CliResult& c : r) check_clean_exit(c);

  CHECK(r[0].code == 0);
  CHECK(read_text(d / "kept") == want);
  CHECK(mode_of(d / "kept") == 0640);

  CHECK(r[1].code == 0);
  CHECK(fs::is_symlink(d / "link"));
  CHECK(fs::read_symlink(d / "link") == "real/target");
  CHECK(read_text(d / "real" / "target") == want);
  CHECK(mode_of(d / "real" / "target") == 0600);

  CHECK(r[2].code == 0);
  CHECK(fs::is_symlink(d / "dangling"));
  CHECK(fs::is_regular_file(fs::symlink_status(d / "real" / "new")));
  CHECK(read_text(d / "real" / "new") == want);

  {
    INFO("stderr: " << r[3].err);
    CHECK(r[3].code == 1);
    CHECK(r[3].err == "vkgate: " + (dir / "ro") + ": is read-only (mode 0444): not replaced\n");
    CHECK(read_text(d / "ro") == "old read-only");
    CHECK(mode_of(d / "ro") == 0444);
  }
  {
    INFO("stderr: " << r[4].err);
    CHECK(r[4].code == 1);
    CHECK(r[4].err.find(dir / "a_directory" + ": is a directory") != std::string::npos);
    CHECK(fs::is_empty(d / "a_directory"));
  }
  {
    // "-": the bytes on stdout and nothing else; the summary line on stderr; no file named "-".
    INFO("stderr: " << r[5].err);
    CHECK(r[5].code == 0);
    CHECK(r[5].out == want);
    if (!w.summary.empty()) CHECK(r[5].err.find(w.summary) != std::string::npos);
    CHECK(!fs::exists("-"));
    CHECK(!fs::exists(d / "-"));
  }

  // A FIFO: written directly while this process reads it, and still a FIFO after.
  const std::string fifo = dir / "fifo";
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  {
    test::FifoReader reader(fifo);
    const CliResult f = finish(spawn_cli(w.args(fifo), d));
    const std::string got = reader.finish();
    check_clean_exit(f);
    INFO("stderr: " << f.err);
    CHECK(f.code == 0);
    CHECK(got == want);
    CHECK(is_fifo(fifo));
  }
  check_no_temporaries(d);
}

using test::w1_dir;
const std::string kTokenizer = std::string(VKGATE_TOKENIZER_UNIT_DIR) + "/qwen_style.json";

}  // namespace

TEST_CASE("cli: run --output: -, a FIFO, a symbolic link (also dangling), a kept mode, a read-only file, a directory") {
  check_output_rules({[](const std::string& out) {
                        std::vector<std::string> a{"run", "--weights", w1_dir(), "--input", w1_dir() + "/input.safetensors",
                                                   "--output", out};
                        for (const auto& x : device_args()) a.push_back(x);
                        return a;
                      },
                      "model: 2 layers, batch 1, tokens 7"});
}

TEST_CASE("cli: tokenize --output: -, a FIFO, a symbolic link (also dangling), a kept mode, a read-only file, a directory") {
  check_output_rules({[](const std::string& out) {
                        return std::vector<std::string>{"tokenize", "--tokenizer", kTokenizer, "--text", "hello world",
                                                        "--no-special", "--output", out};
                      },
                      ""});
  // Without --output the ids go to stdout as before.
  TempDir dir("tokenize_stdout");
  const CliResult r = run_cli({"tokenize", "--tokenizer", kTokenizer, "--text", "hello world", "--no-special"}, dir.path);
  check_clean_exit(r);
  CHECK(r.code == 0);
  CHECK(r.out == "259 264\n");
}

TEST_CASE("cli: detokenize --output: -, a FIFO, a symbolic link (also dangling), a kept mode, a read-only file, a directory") {
  check_output_rules({[](const std::string& out) {
                        return std::vector<std::string>{"detokenize", "--tokenizer", kTokenizer, "--ids", "259,264",
                                                        "--output", out};
                      },
                      ""});
}

TEST_CASE("cli: bench --write-text: -, a FIFO, a symbolic link (also dangling), a kept mode, a read-only file, a directory") {
  check_output_rules({[](const std::string& out) { return std::vector<std::string>{"bench", "--write-text", out}; }, ""});
  // With --tokenizer and --write-text -, stdout holds the text alone and the report goes to stderr.
  TempDir dir("write_text_stdout");
  const CliResult r = run_cli({"bench", "--tokenizer", kTokenizer, "--write-text", "-"}, dir.path);
  check_clean_exit(r);
  CHECK(r.code == 0);
  CHECK(r.out.size() > 1000000);
  CHECK(r.out.find("MB/s") == std::string::npos);
  CHECK(r.err.find("MB/s") != std::string::npos);
}

}  // namespace test_cli_output
#endif  // VKGATE_CLI
