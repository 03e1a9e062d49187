// The progress line of long work (declared in cli.hpp): on a terminal's
// stderr only, redrawn in place at most ten times a second:
//   vkgate: compiling pipelines 12/40, 8.1 s
//   vkgate: loading tensors 120/311, 512 MB at 340 MB/s
//   vkgate: prefill 1024/4096 tokens, 2.1 s
// A task that took under a second leaves nothing behind; a longer one leaves
// its last line.
#include <chrono>
#include <cstdio>
#include <string>

#include <unistd.h>

#include "cli.hpp"

namespace vkgate::cli {

namespace {

std::string progress_text(const Progress& p) {
  char buf[160];
  if (p.task == Progress::Task::tensors) {
    const double mb = double(p.bytes) / 1e6;
    std::snprintf(buf, sizeof buf, "vkgate: %s %llu/%llu, %.0f MB at %.0f MB/s", to_string(p.task),
                  static_cast<unsigned long long>(p.done), static_cast<unsigned long long>(p.total), mb,
                  p.seconds > 0 ? mb / p.seconds : 0.0);
  } else {
    std::snprintf(buf, sizeof buf, "vkgate: %s %llu/%llu%s, %.1f s", to_string(p.task),
                  static_cast<unsigned long long>(p.done), static_cast<unsigned long long>(p.total),
                  p.task == Progress::Task::prefill ? " tokens" : "", p.seconds);
  }
  return buf;
}

}  // namespace

void show_progress(ContextOptions& options, bool quiet) {
  if (quiet || !::isatty(STDERR_FILENO)) return;
  options.on_progress = [last = std::chrono::steady_clock::time_point(), drawn = false](const Progress& p) mutable {
    const auto now = std::chrono::steady_clock::now();
    const bool end = p.done >= p.total;
    // A task's first report is always drawn; later ones at most every 100 ms.
    if (drawn && !end && now - last < std::chrono::milliseconds(100)) return;
    last = now;
    drawn = !end;
    const std::string line = progress_text(p);
    if (end) std::fprintf(stderr, p.seconds < 1.0 ? "\r\033[K" : "\r\033[K%s\n", line.c_str());
    else std::fprintf(stderr, "\r\033[K%s", line.c_str());
    std::fflush(stderr);
  };
}

}  // namespace vkgate::cli
