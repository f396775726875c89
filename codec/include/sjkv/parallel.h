// How sjkv runs work on several threads without spinning away a busy machine's cores
// (docs/REPLAY.md, "Under load").
//
// A decoded token passes about 270 parallel loops. Under OpenMP every thread of the team must
// reach the end of each loop before the next starts: on a busy machine one thread that the OS
// has not scheduled holds the others, and with GNU OpenMP's default wait (spin 300,000 pause
// instructions before sleeping) the waiting thread also keeps a core from the one it waits
// for; two threads took 2.7x as long as one. OpenMP's passive wait instead costs a quarter of
// the decode speed on an idle machine (a sleeping thread takes tens of microseconds to wake).
//
// parallel_for gives each thread, the caller among them, a contiguous share of the items (a
// static split); a thread whose share is done steals from the back of the others', and the
// caller returns when every item has run: a thread that has no core holds back only the item
// it runs. Idle threads spin for kSpinMicros, so loops that follow each other closely find
// them awake, then sleep. The replay's hot loops and the sealing of batches run on it; the
// coarse OpenMP loops left (encoding, training) wait passively (settle_parallel_runtime).
#pragma once

#include <cstdint>
#include <type_traits>
#include <utility>

namespace sjkv {

// How long an idle pool thread (or a caller waiting for the last item) spins before it sleeps.
inline constexpr double kSpinMicros = 50.0;

namespace detail {
void run_items(long n, int threads, void (*call)(void*, long), void* ctx);
}

// Runs fn(i) for every i in [0, n) on up to `threads` threads (0: omp_get_max_threads(), so
// --threads, OMP_NUM_THREADS and omp_set_num_threads apply), the calling thread among them.
// Which thread runs an item is not fixed, so fn's result must not depend on it (per-thread
// scratch: thread_local). Runs on the calling thread alone for one thread or item, inside
// another parallel_for or OpenMP region, or while another thread's loop holds the pool. The
// first exception thrown by fn is rethrown here after the items already started have run.
template <class F>
void parallel_for(long n, int threads, F&& fn) {
  using Fn = std::remove_reference_t<F>;
  detail::run_items(
      n, threads, [](void* c, long i) { (*static_cast<Fn*>(c))(i); }, const_cast<void*>(static_cast<const void*>(&fn)));
}

// fn(lo, hi) over [0, n) in runs of `grain` (the last one shorter), as parallel_for: for loops
// whose single iteration is too small to be worth handing to another thread.
template <class F>
void parallel_for_ranges(long n, long grain, int threads, F&& fn) {
  if (n <= 0) return;
  grain = grain > 0 ? grain : 1;
  parallel_for((n + grain - 1) / grain, threads, [&](long it) {
    const long lo = it * grain;
    fn(lo, n - lo < grain ? n : lo + grain);
  });
}

// GNU OpenMP reads its wait policy once, when the library loads, before main runs. So, when
// the user has set neither OMP_WAIT_POLICY nor GOMP_SPINCOUNT (theirs stand), this sets
// OMP_WAIT_POLICY=PASSIVE and executes the program again (same pid, arguments and
// descriptors); the second start finds it set and returns at once. If the program cannot be
// executed again it runs on with the default. Call first in main, before any thread, file or
// MPI_Init. (import sjkv sets the same before it loads its module.)
void settle_parallel_runtime(char** argv);

}  // namespace sjkv
