// Write to ".<name>.tmp-<pid>" beside the destination, fsync, rename (docs/FORMAT.md §1).
#include "sjkv/io/atomic_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>

#include "sjkv/io/file_error.h"

namespace sjkv {

namespace {

std::string dir_of(const std::string& p) {
  const size_t slash = p.find_last_of('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return p.substr(0, slash);
}

std::string base_of(const std::string& p) {
  const size_t slash = p.find_last_of('/');
  return slash == std::string::npos ? p : p.substr(slash + 1);
}

std::string temp_name_for(const std::string& final_path) {
  const size_t slash = final_path.find_last_of('/');
  const std::string prefix = slash == std::string::npos ? std::string() : final_path.substr(0, slash + 1);
  return prefix + "." + base_of(final_path) + ".tmp-" + std::to_string(static_cast<long>(getpid()));
}

std::string errno_text(int e) { return std::strerror(e); }

}  // namespace

AtomicOutput::AtomicOutput(std::string final_path) : final_(std::move(final_path)) {
  if (final_.empty() || final_.back() == '/') throw FileError(final_, "not a file name");
  temp_ = temp_name_for(final_);
  // Create it now so a missing folder or a permission problem is reported with the OS's
  // reason before any work; the writer then truncates and fills it.
  const int fd = ::open(temp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
  if (fd < 0) {
    const int e = errno;
    throw FileError(final_, "cannot create temporary file " + temp_ + ": " + errno_text(e));
  }
  ::close(fd);
}

AtomicOutput::~AtomicOutput() {
  if (!done_) ::unlink(temp_.c_str());
}

void AtomicOutput::commit() {
  if (done_) return;
  const int fd = ::open(temp_.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int e = errno;
    throw FileError(final_, "cannot reopen temporary file " + temp_ + ": " + errno_text(e));
  }
  if (::fsync(fd) != 0) {
    const int e = errno;
    ::close(fd);
    throw FileError(final_, "fsync of " + temp_ + " failed: " + errno_text(e));
  }
  ::close(fd);
  if (::rename(temp_.c_str(), final_.c_str()) != 0) {
    const int e = errno;
    throw FileError(final_, "cannot rename " + temp_ + " over it: " + errno_text(e));
  }
  done_ = true;
  // Make the rename itself durable. Some file systems refuse fsync on a folder (EINVAL);
  // the file is complete under its final name either way.
  const int dfd = ::open(dir_of(final_).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    (void)::fsync(dfd);
    ::close(dfd);
  }
}

}  // namespace sjkv
