// positions.csv, written and read (sjkv/io/positions_csv.h).
#include "sjkv/io/positions_csv.h"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <limits>

#include "sjkv/io/file_error.h"
#include "sjkv/io/paths.h"
#include "sjkv/io/text.h"

namespace sjkv {
namespace {

std::string num(double x, const char* f) {
  if (!std::isfinite(x)) return "null";
  char b[64];
  std::snprintf(b, sizeof b, f, x);
  return b;
}

// Splits one CSV line as csv_field() writes them (quoted fields with doubled quotes).
bool split_csv(const std::string& line, std::vector<std::string>& out) {
  out.clear();
  std::string f;
  size_t i = 0;
  while (true) {
    f.clear();
    if (i < line.size() && line[i] == '"') {
      ++i;
      while (true) {
        if (i >= line.size()) return false;  // unterminated quote
        if (line[i] == '"') {
          if (i + 1 < line.size() && line[i + 1] == '"') {
            f += '"';
            i += 2;
            continue;
          }
          ++i;
          break;
        }
        f += line[i++];
      }
      if (i < line.size() && line[i] != ',') return false;
    } else {
      while (i < line.size() && line[i] != ',') f += line[i++];
      if (f.find('"') != std::string::npos) return false;
    }
    out.push_back(f);
    if (i >= line.size()) return true;
    ++i;  // the comma
  }
}

bool parse_double(const std::string& s, double& v) {
  if (s.empty() || s.size() > 64) return false;
  char* end = nullptr;
  errno = 0;
  v = std::strtod(s.c_str(), &end);
  return end == s.c_str() + s.size() && errno == 0;
}

// A field as an error quotes it: long ones cut.
std::string shown(const std::string& s) { return s.size() > 32 ? s.substr(0, 32) + "..." : s; }

}  // namespace

std::string positions_csv_line(const PositionsCsvRow& r) {
  return csv_field(r.trajectory) + "," + std::to_string(r.position) + "," + csv_field(r.arm) + "," +
         (std::isfinite(r.kl) ? num(r.kl, "%.17g") : std::string("inf")) + "," + (r.same_top ? "1" : "0") + "," +
         num(r.bits_occupied, "%.6g") + "," + num(r.bits_allocated, "%.6g") + "\n";
}

std::vector<PositionsCsvRow> read_positions_csv_rows(const std::string& path) {
  check_input_file(path);
  std::ifstream in(path, std::ios::binary);
  if (!in) throw FileError(path, std::string("cannot open: ") + std::strerror(errno));
  std::string line;
  const std::string header = kPositionsCsvHeader;
  if (!std::getline(in, line) || line != header) throw FileError(path, "not a positions.csv (its first line is not '" + header + "')");
  std::vector<PositionsCsvRow> rows;
  std::vector<std::string> f;
  for (uint64_t n = 2; std::getline(in, line); ++n) {
    const std::string at = "line " + std::to_string(n) + ": ";
    if (in.eof()) throw FileError(path, at + "no line end (the file is cut short)");
    if (!split_csv(line, f) || f.size() != 7) throw FileError(path, at + "not seven comma-separated fields");
    PositionsCsvRow r;
    r.trajectory = f[0];
    r.arm = f[2];
    if (r.trajectory.empty() || r.arm.empty()) throw FileError(path, at + "empty trajectory or arm name");
    double pos = 0, kl = 0, occ = 0, alc = 0;
    if (!parse_double(f[1], pos) || pos < 0 || pos > 4294967295.0 || pos != std::floor(pos))
      throw FileError(path, at + "position '" + shown(f[1]) + "' is not a whole number");
    if (f[3] == "inf") kl = std::numeric_limits<double>::infinity();
    else if (!parse_double(f[3], kl) || !std::isfinite(kl) || kl < 0)
      throw FileError(path, at + "KL '" + shown(f[3]) + "' is not a finite number >= 0 (or inf)");
    if (f[4] != "0" && f[4] != "1") throw FileError(path, at + "same_top is not 0 or 1");
    if (!parse_double(f[5], occ) || !std::isfinite(occ) || occ < 0 || !parse_double(f[6], alc) || !std::isfinite(alc) || alc < 0)
      throw FileError(path, at + "bits are not finite numbers >= 0");
    r.position = static_cast<uint32_t>(pos);
    r.kl = kl;
    r.same_top = f[4] == "1";
    r.bits_occupied = occ;
    r.bits_allocated = alc;
    r.source = path;
    r.line = n;
    rows.push_back(std::move(r));
  }
  if (in.bad()) throw FileError(path, std::string("read failed: ") + std::strerror(errno));
  return rows;
}

}  // namespace sjkv
