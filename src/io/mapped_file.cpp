#include "io/mapped_file.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "io/errno_text.hpp"
#include "vkgate/error.hpp"

namespace vkgate {

namespace {

// Closes a descriptor on every path out of a scope.
class FileDescriptor {
 public:
  explicit FileDescriptor(int fd) : fd_(fd) {}
  ~FileDescriptor() {
    if (fd_ >= 0) ::close(fd_);
  }
  FileDescriptor(const FileDescriptor&) = delete;
  FileDescriptor& operator=(const FileDescriptor&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

}  // namespace

Mapping map_file(const std::string& path) {
  FileDescriptor fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) throw Error(ErrorCode::io, path + ": cannot open: " + errno_text());
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) throw Error(ErrorCode::io, path + ": cannot stat: " + errno_text());
  if (!S_ISREG(st.st_mode)) throw Error(ErrorCode::io, path + ": not a regular file");
  Mapping m;
  if (st.st_size > 0) {
    void* map = ::mmap(nullptr, size_t(st.st_size), PROT_READ, MAP_PRIVATE, fd.get(), 0);
    if (map == MAP_FAILED) throw Error(ErrorCode::io, path + ": cannot mmap: " + errno_text());
    m = {map, size_t(st.st_size)};
  }
  return m;
}

void unmap_file(Mapping& m) noexcept {
  if (m.data) ::munmap(m.data, m.size);
  m = {};
}

}  // namespace vkgate
