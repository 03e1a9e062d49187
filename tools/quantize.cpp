// `vkgate quantize`: a checkpoint directory written as a GGUF file the way
// llama.cpp's converter lays it out (vkgate/gguf_model.hpp, gguf_export_model),
// with its projections in a block format.
#include <cstdio>
#include <filesystem>
#include <map>
#include <string>

#include "cli.hpp"
#include "vkgate/checkpoint.hpp"
#include "vkgate/error.hpp"
#include "vkgate/gguf_model.hpp"
#include "vkgate/model_config.hpp"
#include "vkgate/output_file.hpp"
#include "vkgate/quant.hpp"

namespace vkgate::cli {

namespace {

constexpr const char* kQuantizeUsage = R"(usage: vkgate quantize DIR --type T --output FILE [--quiet]

Writes a Hugging Face checkpoint directory (model_type llama, qwen3, qwen3_moe, qwen3_next,
qwen3_5 or qwen3_5_moe) as a GGUF file that llama.cpp and vkgate load: the tensor names,
metadata keys and layouts of llama.cpp's convert_hf_to_gguf.py (llama's q/k rows permuted
for its RoPE, the experts stacked, Qwen3-Next's 1 + w norms and split in_proj_qkvz,
Qwen3.5's value heads reordered; no multi-token-prediction block), the tokenizer.json beside
the weights (byte-level BPE: Qwen2/Qwen3, Llama 3, GPT-2 style) as tokenizer.ggml.* when
there is one. No device is used.

  DIR            the checkpoint directory (config.json, model.safetensors or an index and
                 its shards, optionally tokenizer.json and tokenizer_config.json)
  --type T       what the weights become:
                   q8_0, q4_0, q4_1, q5_0, q5_1, q2_k, q3_k, q4_k, q5_k, q6_k, iq4_nl,
                   iq4_xs: the projections
                   (attention and MLP) and an untied lm_head, quantized by ggml's
                   reference quantizers exactly as `vkgate run --quant T` quantizes them
                   on load; rows that are not whole blocks (32 values, 256 for the
                   k-quants and iq4_xs), the embeddings and the routed experts F16
                   f16, bf16, f32: every matrix in that type (llama.cpp's --outtype)
                 norms, biases and MoE routers are F32 in every case. general.file_type
                 is llama.cpp's (q3_k: Q3_K_S, q4_k: Q4_K_S, q5_k: Q5_K_S)
  --output FILE  the GGUF file, replaced atomically (a temporary file beside it, removed
                 on an error or SIGINT/SIGTERM/SIGHUP; no file on an error) keeping its
                 mode; a read-only file or a directory is refused
  --quiet        no summary line

The summary line (stdout) counts the tensors of each type and the file's size.
Exit codes: 0 success, 1 bad directory, config, tensor or tokenizer (naming the file and
the key or tensor) or an unwritable output, 2 bad usage.
)";

int cmd_quantize(Args& args) {
  std::string dir, type, output;
  bool quiet = false;
  while (!args.done()) {
    const std::string a = args.next();
    if (a == "--type") type = args.value(a);
    else if (a == "--output") output = args.value(a);
    else if (a == "--quiet") quiet = true;
    else if (a.starts_with("-") && a != "-") throw UsageError("quantize: unknown option '" + a + "'");
    else if (dir.empty()) dir = a;
    else throw UsageError("quantize: unexpected argument '" + a + "' (the directory is '" + dir + "')");
  }
  if (dir.empty()) throw UsageError("quantize: the checkpoint directory is required");
  if (type.empty()) throw UsageError("quantize: --type is required");
  if (output.empty()) throw UsageError("quantize: --output is required");
  GgufExportOptions o;
  if (type == "f16" || type == "F16") o.float_type = DType::F16;
  else if (type == "bf16" || type == "BF16") o.float_type = DType::BF16;
  else if (type == "f32" || type == "F32") o.float_type = DType::F32;
  else if (const std::optional<DType> q = parse_quant(type)) o.quant = *q;
  else {
    std::vector<std::string_view> types = quant_spellings();
    types.insert(types.end(), {"f16", "bf16", "f32"});
    throw UsageError("--type must be " + one_of(types) + ", got '" + type + "'");
  }
  vkgate::check_output_path(output);  // a read-only file or a directory is refused before the work

  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec))
    throw Error(ErrorCode::io, dir + ": not a checkpoint directory" +
                                   (std::filesystem::exists(dir, ec) ? std::string() : std::string(" (it does not exist)")));
  const ModelConfig cfg = load_model_config(dir);
  const Checkpoint ckpt(dir);
  const TensorMap tensors = model_tensors(ckpt, cfg);
  o.name = std::filesystem::path(dir).lexically_normal().filename().string();
  if (o.name.empty() || o.name == ".") o.name = std::filesystem::absolute(dir, ec).lexically_normal().parent_path().filename().string();
  GgufDraft draft = gguf_export_model(cfg, tensors, o);
  const std::filesystem::path tokenizer = std::filesystem::path(dir) / "tokenizer.json";
  const bool has_tokenizer = std::filesystem::exists(tokenizer, ec);
  if (has_tokenizer) gguf_export_tokenizer(draft, tokenizer.string(), cfg.vocab_size);
  draft.write(output);

  if (!quiet) {
    std::map<std::string, int> counts;
    uint64_t bytes = 0;
    for (const GgufDraft::Tensor& t : draft.tensors) {
      ++counts[ggml_type_name(ggml_type_of(t.dtype))];
      bytes += t.bytes.size();
    }
    std::string types;
    for (const auto& [name, n] : counts) types += (types.empty() ? "" : ", ") + std::to_string(n) + " " + name;
    std::fprintf(vkgate::is_stdout_path(output) ? stderr : stdout,
                 "quantize: %s (%s, %d layers), %zu tensors (%s), %.2f MiB of tensor data%s -> %s\n", dir.c_str(),
                 cfg.model_type.c_str(), cfg.num_hidden_layers, draft.tensors.size(), types.c_str(),
                 double(bytes) / (1024.0 * 1024.0), has_tokenizer ? ", tokenizer.json" : "", output.c_str());
  }
  return 0;
}

}  // namespace

const Command kQuantize{"quantize", kQuantizeUsage, cmd_quantize};

}  // namespace vkgate::cli
