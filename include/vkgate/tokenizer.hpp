// Tokenizer: the byte-level BPE of a Hugging Face `tokenizer.json` (Qwen2,
// Qwen3, Llama 3, GPT-2 style), text to token ids and back, exact to the id.
//
//   vkgate::Tokenizer tok = vkgate::Tokenizer::load("checkpoints/Qwen3-0.6B");  // or .../tokenizer.json
//   std::vector<int32_t> ids = tok.encode("Hello, world!");
//   std::string text = tok.decode(ids);                                    // == "Hello, world!"
//   vkgate::Tokenizer::StreamDecoder out = tok.stream_decoder();
//   for (int32_t id : generated) std::fputs(out.push(id).c_str(), stdout); // whole characters only
//   std::fputs(out.finish().c_str(), stdout);
//
// What a file may use (anything else is refused by load() with an Error that
// names the key, never approximated): model BPE (vocab, merges as "a b" or
// ["a", "b"], ignore_merges); added_tokens with lstrip, rstrip, single_word
// and normalized; normalizer null, NFC or a Sequence of NFC; pre_tokenizer
// Split (Regex or String pattern, any behavior, invert) and ByteLevel
// (add_prefix_space, use_regex), alone or in a Sequence that ends with the
// ByteLevel; post_processor null, ByteLevel, TemplateProcessing or a Sequence
// of those; decoder ByteLevel. Chat templates (tokenizer_config.json) are not
// applied: encode() tokenizes the text it is given.
//
// Encoding follows Hugging Face's `tokenizers`: added tokens are split out of
// the raw text first (longest match first), then each remaining piece is
// normalized, split by the pre-tokenizer (Oniguruma, as there), mapped to
// bytes and merged by merge rank; add_special_tokens applies the
// post-processor's template (e.g. Llama 3.1's BOS).
//
// Decoding gives the exact bytes the ids stand for (special tokens as their
// text, no clean-up of spaces), so decode(encode(text)) == text for valid
// UTF-8 text that the normalizer leaves as it is (see normalize()) and in which
// no lstrip/rstrip added token takes the spaces beside it. Ids that end inside
// a character decode to those bytes as they are, where Hugging Face's decode
// writes U+FFFD; StreamDecoder holds them back until the character is whole.
//
// Thread safety: a Tokenizer is immutable after load(); encode and decode may
// run on any number of threads at once. Copies share the loaded tables. A
// StreamDecoder is used by one thread at a time and keeps its tokenizer alive.
// A moved-from Tokenizer may only be assigned to or destroyed.
//
// Faults: vkgate::Error with ErrorCode::io for a file that cannot be read or
// is malformed (the message names the file and the JSON key), unsupported for
// a feature this tokenizer does not build (byte_fallback, a needed unk_token,
// an unknown normalizer, pre-tokenizer, post-processor or decoder), and
// invalid_argument for invalid UTF-8 input (naming the byte offset) or an id
// that is not in the vocabulary (naming it).
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace vkgate {

class GgufFile;

class Tokenizer {
 public:
  // A tokenizer.json, or a directory that holds one (normally the model
  // directory), or a GGUF file (from_gguf: a name ending in .gguf or the GGUF magic).
  static Tokenizer load(const std::filesystem::path& file_or_dir);
  // The text of a tokenizer.json; `source` names it in error messages.
  static Tokenizer from_json(std::string_view json_text, const std::string& source = "tokenizer.json");
  // The tokenizer a GGUF file carries (llama.cpp's tokenizer.ggml.* keys), for
  // tokenizer.ggml.model "gpt2" (byte-level BPE): tokens, merges, token_type
  // (CONTROL tokens become special added tokens, USER_DEFINED ones added
  // tokens, both matched in the raw text; UNUSED ones, the converter's
  // [PADn] padding, are not tokens), the pre-tokenizer named by
  // tokenizer.ggml.pre as the model's tokenizer.json has it ("llama-bpe" and
  // the other Llama 3 names: Llama 3's split, ignore_merges; "qwen2",
  // "deepseek-r1-qwen": Qwen's split after NFC; "qwen35": Qwen3.5's, which
  // keeps combining marks in their word; "gpt-2": GPT-2's), and add_special_tokens from tokenizer.ggml.add_bos_token
  // / add_eos_token (absent: llama.cpp's default, BOS for the Llama 3 names)
  // with bos_token_id / eos_token_id. load() also takes a .gguf file.
  // Errors name the file and the key: unsupported for another tokenizer
  // model (SentencePiece "llama", ...) or pre-tokenizer, io for a malformed one.
  static Tokenizer from_gguf(const GgufFile& file);

  // Token ids of `text` (UTF-8). add_special_tokens: what the post-processor
  // adds around a single sequence (Hugging Face's default: on).
  std::vector<int32_t> encode(std::string_view text, bool add_special_tokens = true) const;
  // The bytes `ids` stand for, concatenated. An id outside the vocabulary is an Error.
  std::string decode(std::span<const int32_t> ids) const;

  // The text as the normalizer leaves it (NFC for Qwen3, unchanged for Llama 3):
  // decode(encode(text)) == normalize(text) for text without added-token text.
  std::string normalize(std::string_view text) const;

  // Every id is in [0, vocab_size()); a model's embedding may have more rows.
  int32_t vocab_size() const;
  // The id of a token as written in tokenizer.json (added tokens included), e.g. "<|im_end|>".
  std::optional<int32_t> token_to_id(std::string_view token) const;
  // The token as written in tokenizer.json; nullopt for an id outside the vocabulary.
  std::optional<std::string> id_to_token(int32_t id) const;
  // True for an added token marked "special" (e.g. <|endoftext|>).
  bool is_special(int32_t id) const;
  // The file the tokenizer was loaded from (or from_json's source).
  const std::string& source() const;

  // Decodes ids one at a time, returning only complete UTF-8 characters, so
  // that generated text can be printed as it comes; the concatenation of every
  // push() and finish() equals decode() of all the ids.
  class StreamDecoder {
   public:
    // The text that is complete once `id` is added (may be empty). Throws on an
    // id outside the vocabulary, keeping what was pending.
    std::string push(int32_t id);
    // What is still pending (an incomplete character at the end), as is; then empty.
    std::string finish();

   private:
    friend class Tokenizer;
    explicit StreamDecoder(std::shared_ptr<const Tokenizer> tok) : tok_(std::move(tok)) {}
    std::shared_ptr<const Tokenizer> tok_;
    std::string pending_;
  };
  StreamDecoder stream_decoder() const;

  Tokenizer(const Tokenizer&) = default;
  Tokenizer(Tokenizer&&) noexcept = default;
  Tokenizer& operator=(const Tokenizer&) = default;
  Tokenizer& operator=(Tokenizer&&) noexcept = default;
  ~Tokenizer();

  struct Impl;  // internal to the library (src/tokenizer/)

 private:
  explicit Tokenizer(std::shared_ptr<const Impl> impl);
  std::shared_ptr<const Impl> impl_;
};

}  // namespace vkgate
