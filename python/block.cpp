// vkgate.GatedAttention: one block on the device, numpy in and out.
#include "common.hpp"
#include "vkgate/block.hpp"
#include "vkgate/checkpoint.hpp"

namespace vkgate::py_bind {

namespace {

using PyBlock = Guarded<GatedAttention>;

py::dict stats_dict(const BlockStats& s) {
  py::dict r;
  r["gate_mean"] = s.gate_mean;
  r["gate_frac_below_0_1"] = s.gate_frac_below_0_1;
  std::vector<double> ft = s.first_token_attn;
  r["first_token_attn"] = to_numpy(std::move(ft), {int64_t(s.first_token_attn.size())});
  return r;
}

}  // namespace

void bind_block(py::module_& m) {
  py::class_<PyBlock>(m, "GatedAttention",
                      "One gated-attention block whose weights live on the device.\n\n"
                      "GatedAttention(ctx, config, weights, layer=None, precision='fp32', check_finite=True)\n\n"
                      "ctx: the vkgate.Context to run on (kept alive by the block).\n"
                      "config: a vkgate.BlockConfig; None reads config.json from the checkpoint directory.\n"
                      "weights: a dict {bare name: float32 or float16 array} ('q_proj.weight', ...,\n"
                      "  vkgate.expected_weights(config) lists them, PyTorch [out, in] layout), or the path of\n"
                      "  a checkpoint (.safetensors file or model directory).\n"
                      "layer: with a checkpoint, the model layer whose attention to take\n"
                      "  (model.layers.{layer}.self_attn.*); None reads the bare names.\n"
                      "precision: device storage, 'fp32', 'fp16' or 'bf16' (arithmetic is fp32).\n"
                      "check_finite: refuse NaN/Inf in weights, inputs and outputs (vkgate.Error 'non_finite').\n\n"
                      "A missing or misshapen weight raises vkgate.Error here, naming it. One block is used\n"
                      "by one thread at a time; give each thread its own.")
      .def(py::init([](arg::Context ctx, arg::OptionalBlockConfig config, arg::WeightsOrPath weights,
                       arg::OptionalInt layer, arg::Str precision, arg::Bool check_finite) {
             Context& c = context_arg(ctx);
             const BlockOptions opts = block_options(precision, check_finite);
             auto b = std::make_unique<PyBlock>();
             const int layer_index = layer.is_none() ? -1 : int(integer_arg(layer, "layer", 0, INT_MAX));
             if (py::isinstance<py::dict>(weights.obj) && !layer.is_none())
               fail(ErrorCode::invalid_argument, "layer: only for a checkpoint (a weights dict holds one block's tensors)");
             b->obj = make_layer<GatedAttention, BlockConfig>(
                 c, config.obj, weights.obj, opts, "BlockConfig", load_config,
                 [layer_index](const Checkpoint& ckpt, const BlockConfig& cfg) { return block_tensors(ckpt, cfg, layer_index); });
             return b;
           }),
           py::arg("ctx"), py::arg("config"), py::arg("weights"), py::arg("layer") = py::none(),
           py::arg("precision") = "fp32", py::arg("check_finite") = true, py::keep_alive<1, 2>())
      .def(
          "forward",
          [](PyBlock& self, arg::Floats x, arg::OptionalFloats past_key, arg::OptionalFloats past_value,
             arg::OptionalFloats attention_mask, arg::Bool stats_arg, arg::Bool return_cache_arg,
             arg::Bool use_device_cache_arg) -> py::object {
            Busy::Scope guard(self.busy, "this GatedAttention");
            const bool stats = bool_arg(stats_arg, "stats"), return_cache = bool_arg(return_cache_arg, "return_cache"),
                       use_device_cache = bool_arg(use_device_cache_arg, "use_device_cache");
            const BlockConfig& cfg = self.obj->config();
            FloatArg h = hidden_arg(x, cfg.hidden_size);
            const int64_t B = h.shape[0], T = h.shape[1];
            if (past_key.is_none() != past_value.is_none())
              fail(ErrorCode::invalid_argument, "past_key, past_value: give both or neither");
            FloatArg pk = optional_float_arg(past_key, "past_key", 4);
            FloatArg pv = optional_float_arg(past_value, "past_value", 4);
            int64_t P = 0;
            if (!past_key.is_none()) {
              if (use_device_cache)
                fail(ErrorCode::invalid_argument, "past_key: not with use_device_cache (the block's own cache is read)");
              P = pk.shape[2];
              expect_shape(pk.shape, {B, cfg.num_kv_heads, P, cfg.head_dim}, "past_key");
              expect_shape(pv.shape, {B, cfg.num_kv_heads, P, cfg.head_dim}, "past_value");
            }
            FloatArg mask = optional_float_arg(attention_mask, "attention_mask", 4);
            const int64_t keys = P + T + (use_device_cache ? self.obj->cache_length() : 0);
            if (!attention_mask.is_none()) expect_shape(mask.shape, {B, 1, T, keys}, "attention_mask");
            if (B > INT32_MAX || T > INT32_MAX || P > INT32_MAX)
              fail(ErrorCode::invalid_argument, "x: batch, tokens and past must fit in 32 bits");
            ForwardInputs in;
            in.hidden = h.data;
            in.batch = int(B);
            in.tokens = int(T);
            in.past = int(P);
            in.past_key = pk.data;
            in.past_value = pv.data;
            in.attention_mask = mask.data;
            in.want_cache = return_cache;
            in.want_stats = stats;
            in.use_device_cache = use_device_cache;
            ForwardOutputs out;
            {
              py::gil_scoped_release nogil;
              out = self.obj->run(in);
            }
            py::object y = to_numpy(std::move(out.output), {B, T, cfg.hidden_size});
            if (!return_cache && !stats) return y;
            py::list r;
            r.append(y);
            if (return_cache) {
              const int64_t S = int64_t(out.present_key.size()) / std::max<int64_t>(1, B * cfg.kv_dim());
              r.append(to_numpy(std::move(out.present_key), {B, cfg.num_kv_heads, S, cfg.head_dim}));
              r.append(to_numpy(std::move(out.present_value), {B, cfg.num_kv_heads, S, cfg.head_dim}));
            }
            if (stats) r.append(out.stats ? py::object(stats_dict(*out.stats)) : py::object(py::none()));
            return py::tuple(r);
          },
          py::arg("x"), py::arg("past_key") = py::none(), py::arg("past_value") = py::none(),
          py::arg("attention_mask") = py::none(), py::arg("stats") = false, py::arg("return_cache") = false,
          py::arg("use_device_cache") = false,
          "forward(x, past_key=None, past_value=None, attention_mask=None, stats=False,\n"
          "        return_cache=False, use_device_cache=False)\n\n"
          "x: float32 [batch, tokens, hidden_size] (other layouts are copied once; other dtypes refused).\n"
          "past_key, past_value: a KV cache of P earlier positions, float32 [batch, KV, P, head_dim]\n"
          "  (keys after k_norm and RoPE, values raw); the new tokens sit at positions P..P+tokens-1.\n"
          "attention_mask: additive float32 [batch, 1, tokens, keys] (keys: every position attended to).\n"
          "stats: also return the paper's statistics, a dict: gate_mean, gate_frac_below_0_1,\n"
          "  first_token_attn [H].\n"
          "return_cache: also return present_key, present_value [batch, KV, P+tokens, head_dim].\n"
          "use_device_cache: attend to the block's device-resident cache (reserve_cache/load_cache)\n"
          "  and append the new tokens to it.\n\n"
          "Returns the output [batch, tokens, hidden_size]; with return_cache or stats a tuple\n"
          "(output[, present_key, present_value][, stats]). The GIL is released while the device runs.")
      .def(
          "reserve_cache",
          [](PyBlock& self, arg::Int batch, arg::Int capacity) {
            Busy::Scope guard(self.busy, "this GatedAttention");
            const int b = int(integer_arg(batch, "batch", 1, INT_MAX)), c = int(integer_arg(capacity, "capacity", 1, INT_MAX));
            py::gil_scoped_release nogil;
            self.obj->reserve_cache(b, c);
          },
          py::arg("batch"), py::arg("capacity"),
          "An empty device-resident KV cache with room for `capacity` positions per batch row.")
      .def(
          "load_cache",
          [](PyBlock& self, arg::Floats key, arg::Floats value, arg::OptionalInt capacity) {
            Busy::Scope guard(self.busy, "this GatedAttention");
            const BlockConfig& cfg = self.obj->config();
            FloatArg k = float_arg(key, "key", 4), v = float_arg(value, "value", 4);
            const int64_t B = k.shape[0], L = k.shape[2];
            expect_shape(k.shape, {B, cfg.num_kv_heads, L, cfg.head_dim}, "key");
            expect_shape(v.shape, {B, cfg.num_kv_heads, L, cfg.head_dim}, "value");
            const int cap = capacity.is_none() ? int(L) : int(integer_arg(capacity, "capacity", 0, INT_MAX));
            py::gil_scoped_release nogil;
            self.obj->load_cache(k.data, v.data, int(B), int(L), cap);
          },
          py::arg("key"), py::arg("value"), py::arg("capacity") = py::none(),
          "Fills the device-resident cache from key, value [batch, KV, length, head_dim] (keys after\n"
          "k_norm and RoPE), with room for `capacity` positions (None: length).")
      .def_property_readonly(
          "cache_length",
          [](PyBlock& self) {
            Busy::Scope guard(self.busy, "this GatedAttention");
            return self.obj->cache_length();
          },
          "Positions held by the device-resident cache.")
      .def(
          "truncate_cache",
          [](PyBlock& self, arg::Int length) {
            Busy::Scope guard(self.busy, "this GatedAttention");
            self.obj->truncate_cache(int_arg(length, "length"));
          },
          py::arg("length"), "Forgets the cached positions from `length` on.")
      .def(
          "last_timings",
          [](PyBlock& self) {
            Busy::Scope guard(self.busy, "this GatedAttention");
            return timings_list(self.obj->last_timings());
          },
          "[(stage, microseconds)] of the last forward's dispatches (empty without GPU timestamps:\n"
          "Context(timestamps=True), or VKGATE_TIMESTAMPS=1 when the Context was made).")
      .def(
          "set_poison",
          [](PyBlock& self, arg::Bool on) {
            Busy::Scope guard(self.busy, "this GatedAttention");
            self.obj->set_poison(bool_arg(on, "on"));
          },
          py::arg("on"), "Fill every intermediate with NaN before each forward (tests).")
      .def_property_readonly("config", [](PyBlock& self) { return self.obj->config(); }, "A copy of the BlockConfig.")
      .def_property_readonly("precision", [](PyBlock& self) { return std::string(to_string(self.obj->precision())); })
      .def_property_readonly("recorded_shapes", [](PyBlock& self) { return self.obj->recorded_shapes(); })
      .def_property_readonly("recordings", [](PyBlock& self) { return self.obj->recordings(); });
}

}  // namespace vkgate::py_bind
