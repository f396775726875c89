// The frontier's store of scored rows (sjkv/io/frontier_store.h).
#include "sjkv/io/frontier_store.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstdio>
#include <sstream>

#include "sjkv/io/atomic_file.h"
#include "sjkv/io/file_error.h"
#include "sjkv/io/paths.h"
#include "sjkv/io/sha256.h"

namespace sjkv {
namespace {

void make_dirs(const std::string& path) {
  std::string cur;
  std::stringstream ss(path);
  std::string part;
  if (!path.empty() && path[0] == '/') cur = "/";
  while (std::getline(ss, part, '/')) {
    if (part.empty()) continue;
    cur += part + "/";
    if (::mkdir(cur.c_str(), 0777) != 0 && errno != EEXIST) throw FileError(cur, "cannot create the folder");
  }
}

}  // namespace

std::string store_arm_name(const std::string& spec) {
  // Options are ':'-separated and only a cb= value is free text; elsewhere the grammar puts '/'
  // and '_' where the other cannot stand, so '/' -> '_' alone is one-to-one there. A cb= value
  // without '_' or '%' keeps that rule too; one with either is escaped, and only escaped names
  // hold a '%'.
  std::string out;
  size_t start = 0;
  for (;;) {
    const size_t end = spec.find(':', start);
    const std::string part = spec.substr(start, end == std::string::npos ? std::string::npos : end - start);
    const bool escape = part.rfind("cb=", 0) == 0 && part.find_first_of("_%", 3) != std::string::npos;
    for (size_t i = 0; i < part.size(); ++i) {
      const char c = part[i];
      if (escape && i >= 3 && (c == '%' || c == '_' || c == '/')) {
        char b[4];
        std::snprintf(b, sizeof b, "%%%02X", static_cast<unsigned char>(c));
        out += b;
      } else {
        out += c == '/' ? '_' : c;
      }
    }
    if (end == std::string::npos) break;
    out += ':';
    start = end + 1;
  }
  // A name past what a folder entry holds (a long cb= path) keeps its first 160 bytes and
  // gains a hash of the whole spec; every shorter name, every committed store's, is as above.
  constexpr size_t kMaxName = 200;  // + "-u<ubatch>.csv" stays within NAME_MAX (255)
  if (out.size() > kMaxName) out = out.substr(0, 160) + "~" + sha256_hex(spec.data(), spec.size()).substr(0, 24);
  return out;
}

FrontierStore::FrontierStore(std::string dir, const std::string& model_sha256, const std::string& engine)
    : dir_(std::move(dir)) {
  if (!dir_.empty()) dir_ += "/" + model_sha256.substr(0, 16) + "-e" + engine;
}

std::string FrontierStore::trajectory_key(const std::string& trajectory_path, const std::string& sha256) {
  return base_name(trajectory_path) + "-" + sha256.substr(0, 16);
}

std::string FrontierStore::path(const std::string& traj_key, const std::string& arm, uint32_t ubatch) const {
  return dir_ + "/" + traj_key + "/" + store_arm_name(arm) + "-u" + std::to_string(ubatch) + ".csv";
}

bool FrontierStore::has(const std::string& traj_key, const std::string& arm, uint32_t ubatch) const {
  return !dir_.empty() && path_exists(path(traj_key, arm, ubatch));
}

bool FrontierStore::get(const std::string& traj_key, const std::string& arm, uint32_t ubatch, size_t expected,
                        std::vector<PositionsCsvRow>* rows) const {
  if (!has(traj_key, arm, ubatch)) return false;
  const std::string p = path(traj_key, arm, ubatch);
  std::vector<PositionsCsvRow> got = read_positions_csv_rows(p);
  if (got.size() != expected)
    throw FileError(p, "holds " + std::to_string(got.size()) + " rows, expected " + std::to_string(expected));
  for (const PositionsCsvRow& r : got)
    if (r.arm != arm) throw FileError(p, "holds rows of arm '" + r.arm + "', expected '" + arm + "'");
  *rows = std::move(got);
  return true;
}

void FrontierStore::put(const std::string& traj_key, const std::string& arm, uint32_t ubatch,
                        const std::vector<PositionsCsvRow>& rows) const {
  if (dir_.empty()) return;
  make_dirs(dir_ + "/" + traj_key);
  std::string text = std::string(kPositionsCsvHeader) + "\n";
  for (const PositionsCsvRow& r : rows) text += positions_csv_line(r);
  write_file_atomic(path(traj_key, arm, ubatch), text.data(), text.size());
}

}  // namespace sjkv
