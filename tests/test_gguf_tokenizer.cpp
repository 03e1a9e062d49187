// The tokenizer a GGUF file carries, built by Tokenizer::from_gguf, against
// the tokenizer.json it was converted from (Qwen3's and Llama 3's real files,
// written as llama.cpp's converter writes them: gguf_convert.hpp) on the
// reference vectors' texts: the same ids without special tokens, with them
// the BOS the GGUF asks for, the same decoded bytes, the same vocabulary and
// special tokens. Part of vkgate_tokenizer_vectors, which skips (or, with
// VKGATE_REQUIRE_TOKENIZER_FILES=1, fails) without the real files.
#include "doctest.hpp"

#include <algorithm>
#include <cstdlib>
#include <optional>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string>
#include <unistd.h>
#include <vector>

#include "gguf_convert.hpp"
#include "vkgate/error.hpp"
#include "vkgate/gguf.hpp"
#include "vkgate/tokenizer.hpp"

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

json read_json_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  REQUIRE(in);
  return json::parse(std::string{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()});
}

fs::path files_dir() {
  const char* env = std::getenv("VKGATE_TOKENIZER_FILES");
  return env && *env ? fs::path(env) : fs::path(VKGATE_TOKENIZER_FILES);
}

// `vectors`: the vector file; `pre`: what the converter writes for this
// tokenizer; `rows`: the model's vocab_size (the token list is padded to it).
void check_gguf_tokenizer(const char* vectors_name, const std::string& pre, int64_t rows, bool expect_bos) {
  const json vectors = read_json_file(fs::path(VKGATE_TOKENIZER_VECTORS_DIR) / vectors_name);
  const fs::path tokenizer_json = files_dir() / vectors.at("package").get<std::string>() / vectors.at("file").get<std::string>();
  const fs::path config_path = tokenizer_json.parent_path() / "tokenizer_config.json";
  const json config = fs::exists(config_path) ? read_json_file(config_path) : json();
  const vkgate::Tokenizer from_json = vkgate::Tokenizer::load(tokenizer_json);

  vkgate::test::GgufDraft g;
  g.set("general.architecture", vkgate::GgufValue::of_string("llama"));
  vkgate::test::convert_tokenizer(g, read_json_file(tokenizer_json), config, pre, rows);
  const fs::path path = fs::temp_directory_path() / ("vkgate_gguf_tokenizer_" + std::to_string(::getpid()) + ".gguf");
  g.write(path.string());
  const vkgate::Tokenizer from_gguf = vkgate::Tokenizer::from_gguf(vkgate::GgufFile::open(path.string()));
  const vkgate::Tokenizer loaded = vkgate::Tokenizer::load(path);  // load() takes the .gguf too
  fs::remove(path);

  CHECK(from_gguf.vocab_size() == from_json.vocab_size());
  // Special: the CONTROL tokens, which the converter makes of Hugging Face's
  // special added tokens and of those that look special (<|fim_prefix|>).
  std::vector<int64_t> types;
  for (const auto& [key, value] : g.metadata)
    if (key == "tokenizer.ggml.token_type") types = value.integers;
  REQUIRE(types.size() >= size_t(from_json.vocab_size()));
  for (int32_t id = 0; id < from_json.vocab_size(); ++id) {
    const bool control = types[size_t(id)] == 3;
    if (control != from_gguf.is_special(id) || (from_json.is_special(id) && !control) ||
        from_json.id_to_token(id) != from_gguf.id_to_token(id)) {
      CAPTURE(id);
      CHECK(control == from_gguf.is_special(id));
      CHECK(!(from_json.is_special(id) && !control));
      CHECK(from_json.id_to_token(id) == from_gguf.id_to_token(id));
      break;
    }
  }
  std::optional<int64_t> bos;
  for (const auto& [key, value] : g.metadata)
    if (key == "tokenizer.ggml.bos_token_id") bos = value.integer;
  const json& cases = vectors.at("cases");
  REQUIRE(cases.size() >= 20);
  for (const json& c : cases) {
    const std::string text = c.at("text").get<std::string>();
    const auto ids = c.at("ids_no_special").get<std::vector<int32_t>>();
    CAPTURE(c.at("name").get<std::string>());
    CAPTURE(text);
    CHECK(from_gguf.encode(text, false) == ids);
    CHECK(loaded.encode(text, false) == ids);
    std::vector<int32_t> with_special = ids;
    if (expect_bos) {
      REQUIRE(bos);
      with_special.insert(with_special.begin(), int32_t(*bos));
    }
    CHECK(from_gguf.encode(text) == with_special);
    CHECK(from_gguf.decode(ids) == c.at("decoded").get<std::string>());
  }
}

}  // namespace

TEST_CASE("gguf tokenizer: Qwen3's tokenizer.json converted to GGUF (pre qwen2) gives Hugging Face's ids") {
  // Qwen3's config.json: vocab_size 151936; tokenizer_config.json: add_bos_token false, no BOS.
  check_gguf_tokenizer("qwen3.json", "qwen2", 151936, false);
}

TEST_CASE("gguf tokenizer: Llama 3's tokenizer.json converted to GGUF (pre llama-bpe) gives Hugging Face's ids, with llama.cpp's BOS") {
  // This tokenizer.json has no TemplateProcessing and its tokenizer_config.json no
  // add_bos_token, so the converter writes none and llama.cpp's default for
  // llama-bpe applies: <|begin_of_text|> first with add_special_tokens.
  check_gguf_tokenizer("llama3.json", "llama-bpe", 128256, true);
}

TEST_CASE("gguf tokenizer: another tokenizer model or pre-tokenizer is refused naming the key") {
  const fs::path dir = fs::temp_directory_path();
  const std::string path = (dir / ("vkgate_gguf_tok_bad_" + std::to_string(::getpid()) + ".gguf")).string();
  auto refused = [&](vkgate::test::GgufDraft g, const std::string& key) {
    g.write(path);
    try {
      vkgate::Tokenizer::load(path);
      FAIL("accepted");
    } catch (const vkgate::Error& e) {
      INFO(e.what());
      CHECK(e.code() == vkgate::ErrorCode::unsupported);
      CHECK(std::string(e.what()).find(path) != std::string::npos);
      CHECK(std::string(e.what()).find(key) != std::string::npos);
    }
  };
  vkgate::test::GgufDraft g;
  g.set("tokenizer.ggml.model", vkgate::GgufValue::of_string("llama"));
  g.set("tokenizer.ggml.tokens", vkgate::GgufValue::of_strings({"a", "b"}));
  refused(g, "tokenizer.ggml.model");
  g.set("tokenizer.ggml.model", vkgate::GgufValue::of_string("gpt2"));
  g.set("tokenizer.ggml.pre", vkgate::GgufValue::of_string("chatglm-bpe"));
  refused(g, "tokenizer.ggml.pre");
  fs::remove(path);
}
