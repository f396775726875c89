#include "tokenizer_unicode.h"

#include <algorithm>
#include <array>

#include "tokenizer_unicode_data.h"

namespace sjkv {
namespace replay {
namespace unicode {

size_t utf8_len(uint8_t lead) {
  static constexpr uint8_t kLen[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
  return kLen[lead >> 4];
}

std::vector<uint32_t> decode_utf8(std::string_view text) {
  std::vector<uint32_t> cps;
  cps.reserve(text.size());
  const auto* s = reinterpret_cast<const uint8_t*>(text.data());
  const size_t n = text.size();
  auto cont = [&](size_t i) { return i < n && (s[i] & 0xC0) == 0x80; };
  size_t i = 0;
  while (i < n) {
    const uint8_t b = s[i];
    if (b < 0x80) {
      cps.push_back(b);
      i += 1;
    } else if ((b & 0xE0) == 0xC0 && cont(i + 1)) {
      cps.push_back((uint32_t(b & 0x1F) << 6) | (s[i + 1] & 0x3F));
      i += 2;
    } else if ((b & 0xF0) == 0xE0 && cont(i + 1) && cont(i + 2)) {
      cps.push_back((uint32_t(b & 0x0F) << 12) | (uint32_t(s[i + 1] & 0x3F) << 6) | (s[i + 2] & 0x3F));
      i += 3;
    } else if ((b & 0xF8) == 0xF0 && cont(i + 1) && cont(i + 2) && cont(i + 3)) {
      cps.push_back((uint32_t(b & 0x07) << 18) | (uint32_t(s[i + 1] & 0x3F) << 12) |
                    (uint32_t(s[i + 2] & 0x3F) << 6) | (s[i + 3] & 0x3F));
      i += 4;
    } else {
      cps.push_back(0xFFFD);
      i += 1;
    }
  }
  return cps;
}

void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += char(cp);
  } else if (cp < 0x800) {
    out += char(0xC0 | (cp >> 6));
    out += char(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += char(0xE0 | (cp >> 12));
    out += char(0x80 | ((cp >> 6) & 0x3F));
    out += char(0x80 | (cp & 0x3F));
  } else {
    // decode_utf8 yields at most 21 bits, so four bytes always suffice.
    out += char(0xF0 | ((cp >> 18) & 0x07));
    out += char(0x80 | ((cp >> 12) & 0x3F));
    out += char(0x80 | ((cp >> 6) & 0x3F));
    out += char(0x80 | (cp & 0x3F));
  }
}

CharClass char_class(uint32_t cp) {
  using unicode_data::kClassRanges;
  if (cp >= 0x110000) return CharClass::other;
  if (cp < 0x80) {
    if ((cp | 0x20) >= 'a' && (cp | 0x20) <= 'z') return CharClass::letter;
    if (cp >= '0' && cp <= '9') return CharClass::number;
    return CharClass::other;
  }
  // Last range whose first code point is <= cp (the first range starts at 0).
  const uint32_t key = (cp << 2) | 3u;
  const auto* end = std::end(kClassRanges);
  const auto* it = std::upper_bound(std::begin(kClassRanges), end, key);
  return static_cast<CharClass>(*(it - 1) & 3u);
}

bool is_white_space(uint32_t cp) {
  // Unicode PropList.txt, White_Space (unchanged since Unicode 6.3).
  if (cp <= 0x20) return cp == 0x20 || (cp >= 0x09 && cp <= 0x0D);
  switch (cp) {
    case 0x85: case 0xA0: case 0x1680: case 0x2028: case 0x2029: case 0x202F: case 0x205F:
    case 0x3000:
      return true;
    default:
      return cp >= 0x2000 && cp <= 0x200A;
  }
}

namespace {
struct ByteMap {
  std::array<uint32_t, 256> to_cp{};
  ByteMap() {
    uint32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
      to_cp[b] = printable ? uint32_t(b) : next++;
    }
  }
};
const ByteMap& byte_map() {
  static const ByteMap m;
  return m;
}
}  // namespace

uint32_t byte_to_code_point(uint8_t b) { return byte_map().to_cp[b]; }

int code_point_to_byte(uint32_t cp) {
  const bool printable = (cp >= 0x21 && cp <= 0x7E) || (cp >= 0xA1 && cp <= 0xAC) || (cp >= 0xAE && cp <= 0xFF);
  if (printable) return int(cp);
  if (cp < 256 || cp >= 256 + 68) return -1;  // 68 bytes are not printable: 0-0x20, 0x7F-0xA0, 0xAD
  const auto& m = byte_map().to_cp;
  for (int b = 0; b < 256; ++b) {
    if (m[b] == cp) return b;
  }
  return -1;
}

}  // namespace unicode
}  // namespace replay
}  // namespace sjkv
