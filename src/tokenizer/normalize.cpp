// UTF-8 validation and the NFC normalizer (utf8proc).
#include <utf8proc.h>

#include <cstdlib>
#include <cstring>
#include <memory>

#include "tokenizer/tokenizer_impl.hpp"
#include "vkgate/error.hpp"

namespace vkgate::tok {

size_t invalid_utf8_offset(std::string_view s) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const size_t n = s.size();
  size_t i = 0;
  while (i < n) {
    // Eight ASCII bytes at a time: most text is mostly ASCII.
    while (i + 8 <= n) {
      uint64_t word;
      std::memcpy(&word, p + i, 8);
      if (word & 0x8080808080808080ull) break;
      i += 8;
    }
    if (i >= n) break;
    const unsigned char c = p[i];
    if (c < 0x80) {
      ++i;
      continue;
    }
    // The ranges of RFC 3629: no overlong forms, no surrogates, nothing above U+10FFFF.
    size_t len;
    unsigned char lo = 0x80, hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF) len = 2;
    else if (c >= 0xE0 && c <= 0xEF) {
      len = 3;
      if (c == 0xE0) lo = 0xA0;
      if (c == 0xED) hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
      len = 4;
      if (c == 0xF0) lo = 0x90;
      if (c == 0xF4) hi = 0x8F;
    } else {
      return i;
    }
    if (i + len > n) return i;
    if (p[i + 1] < lo || p[i + 1] > hi) return i;
    for (size_t k = 2; k < len; ++k)
      if ((p[i + k] & 0xC0) != 0x80) return i;
    i += len;
  }
  return std::string_view::npos;
}

uint32_t code_point_at(std::string_view s, size_t i, size_t* len) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data()) + i;
  if (p[0] < 0x80) return *len = 1, p[0];
  if (p[0] < 0xE0) return *len = 2, uint32_t(p[0] & 0x1F) << 6 | (p[1] & 0x3F);
  if (p[0] < 0xF0) return *len = 3, uint32_t(p[0] & 0x0F) << 12 | uint32_t(p[1] & 0x3F) << 6 | (p[2] & 0x3F);
  *len = 4;
  return uint32_t(p[0] & 0x07) << 18 | uint32_t(p[1] & 0x3F) << 12 | uint32_t(p[2] & 0x3F) << 6 | (p[3] & 0x3F);
}

size_t previous_char_start(std::string_view s, size_t i) {
  do --i;
  while (i > 0 && (static_cast<unsigned char>(s[i]) & 0xC0) == 0x80);
  return i;
}

namespace {

void append_nfc(std::string_view in, std::string& out) {
  utf8proc_uint8_t* nfc = nullptr;
  const utf8proc_ssize_t n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(in.data()),
                                          utf8proc_ssize_t(in.size()), &nfc, utf8proc_option_t(UTF8PROC_STABLE | UTF8PROC_COMPOSE));
  const std::unique_ptr<utf8proc_uint8_t, decltype(&std::free)> owned(nfc, &std::free);
  if (n < 0)  // the input was validated, so only memory can run out here
    throw Error(ErrorCode::out_of_memory, std::string("NFC normalization failed: ") + utf8proc_errmsg(n));
  out.append(reinterpret_cast<const char*>(nfc), size_t(n));
}

bool ascii(char c) { return static_cast<unsigned char>(c) < 0x80; }

}  // namespace

std::string_view Normalizer::apply(std::string_view in, std::string& buffer) const {
  if (!nfc) return in;
  size_t i = 0;
  while (i < in.size() && ascii(in[i])) ++i;
  if (i == in.size()) return in;  // all ASCII (the common case) is NFC already
  // Only the stretches around non-ASCII characters go through utf8proc. Text
  // may be cut before an ASCII character that an ASCII character follows: no
  // ASCII character composes with the one before it, nor, followed by ASCII,
  // with the one after it, and ASCII ends any reordering of combining marks.
  buffer.clear();
  buffer.reserve(in.size());
  size_t at = 0;
  while (at < in.size()) {
    size_t j = at;
    while (j < in.size() && ascii(in[j])) ++j;
    const size_t start = j > at ? j - 1 : j;  // the ASCII letter before may take a combining mark
    buffer.append(in.substr(at, start - at));
    if (j == in.size()) {
      buffer.append(in.substr(start));
      break;
    }
    size_t end = j;
    while (end < in.size() && !(ascii(in[end]) && (end + 1 == in.size() || ascii(in[end + 1])))) ++end;
    append_nfc(in.substr(start, end - start), buffer);
    at = end;
  }
  return buffer;
}

}  // namespace vkgate::tok
