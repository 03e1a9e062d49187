// The one writer of files (include/vkgate/output_file.hpp): standard output,
// devices and FIFOs written directly, regular files replaced atomically through
// a temporary file that a signal handler removes if the process is interrupted.
#include "vkgate/output_file.hpp"

#include <fcntl.h>
#include <limits.h>
#include <linux/magic.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <utility>

#include "io/errno_text.hpp"
#include "vkgate/error.hpp"

namespace vkgate {

namespace {

// ---- the temporary files alive in this process, for the signal handler ----

// What the handler needs to remove one temporary file, in memory it may read
// without locks or allocation.
struct LiveTemp {
  pid_t pid;  // the creating process: a forked child leaves its parent's files alone
  int dirfd;
  char name[NAME_MAX + 1];
};

constexpr int kSlots = 64;  // more temporary files at once are not protected, only slower to notice
std::atomic<LiveTemp*> g_live[kSlots];
static_assert(std::atomic<LiveTemp*>::is_always_lock_free, "the signal handler needs lock-free slots");

constexpr int kSignals[] = {SIGINT, SIGTERM, SIGHUP};

extern "C" void remove_temporary_files(int sig) {
  const int saved = errno;
  const pid_t self = ::getpid();
  for (auto& slot : g_live)
    if (LiveTemp* t = slot.exchange(nullptr))  // claimed: its owner will not free it
      if (t->pid == self) ::unlinkat(t->dirfd, t->name, 0);
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  ::sigaction(sig, &dfl, nullptr);
  ::raise(sig);  // blocked while this handler runs; delivered, with the default action, when it returns
  errno = saved;
}

// Installs the handler for each signal whose disposition is the default, every
// time a temporary file is made (a disposition may have been reset since).
void install_handler() {
  static std::mutex m;
  const std::lock_guard lock(m);
  for (int sig : kSignals) {
    struct sigaction old {};
    if (::sigaction(sig, nullptr, &old) != 0) continue;
    if ((old.sa_flags & SA_SIGINFO) || old.sa_handler != SIG_DFL) continue;  // ours, ignored, or someone's
    struct sigaction sa {};
    sa.sa_handler = remove_temporary_files;
    sigemptyset(&sa.sa_mask);
    for (int s : kSignals) sigaddset(&sa.sa_mask, s);
    ::sigaction(sig, &sa, nullptr);
  }
}

// Blocks the three signals for a scope, so that a temporary file is created
// and registered (or renamed and unregistered) as one step.
class SignalsBlocked {
 public:
  SignalsBlocked() {
    sigset_t set;
    sigemptyset(&set);
    for (int s : kSignals) sigaddset(&set, s);
    ::pthread_sigmask(SIG_BLOCK, &set, &old_);
  }
  ~SignalsBlocked() { ::pthread_sigmask(SIG_SETMASK, &old_, nullptr); }
  SignalsBlocked(const SignalsBlocked&) = delete;
  SignalsBlocked& operator=(const SignalsBlocked&) = delete;

 private:
  sigset_t old_;
};

// Registers a temporary file; null when every slot is taken or the name is too long.
LiveTemp* register_temp(int dirfd, const std::string& name) {
  if (name.size() > NAME_MAX) return nullptr;
  auto* t = new LiveTemp{::getpid(), dirfd, {}};
  std::memcpy(t->name, name.c_str(), name.size() + 1);
  for (auto& slot : g_live) {
    LiveTemp* expected = nullptr;
    if (slot.compare_exchange_strong(expected, t)) return t;
  }
  delete t;
  return nullptr;
}

void unregister_temp(LiveTemp* t) {
  if (!t) return;
  for (auto& slot : g_live) {
    LiveTemp* expected = t;
    if (slot.compare_exchange_strong(expected, nullptr)) {
      delete t;
      return;
    }
  }
  // A signal handler claimed it and is ending the process: leave it to that.
}

// ---- resolving a path ----

std::string mode_text(mode_t mode) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "%04o", unsigned(mode & 07777));
  return buf;
}

const char* kind_text(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISREG(mode)) return "a regular file";
  return "not a regular file";
}

// How a path is written.
struct Plan {
  enum Kind { standard_output, direct, replace, create } kind = create;
  bool magic = false;         // direct through a /proc link (/dev/stdout, /proc/self/fd/N)
  std::string given, target;  // target: after following symbolic links
  struct stat st {};          // of the target, when it exists
  std::string dir, base;      // replace, create: where the temporary file goes, and the target's name

  [[noreturn]] void fail(const std::string& what) const { throw Error(ErrorCode::io, given + ": " + what); }
  // "is" or "links to TARGET, which is": what follows the path in a message about the target.
  std::string is() const { return target == given ? "is" : "links to " + target + ", which is"; }
};

// True for a path in /proc, whose symbolic links (/proc/self/fd/N) name open
// descriptors rather than paths.
bool in_procfs(const std::string& path) {
  const size_t slash = path.rfind('/');
  const std::string dir = slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
  struct statfs fs {};
  return ::statfs(dir.c_str(), &fs) == 0 && fs.f_type == PROC_SUPER_MAGIC;
}

std::string read_link(const Plan& p, const std::string& link) {
  std::string buf(256, '\0');
  for (;;) {
    const ssize_t n = ::readlink(link.c_str(), buf.data(), buf.size());
    if (n < 0) p.fail("cannot read the symbolic link " + link + ": " + errno_text());
    if (size_t(n) < buf.size()) return buf.substr(0, size_t(n));
    buf.resize(buf.size() * 2);
  }
}

Plan make_plan(const std::string& given) {
  Plan p;
  p.given = p.target = given;
  if (is_stdout_path(given)) {
    p.kind = Plan::standard_output;
    return p;
  }
  if (given.empty()) p.fail("the path is empty");
  bool exists = false;
  for (int hops = 0;; ++hops) {
    if (::lstat(p.target.c_str(), &p.st) != 0) {
      if (errno != ENOENT) p.fail("cannot examine " + p.target + ": " + errno_text());
      break;
    }
    if (!S_ISLNK(p.st.st_mode)) {
      exists = true;
      break;
    }
    if (hops == 40) p.fail("too many levels of symbolic links");
    if (in_procfs(p.target)) {
      // /dev/stdout -> /proc/self/fd/1 -> "pipe:[1234]": a link only the kernel
      // can follow, to whatever the descriptor is. Open it as it is.
      struct stat st {};
      if (::stat(p.target.c_str(), &st) != 0) p.fail("cannot examine " + p.target + ": " + errno_text());
      if (S_ISDIR(st.st_mode) || S_ISSOCK(st.st_mode))
        p.fail("links to " + p.target + ", which is " + kind_text(st.st_mode) + ": cannot write a file there");
      p.st = st;
      p.kind = Plan::direct;
      p.magic = true;
      return p;
    }
    std::string link = read_link(p, p.target);
    if (link.empty()) p.fail("the symbolic link " + p.target + " is empty");
    if (link[0] != '/')
      if (const size_t slash = p.target.rfind('/'); slash != std::string::npos)
        link = p.target.substr(0, slash + 1) + link;
    p.target = std::move(link);
  }
  if (exists) {
    const mode_t m = p.st.st_mode;
    if (S_ISDIR(m) || S_ISSOCK(m)) p.fail(p.is() + " " + kind_text(m) + ": cannot write a file there");
    if (!S_ISREG(m)) {
      p.kind = Plan::direct;
      return p;
    }
    // Root may write a file without write bits: refuse it anyway, the mode says not to.
    if ((m & 0222) == 0)
      p.fail(p.is() + " read-only (mode " + mode_text(m) + "): not replaced");
    if (::faccessat(AT_FDCWD, p.target.c_str(), W_OK, AT_EACCESS) != 0)
      p.fail(p.is() + " not writable by this process (mode " + mode_text(m) + "): " + errno_text() + ": not replaced");
    p.kind = Plan::replace;
  } else {
    p.kind = Plan::create;
  }
  const size_t slash = p.target.rfind('/');
  p.dir = slash == std::string::npos ? "." : slash == 0 ? "/" : p.target.substr(0, slash);
  p.base = slash == std::string::npos ? p.target : p.target.substr(slash + 1);
  if (p.base.empty() || p.base == "." || p.base == "..") p.fail("names a directory, not a file");
  struct stat dst {};
  if (::stat(p.dir.c_str(), &dst) != 0) p.fail("cannot use the directory " + p.dir + ": " + errno_text());
  if (!S_ISDIR(dst.st_mode)) p.fail(p.dir + " is not a directory");
  if (::faccessat(AT_FDCWD, p.dir.c_str(), W_OK | X_OK, AT_EACCESS) != 0)
    p.fail("cannot create a file in " + p.dir + ": " + errno_text());
  return p;
}

// Writes everything, in pieces of at most 16 MiB: a write to a regular file is
// not cut short by a signal with a handler, so this bounds how late the handler runs.
bool write_all(int fd, const std::byte* p, size_t size) {
  constexpr size_t kPiece = size_t(1) << 24;
  while (size > 0) {
    const ssize_t n = ::write(fd, p, std::min(size, kPiece));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    p += n;
    size -= size_t(n);
  }
  return true;
}

}  // namespace

bool is_stdout_path(const std::string& path) { return path == "-"; }

void check_output_path(const std::string& path) { (void)make_plan(path); }

struct OutputFile::Impl {
  Plan plan;
  int fd = -1;
  int dirfd = -1;
  std::string temp;            // the temporary file's name in dirfd
  LiveTemp* live = nullptr;    // its registration for the signal handler
  bool committed = false;

  [[noreturn]] void fail(const std::string& what) const { plan.fail(what + ": " + errno_text()); }

  void open_temporary() {
    dirfd = ::open(plan.dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dirfd < 0 && errno == EACCES) dirfd = ::open(plan.dir.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (dirfd < 0) fail("cannot open the directory " + plan.dir);
    install_handler();
    static std::atomic<unsigned> counter{0};
    for (int attempt = 0; attempt < 100 && fd < 0; ++attempt) {
      temp = plan.base + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(counter++);
      const SignalsBlocked blocked;
      fd = ::openat(dirfd, temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
      if (fd >= 0) live = register_temp(dirfd, temp);
      else if (errno != EEXIST) break;
    }
    if (fd < 0) fail("cannot create the temporary file " + plan.dir + "/" + temp);
    if (plan.kind == Plan::replace) {
      // The owner first: changing it clears set-user-ID bits that the mode then restores.
      if (::fchown(fd, plan.st.st_uid, plan.st.st_gid) != 0) { /* not ours to give: keep the process's */ }
      if (::fchmod(fd, plan.st.st_mode & 07777) != 0) fail("cannot give the new file the mode " + mode_text(plan.st.st_mode));
    }
  }

  void open_direct() {
    // Through /dev/stdout and the like the file may be a regular one (a shell's
    // "> out"): truncate it, as cp and tee do; a FIFO or device ignores O_TRUNC.
    fd = ::open(plan.target.c_str(), O_WRONLY | O_CLOEXEC | O_NOCTTY | (plan.magic ? O_TRUNC : 0));
    if (fd < 0) fail(std::string("cannot open ") + (plan.target == plan.given ? "" : plan.target + ", ") + kind_text(plan.st.st_mode));
    struct stat st {};
    if (::fstat(fd, &st) != 0) fail("cannot examine " + plan.target);
    if (S_ISREG(st.st_mode) && !plan.magic) {  // replaced by a regular file since it was examined
      ::close(std::exchange(fd, -1));
      plan.fail(plan.target + " changed while it was opened; not written");
    }
  }

  void remove_temporary() noexcept {
    if (fd >= 0) ::close(std::exchange(fd, -1));
    if (!temp.empty() && !committed) ::unlinkat(dirfd, temp.c_str(), 0);
    unregister_temp(std::exchange(live, nullptr));
  }
};

OutputFile::OutputFile(const std::string& path) : impl_(std::make_unique<Impl>()) {
  impl_->plan = make_plan(path);
  switch (impl_->plan.kind) {
    case Plan::standard_output:
      std::fflush(stdout);  // what the program printed through stdio comes first
      impl_->fd = STDOUT_FILENO;
      break;
    case Plan::direct:
      impl_->open_direct();
      break;
    case Plan::replace:
    case Plan::create:
      try {
        impl_->open_temporary();
      } catch (...) {
        impl_->remove_temporary();
        if (impl_->dirfd >= 0) ::close(impl_->dirfd);
        throw;
      }
      break;
  }
}

OutputFile::~OutputFile() {
  Impl& m = *impl_;
  if (m.plan.kind == Plan::replace || m.plan.kind == Plan::create) {
    m.remove_temporary();
  } else if (m.plan.kind == Plan::direct && m.fd >= 0) {
    ::close(m.fd);
  }
  if (m.dirfd >= 0) ::close(m.dirfd);
}

void OutputFile::write(std::span<const std::byte> bytes) {
  Impl& m = *impl_;
  if (m.fd < 0 || m.committed) m.plan.fail("written after it was finished");
  if (!write_all(m.fd, bytes.data(), bytes.size()))
    m.fail(m.plan.kind == Plan::standard_output ? "cannot write to standard output" : "cannot write");
}

void OutputFile::write(std::string_view text) { write(std::as_bytes(std::span(text.data(), text.size()))); }

void OutputFile::commit() {
  Impl& m = *impl_;
  if (m.fd < 0 || m.committed) m.plan.fail("finished twice");
  switch (m.plan.kind) {
    case Plan::standard_output:
      break;
    case Plan::direct: {
      const bool block = S_ISBLK(m.plan.st.st_mode);
      if (block && ::fsync(m.fd) != 0) m.fail("cannot fsync");
      // A failing close can be the first report of a failed write.
      if (::close(std::exchange(m.fd, -1)) != 0) m.fail("cannot close");
      break;
    }
    case Plan::replace:
    case Plan::create: {
      if (::fsync(m.fd) != 0) m.fail("cannot fsync");
      if (::close(std::exchange(m.fd, -1)) != 0) m.fail("cannot close");
      {
        const SignalsBlocked blocked;
        if (::renameat(m.dirfd, m.temp.c_str(), m.dirfd, m.plan.base.c_str()) != 0)
          m.fail("cannot rename the temporary file into place");
        m.committed = true;
        unregister_temp(std::exchange(m.live, nullptr));
      }
      // Makes the rename itself durable; the file is complete either way, so a failure is no error.
      ::fsync(m.dirfd);
      break;
    }
  }
  m.committed = true;
}

const std::string& OutputFile::path() const { return impl_->plan.given; }
const std::string& OutputFile::target() const { return impl_->plan.target; }
bool OutputFile::to_stdout() const { return impl_->plan.kind == Plan::standard_output; }

void write_file(const std::string& path, std::string_view bytes) {
  OutputFile f(path);
  f.write(bytes);
  f.commit();
}

}  // namespace vkgate
