// Write to ".<name>.tmp-<pid>[-<n>]" beside the destination, fsync, rename (docs/FORMAT.md §1).
#include "sjkv/io/atomic_file.h"

#include <dirent.h>
#include <fcntl.h>
#include <pthread.h>
#include <limits.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>

#include "sjkv/io/file_error.h"
#include "sjkv/io/paths.h"

namespace sjkv {

namespace {

std::string errno_text(int e) { return std::strerror(e); }

// ".<base>.tmp-" with <base> shortened (prefix + hash of the whole name) when the temporary
// name would not fit NAME_MAX; a final name that fits NAME_MAX must stay writable.
std::string temp_stem(const std::string& base) {
  constexpr size_t kReserve = 1 + 5 + 10 + 1 + 10;  // ".", ".tmp-", a 32-bit pid, "-", a 32-bit writer number
  if (base.size() + kReserve <= NAME_MAX) return "." + base + ".tmp-";
  uint32_t h = 2166136261u;  // FNV-1a: distinct long names get distinct temporaries
  for (unsigned char c : base) h = (h ^ c) * 16777619u;
  char hash[12];
  std::snprintf(hash, sizeof hash, "~%08x", h);
  return "." + base.substr(0, NAME_MAX - kReserve - 9) + hash + ".tmp-";
}

// ---- cleanup on SIGINT / SIGTERM / SIGHUP -------------------------------------------------
// A fixed table the handler can walk without allocating; unlink() is async-signal-safe.
constexpr int kSlots = 64;
struct Slot {
  std::atomic<int> state{0};  // 0 free, 1 being filled, 2 live file, 3 live folder
  char path[PATH_MAX];
};
Slot g_slots[kSlots];

extern "C" void sjkv_atomic_cleanup_handler(int sig) {
  for (Slot& s : g_slots)
    if (s.state.load() == 2) ::unlink(s.path);
  for (Slot& s : g_slots)  // folders after their files; rmdir keeps a folder that is not empty
    if (s.state.load() == 3) ::rmdir(s.path);
  ::signal(sig, SIG_DFL);
  ::raise(sig);
}

void install_handlers() {
  static std::once_flag once;
  std::call_once(once, [] {
    for (int sig : {SIGINT, SIGTERM, SIGHUP}) {
      struct sigaction old {};
      if (::sigaction(sig, nullptr, &old) != 0) continue;
      // Leave a program's own handler (or an ignored signal) alone.
      if (!(old.sa_flags & SA_SIGINFO) && old.sa_handler == SIG_DFL) {
        struct sigaction sa {};
        sa.sa_handler = sjkv_atomic_cleanup_handler;
        sigemptyset(&sa.sa_mask);
        ::sigaction(sig, &sa, nullptr);
      }
    }
  });
}

int register_temp(const std::string& path, bool folder = false) {
  if (path.size() >= PATH_MAX) return -1;
  install_handlers();
  for (int i = 0; i < kSlots; ++i) {
    int expected = 0;
    if (g_slots[i].state.compare_exchange_strong(expected, 1)) {
      std::memcpy(g_slots[i].path, path.c_str(), path.size() + 1);
      g_slots[i].state.store(folder ? 3 : 2);
      return i;
    }
  }
  return -1;  // table full: this temporary is only removed by the destructor
}

void unregister_temp(int slot) {
  if (slot >= 0) g_slots[slot].state.store(0);
}

bool all_digits(const std::string& s, size_t max) {
  return !s.empty() && s.size() <= max && s.find_first_not_of("0123456789") == std::string::npos;
}

// Removes ".<base>.tmp-<pid>[-<n>]" files in `dir` left by processes that no longer exist (a
// SIGKILL, a power cut). Only names of exactly that shape are touched.
void remove_stale(const std::string& dir, const std::string& stem) {
  DIR* d = ::opendir(dir.c_str());
  if (!d) return;
  const long self = static_cast<long>(::getpid());
  while (const dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (name.size() <= stem.size() || name.compare(0, stem.size(), stem) != 0) continue;
    const std::string tail = name.substr(stem.size());
    const size_t dash = tail.find('-');
    const std::string digits = tail.substr(0, dash);
    if (!all_digits(digits, 10) || (dash != std::string::npos && !all_digits(tail.substr(dash + 1), 10))) continue;
    const long pid = std::strtol(digits.c_str(), nullptr, 10);
    if (pid <= 0 || pid == self) continue;
    if (::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH) (void)::unlinkat(dirfd(d), name.c_str(), 0);
  }
  ::closedir(d);
}

std::string temp_folder() {
  const char* t = std::getenv("TMPDIR");
  return t && *t ? std::string(t) : std::string("/tmp");
}

void write_all_fd(int fd, const unsigned char* p, size_t n, const std::string& name) {
  while (n > 0) {
    const ssize_t w = ::write(fd, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      throw FileError(name, "write failed: " + errno_text(errno));
    }
    p += w;
    n -= static_cast<size_t>(w);
  }
}

}  // namespace

std::string atomic_temp_name(const std::string& final_path, long pid, uint32_t writer) {
  const size_t slash = final_path.find_last_of('/');
  const std::string prefix = slash == std::string::npos ? std::string() : final_path.substr(0, slash + 1);
  return prefix + temp_stem(base_name(final_path)) + std::to_string(pid) +
         (writer ? "-" + std::to_string(writer) : std::string());
}

bool same_file(const std::string& a, const std::string& b) {
  struct stat sa, sb;
  if (::stat(a.c_str(), &sa) != 0 || ::stat(b.c_str(), &sb) != 0) return false;
  return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

namespace {

// Returns true when the destination is a character device (written through).
bool checked_destination(const std::string& p) {
  if (p.empty() || p.back() == '/') throw FileError(p, "not a file name");
  struct stat st;
  if (::stat(p.c_str(), &st) == 0) {
    if (S_ISDIR(st.st_mode)) throw FileError(p, "is a folder, not a file");
    if (S_ISCHR(st.st_mode)) return true;
    if (!S_ISREG(st.st_mode))
      throw FileError(p, "exists and is not a regular file (a FIFO, socket or block device); not replacing it");
    return false;
  }
  struct stat sd;
  const std::string dir = parent_folder(p);
  if (::stat(dir.c_str(), &sd) != 0 || !S_ISDIR(sd.st_mode)) throw FileError(p, "the folder " + dir + " does not exist");
  return false;
}

}  // namespace

void check_output_path(const std::string& final_path) { (void)checked_destination(final_path); }

AtomicOutput::AtomicOutput(std::string final_path) : final_(std::move(final_path)) {
  device_ = checked_destination(final_);
  const long pid = static_cast<long>(::getpid());
  // The device's bytes wait in $TMPDIR under a fixed name, a file's beside it.
  const std::string model = device_ ? temp_folder() + "/sjkv-device-output" : final_;
  remove_stale(parent_folder(model), temp_stem(base_name(model)));
  // Created now (O_EXCL) so a permission problem is reported with the OS's reason before any
  // work, and so that writers in several threads of one process never share a temporary: the
  // first takes ".NAME.tmp-PID", one that finds it taken ".NAME.tmp-PID-N" (N unique in the
  // process). The writer then truncates and fills it.
  static std::atomic<uint32_t> next_writer{1};
  for (int attempt = 0;; ++attempt) {
    uint32_t writer = 0;
    if (attempt > 0)
      do writer = next_writer.fetch_add(1);
      while (writer == 0);  // 0 is the plain name; the counter may wrap
    temp_ = atomic_temp_name(model, pid, writer);
    slot_ = register_temp(temp_);
    const int fd = ::open(temp_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd >= 0) {
      ::close(fd);
      return;
    }
    const int e = errno;
    unregister_temp(slot_);
    slot_ = -1;
    if (e != EEXIST || attempt >= 1000) {
      const std::string name = temp_;
      temp_.clear();
      throw FileError(final_, "cannot create temporary file " + name + ": " + errno_text(e));
    }
  }
}

AtomicOutput::~AtomicOutput() {
  if (!done_ && !temp_.empty()) ::unlink(temp_.c_str());
  unregister_temp(slot_);
}

void AtomicOutput::prepare() {
  if (prepared_ || done_) return;
  const int fd = ::open(temp_.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int e = errno;
    throw FileError(final_, "cannot reopen temporary file " + temp_ + ": " + errno_text(e));
  }
  if (::fsync(fd) != 0) {
    const int e = errno;
    ::close(fd);
    throw FileError(final_, "cannot write (fsync failed: " + errno_text(e) + ")");
  }
  ::close(fd);
  prepared_ = true;
}

void AtomicOutput::publish() {
  if (done_) return;
  prepare();
  if (device_) {
    // Copy the bytes into the device; the node itself stays.
    const int in = ::open(temp_.c_str(), O_RDONLY | O_CLOEXEC);
    if (in < 0) throw FileError(final_, "cannot reopen temporary file " + temp_ + ": " + errno_text(errno));
    const int out = ::open(final_.c_str(), O_WRONLY | O_CLOEXEC);
    if (out < 0) {
      const int e = errno;
      ::close(in);
      throw FileError(final_, "cannot open for writing: " + errno_text(e));
    }
    unsigned char buf[1 << 16];
    try {
      for (;;) {
        const ssize_t r = ::read(in, buf, sizeof buf);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) throw FileError(final_, "cannot read back temporary file " + temp_ + ": " + errno_text(errno));
        if (r == 0) break;
        write_all_fd(out, buf, static_cast<size_t>(r), final_);
      }
    } catch (...) {
      ::close(in);
      ::close(out);
      throw;
    }
    ::close(in);
    if (::close(out) != 0) throw FileError(final_, "write failed: " + errno_text(errno));
    ::unlink(temp_.c_str());
    done_ = true;
    return;
  }
  if (::rename(temp_.c_str(), final_.c_str()) != 0) {
    const int e = errno;
    throw FileError(final_, "cannot rename " + temp_ + " over it: " + errno_text(e));
  }
  done_ = true;
  // Make the rename itself durable. Some file systems refuse fsync on a folder (EINVAL);
  // the file is complete under its final name either way.
  const int dfd = ::open(parent_folder(final_).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    (void)::fsync(dfd);
    ::close(dfd);
  }
}

void AtomicOutput::commit() {
  prepare();
  publish();
}

void commit_all(const std::vector<AtomicOutput*>& outs) {
  for (AtomicOutput* o : outs)
    if (o) o->prepare();
  // Character devices first: writing into one can fail (/dev/full) and a rename cannot be taken
  // back, so every device has its bytes before the first file appears.
  for (AtomicOutput* o : outs)
    if (o && o->device()) o->publish();
  // The renames with SIGINT/SIGTERM/SIGHUP held back: a signal then arrives before the first
  // or after the last, never between two (which would leave part of the set).
  struct Held {
    sigset_t old;
    Held() {
      sigset_t s;
      sigemptyset(&s);
      for (int sig : {SIGINT, SIGTERM, SIGHUP}) sigaddset(&s, sig);
      pthread_sigmask(SIG_BLOCK, &s, &old);
    }
    ~Held() { pthread_sigmask(SIG_SETMASK, &old, nullptr); }
  } held;
  for (AtomicOutput* o : outs)
    if (o) o->publish();
}

void write_file_bytes(const std::string& path, const void* data, size_t n, const std::string& name_for_errors) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
  if (fd < 0) throw FileError(name_for_errors, "cannot create: " + errno_text(errno));
  try {
    write_all_fd(fd, static_cast<const unsigned char*>(data), n, name_for_errors);
  } catch (...) {
    ::close(fd);
    throw;
  }
  if (::close(fd) != 0) throw FileError(name_for_errors, "write failed: " + errno_text(errno));
}

MadeFolder::MadeFolder(std::string path) : path_(std::move(path)) {
  if (::mkdir(path_.c_str(), 0777) == 0) {
    made_ = true;
    slot_ = register_temp(path_, true);
    return;
  }
  const int e = errno;
  struct stat st;
  if (e == EEXIST && ::stat(path_.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) return;
  throw FileError(path_, e == EEXIST ? std::string("exists and is not a folder")
                                     : "cannot create the folder: " + errno_text(e));
}

MadeFolder::~MadeFolder() {
  unregister_temp(slot_);
  if (made_ && !kept_) ::rmdir(path_.c_str());
}

void MadeFolder::keep() {
  kept_ = true;
  unregister_temp(slot_);
  slot_ = -1;
}

void write_file_atomic(const std::string& path, const void* data, size_t n) {
  AtomicOutput out(path);
  write_file_bytes(out.temp_path(), data, n, path);
  out.commit();
}

}  // namespace sjkv
