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

// One job at a time, its items cut into one contiguous range per thread, as a static split
// would: each thread takes items from the front of its own range and, when that is empty,
// steals from the back of the others'. On an idle machine every thread runs its own share;
// under load a thread the OS has not scheduled holds back only the item it runs.
//
// A range is one word: the job's generation, the range's front and its back. Claims are CAS
// on that word, so a claim knows which job it belongs to; a thread that wakes late for a
// finished job finds another generation (or empty ranges) and claims nothing, and a claimed
// item keeps its job (and the job's fields) alive until it is done.
constexpr int kIndexBits = 24, kGenBits = 16;
constexpr uint64_t kIndexMask = (uint64_t{1} << kIndexBits) - 1, kGenMask = (uint64_t{1} << kGenBits) - 1;
constexpr long kMaxClaims = 1L << (kIndexBits - 1);
constexpr int kMaxThreads = 1024;  // the tools' --threads bound

uint64_t pack(uint64_t gen, uint64_t front, uint64_t back) {
  return (gen << (2 * kIndexBits)) | (front << kIndexBits) | back;
}
uint64_t gen_of(uint64_t w) { return w >> (2 * kIndexBits); }
uint64_t front_of(uint64_t w) { return (w >> kIndexBits) & kIndexMask; }
uint64_t back_of(uint64_t w) { return w & kIndexMask; }

struct alignas(64) Range {
  std::atomic<uint64_t> w{0};
};

thread_local bool t_in_pool = false;

class Pool {
 public:
  // Runs the job on the caller and the workers; false when the pool is busy with another
  // caller's job (the caller then runs it alone).
  bool run(long n, int threads, void (*call)(void*, long), void* ctx) {
    std::unique_lock<std::mutex> issue(issue_, std::try_to_lock);
    if (!issue.owns_lock()) return false;
    resize(threads - 1);
    const long claims = std::min(n, kMaxClaims);
    call_ = call;
    ctx_ = ctx;
    n_ = n;
    per_claim_ = (n + claims - 1) / claims;
    count_ = (n + per_claim_ - 1) / per_claim_;
    const long count = count_;
    error_ = nullptr;
    failed_.store(false);
    done_.store(0);
    gen_ = (gen_ + 1) & kGenMask;
    for (int r = 0; r < threads; ++r)
      ranges_[static_cast<size_t>(r)].w.store(
          pack(gen_, static_cast<uint64_t>(count * r / threads), static_cast<uint64_t>(count * (r + 1) / threads)));
    n_ranges_.store(threads);
    current_.store(gen_);
    if (sleepers_.load() > 0) {
      std::lock_guard<std::mutex> g(mu_);
      work_cv_.notify_all();
    }
    t_in_pool = true;
    take_items(0, gen_);
    t_in_pool = false;
    const auto all_done = [&] { return done_.load() == static_cast<uint64_t>(count); };
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
  // Claims one item of range r of job `gen`: from the front for its owner, else from the back.
  // -1 when the range is empty or belongs to another job.
  long claim(int r, uint64_t gen, bool owner) {
    std::atomic<uint64_t>& w = ranges_[static_cast<size_t>(r)].w;
    uint64_t cur = w.load();
    for (;;) {
      if (gen_of(cur) != gen) return -1;
      const uint64_t f = front_of(cur), b = back_of(cur);
      if (f >= b) return -1;
      const uint64_t next = owner ? pack(gen, f + 1, b) : pack(gen, f, b - 1);
      if (w.compare_exchange_weak(cur, next)) return static_cast<long>(owner ? f : b - 1);
    }
  }

  void run_claim(long c) {
    const long first = c * per_claim_, last = std::min(n_, first + per_claim_);
    for (long i = first; i < last && !failed_.load(std::memory_order_relaxed); ++i) {
      try {
        call_(ctx_, i);
      } catch (...) {
        std::lock_guard<std::mutex> g(error_mu_);
        if (!failed_.exchange(true)) error_ = std::current_exception();
      }
    }
  }

  // Runs thread `self`'s range of job `gen`, then what it can steal; reports the count once.
  void take_items(int self, uint64_t gen) {
    uint64_t ran = 0;
    for (long c; (c = claim(self, gen, true)) >= 0; ++ran) run_claim(c);
    // n_ranges_ is read only after a claim of this job succeeded or from the job's own word:
    // a stale count only makes a late thread look at ranges of another generation.
    const int nr = n_ranges_.load();
    for (int k = 1; k < nr; ++k) {
      const int r = (self + k) % nr;
      for (long c; (c = claim(r, gen, false)) >= 0; ++ran) run_claim(c);
    }
    if (ran == 0) return;  // count_ is read only by a thread whose claims keep this job alive
    if (done_.fetch_add(ran) + ran == static_cast<uint64_t>(count_) && caller_sleeping_.load()) {
      std::lock_guard<std::mutex> g(mu_);
      done_cv_.notify_one();
    }
  }

  // `seen`: the last job published before this worker started (a job published since then
  // is one to take, even if the thread starts after it). Worker `id` owns range id + 1.
  void work(int id, uint64_t seen) {
    t_in_pool = true;
    for (;;) {
      const auto fresh = [&] { return stop_id_.load() <= id || current_.load() != seen; };
      if (!spin_until(fresh)) {
        std::unique_lock<std::mutex> lk(mu_);
        sleepers_.fetch_add(1);
        work_cv_.wait(lk, fresh);
        sleepers_.fetch_sub(1);
      }
      if (stop_id_.load() <= id) return;
      seen = current_.load();
      take_items(id + 1, seen);
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
    for (int i = static_cast<int>(workers_.size()); i < want; ++i)
      workers_.emplace_back([this, i, g = gen_] { work(i, g); });
  }

  std::mutex issue_;  // held by the caller of the running job
  std::vector<std::thread> workers_;
  // Fixed: a thread that wakes late for a finished job may still read it.
  std::vector<Range> ranges_ = std::vector<Range>(kMaxThreads);
  uint64_t gen_ = 0;
  alignas(64) std::atomic<uint64_t> current_{0};  // the generation of the job to take
  alignas(64) std::atomic<uint64_t> done_{0};     // claims done
  std::atomic<int> stop_id_{1 << 30};
  void (*call_)(void*, long) = nullptr;
  void* ctx_ = nullptr;
  long n_ = 0, per_claim_ = 1, count_ = 0;  // items, items per claim, claims
  std::atomic<int> n_ranges_{1};
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
  threads = static_cast<int>(std::min<long>({static_cast<long>(threads), n, static_cast<long>(kMaxThreads)}));
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
