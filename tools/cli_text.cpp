// Text in and out of the CLI's commands (declared in cli.hpp): whole files,
// token id lists, JSON strings.
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>

#include <nlohmann/json.hpp>

#include "cli.hpp"
#include "vkgate/error.hpp"

namespace vkgate::cli {

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(ErrorCode::io, path + ": cannot open: " + std::strerror(errno));
  std::string text{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  if (in.bad()) throw Error(ErrorCode::io, path + ": cannot read");
  return text;
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
