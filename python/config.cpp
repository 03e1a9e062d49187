// BlockConfig, ModelConfig, GlaConfig: every field a read/write attribute,
// enums as the strings config.json uses; the parsers and the expected tensors.
#include <array>
#include <optional>

#include <pybind11/operators.h>

#include "common.hpp"
#include "vkgate/config.hpp"
#include "vkgate/gdn_config.hpp"
#include "vkgate/gla_config.hpp"
#include "vkgate/model_config.hpp"

namespace vkgate::py_bind {

namespace {

// A field's value as its C++ type, else Error(invalid_config) naming the field.
template <class T>
T field_value(const py::handle& v, const char* field) {
  constexpr ErrorCode code = ErrorCode::invalid_config;
  if constexpr (std::is_same_v<T, int>) {
    return int_arg(v, field, code);
  } else if constexpr (std::is_same_v<T, bool>) {
    return bool_arg(v, field, code);
  } else if constexpr (std::is_same_v<T, double>) {
    return float_value_arg(v, field, code);
  } else if constexpr (std::is_same_v<T, std::string>) {
    return str_arg(v, field, code);
  } else if constexpr (std::is_same_v<T, std::optional<double>>) {
    if (v.is_none()) return std::nullopt;
    return float_value_arg(v, field, code);
  } else if constexpr (std::is_same_v<T, std::vector<std::string>> || std::is_same_v<T, std::vector<int64_t>> ||
                       std::is_same_v<T, std::vector<int>>) {
    if (!PyList_Check(v.ptr()) && !PyTuple_Check(v.ptr()))
      fail(code, std::string(field) + ": expected a list, got " + describe(v));
    T r;
    const py::sequence items = py::reinterpret_borrow<py::sequence>(v);
    for (size_t i = 0; i < items.size(); ++i) {
      const std::string at = std::string(field) + "[" + std::to_string(i) + "]";
      if constexpr (std::is_same_v<T, std::vector<std::string>>)
        r.push_back(str_arg(items[i], at.c_str(), code));
      else if constexpr (std::is_same_v<T, std::vector<int>>)
        r.push_back(int_arg(items[i], at.c_str(), code));
      else
        r.push_back(integer_arg(items[i], at.c_str(), INT64_MIN, INT64_MAX, code));
    }
    return r;
  } else if constexpr (std::is_same_v<T, BlockConfig>) {
    return config_arg<BlockConfig>(v, field, "BlockConfig");
  } else if constexpr (std::is_same_v<T, MoeConfig>) {
    return config_arg<MoeConfig>(v, field, "MoeConfig");
  } else if constexpr (std::is_same_v<T, std::optional<GlaConfig>>) {
    if (v.is_none()) return std::nullopt;
    return config_arg<GlaConfig>(v, field, "GlaConfig");
  } else if constexpr (std::is_same_v<T, std::optional<GdnConfig>>) {
    if (v.is_none()) return std::nullopt;
    return config_arg<GdnConfig>(v, field, "GdnConfig");
  } else {
    try {
      return v.cast<T>();
    } catch (const py::cast_error&) {
      fail(code, std::string(field) + ": a value of the wrong type, " + describe(v));
    }
  }
}

// Binds fields and remembers their names, so that Config(**kwargs) can refuse
// a misspelt keyword instead of ignoring it.
template <class C>
struct Fields {
  py::class_<C>& cls;
  const char* cls_name;
  std::vector<std::string> names;

  // A read/write attribute whose setter checks the value (field_value).
  template <class T>
  Fields& field(const char* name, T C::*member, const char* doc) {
    std::string full = std::string(cls_name) + "." + name;
    cls.def_property(
        name, [member](const C& c) -> const T& { return c.*member; },  // a reference, as def_readwrite gives
        [member, full](C& c, const py::object& v) { c.*member = field_value<T>(v, full.c_str()); }, doc);
    names.emplace_back(name);
    return *this;
  }

  // An enum as its config.json spelling; a wrong string is Error(invalid_config) naming the field.
  template <class E, size_t N>
  Fields& enum_field(const char* name, E C::*member, std::array<E, N> values, const char* doc) {
    std::string field = std::string(cls_name) + "." + name;
    cls.def_property(
        name, [member](const C& c) { return std::string(to_string(c.*member)); },
        [member, values, field](C& c, const py::object& v) {
          c.*member = parse_enum(str_arg(v, field.c_str(), ErrorCode::invalid_config), values, field,
                                 ErrorCode::invalid_config);
        },
        doc);
    names.emplace_back(name);
    return *this;
  }

  // Config(**fields) and repr() listing every field.
  void finish() {
    auto names_copy = names;
    std::string cname = cls_name;
    cls.def(py::init([names_copy, cname](const py::kwargs& kw) {
              auto c = std::make_unique<C>();
              py::object view = py::cast(c.get(), py::return_value_policy::reference);
              for (auto [key, value] : kw) {
                const std::string k = str_arg(key, "keyword", ErrorCode::invalid_config);
                if (std::find(names_copy.begin(), names_copy.end(), k) == names_copy.end())
                  fail(ErrorCode::invalid_config, cname + ": no field '" + k + "'");
                py::setattr(view, key, value);
              }
              return c;
            }),
            ("Any field as a keyword argument: " + cname + "(hidden_size=64, ...).").c_str());
    cls.def("__repr__", [names_copy, cname](const py::object& self) {
      std::string r = cname + "(";
      for (size_t i = 0; i < names_copy.size(); ++i)
        r += (i ? ", " : "") + names_copy[i] + "=" + std::string(py::repr(self.attr(names_copy[i].c_str())));
      return r + ")";
    });
    cls.def("copy", [](const C& c) { return C(c); }, "An independent copy.");
    cls.attr("FIELDS") = py::tuple(py::cast(names_copy));
  }
};

py::dict spec_dict(const std::vector<TensorSpec>& specs) {
  py::dict r;
  for (const TensorSpec& s : specs) r[py::str(s.name)] = py::tuple(py::cast(s.shape));
  return r;
}

void bind_rope_scaling(py::module_& m) {
  py::class_<RopeScaling> cls(m, "RopeScaling",
                              "RoPE's frequency scaling, transformers' rope_type and its keys (include/vkgate/config.hpp);\n"
                              "each type reads only its own fields.");
  Fields<RopeScaling> f{cls, "RopeScaling"};
  f.enum_field("type", &RopeScaling::type, kRopeTypes, "'default', 'linear', 'dynamic', 'yarn' or 'llama3'")
      .field("factor", &RopeScaling::factor, "linear, dynamic, yarn, llama3: the scaling factor (>= 1)")
      .field("original_max_position_embeddings", &RopeScaling::original_max_position_embeddings,
             "yarn, llama3: the pre-training length (0: the BlockConfig's max_position_embeddings)")
      .field("low_freq_factor", &RopeScaling::low_freq_factor, "llama3")
      .field("high_freq_factor", &RopeScaling::high_freq_factor, "llama3 (> low_freq_factor)")
      .field("beta_fast", &RopeScaling::beta_fast, "yarn: the ramp's fast bound in rotations (default 32)")
      .field("beta_slow", &RopeScaling::beta_slow, "yarn: the ramp's slow bound in rotations (default 1)")
      .field("attention_factor", &RopeScaling::attention_factor,
             "yarn: what cos and sin are multiplied by (0: 0.1*ln(factor) + 1, or from mscale)")
      .field("mscale", &RopeScaling::mscale, "yarn (0: not given)")
      .field("mscale_all_dim", &RopeScaling::mscale_all_dim, "yarn (0: not given)")
      .field("truncate", &RopeScaling::truncate, "yarn: round the ramp's bounds outwards to whole dims");
  f.finish();
  cls.def(py::self == py::self);
}

void bind_block_config(py::module_& m) {
  py::class_<BlockConfig> cls(m, "BlockConfig",
                              "The shape and conventions of one gated-attention block (include/vkgate/config.hpp).\n"
                              "Enum fields are strings as config.json spells them.");
  Fields<BlockConfig> f{cls, "BlockConfig"};
  f.field("hidden_size", &BlockConfig::hidden_size, "D")
      .field("num_heads", &BlockConfig::num_heads, "H, query heads")
      .field("num_kv_heads", &BlockConfig::num_kv_heads, "KV heads")
      .field("head_dim", &BlockConfig::head_dim, "Dh")
      .field("rms_norm_eps", &BlockConfig::rms_norm_eps, "epsilon of every RMSNorm")
      .field("rope_theta", &BlockConfig::rope_theta, "RoPE base")
      .field("partial_rotary_factor", &BlockConfig::partial_rotary_factor, "rotary dims = int(head_dim * factor)")
      .field("rope_scaling", &BlockConfig::rope_scaling, "RoPE's frequency scaling (RopeScaling; type 'default': none)")
      .field("mrope_section", &BlockConfig::mrope_section,
             "Qwen3.5's multimodal RoPE sections (moot for text positions; written to GGUF)")
      .field("max_position_embeddings", &BlockConfig::max_position_embeddings,
             "the model's context length (0: unknown); dynamic RoPE's threshold, yarn's and llama3's fallback")
      .enum_field("gate_kind", &BlockConfig::gate_kind,
                  kGateKinds, "'none', 'headwise' or 'elementwise'")
      .enum_field("gate_layout", &BlockConfig::gate_layout,
                  kGateLayouts,
                  "where the gate rows live: 'qwen3_next', 'official_grouped' or 'separate' (gate_proj.weight)")
      .enum_field("gate_position", &BlockConfig::gate_position,
                  kGatePositions,
                  "the paper's G1-G5: 'sdpa', 'value', 'key', 'query', 'dense'")
      .field("gate_shared_heads", &BlockConfig::gate_shared_heads, "one score averaged over the heads gates them all")
      .enum_field("gate_combine", &BlockConfig::gate_combine, kGateCombines,
                  "'multiply' or 'add'")
      .enum_field("gate_activation", &BlockConfig::gate_activation,
                  kGateActivations,
                  "'sigmoid', 'silu', 'ns_sigmoid' or 'identity'")
      .enum_field("rope_style", &BlockConfig::rope_style, kRopeStyles,
                  "'rotate_half' or 'interleaved'")
      .enum_field("gqa_mapping", &BlockConfig::gqa_mapping, kGqaMappings,
                  "'grouped' (h // G) or 'tiled' (h % KV)")
      .enum_field("norm_kind", &BlockConfig::norm_kind, kNormKinds,
                  "'plain' x*w or 'zero_centered' x*(1+w)")
      .field("use_qk_norm", &BlockConfig::use_qk_norm, "q_norm/k_norm per head")
      .field("qkv_bias", &BlockConfig::qkv_bias, "q/k/v (and gate) projections carry .bias")
      .field("o_bias", &BlockConfig::o_bias, "o_proj carries .bias")
      .field("causal", &BlockConfig::causal, "causal mask")
      .field("residual", &BlockConfig::residual, "output = x + block(x)")
      .field("num_hidden_layers", &BlockConfig::num_hidden_layers, "layers of the model (0: unknown)")
      .field("layer_types", &BlockConfig::layer_types, "config.json's layer_types")
      .field("full_attention_interval", &BlockConfig::full_attention_interval, "every k-th layer is full attention")
      .field("model_type", &BlockConfig::model_type, "config.json's model_type");
  f.finish();
  cls.def("validate", &BlockConfig::validate, "Raises vkgate.Error('invalid_config') naming the field when impossible.")
      .def("check_layer", [](const BlockConfig& c, arg::Int layer) { c.check_layer(int_arg(layer, "layer")); },
           py::arg("layer"),
           "Raises vkgate.Error('invalid_argument') when `layer` is not a full-attention layer of the model.")
      .def_property_readonly("group_size", &BlockConfig::group_size)
      .def_property_readonly("rotary_dim", &BlockConfig::rotary_dim)
      .def_property_readonly("gate_width", &BlockConfig::gate_width)
      .def_property_readonly("kv_dim", &BlockConfig::kv_dim)
      .def_property_readonly("attn_dim", &BlockConfig::attn_dim)
      .def_static("qwen3_next_attention", &BlockConfig::qwen3_next_attention,
                  "Qwen3-Next-80B-A3B's attention (the demo's shape).");

  m.def("load_config", [](arg::Path path) { return load_config(fspath(path, "path")); }, py::arg("path"),
        "A Hugging Face config.json file as a BlockConfig (vkgate.Error naming the file and key).");
  m.def("parse_config_json",
        [](arg::Str json_text, arg::Str source) {
          return parse_config_json(str_arg(json_text, "json_text"), str_arg(source, "source"));
        },
        py::arg("json_text"), py::arg("source") = "config.json",
        "config.json text as a BlockConfig; `source` starts every error message.");
  m.def("expected_weights",
        [](arg::BlockConfig config) {
          return spec_dict(expected_weights(config_arg<BlockConfig>(config, "config", "BlockConfig")));
        },
        py::arg("config"),
        "{name: shape} of every tensor the block needs (bare names, PyTorch [out, in] layout), in order.");
}

void bind_gla_config(py::module_& m) {
  py::class_<GlaConfig> cls(m, "GlaConfig",
                            "One gated linear attention layer (include/vkgate/gla_config.hpp: fla's keys).");
  Fields<GlaConfig> f{cls, "GlaConfig"};
  f.field("hidden_size", &GlaConfig::hidden_size, "D")
      .field("num_heads", &GlaConfig::num_heads, "H")
      .field("num_kv_heads", &GlaConfig::num_kv_heads, "KV heads")
      .field("expand_k", &GlaConfig::expand_k, "d_k = int(D * expand_k) / H")
      .field("expand_v", &GlaConfig::expand_v, "d_v = int(D * expand_v) / H")
      .enum_field("feature_map", &GlaConfig::feature_map,
                  kFeatureMaps,
                  "phi on q and k: 'none', 'relu', 'elu_plus_one'")
      .field("use_output_gate", &GlaConfig::use_output_gate, "times swish(g) after the output norm")
      .field("gate_logit_normalizer", &GlaConfig::gate_logit_normalizer, "log a = logsigmoid(gk) / normalizer")
      .field("clamp_min", &GlaConfig::clamp_min, "lower bound of log a, or None")
      .field("norm_eps", &GlaConfig::norm_eps, "epsilon of the norms")
      .enum_field("key_coupling", &GlaConfig::key_coupling, kKeyCouplings,
                  "'none' (fla) or 'convex' ((1 - a) * phi(k))")
      .field("gla_scale", &GlaConfig::gla_scale, "output scale, or None for d_k^-0.5");
  f.finish();
  cls.def("validate", &GlaConfig::validate)
      .def_property_readonly("head_k_dim", &GlaConfig::head_k_dim)
      .def_property_readonly("head_v_dim", &GlaConfig::head_v_dim)
      .def_property_readonly("scale", &GlaConfig::scale);
  m.def("load_gla_config", [](arg::Path path) { return load_gla_config(fspath(path, "path")); }, py::arg("path"), "A GLA layer's or model's config.json as a GlaConfig.");
  m.def(
      "parse_gla_config_json",
      [](arg::Str json_text, arg::Str source) {
        return parse_gla_config_json(str_arg(json_text, "json_text"), str_arg(source, "source"));
      },
      py::arg("json_text"), py::arg("source") = "config.json");
  m.def(
      "gla_expected_weights",
      [](arg::GlaConfig config, arg::Int low_rank_dim, arg::Str output_norm, arg::Bool attn_norm) {
        const GlaConfig c = config_arg<GlaConfig>(config, "config", "GlaConfig");
        GlaForms forms{int(integer_arg(low_rank_dim, "low_rank_dim", 0, INT_MAX)), str_arg(output_norm, "output_norm"),
                       bool_arg(attn_norm, "attn_norm")};
        return spec_dict(gla_expected_weights(c, forms));
      },
      py::arg("config"), py::arg("low_rank_dim") = 0, py::arg("output_norm") = "", py::arg("attn_norm") = false,
      "{name: shape} of a GLA layer's tensors in the given forms: low_rank_dim r > 0 for the\n"
      "gk_proj.0/gk_proj.1 pair (0: one gk_proj), output_norm 'g_norm_swish_gate.weight',\n"
      "'g_norm.weight' or '' (none), attn_norm for attn_norm.weight on the input.");
}

void bind_gdn_config(py::module_& m) {
  py::class_<GdnConfig> cls(m, "GdnConfig",
                            "One Gated DeltaNet layer (include/vkgate/gdn_config.hpp: Hugging Face's linear_* keys).");
  Fields<GdnConfig> f{cls, "GdnConfig"};
  f.field("hidden_size", &GdnConfig::hidden_size, "D")
      .field("num_key_heads", &GdnConfig::num_key_heads, "nk (linear_num_key_heads)")
      .field("num_value_heads", &GdnConfig::num_value_heads, "nv (linear_num_value_heads), a multiple of nk")
      .field("key_head_dim", &GdnConfig::key_head_dim, "dk (linear_key_head_dim)")
      .field("value_head_dim", &GdnConfig::value_head_dim, "dv (linear_value_head_dim)")
      .field("conv_kernel", &GdnConfig::conv_kernel, "K (linear_conv_kernel_dim)")
      .field("rms_norm_eps", &GdnConfig::rms_norm_eps, "epsilon of the output norm")
      .field("separate_projections", &GdnConfig::separate_projections,
             "Qwen3.5's in_proj_qkv/z/b/a instead of in_proj_qkvz and in_proj_ba")
      .field("out_proj_tiled", &GdnConfig::out_proj_tiled,
             "out_proj's columns hold the value heads in llama.cpp's tiled order (a Qwen3.5 GGUF)");
  f.finish();
  cls.def("validate", &GdnConfig::validate)
      .def_static("qwen3_next", &GdnConfig::qwen3_next, "Qwen3-Next-80B-A3B's layer: hidden 2048, nk 16, nv 32, dk = dv = 128, K 4.")
      .def_property_readonly("group_size", &GdnConfig::group_size)
      .def_property_readonly("key_dim", &GdnConfig::key_dim)
      .def_property_readonly("value_dim", &GdnConfig::value_dim)
      .def_property_readonly("conv_channels", &GdnConfig::conv_channels);
  m.def("load_gdn_config", [](arg::Path path) { return load_gdn_config(fspath(path, "path")); }, py::arg("path"),
        "A Gated DeltaNet layer's config.json (\"mixer\": \"gated_deltanet\") as a GdnConfig.");
  m.def(
      "parse_gdn_config_json",
      [](arg::Str json_text, arg::Str source) {
        return parse_gdn_config_json(str_arg(json_text, "json_text"), str_arg(source, "source"));
      },
      py::arg("json_text"), py::arg("source") = "config.json");
  m.def("gdn_expected_weights",
        [](arg::GdnConfig config) {
          return spec_dict(gdn_expected_weights(config_arg<GdnConfig>(config, "config", "GdnConfig")));
        },
        py::arg("config"), "{name: shape} of a Gated DeltaNet layer's tensors (bare names), in order.");
}

void bind_moe_config(py::module_& m) {
  py::class_<MoeConfig> cls(m, "MoeConfig",
                            "The sparse mixture-of-experts MLP of qwen3_next and qwen3_moe (include/vkgate/model_config.hpp).");
  Fields<MoeConfig> f{cls, "MoeConfig"};
  f.field("num_experts", &MoeConfig::num_experts, "E (0: every layer dense)")
      .field("num_experts_per_tok", &MoeConfig::num_experts_per_tok, "k, the experts each token is routed to")
      .field("moe_intermediate_size", &MoeConfig::moe_intermediate_size, "each expert's SwiGLU width")
      .field("shared_expert_intermediate_size", &MoeConfig::shared_expert_intermediate_size,
             "the shared expert's width (0: none)")
      .field("norm_topk_prob", &MoeConfig::norm_topk_prob, "renormalise the k weights to sum 1")
      .field("decoder_sparse_step", &MoeConfig::decoder_sparse_step, "layer i is sparse when (i + 1) % step == 0")
      .field("mlp_only_layers", &MoeConfig::mlp_only_layers, "layers kept dense");
  f.finish();
  cls.def("sparse", [](const MoeConfig& c, arg::Int layer) {
            return c.sparse(int(integer_arg(layer, "layer", 0, INT_MAX, ErrorCode::invalid_argument)));
          },
          py::arg("layer"), "Whether layer `layer` has the sparse MLP.");
}

void bind_model_config(py::module_& m) {
  py::class_<ModelConfig> cls(m, "ModelConfig",
                              "A whole decoder-only model: qwen3, llama, gla, qwen3_next, qwen3_moe, qwen3_5_text or qwen3_5_moe_text "
                              "(include/vkgate/model_config.hpp).");
  Fields<ModelConfig> f{cls, "ModelConfig"};
  f.field("model_type", &ModelConfig::model_type, "'qwen3', 'llama', 'gla', 'qwen3_next', 'qwen3_moe', 'qwen3_5_text' or 'qwen3_5_moe_text'")
      .field("attention", &ModelConfig::attention, "every layer's attention block (BlockConfig)")
      .field("gla", &ModelConfig::gla, "every layer's GLA mixer (GlaConfig) for a gla model, else None")
      .field("linear_attention", &ModelConfig::linear_attention,
             "qwen3_next: the Gated DeltaNet (GdnConfig) of every layer that is not full attention, else None")
      .field("moe", &ModelConfig::moe, "the sparse layers' mixture of experts (MoeConfig; num_experts 0: none)")
      .field("num_hidden_layers", &ModelConfig::num_hidden_layers, "L")
      .field("intermediate_size", &ModelConfig::intermediate_size, "I")
      .field("vocab_size", &ModelConfig::vocab_size, "V")
      .enum_field("hidden_act", &ModelConfig::hidden_act,
                  kActivations,
                  "'silu', 'gelu', 'gelu_pytorch_tanh' or 'sigmoid'")
      .field("mlp_bias", &ModelConfig::mlp_bias, "the MLP's projections carry .bias")
      .field("tie_word_embeddings", &ModelConfig::tie_word_embeddings, "lm_head reuses the embedding")
      .field("eos_token_ids", &ModelConfig::eos_token_ids, "generation stops after any of these");
  f.finish();
  cls.def("validate", &ModelConfig::validate)
      .def_property_readonly("hidden_size", &ModelConfig::hidden_size)
      .def("moe_layers", &ModelConfig::moe_layers, "The layers with the sparse MLP.");
  m.def("load_model_config", [](arg::Path dir) { return load_model_config(fspath(dir, "dir")); }, py::arg("dir"),
        "DIR/config.json (and generation_config.json) as a ModelConfig.");
  m.def(
      "parse_model_config_json",
      [](arg::Str json_text, arg::Str source) {
        return parse_model_config_json(str_arg(json_text, "json_text"), str_arg(source, "source"));
      },
      py::arg("json_text"), py::arg("source") = "config.json");
  m.def("expected_model_weights",
        [](arg::ModelConfig config) {
          return spec_dict(expected_model_weights(config_arg<ModelConfig>(config, "config", "ModelConfig")));
        },
        py::arg("config"), "{full Hugging Face name: shape} of every tensor of the model, in order.");
}

}  // namespace

void bind_config(py::module_& m) {
  bind_rope_scaling(m);
  bind_block_config(m);
  bind_gla_config(m);
  bind_gdn_config(m);
  bind_moe_config(m);
  bind_model_config(m);
}

}  // namespace vkgate::py_bind
