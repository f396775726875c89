// GoogleTest's main for sjkv's test programs, with the tools' OpenMP wait (sjkv/parallel.h):
// ctest runs two programs at once on two cores, where OpenMP's default spin made the thread
// tests tens of times slower.
#include <gtest/gtest.h>

#include "sjkv/parallel.h"

int main(int argc, char** argv) {
  sjkv::settle_parallel_runtime(argv);
  testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
