// GGUF -> ModelConfig and the model's tensors under their Hugging Face names
// (vkgate/gguf_model.hpp). The names, keys and layout changes are those of
// llama.cpp's convert_hf_to_gguf.py (gguf-py's constants.py and
// tensor_mapping.py): token_embd, blk.N.attn_q, ..., output_norm, output.
#include "vkgate/gguf_model.hpp"

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <numbers>
#include <optional>
#include <string>

#include "io/json_keys.hpp"
#include "vkgate/error.hpp"

namespace vkgate {

namespace {

constexpr const char* kArchitectures = "llama, qwen3 and qwen3moe";

// Typed reads of "<arch>.<key>" with errors naming the file and the full key.
class Hparams {
 public:
  Hparams(const GgufFile& f, std::string arch) : f_(f), arch_(std::move(arch)) {}
  std::string key(const std::string& k) const { return arch_ + "." + k; }
  [[noreturn]] void fail(ErrorCode code, const std::string& k, const std::string& why) const {
    throw Error(code, f_.path() + ": key '" + key(k) + "' " + why);
  }
  // A positive integer that fits an int; absent: nullopt.
  std::optional<int> positive(const std::string& k) const {
    const std::optional<int64_t> v = f_.integer_or(key(k));
    if (!v) return std::nullopt;
    if (*v < 1 || *v > INT_MAX) fail(ErrorCode::invalid_config, k, "is " + std::to_string(*v) + ", expected a positive integer");
    return int(*v);
  }
  int required(const std::string& k, const char* what) const {
    const std::optional<int> v = positive(k);
    if (!v) fail(ErrorCode::invalid_config, k, std::string("is required (") + what + ")");
    return *v;
  }
  std::optional<double> positive_real(const std::string& k) const {
    const std::optional<double> v = f_.real_or(key(k));
    if (v && !(*v > 0 && std::isfinite(*v)))
      fail(ErrorCode::invalid_config, k, "is " + std::to_string(*v) + ", expected a positive number");
    return v;
  }
  std::optional<std::string> text(const std::string& k) const { return f_.string_or(key(k)); }
  std::optional<bool> flag(const std::string& k) const { return f_.boolean_or(key(k)); }
  bool has(const std::string& k) const { return f_.contains(key(k)); }

 private:
  const GgufFile& f_;
  std::string arch_;
};

const GgufTensor& require_tensor(const GgufFile& f, const std::string& name, const std::string& why) {
  const GgufTensor* t = f.find_tensor(name);
  if (!t) throw Error(ErrorCode::missing_tensor, f.path() + ": tensor '" + name + "' not found (" + why + ")");
  return *t;
}

// The rows of a weight (or the length of a bias) of layer 0's query
// projection, from attn_q or the fused attn_qkv; nullopt when neither is there.
std::optional<int64_t> query_rows(const GgufFile& f, int64_t kv_dim) {
  if (const GgufTensor* q = f.find_tensor("blk.0.attn_q.weight"); q && !q->shape.empty()) return q->shape[0];
  if (const GgufTensor* qkv = f.find_tensor("blk.0.attn_qkv.weight"); qkv && !qkv->shape.empty())
    return qkv->shape[0] - 2 * kv_dim;
  return std::nullopt;
}

// transformers' llama3 frequency factors (what the converter writes as
// rope_freqs: the divisor of each frequency) for the given parameters.
std::vector<double> llama3_factors(const RopeScaling& s, double theta, int dims) {
  std::vector<double> out;
  const double low_wavelen = s.original_max_position_embeddings / s.low_freq_factor;
  const double high_wavelen = s.original_max_position_embeddings / s.high_freq_factor;
  for (int i = 0; i < dims; i += 2) {
    const double freq = 1.0 / std::pow(theta, double(i) / dims);
    const double wavelen = 2 * std::numbers::pi / freq;
    if (wavelen < high_wavelen) out.push_back(1.0);
    else if (wavelen > low_wavelen) out.push_back(s.factor);
    else {
      const double smooth = (s.original_max_position_embeddings / wavelen - s.low_freq_factor) /
                            (s.high_freq_factor - s.low_freq_factor);
      out.push_back(1.0 / ((1 - smooth) / s.factor + smooth));
    }
  }
  return out;
}

bool factors_match(const std::vector<double>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (!(std::abs(a[i] - double(b[i])) <= 1e-5 * std::abs(a[i]) + 1e-6)) return false;
  return true;
}

// Llama 3's RoPE scaling, which the converter writes as the tensor rope_freqs
// (one factor per frequency) instead of keys: its parameters read back. The
// factors depend on original_max_position_embeddings only through
// original/low_freq_factor and original/high_freq_factor, so 8192 (Llama 3's)
// is taken and the two factors fitted to the ramp; Llama 3.1/3.2's own
// (1, 4) are tried first.
RopeScaling read_rope_freqs(const GgufFile& f, const GgufTensor& t, double theta, int head_dim) {
  const std::string where = f.path() + ": tensor '" + t.name + "' (Llama 3's RoPE frequency factors)";
  const int64_t n = int64_t(head_dim / 2);
  if (t.dtype != DType::F32 || t.shape != std::vector<int64_t>{n})
    throw Error(ErrorCode::shape_mismatch, where + " is " + to_string(t.dtype) + " " + shape_text(t.shape) +
                                               ", expected F32 " + shape_text({n}));
  std::vector<float> v(static_cast<size_t>(n));
  std::memcpy(v.data(), t.bytes.data(), v.size() * sizeof(float));
  const float factor = *std::max_element(v.begin(), v.end());
  RopeScaling s;
  if (factor == 1.0f && std::all_of(v.begin(), v.end(), [](float x) { return x == 1.0f; })) return s;
  s.type = RopeType::llama3;
  s.factor = factor;
  s.original_max_position_embeddings = 8192;
  s.low_freq_factor = 1.0;
  s.high_freq_factor = 4.0;
  if (factor >= 1 && factors_match(llama3_factors(s, theta, head_dim), v)) return s;
  // The ramp: 1/v = (1 − s)/factor + s with s = original/wavelen·a' + b', linear in 1/wavelen.
  std::vector<std::pair<double, double>> ramp;  // (1/wavelen, s)
  for (int64_t i = 0; i < n; ++i) {
    const double x = double(v[size_t(i)]);
    if (x > 1 + 1e-6 && x < factor * (1 - 1e-6)) {
      const double inv_wavelen = 1.0 / (2 * std::numbers::pi * std::pow(theta, double(2 * i) / head_dim));
      ramp.push_back({inv_wavelen, (1 / x - 1 / double(factor)) / (1 - 1 / double(factor))});
    }
  }
  if (factor >= 1 && ramp.size() >= 2) {
    const auto [x0, s0] = ramp.front();
    const auto [x1, s1] = ramp.back();
    const double a = (s1 - s0) / (x1 - x0), b = s0 - a * x0;  // s = a·x + b
    if (a > 0 && b < 0) {
      s.low_freq_factor = -b * s.original_max_position_embeddings / a;
      s.high_freq_factor = s.low_freq_factor + s.original_max_position_embeddings / a;
      if (factors_match(llama3_factors(s, theta, head_dim), v)) return s;
    }
  }
  throw Error(ErrorCode::unsupported, where + " are not Llama 3's RoPE scaling (factor " + std::to_string(factor) +
                                          "): vkgate cannot run them");
}

void read_rope_scaling(const GgufFile& f, const Hparams& h, BlockConfig& a) {
  const std::optional<std::string> type = h.text("rope.scaling.type");
  RopeScaling& s = a.rope_scaling;
  if (type && *type != "none") {
    const std::optional<double> factor = h.positive_real("rope.scaling.factor");
    if (*type == "linear" || *type == "yarn") {
      if (!factor) h.fail(ErrorCode::invalid_config, "rope.scaling.factor", "is required with rope.scaling.type \"" + *type + "\"");
      s.factor = *factor;
    }
    if (*type == "linear") {
      s.type = RopeType::linear;
    } else if (*type == "yarn") {
      s.type = RopeType::yarn;
      s.original_max_position_embeddings = h.positive("rope.scaling.original_context_length").value_or(0);
      if (const auto v = h.positive_real("rope.scaling.yarn_beta_fast")) s.beta_fast = *v;
      if (const auto v = h.positive_real("rope.scaling.yarn_beta_slow")) s.beta_slow = *v;
      if (const auto v = h.positive_real("rope.scaling.yarn_attn_factor")) s.attention_factor = *v;
      if (h.has("rope.scaling.yarn_log_multiplier"))
        h.fail(ErrorCode::unsupported, "rope.scaling.yarn_log_multiplier", "is set: vkgate's yarn does not read it");
    } else {
      h.fail(ErrorCode::unsupported, "rope.scaling.type",
             "is \"" + *type + "\": vkgate reads the RoPE scaling types none, linear and yarn (and Llama 3's rope_freqs)");
    }
  }
  if (const GgufTensor* freqs = f.find_tensor("rope_freqs.weight")) {
    if (s.type != RopeType::none)
      throw Error(ErrorCode::unsupported, f.path() + ": tensor 'rope_freqs.weight' and key '" + h.key("rope.scaling.type") +
                                              "' both scale RoPE");
    s = read_rope_freqs(f, *freqs, a.rope_theta, a.rotary_dim());
  }
}

}  // namespace

bool is_gguf_file(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) return false;
  if (path.size() >= 5) {
    std::string ext = path.substr(path.size() - 5);
    std::transform(ext.begin(), ext.end(), ext.begin(), [](unsigned char c) { return char(std::tolower(c)); });
    if (ext == ".gguf") return true;
  }
  if (!std::filesystem::is_regular_file(path, ec)) return false;
  std::ifstream in(path, std::ios::binary);
  char magic[4] = {};
  return in.read(magic, 4) && std::memcmp(magic, "GGUF", 4) == 0;
}

ModelConfig gguf_model_config(const GgufFile& f) {
  const std::string& path = f.path();
  if (!f.contains("general.architecture"))
    throw Error(ErrorCode::invalid_config, path + ": key 'general.architecture' is required (vkgate reads " +
                                               kArchitectures + ")");
  const std::string arch = f.string("general.architecture");
  ModelConfig m;
  if (arch == "llama") m.model_type = "llama";
  else if (arch == "qwen3") m.model_type = "qwen3";
  else if (arch == "qwen3moe") m.model_type = "qwen3_moe";
  else
    throw Error(ErrorCode::invalid_config, path + ": key 'general.architecture' is \"" + arch +
                                               "\": vkgate reads the architectures " + kArchitectures);
  const Hparams h(f, arch);
  const bool moe = arch == "qwen3moe";

  BlockConfig& a = m.attention;
  a.model_type = m.model_type;
  m.num_hidden_layers = h.required("block_count", "the number of layers");
  a.num_hidden_layers = m.num_hidden_layers;
  a.max_position_embeddings = h.required("context_length", "the context length the model was trained for");
  a.hidden_size = h.required("embedding_length", "the hidden size");
  a.num_heads = h.required("attention.head_count", "the number of query heads");
  a.num_kv_heads = h.positive("attention.head_count_kv").value_or(a.num_heads);
  if (const std::optional<int> k = h.positive("attention.key_length")) {
    a.head_dim = *k;
  } else {
    if (a.hidden_size % a.num_heads != 0)
      h.fail(ErrorCode::invalid_config, "attention.key_length",
             "is absent and embedding_length " + std::to_string(a.hidden_size) + " is not a multiple of head_count " +
                 std::to_string(a.num_heads));
    a.head_dim = a.hidden_size / a.num_heads;  // llama.cpp's n_embd_head_k default
  }
  if (const std::optional<int> v = h.positive("attention.value_length"); v && *v != a.head_dim)
    h.fail(ErrorCode::unsupported, "attention.value_length",
           "is " + std::to_string(*v) + " but key_length is " + std::to_string(a.head_dim) +
               ": vkgate's attention has one head size");
  const std::optional<double> eps = h.positive_real("attention.layer_norm_rms_epsilon");
  if (!eps) h.fail(ErrorCode::invalid_config, "attention.layer_norm_rms_epsilon", "is required (the RMSNorm epsilon)");
  a.rms_norm_eps = *eps;
  a.rope_theta = h.positive_real("rope.freq_base").value_or(10000.0);  // llama.cpp's default
  if (const std::optional<int> dims = h.positive("rope.dimension_count"); dims && *dims != a.head_dim) {
    if (*dims > a.head_dim)
      h.fail(ErrorCode::invalid_config, "rope.dimension_count",
             "is " + std::to_string(*dims) + ", more than the head size " + std::to_string(a.head_dim));
    // The smallest factor whose int(head_dim · factor) gives exactly the rotary dims.
    double factor = double(*dims) / a.head_dim;
    while (int(a.head_dim * factor) < *dims) factor = std::nextafter(factor, 2.0);
    a.partial_rotary_factor = factor;
  }
  a.rope_style = RopeStyle::rotate_half;  // llama's q/k rows are un-permuted (gguf_model_tensors)
  a.gqa_mapping = GqaMapping::grouped;
  a.norm_kind = NormKind::plain;
  a.gate_layout = GateLayout::official_grouped;
  a.gate_kind = GateKind::none;
  a.use_qk_norm = arch != "llama";
  a.residual = true;
  a.causal = true;
  a.qkv_bias = f.find_tensor("blk.0.attn_q.bias") || f.find_tensor("blk.0.attn_qkv.bias");
  a.o_bias = f.find_tensor("blk.0.attn_output.bias") != nullptr;
  if (arch == "qwen3") {
    // The paper's gated Qwen3 checkpoints convert as plain qwen3 with more
    // query rows: the gate's, grouped per KV head (official_grouped).
    const std::optional<int64_t> rows = query_rows(f, int64_t(a.num_kv_heads) * a.head_dim);
    if (rows == int64_t(a.num_heads) * (a.head_dim + 1)) a.gate_kind = GateKind::headwise;
    else if (rows == 2 * int64_t(a.num_heads) * a.head_dim) a.gate_kind = GateKind::elementwise;
  }
  read_rope_scaling(f, h, a);

  m.hidden_act = Activation::silu;
  if (moe) {
    m.moe.num_experts = h.required("expert_count", "the number of experts");
    m.moe.num_experts_per_tok = h.required("expert_used_count", "the experts each token is routed to");
    m.moe.moe_intermediate_size = h.required("expert_feed_forward_length", "each expert's MLP width");
    m.moe.norm_topk_prob = h.flag("expert_weights_norm").value_or(true);
    if (h.positive("expert_shared_feed_forward_length"))
      h.fail(ErrorCode::unsupported, "expert_shared_feed_forward_length", "is set: a qwen3moe model has no shared expert");
    m.intermediate_size = h.positive("feed_forward_length").value_or(m.moe.moe_intermediate_size);
  } else {
    if (const std::optional<int64_t> e = f.integer_or(h.key("expert_count")); e && *e > 0)
      h.fail(ErrorCode::unsupported, "expert_count",
             "is " + std::to_string(*e) + ": vkgate runs " + arch + " models with dense MLPs only");
    m.intermediate_size = h.required("feed_forward_length", "the MLP width");
  }
  m.mlp_bias = arch == "llama" && f.find_tensor("blk.0.ffn_gate.bias") != nullptr;

  const GgufTensor& embed = require_tensor(f, "token_embd.weight", "the token embedding");
  if (embed.shape.size() != 2 || embed.shape[0] < 1 || embed.shape[0] > INT_MAX)
    throw Error(ErrorCode::shape_mismatch, path + ": tensor 'token_embd.weight' has shape " + shape_text(embed.shape) +
                                               ", expected [vocab, " + std::to_string(a.hidden_size) + "]");
  m.vocab_size = int(embed.shape[0]);
  if (const std::optional<int64_t> v = f.integer_or(h.key("vocab_size")); v && *v != m.vocab_size)
    h.fail(ErrorCode::invalid_config, "vocab_size",
           "is " + std::to_string(*v) + " but token_embd.weight has " + std::to_string(m.vocab_size) + " rows");
  m.tie_word_embeddings = f.find_tensor("output.weight") == nullptr;
  for (const char* key : {"tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id", "tokenizer.ggml.eom_token_id"})
    if (const std::optional<int64_t> id = f.integer_or(key);
        id && std::find(m.eos_token_ids.begin(), m.eos_token_ids.end(), *id) == m.eos_token_ids.end()) {
      if (*id < 0 || *id >= m.vocab_size)
        throw Error(ErrorCode::invalid_config, path + ": key '" + key + "' is " + std::to_string(*id) +
                                                   ", outside the vocabulary [0, " + std::to_string(m.vocab_size) + ")");
      m.eos_token_ids.push_back(*id);
    }
  validate_as(path, [&] { m.validate(); });
  return m;
}

namespace {

// Hugging Face's names of a layer's tensors (under model.layers.N.) and the
// converter's (under blk.N.).
constexpr std::pair<const char*, const char*> kLayerNames[] = {
    {"input_layernorm.weight", "attn_norm.weight"},
    {"self_attn.q_proj.weight", "attn_q.weight"},
    {"self_attn.q_proj.bias", "attn_q.bias"},
    {"self_attn.k_proj.weight", "attn_k.weight"},
    {"self_attn.k_proj.bias", "attn_k.bias"},
    {"self_attn.v_proj.weight", "attn_v.weight"},
    {"self_attn.v_proj.bias", "attn_v.bias"},
    {"self_attn.o_proj.weight", "attn_output.weight"},
    {"self_attn.o_proj.bias", "attn_output.bias"},
    {"self_attn.q_norm.weight", "attn_q_norm.weight"},
    {"self_attn.k_norm.weight", "attn_k_norm.weight"},
    {"post_attention_layernorm.weight", "ffn_norm.weight"},
    {"mlp.gate_proj.weight", "ffn_gate.weight"},
    {"mlp.gate_proj.bias", "ffn_gate.bias"},
    {"mlp.up_proj.weight", "ffn_up.weight"},
    {"mlp.up_proj.bias", "ffn_up.bias"},
    {"mlp.down_proj.weight", "ffn_down.weight"},
    {"mlp.down_proj.bias", "ffn_down.bias"},
    {"mlp.gate.weight", "ffn_gate_inp.weight"},
};

class TensorReader {
 public:
  TensorReader(const GgufFile& f, const ModelConfig& cfg, TensorBuffers& copies) : f_(f), cfg_(cfg), copies_(copies) {}

  HostTensor read(const TensorSpec& spec) {
    if (spec.name == "model.embed_tokens.weight") return checked("token_embd.weight", spec.name, spec.shape);
    if (spec.name == "model.norm.weight") return checked("output_norm.weight", spec.name, spec.shape);
    if (spec.name == "lm_head.weight") return checked("output.weight", spec.name, spec.shape);
    const std::string prefix = "model.layers.";
    if (!spec.name.starts_with(prefix)) unknown(spec.name);
    const size_t dot = spec.name.find('.', prefix.size());
    const std::string layer = spec.name.substr(prefix.size(), dot - prefix.size());
    const std::string bare = spec.name.substr(dot + 1);
    const std::string blk = "blk." + layer + ".";
    if (bare.starts_with("mlp.experts.")) return expert(blk, bare, spec);
    const auto it = std::find_if(std::begin(kLayerNames), std::end(kLayerNames),
                                 [&](const auto& p) { return bare == p.first; });
    if (it == std::end(kLayerNames)) unknown(spec.name);
    const std::string name = blk + it->second;
    const bool q = bare.starts_with("self_attn.q_proj."), k = bare.starts_with("self_attn.k_proj.");
    if ((q || k || bare.starts_with("self_attn.v_proj.")) && !f_.find_tensor(name)) {
      const std::string fused = blk + "attn_qkv" + (bare.ends_with(".bias") ? ".bias" : ".weight");
      if (f_.find_tensor(fused)) return qkv_part(fused, spec, q ? 0 : k ? 1 : 2);
    }
    const HostTensor t = checked(name, spec.name, spec.shape);
    // llama: the converter permuted each head's rows for ggml's adjacent-pair RoPE.
    if (cfg_.model_type == "llama" && (q || k)) return unpermuted(t, q ? cfg_.attention.num_heads : cfg_.attention.num_kv_heads);
    return t;
  }

 private:
  [[noreturn]] void unknown(const std::string& hf) const {
    throw Error(ErrorCode::unsupported, f_.path() + ": no GGUF tensor is known to hold '" + hf + "'");
  }

  // `name` present, of a weight's dtype and of `shape`; errors name it and what it holds.
  HostTensor checked(const std::string& name, const std::string& hf, const std::vector<int64_t>& shape) const {
    const GgufTensor* t = f_.find_tensor(name);
    const std::string holds = " (" + hf + ")";
    if (!t)
      throw Error(ErrorCode::missing_tensor,
                  f_.path() + ": tensor '" + name + "' not found" + holds +
                      (name.starts_with("blk.") ? "; block_count is " + std::to_string(cfg_.num_hidden_layers) : ""));
    if (!(t->dtype == DType::F32 || t->dtype == DType::F16 || t->dtype == DType::BF16 || is_quantized(t->dtype)))
      throw Error(ErrorCode::shape_mismatch, f_.path() + ": tensor '" + name + "'" + holds + " has dtype " +
                                                 to_string(t->dtype) + ", expected F32, F16, BF16 or a block format");
    if (t->shape != shape)
      throw Error(ErrorCode::shape_mismatch, f_.path() + ": tensor '" + name + "'" + holds + " has shape " +
                                                 shape_text(t->shape) + ", expected " + shape_text(shape));
    return t->host();
  }

  // Rows [first, first + count) of a tensor whose first dimension is `rows`.
  static HostTensor rows(const HostTensor& t, int64_t total, int64_t first, int64_t count, std::vector<int64_t> shape) {
    const size_t row_bytes = t.bytes.size() / size_t(total);
    return HostTensor{t.dtype, std::move(shape), t.bytes.subspan(size_t(first) * row_bytes, size_t(count) * row_bytes)};
  }

  // The inverse of the converter's LlamaModel.permute: per head of `head_dim`
  // rows, its row 2i + j holds the checkpoint's row j·head_dim/2 + i.
  HostTensor unpermuted(const HostTensor& t, int heads) {
    const int64_t total = t.shape[0], head_dim = total / heads, half = head_dim / 2;
    const size_t row_bytes = t.bytes.size() / size_t(total);
    std::vector<std::byte>& out = copies_.emplace_back(t.bytes.size());
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t j = 0; j < 2; ++j)
        for (int64_t i = 0; i < half; ++i)
          std::memcpy(out.data() + size_t(h * head_dim + j * half + i) * row_bytes,
                      t.bytes.data() + size_t(h * head_dim + 2 * i + j) * row_bytes, row_bytes);
    return HostTensor{t.dtype, t.shape, std::span<const std::byte>(out)};
  }

  // q (part 0), k (1) or v (2) of a fused attn_qkv [q rows + 2·KV·Dh, (D)].
  HostTensor qkv_part(const std::string& fused, const TensorSpec& spec, int part) {
    const BlockConfig& a = cfg_.attention;
    const int64_t q_rows = a.q_proj_rows(), kv = a.kv_dim(), total = q_rows + 2 * kv;
    std::vector<int64_t> whole = spec.shape;
    whole[0] = total;
    const HostTensor t = checked(fused, spec.name, whole);
    const int64_t first = part == 0 ? 0 : part == 1 ? q_rows : q_rows + kv;
    const HostTensor p = rows(t, total, first, part == 0 ? q_rows : kv, spec.shape);
    if (cfg_.model_type == "llama" && part < 2) return unpermuted(p, part == 0 ? a.num_heads : a.num_kv_heads);
    return p;
  }

  // Expert e's gate, up or down projection: a view into the stacked
  // ffn_{gate,up,down}_exps [E, ·, ·] or the fused ffn_gate_up_exps [E, 2·Im, D].
  HostTensor expert(const std::string& blk, const std::string& bare, const TensorSpec& spec) {
    const std::string rest = bare.substr(std::string("mlp.experts.").size());  // "{e}.gate_proj.weight"
    const size_t dot = rest.find('.');
    const int64_t e = std::stoll(rest.substr(0, dot));
    const std::string proj = rest.substr(dot + 1);
    const int64_t E = cfg_.moe.num_experts, Im = cfg_.moe.moe_intermediate_size, D = cfg_.hidden_size();
    const char* stacked = proj == "gate_proj.weight" ? "ffn_gate_exps.weight"
                          : proj == "up_proj.weight" ? "ffn_up_exps.weight"
                          : proj == "down_proj.weight" ? "ffn_down_exps.weight"
                                                       : nullptr;
    if (!stacked) unknown(spec.name);
    const std::string experts = "model.layers." + blk.substr(4) + "mlp.experts";
    if (proj != "down_proj.weight" && !f_.find_tensor(blk + stacked) && f_.find_tensor(blk + "ffn_gate_up_exps.weight")) {
      const HostTensor all = checked(blk + "ffn_gate_up_exps.weight", experts + ".*.{gate,up}_proj.weight", {E, 2 * Im, D});
      return rows(all, E * 2 * Im, e * 2 * Im + (proj == "up_proj.weight" ? Im : 0), Im, spec.shape);
    }
    std::vector<int64_t> shape{E};
    shape.insert(shape.end(), spec.shape.begin(), spec.shape.end());
    const HostTensor all = checked(blk + stacked, experts + ".*." + proj, shape);
    return rows(all, E, e, 1, spec.shape);
  }

  const GgufFile& f_;
  const ModelConfig& cfg_;
  TensorBuffers& copies_;
};

}  // namespace

TensorMap gguf_model_tensors(const GgufFile& file, const ModelConfig& cfg, TensorBuffers& copies) {
  const std::vector<TensorSpec> specs = expected_model_weights(cfg);
  TensorReader reader(file, cfg, copies);
  TensorMap out;
  for (const TensorSpec& spec : specs) out[spec.name] = reader.read(spec);
  return out;
}

}  // namespace vkgate
