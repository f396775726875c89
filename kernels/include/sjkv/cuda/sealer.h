// The GPU as the codec cache's record sealer (SequenceCache::set_sealer): one Engine per
// sealer, the same bytes as the CPU, the lowest failing record's Status on bad input.
#pragma once

#include "sjkv/cache.h"

namespace sjkv {
namespace cuda {

// Throws std::runtime_error when a CUDA call fails.
RecordSealer make_record_sealer();

}  // namespace cuda
}  // namespace sjkv
