// vkgate.Tokenizer: a Hugging Face tokenizer.json (byte-level BPE).
#include "common.hpp"
#include "vkgate/tokenizer.hpp"

namespace vkgate::py_bind {

namespace {

std::vector<int32_t> ids32(const py::handle& ids) {
  IdsArg a = ids_arg(ids, "ids");
  if (a.shape.size() != 1) fail(ErrorCode::shape_mismatch, "ids: expected 1-D token ids, got " + shape_text(a.shape));
  std::vector<int32_t> r;
  r.reserve(a.data.size());
  for (size_t i = 0; i < a.data.size(); ++i) {
    if (a.data[i] < 0 || a.data[i] > INT32_MAX)
      fail(ErrorCode::invalid_argument, "ids[" + std::to_string(i) + "]: id " + std::to_string(a.data[i]) +
                                            " is not in the vocabulary");
    r.push_back(int32_t(a.data[i]));
  }
  return r;
}

}  // namespace

void bind_tokenizer(py::module_& m) {
  py::class_<Tokenizer>(m, "Tokenizer",
                        "Tokenizer(path): a Hugging Face tokenizer.json (byte-level BPE: Qwen2/3, Llama 3, GPT-2),\n"
                        "or a directory holding one. Immutable; usable from several threads at once.")
      .def(py::init([](arg::Path path) {
             const std::string p = fspath(path, "path");
             py::gil_scoped_release nogil;
             return Tokenizer::load(p);
           }),
           py::arg("path"))
      .def_static(
          "from_json",
          [](arg::Str json_text, arg::Str source) {
            return Tokenizer::from_json(str_arg(json_text, "json_text"), str_arg(source, "source"));
          },
          py::arg("json_text"), py::arg("source") = "tokenizer.json",
                  "A tokenizer from the text of a tokenizer.json; `source` names it in errors.")
      .def(
          "encode",
          [](const Tokenizer& t, arg::Str text_arg, arg::Bool add_special_tokens_arg) {
            const std::string text = str_arg(text_arg, "text");
            const bool add_special_tokens = bool_arg(add_special_tokens_arg, "add_special_tokens");
            std::vector<int32_t> ids;
            {
              py::gil_scoped_release nogil;
              ids = t.encode(text, add_special_tokens);
            }
            return ids;
          },
          py::arg("text"), py::arg("add_special_tokens") = true,
          "The token ids (a list of int) of `text`; add_special_tokens: what the post-processor adds.")
      .def(
          "decode", [](const Tokenizer& t, arg::Ids ids) { return text_of(t.decode(ids32(ids))); },
          py::arg("ids"),
          "The text the ids stand for (bytes that end inside a character become U+FFFD). An id\n"
          "outside the vocabulary raises vkgate.Error('invalid_argument').")
      .def("normalize", [](const Tokenizer& t, arg::Str text) { return text_of(t.normalize(str_arg(text, "text"))); },
           py::arg("text"))
      .def_property_readonly("vocab_size", &Tokenizer::vocab_size)
      .def("token_to_id", [](const Tokenizer& t, arg::Str token) { return t.token_to_id(str_arg(token, "token")); },
           py::arg("token"), "The id of a token as written in tokenizer.json, or None.")
      .def(
          "id_to_token",
          [](const Tokenizer& t, arg::Int id_arg) -> py::object {
            const int64_t id = integer_arg(id_arg, "id", INT64_MIN, INT64_MAX);
            if (id < 0 || id > INT32_MAX) return py::none();
            auto s = t.id_to_token(int32_t(id));
            return s ? py::object(text_of(*s)) : py::object(py::none());
          },
          py::arg("id"))
      .def(
          "is_special",
          [](const Tokenizer& t, arg::Int id_arg) {
            const int64_t id = integer_arg(id_arg, "id", INT64_MIN, INT64_MAX);
            return id >= 0 && id <= INT32_MAX && t.is_special(int32_t(id));
          },
          py::arg("id"))
      .def_property_readonly("source", &Tokenizer::source);
}

}  // namespace vkgate::py_bind
