// The vkgate Python module: the C++ library's objects, numpy in and out.
#include "common.hpp"

PYBIND11_MODULE(vkgate, m) {
  using namespace vkgate::py_bind;
  m.doc() =
      "vkgate: gated attention blocks, whole models (Qwen3 with the paper's gate flags, Llama, GLA) and\n"
      "gated linear attention on any Vulkan device, numpy in and out.\n\n"
      "  ctx = vkgate.Context()\n"
      "  block = vkgate.GatedAttention(ctx, config, weights)   # weights: {'q_proj.weight': array, ...}\n"
      "  y = block.forward(x)                                   # x: float32 [batch, tokens, hidden]\n\n"
      "Every failure raises vkgate.Error with .code (vkgate.ERROR_CODES) and the message.";
  bind_errors(m);
  bind_context(m);
  bind_config(m);
  bind_block(m);
  bind_model(m);
  bind_tokenizer(m);
  bind_gla(m);
  bind_gdn(m);
  bind_reference(m);
  m.attr("__version__") = VKGATE_VERSION;
  guard_arguments(m);  // last: wraps every function bound above
}
