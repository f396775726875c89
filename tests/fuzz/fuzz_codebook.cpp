// Fuzz target: codebook files in their three forms (read_codebook_any: the .sjcb container,
// the raw .bin table, the C header), through a temporary file since the readers take a
// path. A file that passes must hold tables an encoder can use: the right number of
// entries, every entry finite and at most 64 in magnitude (the bound that keeps decoded
// values inside fp16), and tables that the writers accept again.
#include "fuzz_common.h"
#include "sjkv/io/file_error.h"
#include "sjkv/io/codebook.h"
#include "sjkv/trellis.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string& path = sjkv_fuzz::write_input("codebook", data, size);
  try {
    const sjkv::CodebookContainer c = sjkv::read_codebook_any(path);
    sjkv_fuzz::expect_consistent([&] {
      const uint32_t n = sjkv::trellis_entries(c.table.bits);
      if (c.table.k.size() != n || c.table.v.size() != n) throw std::invalid_argument("table size");
      if (sjkv::first_unusable_entry(c.table.k.data(), c.table.bits) >= 0 ||
          sjkv::first_unusable_entry(c.table.v.data(), c.table.bits) >= 0)
        throw std::invalid_argument("an unusable entry was accepted");
      (void)sjkv::raw_codebook_bytes(c.table);  // check_raw_codebook
    });
  } catch (const sjkv::FileError&) {
  }
  return 0;
}
