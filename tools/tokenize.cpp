// `vkgate tokenize` and `vkgate detokenize`: text to token ids and back with
// a model's tokenizer.json (include/vkgate/tokenizer.hpp).
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include <unistd.h>

#include "cli.hpp"
#include "vkgate/error.hpp"
#include "vkgate/tokenizer.hpp"

namespace vkgate::cli {

namespace {

constexpr const char* kTokenizeUsage = R"(usage: vkgate tokenize --tokenizer PATH (--text STR | --input FILE) [--no-special]

Prints the token ids of the text (UTF-8), space-separated on one line.

  --tokenizer PATH   a tokenizer.json (byte-level BPE: Qwen2/Qwen3, Llama 3, GPT-2 style), or
                     a directory holding one (normally the model directory)
  --text STR         the text to tokenize
  --input FILE       the text to tokenize, read from FILE byte for byte
  --no-special       leave out what the post-processor adds (e.g. Llama 3.1's BOS); special
                     tokens written in the text are still recognised

Chat templates (tokenizer_config.json) are not applied: the text is tokenized as given.
Exit codes: 0 success, 1 bad file or invalid UTF-8 (naming the file, key or byte offset),
2 bad usage.
)";

constexpr const char* kDetokenizeUsage = R"(usage: vkgate detokenize --tokenizer PATH --ids "1 2 3" [--output FILE]

Writes the text the token ids stand for, byte for byte (special tokens as their text,
nothing added or cleaned up).

  --tokenizer PATH   a tokenizer.json, or a directory holding one
  --ids LIST         the ids, separated by spaces or commas
  --output FILE      write the text to FILE (atomically: no file on an error) instead of stdout

Exit codes: 0 success, 1 bad file or an id outside the vocabulary (naming it), 2 bad usage.
)";

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw vkgate::Error(vkgate::ErrorCode::io, path + ": cannot open: " + std::strerror(errno));
  std::string text{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  if (in.bad()) throw vkgate::Error(vkgate::ErrorCode::io, path + ": cannot read");
  return text;
}

// Writes `bytes` to a temporary file beside `path`, then renames it into place.
void write_file_atomically(const std::string& path, const std::string& bytes) {
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) throw vkgate::Error(vkgate::ErrorCode::io, path + ": cannot create " + tmp + ": " + std::strerror(errno));
    out.write(bytes.data(), std::streamsize(bytes.size()));
    out.close();
    if (!out) {
      std::filesystem::remove(tmp);
      throw vkgate::Error(vkgate::ErrorCode::io, path + ": cannot write " + tmp);
    }
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) {
    std::filesystem::remove(tmp);
    throw vkgate::Error(vkgate::ErrorCode::io, path + ": cannot rename " + tmp + " into place: " + ec.message());
  }
}

std::vector<int32_t> parse_id_list(const std::string& text) {
  std::vector<int32_t> ids;
  const char* p = text.c_str();
  for (;;) {
    while (*p == ' ' || *p == ',' || *p == '\t' || *p == '\n') ++p;
    if (!*p) break;
    char* end = nullptr;
    errno = 0;
    const long long v = std::strtoll(p, &end, 10);
    if (end == p || errno == ERANGE || v < INT32_MIN || v > INT32_MAX || (*end && !std::strchr(" ,\t\n", *end)))
      throw UsageError("--ids must be integers separated by spaces or commas, got '" + text + "'");
    ids.push_back(int32_t(v));
    p = end;
  }
  return ids;
}

int cmd_tokenize(Args& args) {
  std::string tokenizer, text, input;
  bool have_text = false, special = true;
  while (!args.done()) {
    const std::string a = args.next();
    if (a == "--tokenizer") tokenizer = args.value(a);
    else if (a == "--text") text = args.value(a), have_text = true;
    else if (a == "--input") input = args.value(a);
    else if (a == "--no-special") special = false;
    else throw UsageError("tokenize: unknown option '" + a + "'");
  }
  if (tokenizer.empty()) throw UsageError("tokenize: --tokenizer is required");
  if (have_text == !input.empty()) throw UsageError("tokenize: give one of --text and --input");
  const vkgate::Tokenizer tok = vkgate::Tokenizer::load(tokenizer);
  if (!input.empty()) text = read_file(input);
  std::vector<int32_t> ids;
  try {
    ids = tok.encode(text, special);
  } catch (const vkgate::Error& e) {
    throw vkgate::Error(e.code(), (input.empty() ? std::string("--text") : input) + ": " + e.what());
  }
  std::string line;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i) line += ' ';
    line += std::to_string(ids[i]);
  }
  std::printf("%s\n", line.c_str());
  return 0;
}

int cmd_detokenize(Args& args) {
  std::string tokenizer, output, ids_text;
  bool have_ids = false;
  while (!args.done()) {
    const std::string a = args.next();
    if (a == "--tokenizer") tokenizer = args.value(a);
    else if (a == "--ids") ids_text = args.value(a), have_ids = true;
    else if (a == "--output") output = args.value(a);
    else throw UsageError("detokenize: unknown option '" + a + "'");
  }
  if (tokenizer.empty()) throw UsageError("detokenize: --tokenizer is required");
  if (!have_ids) throw UsageError("detokenize: --ids is required");
  const std::vector<int32_t> ids = parse_id_list(ids_text);
  const vkgate::Tokenizer tok = vkgate::Tokenizer::load(tokenizer);
  const std::string text = tok.decode(ids);
  if (output.empty()) {
    if (std::fwrite(text.data(), 1, text.size(), stdout) != text.size() || std::fflush(stdout) != 0)
      throw vkgate::Error(vkgate::ErrorCode::io, std::string("cannot write to stdout: ") + std::strerror(errno));
  } else {
    write_file_atomically(output, text);
  }
  return 0;
}

}  // namespace

const Command kTokenize{"tokenize", kTokenizeUsage, cmd_tokenize};
const Command kDetokenize{"detokenize", kDetokenizeUsage, cmd_detokenize};

}  // namespace vkgate::cli
