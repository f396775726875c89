#include "sjkv/cuda/sealer.h"

#include <memory>
#include <stdexcept>
#include <vector>

#include "sjkv/cuda/codec_cuda.h"

namespace sjkv {
namespace cuda {

RecordSealer make_record_sealer() {
  auto engine = std::make_shared<Engine>();
  return [engine](const RecordLayout& l, const SealOptions& o, size_t n_rec, const uint16_t* const* k,
                  const uint16_t* const* v, size_t stride, uint8_t* out) {
    std::vector<Status> st;
    const std::string err = engine->seal(l, o, n_rec, k, v, stride, out, &st);
    if (!err.empty()) throw std::runtime_error("CUDA seal failed: " + err);
    for (const Status& s : st)
      if (!s.ok()) return s;  // the lowest failing record, as seal_records reports it
    return Status{};
  };
}

}  // namespace cuda
}  // namespace sjkv
