// Fuzz target: .kvd tile dumps (read_kvd, sjkv/io/kvd.h). The input is written to a
// temporary file, since the reader takes a path. A file that passes must give a capture
// that passes Capture::check_consistent() (encode_capture requires it).
#include "fuzz_common.h"
#include "sjkv/io/kvd.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string& path = sjkv_fuzz::write_input("kvd", data, size);
  try {
    const sjkv::Capture cap = sjkv::read_kvd(path);
    sjkv_fuzz::expect_consistent([&] { cap.check_consistent(); });  // what encode needs
  } catch (const sjkv::FileError&) {
  }
  return 0;
}
