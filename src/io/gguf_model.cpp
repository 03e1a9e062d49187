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

#include "io/gguf_format.hpp"
#include "io/json_keys.hpp"
#include "vkgate/error.hpp"

namespace vkgate {

namespace {

constexpr const char* kArchitectures = "llama, qwen3, qwen3moe and qwen3next";

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

// Qwen3-Next's layer pattern: "<arch>.attention.recurrent_layers" (one bool
// per block, the MTP blocks' false; the converter writes it from layer_types)
// when present, as llama.cpp reads it; full_attention_interval (default 4,
// llama.cpp's) in any case.
void read_layer_types(const GgufFile& f, const Hparams& h, int blocks, BlockConfig& a) {
  a.full_attention_interval = h.positive("full_attention_interval").value_or(4);
  if (!h.has("attention.recurrent_layers")) return;
  const GgufValue& v = *f.find(h.key("attention.recurrent_layers"));
  if (v.type != GgufType::ARRAY || !(v.element == GgufType::BOOL || gguf_format::is_integer_type(v.element)))
    h.fail(ErrorCode::invalid_config, "attention.recurrent_layers",
           std::string("is ") + (v.type == GgufType::ARRAY ? "an array of " : "") +
               to_string(v.type == GgufType::ARRAY ? v.element : v.type) + ", expected an array of bools");
  const std::vector<int64_t>& recurrent = v.integers;
  if (recurrent.size() != size_t(blocks))
    h.fail(ErrorCode::invalid_config, "attention.recurrent_layers",
           "has " + std::to_string(recurrent.size()) + " entries, expected one per block (block_count " +
               std::to_string(blocks) + ")");
  for (int l = 0; l < a.num_hidden_layers; ++l)
    a.layer_types.push_back(recurrent[size_t(l)] ? "linear_attention" : "full_attention");
}

// The Gated DeltaNet layers' shape from the ssm.* keys as the converter writes
// them: state_size dk, group_count nk, time_step_rank nv, inner_size nv·dv,
// conv_kernel K (all required, as llama.cpp reads them).
GdnConfig read_gdn(const Hparams& h, const BlockConfig& a) {
  GdnConfig g;
  g.hidden_size = a.hidden_size;
  g.rms_norm_eps = a.rms_norm_eps;
  g.key_head_dim = h.required("ssm.state_size", "the Gated DeltaNet key head size");
  g.num_key_heads = h.required("ssm.group_count", "the Gated DeltaNet key heads");
  g.num_value_heads = h.required("ssm.time_step_rank", "the Gated DeltaNet value heads");
  g.conv_kernel = h.required("ssm.conv_kernel", "the Gated DeltaNet convolution width");
  const int inner = h.required("ssm.inner_size", "the Gated DeltaNet value width, value heads × value head size");
  if (g.num_value_heads % g.num_key_heads != 0)
    h.fail(ErrorCode::invalid_config, "ssm.time_step_rank",
           "is " + std::to_string(g.num_value_heads) + ", not a multiple of ssm.group_count " +
               std::to_string(g.num_key_heads) + " (value heads per key head)");
  if (inner % g.num_value_heads != 0)
    h.fail(ErrorCode::invalid_config, "ssm.inner_size",
           "is " + std::to_string(inner) + ", not a multiple of ssm.time_step_rank " +
               std::to_string(g.num_value_heads));
  g.value_head_dim = inner / g.num_value_heads;
  return g;
}

// Whether the Gated DeltaNet layers' input projections must stay apart
// (GdnConfig::separate_projections): the converter splits in_proj_qkvz into
// attn_qkv and attn_gate, which gguf_model_tensors interleaves back into
// in_proj_qkvz (a copy of whole rows) when the two have one dtype in every
// such layer; llama-quantize may give them different types, and then the
// layer reads them apart (with in_proj_ba's b and a rows apart too). A file
// of the older converter has in_proj_qkvz unchanged (ssm_in).
bool separate_gdn_projections(const GgufFile& f, const ModelConfig& m) {
  for (int l = 0; l < m.num_hidden_layers; ++l) {
    if (m.attention.is_full_attention(l)) continue;
    const std::string blk = "blk." + std::to_string(l) + ".";
    if (f.find_tensor(blk + "ssm_in.weight")) continue;
    const GgufTensor* qkv = f.find_tensor(blk + "attn_qkv.weight");
    const GgufTensor* gate = f.find_tensor(blk + "attn_gate.weight");
    if (qkv && gate && qkv->dtype != gate->dtype) return true;
  }
  return false;
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
  else if (arch == "qwen3next") m.model_type = "qwen3_next";
  else
    throw Error(ErrorCode::invalid_config, path + ": key 'general.architecture' is \"" + arch +
                                               "\": vkgate reads the architectures " + kArchitectures);
  const Hparams h(f, arch);
  const bool next = arch == "qwen3next";
  const bool moe = arch == "qwen3moe" || next;

  BlockConfig& a = m.attention;
  a.model_type = m.model_type;
  const int blocks = h.required("block_count", "the number of layers");
  m.num_hidden_layers = blocks;
  // Qwen3-Next's multi-token-prediction blocks follow the model's (blk.L...): not run.
  if (const std::optional<int64_t> mtp = f.integer_or(h.key("nextn_predict_layers")); mtp && *mtp != 0) {
    if (*mtp < 0 || *mtp >= blocks)
      h.fail(ErrorCode::invalid_config, "nextn_predict_layers",
             "is " + std::to_string(*mtp) + ", expected fewer than block_count " + std::to_string(blocks));
    m.num_hidden_layers = blocks - int(*mtp);
  }
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
  if (next) {
    // transformers' Qwen3NextAttention: q_proj holds each head's query and
    // its elementwise gate (the converter keeps that layout, as llama.cpp
    // reads it); Qwen3NextRMSNorm scales by (1 + w), and the converter stores
    // 1 + w (gguf_model_tensors takes the 1 off again).
    a.gate_kind = GateKind::elementwise;
    a.gate_layout = GateLayout::qwen3_next;
    a.norm_kind = NormKind::zero_centered;
    read_layer_types(f, h, blocks, a);
  }
  // Biases as the first full-attention layer has them (Qwen3-Next's first layers are Gated DeltaNet).
  int first_attention = 0;
  while (first_attention + 1 < m.num_hidden_layers && !a.is_full_attention(first_attention)) ++first_attention;
  const std::string attn_blk = "blk." + std::to_string(first_attention) + ".";
  a.qkv_bias = f.find_tensor(attn_blk + "attn_q.bias") || f.find_tensor(attn_blk + "attn_qkv.bias");
  a.o_bias = f.find_tensor(attn_blk + "attn_output.bias") != nullptr;
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
    // llama.cpp scales the routed weights by it unless it is 0 or 1.
    if (const std::optional<double> scale = f.real_or(h.key("expert_weights_scale")); scale && *scale != 0 && *scale != 1)
      h.fail(ErrorCode::unsupported, "expert_weights_scale",
             "is " + std::to_string(*scale) + ": vkgate does not scale the routed experts' weights");
    m.intermediate_size = h.positive("feed_forward_length").value_or(m.moe.moe_intermediate_size);
    if (!next) {
      if (h.positive("expert_shared_feed_forward_length"))
        h.fail(ErrorCode::unsupported, "expert_shared_feed_forward_length", "is set: a qwen3moe model has no shared expert");
    } else {
      // Every layer sparse (llama.cpp reads no dense MLP for qwen3next), each with a
      // shared expert of expert_shared_feed_forward_length (absent: feed_forward_length,
      // as llama.cpp takes it; 0: none).
      const std::optional<int64_t> shared = f.integer_or(h.key("expert_shared_feed_forward_length"));
      if (shared && (*shared < 0 || *shared > INT_MAX))
        h.fail(ErrorCode::invalid_config, "expert_shared_feed_forward_length",
               "is " + std::to_string(*shared) + ", expected a width (0: no shared expert)");
      m.moe.shared_expert_intermediate_size = shared ? int(*shared) : m.intermediate_size;
      m.linear_attention = read_gdn(h, a);
      m.linear_attention->separate_projections = separate_gdn_projections(f, m);
    }
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
    {"mlp.shared_expert.gate_proj.weight", "ffn_gate_shexp.weight"},
    {"mlp.shared_expert.up_proj.weight", "ffn_up_shexp.weight"},
    {"mlp.shared_expert.down_proj.weight", "ffn_down_shexp.weight"},
};

// A 1-D or small tensor's values as fp32 (F32, F16, BF16 or a block format).
std::vector<float> floats(const HostTensor& t) {
  std::vector<float> out(size_t(t.numel()));
  if (is_quantized(t.dtype)) {
    dequantize(t.dtype, t.bytes, out);
    return out;
  }
  for (size_t i = 0; i < out.size(); ++i) {
    uint16_t h = 0;
    switch (t.dtype) {
      case DType::F32: std::memcpy(&out[i], t.bytes.data() + 4 * i, 4); break;
      case DType::F16: std::memcpy(&h, t.bytes.data() + 2 * i, 2); out[i] = half_to_float(h); break;
      default: std::memcpy(&h, t.bytes.data() + 2 * i, 2); out[i] = bf16_to_float(h); break;  // BF16 (checked)
    }
  }
  return out;
}

class TensorReader {
 public:
  TensorReader(const GgufFile& f, const ModelConfig& cfg, TensorBuffers& copies) : f_(f), cfg_(cfg), copies_(copies) {}

  HostTensor read(const TensorSpec& spec) {
    // Qwen3-Next: the converter stores 1 + w for every norm named "*norm.weight"
    // but the Gated DeltaNet's own (linear_attn.norm.weight, a plain weight).
    if (next() && spec.name.ends_with("norm.weight") && !spec.name.ends_with("linear_attn.norm.weight"))
      return minus_one(mapped(spec));
    return mapped(spec);
  }

 private:
  bool next() const { return cfg_.model_type == "qwen3_next"; }

  HostTensor mapped(const TensorSpec& spec) {
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
    if (bare.starts_with("linear_attn.")) return gdn(blk, bare.substr(12), spec);
    // Qwen3-Next's MLP norm is the converter's ATTN_POST_NORM (its tensor list has no FFN_NORM).
    if (next() && bare == "post_attention_layernorm.weight")
      return checked(blk + "post_attention_norm.weight", spec.name, spec.shape);
    // A [1, D] matrix, stored as such ({D, 1}) or as the vector llama.cpp reads ({D}).
    if (bare == "mlp.shared_expert_gate.weight") return vector_or_row(blk + "ffn_gate_inp_shexp.weight", spec);
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

  // fp32 values as a tensor of `shape`, held in copies_.
  HostTensor owned(const std::vector<float>& v, std::vector<int64_t> shape) {
    std::vector<std::byte>& out = copies_.emplace_back(v.size() * sizeof(float));
    std::memcpy(out.data(), v.data(), out.size());
    return HostTensor{DType::F32, std::move(shape), std::span<const std::byte>(out)};
  }

  // The converter's norm weight 1 + w, as the checkpoint's w (fp32).
  HostTensor minus_one(const HostTensor& t) {
    std::vector<float> v = floats(t);
    for (float& x : v) x -= 1.0f;
    return owned(v, t.shape);
  }

  // `name` holding `spec`'s values under another shape of the same elements
  // (`alternative`), viewed as spec's shape.
  HostTensor reshaped(const std::string& name, const TensorSpec& spec, const std::vector<int64_t>& alternative) {
    const GgufTensor* t = f_.find_tensor(name);
    if (t && t->shape == alternative) {
      HostTensor h = checked(name, spec.name, alternative);
      h.shape = spec.shape;
      return h;
    }
    return checked(name, spec.name, spec.shape);
  }

  HostTensor vector_or_row(const std::string& name, const TensorSpec& spec) {
    return reshaped(name, spec, {spec.numel()});
  }

  // A Gated DeltaNet tensor (`bare` under model.layers.N.linear_attn.) from the
  // converter's (Qwen3NextModel.modify_tensors, tensor_mapping.py):
  //   in_proj_qkvz  → attn_qkv [all q | all k | all v] and attn_gate [all z]
  //                   (legacy files: ssm_in, unchanged)
  //   in_proj_ba    → ssm_ba, unchanged      conv1d [C, 1, K] → ssm_conv1d [C, K]
  //   A_log         → ssm_a = −exp(A_log)    dt_bias → ssm_dt.bias
  //   norm          → ssm_norm (not shifted)  out_proj → ssm_out
  HostTensor gdn(const std::string& blk, const std::string& bare, const TensorSpec& spec) {
    const GdnConfig& g = *cfg_.linear_attention;
    const int64_t D = g.hidden_size, C = g.conv_channels(), Z = g.value_dim(), nv = g.num_value_heads;
    if (bare == "in_proj_qkvz.weight") {
      if (f_.find_tensor(blk + "ssm_in.weight")) return checked(blk + "ssm_in.weight", spec.name, spec.shape);
      return qkvz(blk, spec);  // errors name attn_qkv and attn_gate, the converter's names now
    }
    if (bare == "in_proj_qkv.weight") return checked(blk + "attn_qkv.weight", spec.name, {C, D});
    if (bare == "in_proj_z.weight") return checked(blk + "attn_gate.weight", spec.name, {Z, D});
    if (bare == "in_proj_ba.weight") return checked(blk + "ssm_ba.weight", spec.name, spec.shape);
    if (bare == "in_proj_b.weight" || bare == "in_proj_a.weight") return ba_part(blk, spec, bare == "in_proj_a.weight");
    if (bare == "conv1d.weight") return reshaped(blk + "ssm_conv1d.weight", spec, {C, int64_t(g.conv_kernel)});
    if (bare == "A_log") return a_log(blk + "ssm_a", spec);
    if (bare == "dt_bias") return checked(blk + "ssm_dt.bias", spec.name, {nv});
    if (bare == "norm.weight") return checked(blk + "ssm_norm.weight", spec.name, spec.shape);
    if (bare == "out_proj.weight") return checked(blk + "ssm_out.weight", spec.name, spec.shape);
    unknown(spec.name);
  }

  // in_proj_qkvz's rows (per key head j: q_j, k_j, the v and then z rows of
  // its value heads) gathered from attn_qkv and attn_gate: whole rows of
  // bytes, so block formats too; gguf_model_config chose this form only where
  // both have one dtype.
  HostTensor qkvz(const std::string& blk, const TensorSpec& spec) {
    const GdnConfig& g = *cfg_.linear_attention;
    const int64_t D = g.hidden_size, dk = g.key_head_dim, rv = int64_t(g.group_size()) * g.value_head_dim,
                  keys = g.key_dim(), C = g.conv_channels();
    const HostTensor qkv = checked(blk + "attn_qkv.weight", spec.name + " (its q, k and v rows)", {C, D});
    const HostTensor z = checked(blk + "attn_gate.weight", spec.name + " (its z rows)", {g.value_dim(), D});
    if (qkv.dtype != z.dtype)
      throw Error(ErrorCode::shape_mismatch, f_.path() + ": tensors '" + blk + "attn_qkv.weight' (" +
                                                 to_string(qkv.dtype) + ") and '" + blk + "attn_gate.weight' (" +
                                                 to_string(z.dtype) + ") differ in dtype: they cannot be one " +
                                                 spec.name + " (a config of separate_projections reads them apart, "
                                                 "as gguf_model_config gives for this file)");
    const size_t row = qkv.bytes.size() / size_t(C);
    std::vector<std::byte>& out = copies_.emplace_back();
    out.reserve(qkv.bytes.size() + z.bytes.size());
    auto take = [&](const HostTensor& from, int64_t first, int64_t count) {
      const auto begin = from.bytes.begin() + ptrdiff_t(size_t(first) * row);
      out.insert(out.end(), begin, begin + ptrdiff_t(size_t(count) * row));
    };
    for (int64_t j = 0; j < g.num_key_heads; ++j) {
      take(qkv, j * dk, dk);
      take(qkv, keys + j * dk, dk);
      take(qkv, 2 * keys + j * rv, rv);
      take(z, j * rv, rv);
    }
    return HostTensor{qkv.dtype, spec.shape, std::span<const std::byte>(out)};
  }

  // in_proj_b (a = false) or in_proj_a's rows [nv, D] of ssm_ba, which holds
  // per key head j its value heads' b rows, then their a rows.
  HostTensor ba_part(const std::string& blk, const TensorSpec& spec, bool a) {
    const GdnConfig& g = *cfg_.linear_attention;
    const int64_t nv = g.num_value_heads, r = g.group_size();
    const HostTensor ba = checked(blk + "ssm_ba.weight", "the b and a rows of " + spec.name, {2 * nv, spec.shape[1]});
    const size_t row = ba.bytes.size() / size_t(2 * nv);
    std::vector<std::byte>& out = copies_.emplace_back();
    out.reserve(size_t(nv) * row);
    for (int64_t j = 0; j < g.num_key_heads; ++j) {
      const auto begin = ba.bytes.begin() + ptrdiff_t(size_t(2 * j * r + (a ? r : 0)) * row);
      out.insert(out.end(), begin, begin + ptrdiff_t(size_t(r) * row));
    }
    return HostTensor{ba.dtype, spec.shape, std::span<const std::byte>(out)};
  }

  // A_log = log(−ssm_a): the converter stores A = −exp(A_log), negative.
  HostTensor a_log(const std::string& name, const TensorSpec& spec) {
    std::vector<float> v = floats(checked(name, spec.name, spec.shape));
    for (size_t i = 0; i < v.size(); ++i) {
      if (!(v[i] < 0) || !std::isfinite(v[i]))
        throw Error(ErrorCode::invalid_config, f_.path() + ": tensor '" + name + "' (" + spec.name + " as −exp(A_log)) holds " +
                                                   std::to_string(v[i]) + " at " + std::to_string(i) +
                                                   ": expected negative finite values");
      v[i] = std::log(-v[i]);
    }
    return owned(v, spec.shape);
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
