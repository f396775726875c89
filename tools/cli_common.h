// Shared by the sjkv command-line tools: exit codes, one-line errors, progress on stderr.
#pragma once

#include <CLI/CLI.hpp>
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <exception>
#include <functional>
#include <iostream>
#include <new>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "sjkv/cluster.h"
#include "sjkv/config.h"
#include "sjkv/io/atomic_file.h"
#include "sjkv/io/file_error.h"
#include "sjkv/io/gguf.h"
#include "sjkv/io/load.h"
#include "sjkv/io/model_geometry.h"
#include "sjkv/io/paths.h"
#include "sjkv/io/text.h"

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

// An output file checked before any work: a usable destination (FileError, exit 2), and not
// one of the inputs, compared by device and inode (UsageError, exit 1): writing it would
// destroy the input.
inline void check_output(const std::string& out, const char* option, const std::vector<std::string>& inputs) {
  for (const std::string& in : inputs)
    if (!in.empty() && same_file(out, in))
      throw UsageError(std::string(option) + " " + out + " is the input " + in + "; writing it would destroy the input");
  check_output_path(out);
}

// check_output for a file: not a folder, in a folder that exists (FileError naming the option,
// exit 2), and not one of the inputs (exit 1).
inline void check_output_file(const std::string& path, const char* option, const std::vector<std::string>& inputs) {
  if (is_folder(path)) throw FileError(path, std::string(option) + ": is a folder, not a file");
  if (!is_folder(parent_folder(path)))
    throw FileError(path, std::string(option) + ": the folder " + parent_folder(path) + " does not exist");
  check_output(path, option, inputs);
}

// The codec options that do not depend on the input, checked before any work (exit 1, naming
// the option). head_dim comes from the input; a size every option fits stands in for it, and
// the input's own is checked when it is read.
inline void check_codec_options(CodecConfig c) {
  if (c.head_dim == 0) c.head_dim = 256;
  const Unsupported u = can_implement(c);
  const char* option = nullptr;
  switch (u) {
    case Unsupported::group_invalid:
    case Unsupported::trellis_group: option = "--group"; break;
    case Unsupported::sink_invalid: option = "--sink"; break;
    case Unsupported::tail_not_group_aligned: option = "--tail"; break;
    case Unsupported::tail_max_invalid: option = "--tail / --tail-max"; break;
    case Unsupported::size_too_large: option = "--tail / --tail-max"; break;
    case Unsupported::bits_out_of_range:
    case Unsupported::body_invalid:
    case Unsupported::trellis_bits: option = "--bits / --body"; break;
    case Unsupported::trellis_axis: option = "--axis"; break;
    case Unsupported::iters_out_of_range: option = "--iters"; break;
    default: break;
  }
  if (option)
    throw UsageError(std::string(option) + ": " + describe(u) + " (group " + std::to_string(c.group) + ", sink " +
                     std::to_string(c.sink) + ", tail " +
                     std::to_string(c.tail) + ", tail_max " + std::to_string(c.tail_max) + ", bits " +
                     std::to_string(c.bits_k) + "/" + std::to_string(c.bits_v) + ")");
}

// A number option that must not be negative: CLI11 reads "-1" into an unsigned as 2^64 - 1.
inline const CLI::Validator& non_negative() {
  static const CLI::Validator v(
      [](std::string& s) -> std::string {
        return s.find('-') != std::string::npos ? "must not be negative: " + s : std::string();
      },
      "NONNEGATIVE");
  return v;
}

// A message for the terminal, on one line: control bytes (newline, carriage return and tab
// too, so that a path holding one is shown as it is) and bytes that are not UTF-8 (from a
// damaged file's strings, or a path) are shown as \xNN. Trailing line ends are dropped.
inline std::string printable(const std::string& m) {
  std::string o;
  size_t n = m.size();
  while (n > 0 && (m[n - 1] == '\n' || m[n - 1] == '\r')) --n;
  const auto* u = reinterpret_cast<const unsigned char*>(m.data());
  for (size_t i = 0; i < n;) {
    const unsigned char c = u[i];
    const size_t len = utf8_sequence_at(u, n, i);
    if (len == 0 || c < 0x20 || c == 0x7f) {  // control byte, or not UTF-8
      char b[8];
      std::snprintf(b, sizeof b, "\\x%02x", c);
      o += b;
      ++i;
    } else {
      o.append(m, i, len);
      i += len;
    }
  }
  return o;
}

// Runs a subcommand body and turns exceptions into one line and an exit code.
// A command line CLI11 refused, or --help: its text (from rank 0 alone under MPI) and the
// exit code, 0 for --help, else 1.
inline int parse_failed(const CLI::App& app, const CLI::ParseError& e) {
  std::ostringstream out, err;
  const int rc = app.exit(e, out, err);
  if (cluster::Comm::world().root()) {
    std::fputs(out.str().c_str(), stdout);
    std::fputs(err.str().c_str(), stderr);
  }
  return rc == 0 ? kOk : kUsage;
}

// An exception's exit code and the line printed after "<tool>: " (also what a rank hands
// rank 0 when it fails under MPI, sjkv/cluster.h).
inline int classify(const std::exception& e, std::string* line) {
  if (dynamic_cast<const UsageError*>(&e)) {
    *line = printable(e.what());
    return kUsage;
  }
  if (dynamic_cast<const FileError*>(&e) || dynamic_cast<const std::invalid_argument*>(&e)) {
    *line = printable(e.what());
    return kBadInput;
  }
  if (dynamic_cast<const std::bad_alloc*>(&e)) {
    *line = "out of memory (a size in the input or the options is too large for this machine)";
    return kBadInput;
  }
  *line = "internal error: " + printable(e.what());
  return kInternal;
}

// A subcommand that runs as one process: under more than one MPI rank, a usage error (printed
// once).
inline void one_process(const char* subcommand) {
  const cluster::Comm& comm = cluster::Comm::world();
  comm.agree([&](uint64_t&) {
    if (comm.distributed())
      throw UsageError(std::string(subcommand) + " runs as one process (" + std::to_string(comm.size()) +
                       " MPI ranks here); under mpirun only sjkv-replay score and sjkv-train spread their work");
  });
}

// Called first in main: a closed standard output is held by a read-only /dev/null, so that no
// file the tool opens becomes fd 1 (a report would land in it) and a report fails with EBADF.
inline void hold_standard_output() {
  if (::fcntl(STDOUT_FILENO, F_GETFD) != -1 || errno != EBADF) return;
  const int fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (fd >= 0 && fd != STDOUT_FILENO) {
    ::dup2(fd, STDOUT_FILENO);
    ::close(fd);
  }
}

// A report on standard output that was not all written (a full disk, /dev/full, a closed
// stdout) fails the command instead of exit 0 with nothing; closing a duplicate reports a
// write error the file system deferred to close (NFS).
inline void check_standard_output() {
  std::cout.flush();
  errno = 0;
  bool failed = std::fflush(stdout) != 0 || std::ferror(stdout) != 0 || !std::cout;
  int e = errno;
  if (!failed) {
    const int d = ::dup(STDOUT_FILENO);
    if (d >= 0 && ::close(d) != 0) {
      failed = true;
      e = errno;
    }
  }
  if (failed)
    throw FileError("standard output", std::string("cannot write the report: ") + (e ? std::strerror(e) : "write error"));
}

// Runs a subcommand body and turns exceptions into one line and an exit code. Under MPI a
// failure every rank agreed on is printed by rank 0 alone; one the other ranks cannot know
// of ends them all (they may be waiting for this rank).
inline int guarded(const char* tool, const std::function<int()>& body) {
  const cluster::Comm& comm = cluster::Comm::world();
  cluster::set_classifier(classify);
  try {
    const int rc = body();
    check_standard_output();
    return rc;
  } catch (const cluster::Failed& e) {
    if (*e.what()) std::fprintf(stderr, "%s: %s\n", tool, e.what());
    return e.code();
  } catch (const std::exception& e) {
    std::string line;
    const int code = classify(e, &line);
    if (comm.distributed()) {
      std::fprintf(stderr, "%s: rank %d: %s\n", tool, comm.rank(), line.c_str());
      std::fflush(stderr);
      comm.abort(code);
    }
    std::fprintf(stderr, "%s: %s\n", tool, line.c_str());
    return code;
  }
}

// Where a llama.cpp state file's layers are: from a GGUF model's geometry (--model, see
// import_options_for) or given by hand (--head-dim, --layers, --layer-ids, --kv-sections).
struct StateOptions {
  ImportOptions io;
  std::string model;
  // io, or the model's options: FileError (exit 2) on a bad GGUF, UsageError when its geometry
  // does not say.
  ImportOptions resolve() const {
    if (model.empty()) return io;
    const ModelGeometry g = geometry_from_gguf(GgufFile::open(model));
    try {
      return import_options_for(g);
    } catch (const std::invalid_argument& e) {
      throw UsageError("--model " + model + ": " + e.what());
    }
  }
};
// `what` names the input the options are for ("llama.cpp state files").
inline void add_state_options(CLI::App* app, StateOptions& s, const std::string& what) {
  CLI::Option* m = app->add_option("--model", s.model, what + ": the GGUF model they were saved from, whose metadata "
                                                      "gives the head size and the full-attention layers");
  for (CLI::Option* o : {app->add_option("--head-dim", s.io.head_dim, what + ": head size (or --model)"),
                         app->add_option("--layers", s.io.layers, what + ": layers to keep, as positions in the file (default: all)"),
                         app->add_option("--layer-ids", s.io.layer_ids, what + ": the model's layer number of each kept layer"),
                         app->add_option("--kv-sections", s.io.kv_sections,
                                         what + ": cache sections to read (0 = all; an iSWA model such as Gemma 3 writes "
                                                "its full-attention layers first)")})
    m->excludes(o);
}

}  // namespace sjkv::cli
