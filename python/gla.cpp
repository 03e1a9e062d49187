// vkgate.GlaLayer: one gated linear attention layer on the device.
#include "common.hpp"
#include "vkgate/checkpoint.hpp"
#include "vkgate/gla.hpp"

namespace vkgate::py_bind {

using PyGla = Guarded<GlaLayer>;

void bind_gla(py::module_& m) {
  py::class_<PyGla>(m, "GlaLayer",
                    "One gated linear attention layer whose weights live on the device.\n\n"
                    "GlaLayer(ctx, config, weights, precision='fp32', check_finite=True)\n\n"
                    "ctx: the vkgate.Context (kept alive by the layer).\n"
                    "config: a vkgate.GlaConfig; None reads config.json from the checkpoint directory.\n"
                    "weights: a dict {bare name: float32/float16 array} (q_proj.weight, ...; the forms are read from\n"
                    "  which tensors exist: vkgate.gla_expected_weights), or a checkpoint path of one layer.\n"
                    "precision: device storage, 'fp32', 'fp16' or 'bf16'.")
      .def(py::init([](arg::Context ctx, arg::OptionalGlaConfig config, arg::WeightsOrPath weights, arg::Str precision,
                       arg::Bool check_finite) {
             Context& c = context_arg(ctx);
             const BlockOptions opts = block_options(precision, check_finite);
             auto g = std::make_unique<PyGla>();
             g->obj = make_layer<GlaLayer, GlaConfig>(c, config.obj, weights.obj, opts,
                                                      "GlaConfig", load_gla_config, gla_layer_tensors);
             return g;
           }),
           py::arg("ctx"), py::arg("config"), py::arg("weights"), py::arg("precision") = "fp32",
           py::arg("check_finite") = true, py::keep_alive<1, 2>())
      .def(
          "forward",
          [](PyGla& self, arg::Floats x, arg::OptionalFloats initial_state) {
            Busy::Scope guard(self.busy, "this GlaLayer");
            const GlaConfig& cfg = self.obj->config();
            FloatArg h = hidden_arg(x, cfg.hidden_size);
            const int64_t B = h.shape[0], T = h.shape[1];
            const std::vector<int64_t> state_shape{B, cfg.num_heads, cfg.head_k_dim(), cfg.head_v_dim()};
            FloatArg s0 = optional_float_arg(initial_state, "initial_state", 4);
            if (!initial_state.is_none()) expect_shape(s0.shape, state_shape, "initial_state");
            GlaOutputs out;
            {
              py::gil_scoped_release nogil;
              out = self.obj->forward(h.data, int(B), int(T), s0.data);
            }
            return py::make_tuple(to_numpy(std::move(out.output), {B, T, cfg.hidden_size}),
                                  to_numpy(std::move(out.final_state), state_shape));
          },
          py::arg("x"), py::arg("initial_state") = py::none(),
          "forward(x, initial_state=None) -> (output, final_state)\n\n"
          "x: float32 [batch, tokens, hidden_size]; initial_state: float32 [batch, heads, d_k, d_v]\n"
          "(None: zeros). Returns the output [batch, tokens, hidden_size] and the final state, which\n"
          "the next call takes as its initial_state to continue the sequence.")
      .def_property_readonly("config", [](PyGla& self) { return self.obj->config(); })
      .def_property_readonly("forms",
                             [](PyGla& self) {
                               const GlaForms& f = self.obj->forms();
                               py::dict r;
                               r["low_rank_dim"] = f.low_rank_dim;
                               r["output_norm"] = f.output_norm;
                               r["attn_norm"] = f.attn_norm;
                               return r;
                             })
      .def(
          "set_poison",
          [](PyGla& self, arg::Bool on) {
            Busy::Scope guard(self.busy, "this GlaLayer");
            self.obj->set_poison(bool_arg(on, "on"));
          },
          py::arg("on"));
}

}  // namespace vkgate::py_bind
