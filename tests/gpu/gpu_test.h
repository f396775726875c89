// Shared by the GPU test programs: each test skips with a clear message when no CUDA device
// is present, so CI stays green on machines without one.
#pragma once

#include <gtest/gtest.h>

#include "sjkv/cuda/codec_cuda.h"

#define SJKV_REQUIRE_GPU()                                                           \
  do {                                                                               \
    if (::sjkv::cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device present"; \
  } while (0)
