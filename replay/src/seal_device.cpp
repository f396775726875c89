// The process-wide seal device of the SJ-KVaRN / KVarN arms (kv.h).
#include "seal_device.h"

#include <stdexcept>

#if defined(SJKV_REPLAY_CUDA)
#include "sjkv/cuda/codec_cuda.h"
#include "sjkv/cuda/sealer.h"
#endif

namespace sjkv {
namespace replay {
namespace {
bool g_cuda = false;
}

std::string set_seal_device(SealDevice d) {
  g_cuda = false;
  if (d == SealDevice::cpu) return "cpu";
#if defined(SJKV_REPLAY_CUDA)
  if (cuda::device_count() > 0) {
    g_cuda = true;
    return "cuda (" + cuda::device_name(0) + ")";
  }
  if (d == SealDevice::cuda) throw std::invalid_argument("--device cuda: no CUDA device present");
#else
  if (d == SealDevice::cuda) throw std::invalid_argument("--device cuda: this build has no CUDA kernels; use --device cpu");
#endif
  return "cpu";
}

void attach_seal_device(SequenceCache& cache) {
#if defined(SJKV_REPLAY_CUDA)
  if (g_cuda) cache.set_sealer(cuda::make_record_sealer());
#else
  (void)cache;
#endif
}

}  // namespace replay
}  // namespace sjkv
