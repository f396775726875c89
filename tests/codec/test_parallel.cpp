// sjkv::parallel_for (sjkv/parallel.h): every item runs once, on any number of threads, with
// callers that nest, race each other, change the thread count, throw, or run while another
// thread holds the pool; and a worker that has no core holds nothing back.
#include <gtest/gtest.h>
#include <omp.h>

#include <atomic>
#include <chrono>
#include <stdexcept>
#include <thread>
#include <vector>

#include "sjkv/parallel.h"

namespace {

// Runs n items on `threads` threads and checks that each ran exactly once.
void expect_each_once(long n, int threads) {
  std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
  sjkv::parallel_for(n, threads, [&](long i) { hits[static_cast<size_t>(i)].fetch_add(1); });
  for (long i = 0; i < n; ++i) ASSERT_EQ(hits[static_cast<size_t>(i)].load(), 1) << "item " << i << " of " << n;
}

TEST(ParallelFor, EveryItemOnceForAnyCountAndThreads) {
  for (int threads : {0, 1, 2, 3, 8})
    for (long n : {0L, 1L, 2L, 3L, 7L, 64L, 1000L}) expect_each_once(n, threads);
}

TEST(ParallelFor, ManyItemsShareClaims) {
  // More items than one job's claims: items go out in runs, still each once.
  expect_each_once(3'000'000, 2);
}

TEST(ParallelFor, ManySmallJobsInARow) {
  // Workers that wake late must not claim items of a later job twice, or of a finished one.
  for (int r = 0; r < 20000; ++r) {
    std::atomic<long> sum{0};
    const long n = 1 + r % 5;
    sjkv::parallel_for(n, 2, [&](long i) { sum.fetch_add(i + 1); });
    ASSERT_EQ(sum.load(), n * (n + 1) / 2) << "job " << r;
  }
}

TEST(ParallelFor, ThreadCountChangesBetweenJobs) {
  for (int r = 0; r < 200; ++r) expect_each_once(50, 1 + r % 4);
}

TEST(ParallelFor, NestedCallsRunOnTheCallingThread) {
  std::vector<std::atomic<int>> hits(100);
  sjkv::parallel_for(10, 2, [&](long i) {
    const auto outer = std::this_thread::get_id();
    sjkv::parallel_for(10, 2, [&](long j) {
      EXPECT_EQ(std::this_thread::get_id(), outer);
      hits[static_cast<size_t>(i * 10 + j)].fetch_add(1);
    });
  });
  for (auto& h : hits) EXPECT_EQ(h.load(), 1);
}

TEST(ParallelFor, InsideAnOpenMpRegionRunsAlone) {
  std::atomic<int> total{0}, team{0}, elsewhere{0};
#pragma omp parallel num_threads(2)
  {
    team.fetch_add(1);
    const auto me = std::this_thread::get_id();
    sjkv::parallel_for(10, 2, [&](long) {
      total.fetch_add(1);
      if (std::this_thread::get_id() != me) elsewhere.fetch_add(1);
    });
  }
  EXPECT_EQ(total.load(), 10 * team.load());
  EXPECT_EQ(elsewhere.load(), 0);
}

TEST(ParallelFor, ConcurrentCallersEachGetTheirItems) {
  std::vector<std::thread> callers;
  std::atomic<int> bad{0};
  for (int c = 0; c < 4; ++c)
    callers.emplace_back([&, c] {
      for (int r = 0; r < 300; ++r) {
        const long n = 1 + (c * 7 + r) % 40;
        std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
        sjkv::parallel_for(n, 2, [&](long i) { hits[static_cast<size_t>(i)].fetch_add(1); });
        for (auto& h : hits)
          if (h.load() != 1) bad.fetch_add(1);
      }
    });
  for (auto& t : callers) t.join();
  EXPECT_EQ(bad.load(), 0);
}

TEST(ParallelFor, TheFirstExceptionReachesTheCaller) {
  EXPECT_THROW(sjkv::parallel_for(100, 2,
                                   [&](long i) {
                                     if (i == 37) throw std::runtime_error("item 37");
                                   }),
               std::runtime_error);
  expect_each_once(100, 2);  // the pool still works
}

TEST(ParallelFor, AWorkerBusyElsewhereHoldsNothingBack) {
  // One item blocks until three quarters of the others have run: with a fixed split between
  // two threads the free one could run only its half; here it takes every run but the
  // blocked item's own (runs are a few per thread).
  // Each round is a fresh job, the first one on threads the pool has just started.
  for (int round = 0; round < 20; ++round) {
    std::atomic<long> others{0};
    std::atomic<bool> seen_all{false};
    const long n = 200;
    sjkv::parallel_for(n, 2, [&](long i) {
      if (i == 0) {
        const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
        while (others.load() < 3 * n / 4 && std::chrono::steady_clock::now() < until) std::this_thread::yield();
        seen_all.store(others.load() >= 3 * n / 4);
      } else {
        others.fetch_add(1);
      }
    });
    ASSERT_TRUE(seen_all.load()) << "round " << round << ": the other thread did not take the items";
    EXPECT_EQ(others.load(), n - 1);
  }
}

}  // namespace
