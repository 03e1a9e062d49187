// Internal: what the config.json parsers share — typed reading of the keys of
// one JSON object, with errors that start with the file and name the key
// (config_json.cpp for the block, model_config.cpp for a whole model).
#pragma once

#include <array>
#include <climits>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "io/json_error.hpp"
#include "vkgate/config.hpp"
#include "vkgate/error.hpp"

namespace vkgate {

// Reads typed keys of one JSON object; every error starts with the source and names the key.
class KeyReader {
 public:
  using json = nlohmann::json;

  KeyReader(const json& object, const std::string& source, std::string prefix = "")
      : object_(object), source_(source), prefix_(std::move(prefix)) {}

  [[noreturn]] void fail(const std::string& message) const {
    throw Error(ErrorCode::invalid_config, source_ + ": " + message);
  }
  std::string name(const char* key) const { return prefix_ + key; }
  const std::string& source() const { return source_; }

  // The value of `key`; JSON null counts as absent (HF writes null for "use the default").
  const json* find(const char* key) const {
    const auto it = object_.find(key);
    return it == object_.end() || it->is_null() ? nullptr : &*it;
  }

  std::optional<int> positive_int(const char* key) const {
    const json* v = find(key);
    if (!v) return std::nullopt;
    if (!v->is_number_integer() || v->get<int64_t>() <= 0 || v->get<int64_t>() > INT_MAX)
      wrong(key, "a positive integer", *v);
    return int(v->get<int64_t>());
  }
  int required_positive_int(const char* key) const {
    const std::optional<int> v = positive_int(key);
    if (!v) fail("key '" + name(key) + "' is required (a positive integer)");
    return *v;
  }
  // A number, and when `in_range` is given one it accepts (`expected` says which).
  std::optional<double> number(const char* key, bool (*in_range)(double) = nullptr,
                               const char* expected = "a number") const {
    const json* v = find(key);
    if (!v) return std::nullopt;
    if (!v->is_number() || (in_range && !in_range(v->get<double>()))) wrong(key, expected, *v);
    return v->get<double>();
  }
  std::optional<bool> boolean(const char* key) const {
    const json* v = find(key);
    if (!v) return std::nullopt;
    if (!v->is_boolean()) wrong(key, "true or false", *v);
    return v->get<bool>();
  }
  std::optional<std::string> string(const char* key) const {
    const json* v = find(key);
    if (!v) return std::nullopt;
    if (!v->is_string()) wrong(key, "a string", *v);
    return v->get<std::string>();
  }
  template <typename E, size_t N>
  std::optional<E> enumeration(const char* key, const std::array<E, N>& values) const {
    const std::optional<std::string> s = string(key);
    if (!s) return std::nullopt;
    std::string choices;
    for (E e : values) {
      if (*s == to_string(e)) return e;
      choices += std::string(choices.empty() ? "" : ", ") + to_string(e);
    }
    wrong(key, ("one of " + choices).c_str(), *find(key));
  }

  [[noreturn]] void wrong(const char* key, const char* expected, const json& got) const {
    std::string text = got.dump();
    if (text.size() > 60) text = text.substr(0, 57) + "...";
    fail("key '" + name(key) + "' must be " + expected + ", got " + text);
  }

 private:
  const json& object_;
  const std::string& source_;
  std::string prefix_;
};

// The top-level object of a config file; Error(invalid_config) naming `source`
// when the text is not JSON or not an object.
inline nlohmann::json parse_json_object(std::string_view text, const std::string& source) {
  nlohmann::json root;
  try {
    root = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw Error(ErrorCode::invalid_config, source + ": not valid JSON: " + json_error_text(e));
  }
  if (!root.is_object())
    throw Error(ErrorCode::invalid_config, source + ": the top level is not a JSON object");
  return root;
}

// Runs a validate() whose messages start with "config: ", putting `source` in
// that place, so that the error names the file the bad key came from.
template <typename Validate>
void validate_as(const std::string& source, Validate&& validate) {
  try {
    validate();
  } catch (const Error& e) {
    std::string what = e.what();
    if (what.starts_with("config: ")) what = what.substr(8);
    throw Error(e.code(), source + ": " + what);
  }
}

// The whole text of a config file: Error(io) naming the path when it is a
// directory or cannot be read (config_json.cpp).
std::string read_config_text(const std::string& path);

// parse_config_json on an already parsed top-level object (config_json.cpp):
// the model parser reads the attention block exactly as `vkgate run` does.
BlockConfig block_config_from_json(const nlohmann::json& root, const std::string& source);

}  // namespace vkgate
