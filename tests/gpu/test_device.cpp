// The tools' device switch (sjkv/device.h): --device resolved once, CPU pieces empty, the
// refusals of --device cuda with the tools' texts.
#include <gtest/gtest.h>

#include <stdexcept>
#include <string>

#include "sjkv/device.h"

using namespace sjkv;

namespace {

TEST(Device, DefaultAndCpuAreTheCpuWithNothingToHandDown) {
  for (const Device& d : {Device(), Device::resolve("cpu")}) {
    EXPECT_FALSE(d.cuda());
    EXPECT_EQ(d.describe(), "cpu");
    EXPECT_EQ(d.gpu_name(), "");
    EXPECT_FALSE(static_cast<bool>(d.sealer()));
    EXPECT_FALSE(static_cast<bool>(d.sealers()));
    EXPECT_FALSE(static_cast<bool>(d.lloyd_pass()));
  }
}

TEST(Device, AutoIsTheGpuWhenThereIsOneElseTheCpu) {
  const Device d = Device::resolve("auto");
  if (!d.cuda()) {
    EXPECT_EQ(d.describe(), "cpu");
    return;
  }
  EXPECT_FALSE(d.gpu_name().empty());
  EXPECT_EQ(d.describe(), "cuda (" + d.gpu_name() + ")");
  EXPECT_TRUE(static_cast<bool>(d.sealer()));
  EXPECT_TRUE(static_cast<bool>(d.sealers()));
  EXPECT_TRUE(static_cast<bool>(d.lloyd_pass()));
}

TEST(Device, CudaWithoutAGpuIsRefusedWithTheToolsText) {
  if (Device::resolve("auto").cuda()) {
    EXPECT_TRUE(Device::resolve("cuda").cuda());
    return;
  }
  for (const char* no_kernels : {"", "this build has no CUDA support"}) {
    try {
      if (*no_kernels) (void)Device::resolve("cuda", no_kernels);
      else (void)Device::resolve("cuda");
      FAIL() << "--device cuda without a GPU was accepted";
    } catch (const std::invalid_argument& e) {
#if SJKV_TEST_CUDA_KERNELS
      EXPECT_STREQ(e.what(), "--device cuda: no CUDA device present");
#else
      EXPECT_EQ(std::string(e.what()), std::string("--device cuda: ") +
                                           (*no_kernels ? no_kernels : "this build has no CUDA kernels; use --device cpu"));
#endif
    }
  }
}

TEST(Device, OtherNamesAreRefused) {
  EXPECT_THROW((void)Device::resolve("gpu"), std::invalid_argument);
  EXPECT_THROW((void)Device::resolve(""), std::invalid_argument);
}

}  // namespace
