// Text from files and for people: UTF-8 checks, JSON string literals and CSV fields, in one
// place for every tool and writer.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace sjkv {

// Length of the valid UTF-8 sequence at u[i] (no overlong forms, surrogates or code points
// past U+10FFFF), or 0 when the bytes there are not one; then *bad_at, when given, is the
// offset of the first byte that does not start or continue it (i, or a continuation byte).
inline size_t utf8_sequence_at(const unsigned char* u, size_t n, size_t i, size_t* bad_at = nullptr) {
  if (bad_at) *bad_at = i;
  const unsigned c = u[i];
  size_t len;
  unsigned lo = 0x80, hi = 0xBF;  // allowed range of the second byte
  if (c < 0x80) return 1;
  if (c >= 0xC2 && c <= 0xDF) {
    len = 2;
  } else if (c >= 0xE0 && c <= 0xEF) {
    len = 3;
    if (c == 0xE0) lo = 0xA0;
    if (c == 0xED) hi = 0x9F;
  } else if (c >= 0xF0 && c <= 0xF4) {
    len = 4;
    if (c == 0xF0) lo = 0x90;
    if (c == 0xF4) hi = 0x8F;
  } else {
    return 0;
  }
  for (size_t k = 1; k < len; ++k) {
    if (bad_at) *bad_at = i + k;
    if (i + k >= n) return 0;
    const unsigned d = u[i + k];
    if (k == 1 ? (d < lo || d > hi) : (d < 0x80 || d > 0xBF)) return 0;
  }
  if (bad_at) *bad_at = i;
  return len;
}

// Offset of the first byte that does not start or continue a valid UTF-8 sequence (for a
// sequence cut short by the end of the text: the text's length), or npos when it is valid.
inline size_t invalid_utf8_at(const std::string& t) {
  const auto* u = reinterpret_cast<const unsigned char*>(t.data());
  for (size_t i = 0; i < t.size();) {
    size_t bad = 0;
    const size_t len = utf8_sequence_at(u, t.size(), i, &bad);
    if (len == 0) return bad;
    i += len;
  }
  return std::string::npos;
}

// 32884 -> "32,884": counts as refusals and notes write them.
inline std::string thousands(uint64_t n) {
  std::string s = std::to_string(n);
  for (int i = static_cast<int>(s.size()) - 3; i > 0; i -= 3) s.insert(static_cast<size_t>(i), ",");
  return s;
}

// A JSON string literal of `s`: quotes, backslashes and control bytes escaped (control bytes
// and DEL as \u00XX), and each byte that is not valid UTF-8 (a damaged file's model name, say)
// replaced by \ufffd, so the output is always valid JSON. Escaped by nlohmann-json.
std::string json_string(const std::string& s);

// A number as sjkv's JSON and provenance write it: %.9g, or null when not finite.
std::string json_number(double v);
// 16 lower-case hex digits (codebook ids, hashes).
std::string hex64(uint64_t v);

// A CSV field (RFC 4180): quoted, with quotes doubled, when it holds a comma, quote or line
// break; as it is otherwise. read_positions_csv_rows (positions_csv.h) splits what this writes.
inline std::string csv_field(const std::string& s) {
  if (s.find_first_of(",\"\n\r") == std::string::npos) return s;
  std::string o = "\"";
  for (char c : s) o += c == '"' ? std::string("\"\"") : std::string(1, c);
  return o + "\"";
}

}  // namespace sjkv
