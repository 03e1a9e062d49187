// vkgate.reference: the CPU oracle (double precision) for the same calls.
#include "common.hpp"
#include "vkgate/reference.hpp"
#include "vkgate/reference_gdn.hpp"
#include "vkgate/reference_gla.hpp"
#include "vkgate/reference_model.hpp"

namespace vkgate::py_bind {

namespace {

using Doubles = std::vector<double>;

py::array_t<double> doubles(Doubles&& v, const std::vector<int64_t>& shape) {
  // A field the oracle leaves empty (no gate, no cache) comes back as an empty array.
  if (v.empty()) return to_numpy(std::move(v), {0});
  return to_numpy(std::move(v), shape);
}

// A fixed-rank float32 argument and its dims.
FloatArg dims(const py::handle& obj, const char* what, int ndim) { return float_arg(obj, what, ndim); }

// The `weights` dict of an oracle call.
py::dict weights_dict(const py::handle& obj) { return dict_arg(obj, "weights", "a dict {name: numpy array}"); }

// Any real array as float64 (the oracle's own values): None, text or a dict refused naming `what`.
py::array_t<double, py::array::c_style | py::array::forcecast> double_arg(const py::handle& obj, const char* what) {
  using Doubles64 = py::array_t<double, py::array::c_style | py::array::forcecast>;
  Doubles64 a = py::reinterpret_steal<Doubles64>(py::handle());  // null (a default array_t is an empty one)
  const bool not_numbers = obj.is_none() || PyUnicode_Check(obj.ptr()) || PyBytes_Check(obj.ptr()) ||
                           PyDict_Check(obj.ptr()) || PyBool_Check(obj.ptr());
  if (!not_numbers) {
    try {
      a = Doubles64::ensure(obj);
    } catch (py::error_already_set& e) {
      if (!e.matches(PyExc_Exception)) throw;
    }
    if (!a) PyErr_Clear();
  }
  if (!a) fail(ErrorCode::invalid_argument, std::string(what) + ": expected a float array, got " + describe(obj));
  return a;
}

void bind_ops(py::module_& r) {
  r.def(
      "linear",
      [](arg::Floats x, arg::Floats w, arg::OptionalFloats b) {
        FloatArg X = dims(x, "x", 2), W = dims(w, "w", 2), Bv = optional_float_arg(b, "b", 1);
        const int64_t M = X.shape[0], K = X.shape[1], N = W.shape[0];
        expect_shape(W.shape, {N, K}, "w");
        if (!b.is_none()) expect_shape(Bv.shape, {N}, "b");
        Doubles y;
        {
          py::gil_scoped_release nogil;
          y = reference::linear(X.data, W.data, Bv.data, M, N, K);
        }
        return doubles(std::move(y), {M, N});
      },
      py::arg("x"), py::arg("w"), py::arg("b") = py::none(), "x [m, k] @ w[n, k]^T + b[n] in double: [m, n].");
  r.def(
      "rms_norm",
      [](arg::Floats x, arg::Floats w, arg::Float eps, arg::Str kind) {
        FloatArg X = dims(x, "x", 2), W = dims(w, "w", 1);
        expect_shape(W.shape, {X.shape[1]}, "w");
        const NormKind k = enum_arg(kind, kNormKinds, "kind");
        const double e = float_value_arg(eps, "eps");
        return doubles(reference::rms_norm(X.data, W.data, X.shape[0], X.shape[1], e, k), X.shape);
      },
      py::arg("x"), py::arg("w"), py::arg("eps") = 1e-6, py::arg("kind") = "plain",
      "Each row of x [rows, dim] / sqrt(mean(x^2) + eps) * w ('plain') or * (1 + w) ('zero_centered').");
  r.def(
      "rope",
      [](arg::Floats x, arg::Int rotary_dim_arg, arg::Float theta, arg::Int pos0_arg, arg::Str style) {
        FloatArg X = dims(x, "x", 4);
        const int64_t rotary_dim = integer_arg(rotary_dim_arg, "rotary_dim", 0, X.shape[3]);
        const int64_t pos0 = integer_arg(pos0_arg, "pos0", 0, INT32_MAX);
        const RopeStyle s = enum_arg(style, kRopeStyles, "style");
        return doubles(reference::rope(X.data, X.shape[0], X.shape[1], X.shape[2], X.shape[3], rotary_dim,
                                       float_value_arg(theta, "theta"), pos0, s),
                       X.shape);
      },
      py::arg("x"), py::arg("rotary_dim"), py::arg("theta") = 10000.0, py::arg("pos0") = 0,
      py::arg("style") = "rotate_half", "RoPE on x [batch, tokens, heads, head_dim]; token t at position pos0 + t.");
  r.def(
      "rope_frequencies",
      [](arg::BlockConfig config, arg::Int seq_len) {
        const BlockConfig cfg = config_arg<BlockConfig>(config, "config", "BlockConfig");
        reference::RopeFrequencies f =
            reference::rope_frequencies(cfg, integer_arg(seq_len, "seq_len", 1, INT_MAX));
        const int64_t n = int64_t(f.inv_freq.size());
        return py::make_tuple(doubles(std::move(f.inv_freq), {n}), f.attention_factor);
      },
      py::arg("config"), py::arg("seq_len"),
      "(inv_freq [rotary_dim/2], attention_factor) of config.rope_scaling as transformers computes them,\n"
      "for a step whose last position is seq_len - 1 (dynamic NTK depends on it).");
  r.def(
      "softmax",
      [](arg::Floats scores, arg::Float scale_arg, arg::Bool causal_arg, arg::OptionalFloats mask) {
        FloatArg S = dims(scores, "scores", 4), Mk = optional_float_arg(mask, "mask", 4);
        const double scale = float_value_arg(scale_arg, "scale");
        const bool causal = bool_arg(causal_arg, "causal");
        const int64_t B = S.shape[0], H = S.shape[1], T = S.shape[2], K = S.shape[3];
        if (!mask.is_none()) expect_shape(Mk.shape, {B, 1, T, K}, "mask");
        return doubles(reference::softmax(S.data, B, H, T, K, scale, causal, Mk.data), S.shape);
      },
      py::arg("scores"), py::arg("scale") = 1.0, py::arg("causal") = false, py::arg("mask") = py::none(),
      "Row softmax of scale * scores [batch, heads, tokens, keys] (+ additive mask [batch, 1, tokens, keys]).");
  r.def(
      "attention",
      [](arg::Floats q, arg::Floats k, arg::Floats v, arg::Float scale_arg, arg::Bool causal_arg,
         arg::OptionalFloats mask, arg::Str mapping) {
        FloatArg Q = dims(q, "q", 4), K = dims(k, "k", 4), V = dims(v, "v", 4), Mk = optional_float_arg(mask, "mask", 4);
        const double scale = float_value_arg(scale_arg, "scale");
        const bool causal = bool_arg(causal_arg, "causal");
        const int64_t B = Q.shape[0], H = Q.shape[1], T = Q.shape[2], Dh = Q.shape[3], KV = K.shape[1], S = K.shape[2];
        expect_shape(K.shape, {B, KV, S, Dh}, "k");
        expect_shape(V.shape, {B, KV, S, Dh}, "v");
        if (!mask.is_none()) expect_shape(Mk.shape, {B, 1, T, S}, "mask");
        const GqaMapping g = enum_arg(mapping, kGqaMappings, "mapping");
        Doubles y;
        {
          py::gil_scoped_release nogil;
          y = reference::attention(Q.data, K.data, V.data, B, H, KV, T, S, Dh, scale, causal, Mk.data, g);
        }
        return doubles(std::move(y), {B, T, H, Dh});
      },
      py::arg("q"), py::arg("k"), py::arg("v"), py::arg("scale"), py::arg("causal") = true,
      py::arg("mask") = py::none(), py::arg("mapping") = "grouped",
      "SDPA with GQA: q [B, H, T, Dh], k and v [B, KV, S, Dh] (the last T keys are the new tokens) -> [B, T, H, Dh].");
  r.def(
      "gate",
      [](arg::Floats y, arg::Floats g, arg::Int heads_arg, arg::Int gate_width_arg, arg::Str activation,
         arg::Str combine) {
        FloatArg Y = dims(y, "y", 2), G = dims(g, "g", 2);
        const int64_t rows = Y.shape[0];
        const int64_t heads = integer_arg(heads_arg, "heads", 1, INT32_MAX);
        const int64_t gate_width = integer_arg(gate_width_arg, "gate_width", 1, INT32_MAX);
        if (Y.shape[1] % heads) fail(ErrorCode::invalid_argument, "heads: must divide y's width");
        const int64_t Dh = Y.shape[1] / heads;
        expect_shape(G.shape, {rows, heads * gate_width}, "g");
        return doubles(reference::gate(Y.data, G.data, rows, heads, Dh, gate_width,
                                       enum_arg(activation, kGateActivations, "activation"),
                                       enum_arg(combine, kGateCombines, "combine")),
                       Y.shape);
      },
      py::arg("y"), py::arg("g"), py::arg("heads"), py::arg("gate_width"), py::arg("activation") = "sigmoid",
      py::arg("combine") = "multiply",
      "y [rows, heads*Dh] combined with act(g), g [rows, heads*gate_width] (gate_width 1 or Dh).");
  r.def(
      "compare",
      [](arg::Floats got, arg::Floats want) {
        FloatArg G = float_arg(got, "got");
        const py::array_t<double, py::array::c_style | py::array::forcecast> W = double_arg(want, "want");
        if (size_t(W.size()) != G.data.size())
          fail(ErrorCode::shape_mismatch, "got, want: " + std::to_string(G.data.size()) + " and " +
                                              std::to_string(W.size()) + " elements");
        const reference::Diff d = reference::compare(G.data, std::span<const double>(W.data(), size_t(W.size())));
        py::dict r;
        r["nmse"] = d.nmse;
        r["max_abs"] = d.max_abs;
        r["first_bad"] = d.first_bad;
        return r;
      },
      py::arg("got"), py::arg("want"),
      "{'nmse': sum((a-b)^2)/sum(a^2), 'max_abs', 'first_bad'} of float32 `got` against the reference\n"
      "`want` (a = want); nmse is inf and first_bad the index when `got` holds a non-finite value.");
}

void bind_block_oracle(py::module_& r) {
  r.def(
      "forward",
      [](arg::BlockConfig config, arg::Weights weights, arg::Floats x, arg::OptionalFloats past_key,
         arg::OptionalFloats past_value, arg::OptionalFloats attention_mask) {
        const BlockConfig cfg = config_arg<BlockConfig>(config, "config", "BlockConfig");
        std::vector<py::array> holders;
        const WeightMap w = weight_map(weights_dict(weights), holders, "weights");
        FloatArg X = float_arg(x, "x", 3);
        if (past_key.is_none() != past_value.is_none())
          fail(ErrorCode::invalid_argument, "past_key, past_value: give both or neither");
        FloatArg pk = optional_float_arg(past_key, "past_key", 4), pv = optional_float_arg(past_value, "past_value", 4);
        FloatArg mask = optional_float_arg(attention_mask, "attention_mask", 4);
        const int64_t B = X.shape[0], T = X.shape[1], P = past_key.is_none() ? 0 : pk.shape[2];
        if (!past_key.is_none()) {
          expect_shape(pk.shape, {B, cfg.num_kv_heads, P, cfg.head_dim}, "past_key");
          expect_shape(pv.shape, {B, cfg.num_kv_heads, P, cfg.head_dim}, "past_value");
        }
        if (!attention_mask.is_none()) expect_shape(mask.shape, {B, 1, T, P + T}, "attention_mask");
        reference::Inputs in;
        in.hidden = X.data;
        in.batch = B;
        in.tokens = T;
        in.past = P;
        in.past_key = pk.data;
        in.past_value = pv.data;
        in.attention_mask = mask.data;
        reference::Result res;
        {
          py::gil_scoped_release nogil;
          res = reference::forward(cfg, w, in);
        }
        const int64_t H = cfg.num_heads, KV = cfg.num_kv_heads, Dh = cfg.head_dim;
        py::dict d;
        d["output"] = doubles(std::move(res.output), {B, T, cfg.hidden_size});
        d["q"] = doubles(std::move(res.q), {B, H, T, Dh});
        d["k"] = doubles(std::move(res.k), {B, KV, P + T, Dh});
        d["v"] = doubles(std::move(res.v), {B, KV, P + T, Dh});
        d["sdpa"] = doubles(std::move(res.sdpa), {B, T, H, Dh});
        d["gate"] = doubles(std::move(res.gate), {B, T, cfg.gate_heads(), cfg.gate_width()});
        d["gated"] = doubles(std::move(res.gated), {B, T, H * Dh});
        d["first_token_attn"] = doubles(std::move(res.first_token_attn), {H});
        return d;
      },
      py::arg("config"), py::arg("weights"), py::arg("x"), py::arg("past_key") = py::none(),
      py::arg("past_value") = py::none(), py::arg("attention_mask") = py::none(),
      "The block in double precision, with GatedAttention.forward's arguments. Returns a dict of\n"
      "float64 arrays: output [B, T, D], q, k, v (the whole cache: present_key/present_value), sdpa,\n"
      "gate (activated scores), gated, first_token_attn [H].");
}

py::dict model_result(reference::ModelResult&& res, const ModelConfig& cfg, int64_t B, int64_t T) {
  const int64_t D = cfg.hidden_size(), L = cfg.num_hidden_layers;
  py::dict d;
  d["logits"] = doubles(std::move(res.logits), {B, T, cfg.vocab_size});
  py::list hs;
  for (auto& h : res.hidden_states) hs.append(doubles(std::move(h), {B, T, D}));
  d["hidden_states"] = hs;
  d["final_norm"] = doubles(std::move(res.final_norm), {B, T, D});
  const int64_t La = int64_t(res.attention_layers.size()), Lm = int64_t(cfg.moe_layers().size());
  d["attention_layers"] = std::vector<int>(res.attention_layers);
  d["first_token_attn"] = doubles(std::move(res.first_token_attn), {La, cfg.gla ? 0 : cfg.attention.num_heads});
  d["max_activation"] = doubles(std::move(res.max_activation), {L});
  d["gate_mean"] = doubles(std::move(res.gate_mean), {int64_t(res.gate_mean.size())});
  d["expert_load"] = doubles(std::move(res.expert_load), {Lm, Lm > 0 ? cfg.moe.num_experts : 0});
  return d;
}

void bind_model_oracle(py::module_& r) {
  r.def(
      "model_forward",
      [](arg::ModelConfig config, arg::Weights weights, arg::Ids ids, const py::object& steps_arg) {
        const ModelConfig cfg = config_arg<ModelConfig>(config, "config", "ModelConfig");
        std::vector<int64_t> steps;
        if (!steps_arg.is_none()) {
          if (!py::isinstance<py::sequence>(steps_arg) || py::isinstance<py::str>(steps_arg))
            fail(ErrorCode::invalid_argument, "steps: expected a list of token counts, got " + describe(steps_arg));
          for (const py::handle& n : steps_arg) steps.push_back(integer_arg(n, "steps", 1, INT_MAX));
        }
        std::vector<py::array> holders;
        const WeightMap w = weight_map(weights_dict(weights), holders, "weights");
        IdsArg a = ids_arg(ids, "ids");
        if (a.shape.size() != 2) fail(ErrorCode::shape_mismatch, "ids: expected [batch, tokens], got " + shape_text(a.shape));
        reference::ModelInputs in{a.data, a.shape[0], a.shape[1], steps};
        reference::ModelResult res;
        {
          py::gil_scoped_release nogil;
          res = reference::model_forward(cfg, w, in);
        }
        return model_result(std::move(res), cfg, a.shape[0], a.shape[1]);
      },
      py::arg("config"), py::arg("weights"), py::arg("ids"), py::arg("steps") = py::none(),
      "The whole model in double on ids [batch, tokens] (weights by full name). Returns a dict: logits\n"
      "[B, T, V], hidden_states (L+1 arrays [B, T, D]), final_norm, attention_layers (the layers\n"
      "with softmax attention) and for them first_token_attn [L_attn, H] and gate_mean [L_attn]\n"
      "(empty without a gate), max_activation [L], expert_load [L_moe, E]. steps: the token counts of the\n"
      "extend() calls that fed the sequence (empty: one), which dynamic RoPE depends on.");
  r.def(
      "greedy_generate",
      [](arg::ModelConfig config, arg::Weights weights, arg::Ids prompt, arg::Int max_new_tokens_arg,
         arg::Bool stop_at_eos_arg) {
        const ModelConfig cfg = config_arg<ModelConfig>(config, "config", "ModelConfig");
        std::vector<py::array> holders;
        const WeightMap w = weight_map(weights_dict(weights), holders, "weights");
        IdsArg a = ids_arg(prompt, "prompt");
        const int max_new_tokens = int(integer_arg(max_new_tokens_arg, "max_new_tokens", 0, INT_MAX));
        const bool stop_at_eos = bool_arg(stop_at_eos_arg, "stop_at_eos");
        std::vector<int64_t> ids;
        {
          py::gil_scoped_release nogil;
          ids = reference::greedy_generate(cfg, w, a.data, max_new_tokens, stop_at_eos);
        }
        const int64_t n = int64_t(ids.size());
        return to_numpy(std::move(ids), {n});
      },
      py::arg("config"), py::arg("weights"), py::arg("prompt"), py::arg("max_new_tokens"),
      py::arg("stop_at_eos") = true,
      "Greedy decoding in double, recomputing the whole sequence each step (with the RoPE of a\n"
      "cached generation: the prompt as one step, then one step per token).");
  r.def(
      "mlp",
      [](arg::Floats x, arg::Str act, arg::Floats gate_w, arg::Floats up_w, arg::Floats down_w) {
        const py::array_t<double, py::array::c_style | py::array::forcecast> X = double_arg(x, "x");
        if (X.ndim() != 2)
          fail(ErrorCode::shape_mismatch, "x: expected a 2-D float array [rows, hidden], got " + describe(X));
        FloatArg G = dims(gate_w, "gate_w", 2), U = dims(up_w, "up_w", 2), Dn = dims(down_w, "down_w", 2);
        const int64_t rows = X.shape(0), D = X.shape(1), I = G.shape[0];
        Doubles y = reference::mlp(std::span<const double>(X.data(), size_t(X.size())), rows, D, I,
                                   enum_arg(act, kActivations, "act"), G.data, U.data, Dn.data);
        return doubles(std::move(y), {rows, D});
      },
      py::arg("x"), py::arg("act"), py::arg("gate_w"), py::arg("up_w"), py::arg("down_w"),
      "down(act(gate(x)) * up(x)) in double; x [rows, D], gate_w and up_w [I, D], down_w [D, I].");
}

void bind_gla_oracle(py::module_& r) {
  r.def(
      "gla_forward",
      [](arg::GlaConfig config, arg::Weights weights, arg::Floats x, arg::OptionalFloats initial_state,
         arg::Bool keep_states_arg) {
        const GlaConfig cfg = config_arg<GlaConfig>(config, "config", "GlaConfig");
        const bool keep_states = bool_arg(keep_states_arg, "keep_states");
        std::vector<py::array> holders;
        const WeightMap w = weight_map(weights_dict(weights), holders, "weights");
        FloatArg X = float_arg(x, "x", 3), S0 = optional_float_arg(initial_state, "initial_state", 4);
        const int64_t B = X.shape[0], T = X.shape[1];
        reference::GlaInputs in{X.data, int(B), int(T), S0.data, keep_states};
        reference::GlaResult res;
        {
          py::gil_scoped_release nogil;
          res = reference::gla_forward(cfg, w, in);
        }
        const int64_t H = cfg.num_heads, dk = cfg.head_k_dim(), dv = cfg.head_v_dim();
        py::dict d;
        d["output"] = doubles(std::move(res.output), {B, T, cfg.hidden_size});
        d["final_state"] = doubles(std::move(res.final_state), {B, H, dk, dv});
        d["q"] = doubles(std::move(res.q), {B, T, H, dk});
        d["k"] = doubles(std::move(res.k), {B, T, H, dk});
        d["v"] = doubles(std::move(res.v), {B, T, H, dv});
        d["log_a"] = doubles(std::move(res.log_a), {B, T, H, dk});
        d["o_core"] = doubles(std::move(res.o_core), {B, T, H, dv});
        if (keep_states) d["states"] = doubles(std::move(res.states), {B, T, H, dk, dv});
        return d;
      },
      py::arg("config"), py::arg("weights"), py::arg("x"), py::arg("initial_state") = py::none(),
      py::arg("keep_states") = false,
      "The GLA layer's recurrence in double, with GlaLayer.forward's arguments. Returns a dict of float64\n"
      "arrays: output, final_state, and the intermediates q, k, v, log_a, o_core, and with keep_states\n"
      "states [B, T, H, d_k, d_v] (S_t after every token: large for long inputs).");
}

void bind_gdn_oracle(py::module_& r) {
  r.def(
      "gdn_forward",
      [](arg::GdnConfig config, arg::Weights weights, arg::Floats x, arg::OptionalFloats conv_state,
         arg::OptionalFloats initial_state) {
        const GdnConfig cfg = config_arg<GdnConfig>(config, "config", "GdnConfig");
        std::vector<py::array> holders;
        const WeightMap w = weight_map(weights_dict(weights), holders, "weights");
        FloatArg X = float_arg(x, "x", 3), C0 = optional_float_arg(conv_state, "conv_state", 3),
                 S0 = optional_float_arg(initial_state, "initial_state", 4);
        const int64_t B = X.shape[0], T = X.shape[1];
        reference::GdnInputs in{X.data, int(B), int(T), C0.data, S0.data};
        reference::GdnResult res;
        {
          py::gil_scoped_release nogil;
          res = reference::gdn_forward(cfg, w, in);
        }
        py::dict d;
        d["output"] = doubles(std::move(res.output), {B, T, cfg.hidden_size});
        d["final_state"] = doubles(std::move(res.final_state),
                                   {B, cfg.num_value_heads, cfg.key_head_dim, cfg.value_head_dim});
        d["final_conv_state"] = doubles(std::move(res.final_conv_state), {B, cfg.conv_channels(), cfg.conv_kernel - 1});
        return d;
      },
      py::arg("config"), py::arg("weights"), py::arg("x"), py::arg("conv_state") = py::none(),
      py::arg("initial_state") = py::none(),
      "The Gated DeltaNet layer in double, with GatedDeltaNet.forward's arguments. Returns a dict of\n"
      "float64 arrays: output, final_state, final_conv_state.");
}

}  // namespace

void bind_reference(py::module_& m) {
  py::module_ r = m.def_submodule("reference",
                                  "The CPU oracle: every call in double precision, written independently of the\n"
                                  "GPU path. Slow by design; for tests and checks on tiny shapes.");
  bind_ops(r);
  bind_block_oracle(r);
  bind_model_oracle(r);
  bind_gla_oracle(r);
  bind_gdn_oracle(r);
}

}  // namespace vkgate::py_bind
