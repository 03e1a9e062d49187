// `vkgate tokenize` and `vkgate detokenize`: text to token ids and back with
// a model's tokenizer.json (include/vkgate/tokenizer.hpp).
#include <cstdint>
#include <string>
#include <vector>

#include "cli.hpp"
#include "vkgate/error.hpp"
#include "vkgate/output_file.hpp"
#include "vkgate/tokenizer.hpp"

namespace vkgate::cli {

namespace {

constexpr const char* kTokenizeUsage = R"(usage: vkgate tokenize --tokenizer PATH (--text STR | --input FILE) [--no-special] [--output FILE]

Prints the token ids of the text (UTF-8), space-separated on one line.

  --tokenizer PATH   a tokenizer.json (byte-level BPE: Qwen2/Qwen3, Llama 3, GPT-2 style), or
                     a directory holding one (normally the model directory)
  --text STR         the text to tokenize
  --input FILE       the text to tokenize, read from FILE byte for byte
  --no-special       leave out what the post-processor adds (e.g. Llama 3.1's BOS); special
                     tokens written in the text are still recognised
  --output FILE      write the line to FILE instead of stdout (- is stdout). A file is replaced
                     atomically (no file on an error) keeping its mode, a symbolic link's
                     target is replaced, a FIFO or device is written directly; a read-only
                     file or a directory is refused

Chat templates (tokenizer_config.json) are not applied: the text is tokenized as given.
Exit codes: 0 success, 1 bad file or invalid UTF-8 (naming the file, key or byte offset),
2 bad usage.
)";

constexpr const char* kDetokenizeUsage = R"(usage: vkgate detokenize --tokenizer PATH --ids "1 2 3" [--output FILE]

Writes the text the token ids stand for, byte for byte (special tokens as their text,
nothing added or cleaned up).

  --tokenizer PATH   a tokenizer.json, or a directory holding one
  --ids LIST         the ids, separated by spaces or commas
  --output FILE      write the text to FILE instead of stdout (- is stdout). A file is replaced
                     atomically (no file on an error) keeping its mode, a symbolic link's
                     target is replaced, a FIFO or device is written directly; a read-only
                     file or a directory is refused

Exit codes: 0 success, 1 bad file or an id outside the vocabulary (naming it), 2 bad usage.
)";

int cmd_tokenize(Args& args) {
  std::string tokenizer, text, input, output = "-";
  bool have_text = false, special = true;
  while (!args.done()) {
    const std::string a = args.next();
    if (a == "--tokenizer") tokenizer = args.value(a);
    else if (a == "--text") text = args.value(a), have_text = true;
    else if (a == "--input") input = args.value(a);
    else if (a == "--no-special") special = false;
    else if (a == "--output") output = args.value(a);
    else throw UsageError("tokenize: unknown option '" + a + "'");
  }
  if (tokenizer.empty()) throw UsageError("tokenize: --tokenizer is required");
  if (have_text == !input.empty()) throw UsageError("tokenize: give one of --text and --input");
  vkgate::check_output_path(output);
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
  vkgate::write_file(output, line + "\n");
  return 0;
}

int cmd_detokenize(Args& args) {
  std::string tokenizer, output = "-", ids_text;
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
  vkgate::check_output_path(output);
  std::vector<int32_t> ids;
  for (const int64_t id : parse_id_list("--ids", ids_text)) {
    if (id < INT32_MIN || id > INT32_MAX) throw UsageError("--ids: " + std::to_string(id) + " is not a 32-bit token id");
    ids.push_back(int32_t(id));
  }
  const vkgate::Tokenizer tok = vkgate::Tokenizer::load(tokenizer);
  const std::string text = tok.decode(ids);
  vkgate::write_file(output, text);
  return 0;
}

}  // namespace

const Command kTokenize{"tokenize", kTokenizeUsage, cmd_tokenize};
const Command kDetokenize{"detokenize", kDetokenizeUsage, cmd_detokenize};

}  // namespace vkgate::cli
