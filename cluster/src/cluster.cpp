#include "sjkv/cluster.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <new>
#include <thread>

#include <omp.h>
#include <unistd.h>

#include "sjkv/io/file_error.h"
#include "sjkv/parallel.h"

#if defined(SJKV_HAVE_MPI)
#include <mpi.h>
#endif

namespace sjkv::cluster {

namespace {

Comm g_world;

int g_agree_depth = 0;

int default_classifier(const std::exception& e, std::string* line) {
  if (dynamic_cast<const std::bad_alloc*>(&e)) {
    *line = "out of memory";
    return 2;
  }
  if (dynamic_cast<const FileError*>(&e) || dynamic_cast<const std::invalid_argument*>(&e)) {
    *line = e.what();
    return 2;
  }
  *line = std::string("internal error: ") + e.what();
  return 3;
}

Classifier g_classifier = default_classifier;

}  // namespace

Packer& Packer::u64(uint64_t v) {
  for (int i = 0; i < 8; ++i) bytes.push_back(static_cast<uint8_t>(v >> (8 * i)));
  return *this;
}
Packer& Packer::f64(double v) {
  uint64_t u;
  std::memcpy(&u, &v, 8);
  return u64(u);
}
Packer& Packer::str(const std::string& s) {
  u64(s.size());
  bytes.insert(bytes.end(), s.begin(), s.end());
  return *this;
}

uint64_t Unpacker::u64() {
  if (b_.size() - p_ < 8) throw std::runtime_error("a message between ranks ended early");
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= static_cast<uint64_t>(b_[p_ + static_cast<size_t>(i)]) << (8 * i);
  p_ += 8;
  return v;
}
double Unpacker::f64() {
  const uint64_t u = u64();
  double v;
  std::memcpy(&v, &u, 8);
  return v;
}
std::string Unpacker::str() {
  const uint64_t n = u64();
  if (b_.size() - p_ < n) throw std::runtime_error("a message between ranks ended early");
  std::string s(reinterpret_cast<const char*>(b_.data() + p_), n);
  p_ += n;
  return s;
}

const Comm& Comm::world() { return g_world; }
bool Comm::in_agree() { return g_agree_depth > 0; }
void set_classifier(Classifier c) { g_classifier = c ? std::move(c) : Classifier(default_classifier); }

bool built_with_mpi() {
#if defined(SJKV_HAVE_MPI)
  return true;
#else
  return false;
#endif
}

#if defined(SJKV_HAVE_MPI)

namespace {

// Started by a launcher: Open MPI's mpirun, or a PMI/PMIx one (Slurm's srun, MPICH's hydra).
bool launched() {
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK", "PMI_SIZE"})
    if (std::getenv(v)) return true;
  return false;
}

void check(int rc, const char* what) {
  if (rc != MPI_SUCCESS) throw std::runtime_error(std::string(what) + " failed");
}

// Waits for a request without holding a core: polls for OpenMP's spin (kSpinMicros), then sleeps
// between polls, doubling the sleep up to half a millisecond. MPI's blocking calls poll
// without end, so a rank waiting for a slower one (the ordered sums, the final gathers) took
// a core from the ranks still working when there are more ranks than cores.
void wait_for(MPI_Request& req, const char* what) {
  int done = 0;
  const auto spin_end = std::chrono::steady_clock::now() + std::chrono::microseconds(static_cast<long>(kSpinMicros));
  while (std::chrono::steady_clock::now() < spin_end) {
    check(MPI_Test(&req, &done, MPI_STATUS_IGNORE), what);
    if (done) return;
  }
  auto nap = std::chrono::microseconds(20);
  for (;;) {
    check(MPI_Test(&req, &done, MPI_STATUS_IGNORE), what);
    if (done) return;
    std::this_thread::sleep_for(nap);
    nap = std::min(nap * 2, std::chrono::microseconds(500));
  }
}

// OpenMP threads per rank when neither --threads nor OMP_NUM_THREADS says: the node's cores
// shared among the ranks on it (at least one), within the cores this rank may run on.
void share_cores_among_local_ranks() {
  if (std::getenv("OMP_NUM_THREADS")) return;
  MPI_Comm local;
  if (MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &local) != MPI_SUCCESS) return;
  int n_local = 1;
  MPI_Comm_size(local, &n_local);
  MPI_Comm_free(&local);
  if (n_local <= 1) return;
  const long online = sysconf(_SC_NPROCESSORS_ONLN);
  const int share = static_cast<int>(std::max(1L, (online > 0 ? online : 1) / n_local));
  omp_set_num_threads(std::max(1, std::min(share, omp_get_num_procs())));
}

int as_int(size_t n) {
  if (n > static_cast<size_t>(std::numeric_limits<int>::max()))
    throw std::runtime_error("more than 2^31 bytes in one MPI message");
  return static_cast<int>(n);
}

}  // namespace

Session::Session(int* argc, char*** argv) {
  if (!launched()) return;
  int have = 0;
  MPI_Initialized(&have);
  if (!have && MPI_Init(argc, argv) != MPI_SUCCESS) {
    std::fprintf(stderr, "sjkv: MPI_Init failed\n");
    std::exit(3);
  }
  joined_ = true;
  MPI_Comm_rank(MPI_COMM_WORLD, &g_world.rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &g_world.size_);
  share_cores_among_local_ranks();
}

Session::~Session() {
  if (joined_) MPI_Finalize();
}

void Comm::ordered(Accumulator& acc, const std::function<void(Accumulator&)>& add) const {
  if (size_ == 1) {
    add(acc);
    return;
  }
  const int nd = as_int(acc.d.size()), nu = as_int(acc.u.size());
  if (rank_ > 0) {
    MPI_Request r;
    check(MPI_Irecv(acc.d.data(), nd, MPI_DOUBLE, rank_ - 1, 1, MPI_COMM_WORLD, &r), "MPI_Irecv");
    wait_for(r, "MPI_Irecv");
    check(MPI_Irecv(acc.u.data(), nu, MPI_UINT64_T, rank_ - 1, 2, MPI_COMM_WORLD, &r), "MPI_Irecv");
    wait_for(r, "MPI_Irecv");
  }
  add(acc);
  if (acc.d.size() != static_cast<size_t>(nd) || acc.u.size() != static_cast<size_t>(nu))
    throw std::logic_error("Comm::ordered: add changed the accumulator's sizes");
  if (rank_ + 1 < size_) {
    MPI_Request r;
    check(MPI_Isend(acc.d.data(), nd, MPI_DOUBLE, rank_ + 1, 1, MPI_COMM_WORLD, &r), "MPI_Isend");
    wait_for(r, "MPI_Isend");
    check(MPI_Isend(acc.u.data(), nu, MPI_UINT64_T, rank_ + 1, 2, MPI_COMM_WORLD, &r), "MPI_Isend");
    wait_for(r, "MPI_Isend");
  }
  MPI_Request r;
  check(MPI_Ibcast(acc.d.data(), nd, MPI_DOUBLE, size_ - 1, MPI_COMM_WORLD, &r), "MPI_Ibcast");
  wait_for(r, "MPI_Ibcast");
  check(MPI_Ibcast(acc.u.data(), nu, MPI_UINT64_T, size_ - 1, MPI_COMM_WORLD, &r), "MPI_Ibcast");
  wait_for(r, "MPI_Ibcast");
}

namespace {

std::vector<std::vector<uint8_t>> gather_to(const std::vector<uint8_t>& mine, int size, int rank, bool all) {
  long long n = static_cast<long long>(mine.size());
  std::vector<long long> sizes(static_cast<size_t>(size));
  MPI_Request r;
  if (all)
    check(MPI_Iallgather(&n, 1, MPI_LONG_LONG, sizes.data(), 1, MPI_LONG_LONG, MPI_COMM_WORLD, &r), "MPI_Iallgather");
  else
    check(MPI_Igather(&n, 1, MPI_LONG_LONG, sizes.data(), 1, MPI_LONG_LONG, 0, MPI_COMM_WORLD, &r), "MPI_Igather");
  wait_for(r, "MPI_Igather");
  std::vector<int> counts(static_cast<size_t>(size)), displs(static_cast<size_t>(size));
  size_t total = 0;
  if (all || rank == 0)
    for (int r = 0; r < size; ++r) {
      counts[static_cast<size_t>(r)] = as_int(static_cast<size_t>(sizes[static_cast<size_t>(r)]));
      displs[static_cast<size_t>(r)] = as_int(total);
      total += static_cast<size_t>(sizes[static_cast<size_t>(r)]);
    }
  std::vector<uint8_t> buf(total);
  const int mn = as_int(mine.size());
  if (all)
    check(MPI_Iallgatherv(mine.data(), mn, MPI_BYTE, buf.data(), counts.data(), displs.data(), MPI_BYTE, MPI_COMM_WORLD,
                          &r),
          "MPI_Iallgatherv");
  else
    check(MPI_Igatherv(mine.data(), mn, MPI_BYTE, buf.data(), counts.data(), displs.data(), MPI_BYTE, 0, MPI_COMM_WORLD,
                       &r),
          "MPI_Igatherv");
  wait_for(r, "MPI_Igatherv");
  std::vector<std::vector<uint8_t>> out;
  if (all || rank == 0)
    for (int r = 0; r < size; ++r) {
      const auto b = buf.begin() + displs[static_cast<size_t>(r)];
      out.emplace_back(b, b + counts[static_cast<size_t>(r)]);
    }
  return out;
}

}  // namespace

std::vector<std::vector<uint8_t>> Comm::gather(const std::vector<uint8_t>& mine) const {
  if (size_ == 1) return {mine};
  return gather_to(mine, size_, rank_, false);
}

std::vector<std::vector<uint8_t>> Comm::all_gather(const std::vector<uint8_t>& mine) const {
  if (size_ == 1) return {mine};
  return gather_to(mine, size_, rank_, true);
}

void Comm::broadcast(std::vector<uint8_t>& bytes) const {
  if (size_ == 1) return;
  long long n = static_cast<long long>(bytes.size());
  MPI_Request r;
  check(MPI_Ibcast(&n, 1, MPI_LONG_LONG, 0, MPI_COMM_WORLD, &r), "MPI_Ibcast");
  wait_for(r, "MPI_Ibcast");
  bytes.resize(static_cast<size_t>(n));
  check(MPI_Ibcast(bytes.data(), as_int(bytes.size()), MPI_BYTE, 0, MPI_COMM_WORLD, &r), "MPI_Ibcast");
  wait_for(r, "MPI_Ibcast");
}

void Comm::abort(int code) const {
  if (size_ > 1) MPI_Abort(MPI_COMM_WORLD, code);
  std::exit(code);
}

#else  // one process

Session::Session(int*, char***) {}
Session::~Session() = default;

void Comm::ordered(Accumulator& acc, const std::function<void(Accumulator&)>& add) const { add(acc); }
std::vector<std::vector<uint8_t>> Comm::gather(const std::vector<uint8_t>& mine) const { return {mine}; }
std::vector<std::vector<uint8_t>> Comm::all_gather(const std::vector<uint8_t>& mine) const { return {mine}; }
void Comm::broadcast(std::vector<uint8_t>&) const {}
void Comm::abort(int code) const { std::exit(code); }

#endif

void Comm::agree(const std::function<void(uint64_t& key)>& body) const {
  uint64_t key = 0;
  struct Depth {
    Depth() { ++g_agree_depth; }
    ~Depth() { --g_agree_depth; }
  };
  if (size_ == 1) {
    Depth d;
    body(key);
    return;
  }
  bool failed = false;
  int code = 0;
  std::string line;
  try {
    Depth d;
    body(key);
  } catch (const Failed& e) {  // agreed inside already: every rank has it, rank 0 the line
    failed = true;
    key = 0;
    code = e.code();
    line = e.what();
  } catch (const std::exception& e) {
    failed = true;
    code = g_classifier(e, &line);
  }
  Packer mine;
  mine.u64(failed).u64(key).u64(static_cast<uint32_t>(code)).str(line);
  const auto all = all_gather(mine.bytes);
  bool any = false;
  uint64_t first_key = 0;
  int first_code = 0;
  std::string first_line;
  for (const auto& b : all) {  // rank order: ties go to the lowest rank
    Unpacker in(b);
    const bool f = in.u64() != 0;
    const uint64_t k = in.u64();
    const int c = static_cast<int>(in.u64());
    std::string l = in.str();
    if (f && (!any || k < first_key)) {
      any = true;
      first_key = k;
      first_code = c;
      first_line = std::move(l);
    }
  }
  if (!any) return;
  throw Failed(first_code, rank_ == 0 ? first_line : std::string());
}

}  // namespace sjkv::cluster
