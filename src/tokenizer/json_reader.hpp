// Internal: reading tokenizer.json's JSON — typed access whose errors name the
// file and the key (Reader), and a SAX reader that puts model.vocab and
// model.merges straight into vectors (SaxReader). Used by tokenizer_json.cpp.
#pragma once

#include <climits>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "io/json_error.hpp"
#include "vkgate/error.hpp"

namespace vkgate::tok {

using json = nlohmann::json;


inline std::string quoted(const json& v) {
  std::string text;
  if (v.is_string()) text.append(1, '\'').append(v.get<std::string>()).append(1, '\'');
  else text = v.dump();
  return text.size() > 80 ? text.substr(0, 77) + "..." : text;
}

// Typed access to the keys of the file; each error starts with the file and the key's path.
class Reader {
 public:
  explicit Reader(const std::string& source) : source_(source) {}

  [[noreturn]] void fail(ErrorCode code, const std::string& path, const std::string& what) const {
    throw Error(code, source_ + ": " + path + ": " + what);
  }
  [[noreturn]] void malformed(const std::string& path, const std::string& what) const { fail(ErrorCode::io, path, what); }
  [[noreturn]] void unsupported(const std::string& path, const std::string& what) const {
    fail(ErrorCode::unsupported, path, what);
  }

  static std::string join(const std::string& path, const std::string& key) { return path.empty() ? key : path + "." + key; }
  static std::string at(const std::string& path, size_t i) { return path + "[" + std::to_string(i) + "]"; }

  // The value of `key`, nullptr when absent or null (Hugging Face writes null for "none").
  static const json* find(const json& obj, const char* key) {
    const auto it = obj.find(key);
    return it == obj.end() || it->is_null() ? nullptr : &*it;
  }
  const json& require(const json& obj, const std::string& path, const char* key) const {
    const json* v = find(obj, key);
    if (!v) malformed(join(path, key), "missing");
    return *v;
  }
  const json& object(const json& v, const std::string& path) const {
    if (!v.is_object()) malformed(path, "must be an object, got " + quoted(v));
    return v;
  }
  const json& array(const json& v, const std::string& path) const {
    if (!v.is_array()) malformed(path, "must be an array, got " + quoted(v));
    return v;
  }
  std::string string(const json& v, const std::string& path) const {
    if (!v.is_string()) malformed(path, "must be a string, got " + quoted(v));
    return v.get<std::string>();
  }
  static bool is_id(const json& v) {
    return v.is_number_integer() && v.get<int64_t>() >= 0 && v.get<int64_t>() < INT32_MAX;
  }
  int32_t id(const json& v, const std::string& path) const {
    if (!is_id(v)) malformed(path, "must be a token id (an integer in 0.." + std::to_string(INT32_MAX - 1) + "), got " + quoted(v));
    return int32_t(v.get<int64_t>());
  }
  bool flag(const json& obj, const std::string& path, const char* key, bool fallback) const {
    const json* v = find(obj, key);
    if (!v) return fallback;
    if (!v->is_boolean()) malformed(join(path, key), "must be true or false, got " + quoted(*v));
    return v->get<bool>();
  }
  // The "type" of a component object.
  std::string type(const json& v, const std::string& path) const {
    return string(require(object(v, path), path, "type"), join(path, "type"));
  }
  [[noreturn]] void unknown_type(const std::string& path, const std::string& type, const char* supported) const {
    unsupported(join(path, "type"), "'" + type + "' is not supported (" + supported + ")");
  }

 private:
  const std::string& source_;
};

// model.vocab and model.merges, read straight into plain vectors: most of an
// 11 MB tokenizer.json, which as JSON objects would take twice the time to
// build and to free.
struct Captured {
  std::vector<std::pair<std::string, int32_t>> vocab;  // in file order
  std::vector<std::pair<std::string, std::string>> merges;
};

// Builds the JSON tree of the file except the entries of model.vocab and
// model.merges, which go to a Captured (their containers stay, empty, so that
// the tree still says they were there); a malformed entry is an Error at once.
class SaxReader : public nlohmann::json_sax<json> {
 public:
  SaxReader(const Reader& r, const std::string& source, Captured& c) : r_(r), source_(source), c_(c) {}
  json root;

  bool null() override { return scalar(json(nullptr)); }
  bool boolean(bool v) override { return scalar(json(v)); }
  bool number_integer(number_integer_t v) override { return scalar(json(v)); }
  bool number_unsigned(number_unsigned_t v) override { return scalar(json(v)); }
  bool number_float(number_float_t v, const string_t&) override { return scalar(json(v)); }
  bool binary(binary_t&) override { return scalar(json(nullptr)); }
  bool string(string_t& v) override {
    if (mode_ == Mode::merges) {
      // "a b": exactly one space (Hugging Face splits on every space and wants two parts).
      const size_t space = v.find(' ');
      if (space == std::string::npos || v.find(' ', space + 1) != std::string::npos)
        r_.malformed(merge_path(), "must be two tokens separated by one space, got " + quoted(json(v)));
      c_.merges.emplace_back(v.substr(0, space), v.substr(space + 1));
      return true;
    }
    if (mode_ == Mode::merge_pair) {
      if (pair_.size() == 2) r_.malformed(merge_path(), "must be \"a b\" or [\"a\", \"b\"], got a longer array");
      pair_.push_back(std::move(v));
      return true;
    }
    return scalar(json(std::move(v)));
  }
  bool key(string_t& k) override {
    (mode_ == Mode::vocab ? vocab_key_ : key_) = std::move(k);
    return true;
  }
  bool start_object(std::size_t) override {
    if (mode_ != Mode::normal) return scalar(json::object());  // an error in vocab or merges
    return open(json::object(), "vocab", Mode::vocab);
  }
  bool end_object() override {
    if (mode_ == Mode::vocab) mode_ = Mode::normal;
    else stack_.pop_back();
    return true;
  }
  bool start_array(std::size_t) override {
    if (mode_ == Mode::merges) {
      mode_ = Mode::merge_pair;
      pair_.clear();
      return true;
    }
    if (mode_ != Mode::normal) return scalar(json::array());
    return open(json::array(), "merges", Mode::merges);
  }
  bool end_array() override {
    if (mode_ == Mode::merge_pair) {
      if (pair_.size() != 2) r_.malformed(merge_path(), "must be \"a b\" or [\"a\", \"b\"], got an array of " + std::to_string(pair_.size()));
      c_.merges.emplace_back(std::move(pair_[0]), std::move(pair_[1]));
      mode_ = Mode::merges;
    } else if (mode_ == Mode::merges) {
      mode_ = Mode::normal;
    } else {
      stack_.pop_back();
    }
    return true;
  }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& e) override {
    throw Error(ErrorCode::io, source_ + ": not valid JSON: " + json_error_text(e));
  }

 private:
  enum class Mode { normal, vocab, merges, merge_pair };

  // Adds a container to the tree; model's member named `capture` switches to `mode` instead.
  bool open(json container, const char* capture, Mode mode) {
    const bool model = stack_.size() == 1 && key_ == "model";
    const bool captured = in_model() && key_ == capture;
    json* v = put(std::move(container));
    if (captured) {
      mode_ = mode;
      if (mode == Mode::vocab) c_.vocab.clear();
      else c_.merges.clear();
      return true;
    }
    if (model) model_ = v;
    stack_.push_back(v);
    return true;
  }
  bool in_model() const { return model_ && stack_.size() == 2 && stack_.back() == model_; }
  std::string merge_path() const { return Reader::at("model.merges", c_.merges.size()); }

  // A value where the tree is being built, or an entry of vocab or merges.
  bool scalar(json v) {
    if (mode_ == Mode::vocab) {
      if (!Reader::is_id(v)) r_.id(v, "model.vocab['" + vocab_key_ + "']");
      c_.vocab.emplace_back(std::move(vocab_key_), int32_t(v.get<int64_t>()));
    } else if (mode_ != Mode::normal) {
      r_.malformed(merge_path(), "must be \"a b\" or [\"a\", \"b\"], got " + (v.is_structured() ? std::string(v.type_name()) : quoted(v)));
    } else {
      put(std::move(v));
    }
    return true;
  }
  json* put(json&& v) {
    if (stack_.empty()) {
      root = std::move(v);
      return &root;
    }
    json& top = *stack_.back();
    if (top.is_object()) {
      json& slot = top[key_];
      slot = std::move(v);
      return &slot;
    }
    top.push_back(std::move(v));
    return &top.back();
  }

  const Reader& r_;
  const std::string& source_;
  Captured& c_;
  std::vector<json*> stack_;
  json* model_ = nullptr;
  Mode mode_ = Mode::normal;
  std::string key_, vocab_key_;
  std::vector<std::string> pair_;
};

}  // namespace vkgate::tok
