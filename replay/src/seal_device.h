// Private: gives an SJ arm's cache the sealer set_seal_device() chose.
#pragma once

#include "sjkv/cache.h"
#include "sjkv/replay/kv.h"

namespace sjkv {
namespace replay {

void attach_seal_device(SequenceCache& cache);

}  // namespace replay
}  // namespace sjkv
