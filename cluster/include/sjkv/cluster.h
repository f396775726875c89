// The processes one run is spread over. Under an MPI launcher (mpirun, srun) in a build with
// SJKV_MPI, MPI_COMM_WORLD; otherwise this process alone, and every call below is what a
// single process does anyway (no copies, exceptions passed through as they are). Results
// never depend on the number of ranks: work is cut by the callers in a fixed order and
// combined with `ordered`, so the sums are the ones a single process adds.
#pragma once

#include <cstdint>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

namespace sjkv::cluster {

// Running totals handed from rank to rank; every rank gives the same sizes.
struct Accumulator {
  std::vector<double> d;
  std::vector<uint64_t> u;
};

// The bytes of a message between ranks, little-endian whatever the machines.
class Packer {
 public:
  Packer& u64(uint64_t v);
  Packer& f64(double v);
  Packer& str(const std::string& s);
  std::vector<uint8_t> bytes;
};
// Reads what a Packer wrote, in the same order; std::runtime_error past the end.
class Unpacker {
 public:
  explicit Unpacker(const std::vector<uint8_t>& b) : b_(b) {}
  uint64_t u64();
  double f64();
  std::string str();
  bool done() const { return p_ == b_.size(); }

 private:
  const std::vector<uint8_t>& b_;
  size_t p_ = 0;
};

// A failure every rank agreed on (Comm::agree): the tool exits with `code` (sjkv's exit codes);
// `message` is the line rank 0 prints, empty on the other ranks.
class Failed : public std::runtime_error {
 public:
  Failed(int code, const std::string& message) : std::runtime_error(message), code_(code) {}
  int code() const { return code_; }

 private:
  int code_;
};

class Comm {
 public:
  int rank() const { return rank_; }
  int size() const { return size_; }
  bool root() const { return rank_ == 0; }
  bool distributed() const { return size_ > 1; }

  // Rank 0 starts from `acc` as given; in rank order each rank calls add(acc) on what the
  // previous rank handed on; every rank ends with the last rank's totals.
  void ordered(Accumulator& acc, const std::function<void(Accumulator&)>& add) const;
  // Every rank's bytes, in rank order: on rank 0 (gather; empty elsewhere) or on all ranks.
  std::vector<std::vector<uint8_t>> gather(const std::vector<uint8_t>& mine) const;
  std::vector<std::vector<uint8_t>> all_gather(const std::vector<uint8_t>& mine) const;
  void broadcast(std::vector<uint8_t>& bytes) const;  // rank 0's bytes on every rank

  // Runs body on every rank; body sets `key` to the item it is working on (an input, a job,
  // in the order one process takes them). When it throws anywhere, every rank throws Failed
  // with the exit code of the failure with the lowest key (then the lowest rank), and rank 0
  // with its line, so the job fails with the message one process would have printed. Agreed
  // failures nest. Alone: body's own exception, as it is.
  void agree(const std::function<void(uint64_t& key)>& body) const;

  // An error outside `agree` while other ranks may wait: ends every rank with `code`.
  // (in_agree: whether this rank is inside a body of agree now.)
  [[noreturn]] void abort(int code) const;

  static const Comm& world();
  static bool in_agree();

 private:
  int rank_ = 0, size_ = 1;
  friend class Session;
};

// In main(), before anything else: joins MPI when an MPI launcher started the process (and the
// build has SJKV_MPI), and leaves it when destroyed. Without a launcher, nothing.
class Session {
 public:
  Session(int* argc, char*** argv);
  ~Session();
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

 private:
  bool joined_ = false;
};

bool built_with_mpi();

// How an exception is reported: the exit code, and the line after "tool: ". The tools install
// theirs (which knows their usage errors); the default gives FileError, std::invalid_argument
// and std::bad_alloc 2, anything else 3 ("internal error: ...").
using Classifier = std::function<int(const std::exception& e, std::string* line)>;
void set_classifier(Classifier c);

}  // namespace sjkv::cluster
