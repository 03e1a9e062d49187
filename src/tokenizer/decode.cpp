// Decoding: ids to the exact bytes they stand for, whole or streamed.
#include <array>
#include <utility>

#include "tokenizer/tokenizer_impl.hpp"
#include "vkgate/error.hpp"

namespace vkgate {

namespace tok {

namespace {

// GPT-2's table: printable Latin-1 bytes stand for themselves, the other 68
// bytes for U+0100.. in byte order, so that no token holds a space or a control character.
const std::array<uint32_t, 256>& byte_code_points() {
  static const std::array<uint32_t, 256> table = [] {
    std::array<uint32_t, 256> t{};
    uint32_t next = 256;
    for (uint32_t b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
      t[b] = printable ? b : next++;
    }
    return t;
  }();
  return table;
}

// Code point → byte, -1 outside the alphabet (code points up to U+0143).
const std::array<int16_t, 324>& code_point_bytes() {
  static const std::array<int16_t, 324> table = [] {
    std::array<int16_t, 324> t;
    t.fill(-1);
    for (int b = 0; b < 256; ++b) t[byte_code_points()[size_t(b)]] = int16_t(b);
    return t;
  }();
  return table;
}

}  // namespace

std::string byte_char(uint8_t byte) {
  const uint32_t cp = byte_code_points()[byte];
  if (cp < 0x80) return std::string(1, char(cp));
  return {char(0xC0 | (cp >> 6)), char(0x80 | (cp & 0x3F))};
}

std::string token_bytes(std::string_view token, bool* mapped) {
  std::string out;
  out.reserve(token.size());
  const auto& table = code_point_bytes();
  size_t len = 0;
  for (size_t i = 0; i < token.size(); i += len) {
    const uint32_t cp = code_point_at(token, i, &len);
    if (cp >= table.size() || table[cp] < 0) {
      *mapped = false;
      return std::string(token);
    }
    out += char(table[cp]);
  }
  *mapped = true;
  return out;
}

}  // namespace tok

void Tokenizer::Impl::append_bytes(int32_t id, std::string& out) const {
  if (id < 0 || size_t(id) >= kind.size() || kind[size_t(id)] == absent)
    throw Error(ErrorCode::invalid_argument,
                "token id " + std::to_string(id) + " is not in the vocabulary of " + source +
                    (id >= 0 && size_t(id) < kind.size() ? " (an unused id)"
                                                         : " (ids are 0.." + std::to_string(int64_t(kind.size()) - 1) + ")"));
  out += token_bytes[size_t(id)];
}

std::string Tokenizer::decode(std::span<const int32_t> ids) const {
  std::string out;
  for (int32_t id : ids) impl_->append_bytes(id, out);
  return out;
}

Tokenizer::StreamDecoder Tokenizer::stream_decoder() const { return StreamDecoder(std::make_shared<const Tokenizer>(*this)); }

std::string Tokenizer::StreamDecoder::push(int32_t id) {
  tok_->impl_->append_bytes(id, pending_);
  // Hold back a character whose bytes have not all arrived: a lead byte in the
  // last three bytes followed by fewer continuation bytes than it announces.
  // Anything else (complete characters, stray bytes) goes out now.
  size_t keep_from = pending_.size();
  for (size_t back = 1; back <= 3 && back <= pending_.size(); ++back) {
    const auto c = static_cast<unsigned char>(pending_[pending_.size() - back]);
    if ((c & 0xC0) == 0x80) continue;
    const size_t need = c >= 0xF0 && c <= 0xF4 ? 4 : c >= 0xE0 && c <= 0xEF ? 3 : c >= 0xC2 && c <= 0xDF ? 2 : 1;
    if (need > back) keep_from = pending_.size() - back;
    break;
  }
  std::string ready = pending_.substr(0, keep_from);
  pending_.erase(0, keep_from);
  return ready;
}

std::string Tokenizer::StreamDecoder::finish() { return std::exchange(pending_, std::string()); }

}  // namespace vkgate
