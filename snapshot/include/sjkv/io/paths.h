// Path helpers for the tools and the file readers, in one place: names split at the last '/',
// folders checked with stat().
#pragma once

#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "sjkv/io/file_error.h"

namespace sjkv {

// The part after the last '/' (all of `p` when it has none).
inline std::string base_name(const std::string& p) {
  const size_t s = p.find_last_of('/');
  return s == std::string::npos ? p : p.substr(s + 1);
}

// The folder that holds `p`, trailing slashes ignored: "." for a bare name, "/" at the root.
inline std::string parent_folder(const std::string& p) {
  std::string q = p;
  while (q.size() > 1 && q.back() == '/') q.pop_back();
  const size_t s = q.find_last_of('/');
  if (s == std::string::npos) return ".";
  return s == 0 ? "/" : q.substr(0, s);
}

inline bool path_exists(const std::string& p) {
  struct stat st;
  return ::stat(p.c_str(), &st) == 0;
}

inline bool is_folder(const std::string& p) {
  struct stat st;
  return ::stat(p.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

// Opens an input for reading, refusing (FileError) what is not a regular file without
// blocking: open() of a FIFO waits for a writer, hence O_NONBLOCK until fstat() has looked.
inline int open_input_file(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) throw FileError(path, std::string("cannot open: ") + std::strerror(errno));
  struct stat st;
  const char* what = nullptr;
  if (::fstat(fd, &st) != 0) what = "cannot stat";
  else if (S_ISDIR(st.st_mode)) what = "is a folder, not a regular file";
  else if (S_ISFIFO(st.st_mode)) what = "is a FIFO, not a regular file";
  else if (S_ISSOCK(st.st_mode)) what = "is a socket, not a regular file";
  else if (!S_ISREG(st.st_mode)) what = "is a device, not a regular file";
  if (what || ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK) != 0) {
    ::close(fd);
    throw FileError(path, what ? what : "cannot read");
  }
  return fd;
}

// open_input_file's check alone, for readers that open the file themselves (HDF5, streams).
inline void check_input_file(const std::string& path) { ::close(open_input_file(path)); }

// Both paths name the same file, compared through their folders' real paths (the file itself
// need not exist yet; same_file in atomic_file.h compares existing files by inode).
inline bool same_path(const std::string& a, const std::string& b) {
  if (a == b) return true;
  auto canon = [](const std::string& p) {
    char buf[PATH_MAX];
    if (!::realpath(parent_folder(p).c_str(), buf)) return p;
    return std::string(buf) + "/" + base_name(p);
  };
  return canon(a) == canon(b);
}

}  // namespace sjkv
