#include "sjkv/parallel.h"

#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace sjkv {

namespace {

inline void relax() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#else
  std::this_thread::yield();
#endif
}

// Spins until done() or kSpinMicros have passed; true when done() held.
template <class Done>
bool spin_until(Done done) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::nanoseconds(static_cast<long>(kSpinMicros * 1000));
  for (;;) {
    for (int i = 0; i < 64; ++i) {
      if (done()) return true;
      relax();
    }
    if (std::chrono::steady_clock::now() >= end) return done();
  }
}

// One job at a time. Its generation, its number of claims and the next claim share one word,
// so a thread that claims with one fetch_add knows which job the claim belongs to and whether
// it is a real one; a claim below the count keeps that job (and its fields) alive until it
// is done, and a thread that wakes late for a finished job claims nothing.
constexpr int kNextBits = 20, kCountBits = 20, kGenBits = 24;
constexpr uint64_t kNextMask = (uint64_t{1} << kNextBits) - 1, kCountMask = (uint64_t{1} << kCountBits) - 1;
constexpr uint64_t kGenMask = (uint64_t{1} << kGenBits) - 1;
// Claims per job at most, leaving room for every thread's one claim past the end.
constexpr long kMaxClaims = (1L << kNextBits) - 4096;
constexpr long kRunsPerThread = 4;

uint64_t gen_of(uint64_t s) { return s >> (kNextBits + kCountBits); }
uint64_t count_of(uint64_t s) { return (s >> kNextBits) & kCountMask; }
uint64_t next_of(uint64_t s) { return s & kNextMask; }

thread_local bool t_in_pool = false;

class Pool {
 public:
  // Runs the job on the caller and the workers; false when the pool is busy with another
  // caller's job (the caller then runs it alone).
  bool run(long n, int threads, void (*call)(void*, long), void* ctx) {
    std::unique_lock<std::mutex> issue(issue_, std::try_to_lock);
    if (!issue.owns_lock()) return false;
    resize(threads - 1);
    // A few contiguous runs per thread: few atomic claims on the shared word and a stream of
    // neighbouring items for each thread, while a thread that stalls holds back one run.
    const long claims = std::min({n, kMaxClaims, static_cast<long>(threads) * kRunsPerThread});
    call_ = call;
    ctx_ = ctx;
    n_ = n;
    per_claim_ = (n + claims - 1) / claims;
    error_ = nullptr;
    failed_.store(false);
    done_.store(0);
    gen_ = (gen_ + 1) & kGenMask;
    const uint64_t count = static_cast<uint64_t>((n + per_claim_ - 1) / per_claim_);
    state_.store((gen_ << (kNextBits + kCountBits)) | (count << kNextBits));
    if (sleepers_.load() > 0) {
      std::lock_guard<std::mutex> g(mu_);
      work_cv_.notify_all();
    }
    t_in_pool = true;
    while (claim_and_run()) {
    }
    t_in_pool = false;
    const auto all_done = [&] { return done_.load() == count; };
    if (!spin_until(all_done)) {
      std::unique_lock<std::mutex> lk(mu_);
      caller_sleeping_.store(true);
      done_cv_.wait(lk, all_done);
      caller_sleeping_.store(false);
    }
    if (error_) std::rethrow_exception(error_);
    return true;
  }

 private:
  // Claims one share of the current job and runs it; false when the job had none left.
  bool claim_and_run() {
    const uint64_t s = state_.fetch_add(1);
    const uint64_t count = count_of(s), c = next_of(s);
    if (c >= count) return false;
    const long first = static_cast<long>(c) * per_claim_, last = std::min(n_, first + per_claim_);
    for (long i = first; i < last && !failed_.load(std::memory_order_relaxed); ++i) {
      try {
        call_(ctx_, i);
      } catch (...) {
        std::lock_guard<std::mutex> g(error_mu_);
        if (!failed_.exchange(true)) error_ = std::current_exception();
      }
    }
    if (done_.fetch_add(1) + 1 == count && caller_sleeping_.load()) {
      std::lock_guard<std::mutex> g(mu_);
      done_cv_.notify_one();
    }
    return true;
  }

  // `seen`: the last job published before this worker started (a job published since then
  // is one to take, even if the thread starts after it).
  void work(int id, uint64_t seen) {
    t_in_pool = true;
    for (;;) {
      const auto fresh = [&] { return stop_id_.load() <= id || gen_of(state_.load()) != seen; };
      if (!spin_until(fresh)) {
        std::unique_lock<std::mutex> lk(mu_);
        sleepers_.fetch_add(1);
        work_cv_.wait(lk, fresh);
        sleepers_.fetch_sub(1);
      }
      if (stop_id_.load() <= id) return;
      seen = gen_of(state_.load());
      while (claim_and_run()) {
      }
    }
  }

  // Workers 0..want-1 run; those above stop (when a run asks for fewer threads than before).
  void resize(int want) {
    want = std::max(0, want);
    if (static_cast<int>(workers_.size()) == want) return;
    if (static_cast<int>(workers_.size()) > want) {
      {
        std::lock_guard<std::mutex> g(mu_);
        stop_id_.store(want);
        work_cv_.notify_all();
      }
      for (size_t i = static_cast<size_t>(want); i < workers_.size(); ++i) workers_[i].join();
      workers_.resize(static_cast<size_t>(want));
      stop_id_.store(1 << 30);
      return;
    }
    for (int i = static_cast<int>(workers_.size()); i < want; ++i) workers_.emplace_back([this, i, g = gen_] { work(i, g); });
  }

  std::mutex issue_;  // held by the caller of the running job
  std::vector<std::thread> workers_;
  uint64_t gen_ = 0;
  alignas(64) std::atomic<uint64_t> state_{0};
  alignas(64) std::atomic<uint64_t> done_{0};
  std::atomic<int> stop_id_{1 << 30};
  void (*call_)(void*, long) = nullptr;
  void* ctx_ = nullptr;
  long n_ = 0, per_claim_ = 1;
  std::atomic<bool> failed_{false};
  std::mutex error_mu_;
  std::exception_ptr error_;
  std::mutex mu_;  // for sleeping only
  std::condition_variable work_cv_, done_cv_;
  std::atomic<int> sleepers_{0};
  std::atomic<bool> caller_sleeping_{false};
};

Pool& pool() {
  static Pool* p = new Pool;  // never destroyed: its sleeping workers end with the process
  return *p;
}

}  // namespace

namespace detail {

void run_items(long n, int threads, void (*call)(void*, long), void* ctx) {
  if (n <= 0) return;
  if (threads <= 0) threads = omp_get_max_threads();
  threads = static_cast<int>(std::min<long>(threads, n));
  if (threads > 1 && !t_in_pool && !omp_in_parallel() && pool().run(n, threads, call, ctx)) return;
  for (long i = 0; i < n; ++i) call(ctx, i);
}

}  // namespace detail

void settle_parallel_runtime(char** argv) {
  if (std::getenv("OMP_WAIT_POLICY") || std::getenv("GOMP_SPINCOUNT")) return;
  if (setenv("OMP_WAIT_POLICY", "PASSIVE", 1) != 0) return;
  if (argv == nullptr || argv[0] == nullptr) return;
  execv("/proc/self/exe", argv);
  // Not executed again (no /proc): the runtime keeps the default it read at load.
}

}  // namespace sjkv
