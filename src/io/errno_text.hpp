// Internal: the text of errno, for the file errors that name a path.
#pragma once

#include <cerrno>
#include <cstring>
#include <string>

namespace vkgate {

inline std::string errno_text() { return std::strerror(errno); }

}  // namespace vkgate
