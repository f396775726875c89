// Shared by the sjkv command-line tools: exit codes, one-line errors, progress on stderr.
#pragma once

#include <unistd.h>

#include <cstdio>
#include <exception>
#include <functional>
#include <stdexcept>
#include <string>

#include "sjkv/io/file_error.h"

namespace sjkv::cli {

enum Exit : int { kOk = 0, kUsage = 1, kBadInput = 2, kInternal = 3 };

// A progress bar on stderr when it is a terminal and not silenced; a no-op otherwise.
class Progress {
 public:
  Progress(std::string what, bool quiet) : what_(std::move(what)), on_(!quiet && isatty(STDERR_FILENO)) {}
  ~Progress() { finish(); }
  void update(uint64_t done, uint64_t total) {
    if (!on_ || total == 0) return;
    const int width = 30;
    const int fill = static_cast<int>(width * done / total);
    std::fprintf(stderr, "\r%s [%.*s%*s] %3d%% %llu/%llu", what_.c_str(), fill, "##############################",
                 width - fill, "", static_cast<int>(100 * done / total), static_cast<unsigned long long>(done),
                 static_cast<unsigned long long>(total));
    std::fflush(stderr);
    shown_ = true;
  }
  void finish() {
    if (shown_) std::fprintf(stderr, "\n");
    shown_ = false;
  }
  std::function<void(uint64_t, uint64_t)> callback() {
    return [this](uint64_t d, uint64_t t) { update(d, t); };
  }

 private:
  std::string what_;
  bool on_, shown_ = false;
};

// A command line that parses but makes no sense (exit 1, like CLI11's own usage errors).
struct UsageError : std::invalid_argument {
  using std::invalid_argument::invalid_argument;
};

// Runs a subcommand body and turns exceptions into one line and an exit code.
inline int guarded(const char* tool, const std::function<int()>& body) {
  try {
    return body();
  } catch (const UsageError& e) {
    std::fprintf(stderr, "%s: %s\n", tool, e.what());
    return kUsage;
  } catch (const FileError& e) {
    std::fprintf(stderr, "%s: %s\n", tool, e.what());
    return kBadInput;
  } catch (const std::invalid_argument& e) {
    std::fprintf(stderr, "%s: %s\n", tool, e.what());
    return kBadInput;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: internal error: %s\n", tool, e.what());
    return kInternal;
  }
}

}  // namespace sjkv::cli
