// Shared by the fuzz targets: the input as a file for readers that take a path, and the
// rule of every target: a reader may refuse bytes only with sjkv::FileError (or
// std::invalid_argument where the reader documents it); any other exception escapes and is
// a finding (libFuzzer reports it as a crash; the corpus driver as a failed test).
#pragma once

#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>

namespace sjkv_fuzz {

// A per-process file that holds the current input: in /dev/shm when writable (no disk
// traffic), else $TMPDIR or /tmp. Removed at exit.
inline const std::string& temp_path(const char* tag) {
  static const std::string path = [tag] {
    std::string dir = "/tmp";
    if (const char* t = std::getenv("TMPDIR"); t && *t) dir = t;
    if (access("/dev/shm", W_OK) == 0) dir = "/dev/shm";
    return dir + "/sjkv-fuzz-" + tag + "-" + std::to_string(getpid());
  }();
  static const bool registered = [] { return std::atexit([] { std::remove(path.c_str()); }) == 0; }();
  (void)registered;
  return path;
}

// Writes the input to temp_path(tag) and returns the path. Aborts when it cannot: a fuzz
// run that silently tests nothing is worse than one that stops.
inline const std::string& write_input(const char* tag, const uint8_t* data, size_t size) {
  const std::string& path = temp_path(tag);
  // A new file (inode) per input, as a program reading one file after another would see:
  // rewriting one file in place could let a library's state about the last file linger.
  std::remove(path.c_str());
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f || (size && std::fwrite(data, 1, size, f) != size) || std::fclose(f) != 0) {
    std::perror(path.c_str());
    std::abort();
  }
  return path;
}

// The oracle beyond "no crash, only documented exceptions": what a reader returns must pass
// the in-memory consistency check (Capture::check_consistent(), check_snapshot_consistent()),
// so a std::invalid_argument from `check` is a finding. SJKV_FUZZ_LENIENT=1 turns that off
// (the failure counts as a refusal), to keep fuzzing past a reported finding of that kind.
template <class Check>
void expect_consistent(Check check) {
  static const bool lenient = [] {
    const char* v = std::getenv("SJKV_FUZZ_LENIENT");
    return v && v[0] == '1';
  }();
  if (!lenient) {
    check();
    return;
  }
  try {
    check();
  } catch (const std::invalid_argument&) {
  }
}

}  // namespace sjkv_fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);
