// Where vkgate writes a file: one set of rules for every writer of the library
// (write_safetensors) and of the CLI (`--output`, `--write-text`).
//
// A path given to OutputFile (or write_file) is, by what it names now:
//   "-"                 standard output (file descriptor 1), written directly;
//   a symbolic link     followed, through a chain of them and also when it dangles, to the
//                       path it finally names, which is then treated as below; the link
//                       itself stays a link, its target is what is replaced;
//   nothing             created atomically: a temporary file NAME.tmp.PID.N in the same
//                       directory is written, fsync'd and renamed to NAME (mode 0666 less the
//                       umask), so NAME appears complete or not at all;
//   a regular file      replaced the same way, the new file taking the old one's permission
//                       bits (and its owner, where the process may set it); after a failure
//                       the old file is left as it was. A file that may not be written — no
//                       write bit in its mode (refused even for root, who could write it), or
//                       not writable by this process — is refused, naming it, and left as it is;
//   a FIFO, character or block device
//                       opened and written directly (no temporary file, nothing replaced): a
//                       FIFO waits for its reader, /dev/null takes anything;
//   a link in /proc     (/dev/stdout, /dev/fd/N, /proc/self/fd/N: links to open descriptors,
//                       which only the kernel follows) opened through the link and written
//                       directly, truncated first when it is a regular file (as cp does);
//   a directory, a socket
//                       refused, naming it.
// Every error is an Error(io) whose message starts with the path as given.
//
// Interruption: while a temporary file exists, SIGINT, SIGTERM and SIGHUP remove
// it before the process ends (an async-signal-safe handler unlinks every live
// temporary file of the process, then re-raises the signal with its default
// action). The handler is installed, when a temporary file is created, only for
// those of the three signals whose disposition is then the default (SIG_DFL):
// a handler of the program's own (Python's SIGINT, an embedder's) or an ignored
// signal is left alone, and removing the temporary file is then that handler's
// business. Once installed it stays: with no temporary file alive, it only
// re-raises, which ends the process as the default action would.
//
// Thread safety: OutputFile objects for different paths may be used from
// different threads at once; one OutputFile is used by one thread at a time.
#pragma once

#include <cstddef>
#include <memory>
#include <span>
#include <string>
#include <string_view>

namespace vkgate {

class OutputFile {
 public:
  // Resolves `path` and opens what will be written (the temporary file, the
  // device or FIFO, or standard output); throws Error(io) naming the path.
  explicit OutputFile(const std::string& path);
  // Without commit(): a temporary file is removed and the target left as it was
  // (what was written to a device, a FIFO or standard output stays written).
  ~OutputFile();
  OutputFile(const OutputFile&) = delete;
  OutputFile& operator=(const OutputFile&) = delete;

  void write(std::span<const std::byte> bytes);
  void write(std::string_view text);
  // Finishes the file: fsync and rename into place (a temporary file), or
  // close (a device or FIFO). Standard output is flushed, not closed.
  void commit();

  const std::string& path() const;  // as given
  // The path as resolved: the target of a symbolic link, "-" for standard output.
  const std::string& target() const;
  bool to_stdout() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// OutputFile(path), write(bytes), commit().
void write_file(const std::string& path, std::string_view bytes);

// True for "-", the path that names standard output.
bool is_stdout_path(const std::string& path);

// Throws the Error(io) that OutputFile(path) would throw for a target that
// cannot be written — a directory, a socket, a file without write permission,
// a missing or unwritable directory — without creating, opening or changing
// anything; lets a command refuse its output path before long work.
void check_output_path(const std::string& path);

}  // namespace vkgate
