// The tools' one device switch: --device auto|cpu|cuda resolved once, then the GPU path's
// pieces handed down as plain functions (a RecordSealer, a LloydPass), so snapshot/, train/ and
// replay/ link no kernels. Always built (kernels/CMakeLists.txt); its CUDA half only where the
// kernels are (SJKV_HAVE_CUDA_KERNELS, the one build macro for that).
#pragma once

#include <string>

#include "sjkv/cache.h"
#include "sjkv/lloyd.h"

namespace sjkv {

class Device {
 public:
  Device() = default;  // the CPU

  // "auto": the first CUDA device when this build has the kernels and one is present, else
  // the CPU; "cpu"; "cuda": that device, or std::invalid_argument "--device cuda: <why>" when
  // there is none (the tools' exit 2). `no_kernels` is the why of a build without the kernels.
  static Device resolve(const std::string& asked,
                        const std::string& no_kernels = "this build has no CUDA kernels; use --device cpu");

  bool cuda() const { return cuda_; }
  const std::string& gpu_name() const { return gpu_name_; }  // empty on the CPU
  std::string describe() const;                              // "cpu" or "cuda (<name>)"

  // A sealer for one cache (a GPU sealer owns its engine, so each cache gets its own); empty
  // on the CPU, which SequenceCache::set_sealer takes as its own sealer. Same bytes either way.
  RecordSealer sealer() const;
  // sealer() on demand, for the replay arms (one per layer cache); empty on the CPU.
  SealerSource sealers() const;
  // A Lloyd pass on the GPU that uploads each target array it is given once and keeps it until
  // the pass is destroyed (the arrays must not change meanwhile); empty on the CPU. Same bits
  // as the CPU pass.
  LloydPass lloyd_pass() const;

 private:
  bool cuda_ = false;
  std::string gpu_name_;
};

}  // namespace sjkv
