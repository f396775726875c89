// Fuzz target: sequence-state streams (docs/SPEC.md §11, docs/FORMAT.md §12), parsed in memory.
// A stream that passes is a consistent snapshot and writes back to exactly its own bytes:
// nothing the reader accepts is dropped or reinterpreted. Small ones are decoded too.
#include <cstring>

#include "fuzz_common.h"
#include "sjkv/io/encode.h"
#include "sjkv/io/file_error.h"
#include "sjkv/io/snapshot_file.h"
#include "sjkv/io/state_stream.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  for (uint32_t ubatch : {16u, 512u}) {
    try {
      const sjkv::Snapshot s = sjkv::parse_state_stream(data, size, "input", {ubatch, {}});
      sjkv_fuzz::expect_consistent([&] {
        const sjkv::EmbeddedCodebooks cb = sjkv::carried_codebooks(s);
        sjkv::check_snapshot_consistent(s, s.codebook_k.empty() ? nullptr : &cb);
        const std::vector<uint8_t> again = sjkv::state_stream_bytes(s);
        if (again.size() != size || std::memcmp(again.data(), data, size) != 0)
          throw std::invalid_argument("an accepted stream does not write back to its bytes");
      });
      if (static_cast<uint64_t>(s.N) * s.kv_heads * s.config.head_dim * s.layers.size() <= (1u << 20)) {
        try {
          (void)sjkv::decode_snapshot(s, true);
        } catch (const std::invalid_argument&) {  // the decoder's documented refusal (values past fp16)
        }
      }
    } catch (const sjkv::FileError&) {
    }
  }
  return 0;
}
