// Internal: nlohmann-json exceptions as one readable sentence, for the
// parsers of config.json and model.safetensors.index.json.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace vkgate {

// "[json.exception.parse_error.101] parse error at line 3, ..." → "parse error at line 3, ...".
// Catches every nlohmann::json::exception, not only parse errors: a number
// beyond double range is an out_of_range (406) thrown by the parser.
inline std::string json_error_text(const nlohmann::json::exception& e) {
  std::string what = e.what();
  if (const size_t end = what.find("] "); what.starts_with("[json.") && end != std::string::npos)
    what = what.substr(end + 2);
  return what;
}

}  // namespace vkgate
