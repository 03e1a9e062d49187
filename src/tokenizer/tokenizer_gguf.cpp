// A GGUF file's own tokenizer (llama.cpp's tokenizer.ggml.* keys, as
// convert_hf_to_gguf.py's _set_vocab_gpt2 writes them) built into the same
// parts tokenizer_json.cpp builds from a tokenizer.json, so that both give
// the same ids: the token list (one entry per id, padded with UNUSED
// "[PADn]" entries up to the model's vocab_size), token types (gguf-py's
// TokenType: 1 normal, 2 unknown, 3 control, 4 user-defined, 5 unused,
// 6 byte), merges as "left right", and `pre` naming the pre-tokenizer, which
// is taken as the tokenizer.json of that family has it (Oniguruma runs the
// original patterns, which llama.cpp has to rewrite for its own engine).
#include <algorithm>
#include <cctype>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "tokenizer/tokenizer_impl.hpp"
#include "vkgate/error.hpp"
#include "vkgate/gguf.hpp"

namespace vkgate {

namespace {

// One family of tokenizer.ggml.pre values: the pre-tokenizer and normalizer of its tokenizer.json.
struct PreTokenizerSpec {
  std::vector<const char*> names;
  const char* split;       // a Split (Isolated) before the byte-level step, or nullptr
  bool gpt2_byte_level;    // the ByteLevel step's own regex (use_regex)
  bool nfc;                // normalizer NFC
  bool ignore_merges;      // BPE's ignore_merges
  bool add_bos;            // llama.cpp's add_bos when tokenizer.ggml.add_bos_token is absent
};

const std::vector<PreTokenizerSpec>& pre_tokenizers() {
  static const std::vector<PreTokenizerSpec> specs = {
      // Llama 3's tokenizer.json: digits in threes, ignore_merges, no normalizer.
      {{"llama-bpe", "llama3", "llama-v3"},
       R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)",
       false, false, true, true},
      // Qwen2 / Qwen2.5 / Qwen3's: one digit per piece, NFC.
      {{"qwen2", "deepseek-r1-qwen"},
       R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)",
       false, true, false, false},
      // Qwen3.5's (transformers' Qwen3_5Tokenizer): Qwen2's, with combining marks
      // (\p{M}) kept in a word instead of split off, NFC.
      {{"qwen35"},
       R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)",
       false, true, false, false},
      // GPT-2's: the ByteLevel pre-tokenizer's own split.
      {{"gpt-2"}, nullptr, true, false, false, false},
  };
  return specs;
}

}  // namespace

const char* tok::gguf_pre_name(std::string_view split_regex, bool byte_level_regex, bool nfc, bool ignore_merges) {
  for (const PreTokenizerSpec& s : pre_tokenizers())
    if ((s.split ? std::string_view(s.split) : std::string_view()) == split_regex &&
        s.gpt2_byte_level == byte_level_regex && s.nfc == nfc && s.ignore_merges == ignore_merges)
      return s.names.front();
  return nullptr;
}

namespace {

constexpr int64_t kNormal = 1, kUnknown = 2, kControl = 3, kUserDefined = 4, kUnused = 5, kByte = 6;

class GgufBuilder {
 public:
  GgufBuilder(const GgufFile& f, Tokenizer::Impl& t) : f_(f), t_(t) {}

  [[noreturn]] void fail(ErrorCode code, const std::string& key, const std::string& why) const {
    throw Error(code, f_.path() + ": key '" + key + "' " + why);
  }

  void build() {
    t_.source = f_.path();
    const std::optional<std::string> model = f_.string_or("tokenizer.ggml.model");
    if (!model) throw Error(ErrorCode::io, f_.path() + ": the file holds no tokenizer (no key 'tokenizer.ggml.model')");
    if (*model != "gpt2")
      fail(ErrorCode::unsupported, "tokenizer.ggml.model",
           "is \"" + *model + "\": only \"gpt2\" (byte-level BPE) is built" +
               (*model == "llama" ? " (\"llama\" is SentencePiece)" : ""));
    const PreTokenizerSpec& pre = pre_tokenizer();

    const std::vector<std::string>& tokens = f_.strings("tokenizer.ggml.tokens");
    std::vector<int64_t> types(tokens.size(), kNormal);
    if (f_.contains("tokenizer.ggml.token_type")) {
      types = f_.integers("tokenizer.ggml.token_type");
      if (types.size() != tokens.size())
        fail(ErrorCode::io, "tokenizer.ggml.token_type",
             "has " + std::to_string(types.size()) + " entries but tokenizer.ggml.tokens has " +
                 std::to_string(tokens.size()));
    }
    if (tokens.size() > size_t(INT32_MAX)) fail(ErrorCode::io, "tokenizer.ggml.tokens", "has too many entries");

    // The model's tokens first: the byte tokens and merges are looked up among them only.
    t_.kind.assign(tokens.size(), Tokenizer::Impl::absent);
    t_.token_text.resize(tokens.size());
    t_.token_bytes.resize(tokens.size());
    t_.ids.reserve(tokens.size() + 16);
    for (size_t id = 0; id < tokens.size(); ++id) {
      const int64_t type = types[id];
      if (type < kNormal || type > kByte)
        fail(ErrorCode::io, "tokenizer.ggml.token_type",
             "[" + std::to_string(id) + "] is " + std::to_string(type) + ", not a token type (1..6)");
      if (type == kByte)
        fail(ErrorCode::unsupported, "tokenizer.ggml.token_type",
             "[" + std::to_string(id) + "] marks a BYTE token (byte fallback): a gpt2 vocabulary has none");
      if (type != kNormal && type != kUnknown) continue;
      const std::string& text = tokens[id];
      if (text.empty() || tok::invalid_utf8_offset(text) != std::string::npos)
        fail(ErrorCode::io, "tokenizer.ggml.tokens", "[" + std::to_string(id) + "] is empty or not valid UTF-8");
      if (!t_.ids.emplace(text, int32_t(id)).second)
        fail(ErrorCode::io, "tokenizer.ggml.tokens",
             "[" + std::to_string(id) + "] '" + text + "' is also token " + std::to_string(t_.ids.find(text)->second));
      const bool mapped = set_token(int32_t(id), text, Tokenizer::Impl::model_token);
      if (mapped && pre.ignore_merges) t_.bpe.ids_by_bytes.emplace(t_.token_bytes[id], int32_t(id));
    }
    for (int b = 0; b < 256; ++b)
      if (const auto it = t_.ids.find(tok::byte_char(uint8_t(b))); it != t_.ids.end()) t_.bpe.byte_ids[size_t(b)] = it->second;
    t_.bpe.ignore_merges = pre.ignore_merges;
    t_.bpe.missing_byte_message = f_.path() + ": tokenizer.ggml.tokens has no token for byte ";
    merges();

    // Added tokens: matched in the raw text before anything else, as Hugging
    // Face matches the tokenizer.json's added_tokens (the converter writes them
    // pre-normalized, so none is matched in the normalized text).
    for (size_t id = 0; id < tokens.size(); ++id) {
      if (types[id] != kControl && types[id] != kUserDefined) continue;
      const std::string& text = tokens[id];
      if (text.empty()) continue;
      if (tok::invalid_utf8_offset(text) != std::string::npos)
        fail(ErrorCode::io, "tokenizer.ggml.tokens", "[" + std::to_string(id) + "] is not valid UTF-8");
      tok::AddedToken a;
      a.content = a.pattern = text;
      a.id = int32_t(id);
      a.special = types[id] == kControl;
      set_token(a.id, text, a.special ? Tokenizer::Impl::special_token : Tokenizer::Impl::added_token);
      t_.ids.insert_or_assign(text, a.id);
      t_.added.push_back(std::move(a));
    }
    // The converter's padding up to the model's rows is no part of the vocabulary.
    size_t size = t_.kind.size();
    while (size > 0 && t_.kind[size - 1] == Tokenizer::Impl::absent) --size;
    t_.kind.resize(size);
    t_.token_text.resize(size);
    t_.token_bytes.resize(size);

    t_.normalizer.nfc = pre.nfc;
    if (pre.split) {
      tok::SplitStep step;
      step.regex = std::make_unique<tok::Regex>(pre.split, f_.path() + ": tokenizer.ggml.pre");
      step.behavior = tok::SplitBehavior::isolated;
      t_.pre_tokenizer.splits.push_back(std::move(step));
    }
    if (pre.gpt2_byte_level)
      t_.pre_tokenizer.byte_level_regex = std::make_unique<tok::Regex>(
          R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)", f_.path() + ": tokenizer.ggml.pre");
    t_.pre_tokenizer.add_prefix_space = false;
    special_template(pre);
    t_.raw_added.build(t_.added, false);
    t_.normalized_added.build(t_.added, true);
  }

 private:
  const PreTokenizerSpec& pre_tokenizer() const {
    std::string known;
    for (const PreTokenizerSpec& s : pre_tokenizers())
      for (const char* n : s.names) known += std::string(known.empty() ? "" : ", ") + "\"" + n + "\"";
    const std::optional<std::string> pre = f_.string_or("tokenizer.ggml.pre");
    if (!pre) fail(ErrorCode::unsupported, "tokenizer.ggml.pre", "is absent: the pre-tokenizer must be named (" + known + ")");
    for (const PreTokenizerSpec& s : pre_tokenizers())
      for (const char* n : s.names)
        if (*pre == n) return s;
    fail(ErrorCode::unsupported, "tokenizer.ggml.pre", "is \"" + *pre + "\": the pre-tokenizers built are " + known);
  }

  void merges() {
    const char* key = "tokenizer.ggml.merges";
    if (!f_.contains(key)) fail(ErrorCode::io, key, "is required for a gpt2 tokenizer");
    const std::vector<std::string>& all = f_.strings(key);
    t_.bpe.merges.reserve(all.size());
    std::string merged;
    for (size_t rank = 0; rank < all.size(); ++rank) {
      const std::string& m = all[rank];
      // As llama.cpp splits them: at the first space after the first character.
      const size_t space = m.size() > 1 ? m.find(' ', 1) : std::string::npos;
      if (space == std::string::npos || space + 1 >= m.size())
        fail(ErrorCode::io, key, std::string("[").append(std::to_string(rank)) + "] '" + m + "' is not \"left right\"");
      const std::string_view left(m.data(), space), right(m.data() + space + 1, m.size() - space - 1);
      merged.assign(left).append(right);
      auto id = [&](std::string_view token) {
        const auto it = t_.ids.find(token);
        if (it == t_.ids.end())
          fail(ErrorCode::io, key,
               std::string("[").append(std::to_string(rank)) + "]: '" + std::string(token) + "' is not in tokenizer.ggml.tokens");
        return it->second;
      };
      const int32_t a = id(left), b = id(right), ab = id(merged);
      t_.bpe.merges.insert_or_assign(uint64_t(uint32_t(a)) << 32 | uint32_t(b), tok::Bpe::Merge{uint32_t(rank), ab});
    }
  }

  // add_special_tokens: BOS before and EOS after the text, as the file (or llama.cpp's default) says.
  void special_template(const PreTokenizerSpec& pre) {
    const std::optional<bool> add_bos_key = f_.boolean_or("tokenizer.ggml.add_bos_token");
    const bool add_bos = add_bos_key.value_or(pre.add_bos);
    const bool add_eos = f_.boolean_or("tokenizer.ggml.add_eos_token").value_or(false);
    auto special = [&](const char* key, bool required) -> std::optional<int32_t> {
      const std::optional<int64_t> id = f_.integer_or(key);
      if (!id) {
        if (required) fail(ErrorCode::io, key, "is absent but the tokenizer adds that token");
        return std::nullopt;
      }
      if (*id < 0 || size_t(*id) >= t_.kind.size() || t_.kind[size_t(*id)] == Tokenizer::Impl::absent)
        fail(ErrorCode::io, key, "is " + std::to_string(*id) + ", not a token of tokenizer.ggml.tokens");
      return int32_t(*id);
    };
    // Without add_bos_token in the file, a missing bos_token_id only means no BOS.
    const std::optional<int32_t> bos = add_bos ? special("tokenizer.ggml.bos_token_id", add_bos_key.has_value()) : std::nullopt;
    const std::optional<int32_t> eos = add_eos ? special("tokenizer.ggml.eos_token_id", true) : std::nullopt;
    if (!bos && !eos) return;
    t_.has_template = true;
    if (bos) t_.single.push_back(tok::TemplatePiece{false, {*bos}});
    t_.single.push_back(tok::TemplatePiece{true, {}});
    if (eos) t_.single.push_back(tok::TemplatePiece{false, {*eos}});
  }

  bool set_token(int32_t id, const std::string& text, Tokenizer::Impl::Kind kind) {
    t_.kind[size_t(id)] = kind;
    t_.token_text[size_t(id)] = text;
    bool mapped = true;
    t_.token_bytes[size_t(id)] = tok::token_bytes(text, &mapped);
    return mapped;
  }

  const GgufFile& f_;
  Tokenizer::Impl& t_;
};

bool looks_like_gguf(const std::string& file) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(file, ec)) return false;
  if (file.size() >= 5) {
    std::string ext = file.substr(file.size() - 5);
    std::transform(ext.begin(), ext.end(), ext.begin(), [](unsigned char c) { return char(std::tolower(c)); });
    if (ext == ".gguf") return true;
  }
  std::ifstream in(file, std::ios::binary);
  char magic[4] = {};
  return in.read(magic, 4) && std::memcmp(magic, "GGUF", 4) == 0;
}

}  // namespace

std::shared_ptr<const Tokenizer::Impl> load_gguf_tokenizer(const std::string& file) {
  if (!looks_like_gguf(file)) return nullptr;
  auto t = std::make_shared<Tokenizer::Impl>();
  GgufBuilder(GgufFile::open(file), *t).build();
  return t;
}

Tokenizer Tokenizer::from_gguf(const GgufFile& file) {
  auto t = std::make_shared<Tokenizer::Impl>();
  GgufBuilder(file, *t).build();
  return Tokenizer(std::move(t));
}

}  // namespace vkgate
