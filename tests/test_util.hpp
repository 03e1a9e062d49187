// Small helpers shared by the tests: expected errors, files, a temporary
// directory and the error of a double result against another.
#pragma once

#include "doctest.hpp"
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <span>
#include <string>
#include <vector>

#include "vkgate/error.hpp"

namespace vkgate::test {

// Runs `fn`, which must throw an Error with `code` whose message contains every one of `mentions`.
inline void expect_error(const std::function<void()>& fn, ErrorCode code, const std::vector<std::string>& mentions) {
  try {
    fn();
    FAIL("no error thrown");
  } catch (const Error& e) {
    const std::string msg = e.what();
    CAPTURE(msg);
    CHECK(to_string(e.code()) == std::string(to_string(code)));
    for (const std::string& m : mentions) {
      CAPTURE(m);
      CHECK(msg.find(m) != std::string::npos);
    }
  }
}

// A file's bytes; fails the test when it cannot be opened.
inline std::string read_text(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  REQUIRE(in);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

inline void write_text(const std::filesystem::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
  REQUIRE(out.good());
}

// A fresh directory under the system temp dir, removed with everything in it.
// The tag and the clock keep the names of parallel test processes (and of a
// pid reused between runs) apart.
struct TempDir {
  std::filesystem::path path;
  explicit TempDir(const std::string& tag = "test") {
    static std::atomic<unsigned> counter{0};
    const auto now = std::chrono::steady_clock::now().time_since_epoch().count();
    path = std::filesystem::temp_directory_path() / ("vkgate_" + tag + "_" + std::to_string(::getpid()) + "_" +
                                                     std::to_string(counter++) + "_" + std::to_string(now));
    std::filesystem::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::string file(const std::string& name) const { return (path / name).string(); }
  std::string operator/(const std::string& name) const { return file(name); }
  // Writes `text` to `name` in the directory; returns its path.
  std::string write(const std::string& name, const std::string& text) const {
    write_text(file(name), text);
    return file(name);
  }
};

// Σ(got − want)² / Σwant² (the squared error itself where want is all zeros);
// NaN or infinite where got holds a non-finite value, so no bound passes it.
inline double nmse(std::span<const double> got, std::span<const double> want) {
  REQUIRE(got.size() == want.size());
  double err = 0, ref = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    err += (got[i] - want[i]) * (got[i] - want[i]);
    ref += want[i] * want[i];
  }
  return ref == 0 ? err : err / ref;
}

inline double max_abs_diff(std::span<const double> a, std::span<const double> b) {
  REQUIRE(a.size() == b.size());
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::abs(a[i] - b[i]));
  return m;
}

}  // namespace vkgate::test
