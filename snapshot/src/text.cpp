#include "sjkv/io/text.h"

#include <cinttypes>
#include <cmath>
#include <cstdio>

#include <nlohmann/json.hpp>

namespace sjkv {

std::string json_string(const std::string& s) {
  // nlohmann escapes the runs of valid UTF-8; the bytes where its form differs from the one our
  // JSON has always carried are written here: \b \t \n \f \r (short forms in nlohmann) and DEL
  // (raw there) as \u00XX, and every byte that is not UTF-8 as \ufffd (nlohmann's replace
  // handler gives one raw U+FFFD per bad sequence, not per byte).
  const auto* u = reinterpret_cast<const unsigned char*>(s.data());
  std::string o = "\"";
  size_t run = 0;
  auto flush = [&](size_t end) {
    if (end == run) return;
    const std::string d = nlohmann::json(s.substr(run, end - run)).dump();
    o.append(d, 1, d.size() - 2);
  };
  for (size_t i = 0; i < s.size();) {
    const size_t len = utf8_sequence_at(u, s.size(), i);
    const unsigned char c = u[i];
    if (len != 0 && c != '\b' && c != '\t' && c != '\n' && c != '\f' && c != '\r' && c != 0x7f) {
      i += len;
      continue;
    }
    flush(i);
    if (len == 0) {
      o += "\\ufffd";
    } else {
      char b[8];
      std::snprintf(b, sizeof b, "\\u%04x", c);
      o += b;
    }
    run = ++i;
  }
  flush(s.size());
  return o + "\"";
}

std::string json_number(double v) {
  if (!std::isfinite(v)) return "null";
  char b[64];
  std::snprintf(b, sizeof b, "%.9g", v);
  return b;
}

std::string hex64(uint64_t v) {
  char b[24];
  std::snprintf(b, sizeof b, "%016" PRIx64, v);
  return b;
}

}  // namespace sjkv
