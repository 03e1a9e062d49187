// Shared by the binding files: numpy conversion, the vkgate.Error
// translation, enum spellings and the one-thread-at-a-time guard.
#pragma once

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <array>
#include <atomic>
#include <chrono>
#include <climits>
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

// ---- user arguments (arguments.cpp)
//
// Every argument a user passes reaches the binding as the object given (Arg<Kind>
// below, or py::object), and is converted by one of these functions, which
// refuses anything else with a vkgate.Error naming the argument: never
// pybind11's overload TypeError, which lists every argument's repr (a weights
// dict's arrays included). Values quoted in messages are cut short (describe).

// A type name and a short repr of `obj` for a message: "None", "str 'abc'",
// "int 1099511627776", "numpy.ndarray float64 [2, 3]", "dict".
std::string describe(const py::handle& obj);

// An integer (a Python int or anything with __index__, such as numpy.int64;
// not a bool) within [lo, hi], else an Error(code) naming `what`.
int64_t integer_arg(const py::handle& obj, const char* what, int64_t lo, int64_t hi,
                    ErrorCode code = ErrorCode::invalid_argument);
uint64_t uint64_arg(const py::handle& obj, const char* what, ErrorCode code = ErrorCode::invalid_argument);
// A C++ int.
int int_arg(const py::handle& obj, const char* what, ErrorCode code = ErrorCode::invalid_argument);
// True or False (or numpy.bool_).
bool bool_arg(const py::handle& obj, const char* what, ErrorCode code = ErrorCode::invalid_argument);
// A real number (int, float or a numpy scalar; not a bool or a str).
double float_value_arg(const py::handle& obj, const char* what, ErrorCode code = ErrorCode::invalid_argument);
// A str as UTF-8; a lone surrogate (which UTF-8 cannot encode) is refused naming its index.
std::string str_arg(const py::handle& obj, const char* what, ErrorCode code = ErrorCode::invalid_argument);
// A dict, else an Error naming `what` and `expected` ("a dict {name: numpy array}").
py::dict dict_arg(const py::handle& obj, const char* what, const char* expected);

// `obj` as the bound C++ type T (a reference to the object held by Python),
// else an Error naming `what` and `type_name` ("Context").
template <class T>
T& instance_arg(const py::handle& obj, const char* what, const char* type_name) {
  if (!py::isinstance<T>(obj))
    fail(ErrorCode::invalid_argument, std::string(what) + ": expected a vkgate." + type_name + ", got " + describe(obj));
  return obj.cast<T&>();
}
// A copy of a bound config (BlockConfig, GlaConfig, GdnConfig, ModelConfig).
template <class T>
T config_arg(const py::handle& obj, const char* what, const char* type_name) {
  return instance_arg<T>(obj, what, type_name);
}

// The argument as given, for a function to convert with the functions above;
// Kind::name is the type help() shows ("int"). Its caster accepts any object,
// so a wrong one reaches the conversion that names it.
template <class Kind>
struct Arg {
  py::object obj;
  operator const py::handle&() const { return obj; }
  bool is_none() const { return obj.is_none(); }
};
namespace kind {
#define VKGATE_ARG_KIND(Name, text) \
  struct Name {                     \
    static constexpr auto name = py::detail::const_name(text); \
  };
VKGATE_ARG_KIND(Int, "int")
VKGATE_ARG_KIND(OptionalInt, "Optional[int]")
VKGATE_ARG_KIND(Bool, "bool")
VKGATE_ARG_KIND(OptionalBool, "Optional[bool]")
VKGATE_ARG_KIND(Float, "float")
VKGATE_ARG_KIND(Str, "str")
VKGATE_ARG_KIND(OptionalStr, "Optional[str]")
VKGATE_ARG_KIND(Path, "Union[str, os.PathLike]")
VKGATE_ARG_KIND(Context, "vkgate.Context")
VKGATE_ARG_KIND(Sequence, "vkgate.Sequence")
VKGATE_ARG_KIND(Sequences, "list[vkgate.Sequence]")
VKGATE_ARG_KIND(TextStreams, "list[vkgate.TextStream]")
VKGATE_ARG_KIND(BlockConfig, "vkgate.BlockConfig")
VKGATE_ARG_KIND(OptionalBlockConfig, "Optional[vkgate.BlockConfig]")
VKGATE_ARG_KIND(OptionalGlaConfig, "Optional[vkgate.GlaConfig]")
VKGATE_ARG_KIND(GlaConfig, "vkgate.GlaConfig")
VKGATE_ARG_KIND(OptionalGdnConfig, "Optional[vkgate.GdnConfig]")
VKGATE_ARG_KIND(GdnConfig, "vkgate.GdnConfig")
VKGATE_ARG_KIND(ModelConfig, "vkgate.ModelConfig")
VKGATE_ARG_KIND(Weights, "Dict[str, numpy.ndarray]")
VKGATE_ARG_KIND(WeightsOrPath, "Union[Dict[str, numpy.ndarray], str, os.PathLike]")
VKGATE_ARG_KIND(Floats, "numpy.ndarray")
VKGATE_ARG_KIND(OptionalFloats, "Optional[numpy.ndarray]")
VKGATE_ARG_KIND(Ids, "numpy.ndarray")
VKGATE_ARG_KIND(Device, "Union[None, int, str]")
#undef VKGATE_ARG_KIND
}  // namespace kind
// The parameter types of the bindings: arg::Int capacity, arg::Floats x, ...
namespace arg {
using Int = Arg<kind::Int>;
using OptionalInt = Arg<kind::OptionalInt>;
using Bool = Arg<kind::Bool>;
using OptionalBool = Arg<kind::OptionalBool>;
using Float = Arg<kind::Float>;
using Str = Arg<kind::Str>;
using OptionalStr = Arg<kind::OptionalStr>;
using Path = Arg<kind::Path>;
using Context = Arg<kind::Context>;
using Sequence = Arg<kind::Sequence>;
using Sequences = Arg<kind::Sequences>;
using TextStreams = Arg<kind::TextStreams>;
using BlockConfig = Arg<kind::BlockConfig>;
using OptionalBlockConfig = Arg<kind::OptionalBlockConfig>;
using GlaConfig = Arg<kind::GlaConfig>;
using OptionalGlaConfig = Arg<kind::OptionalGlaConfig>;
using GdnConfig = Arg<kind::GdnConfig>;
using OptionalGdnConfig = Arg<kind::OptionalGdnConfig>;
using ModelConfig = Arg<kind::ModelConfig>;
using Weights = Arg<kind::Weights>;
using WeightsOrPath = Arg<kind::WeightsOrPath>;
using Floats = Arg<kind::Floats>;
using OptionalFloats = Arg<kind::OptionalFloats>;
using Ids = Arg<kind::Ids>;
using Device = Arg<kind::Device>;
}  // namespace arg

// The Context argument of a constructor.
inline Context& context_arg(const py::handle& obj) { return instance_arg<Context>(obj, "ctx", "Context"); }

// The device index/name of Context(device=...): None, an int or a non-empty str.
std::string device_arg(const py::handle& obj);

// Python's signal handlers (Ctrl-C's KeyboardInterrupt) run only when the
// thread holding the GIL checks for them. A C++ loop that runs without the GIL
// calls poll() between its steps: it takes the GIL (at most every 50 ms), runs
// the handlers, and when one raised, keeps that exception and returns false,
// so that the loop stops where it stands; raise_pending() (with the GIL, after
// the loop) raises it.
class Interrupts {
 public:
  bool poll();
  void raise_pending();

 private:
  std::chrono::steady_clock::time_point next_check_{};
  std::optional<py::error_already_set> raised_;
};

// Wraps every function, method, static method and constructor of `m` (and its
// submodules' and classes') so that an overload failure, which the Arg<>
// arguments leave only for a missing, unknown or surplus argument (or a typed
// parameter bound elsewhere), raises vkgate.Error('invalid_argument') naming
// the argument and the signature instead of pybind11's TypeError. Called last
// in the module's initialisation.
void guard_arguments(py::module_& m);

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

// The same for an argument: a str naming one of the values.
template <class E, size_t N>
E enum_arg(const py::handle& obj, const std::array<E, N>& values, const char* what) {
  return parse_enum(str_arg(obj, what), values, what);
}

inline BlockOptions block_options(const py::handle& precision, const py::handle& check_finite) {
  BlockOptions o;
  o.precision = enum_arg(precision, kPrecisions, "precision");
  o.check_finite = bool_arg(check_finite, "check_finite");
  return o;
}

// os.fspath(obj) of a str or path-like `obj` (no NUL, no lone surrogate), else an Error naming `what`.
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
void bind_gdn(py::module_& m);
void bind_reference(py::module_& m);

}  // namespace vkgate::py_bind

// Arg<Kind>'s caster: any object loads (the function's own conversion checks it).
namespace pybind11::detail {
template <class Kind>
struct type_caster<vkgate::py_bind::Arg<Kind>> {
  PYBIND11_TYPE_CASTER(vkgate::py_bind::Arg<Kind>, Kind::name);
  bool load(handle src, bool) {
    value.obj = reinterpret_borrow<object>(src);
    return true;
  }
  static handle cast(const vkgate::py_bind::Arg<Kind>& a, return_value_policy, handle) { return a.obj.inc_ref(); }
};
}  // namespace pybind11::detail
