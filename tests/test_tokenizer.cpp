// The tokenizer (include/vkgate/tokenizer.hpp) feature by feature, on the two
// small hand-made files of tests/tokenizer/unit/ (a vocabulary of the 256
// byte tokens and a few merges) and variants of them edited here: each
// normalizer, pre-tokenizer option, added-token flag, ignore_merges, both
// merge forms, the post-processors, decoding and streaming, and every
// malformed-file error with the file and key it must name. The expected ids
// were checked against @huggingface/tokenizers where it implements the
// feature (it ignores single_word; the Rust library's rule is tested here).
#include "doctest.hpp"

#include <dlfcn.h>
#include <utf8proc.h>

#include <cstdlib>
#include <iterator>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "test_util.hpp"
#include "vkgate/error.hpp"
#include "vkgate/tokenizer.hpp"

namespace test_tokenizer {

namespace {

using nlohmann::json;
using vkgate::ErrorCode;
using vkgate::Tokenizer;
using vkgate::test::expect_error;
using Ids = std::vector<int32_t>;

const std::string kUnit = VKGATE_TOKENIZER_UNIT_DIR;

json unit_json(const std::string& name) { return json::parse(vkgate::test::read_text(kUnit + "/" + name)); }
Tokenizer from(const json& j, const std::string& source = "unit.json") { return Tokenizer::from_json(j.dump(), source); }

// gpt2_style.json: ids 0..255 are the bytes; the merges make 256 "he", 257 "ll",
// 258 "hell", 259 "hello", 260 "Ġw", 261 "or", 262 "Ġwor", 263 "ld", 264 "Ġworld",
// 265 "12", 266 "ĠĠ"; 267 "abc" has no merge; 268 is the added <|end|>.
// qwen_style.json adds 268 <|bos|> (the template's), 269 <|end|>, 270
// <|end|><|end|>, 271 [L] (lstrip), 272 [R] (rstrip), 273 word (single_word),
// 274 ő (normalized).

}  // namespace

TEST_CASE("tokenizer: GPT-2 style ByteLevel (add_prefix_space, GPT-2's regex) merges by rank") {
  const Tokenizer t = Tokenizer::load(kUnit + "/gpt2_style.json");
  CHECK(t.vocab_size() == 269);
  CHECK(t.encode("hello world") == Ids{32, 259, 264});  // " hello" → Ġ + hello: no merge joins them
  CHECK(t.encode("lll") == Ids{32, 257, 108});          // equal ranks: the leftmost pair first
  CHECK(t.encode("x12") == Ids{32, 120, 265});
  CHECK(t.encode("abc") == Ids{32, 97, 98, 99});        // a token no merge reaches is not used
  CHECK(t.encode("a   b") == Ids{32, 97, 266, 32, 98});  // \s+(?!\S) leaves the last space to " b"
  CHECK(t.encode("") == Ids{});

  json j = unit_json("gpt2_style.json");
  j["pre_tokenizer"]["add_prefix_space"] = false;
  CHECK(from(j).encode("hello world") == Ids{259, 264});
  // use_regex false: the text is one piece, so merges cross word boundaries.
  j["pre_tokenizer"]["use_regex"] = false;
  j["model"]["merges"].push_back("hello Ġworld");
  j["model"]["vocab"]["helloĠworld"] = 268;
  j["added_tokens"][0]["id"] = 269;  // Hugging Face numbers added tokens after the vocabulary
  CHECK(from(j).encode("hello world") == Ids{268});
}

TEST_CASE("tokenizer: merges as \"a b\" strings and as [a, b] pairs give the same ids") {
  json strings = unit_json("gpt2_style.json"), pairs = strings;
  pairs["model"]["merges"] = json::array();
  for (const auto& m : strings["model"]["merges"]) {
    const std::string s = m.get<std::string>();
    pairs["model"]["merges"].push_back({s.substr(0, s.find(' ')), s.substr(s.find(' ') + 1)});
  }
  for (const char* text : {"hello world", "held lol 1212", "hellohello worldworld"})
    CHECK(from(strings).encode(text) == from(pairs).encode(text));
}

TEST_CASE("tokenizer: ignore_merges takes a whole-piece token before merging") {
  json j = unit_json("gpt2_style.json");
  j["pre_tokenizer"]["add_prefix_space"] = false;
  CHECK(from(j).encode("abc") == Ids{97, 98, 99});
  j["model"]["ignore_merges"] = true;
  CHECK(from(j).encode("abc") == Ids{267});
  CHECK(from(j).encode("abcd") == Ids{97, 98, 99, 100});
}

TEST_CASE("tokenizer: NFC normalizer, alone and in a Sequence") {
  const std::string nfd = "e\xCC\x81", nfc = "\xC3\xA9";  // é decomposed and composed
  json j = unit_json("gpt2_style.json");
  j["pre_tokenizer"]["add_prefix_space"] = false;
  CHECK(from(j).encode(nfd) == Ids{101, 204, 129});
  j["normalizer"] = {{"type", "NFC"}};
  CHECK(from(j).encode(nfd) == Ids{195, 169});
  CHECK(from(j).normalize("caf" + nfd) == "caf" + nfc);
  j["normalizer"] = {{"type", "Sequence"}, {"normalizers", {{{"type", "NFC"}}, {{"type", "NFC"}}}}};
  CHECK(from(j).encode(nfd) == Ids{195, 169});
  CHECK(from(j).decode(from(j).encode(nfd)) == nfc);
}

TEST_CASE("tokenizer: NFC of the stretches around non-ASCII characters equals NFC of the whole text") {
  json j = unit_json("gpt2_style.json");
  j["normalizer"] = {{"type", "NFC"}};
  const Tokenizer t = from(j);
  // Letters, combining marks that compose with them or reorder, Hangul jamo, spaces.
  const char* const parts[] = {"a", "e", "o", "\xCC\x81", "\xCC\xA7", "\xCC\xA3", "\xCC\x82", "\xC3\xA9", "\xE1\xBB\x87",
                               "\xE1\x84\x80", "\xE1\x85\xA1", "\xE1\x86\xA8", " ", "\n", "\xEA\xB0\x80", "A\xCC\x8A"};
  std::mt19937 rng(3);
  for (int n = 0; n < 2000; ++n) {
    std::string text;
    for (size_t k = rng() % 12; k > 0; --k) text += parts[rng() % std::size(parts)];
    utf8proc_uint8_t* whole = utf8proc_NFC(reinterpret_cast<const utf8proc_uint8_t*>(text.c_str()));
    REQUIRE(whole);
    const std::string want(reinterpret_cast<const char*>(whole));
    std::free(whole);
    CAPTURE(text);
    CHECK(t.normalize(text) == want);
  }
}

TEST_CASE("tokenizer: Split pre-tokenizer (Isolated, Removed, invert, String pattern) before ByteLevel") {
  const Tokenizer q = Tokenizer::load(kUnit + "/qwen_style.json");
  CHECK(q.encode("x12", false) == Ids{120, 49, 50});  // \p{N}: one digit per piece, so "12" never merges
  CHECK(q.encode("It's IT'S", false) == Ids{73, 116, 39, 115, 32, 73, 84, 39, 83});

  json j = unit_json("gpt2_style.json");
  j["pre_tokenizer"] = {{"type", "Sequence"},
                        {"pretokenizers",
                         {{{"type", "Split"}, {"pattern", {{"String", "-"}}}, {"behavior", "Removed"}, {"invert", false}},
                          {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}}}};
  CHECK(from(j).encode("ab-he") == Ids{97, 98, 256});
  // invert: the stretches between dashes are the matches, so they are what is removed.
  j["pre_tokenizer"]["pretokenizers"][0]["invert"] = true;
  CHECK(from(j).encode("ab-he") == Ids{45});
  j["pre_tokenizer"]["pretokenizers"][0]["behavior"] = "Isolated";
  CHECK(from(j).encode("ab-he") == Ids{97, 98, 45, 256});
  j["pre_tokenizer"]["pretokenizers"][0]["behavior"] = "MergedWithPrevious";
  j["pre_tokenizer"]["pretokenizers"][0]["invert"] = false;
  CHECK(from(j).encode("he-he") == Ids{256, 45, 256});
}

TEST_CASE("tokenizer: added tokens: special and not, longest first, lstrip, rstrip, single_word, normalized") {
  const Tokenizer q = Tokenizer::load(kUnit + "/qwen_style.json");
  CHECK(q.encode("hi<|end|>yo", false) == Ids{104, 105, 269, 121, 111});
  CHECK(q.encode("<|end|><|end|><|end|>", false) == Ids{270, 269});  // the longest match first
  CHECK(q.encode("x   [L]  y", false) == Ids{120, 271, 32, 32, 121});  // lstrip takes the spaces before
  CHECK(q.encode("x [R]   y", false) == Ids{120, 32, 272, 121});       // rstrip the spaces after
  // single_word: not where a word character touches it (Hugging Face's Rust rule).
  CHECK(q.encode("word wordy aword word.", false) == Ids{273, 262, 100, 121, 32, 97, 119, 261, 100, 32, 273, 46});
  // normalized: matched after NFC, so the decomposed ő (o + U+030B) is the token too.
  CHECK(q.encode("o\xCC\x8B", false) == Ids{274});
  CHECK(q.token_to_id("<|end|>") == 269);
  CHECK(q.token_to_id("he") == 256);
  CHECK(!q.token_to_id("nope"));
  CHECK(q.id_to_token(271) == "[L]");
  CHECK(q.is_special(269));
  CHECK(!q.is_special(271));
  CHECK(!q.is_special(100));
  // Special tokens decode as their text.
  CHECK(q.decode(Ids{104, 105, 269, 121, 111}) == "hi<|end|>yo");
}

TEST_CASE("tokenizer: TemplateProcessing adds the BOS, the ByteLevel post-processor adds nothing") {
  const Tokenizer q = Tokenizer::load(kUnit + "/qwen_style.json");
  CHECK(q.encode("hello") == Ids{268, 259});
  CHECK(q.encode("hello", false) == Ids{259});
  CHECK(q.encode("") == Ids{268});
  json j = unit_json("qwen_style.json");
  j["post_processor"] = j["post_processor"]["processors"][1];  // the template alone
  CHECK(from(j).encode("hello") == Ids{268, 259});
  const Tokenizer g = Tokenizer::load(kUnit + "/gpt2_style.json");
  CHECK(g.encode("hello", true) == g.encode("hello", false));
}

TEST_CASE("tokenizer: decode gives the bytes back (round trip over multibyte text)") {
  const Tokenizer q = Tokenizer::load(kUnit + "/qwen_style.json");
  for (const std::string& text : std::vector<std::string>{"hello world", "  two  spaces\tand\r\ntabs  ", "日本語 🇯🇵 👨‍👩‍👧",
                                                          std::string("x\0y", 3), "<|end|> e\xCC\x81"})
    CHECK(q.decode(q.encode(text, false)) == q.normalize(text));
  CHECK(q.decode(q.encode("hello")) == "<|bos|>hello");
}

TEST_CASE("tokenizer: the streaming decoder emits only whole characters") {
  const Tokenizer g = Tokenizer::load(kUnit + "/gpt2_style.json");
  const std::string text = " a👍é日";  // 4-, 2- and 3-byte characters, one byte token each
  const Ids ids = g.encode(text);
  REQUIRE(ids.size() == text.size());
  Tokenizer::StreamDecoder stream = g.stream_decoder();
  std::vector<std::string> outs;
  for (int32_t id : ids) outs.push_back(stream.push(id));
  CHECK(outs == std::vector<std::string>{" ", "a", "", "", "", "👍", "", "é", "", "", "日"});
  CHECK(stream.finish() == "");
  // An unfinished character comes out of finish() as it is; a stray byte at once.
  Tokenizer::StreamDecoder s2 = g.stream_decoder();
  CHECK(s2.push(0xE6) == "");
  CHECK(s2.push(0x97) == "");
  CHECK(s2.finish() == "\xE6\x97");
  CHECK(s2.push(0x97) == "\x97");
  CHECK(s2.push('x') == "x");
  // The stream keeps its tokenizer alive.
  Tokenizer::StreamDecoder s3 = Tokenizer::load(kUnit + "/gpt2_style.json").stream_decoder();
  CHECK(s3.push(104) == "h");
}

TEST_CASE("tokenizer: an id outside the vocabulary is an error naming it") {
  const Tokenizer g = Tokenizer::load(kUnit + "/gpt2_style.json");
  expect_error([&] { (void)g.decode(Ids{104, 269}); }, ErrorCode::invalid_argument, {"269", "gpt2_style.json", "0..268"});
  expect_error([&] { (void)g.decode(Ids{-1}); }, ErrorCode::invalid_argument, {"-1"});
  Tokenizer::StreamDecoder s = g.stream_decoder();
  expect_error([&] { (void)s.push(100000); }, ErrorCode::invalid_argument, {"100000"});
  json j = unit_json("gpt2_style.json");
  j["model"]["vocab"]["abc"] = 300;  // id 267 becomes a hole below the added token
  expect_error([&] { (void)from(j).decode(Ids{267}); }, ErrorCode::invalid_argument, {"267", "unused"});
  CHECK(!from(j).id_to_token(267));
}

TEST_CASE("tokenizer: invalid UTF-8 input is an error naming the byte offset") {
  const Tokenizer g = Tokenizer::load(kUnit + "/gpt2_style.json");
  expect_error([&] { (void)g.encode("ab\xFF"); }, ErrorCode::invalid_argument, {"UTF-8", "offset 2"});
  expect_error([&] { (void)g.encode("abcdefghij\xC3"); }, ErrorCode::invalid_argument, {"offset 10"});  // cut short
  expect_error([&] { (void)g.encode("\xC0\x80"); }, ErrorCode::invalid_argument, {"offset 0"});         // overlong
  expect_error([&] { (void)g.encode("a\xED\xA0\x80"); }, ErrorCode::invalid_argument, {"offset 1"});    // surrogate
  expect_error([&] { (void)g.encode("a\xF4\x90\x80\x80"); }, ErrorCode::invalid_argument, {"offset 1"});  // > U+10FFFF
}

TEST_CASE("tokenizer: a byte with no token needs unk_token, which is refused when the text needs it") {
  json j = unit_json("gpt2_style.json");
  j["model"]["vocab"].erase("z");
  j["model"]["vocab"]["zz"] = 122;  // the same ids, but no token for the byte 'z'
  j["model"]["unk_token"] = "<unk>";
  const Tokenizer t = from(j);
  CHECK(t.encode("ab", false) == Ids{32, 97, 98});
  expect_error([&] { (void)t.encode("az"); }, ErrorCode::unsupported, {"unit.json", "unk_token", "'<unk>'", "0x7A"});
}

TEST_CASE("tokenizer: loading a directory, and files that are missing") {
  vkgate::test::TempDir dir;
  const std::string text = vkgate::test::read_text(kUnit + "/gpt2_style.json");
  dir.write("tokenizer.json", text);
  CHECK(Tokenizer::load(dir.path).encode("hello") == Ids{32, 259});
  CHECK(Tokenizer::load(dir.path).source() == (dir.path / "tokenizer.json").string());
  std::filesystem::create_directories(dir.path / "empty");
  expect_error([&] { Tokenizer::load(dir.path / "empty"); }, ErrorCode::io, {"empty", "no tokenizer.json"});
  expect_error([&] { Tokenizer::load(dir.file("nope.json")); }, ErrorCode::io, {"nope.json", "cannot open"});
  dir.write("truncated.json", text.substr(0, text.size() / 2));
  expect_error([&] { Tokenizer::load(dir.file("truncated.json")); }, ErrorCode::io, {dir.file("truncated.json"), "not valid JSON"});
}

TEST_CASE("tokenizer: every malformed or unsupported file is refused naming the file and the key") {
  struct Case {
    const char* what;
    void (*edit)(json&);
    ErrorCode code;
    std::vector<std::string> mentions;
  };
  const std::vector<Case> cases = {
      {"top level not an object", [](json& j) { j = json::array(); }, ErrorCode::io, {"top level"}},
      {"no model", [](json& j) { j.erase("model"); }, ErrorCode::io, {"model: missing"}},
      {"no model.vocab", [](json& j) { j["model"].erase("vocab"); }, ErrorCode::io, {"model.vocab: missing"}},
      {"model.vocab not an object", [](json& j) { j["model"]["vocab"] = json::array(); }, ErrorCode::io, {"model.vocab: must be an object"}},
      {"no model.merges", [](json& j) { j["model"].erase("merges"); }, ErrorCode::io, {"model.merges: missing"}},
      {"negative id", [](json& j) { j["model"]["vocab"]["he"] = -3; }, ErrorCode::io, {"model.vocab['he']", "-3"}},
      {"id not an integer", [](json& j) { j["model"]["vocab"]["he"] = "7"; }, ErrorCode::io, {"model.vocab['he']"}},
      {"two tokens one id", [](json& j) { j["model"]["vocab"]["he"] = 257; }, ErrorCode::io, {"model.vocab['", "257"}},
      {"an id far beyond the vocabulary", [](json& j) { j["model"]["vocab"]["he"] = 2000000000; }, ErrorCode::unsupported,
       {"model.vocab['he']", "id 2000000000 is too far beyond a vocabulary of 268 tokens"}},
      {"model type", [](json& j) { j["model"]["type"] = "WordPiece"; }, ErrorCode::unsupported, {"model.type", "'WordPiece' is not supported"}},
      {"byte_fallback", [](json& j) { j["model"]["byte_fallback"] = true; }, ErrorCode::unsupported, {"model.byte_fallback"}},
      {"dropout", [](json& j) { j["model"]["dropout"] = 0.1; }, ErrorCode::unsupported, {"model.dropout"}},
      {"subword prefix", [](json& j) { j["model"]["continuing_subword_prefix"] = "##"; }, ErrorCode::unsupported, {"model.continuing_subword_prefix"}},
      {"merge of an unknown token", [](json& j) { j["model"]["merges"][3] = "hell q!"; }, ErrorCode::io, {"model.merges[3]", "'q!' is not in model.vocab"}},
      {"merge result unknown", [](json& j) { j["model"]["merges"].push_back("a b"); }, ErrorCode::io, {"model.merges[11]", "'ab'"}},
      {"merge with two spaces", [](json& j) { j["model"]["merges"][0] = "h e l"; }, ErrorCode::io, {"model.merges[0]", "one space"}},
      {"merge pair of three", [](json& j) { j["model"]["merges"][0] = {"h", "e", "l"}; }, ErrorCode::io, {"model.merges[0]"}},
      {"unknown pre-tokenizer",
       [](json& j) {
         const json split = {{"type", "Split"}, {"pattern", {{"String", " "}}}, {"behavior", "Isolated"}};
         j["pre_tokenizer"] = {{"type", "Sequence"}, {"pretokenizers", {split, {{"type", "Metaspace"}}, j["pre_tokenizer"]}}};
       },
       ErrorCode::unsupported, {"pre_tokenizer.pretokenizers[1].type: 'Metaspace' is not supported"}},
      {"ByteLevel not last",
       [](json& j) {
         j["pre_tokenizer"] = {{"type", "Sequence"}, {"pretokenizers", {j["pre_tokenizer"], {{"type", "Split"}, {"pattern", {{"String", " "}}}, {"behavior", "Isolated"}}}}};
       },
       ErrorCode::unsupported, {"pre_tokenizer.pretokenizers[0]", "last"}},
      {"no pre-tokenizer", [](json& j) { j["pre_tokenizer"] = nullptr; }, ErrorCode::unsupported, {"pre_tokenizer", "ByteLevel"}},
      {"bad regex",
       [](json& j) {
         j["pre_tokenizer"] = {{"type", "Sequence"}, {"pretokenizers", {{{"type", "Split"}, {"pattern", {{"Regex", "(a"}}}, {"behavior", "Isolated"}}, j["pre_tokenizer"]}}};
       },
       ErrorCode::io, {"pre_tokenizer.pretokenizers[0].pattern", "does not compile"}},
      {"bad split behavior",
       [](json& j) {
         j["pre_tokenizer"] = {{"type", "Sequence"}, {"pretokenizers", {{{"type", "Split"}, {"pattern", {{"String", "a"}}}, {"behavior", "Sideways"}}, j["pre_tokenizer"]}}};
       },
       ErrorCode::io, {"pre_tokenizer.pretokenizers[0].behavior", "'Sideways'"}},
      {"unknown normalizer", [](json& j) { j["normalizer"] = {{"type", "NFKD"}}; }, ErrorCode::unsupported, {"normalizer.type", "'NFKD'"}},
      {"unknown normalizer in a sequence",
       [](json& j) { j["normalizer"] = {{"type", "Sequence"}, {"normalizers", {{{"type", "NFC"}}, {{"type", "Lowercase"}}}}}; },
       ErrorCode::unsupported, {"normalizer.normalizers[1].type", "'Lowercase'"}},
      {"no decoder", [](json& j) { j.erase("decoder"); }, ErrorCode::unsupported, {"decoder"}},
      {"unknown decoder", [](json& j) { j["decoder"] = {{"type", "WordPiece"}}; }, ErrorCode::unsupported, {"decoder.type", "'WordPiece'"}},
      {"unknown post-processor", [](json& j) { j["post_processor"] = {{"type", "RobertaProcessing"}}; }, ErrorCode::unsupported, {"post_processor.type"}},
      {"template naming an unknown special token",
       [](json& j) { j["post_processor"] = {{"type", "TemplateProcessing"}, {"single", {{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}}}}, {"special_tokens", json::object()}}; },
       ErrorCode::io, {"post_processor.single[0].SpecialToken.id", "'<s>'"}},
      {"template id out of range",
       [](json& j) {
         j["post_processor"] = {{"type", "TemplateProcessing"},
                                {"single", {{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}}}},
                                {"special_tokens", {{"<s>", {{"id", "<s>"}, {"ids", {999}}, {"tokens", {"<s>"}}}}}}};
       },
       ErrorCode::io, {"post_processor.special_tokens['<s>'].ids[0]", "999"}},
      {"added token id disagrees", [](json& j) { j["added_tokens"][0]["id"] = 300; }, ErrorCode::io, {"added_tokens[0].id", "300", "268"}},
      {"added token without content", [](json& j) { j["added_tokens"][0].erase("content"); }, ErrorCode::io, {"added_tokens[0].content: missing"}},
      {"added token flag not a bool", [](json& j) { j["added_tokens"][0]["lstrip"] = 1; }, ErrorCode::io, {"added_tokens[0].lstrip"}},
      {"truncation", [](json& j) { j["truncation"] = {{"max_length", 8}}; }, ErrorCode::unsupported, {"truncation"}},
      {"padding", [](json& j) { j["padding"] = {{"length", 8}}; }, ErrorCode::unsupported, {"padding"}},
      {"version", [](json& j) { j["version"] = "2.0"; }, ErrorCode::unsupported, {"version", "'2.0'"}},
  };
  for (const Case& c : cases) {
    CAPTURE(c.what);
    json j = unit_json("gpt2_style.json");
    c.edit(j);
    std::vector<std::string> mentions = c.mentions;
    mentions.push_back("models/m/tokenizer.json: ");
    expect_error([&] { from(j, "models/m/tokenizer.json"); }, c.code, mentions);
  }
}

// Oniguruma also exports regcomp/regexec/regfree/regerror: linked into the
// program, it replaced the C library's for every library in the process (Mesa's
// driconf among them; under AddressSanitizer the mix deadlocked). Opened with
// RTLD_LOCAL, none of its names is visible to the process.
TEST_CASE("tokenizer: Oniguruma's names stay out of the process (regcomp is the C library's)") {
  const Tokenizer t = Tokenizer::load(kUnit + "/gpt2_style.json");  // compiles GPT-2's regex: Oniguruma is open
  CHECK(t.encode("hello") == Ids{32, 259});
  CHECK(dlsym(RTLD_DEFAULT, "onig_new") == nullptr);
  void* regcomp_fn = dlsym(RTLD_DEFAULT, "regcomp");
  REQUIRE(regcomp_fn);
  Dl_info info{};
  REQUIRE(dladdr(regcomp_fn, &info));
  CAPTURE(info.dli_fname);
  CHECK(std::string(info.dli_fname).find("libonig") == std::string::npos);
}

}  // namespace test_tokenizer
