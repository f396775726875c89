// Fuzz target: sjkv-train checkpoints (docs/FORMAT.md section 11). A file that passes must
// write back to exactly its own bytes: nothing the reader accepts is dropped or reinterpreted.
#include <cstring>

#include "fuzz_common.h"
#include "sjkv/io/file_error.h"
#include "sjkv/io/lloyd_checkpoint.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string& path = sjkv_fuzz::write_input("checkpoint", data, size);
  try {
    const sjkv::LloydCheckpoint c = sjkv::read_lloyd_checkpoint(path);
    sjkv_fuzz::expect_consistent([&] {
      const std::vector<uint8_t> again = sjkv::lloyd_checkpoint_bytes(c);
      if (again.size() != size || std::memcmp(again.data(), data, size) != 0)
        throw std::invalid_argument("an accepted checkpoint does not write back to its bytes");
    });
  } catch (const sjkv::FileError&) {
  }
  return 0;
}
