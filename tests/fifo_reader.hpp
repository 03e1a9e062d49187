// A FIFO reader for the tests of output files (test_safetensors.cpp,
// test_cli_output.cpp): FIFOs in temporary folders stand in for special files.
#pragma once

#include "doctest.hpp"
#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

#include <cerrno>
#include <string>
#include <thread>
#include <utility>

namespace vkgate::test {

// Reads a FIFO on a thread without ever blocking in open(): it holds the read
// end and a write end of its own from the start, so that the FIFO reads as
// empty (not ended) until the writer under test has come and gone; finish()
// gives up its write end and takes what is left. A writer that never opens the
// FIFO (or replaces it) leaves the text empty instead of hanging the test.
class FifoReader {
 public:
  explicit FifoReader(const std::string& path)
      : read_(::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC)),
        keep_(::open(path.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC)) {
    REQUIRE(read_ >= 0);
    REQUIRE(keep_ >= 0);
    thread_ = std::thread([this] {
      char buf[65536];
      for (;;) {
        pollfd p{read_, POLLIN, 0};
        ::poll(&p, 1, 20);
        const ssize_t n = ::read(read_, buf, sizeof buf);
        if (n > 0) text_.append(buf, size_t(n));
        else if (n == 0) break;  // every write end closed, ours included: the end
        else if (errno != EAGAIN && errno != EINTR) break;
      }
    });
  }
  ~FifoReader() { finish(); }
  FifoReader(const FifoReader&) = delete;
  FifoReader& operator=(const FifoReader&) = delete;
  std::string finish() {
    if (keep_ >= 0) ::close(std::exchange(keep_, -1));
    if (thread_.joinable()) thread_.join();
    if (read_ >= 0) ::close(std::exchange(read_, -1));
    return text_;
  }

 private:
  int read_, keep_;
  std::string text_;
  std::thread thread_;
};

}  // namespace vkgate::test
