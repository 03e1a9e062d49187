// `vkgate bench --tokenizer PATH`: how long tokenizer.json takes to load and
// how fast text is encoded, on a 1 MiB text that mixes what real prompts hold
// (generated here, deterministically, so that other tokenizers — the
// JavaScript bench of tools/ — can be timed on the identical bytes).
#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "cli.hpp"
#include "vkgate/output_file.hpp"
#include "vkgate/tokenizer.hpp"

namespace vkgate::cli {

namespace {

constexpr size_t kTextBytes = size_t(1) << 20;

// The same bytes on every platform: mt19937's raw output (not a std::
// distribution, whose results are the library's choice).
std::string mixed_text() {
  static const char* const kWords[] = {
      "the", "model", "attention", "gate", "It's", "don't", "WE'LL", "they're", "I'd", "you've", "She'S",
      "sigmoid", "output", "head", "token", "Vulkan", "shader", "between", "language", "running", "because",
      "naïve", "café", "Straße", "über", "résumé", "Ελληνικά", "русский", "العربية", "हिन्दी"};
  static const char* const kCode[] = {
      "def forward(self, x):\r\n", "\tfor (int i = 0; i < n; ++i) {\n", "        return x * 2;  // why: scale\n",
      "    if (a != b && c >= 0x1F) {\r\n", "\t\tvalues[i] = sigmoid(gate[i]) * y[i];\n", "}\n\n",
      "SELECT id, name FROM users WHERE age > 30;\n", "    \n", "#include <vector>\n",
      "x = [1, 2, 3]   # three spaces\n"};
  static const char* const kOther[] = {
      "12345678901234", " 3.14159", " 2026-11-25", " $1,299.99", " 0.000001", " 100%",
      "我们在这里测试中文的分词效果。", "日本語のテキストも少し入れます。", "한국어 문장도 있습니다.",
      " 👍", " 🎉🎉", " 👨‍👩‍👧‍👦", " 🇯🇵🇫🇷", " ❤️", " e\u0301te\u0301",  // NFD: e + combining acute
      "\u00a0non\u00a0breaking\u00a0", "\u3000全角\u3000", " aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", " ......", " !!!???"};
  std::mt19937 rng(20261125);
  auto pick = [&](size_t n) { return size_t(rng() % n); };
  std::string text;
  text.reserve(kTextBytes + 256);
  while (text.size() < kTextBytes) {
    switch (rng() % 4) {
      case 0:
      case 1: {  // a sentence of prose
        const size_t words = 5 + pick(15);
        for (size_t w = 0; w < words; ++w) {
          std::string word = kWords[pick(std::size(kWords))];
          if (w == 0) word[0] = char(std::toupper(static_cast<unsigned char>(word[0])));
          text += (w ? " " : "") + word;
          if (rng() % 9 == 0) text += ",";
        }
        text += rng() % 3 ? ". " : ".\n";
        break;
      }
      case 2:
        for (size_t k = 1 + pick(4); k > 0; --k) text += kCode[pick(std::size(kCode))];
        break;
      default:
        text += kOther[pick(std::size(kOther))];
    }
  }
  // Cut back to a whole character.
  size_t end = kTextBytes;
  while (end > 0 && (static_cast<unsigned char>(text[end]) & 0xC0) == 0x80) --end;
  text.resize(end);
  return text;
}

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

int bench_tokenizer(const TokenizerBench& b) {
  if (!b.write_text.empty()) vkgate::check_output_path(b.write_text);
  const std::string text = b.text_file.empty() ? mixed_text() : read_file(b.text_file);
  // With --write-text - the text is stdout's, the report goes to stderr.
  FILE* report = !b.write_text.empty() && vkgate::is_stdout_path(b.write_text) ? stderr : stdout;
  if (!b.write_text.empty()) {
    vkgate::write_file(b.write_text, text);
    if (b.tokenizer.empty()) {
      std::fprintf(stderr, "wrote %zu bytes to %s\n", text.size(), b.write_text.c_str());
      return 0;
    }
  }
  auto t0 = std::chrono::steady_clock::now();
  const vkgate::Tokenizer tok = vkgate::Tokenizer::load(b.tokenizer);
  const double load_ms = ms_since(t0);

  constexpr int kReps = 5;
  std::vector<double> encode_ms, decode_ms;
  std::vector<int32_t> ids;
  std::string back;
  for (int r = 0; r < kReps; ++r) {
    t0 = std::chrono::steady_clock::now();
    ids = tok.encode(text, /*add_special_tokens=*/false);  // the text alone, so that it decodes back
    encode_ms.push_back(ms_since(t0));
    t0 = std::chrono::steady_clock::now();
    back = tok.decode(ids);
    decode_ms.push_back(ms_since(t0));
  }
  std::sort(encode_ms.begin(), encode_ms.end());
  std::sort(decode_ms.begin(), decode_ms.end());
  const double mb = double(text.size()) / 1e6;
  const double enc = encode_ms[kReps / 2], dec = decode_ms[kReps / 2];
  const bool same = back == tok.normalize(text);
  if (b.json) {
    std::fprintf(report,
                 "{\"tokenizer\": %s, \"vocab_size\": %d, \"load_ms\": %.1f, \"text_bytes\": %zu, \"tokens\": %zu, "
                 "\"encode_ms\": %.2f, \"encode_mb_per_s\": %.2f, \"decode_ms\": %.2f, \"decode_mb_per_s\": %.2f, "
                 "\"round_trip\": %s}\n",
                 json_string(tok.source()).c_str(), tok.vocab_size(), load_ms, text.size(), ids.size(), enc,
                 mb / (enc / 1e3), dec, mb / (dec / 1e3), same ? "true" : "false");
  } else {
    std::fprintf(report, "tokenizer: %s (vocab %d)\n", tok.source().c_str(), tok.vocab_size());
    std::fprintf(report, "load:      %.1f ms\n", load_ms);
    std::fprintf(report, "text:      %zu bytes (%s), %zu tokens\n", text.size(),
                 b.text_file.empty() ? "generated: prose, code, digits, CJK, emoji" : b.text_file.c_str(), ids.size());
    std::fprintf(report, "encode:    %.2f MB/s (median of %d: %.2f ms, best %.2f ms)\n", mb / (enc / 1e3), kReps, enc, encode_ms[0]);
    std::fprintf(report, "decode:    %.2f MB/s (median of %d: %.2f ms)\n", mb / (dec / 1e3), kReps, dec);
    std::fprintf(report, "check:     decode(encode(text)) %s the normalized text\n", same ? "==" : "!=");
  }
  if (!same) std::fprintf(stderr, "vkgate: decode(encode(text)) differs from the normalized text\n");
  return same ? 0 : 1;
}

}  // namespace vkgate::cli
