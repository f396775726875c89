// Path helpers for the tools and the file readers, in one place: names split at the last '/',
// folders checked with stat().
#pragma once

#include <limits.h>
#include <stdlib.h>
#include <sys/stat.h>

#include <string>

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
