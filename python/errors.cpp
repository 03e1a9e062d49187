// vkgate.Error: the one exception class, carrying the C++ ErrorCode.
#include "common.hpp"

namespace vkgate::py_bind {

namespace {
// Owned by the module for the interpreter's lifetime; a plain handle so that
// no destructor runs after the interpreter is finalized.
py::handle error_type;
}  // namespace

const char* code_name(ErrorCode code) noexcept {
  switch (code) {
    case ErrorCode::invalid_argument: return "invalid_argument";
    case ErrorCode::invalid_config: return "invalid_config";
    case ErrorCode::missing_tensor: return "missing_tensor";
    case ErrorCode::shape_mismatch: return "shape_mismatch";
    case ErrorCode::io: return "io";
    case ErrorCode::no_device: return "no_device";
    case ErrorCode::unsupported: return "unsupported";
    case ErrorCode::out_of_memory: return "out_of_memory";
    case ErrorCode::device_lost: return "device_lost";
    case ErrorCode::vulkan: return "vulkan";
    case ErrorCode::validation: return "validation";
    case ErrorCode::non_finite: return "non_finite";
  }
  return "unknown";
}

[[noreturn]] void fail(ErrorCode code, const std::string& message) { throw Error(code, message); }

namespace {

void set_python_error(const Error& e) {
  py::object err = py::reinterpret_borrow<py::object>(error_type)(e.what());
  err.attr("code") = code_name(e.code());
  err.attr("message") = e.what();
  err.attr("vk_result") = e.vk_result();
  PyErr_SetObject(error_type.ptr(), err.ptr());
}

}  // namespace

void bind_errors(py::module_& m) {
  const char* doc =
      "Every failure of vkgate: .code is the C++ ErrorCode's name ('invalid_argument',\n"
      "'shape_mismatch', 'missing_tensor', 'io', 'no_device', ...; vkgate.ERROR_CODES lists\n"
      "them), .message what was being done, naming the argument, tensor, key or Vulkan call,\n"
      ".vk_result the failing VkResult (0 when no Vulkan call failed).";
  py::object type = py::reinterpret_steal<py::object>(
      PyErr_NewExceptionWithDoc("vkgate.Error", doc, PyExc_Exception, nullptr));
  if (!type) throw py::error_already_set();
  type.attr("code") = "";
  type.attr("message") = "";
  type.attr("vk_result") = 0;
  m.attr("Error") = type;
  error_type = type.release();

  py::list codes;
  for (ErrorCode c : all_error_codes()) codes.append(code_name(c));
  m.attr("ERROR_CODES") = codes;

  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const Error& e) {
      set_python_error(e);
    }
  });
}

}  // namespace vkgate::py_bind
