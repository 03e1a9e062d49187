// vkgate::Tokenizer: loading, and the encoding pipeline that runs the parts
// of tokenizer_impl.hpp in Hugging Face's order.
#include <cerrno>
#include <cstring>
#include <fstream>
#include <iterator>

#include "tokenizer/tokenizer_impl.hpp"
#include "vkgate/error.hpp"

namespace vkgate {

Tokenizer::Tokenizer(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}
Tokenizer::~Tokenizer() = default;

Tokenizer Tokenizer::load(const std::filesystem::path& file_or_dir) {
  std::error_code ec;
  std::filesystem::path file = file_or_dir;
  if (std::filesystem::is_directory(file_or_dir, ec)) {
    file = file_or_dir / "tokenizer.json";
    if (!std::filesystem::exists(file, ec))
      throw Error(ErrorCode::io, file_or_dir.string() + ": the directory holds no tokenizer.json");
  }
  if (auto gguf = load_gguf_tokenizer(file.string())) return Tokenizer(std::move(gguf));
  std::ifstream in(file, std::ios::binary);
  if (!in) throw Error(ErrorCode::io, file.string() + ": cannot open: " + std::strerror(errno));
  const std::string text{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  if (in.bad()) throw Error(ErrorCode::io, file.string() + ": cannot read: " + std::strerror(errno));
  return Tokenizer(parse_tokenizer_json(text, file.string()));
}

Tokenizer Tokenizer::from_json(std::string_view json_text, const std::string& source) {
  return Tokenizer(parse_tokenizer_json(json_text, source));
}

void Tokenizer::Impl::encode(std::string_view text, bool add_special_tokens, std::vector<int32_t>& out) const {
  if (const size_t bad = tok::invalid_utf8_offset(text); bad != std::string_view::npos)
    throw Error(ErrorCode::invalid_argument,
                "the text to tokenize is not valid UTF-8 at byte offset " + std::to_string(bad));
  tok::Scratch s;
  auto model = [&](std::string_view piece) { bpe.encode(piece, out, s); };
  auto added_id = [&](int32_t id) { out.push_back(id); };
  // Added tokens in the raw text, then normalization of what lies between
  // them, added tokens marked `normalized` in that, and the rest pre-tokenized.
  auto normalized_text = [&](std::string_view piece) { pre_tokenizer.run(piece, s, model); };
  auto raw_text = [&](std::string_view segment) {
    const std::string_view normal = normalizer.apply(segment, s.normalized);
    if (normalized_added.empty()) normalized_text(normal);
    else normalized_added.split(normal, normalized_text, added_id);
  };
  raw_added.split(text, raw_text, added_id);
  if (!add_special_tokens || !has_template) return;
  std::vector<int32_t> ids;
  ids.swap(out);
  for (const tok::TemplatePiece& p : single) {
    if (p.sequence) out.insert(out.end(), ids.begin(), ids.end());
    else out.insert(out.end(), p.ids.begin(), p.ids.end());
  }
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_special_tokens) const {
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 8);
  impl_->encode(text, add_special_tokens, out);
  return out;
}

std::string Tokenizer::normalize(std::string_view text) const {
  if (const size_t bad = tok::invalid_utf8_offset(text); bad != std::string_view::npos)
    throw Error(ErrorCode::invalid_argument, "the text to normalize is not valid UTF-8 at byte offset " + std::to_string(bad));
  return impl_->normalizer.apply(text);
}

int32_t Tokenizer::vocab_size() const { return int32_t(impl_->kind.size()); }

std::optional<int32_t> Tokenizer::token_to_id(std::string_view token) const {
  const auto it = impl_->ids.find(token);
  if (it == impl_->ids.end()) return std::nullopt;
  return it->second;
}

std::optional<std::string> Tokenizer::id_to_token(int32_t id) const {
  if (id < 0 || id >= vocab_size() || impl_->kind[size_t(id)] == Impl::absent) return std::nullopt;
  return impl_->token_text[size_t(id)];
}

bool Tokenizer::is_special(int32_t id) const {
  return id >= 0 && id < vocab_size() && impl_->kind[size_t(id)] == Impl::special_token;
}

const std::string& Tokenizer::source() const { return impl_->source; }

}  // namespace vkgate
