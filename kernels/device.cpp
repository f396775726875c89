#include "sjkv/device.h"

#include <map>
#include <memory>
#include <stdexcept>

#if defined(SJKV_HAVE_CUDA_KERNELS)
#include "sjkv/cuda/codec_cuda.h"
#include "sjkv/cuda/sealer.h"
#include "sjkv/cuda/train_cuda.h"
#endif

namespace sjkv {

Device Device::resolve(const std::string& asked, const std::string& no_kernels) {
  if (asked != "auto" && asked != "cpu" && asked != "cuda")
    throw std::invalid_argument("--device must be auto, cpu or cuda, not '" + asked + "'");
  Device d;
  if (asked == "cpu") return d;
#if defined(SJKV_HAVE_CUDA_KERNELS)
  if (cuda::device_count() > 0) {
    d.cuda_ = true;
    d.gpu_name_ = cuda::device_name(0);
    return d;
  }
  if (asked == "cuda") throw std::invalid_argument("--device cuda: no CUDA device present");
#else
  if (asked == "cuda") throw std::invalid_argument("--device cuda: " + no_kernels);
#endif
  (void)no_kernels;
  return d;
}

std::string Device::describe() const { return cuda_ ? "cuda (" + gpu_name_ + ")" : "cpu"; }

RecordSealer Device::sealer() const {
#if defined(SJKV_HAVE_CUDA_KERNELS)
  if (cuda_) return cuda::make_record_sealer();
#endif
  return {};
}

SealerSource Device::sealers() const {
  if (!cuda_) return {};
  const Device d = *this;
  return [d] { return d.sealer(); };
}

LloydPass Device::lloyd_pass() const {
#if defined(SJKV_HAVE_CUDA_KERNELS)
  if (cuda_) {
    auto on_device = std::make_shared<std::map<const float*, std::unique_ptr<cuda::LloydPass>>>();
    return [on_device](const float* y, size_t n, uint32_t len, uint32_t bits, const float* cbf, std::vector<double>* sum,
                       std::vector<uint64_t>* cnt) {
      std::unique_ptr<cuda::LloydPass>& p = (*on_device)[y];
      if (!p) {
        p.reset(new cuda::LloydPass);
        const std::string e = p->upload(y, n, len);
        if (!e.empty()) throw std::runtime_error("CUDA: " + e);
      }
      double mse = 0;
      const std::string e = p->run(bits, cbf, &mse, sum, cnt);
      if (!e.empty()) throw std::runtime_error("CUDA: " + e);
      return mse;
    };
  }
#endif
  return {};
}

}  // namespace sjkv
