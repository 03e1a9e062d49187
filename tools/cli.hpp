// The vkgate CLI's shared pieces: argument reading, usage errors, and the
// commands (one file each: main.cpp holds devices and demo, run.cpp,
// generate.cpp, quantize.cpp, bench.cpp, tokenize.cpp, serve.cpp).
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "vkgate/block.hpp"
#include "vkgate/context.hpp"
#include "vkgate/error.hpp"
#include "vkgate/model.hpp"
#include "vkgate/quant.hpp"

namespace vkgate::cli {

// Bad usage: exit status 2, one line on stderr.
struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct Args {
  std::vector<std::string> rest;
  size_t i = 0;
  bool done() const { return i >= rest.size(); }
  const std::string& next() { return rest[i++]; }
  std::string value(const std::string& flag) {
    if (done()) throw UsageError(flag + " needs a value");
    return next();
  }
  long number(const std::string& flag, long lo, long hi) {
    const std::string v = value(flag);
    char* end = nullptr;
    const long n = std::strtol(v.c_str(), &end, 10);
    if (v.empty() || *end || n < lo || n > hi)
      throw UsageError(flag + " must be an integer in " + std::to_string(lo) + ".." + std::to_string(hi) + ", got '" + v + "'");
    return n;
  }
  double real(const std::string& flag, double lo, double hi) {
    const std::string v = value(flag);
    char* end = nullptr;
    const double x = std::strtod(v.c_str(), &end);
    if (v.empty() || *end || !(x >= lo && x <= hi))
      throw UsageError(flag + " must be a number in " + format_number(lo) + ".." + format_number(hi) + ", got '" + v + "'");
    return x;
  }

 private:
  static std::string format_number(double x) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%g", x);
    return buf;
  }
};

// True when the arguments ask for the command's usage text.
bool wants_help(const std::vector<std::string>& args);
// fp32 | fp16 | bf16 (and f32, f16) for `flag`, else a UsageError.
Precision parse_precision(const std::string& flag, const std::string& v);
// A block format for --quant (vkgate::parse_quant's spellings), else a UsageError.
DType parse_quant_flag(const std::string& flag, const std::string& v);
// "a, b or c"
std::string one_of(const std::vector<std::string_view>& names);
// Text in and out (cli_text.cpp). Errors name the path or the flag.
std::string read_file(const std::string& path);
// The chat template of a checkpoint directory or GGUF file (its Jinja text; "" when
// it has none), for ChatTemplate::detect (chat_template.hpp; serve, generate --chat).
std::string chat_template_text(const std::string& weights);
// Files are written with vkgate::write_file / OutputFile (vkgate/output_file.hpp):
// "-" is stdout, a symbolic link's target is replaced atomically, a device or
// FIFO is written directly, a read-only file is refused.
// Integers separated by commas and/or whitespace (none: an empty list); else a UsageError naming `flag`.
std::vector<int64_t> parse_id_list(const std::string& flag, const std::string& text);
// A JSON string literal of `text`; bytes that are not UTF-8 become U+FFFD (generated
// ids need not end on a character boundary), so the document stays valid JSON.
std::string json_string(const std::string& text);
// With quiet false and stderr a terminal: options.on_progress draws long work
// (pipeline compilation, tensor loading, a long prefill) as one line on stderr.
void show_progress(ContextOptions& options, bool quiet);
// An error about the weights' values (NaN, Inf, beyond fp16: "weight 'NAME' holds ...")
// with the weights path put in front and the flag that lets them through behind;
// any other error unchanged (run.cpp; run and generate).
vkgate::Error with_weights_path(const std::string& path, const vkgate::Error& e);
// Model::load, its weight-value errors through with_weights_path (generate, serve).
vkgate::Model load_model(vkgate::Context& ctx, const std::string& weights, const vkgate::ModelOptions& options);
// The run ended with messages from the validation layer (VKGATE_VALIDATION):
// says so on stderr; the command then writes nothing and exits 1.
bool validation_failed(const Context& ctx);

// `vkgate bench --model DIR | --model-shape NAME` (bench_model.cpp).
struct ModelBench {
  std::string dir, shape;
  // A --model-shape smaller than the real one (0: as it is): layers, experts, hidden size, vocabulary.
  int layers = 0, experts = 0, hidden = 0, vocab = 0;
  Precision precision = Precision::fp32;
  std::optional<DType> quant;
  bool int8 = false;  // ModelOptions::int8_activations
  std::vector<int> prompts{64, 512};
  int decode = 16, reps = 2;
  // Numbers of sequences decoding together (Model::extend of several); empty: none.
  std::vector<int> sequences;
  bool json = false;
};
int bench_model(const ContextOptions& copts, const ModelBench& b);

struct Command {
  const char* name;
  const char* usage;
  int (*run)(Args& args);
};
extern const Command kRun, kGenerate, kQuantize, kBench, kTokenize, kDetokenize, kServe;

// `vkgate bench --tokenizer PATH` (bench_tokenizer.cpp): load time and encoding throughput.
struct TokenizerBench {
  std::string tokenizer, text_file, write_text;
  bool json = false;
};
int bench_tokenizer(const TokenizerBench& b);

}  // namespace vkgate::cli
