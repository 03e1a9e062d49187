// Internal: the bounds every config (block, GLA layer, whole model) is checked
// against before anything is sized from it, so that a config.json written by
// mistake or malice fails with a message naming its key instead of exhausting
// host or device memory first.
#pragma once

#include <cmath>
#include <cstdint>
#include <sstream>
#include <string>

#include "vkgate/error.hpp"

namespace vkgate::limits {

// Every tensor and shader index is 32-bit: the widest row of any tensor stays
// under 2^24 elements, far above any real model (Qwen3-Next's q_proj has 8192
// rows, Qwen3's vocabulary 151,936).
constexpr int64_t kMaxRows = int64_t(1) << 24;
// The largest released decoder stacks have under 130 layers. A model's names,
// caches and plans grow per layer, so the count is bounded before any of them
// is made (and then checked against the tensors present).
constexpr int kMaxLayers = 4096;
// A sparse MLP's experts (real models have up to 512).
constexpr int kMaxExperts = 65536;

// validate()'s errors, "config: KEY WHY" and "config: key 'KEY' WHY": the
// parsers put the file in place of "config".
[[noreturn]] inline void bad(const std::string& key, const std::string& why) {
  throw Error(ErrorCode::invalid_config, "config: " + key + " " + why);
}
[[noreturn]] inline void bad_key(const std::string& key, const std::string& why) {
  throw Error(ErrorCode::invalid_config, "config: key '" + key + "' " + why);
}

// "config: key 'KEY' must be in LO..HI, got VALUE" unless lo <= value <= hi.
inline void check_range(const char* key, int64_t value, int64_t lo, int64_t hi) {
  if (value < lo || value > hi)
    bad_key(key, "must be in " + std::to_string(lo) + ".." + std::to_string(hi) + ", got " + std::to_string(value));
}

// A value as those messages quote it (six significant digits).
inline std::string number_text(double x) {
  std::ostringstream os;
  os << x;
  return os.str();
}

inline bool positive(double x) { return x > 0 && std::isfinite(x); }

}  // namespace vkgate::limits
