// Small helpers shared by the CPU-side tests: expected errors, files and a
// temporary directory.
#pragma once

#include "doctest.hpp"
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
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

inline std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  REQUIRE(in);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

inline void write_text(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

// A fresh directory under the system temp dir, removed with everything in it.
struct TempDir {
  std::filesystem::path path;
  TempDir() {
    static int counter = 0;
    path = std::filesystem::temp_directory_path() /
           ("vkgate_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    std::filesystem::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::string file(const std::string& name) const { return (path / name).string(); }
  // Writes `text` to `name` in the directory; returns its path.
  std::string write(const std::string& name, const std::string& text) const {
    write_text(file(name), text);
    return file(name);
  }
};

}  // namespace vkgate::test
