// Text in and out of the CLI's commands (declared in cli.hpp): whole files,
// chat templates, token id lists, JSON strings.
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

#include <nlohmann/json.hpp>

#include "cli.hpp"
#include "vkgate/error.hpp"
#include "vkgate/gguf.hpp"

namespace vkgate::cli {

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(ErrorCode::io, path + ": cannot open: " + std::strerror(errno));
  std::string text{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  if (in.bad()) throw Error(ErrorCode::io, path + ": cannot read");
  return text;
}

// The model's Jinja chat template, or "" when it has none: tokenizer_config.json's
// chat_template (a named list's "default") or chat_template.jinja in a directory,
// a GGUF's tokenizer.chat_template.
std::string chat_template_text(const std::string& weights) {
  namespace fs = std::filesystem;
  if (fs::is_directory(weights)) {
    const fs::path config = fs::path(weights) / "tokenizer_config.json";
    if (fs::exists(config)) {
      nlohmann::json j;
      try {
        j = nlohmann::json::parse(read_file(config.string()));
      } catch (const nlohmann::json::exception& e) {
        throw Error(ErrorCode::invalid_config, config.string() + ": not valid JSON: " + e.what());
      }
      const auto t = j.find("chat_template");
      if (t != j.end() && t->is_string()) return t->get<std::string>();
      if (t != j.end() && t->is_array())  // named templates: the default one
        for (const auto& named : *t)
          if (named.is_object() && named.value("name", "") == "default" && named.contains("template") &&
              named["template"].is_string())
            return named["template"].get<std::string>();
    }
    // Newer transformers save it on its own.
    const fs::path jinja = fs::path(weights) / "chat_template.jinja";
    if (fs::exists(jinja)) return read_file(jinja.string());
    return {};
  }
  const GgufFile gguf = GgufFile::open(weights);
  return gguf.contains("tokenizer.chat_template") ? gguf.string("tokenizer.chat_template") : std::string();
}

std::vector<int64_t> parse_id_list(const std::string& flag, const std::string& text) {
  std::vector<int64_t> ids;
  const char* p = text.c_str();
  for (;;) {
    while (*p == ',' || std::isspace(static_cast<unsigned char>(*p))) ++p;
    if (!*p) return ids;
    const char* stop = p;
    while (*stop && *stop != ',' && !std::isspace(static_cast<unsigned char>(*stop))) ++stop;
    const std::string item(p, stop);
    char* end = nullptr;
    errno = 0;
    const long long v = std::strtoll(item.c_str(), &end, 10);
    if (*end || errno == ERANGE)
      throw UsageError(flag + " must be integers separated by commas or spaces, got '" + item + "' in '" + text + "'");
    ids.push_back(v);
    p = stop;
  }
}

std::string json_string(const std::string& text) {
  return nlohmann::json(text).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace vkgate::cli
