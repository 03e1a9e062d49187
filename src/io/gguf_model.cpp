// GGUF -> ModelConfig (vkgate/gguf_model.hpp): the keys are those that
// llama.cpp's convert_hf_to_gguf.py writes (gguf-py's constants.py).
// gguf_model_tensors.cpp maps the tensors (token_embd, blk.N.attn_q, ...,
// output_norm, output) back to their Hugging Face names.
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
#include "io/value_heads.hpp"
#include "vkgate/error.hpp"

namespace vkgate {

namespace {

constexpr const char* kArchitectures = "llama, qwen3, qwen3moe, qwen3next, qwen35 and qwen35moe";

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

// Qwen3.5's multimodal RoPE sections, which the converter pads to four with
// zeros ([11, 11, 10, 0]): the config's three again. Moot for text.
void read_mrope_sections(const GgufFile& f, const Hparams& h, BlockConfig& a) {
  const GgufValue* v = f.find(h.key("rope.dimension_sections"));
  if (!v) return;
  if (v->type != GgufType::ARRAY || !gguf_format::is_integer_type(v->element) ||
      std::any_of(v->integers.begin(), v->integers.end(), [](int64_t x) { return x < 0 || x > 65536; }))
    h.fail(ErrorCode::invalid_config, "rope.dimension_sections", "is not an array of rotary pair counts");
  a.mrope_section.assign(v->integers.begin(), v->integers.end());
  while (a.mrope_section.size() > 3 && a.mrope_section.back() == 0) a.mrope_section.pop_back();
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

// Whether out_proj keeps the file's tiled value-head columns
// (GdnConfig::out_proj_tiled): where some layer's ssm_out has blocks across
// value heads (Q4_K's 256 across heads of 128), which cannot be put back in
// grouped order as bytes; then every layer's is kept as stored, the layer
// writing its output heads tiled instead.
bool gdn_out_proj_tiled(const GgufFile& f, const ModelConfig& m) {
  const GdnConfig& g = *m.linear_attention;
  if (!value_heads::tiled_in_gguf(m.model_type) || value_heads::Order::of(g).identity()) return false;
  for (int l = 0; l < m.num_hidden_layers; ++l) {
    if (m.attention.is_full_attention(l)) continue;
    const GgufTensor* out = f.find_tensor("blk." + std::to_string(l) + ".ssm_out.weight");
    if (out && g.value_head_dim % int64_t(block_elements(out->dtype)) != 0) return true;
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
  else if (arch == "qwen35") m.model_type = "qwen3_5_text";
  else if (arch == "qwen35moe") m.model_type = "qwen3_5_moe_text";
  else
    throw Error(ErrorCode::invalid_config, path + ": key 'general.architecture' is \"" + arch +
                                               "\": vkgate reads the architectures " + kArchitectures);
  const Hparams h(f, arch);
  // Qwen3-Next and Qwen3.5: Gated DeltaNet layers beside gated attention.
  const bool hybrid = arch == "qwen3next" || arch == "qwen35" || arch == "qwen35moe";
  const bool moe = arch == "qwen3moe" || arch == "qwen3next" || arch == "qwen35moe";

  BlockConfig& a = m.attention;
  a.model_type = m.model_type;
  const int blocks = h.required("block_count", "the number of layers");
  m.num_hidden_layers = blocks;
  // Qwen3-Next's and Qwen3.5's multi-token-prediction blocks follow the model's (blk.L...): not run.
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
  if (hybrid) {
    // transformers' Qwen3NextAttention (Qwen3_5Attention the same): q_proj holds each head's query and
    // its elementwise gate (the converter keeps that layout, as llama.cpp
    // reads it); Qwen3NextRMSNorm scales by (1 + w), and the converter stores
    // 1 + w (gguf_model_tensors takes the 1 off again).
    a.gate_kind = GateKind::elementwise;
    a.gate_layout = GateLayout::qwen3_next;
    a.norm_kind = NormKind::zero_centered;
    read_layer_types(f, h, blocks, a);
    read_mrope_sections(f, h, a);
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
    if (!hybrid) {
      if (h.positive("expert_shared_feed_forward_length"))
        h.fail(ErrorCode::unsupported, "expert_shared_feed_forward_length", "is set: a qwen3moe model has no shared expert");
    } else {
      // Every layer sparse (llama.cpp reads no dense MLP for qwen3next, qwen35moe), each with a
      // shared expert of expert_shared_feed_forward_length (absent: feed_forward_length,
      // as llama.cpp takes it; 0: none).
      const std::optional<int64_t> shared = f.integer_or(h.key("expert_shared_feed_forward_length"));
      if (shared && (*shared < 0 || *shared > INT_MAX))
        h.fail(ErrorCode::invalid_config, "expert_shared_feed_forward_length",
               "is " + std::to_string(*shared) + ", expected a width (0: no shared expert)");
      m.moe.shared_expert_intermediate_size = shared ? int(*shared) : m.intermediate_size;
    }
  } else {
    if (const std::optional<int64_t> e = f.integer_or(h.key("expert_count")); e && *e > 0)
      h.fail(ErrorCode::unsupported, "expert_count",
             "is " + std::to_string(*e) + ": vkgate runs " + arch + " models with dense MLPs only");
    m.intermediate_size = h.required("feed_forward_length", "the MLP width");
  }
  if (hybrid) {
    m.linear_attention = read_gdn(h, a);
    // Qwen3.5's converter keeps its four input projections apart (attn_qkv,
    // attn_gate, ssm_beta, ssm_alpha), as the checkpoint has them.
    m.linear_attention->separate_projections = arch != "qwen3next" || separate_gdn_projections(f, m);
    m.linear_attention->out_proj_tiled = gdn_out_proj_tiled(f, m);
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

}  // namespace vkgate
