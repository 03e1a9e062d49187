// The fuzz targets' bodies, shared by the libFuzzer executables (fuzz_*.cpp)
// and by the test suite, which replays every file of fuzz/corpus/ and
// fuzz/regressions/ through them (tests/test_fuzz_corpus.cpp), so that every
// crash the fuzzers ever found stays a regression test.
//
// Each body feeds its input to one parser and exercises what it returns. A
// vkgate::Error is the expected way to reject an input; anything else — another
// exception, a crash, a sanitizer report, a hang — is a bug.
#pragma once

#include <unistd.h>

#include <climits>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>
#include <vector>

#include "vkgate/checkpoint.hpp"
#include "vkgate/config.hpp"
#include "vkgate/gla_config.hpp"
#include "vkgate/dtype.hpp"
#include "vkgate/error.hpp"
#include "vkgate/gguf.hpp"
#include "vkgate/model_config.hpp"
#include "vkgate/quant.hpp"
#include "vkgate/safetensors.hpp"
#include "vkgate/tokenizer.hpp"
#include "vkgate/weights.hpp"
#include "../tools/serve_openai.hpp"

namespace vkgate::fuzz {

namespace fs = std::filesystem;

// A private scratch directory, on tmpfs when there is one.
inline const fs::path& scratch() {
  static const fs::path dir = [] {
    const fs::path base = fs::exists("/dev/shm") ? fs::path("/dev/shm") : fs::temp_directory_path();
    fs::path d = base / ("vkgate_fuzz_" + std::to_string(::getpid()));
    fs::create_directories(d);
    return d;
  }();
  return dir;
}

inline void write_file(const fs::path& p, const uint8_t* data, size_t size) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(data), std::streamsize(size));
}

// Reads every value of a tensor every way its dtype allows.
inline void exercise_view(const TensorView& t) {
  volatile double sink = double(t.numel());
  if (is_integer(t.dtype)) {
    for (int64_t v : t.to_i64()) sink = sink + double(v);
    return;
  }
  for (double v : t.to_f64()) sink = sink + v;
  for (float v : t.to_f32()) sink = sink + double(v);
}

// Every tensor, the names and the metadata of a file.
inline void exercise(const SafetensorsFile& f) {
  for (const std::string& name : f.names()) exercise_view(f.at(name));
  volatile size_t sink = 0;
  for (const auto& [k, v] : f.metadata()) sink = sink + k.size() + v.size();
}

// A safetensors file: header length, JSON header, data.
inline int safetensors(const uint8_t* data, size_t size) {
  const fs::path p = scratch() / "input.safetensors";
  write_file(p, data, size);
  try {
    SafetensorsFile f(p.string());
    exercise(f);
  } catch (const Error&) {
  }
  return 0;
}

// Every metadata value of a GGUF file through every typed getter (the ones
// its type does not allow throw Error), and every tensor: its bytes, the
// values of the float ones and the block formats dequantized.
inline void exercise(const GgufFile& f) {
  volatile double sink = double(f.version() + f.alignment() + f.tensor_bytes());
  for (const auto& kv : f.metadata()) {
    const std::string& key = kv.first;  // captured below: no structured binding for clang 14
    sink = sink + double(key.size() + kv.second.text.size() + kv.second.texts.size());
    auto attempt = [&](auto read) {
      try {
        read();
      } catch (const Error&) {
      }
    };
    attempt([&] { sink = sink + double(f.string(key).size()); });
    attempt([&] { sink = sink + double(f.integer(key)); });
    attempt([&] { sink = sink + f.real(key); });
    attempt([&] { sink = sink + double(f.boolean(key)); });
    attempt([&] { sink = sink + double(f.strings(key).size()); });
    attempt([&] { for (int64_t v : f.integers(key)) sink = sink + double(v); });
    attempt([&] { for (double v : f.reals(key)) sink = sink + v; });
  }
  for (const GgufTensor& t : f.tensors()) {
    const GgufTensor& same = f.tensor(t.name);
    for (std::byte b : same.bytes) sink = sink + double(b);
    const HostTensor h = t.host();
    std::vector<float> values(size_t(h.numel()));
    if (is_quantized(t.dtype)) {
      dequantize(t.dtype, t.bytes, values);
    } else {
      for (size_t i = 0; i < values.size(); ++i) {
        if (t.dtype == DType::F32) {
          std::memcpy(&values[i], t.bytes.data() + 4 * i, 4);
        } else {
          uint16_t bits;
          std::memcpy(&bits, t.bytes.data() + 2 * i, 2);
          values[i] = t.dtype == DType::F16 ? half_to_float(bits) : bf16_to_float(bits);
        }
      }
    }
    for (float v : values) sink = sink + double(v);
  }
  sink = sink + double(f.tensor_map().size()) + double(f.find_tensor("") != nullptr);
}

// A GGUF file, mapped and validated, then read whole.
inline int gguf(const uint8_t* data, size_t size) {
  const fs::path p = scratch() / "input.gguf";
  write_file(p, data, size);
  try {
    const GgufFile f = GgufFile::open(p.string());
    exercise(f);
  } catch (const Error&) {
  }
  return 0;
}

// A whole model's config.json: parsed, then its tensor list when it is short
// enough to list (num_hidden_layers is whatever the file says).
inline void model_config(std::string_view text) {
  try {
    const ModelConfig m = parse_model_config_json(text, "fuzz.json");
    m.validate();
    volatile int64_t sink = m.hidden_size() + int64_t(m.eos_token_ids.size());
    if (m.num_hidden_layers <= 64)
      for (const TensorSpec& spec : expected_model_weights(m)) sink = sink + spec.numel();
  } catch (const Error&) {
  }
}

// A GLA layer's config.json: parsed, then its head sizes, scale and tensor
// list in both forget-gate forms.
inline void gla_config(std::string_view text) {
  try {
    if (!is_gla_config_json(text, "fuzz.json")) return;
    const GlaConfig g = parse_gla_config_json(text, "fuzz.json");
    volatile double sink = g.head_k_dim() + g.head_v_dim() + g.scale();
    for (const GlaForms& forms : {GlaForms{16, "g_norm_swish_gate.weight", true}, GlaForms{0, "", false}})
      for (const TensorSpec& spec : gla_expected_weights(g, forms)) sink = sink + double(spec.numel());
  } catch (const Error&) {
  }
}

// A config.json: parsed as a block, then every derived quantity and layer
// check, and parsed as a whole model and as a GLA layer.
inline int config(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  model_config(text);
  gla_config(text);
  try {
    const BlockConfig c = parse_config_json(text, "fuzz.json");
    try {
      c.validate();
      volatile int64_t sink = c.q_proj_rows() + c.kv_dim() + c.attn_dim() + c.rotary_dim() + c.gate_width();
      for (const TensorSpec& spec : expected_weights(c)) sink = sink + spec.numel();
    } catch (const Error&) {
    }
    for (int layer : {-1, 0, 1, 3, c.num_hidden_layers - 1, c.num_hidden_layers, 1 << 30, INT_MAX, INT_MIN}) {
      try {
        c.check_layer(layer);
      } catch (const Error&) {
      }
    }
  } catch (const Error&) {
  }
  return 0;
}

// A checkpoint directory with two real shards and the fuzzed
// model.safetensors.index.json: the index is parsed, shards opened, tensors
// looked up and a block's tensors gathered for a small config.
inline int checkpoint_index(const uint8_t* data, size_t size) {
  static const fs::path dir = [] {
    const fs::path d = scratch() / "checkpoint";
    fs::create_directories(d);
    // Shard 1 holds a whole tiny block (hidden 4, 1 head of 4, no gate) under layer 0; shard 2 one stray tensor.
    auto floats = [](size_t n) { return std::vector<float>(n, 0.25f); };
    static const std::vector<float> w16 = floats(16), w4 = floats(4);
    static const std::vector<uint16_t> h16(16, float_to_half(0.5f));
    const std::string p = "model.layers.0.self_attn.";
    std::vector<TensorToWrite> one;
    for (const char* n : {"q_proj.weight", "k_proj.weight", "v_proj.weight", "o_proj.weight"})
      one.push_back({p + n, DType::F32, {4, 4}, std::as_bytes(std::span(w16))});
    one.push_back({"model.layers.0.input_layernorm.weight", DType::F32, {4}, std::as_bytes(std::span(w4))});
    write_safetensors((d / "model-00001-of-00002.safetensors").string(), one);
    write_safetensors((d / "model-00002-of-00002.safetensors").string(),
                      {{"lm_head.weight", DType::F16, {4, 4}, std::as_bytes(std::span(h16))}});
    return d;
  }();
  write_file(dir / "model.safetensors.index.json", data, size);
  try {
    const Checkpoint ckpt(dir.string());
    for (const std::string& name : ckpt.names()) exercise_view(ckpt.at(name));
    BlockConfig c;
    c.hidden_size = 4;
    c.num_heads = c.num_kv_heads = 1;
    c.head_dim = 4;
    c.gate_kind = GateKind::none;
    c.use_qk_norm = false;
    const TensorMap tensors = block_tensors(ckpt, c, 0);
    volatile size_t sink = tensors.size();
    (void)sink;
  } catch (const Error&) {
  }
  return 0;
}

// The tokenizer. A first byte that is even: the rest is text for the
// hand-made Qwen-style tokenizer (tests/tokenizer/unit/qwen_style.json), and
// what the encoding decodes to must be the normalized text (unless the
// stripping tokens [L] and [R] took spaces), whole and streamed. Odd: the rest is a tokenizer.json, and one that loads encodes and
// decodes a sample text.
inline int tokenizer(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string_view rest(reinterpret_cast<const char*>(data) + 1, size - 1);
  if (data[0] % 2 == 0) {
    static const Tokenizer tok = Tokenizer::load(VKGATE_TOKENIZER_UNIT_DIR "/qwen_style.json");
    try {
      const std::vector<int32_t> ids = tok.encode(rest, /*add_special_tokens=*/false);
      const std::string back = tok.decode(ids);
      Tokenizer::StreamDecoder stream = tok.stream_decoder();
      std::string streamed;
      for (int32_t id : ids) streamed += stream.push(id);
      streamed += stream.finish();
      // A wrong round trip is a bug, except that [L] and [R] (lstrip, rstrip) take the spaces beside them.
      const bool strips = rest.find("[L]") != std::string_view::npos || rest.find("[R]") != std::string_view::npos;
      if ((!strips && back != tok.normalize(rest)) || streamed != back) __builtin_trap();
    } catch (const Error&) {
    }
    return 0;
  }
  try {
    const Tokenizer tok = Tokenizer::from_json(rest, "fuzz.json");
    const std::vector<int32_t> ids = tok.encode("Hello, world! 123 <|end|> \xC3\xA9t\xC3\xA9 e\xCC\x81");
    volatile size_t sink = tok.decode(ids).size() + size_t(tok.vocab_size());
    (void)sink;
  } catch (const Error&) {
  }
  return 0;
}

// A chat request as `vkgate serve` reads it (tools/serve_openai.cpp), rendered
// with every chat template it recognises; the same bytes as a model's reply,
// read for tool calls in both dialects and split from its thinking whole and
// in pieces. An ApiError (a 400) or a ChatTemplateError (the template's
// refusal) is the expected way to reject an input.
inline int chat(const uint8_t* data, size_t size) {
  using namespace vkgate::cli;
  const std::string text(reinterpret_cast<const char*>(data), size);
  std::vector<std::string> tools;
  try {
    const CompletionRequest r = parse_completion_request(text, true);
    tools = r.render.tools;
    for (const char* markers :
         {"<|im_start|>", "<|im_start|> You are Qwen, created by Alibaba Cloud. You are a helpful assistant.",
          "<|im_start|> <tool_call> reasoning_content last_query_index enable_thinking",
          "<|im_start|> <tool_call> reasoning_content last_query_index enable_thinking <function=example_function_name>",
          "<|start_header_id|> <|eot_id|>", "<|start_header_id|> <|eot_id|> Cutting Knowledge Date strftime_now"}) {
      try {
        volatile size_t sink = ChatTemplate::detect(markers).render(r.messages, r.render).size();
        (void)sink;
      } catch (const ChatTemplateError&) {
      }
    }
  } catch (const ApiError&) {
  }
  volatile size_t sink = 0;
  for (ChatDialect d : {ChatDialect::qwen3, ChatDialect::qwen35})
    for (const ToolCall& c : parse_tool_calls(text, d, tools).calls) sink = sink + c.name.size() + c.arguments.size();
  for (bool opened : {false, true}) {
    ReasoningSplitter whole(opened), pieces(opened);
    sink = sink + whole.feed(text).content.size() + whole.finish().reasoning.size();
    for (size_t at = 0; at < text.size(); at += 7) sink = sink + pieces.feed(std::string_view(text).substr(at, 7)).reasoning.size();
    sink = sink + pieces.finish().content.size();
  }
  return 0;
}

}  // namespace vkgate::fuzz
