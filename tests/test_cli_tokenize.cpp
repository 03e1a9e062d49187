// `vkgate tokenize`, `vkgate detokenize` and `vkgate bench --tokenizer` as
// child processes, on the hand-made tokenizer of tests/tokenizer/unit/: ids
// on one line, text back byte for byte (to stdout or atomically to a file),
// and each error exiting 1 (or 2 for bad usage) with a message naming the
// file, key, id or byte offset, leaving no output file.
#ifdef VKGATE_CLI

#include "doctest.hpp"

#include <filesystem>
#include <string>
#include <vector>

#include "cli_harness.hpp"

namespace test_cli_tokenize {

namespace {

using namespace vkgate::cli_test;

const std::string kQwenStyle = std::string(VKGATE_TOKENIZER_UNIT_DIR) + "/qwen_style.json";

void check_ok(const CliResult& r) {
  check_clean_exit(r);
  INFO("stderr: " << r.err);
  CHECK(r.code == 0);
}

// Exit `code`, every one of `mentions` on stderr, nothing on stdout.
void check_fails(const CliResult& r, int code, const std::vector<std::string>& mentions) {
  check_clean_exit(r);
  INFO("stderr: " << r.err);
  CHECK(r.code == code);
  CHECK(r.out.empty());
  for (const std::string& m : mentions) {
    CAPTURE(m);
    CHECK(r.err.find(m) != std::string::npos);
  }
}

}  // namespace

TEST_CASE("cli: tokenize and detokenize round trip, with and without special tokens") {
  TempDir tmp("tokenize");
  const std::string text = "hello world<|end|>x 12\r\n\t日本 👍";
  write_text(tmp / "in.txt", text);
  const CliResult a = run_cli({"tokenize", "--tokenizer", kQwenStyle, "--input", tmp / "in.txt"}, tmp.path);
  check_ok(a);
  CHECK(a.out.rfind("268 259 264 269 120 32 49 50 ", 0) == 0);  // the template's BOS, then the text
  CHECK(a.out.back() == '\n');
  const CliResult b = run_cli({"tokenize", "--tokenizer", kQwenStyle, "--text", "hello world", "--no-special"}, tmp.path);
  check_ok(b);
  CHECK(b.out == "259 264\n");
  // The model directory form: a directory holding tokenizer.json.
  std::filesystem::create_directories(tmp.path / "model");
  std::filesystem::copy_file(kQwenStyle, tmp.path / "model" / "tokenizer.json");
  const CliResult c = run_cli({"tokenize", "--tokenizer", tmp / "model", "--text", "hello world", "--no-special"}, tmp.path);
  check_ok(c);
  CHECK(c.out == b.out);

  std::string ids = a.out.substr(0, a.out.size() - 1);
  const CliResult d = run_cli({"detokenize", "--tokenizer", kQwenStyle, "--ids", ids}, tmp.path);
  check_ok(d);
  CHECK(d.out == "<|bos|>" + text);
  const CliResult e = run_cli({"detokenize", "--tokenizer", kQwenStyle, "--ids", "259,264", "--output", tmp / "out.txt"}, tmp.path);
  check_ok(e);
  CHECK(e.out.empty());
  CHECK(read_text(tmp.path / "out.txt") == "hello world");
}

TEST_CASE("cli: tokenize and detokenize errors exit 1 naming the file, key, id or byte offset, with no output file") {
  TempDir tmp("tokenize_faults");
  write_text(tmp / "bad.txt", "ok\xC3(");
  write_text(tmp / "broken.json", "{\"model\": {\"type\": \"BPE\", \"vocab\": ");
  write_text(tmp / "metaspace.json",
             R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": []}, "pre_tokenizer": {"type": "Metaspace"}, "decoder": {"type": "ByteLevel"}})");
  const std::string out = tmp / "out.txt";
  check_fails(run_cli({"tokenize", "--tokenizer", kQwenStyle, "--input", tmp / "bad.txt"}, tmp.path), 1,
              {"bad.txt", "not valid UTF-8 at byte offset 2"});
  check_fails(run_cli({"tokenize", "--tokenizer", tmp / "broken.json", "--text", "a"}, tmp.path), 1,
              {"broken.json", "not valid JSON"});
  check_fails(run_cli({"tokenize", "--tokenizer", tmp / "metaspace.json", "--text", "a"}, tmp.path), 1,
              {"metaspace.json: pre_tokenizer.type: 'Metaspace' is not supported"});
  check_fails(run_cli({"tokenize", "--tokenizer", tmp / "missing.json", "--text", "a"}, tmp.path), 1, {"missing.json"});
  check_fails(run_cli({"tokenize", "--tokenizer", tmp.path.string(), "--text", "a"}, tmp.path), 1, {"no tokenizer.json"});
  check_fails(run_cli({"detokenize", "--tokenizer", kQwenStyle, "--ids", "259 99999", "--output", out}, tmp.path), 1,
              {"token id 99999", "qwen_style.json"});
  check_fails(run_cli({"detokenize", "--tokenizer", tmp / "broken.json", "--ids", "1", "--output", out}, tmp.path), 1,
              {"broken.json"});
  CHECK(!std::filesystem::exists(out));
  for (const auto& entry : std::filesystem::directory_iterator(tmp.path))
    CHECK_MESSAGE(entry.path().filename().string().find("out.txt") == std::string::npos, entry.path().string());
  // Bad usage: exit 2.
  check_fails(run_cli({"tokenize", "--tokenizer", kQwenStyle}, tmp.path), 2, {"--text", "--input"});
  check_fails(run_cli({"tokenize", "--text", "a"}, tmp.path), 2, {"--tokenizer"});
  check_fails(run_cli({"detokenize", "--tokenizer", kQwenStyle, "--ids", "1 x"}, tmp.path), 2, {"--ids"});
}

TEST_CASE("cli: tokenize --help and bench --tokenizer (load time, MB/s, the round trip checked)") {
  TempDir tmp("tokenize_bench");
  const CliResult h = run_cli({"tokenize", "--help"}, tmp.path);
  check_ok(h);
  CHECK(h.out.find("Chat templates") != std::string::npos);
  const CliResult b = run_cli({"bench", "--tokenizer", kQwenStyle, "--write-text", tmp / "text.txt"}, tmp.path);
  check_ok(b);
  CHECK(b.out.find("MB/s") != std::string::npos);
  CHECK(b.out.find("decode(encode(text)) == the normalized text") != std::string::npos);
  CHECK(read_text(tmp.path / "text.txt").size() > 1000000);
  const CliResult j = run_cli({"bench", "--tokenizer", kQwenStyle, "--text-file", tmp / "text.txt", "--json"}, tmp.path);
  check_ok(j);
  CHECK(j.out.find("\"encode_mb_per_s\"") != std::string::npos);
}

}  // namespace test_cli_tokenize
#endif  // VKGATE_CLI
