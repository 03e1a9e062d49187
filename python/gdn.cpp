// vkgate.GatedDeltaNet: one Gated DeltaNet layer on the device.
#include "common.hpp"
#include "vkgate/checkpoint.hpp"
#include "vkgate/gdn.hpp"

namespace vkgate::py_bind {

using PyGdn = Guarded<GatedDeltaNet>;

void bind_gdn(py::module_& m) {
  py::class_<PyGdn>(m, "GatedDeltaNet",
                    "One Gated DeltaNet layer (Qwen3-Next's linear attention) whose weights live on the device.\n\n"
                    "GatedDeltaNet(ctx, config, weights, precision='fp32', check_finite=True)\n\n"
                    "ctx: the vkgate.Context (kept alive by the layer).\n"
                    "config: a vkgate.GdnConfig; None reads config.json from the checkpoint directory.\n"
                    "weights: a dict {bare name: float32/float16 array} (in_proj_qkvz.weight, ...:\n"
                    "  vkgate.gdn_expected_weights), or a checkpoint path of one layer.\n"
                    "precision: device storage, 'fp32', 'fp16' or 'bf16' (the states stay fp32).\n"
                    "VKGATE_GDN_MODE=recurrent|chunk forces the delta rule's form.")
      .def(py::init([](arg::Context ctx, arg::OptionalGdnConfig config, arg::WeightsOrPath weights, arg::Str precision,
                       arg::Bool check_finite) {
             Context& c = context_arg(ctx);
             const BlockOptions opts = block_options(precision, check_finite);
             auto g = std::make_unique<PyGdn>();
             g->obj = make_layer<GatedDeltaNet, GdnConfig>(c, config.obj, weights.obj, opts, "GdnConfig",
                                                           load_gdn_config, gdn_layer_tensors);
             return g;
           }),
           py::arg("ctx"), py::arg("config"), py::arg("weights"), py::arg("precision") = "fp32",
           py::arg("check_finite") = true, py::keep_alive<1, 2>())
      .def(
          "forward",
          [](PyGdn& self, arg::Floats x, arg::OptionalFloats conv_state, arg::OptionalFloats initial_state) {
            Busy::Scope guard(self.busy, "this GatedDeltaNet");
            const GdnConfig& cfg = self.obj->config();
            FloatArg h = hidden_arg(x, cfg.hidden_size);
            const int64_t B = h.shape[0], T = h.shape[1];
            const std::vector<int64_t> conv_shape{B, cfg.conv_channels(), cfg.conv_kernel - 1},
                state_shape{B, cfg.num_value_heads, cfg.key_head_dim, cfg.value_head_dim};
            FloatArg c0 = optional_float_arg(conv_state, "conv_state", 3);
            if (!conv_state.is_none()) expect_shape(c0.shape, conv_shape, "conv_state");
            FloatArg s0 = optional_float_arg(initial_state, "initial_state", 4);
            if (!initial_state.is_none()) expect_shape(s0.shape, state_shape, "initial_state");
            GdnOutputs out;
            {
              py::gil_scoped_release nogil;
              out = self.obj->forward(h.data, int(B), int(T), c0.data, s0.data);
            }
            return py::make_tuple(to_numpy(std::move(out.output), {B, T, cfg.hidden_size}),
                                  to_numpy(std::move(out.final_state), state_shape),
                                  to_numpy(std::move(out.final_conv_state), conv_shape));
          },
          py::arg("x"), py::arg("conv_state") = py::none(), py::arg("initial_state") = py::none(),
          "forward(x, conv_state=None, initial_state=None) -> (output, final_state, final_conv_state)\n\n"
          "x: float32 [batch, tokens, hidden_size]; conv_state: float32 [batch, conv_channels, K - 1], the\n"
          "conv's previous inputs, oldest first; initial_state: float32 [batch, nv, dk, dv] (None: zeros).\n"
          "Returns the output [batch, tokens, hidden_size] and both final states, which the next call\n"
          "takes to continue the sequence.")
      .def_property_readonly("config", [](PyGdn& self) { return self.obj->config(); })
      .def(
          "chunked",
          [](PyGdn& self, arg::Int tokens) {
            return self.obj->chunked(int(integer_arg(tokens, "tokens", 1, INT_MAX)));
          },
          py::arg("tokens"), "Whether a forward of `tokens` tokens runs the delta rule in chunks of 64.")
      .def(
          "set_poison",
          [](PyGdn& self, arg::Bool on) {
            Busy::Scope guard(self.busy, "this GatedDeltaNet");
            self.obj->set_poison(bool_arg(on, "on"));
          },
          py::arg("on"));
}

}  // namespace vkgate::py_bind
