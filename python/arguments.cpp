// The user's arguments: conversions that name the argument they refuse, the
// guard that turns pybind11's overload TypeError into vkgate.Error, and the
// signal checks of loops that run without the GIL.
#include <climits>
#include <cstring>
#include <memory>

#include "common.hpp"

namespace vkgate::py_bind {

namespace {

// A value for a message: at most about 40 characters of it.
std::string clipped(const std::string& s, const char* unit = "characters") {
  if (s.size() <= 40) return s;
  return s.substr(0, 24) + "..." + s.substr(s.size() - 8) + " (" + std::to_string(s.size()) + " " + unit + ")";
}

std::string text_or(const py::handle& obj, const char* fallback, bool use_repr) {
  PyObject* s = use_repr ? PyObject_Repr(obj.ptr()) : PyObject_Str(obj.ptr());
  if (!s) {
    PyErr_Clear();
    return fallback;
  }
  py::object owned = py::reinterpret_steal<py::object>(s);
  Py_ssize_t n = 0;
  const char* p = PyUnicode_AsUTF8AndSize(s, &n);
  if (!p) {
    PyErr_Clear();
    return fallback;
  }
  return std::string(p, size_t(n));
}

bool is_numpy_bool(const py::handle& obj) { return std::strcmp(Py_TYPE(obj.ptr())->tp_name, "numpy.bool_") == 0; }

bool is_bool(const py::handle& obj) { return PyBool_Check(obj.ptr()) || is_numpy_bool(obj); }

// An int, or an object with __index__ (numpy.int64), but not a bool.
bool is_integer(const py::handle& obj) { return !is_bool(obj) && PyIndex_Check(obj.ptr()); }

bool is_real(const py::handle& obj) {
  if (is_bool(obj) || PyUnicode_Check(obj.ptr()) || PyBytes_Check(obj.ptr())) return false;
  return PyFloat_Check(obj.ptr()) || is_integer(obj) || py::hasattr(obj, "__float__");
}

[[noreturn]] void refuse(ErrorCode code, const char* what, const std::string& problem) {
  fail(code, std::string(what) + ": " + problem);
}

// The index of the first lone surrogate of a str that UTF-8 cannot encode, else -1.
Py_ssize_t lone_surrogate(const py::handle& s) {
  const Py_ssize_t n = PyUnicode_GetLength(s.ptr());
  for (Py_ssize_t i = 0; i < n; ++i) {
    const Py_UCS4 c = PyUnicode_ReadChar(s.ptr(), i);
    if (c >= 0xD800 && c <= 0xDFFF) return i;
  }
  return -1;
}

}  // namespace

std::string describe(const py::handle& obj) {
  if (obj.is_none()) return "None";
  const std::string type = Py_TYPE(obj.ptr())->tp_name;
  if (PyBool_Check(obj.ptr()) || PyFloat_Check(obj.ptr())) return type + " " + text_or(obj, "?", true);
  if (PyLong_Check(obj.ptr())) return type + " " + clipped(text_or(obj, "?", false), "digits");
  if (PyUnicode_Check(obj.ptr())) return type + " " + clipped(text_or(obj, "'?'", true));
  if (py::isinstance<py::array>(obj)) {
    const auto a = py::reinterpret_borrow<py::array>(obj);
    return type + " " + text_or(a.dtype(), "?", false) + " " +
           shape_text(std::vector<int64_t>(a.shape(), a.shape() + a.ndim()));
  }
  return type;
}

int64_t integer_arg(const py::handle& obj, const char* what, int64_t lo, int64_t hi, ErrorCode code) {
  if (!is_integer(obj)) refuse(code, what, "expected an int, got " + describe(obj));
  py::object v = py::reinterpret_steal<py::object>(PyNumber_Index(obj.ptr()));
  if (!v) {
    PyErr_Clear();
    refuse(code, what, "expected an int, got " + describe(obj));
  }
  int overflow = 0;
  const long long x = PyLong_AsLongLongAndOverflow(v.ptr(), &overflow);
  if (x == -1 && PyErr_Occurred()) PyErr_Clear();
  if (overflow || x < lo || x > hi)
    refuse(code, what, clipped(text_or(v, "?", false), "digits") + " is out of range (" + std::to_string(lo) + " to " +
                           std::to_string(hi) + ")");
  return x;
}

uint64_t uint64_arg(const py::handle& obj, const char* what, ErrorCode code) {
  if (!is_integer(obj)) refuse(code, what, "expected an int, got " + describe(obj));
  py::object v = py::reinterpret_steal<py::object>(PyNumber_Index(obj.ptr()));
  const unsigned long long x = v ? PyLong_AsUnsignedLongLong(v.ptr()) : 0;
  if (!v || (x == static_cast<unsigned long long>(-1) && PyErr_Occurred())) {
    PyErr_Clear();
    refuse(code, what, clipped(text_or(v ? v : obj, "?", false), "digits") + " is out of range (0 to " +
                           std::to_string(UINT64_MAX) + ")");
  }
  return x;
}

int int_arg(const py::handle& obj, const char* what, ErrorCode code) {
  return int(integer_arg(obj, what, INT_MIN, INT_MAX, code));
}

bool bool_arg(const py::handle& obj, const char* what, ErrorCode code) {
  if (PyBool_Check(obj.ptr())) return obj.ptr() == Py_True;
  if (is_numpy_bool(obj)) return PyObject_IsTrue(obj.ptr()) == 1;
  refuse(code, what, "expected True or False, got " + describe(obj));
}

double float_value_arg(const py::handle& obj, const char* what, ErrorCode code) {
  if (!is_real(obj)) refuse(code, what, "expected a number, got " + describe(obj));
  const double x = PyFloat_AsDouble(obj.ptr());
  if (x == -1.0 && PyErr_Occurred()) {
    PyErr_Clear();
    refuse(code, what, describe(obj) + " is out of range of a double");
  }
  return x;
}

std::string str_arg(const py::handle& obj, const char* what, ErrorCode code) {
  if (!PyUnicode_Check(obj.ptr())) refuse(code, what, "expected a str, got " + describe(obj));
  Py_ssize_t n = 0;
  const char* p = PyUnicode_AsUTF8AndSize(obj.ptr(), &n);
  if (!p) {
    PyErr_Clear();
    const Py_ssize_t at = lone_surrogate(obj);
    char cp[16];
    std::snprintf(cp, sizeof cp, "U+%04X", at >= 0 ? unsigned(PyUnicode_ReadChar(obj.ptr(), at)) : 0u);
    refuse(code, what, at >= 0 ? "the character at index " + std::to_string(at) + " is a lone surrogate (" + cp +
                                     "), which UTF-8 cannot encode"
                               : std::string("cannot be encoded as UTF-8"));
  }
  return std::string(p, size_t(n));
}

py::dict dict_arg(const py::handle& obj, const char* what, const char* expected) {
  if (!PyDict_Check(obj.ptr()))
    refuse(ErrorCode::invalid_argument, what, std::string("expected ") + expected + ", got " + describe(obj));
  return py::reinterpret_borrow<py::dict>(obj);
}

std::string device_arg(const py::handle& obj) {
  if (obj.is_none()) return "";
  // an index as text: the library's selector says when none matches
  if (is_integer(obj)) return std::to_string(integer_arg(obj, "device", 0, INT_MAX));
  if (!PyUnicode_Check(obj.ptr()))
    refuse(ErrorCode::invalid_argument, "device", "expected an index, a name or None, got " + describe(obj));
  std::string s = str_arg(obj, "device");
  if (s.empty()) refuse(ErrorCode::invalid_argument, "device", "an empty selector (pass None for the best device)");
  return s;
}

bool is_path(const py::handle& obj) { return PyUnicode_Check(obj.ptr()) || py::hasattr(obj, "__fspath__"); }

std::string fspath(const py::handle& obj, const char* what) {
  if (!is_path(obj))
    refuse(ErrorCode::invalid_argument, what, "expected a path (str or os.PathLike), got " + describe(obj));
  py::object os = py::module_::import("os");
  py::object p = os.attr("fspath")(obj);
  if (PyBytes_Check(p.ptr())) p = os.attr("fsdecode")(p);
  std::string s = str_arg(p, what);
  if (s.find('\0') != std::string::npos) refuse(ErrorCode::invalid_argument, what, "a path with a NUL character");
  return s;
}

std::string checkpoint_path(const py::handle& weights) {
  if (!is_path(weights))
    refuse(ErrorCode::invalid_argument, "weights",
           "expected a dict {name: numpy array} or a checkpoint path, got " + describe(weights));
  return fspath(weights, "weights");
}

// ---- Ctrl-C in loops without the GIL

bool Interrupts::poll() {
  if (raised_) return false;
  const auto now = std::chrono::steady_clock::now();
  if (now < next_check_) return true;
  next_check_ = now + std::chrono::milliseconds(50);
  py::gil_scoped_acquire gil;
  if (PyErr_CheckSignals() == 0) return true;
  raised_.emplace();  // takes the handler's exception (KeyboardInterrupt)
  return false;
}

void Interrupts::raise_pending() {
  if (!raised_) return;
  py::error_already_set e = std::move(*raised_);
  raised_.reset();
  throw e;
}

// ---- the guard against pybind11's overload TypeError

namespace {

struct Param {
  std::string name, type, default_text;
  bool has_default = false;
};

// A function's signature as pybind11 writes it on its docstring's first line:
// "start(self: vkgate.Model, batch: int, capacity: int) -> vkgate.Sequence".
struct Signature {
  std::string shown;  // "Model.start", "GatedAttention", "reference.linear"
  std::string overload_error;  // the start of pybind11's message: "start(): incompatible "
  bool has_self = false, var_args = false, var_kwargs = false;
  std::vector<Param> params;  // without self

  std::string text() const {
    std::string r = shown + "(";
    for (size_t i = 0; i < params.size(); ++i)
      r += (i ? ", " : "") + params[i].name + (params[i].has_default ? "=" + params[i].default_text : "");
    if (var_args) r += std::string(params.empty() ? "" : ", ") + "*args";
    if (var_kwargs) r += std::string(params.empty() && !var_args ? "" : ", ") + "**kwargs";
    return r + ")";
  }
};

std::string trim(const std::string& s) {
  const size_t a = s.find_first_not_of(' '), b = s.find_last_not_of(' ');
  return a == std::string::npos ? "" : s.substr(a, b - a + 1);
}

// `s` split at the commas outside brackets and quotes.
std::vector<std::string> split_params(const std::string& s) {
  std::vector<std::string> parts;
  std::string cur;
  int depth = 0;
  char quote = 0;
  for (char c : s) {
    if (quote) {
      if (c == quote) quote = 0;
    } else if (c == '\'' || c == '"') {
      quote = c;
    } else if (c == '(' || c == '[' || c == '{') {
      ++depth;
    } else if (c == ')' || c == ']' || c == '}') {
      --depth;
    } else if (c == ',' && depth == 0) {
      parts.push_back(trim(cur));
      cur.clear();
      continue;
    }
    cur += c;
  }
  if (!trim(cur).empty()) parts.push_back(trim(cur));
  return parts;
}

std::optional<Signature> parse_signature(const std::string& doc, const std::string& name) {
  const std::string line = doc.substr(0, doc.find('\n'));
  if (line.compare(0, name.size() + 1, name + "(") != 0) return std::nullopt;  // overloaded, or no signature
  const size_t open = name.size();
  int depth = 0;
  char quote = 0;
  size_t close = std::string::npos;
  for (size_t i = open; i < line.size() && close == std::string::npos; ++i) {
    const char c = line[i];
    if (quote) {
      if (c == quote) quote = 0;
    } else if (c == '\'' || c == '"') {
      quote = c;
    } else if (c == '(' || c == '[' || c == '{') {
      ++depth;
    } else if ((c == ')' || c == ']' || c == '}') && --depth == 0) {
      close = i;
    }
  }
  if (close == std::string::npos) return std::nullopt;
  Signature sig;
  for (const std::string& part : split_params(line.substr(open + 1, close - open - 1))) {
    if (part.rfind("**", 0) == 0) {
      sig.var_kwargs = true;
      continue;
    }
    if (part.rfind("*", 0) == 0) {
      sig.var_args = true;
      continue;
    }
    Param p;
    const size_t eq = part.find(" = "), colon = part.find(':');
    p.name = trim(part.substr(0, std::min(colon, eq)));
    if (colon != std::string::npos && (eq == std::string::npos || colon < eq))
      p.type = trim(part.substr(colon + 1, eq == std::string::npos ? std::string::npos : eq - colon - 1));
    if (eq != std::string::npos) {
      p.has_default = true;
      p.default_text = trim(part.substr(eq + 3));
    }
    sig.params.push_back(std::move(p));
  }
  return sig;
}

// What is wrong with `value` for a parameter of pybind11 type `type`, or "";
// `range` is set for an int that a narrower C++ type may not hold.
std::string type_problem(const std::string& type, const py::handle& value, const py::module_& m, bool& range) {
  range = false;
  if (type == "int") {
    if (!is_integer(value)) return "expected an int, got " + describe(value);
    const py::object v = py::reinterpret_steal<py::object>(PyNumber_Index(value.ptr()));
    int overflow = 0;
    const long long x = v ? PyLong_AsLongLongAndOverflow(v.ptr(), &overflow) : 0;
    PyErr_Clear();
    range = overflow || x < INT_MIN || x > INT_MAX;
    return range ? describe(value) + " is out of range" : "";
  }
  if (type == "bool") return is_bool(value) || value.is_none() ? "" : "expected True or False, got " + describe(value);
  if (type == "float") return is_real(value) ? "" : "expected a number, got " + describe(value);
  if (type == "str") {
    if (!PyUnicode_Check(value.ptr())) return "expected a str, got " + describe(value);
    const Py_ssize_t at = lone_surrogate(value);
    return at < 0 ? "" : "the character at index " + std::to_string(at) + " is a lone surrogate, which UTF-8 cannot encode";
  }
  if (type.rfind("vkgate.", 0) == 0) {
    const std::string cls = type.substr(7);
    if (py::hasattr(m, cls.c_str()) && !py::isinstance(value, m.attr(cls.c_str())))
      return "expected a " + type + ", got " + describe(value);
  }
  return "";
}

// Why `args` and `kwargs` fit no overload of `sig` (the call that pybind11 refused).
std::string diagnose(const Signature& sig, const py::tuple& args, const py::dict& kwargs, const py::module_& m) {
  const size_t skip = sig.has_self && args.size() > 0 ? 1 : 0;
  const size_t given = args.size() - skip;
  const size_t n = sig.params.size();
  if (!sig.var_args && given > n)
    return n == 0 ? "takes no positional arguments, got " + std::to_string(given)
                  : "takes at most " + std::to_string(n) + " arguments, got " + std::to_string(given);
  for (auto [key, value] : kwargs) {
    const std::string k = clipped(text_or(key, "?", false));
    size_t i = 0;
    while (i < n && sig.params[i].name != k) ++i;
    if (i == n && !sig.var_kwargs) return "no argument named '" + k + "'";
    if (i < given) return "argument '" + k + "' given twice (by position and by name)";
  }
  for (size_t i = given; i < n; ++i)
    if (!sig.params[i].has_default && !kwargs.contains(sig.params[i].name.c_str()))
      return "missing argument '" + sig.params[i].name + "'";
  // A value of the wrong type for a typed parameter: the first that does not
  // fit, else the first int beyond 32 bits (pybind11 does not say which failed).
  std::string out_of_range;
  for (size_t i = 0; i < n; ++i) {
    const Param& p = sig.params[i];
    py::handle v = i < given ? args[skip + i] : kwargs.contains(p.name.c_str()) ? kwargs[p.name.c_str()] : py::handle();
    if (!v) continue;
    bool range = false;
    const std::string problem = type_problem(p.type, v, m, range);
    if (problem.empty()) continue;
    if (!range) return p.name + ": " + problem;
    if (out_of_range.empty()) out_of_range = p.name + ": " + problem;
  }
  if (!out_of_range.empty()) return out_of_range;
  if (skip) {
    bool range = false;
    const std::string self_type = sig.shown.substr(0, sig.shown.find('.'));
    const std::string problem = type_problem("vkgate." + self_type, args[0], m, range);
    if (!problem.empty()) return "self: " + problem;
  }
  return "the arguments do not match";
}

bool is_pybind_function(const py::handle& f) {
  return PyCFunction_Check(f.ptr()) && PyCFunction_GET_SELF(f.ptr()) && PyCapsule_CheckExact(PyCFunction_GET_SELF(f.ptr()));
}

// `fn` wrapped (the same name and docstring) so that its overload TypeError is a vkgate.Error; `fn` as it is
// when its docstring has no single signature.
py::object guarded(const py::object& fn, const std::string& shown, const py::handle& scope, bool method,
                   const py::module_& m) {
  const std::string name = py::str(fn.attr("__name__"));
  const py::object doc_obj = fn.attr("__doc__");
  const std::string doc = doc_obj.is_none() ? "" : std::string(py::str(doc_obj));
  std::optional<Signature> parsed = parse_signature(doc, name);
  if (!parsed) return fn;
  parsed->shown = shown;
  parsed->has_self = method;
  if (method && !parsed->params.empty() && parsed->params.front().name == "self")
    parsed->params.erase(parsed->params.begin());
  parsed->overload_error = name + "(): incompatible ";
  auto sig = std::make_shared<const Signature>(std::move(*parsed));
  return py::cpp_function(
      [fn, sig, m](const py::args& args, const py::kwargs& kwargs) -> py::object {
        PyObject* r = PyObject_Call(fn.ptr(), args.ptr(), kwargs.ptr());
        if (r) return py::reinterpret_steal<py::object>(r);
        if (!PyErr_ExceptionMatches(PyExc_TypeError)) throw py::error_already_set();
        {
          py::error_already_set e;  // taken, and dropped unless it is not the overload failure
          if (std::string(e.what()).find(sig->overload_error) == std::string::npos) throw e;
        }
        fail(ErrorCode::invalid_argument, sig->shown + "(): " + diagnose(*sig, args, kwargs, m) + "; it takes " + sig->text());
      },
      py::name(name.c_str()), py::doc(doc.c_str()), py::scope(scope));
}

void guard_class(const py::handle& cls, const py::module_& m) {
  const std::string cls_name = py::str(cls.attr("__name__"));
  const py::list items = py::reinterpret_borrow<py::object>(cls).attr("__dict__").attr("items")();
  for (const py::handle item : items) {
    const std::string name = py::str(item[py::int_(0)]);
    const py::object v = item[py::int_(1)];
    const bool dunder = name.size() > 4 && name.rfind("__", 0) == 0;
    if (dunder && name != "__init__") continue;
    const std::string shown = name == "__init__" ? cls_name : cls_name + "." + name;
    if (PyInstanceMethod_Check(v.ptr())) {
      const py::object fn = py::reinterpret_borrow<py::object>(PyInstanceMethod_GET_FUNCTION(v.ptr()));
      if (!is_pybind_function(fn)) continue;
      const py::object w = guarded(fn, shown, cls, true, m);
      if (w.is(fn)) continue;
      py::setattr(cls, name.c_str(), py::reinterpret_steal<py::object>(PyInstanceMethod_New(w.ptr())));
    } else if (py::isinstance(v, py::reinterpret_borrow<py::object>(reinterpret_cast<PyObject*>(&PyStaticMethod_Type)))) {
      const py::object fn = v.attr("__func__");
      if (!is_pybind_function(fn)) continue;
      const py::object w = guarded(fn, shown, cls, false, m);
      if (!w.is(fn)) py::setattr(cls, name.c_str(), py::staticmethod(w));
    }
  }
}

void guard_module(const py::module_& target, const std::string& prefix, const py::module_& m) {
  const py::list items = target.attr("__dict__").attr("items")();
  for (const py::handle item : items) {
    const std::string name = py::str(item[py::int_(0)]);
    const py::object v = item[py::int_(1)];
    if (is_pybind_function(v)) {
      py::setattr(target, name.c_str(), guarded(v, prefix + name, target, false, m));
    } else if (PyType_Check(v.ptr()) && py::detail::get_type_info(reinterpret_cast<PyTypeObject*>(v.ptr()))) {
      guard_class(v, m);
    } else if (PyModule_Check(v.ptr()) && std::string(py::str(v.attr("__name__"))).rfind("vkgate.", 0) == 0) {
      guard_module(py::reinterpret_borrow<py::module_>(v), prefix + name + ".", m);
    }
  }
}

}  // namespace

void guard_arguments(py::module_& m) {
  py::options options;
  options.disable_function_signatures();  // each wrapper carries its original's docstring, signature included
  guard_module(m, "", m);
}

}  // namespace vkgate::py_bind
