// Internal: the parts of a loaded Tokenizer, one small type per pipeline stage
// in the order encoding runs them (as Hugging Face's `tokenizers` is built):
// added tokens (added_tokens.cpp) → normalizer (normalize.cpp) →
// pre-tokenizer (pretokenize.cpp) → BPE (bpe.cpp) → post-processor template;
// decoding in decode.cpp. tokenizer_json.cpp builds them from the file,
// tokenizer.cpp runs them.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "vkgate/tokenizer.hpp"

namespace vkgate::tok {

// ---- UTF-8 (the input is validated once, so the rest may trust it)

// Byte offset of the first byte that is not valid UTF-8, or npos.
size_t invalid_utf8_offset(std::string_view s);
// The code point starting at s[i] of valid UTF-8; *len gets its byte count.
uint32_t code_point_at(std::string_view s, size_t i, size_t* len);
// Start of the character that ends at s[i - 1].
size_t previous_char_start(std::string_view s, size_t i);

// Heterogeneous lookup: find(std::string_view) without building a string.
// Not noexcept on purpose: libstdc++ then caches each key's hash in its node
// instead of rehashing keys while walking a bucket (4x faster loading).
struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
template <typename V>
using StringMap = std::unordered_map<std::string, V, StringHash, std::equal_to<>>;

// ---- the byte-level alphabet (GPT-2's): each byte is one printable character

// The character (UTF-8) that stands for `byte` in byte-level tokens.
std::string byte_char(uint8_t byte);
// The bytes a token stands for: each character mapped back to its byte; a
// token with a character outside the alphabet stands for its own UTF-8
// (*mapped = false), as Hugging Face's ByteLevel decoder treats it.
std::string token_bytes(std::string_view token, bool* mapped);

// ---- regular expressions (Oniguruma, the engine Hugging Face uses)

class Regex {
 public:
  // `where` ("FILE: KEY") starts the message of the Error a bad pattern throws.
  Regex(std::string_view pattern, const std::string& where);
  ~Regex();
  Regex(Regex&& o) noexcept : re_(std::exchange(o.re_, nullptr)) {}
  Regex& operator=(Regex&&) = delete;
  Regex(const Regex&) = delete;

  // Appends every non-overlapping match in `text` as [start, end) byte offsets, left to right.
  void find_all(std::string_view text, std::vector<std::pair<size_t, size_t>>& out) const;

 private:
  void* re_;  // regex_t*
};

// Unicode \w and \s as Oniguruma classifies them (for single_word, lstrip, rstrip).
bool is_word_char(uint32_t cp);
bool is_space_char(uint32_t cp);

// ---- normalizer

struct Normalizer {
  bool nfc = false;
  // `in` normalized; the result views `in` itself or `buffer`.
  std::string_view apply(std::string_view in, std::string& buffer) const;
  std::string apply(std::string_view in) const {
    std::string buffer;
    return std::string(apply(in, buffer));
  }
};

// ---- pre-tokenizer

enum class SplitBehavior { removed, isolated, merged_with_previous, merged_with_next, contiguous };

struct SplitStep {
  std::unique_ptr<Regex> regex;  // a String pattern is compiled escaped, as Hugging Face does
  SplitBehavior behavior = SplitBehavior::isolated;
  bool invert = false;
};

// Buffers one encode() call reuses.
struct Scratch {
  std::vector<std::pair<size_t, size_t>> matches;
  std::vector<std::string_view> pieces, next_pieces;
  std::string prefixed;    // a piece with the space add_prefix_space puts before it
  std::string normalized;  // the text between two raw added tokens, normalized
  // BPE
  struct Symbol {
    int32_t id;
    int32_t prev, next;
    bool gone;
  };
  struct Candidate {
    uint32_t rank;
    uint32_t pos;
    int32_t id;
  };
  std::vector<Symbol> symbols;
  std::vector<Candidate> heap;
  StringMap<std::pair<uint32_t, uint32_t>> cache;  // piece → [offset, count) in cached_ids
  std::vector<int32_t> cached_ids;
};

struct PreTokenizer {
  std::vector<SplitStep> splits;  // in order, then the byte-level step
  bool add_prefix_space = false;
  std::unique_ptr<Regex> byte_level_regex;  // GPT-2's, when use_regex

  // Calls emit(piece) for every pre-token of `text`, in order.
  template <typename Emit>
  void run(std::string_view text, Scratch& s, Emit&& emit) const;
  // The Split steps alone: s.pieces holds the pieces of `text`.
  void split(std::string_view text, Scratch& s) const;
};

// ---- BPE model

class Bpe {
 public:
  struct Merge {
    uint32_t rank;
    int32_t id;
  };

  std::array<int32_t, 256> byte_ids;                    // the token of each single byte, -1 if none
  std::unordered_map<uint64_t, Merge> merges;           // (left id << 32 | right id) → rank and result
  StringMap<int32_t> ids_by_bytes;                      // the bytes a token stands for → id
  bool ignore_merges = false;
  std::string missing_byte_message;                     // prefix of the Error for a byte with no token

  Bpe() { byte_ids.fill(-1); }
  // Appends the ids of one pre-token (raw bytes).
  void encode(std::string_view piece, std::vector<int32_t>& out, Scratch& s) const;

 private:
  void merge(std::string_view piece, std::vector<int32_t>& out, Scratch& s) const;
};

// ---- added tokens

struct AddedToken {
  std::string content;  // as in the file
  std::string pattern;  // what is matched: content, normalized when `normalized`
  int32_t id = -1;
  bool single_word = false, lstrip = false, rstrip = false, normalized = false, special = false;
};

// The tokens matched in one pass (the raw text, or the normalized text).
class AddedTokenSplitter {
 public:
  void build(const std::vector<AddedToken>& all, bool normalized);
  bool empty() const { return tokens_.empty(); }
  // Calls text(view) for each non-empty stretch between matches and token(id)
  // for each match, in order.
  template <typename Text, typename Token>
  void split(std::string_view s, Text&& text, Token&& token) const;

 private:
  struct Match {
    size_t start, stop;
    const AddedToken* token;
  };
  // The next leftmost-longest match at or after `from`, as Hugging Face's Aho-Corasick finds it.
  bool next_match(std::string_view s, size_t from, Match& m) const;
  // Applies single_word, lstrip and rstrip; false when the match is discarded.
  bool accept(std::string_view s, size_t consumed, Match& m) const;

  std::vector<const AddedToken*> tokens_;
  std::array<std::vector<const AddedToken*>, 256> by_first_byte_;  // longest first
};

template <typename Text, typename Token>
void AddedTokenSplitter::split(std::string_view s, Text&& text, Token&& token) const {
  size_t consumed = 0;
  Match m;
  for (size_t from = 0; next_match(s, from, m);) {
    from = m.stop;  // a discarded match still uses up its bytes, as in Hugging Face
    if (!accept(s, consumed, m)) continue;
    if (m.start > consumed) text(s.substr(consumed, m.start - consumed));
    token(m.token->id);
    consumed = m.stop;
  }
  if (consumed < s.size()) text(s.substr(consumed));
}

template <typename Emit>
void PreTokenizer::run(std::string_view text, Scratch& s, Emit&& emit) const {
  split(text, s);
  for (std::string_view piece : s.pieces) {
    if (add_prefix_space && piece.front() != ' ') {
      s.prefixed.assign(1, ' ');
      s.prefixed.append(piece);
      piece = s.prefixed;
    }
    if (!byte_level_regex) {
      emit(piece);
      continue;
    }
    // Isolated: the matches and the stretches between them, each a pre-token.
    s.matches.clear();
    byte_level_regex->find_all(piece, s.matches);
    size_t at = 0;
    for (auto [start, end] : s.matches) {
      if (start > at) emit(piece.substr(at, start - at));
      if (end > start) emit(piece.substr(start, end - start));
      at = end;
    }
    if (at < piece.size()) emit(piece.substr(at));
  }
}

// ---- post-processor: what add_special_tokens puts around the sequence

struct TemplatePiece {
  bool sequence = false;    // the text's ids, else:
  std::vector<int32_t> ids;  // a special token's ids
};

// ---- GGUF (tokenizer_gguf.cpp)

// The tokenizer.ggml.pre name of the family whose tokenizer.json has this
// pre-tokenizer (a Split regex before the ByteLevel step, empty for none; the
// ByteLevel step's own regex), NFC normalizer and BPE ignore_merges, so that
// the GGUF builds the same tokenizer; nullptr when no family does.
const char* gguf_pre_name(std::string_view split_regex, bool byte_level_regex, bool nfc, bool ignore_merges);

}  // namespace vkgate::tok

namespace vkgate {

struct Tokenizer::Impl {
  std::string source;
  std::vector<tok::AddedToken> added;
  tok::AddedTokenSplitter raw_added, normalized_added;
  tok::Normalizer normalizer;
  tok::PreTokenizer pre_tokenizer;
  tok::Bpe bpe;
  bool has_template = false;
  std::vector<tok::TemplatePiece> single;

  // By id: the token as written, the bytes it decodes to, and what it is.
  enum Kind : uint8_t { absent, model_token, added_token, special_token };
  std::vector<std::string> token_text, token_bytes;
  std::vector<Kind> kind;
  tok::StringMap<int32_t> ids;  // token as written → id (an added token wins)

  void encode(std::string_view text, bool add_special_tokens, std::vector<int32_t>& out) const;
  // Appends the bytes of `id`; Error(invalid_argument) naming an id outside the vocabulary.
  void append_bytes(int32_t id, std::string& out) const;
};

// Builds a tokenizer from the text of a tokenizer.json (tokenizer_json.cpp).
std::shared_ptr<const Tokenizer::Impl> parse_tokenizer_json(std::string_view text, const std::string& source);
// The tokenizer of `file` when it is a GGUF file (its name ends in .gguf or
// it starts with the GGUF magic), else nullptr (tokenizer_gguf.cpp).
std::shared_ptr<const Tokenizer::Impl> load_gguf_tokenizer(const std::string& file);

}  // namespace vkgate
