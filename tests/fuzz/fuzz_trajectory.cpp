// Fuzz target: trajectory files (read_trajectory, docs/FORMAT.md section 9), both reference
// encodings. The input is written to a temporary file, since HDF5 reads from a path. A file
// that passes must satisfy Trajectory::check_consistent() (what write_trajectory and score
// rely on); after every input no HDF5 object may be left open.
#include <hdf5.h>

#include <cstdio>
#include <cstdlib>
#include <stdexcept>

#include "fuzz_common.h"
#include "sjkv/io/file_error.h"
#include "sjkv/replay/reference.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string& path = sjkv_fuzz::write_input("trajectory", data, size);
  bool ok = false;
  sjkv::Trajectory t;
  try {
    t = sjkv::read_trajectory(path);
    ok = true;
  } catch (const sjkv::FileError&) {
  }
  if (ok) sjkv_fuzz::expect_consistent([&] { t.check_consistent(); });
  const ssize_t open_objects = H5Fget_obj_count(static_cast<hid_t>(H5F_OBJ_ALL), H5F_OBJ_ALL);
  if (open_objects != 0) {
    std::fprintf(stderr, "sjkv fuzz: %zd HDF5 objects left open after read_trajectory\n", open_objects);
    std::abort();
  }
  return 0;
}
