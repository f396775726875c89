#include "sjkv/io/codebook_file.h"

#include "in_file.h"
#include "sjkv/trellis.h"

namespace sjkv {

RawCodebook read_raw_codebook(const std::string& path) {
  InFile in(path);
  RawCodebook cb;
  switch (in.size()) {
    case 1024: cb.bits = 2; break;
    case 2048: cb.bits = 3; break;
    case 4096: cb.bits = 4; break;
    default:
      in.fail("is " + std::to_string(in.size()) +
              " bytes; a raw codebook table file is 1024 (2-bit), 2048 (3-bit) or 4096 (4-bit) bytes");
  }
  const size_t n = size_t{1} << (6 + cb.bits);
  std::vector<uint8_t> raw(2 * n * 2);
  in.read(raw.data(), raw.size(), "tables");
  cb.k.resize(n);
  cb.v.resize(n);
  for (size_t i = 0; i < 2 * n; ++i) {
    const uint16_t h = static_cast<uint16_t>(raw[2 * i] | (raw[2 * i + 1] << 8));
    if (!codebook_entry_usable(h))
      in.fail(std::string(i < n ? "K" : "V") + " table entry " + std::to_string(i % n) +
              " is NaN, infinite or larger than 64 in magnitude");
    (i < n ? cb.k[i] : cb.v[i - n]) = h;
  }
  return cb;
}

}  // namespace sjkv
