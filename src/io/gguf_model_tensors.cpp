// The model's tensors from a GGUF file under their Hugging Face names
// (vkgate/gguf_model.hpp's gguf_model_tensors): llama.cpp's converter's
// names (gguf-py's tensor_mapping.py) mapped back, and its layout changes
// (llama's permuted q/k rows, stacked experts, split Gated DeltaNet
// projections, Qwen3.5's reordered value heads) undone. gguf_model.cpp reads
// the config.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <optional>
#include <string>

#include "io/gguf_format.hpp"
#include "io/value_heads.hpp"
#include "vkgate/error.hpp"
#include "vkgate/gguf_model.hpp"

namespace vkgate {

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
    // Qwen3-Next and Qwen3.5: the converter stores 1 + w for every norm named
    // "*norm.weight" but the Gated DeltaNet's own (linear_attn.norm.weight, a plain weight).
    if (hybrid() && spec.name.ends_with("norm.weight") && !spec.name.ends_with("linear_attn.norm.weight"))
      return minus_one(mapped(spec));
    return mapped(spec);
  }

 private:
  bool hybrid() const { return cfg_.linear_attention.has_value(); }
  // Qwen3.5's converter (_LinearAttentionVReorderBase) reorders the value
  // heads from grouped by key head (value head g = j·r + i reads key head j)
  // to tiled (position i·nk + j), so that ggml broadcasts the key heads.
  bool tiled() const { return value_heads::tiled_in_gguf(cfg_.model_type); }

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
    // Qwen3-Next's and Qwen3.5's MLP norm is the converter's ATTN_POST_NORM (their tensor lists have no FFN_NORM).
    if (hybrid() && bare == "post_attention_layernorm.weight")
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
  // and Qwen3.5's: in_proj_qkv → attn_qkv, in_proj_z → attn_gate, in_proj_b →
  // ssm_beta, in_proj_a → ssm_alpha, each value-head-indexed row (v, z, b, a,
  // the v channels of the conv, A_log, dt_bias) and out_proj's column blocks
  // in tiled order (tiled()), put back here.
  HostTensor gdn(const std::string& blk, const std::string& bare, const TensorSpec& spec) {
    const GdnConfig& g = *cfg_.linear_attention;
    const int64_t D = g.hidden_size, C = g.conv_channels(), Z = g.value_dim(), nv = g.num_value_heads,
                  dv = g.value_head_dim, keys = 2 * int64_t(g.key_dim());
    if (bare == "in_proj_qkvz.weight") {
      if (f_.find_tensor(blk + "ssm_in.weight")) return checked(blk + "ssm_in.weight", spec.name, spec.shape);
      return qkvz(blk, spec);  // errors name attn_qkv and attn_gate, the converter's names now
    }
    if (bare == "in_proj_qkv.weight") return untiled_rows(checked(blk + "attn_qkv.weight", spec.name, {C, D}), keys, dv);
    if (bare == "in_proj_z.weight") return untiled_rows(checked(blk + "attn_gate.weight", spec.name, {Z, D}), 0, dv);
    if (bare == "in_proj_ba.weight") return checked(blk + "ssm_ba.weight", spec.name, spec.shape);
    if (bare == "in_proj_b.weight" || bare == "in_proj_a.weight") {
      if (!tiled()) return ba_part(blk, spec, bare == "in_proj_a.weight");
      return untiled_rows(checked(blk + (bare == "in_proj_a.weight" ? "ssm_alpha.weight" : "ssm_beta.weight"),
                                  spec.name, spec.shape), 0, 1);
    }
    if (bare == "conv1d.weight")
      return untiled_rows(reshaped(blk + "ssm_conv1d.weight", spec, {C, int64_t(g.conv_kernel)}), keys, dv);
    if (bare == "A_log") return a_log(blk + "ssm_a", spec);
    if (bare == "dt_bias") return untiled_rows(checked(blk + "ssm_dt.bias", spec.name, {nv}), 0, 1);
    if (bare == "norm.weight") return checked(blk + "ssm_norm.weight", spec.name, spec.shape);
    if (bare == "out_proj.weight") return untiled_columns(checked(blk + "ssm_out.weight", spec.name, spec.shape));
    unknown(spec.name);
  }

  value_heads::Order order() const { return value_heads::Order::of(*cfg_.linear_attention); }
  bool reordered() const { return tiled() && !order().identity(); }

  // t (rows along its first dimension; a vector's elements) with the value
  // heads' blocks of `unit` rows from row `first` on in grouped order again:
  // whole rows of bytes, so block formats too.
  HostTensor untiled_rows(const HostTensor& t, int64_t first, int64_t unit) {
    if (!reordered()) return t;
    const value_heads::Order o = order();
    std::vector<std::byte>& out = copies_.emplace_back(value_heads::move_row_blocks(
        t.bytes, t.bytes.size() / size_t(t.shape[0]), first, unit, o, [&](int64_t h) { return o.grouped(h); }));
    return HostTensor{t.dtype, t.shape, std::span<const std::byte>(out)};
  }

  // out_proj [D, nv·dv] with its columns' value-head blocks in grouped order
  // again, as bytes (each head's dv columns whole blocks of its format); as
  // stored where the config keeps them tiled (GdnConfig::out_proj_tiled:
  // some layer's blocks span heads).
  HostTensor untiled_columns(const HostTensor& t) {
    if (!reordered() || cfg_.linear_attention->out_proj_tiled) return t;
    const value_heads::Order o = order();
    const size_t chunk = size_t(cfg_.linear_attention->value_head_dim) / block_elements(t.dtype) * block_bytes(t.dtype);
    std::vector<std::byte>& out = copies_.emplace_back(
        value_heads::move_column_blocks(t.bytes, chunk, o, [&](int64_t h) { return o.grouped(h); }));
    return HostTensor{t.dtype, t.shape, std::span<const std::byte>(out)};
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
    std::vector<float> v = floats(untiled_rows(checked(name, spec.name, spec.shape), 0, 1));
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
