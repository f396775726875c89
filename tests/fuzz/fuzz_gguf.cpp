// Fuzz target: GGUF headers (GgufFile::parse on bytes in memory, replay/gguf.h), then the
// model geometry (geometry_from_gguf) and the accessors a planner uses. Refusals are
// sjkv::FileError; the typed value accessors may throw std::invalid_argument.
#include <stdexcept>
#include <vector>

#include "fuzz_common.h"
#include "sjkv/io/model_geometry.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<uint8_t> bytes(data, data + size);
  try {
    const sjkv::GgufFile f = sjkv::GgufFile::parse(std::move(bytes), "fuzz.gguf");
    for (const sjkv::GgufKv& kv : f.metadata()) {
      const uint64_t n = kv.value.count();
      for (uint64_t i = 0; i < n && i < 4; ++i) {
        (void)kv.value.to_unsigned(i);
        (void)kv.value.to_signed(i);
      }
      if (f.find(kv.key) == nullptr) __builtin_trap();  // every key must be found again
    }
    for (const sjkv::GgufTensorInfo& t : f.tensors()) {
      if (f.find_tensor(t.name) != &t) __builtin_trap();
      (void)f.tensor_data(t);
      (void)t.type_name();
    }
    const sjkv::ModelGeometry g = sjkv::geometry_from_gguf(f);
    (void)g.full_attention_layers();
    (void)g.cache_geometry();
  } catch (const sjkv::FileError&) {
  } catch (const std::invalid_argument&) {
  }
  return 0;
}
