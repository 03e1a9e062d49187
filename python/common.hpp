// Shared by the binding files: numpy conversion, the vkgate.Error
// translation, enum spellings and the one-thread-at-a-time guard.
#pragma once

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "vkgate/block.hpp"
#include "vkgate/checkpoint.hpp"
#include "vkgate/config.hpp"
#include "vkgate/context.hpp"
#include "vkgate/error.hpp"
#include "vkgate/gla_config.hpp"
#include "vkgate/model_config.hpp"
#include "vkgate/precision.hpp"
#include "vkgate/weights.hpp"

namespace vkgate::py_bind {

namespace py = pybind11;

// ---- errors (errors.cpp)

// Registers vkgate.Error and the translator that turns every vkgate::Error
// into it, carrying .code (the ErrorCode's C++ name), .vk_result and the message.
void bind_errors(py::module_& m);
[[noreturn]] void fail(ErrorCode code, const std::string& message);
const char* code_name(ErrorCode code) noexcept;

// ---- numpy in and out (convert.cpp)

// A float32 array as the library reads it: `data` views the caller's buffer
// when it is already C-contiguous float32, otherwise one converted copy held
// by `holder`. Anything but a float32 (or, where `allow_f16`, float16)
// array, or a list convertible to one, is refused naming `what`.
struct FloatArg {
  py::array holder;
  std::vector<int64_t> shape;
  std::span<const float> data;
};
FloatArg float_arg(const py::handle& obj, const char* what, int ndim = -1);
// The same, but None gives an empty FloatArg.
FloatArg optional_float_arg(const py::handle& obj, const char* what, int ndim = -1);

// Token ids: any integer array or sequence of ints, as int64 (one copy at most).
struct IdsArg {
  py::array holder;
  std::vector<int64_t> shape;
  std::span<const int64_t> data;
};
IdsArg ids_arg(const py::handle& obj, const char* what);

// A Python int that fits an int, else an Error naming `what`.
int int_arg(const py::handle& obj, const char* what);
// `obj` as a bound C++ type T, else an Error naming `what` and `type_name`.
template <class T>
T config_arg(const py::handle& obj, const char* what, const char* type_name) {
  if (!py::isinstance<T>(obj))
    fail(ErrorCode::invalid_argument, std::string(what) + ": expected a vkgate." + type_name + ", got " +
                                          py::str(py::type::handle_of(obj).attr("__name__")).cast<std::string>());
  return obj.cast<T>();
}

// Hidden states x: float32 [batch, tokens, hidden_size].
FloatArg hidden_arg(const py::handle& x, int hidden_size);

// Checks that `shape` equals `want`, naming `what` and both shapes.
void expect_shape(const std::vector<int64_t>& shape, const std::vector<int64_t>& want, const char* what);

// A dict {name: float32 or float16 array} viewed as a TensorMap (no copy for
// C-contiguous arrays); `holders` keeps converted copies alive.
TensorMap tensor_map(const py::dict& weights, std::vector<py::array>& holders, const char* what);
// The same tensors as fp32 spans (the reference takes WeightMap): float16 arrays converted once.
WeightMap weight_map(const py::dict& weights, std::vector<py::array>& holders, const char* what);

// A vector moved into a numpy array of `shape` (no copy: the array owns it).
template <class T>
py::array_t<T> to_numpy(std::vector<T>&& v, const std::vector<int64_t>& shape) {
  auto* owned = new std::vector<T>(std::move(v));
  py::capsule free_when_done(owned, [](void* p) { delete static_cast<std::vector<T>*>(p); });
  std::vector<py::ssize_t> s(shape.begin(), shape.end());
  return py::array_t<T>(s, owned->data(), free_when_done);
}

// Text the library produced as bytes: ids may end inside a UTF-8 character, and
// such bytes become U+FFFD (as Hugging Face's decode writes them) instead of a
// UnicodeDecodeError.
py::str text_of(const std::string& bytes);

// ---- enums as the strings config.json uses

inline constexpr std::array kGateKinds{GateKind::none, GateKind::headwise, GateKind::elementwise};
inline constexpr std::array kGateLayouts{GateLayout::qwen3_next, GateLayout::official_grouped, GateLayout::separate};
inline constexpr std::array kGatePositions{GatePosition::sdpa, GatePosition::value, GatePosition::key,
                                           GatePosition::query, GatePosition::dense};
inline constexpr std::array kGateCombines{GateCombine::multiply, GateCombine::add};
inline constexpr std::array kGateActivations{GateActivation::sigmoid, GateActivation::silu, GateActivation::ns_sigmoid,
                                             GateActivation::identity};
inline constexpr std::array kRopeStyles{RopeStyle::rotate_half, RopeStyle::interleaved};
inline constexpr std::array kRopeTypes{RopeType::none, RopeType::linear, RopeType::dynamic, RopeType::yarn,
                                       RopeType::llama3};
inline constexpr std::array kGqaMappings{GqaMapping::grouped, GqaMapping::tiled};
inline constexpr std::array kNormKinds{NormKind::plain, NormKind::zero_centered};
inline constexpr std::array kFeatureMaps{FeatureMap::none, FeatureMap::relu, FeatureMap::elu_plus_one};
inline constexpr std::array kKeyCouplings{KeyCoupling::none, KeyCoupling::convex};
inline constexpr std::array kActivations{Activation::silu, Activation::gelu, Activation::gelu_tanh, Activation::sigmoid};
inline constexpr std::array kPrecisions{Precision::fp32, Precision::fp16, Precision::bf16};

// The enum value spelled `s`, else an Error(code) naming `what` and the spellings allowed.
template <class E, size_t N>
E parse_enum(const std::string& s, const std::array<E, N>& values, const std::string& what,
             ErrorCode code = ErrorCode::invalid_argument) {
  std::string allowed;
  for (E v : values) {
    if (s == to_string(v)) return v;
    allowed += std::string(allowed.empty() ? "" : ", ") + "'" + to_string(v) + "'";
  }
  fail(code, what + ": expected one of " + allowed + ", got '" + s + "'");
}

inline Precision parse_precision(const std::string& s) { return parse_enum(s, kPrecisions, "precision"); }
inline BlockOptions block_options(const std::string& precision, bool check_finite) {
  BlockOptions o;
  o.precision = parse_precision(precision);
  o.check_finite = check_finite;
  return o;
}

// os.fspath(obj) of a str or path-like `obj`, else an Error naming `what`.
std::string fspath(const py::handle& obj, const char* what);
bool is_path(const py::handle& obj);
// The `weights` argument of a block or layer that is not a dict: a checkpoint path, else an Error.
std::string checkpoint_path(const py::handle& weights);

// ---- blocks and layers from a weights dict or a checkpoint

// A Layer (GatedAttention, GlaLayer) from `weights`: a dict of bare names with
// `config` (a Config), or a checkpoint path, whose directory's config.json
// (read by load_config) stands in for a None `config`; tensors(ckpt, cfg)
// views the layer's tensors. The device work runs without the GIL.
template <class Layer, class Config, class LoadConfig, class Tensors>
std::unique_ptr<Layer> make_layer(Context& ctx, const py::object& config, const py::object& weights,
                                  const BlockOptions& opts, const char* config_type, LoadConfig load_config,
                                  Tensors tensors) {
  if (py::isinstance<py::dict>(weights)) {
    if (config.is_none())
      fail(ErrorCode::invalid_argument, std::string("config: a vkgate.") + config_type + " is needed with a weights dict");
    const Config cfg = config_arg<Config>(config, "config", config_type);
    std::vector<py::array> holders;
    const TensorMap map = tensor_map(weights.cast<py::dict>(), holders, "weights");
    py::gil_scoped_release nogil;
    return std::make_unique<Layer>(ctx, cfg, map, opts);
  }
  const std::string path = checkpoint_path(weights);
  std::optional<Config> cfg;
  if (!config.is_none()) cfg = config_arg<Config>(config, "config", config_type);
  py::gil_scoped_release nogil;
  Checkpoint ckpt(path);
  if (!cfg) {
    if (!ckpt.is_directory())
      fail(ErrorCode::invalid_argument, "config: needed with a .safetensors file (" + path + " has no config.json beside it)");
    cfg = load_config(ckpt.config_path());
  }
  const TensorMap map = tensors(ckpt, *cfg);
  return std::make_unique<Layer>(ctx, *cfg, map, opts);
}

// [(stage, microseconds)] of a forward's dispatches.
py::list timings_list(const std::vector<StageTime>& timings);

// ---- objects the library allows on one thread at a time

// Held by each binding of a single-threaded C++ object; enter() refuses a
// second concurrent caller (whose call would otherwise race on the object
// while the GIL is released) instead of letting it corrupt the object.
class Busy {
 public:
  class Scope {
   public:
    Scope(Busy& b, const char* what);
    ~Scope() { busy_.flag_.store(false); }
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    Busy& busy_;
  };

 private:
  std::atomic<bool> flag_{false};
};

// A bound single-threaded object (GatedAttention, GlaLayer) and its guard.
template <class T>
struct Guarded {
  std::unique_ptr<T> obj;
  Busy busy;
};

// ---- the binding files

void bind_context(py::module_& m);
void bind_config(py::module_& m);
void bind_block(py::module_& m);
void bind_model(py::module_& m);
void bind_tokenizer(py::module_& m);
void bind_gla(py::module_& m);
void bind_reference(py::module_& m);

}  // namespace vkgate::py_bind
