// Fuzz target: capture files (read_capture, docs/FORMAT.md sections 2 and 5). The input is
// written to a temporary file, since HDF5 reads from a path. A file that passes must satisfy
// Capture::check_consistent(); after every input no HDF5 object may be left open.
#include <hdf5.h>

#include <cstdio>
#include <cstdlib>
#include <stdexcept>

#include "fuzz_common.h"
#include "sjkv/io/capture_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string& path = sjkv_fuzz::write_input("capture", data, size);
  try {
    (void)sjkv::sniff_file(path);
  } catch (const sjkv::FileError&) {
  }
  bool ok = false;
  sjkv::Capture cap;
  try {
    cap = sjkv::read_capture(path);
    ok = true;
  } catch (const sjkv::FileError&) {
  }
  if (ok) sjkv_fuzz::expect_consistent([&] { cap.check_consistent(); });  // FORMAT.md section 5
  const ssize_t open_objects = H5Fget_obj_count(static_cast<hid_t>(H5F_OBJ_ALL), H5F_OBJ_ALL);
  if (open_objects != 0) {
    std::fprintf(stderr, "sjkv fuzz: %zd HDF5 objects left open after read_capture\n", open_objects);
    std::abort();
  }
  return 0;
}
