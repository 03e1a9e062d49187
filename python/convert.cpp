// numpy arrays in and out, and the small value conversions every binding uses.
#include <cstring>

#include "common.hpp"
#include "vkgate/dtype.hpp"

namespace vkgate::py_bind {

namespace {

// numpy's conversion of `obj` to Array, or a null array when numpy refuses it
// (TypeError, ValueError, OverflowError: a ragged list, an int beyond 64 bits);
// KeyboardInterrupt and the like pass.
// (A default py::array is an empty float64 array, not a null one.)
template <class Array>
py::array numpy_ensure(const py::handle& obj) {
  try {
    py::array a = Array::ensure(obj);
    if (a) return a;
  } catch (py::error_already_set& e) {
    if (!e.matches(PyExc_Exception)) throw;
  }
  PyErr_Clear();
  return py::reinterpret_steal<py::array>(py::handle());
}

std::string dtype_name(const py::array& a) { return py::str(a.dtype()).cast<std::string>(); }

std::vector<int64_t> shape_of(const py::array& a) {
  return std::vector<int64_t>(a.shape(), a.shape() + a.ndim());
}

void check_ndim(const py::array& a, const char* what, int ndim) {
  if (ndim >= 0 && a.ndim() != ndim)
    fail(ErrorCode::shape_mismatch, std::string(what) + ": expected a " + std::to_string(ndim) + "-D array, got " +
                                        std::to_string(a.ndim()) + "-D " + shape_text(shape_of(a)));
}

bool is_c_contiguous_aligned(const py::array& a) {
  return (a.flags() & py::array::c_style) && (a.flags() & py::detail::npy_api::NPY_ARRAY_ALIGNED_);
}

}  // namespace

FloatArg float_arg(const py::handle& obj, const char* what, int ndim) {
  FloatArg r;
  if (!py::isinstance<py::array>(obj)) {
    // A list or scalar: numpy decides whether it is numeric; the conversion is the one copy.
    // None, text, a dict or a bool would become a 0-D array (NaN for None) whose shape
    // message would mislead, so they are refused as what they are.
    const bool not_numbers = obj.is_none() || PyUnicode_Check(obj.ptr()) || PyBytes_Check(obj.ptr()) ||
                             PyDict_Check(obj.ptr()) || PyBool_Check(obj.ptr());
    const py::array a = not_numbers ? py::reinterpret_steal<py::array>(py::handle())
                                    : numpy_ensure<py::array_t<float, py::array::c_style | py::array::forcecast>>(obj);
    if (!a) fail(ErrorCode::invalid_argument, std::string(what) + ": expected a float32 numpy array, got " + describe(obj));
    r.holder = a;
  } else {
    py::array a = py::reinterpret_borrow<py::array>(obj);
    if (!a.dtype().is(py::dtype::of<float>())) {
      // Widening or narrowing another dtype silently would hide a caller's
      // mistake (float64 halves its precision here), so it is refused.
      fail(ErrorCode::invalid_argument, std::string(what) + ": expected a float32 array, got " + dtype_name(a) +
                                            " (convert it with .astype(numpy.float32))");
    }
    r.holder = is_c_contiguous_aligned(a) ? a : py::array_t<float, py::array::c_style | py::array::forcecast>::ensure(a);
  }
  check_ndim(r.holder, what, ndim);
  r.shape = shape_of(r.holder);
  r.data = std::span<const float>(static_cast<const float*>(r.holder.data()), size_t(r.holder.size()));
  return r;
}

FloatArg optional_float_arg(const py::handle& obj, const char* what, int ndim) {
  if (obj.is_none()) return {};
  return float_arg(obj, what, ndim);
}

IdsArg ids_arg(const py::handle& obj, const char* what) {
  IdsArg r;
  py::array a = py::reinterpret_steal<py::array>(py::handle());
  if (py::isinstance<py::array>(obj)) {
    a = py::reinterpret_borrow<py::array>(obj);
    const char kind = a.dtype().kind();
    if (kind != 'i' && kind != 'u')
      fail(ErrorCode::invalid_argument, std::string(what) + ": expected an integer array of token ids, got " + dtype_name(a));
  } else if (PyUnicode_Check(obj.ptr()) || PyBytes_Check(obj.ptr())) {
    fail(ErrorCode::invalid_argument, std::string(what) + ": expected token ids, got a string");
  } else {
    const bool not_ids = obj.is_none() || PyDict_Check(obj.ptr()) || PyBool_Check(obj.ptr());
    if (!not_ids) a = numpy_ensure<py::array>(obj);
    if (!a || (a.size() > 0 && a.dtype().kind() != 'i' && a.dtype().kind() != 'u'))
      fail(ErrorCode::invalid_argument,
           std::string(what) + ": expected a sequence of integer token ids, got " + describe(obj));
  }
  if (a.dtype().kind() == 'u' && a.dtype().itemsize() == 8 && a.size() > 0) {
    // uint64 ids above INT64_MAX would wrap to negative ids in the int64 copy.
    const py::object top = a.attr("max")();
    if (top.cast<uint64_t>() > uint64_t(INT64_MAX))
      fail(ErrorCode::invalid_argument, std::string(what) + ": id " + std::string(py::str(top)) + " is beyond int64");
  }
  r.holder = numpy_ensure<py::array_t<int64_t, py::array::c_style | py::array::forcecast>>(a);
  if (!r.holder) fail(ErrorCode::invalid_argument, std::string(what) + ": cannot convert to int64 token ids");
  r.shape = shape_of(r.holder);
  r.data = std::span<const int64_t>(static_cast<const int64_t*>(r.holder.data()), size_t(r.holder.size()));
  return r;
}

FloatArg hidden_arg(const py::handle& x, int hidden_size) {
  FloatArg h = float_arg(x, "x", 3);
  if (h.shape[2] != hidden_size)
    fail(ErrorCode::shape_mismatch,
         "x: expected [batch, tokens, " + std::to_string(hidden_size) + "], got " + shape_text(h.shape));
  return h;
}

void expect_shape(const std::vector<int64_t>& shape, const std::vector<int64_t>& want, const char* what) {
  if (shape != want)
    fail(ErrorCode::shape_mismatch,
         std::string(what) + ": expected shape " + shape_text(want) + ", got " + shape_text(shape));
}

namespace {

// A weight as stored: float32 or float16 (uploaded as F16 without a host conversion).
py::array weight_array(const py::handle& value, const std::string& name, const char* what) {
  const std::string where = std::string(what) + "['" + name + "']";
  if (!py::isinstance<py::array>(value)) return float_arg(value, where.c_str()).holder;
  py::array a = py::reinterpret_borrow<py::array>(value);
  if (a.dtype().is(py::dtype::of<float>())) return float_arg(a, where.c_str()).holder;
  if (a.dtype().is(py::dtype("float16")))
    return is_c_contiguous_aligned(a) ? a : py::array::ensure(a, py::array::c_style);
  fail(ErrorCode::invalid_argument,
       where + ": expected a float32 or float16 array, got " + dtype_name(a) + " (convert it with .astype(numpy.float32))");
}

std::string key_of(const py::handle& key, const char* what) {
  if (!py::isinstance<py::str>(key))
    fail(ErrorCode::invalid_argument, std::string(what) + ": every key must be a tensor name (str), got " + describe(key));
  return str_arg(key, what);
}

}  // namespace

TensorMap tensor_map(const py::dict& weights, std::vector<py::array>& holders, const char* what) {
  TensorMap map;
  for (auto [key, value] : weights) {
    const std::string name = key_of(key, what);
    py::array a = weight_array(value, name, what);
    holders.push_back(a);
    HostTensor t;
    t.dtype = a.itemsize() == 2 ? DType::F16 : DType::F32;
    t.shape = shape_of(a);
    t.bytes = std::span<const std::byte>(static_cast<const std::byte*>(a.data()), size_t(a.nbytes()));
    map[name] = std::move(t);
  }
  return map;
}

WeightMap weight_map(const py::dict& weights, std::vector<py::array>& holders, const char* what) {
  WeightMap map;
  for (auto [key, value] : weights) {
    const std::string name = key_of(key, what);
    py::array a = weight_array(value, name, what);
    if (a.itemsize() == 2) a = py::array_t<float, py::array::c_style | py::array::forcecast>::ensure(a);
    holders.push_back(a);
    map[name] = std::span<const float>(static_cast<const float*>(a.data()), size_t(a.size()));
  }
  return map;
}

py::str text_of(const std::string& bytes) { return py::bytes(bytes).attr("decode")("utf-8", "replace"); }

py::list timings_list(const std::vector<StageTime>& timings) {
  py::list r;
  for (const StageTime& t : timings) r.append(py::make_tuple(t.stage, t.microseconds));
  return r;
}

Busy::Scope::Scope(Busy& b, const char* what) : busy_(b) {
  if (busy_.flag_.exchange(true))
    fail(ErrorCode::invalid_argument, std::string(what) +
                                          " is in use by another thread: each object runs on one thread at a time "
                                          "(give each thread its own)");
}

}  // namespace vkgate::py_bind
