// Fuzz target: snapshot files (read_snapshot, docs/FORMAT.md sections 3 and 5). The input is
// written to a temporary file, since HDF5 reads from a path. A file that passes must satisfy
// check_snapshot_consistent() and, when small, decode (record bytes are opaque to the file
// layer, so the decoders see hostile records here); after every input no HDF5 object may be
// left open.
#include <hdf5.h>

#include <cstdio>
#include <cstdlib>
#include <stdexcept>

#include "fuzz_common.h"
#include "sjkv/io/encode.h"
#include "sjkv/io/snapshot_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string& path = sjkv_fuzz::write_input("snapshot", data, size);
  bool ok = false;
  sjkv::Snapshot snap;
  sjkv::EmbeddedCodebooks books;
  try {
    snap = sjkv::read_snapshot(path, &books);
    ok = true;
  } catch (const sjkv::FileError&) {
  }
  const ssize_t open_objects = H5Fget_obj_count(static_cast<hid_t>(H5F_OBJ_ALL), H5F_OBJ_ALL);
  if (open_objects != 0) {
    std::fprintf(stderr, "sjkv fuzz: %zd HDF5 objects left open after read_snapshot\n", open_objects);
    std::abort();
  }
  if (!ok) return 0;
  // A reader's promise: what it returns is consistent (throws only on a bug).
  sjkv_fuzz::expect_consistent([&] {
    sjkv::check_snapshot_consistent(snap, snap.config.resolved_body() == sjkv::Body::trellis ? &books : nullptr);
  });
  const uint64_t values = static_cast<uint64_t>(snap.N) * snap.kv_heads * snap.config.head_dim * snap.layers.size();
  if (values <= (1u << 20)) {
    try {
      const sjkv::Capture cap = sjkv::decode_snapshot(snap, false);
      (void)sjkv::decode_snapshot(snap, true);
      try {
        cap.check_consistent();  // may refuse NaN decoded from hostile record scales
      } catch (const std::invalid_argument&) {
      }
    } catch (const std::invalid_argument&) {  // a decoder's documented refusal
    }
  }
  return 0;
}
