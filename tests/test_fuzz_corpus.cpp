// Every seed of fuzz/corpus/ and every input the fuzzers ever crashed on
// (fuzz/regressions/, added by fuzz/run.sh) through the fuzz targets' bodies:
// each must be rejected with a vkgate::Error or accepted — any other
// exception fails here, and a crash or sanitizer report fails the process
// (the sanitizer build runs this too).
#include "doctest.hpp"

#include <algorithm>
#include <climits>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <vector>

#include "fuzz_targets.hpp"

namespace test_fuzz_corpus {

namespace {

namespace fs = std::filesystem;

size_t replay(const std::string& target, int (*body)(const uint8_t*, size_t)) {
  size_t n = 0;
  for (const char* kind : {"corpus", "regressions"}) {
    const fs::path dir = fs::path(VKGATE_FUZZ_DIR) / kind / target;
    if (!fs::exists(dir)) continue;
    std::vector<fs::path> files;
    for (const auto& e : fs::directory_iterator(dir))
      if (e.is_regular_file()) files.push_back(e.path());
    std::sort(files.begin(), files.end());
    for (const fs::path& f : files) {
      CAPTURE(f.string());
      std::ifstream in(f, std::ios::binary);
      const std::vector<uint8_t> data{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
      CHECK_NOTHROW(body(data.data(), data.size()));
      ++n;
    }
  }
  return n;
}

}  // namespace

TEST_CASE("fuzz corpus: safetensors seeds and regressions") { CHECK(replay("safetensors", vkgate::fuzz::safetensors) >= 5); }
TEST_CASE("fuzz corpus: config.json seeds and regressions") { CHECK(replay("config", vkgate::fuzz::config) >= 6); }
TEST_CASE("fuzz corpus: checkpoint index seeds and regressions") {
  CHECK(replay("checkpoint_index", vkgate::fuzz::checkpoint_index) >= 4);
}

TEST_CASE("fuzz corpus: tokenizer seeds and regressions") { CHECK(replay("tokenizer", vkgate::fuzz::tokenizer) >= 4); }
TEST_CASE("fuzz corpus: GGUF seeds and regressions") { CHECK(replay("gguf", vkgate::fuzz::gguf) >= 5); }
TEST_CASE("fuzz corpus: chat request and reply seeds and regressions") { CHECK(replay("chat", vkgate::fuzz::chat) >= 8); }

TEST_CASE("fuzz corpus: check_layer(INT_MAX) with full_attention_interval (found by fuzz_config)") {
  // layer_type computed (layer + 1) % interval in int: signed overflow at INT_MAX.
  vkgate::BlockConfig c = vkgate::BlockConfig::qwen3_next_attention();
  c.num_hidden_layers = 0;
  c.layer_types.clear();
  c.full_attention_interval = 4;
  CHECK_NOTHROW(c.check_layer(INT_MAX));  // (2^31 − 1 + 1) % 4 == 0: a full-attention layer
  CHECK_THROWS_AS(c.check_layer(INT_MAX - 1), vkgate::Error);
}

}  // namespace test_fuzz_corpus
