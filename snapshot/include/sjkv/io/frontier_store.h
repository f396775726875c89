// The frontier's store of scored rows (docs/FORMAT.md section 14): the rows of one (arm,
// trajectory) job as a one-trajectory positions.csv under
//   DIR/<model>-e<engine>/<trajectory>-<sha>/<arm>-u<ubatch>.csv
// model the first 16 hex digits of the GGUF's SHA-256, engine what sjkv-replay engine prints,
// trajectory the file's base name and sha the first 16 hex digits of its SHA-256, arm
// store_arm_name(spec), ubatch the prompt ubatch: the key covers what changes the rows. The
// frontier search (replay/src/frontier.cpp) decides what to score; this file only keeps rows.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "sjkv/io/positions_csv.h"

namespace sjkv {

// The file name of an arm's rows, without the "-uUBATCH.csv": the spec with '/' written '_',
// except that a cb= value holding '_' or '%' is written with %XX escapes ('%' '_' '/'), so that
// no two arms share a name (cb=a/b against cb=a_b) and names without those stay as they were
// (stores made before keep being read). A name past 200 bytes keeps its first 160 and gains a
// hash of the whole spec.
std::string store_arm_name(const std::string& spec);

class FrontierStore {
 public:
  // `dir` empty: no store (has and get find nothing, put keeps nothing).
  FrontierStore(std::string dir, const std::string& model_sha256, const std::string& engine);

  // A trajectory's folder name: its base name and the first 16 hex digits of its SHA-256.
  static std::string trajectory_key(const std::string& trajectory_path, const std::string& sha256);

  std::string path(const std::string& traj_key, const std::string& arm, uint32_t ubatch) const;
  bool has(const std::string& traj_key, const std::string& arm, uint32_t ubatch) const;
  // The job's rows read back, or false when the store has none. A damaged file is a FileError
  // naming it: positions.csv's checks, then `expected` rows, all of arm `arm`.
  bool get(const std::string& traj_key, const std::string& arm, uint32_t ubatch, size_t expected,
           std::vector<PositionsCsvRow>* rows) const;
  // Writes the job's rows (folders made as needed; temporary name, then rename). FileError when
  // it cannot.
  void put(const std::string& traj_key, const std::string& arm, uint32_t ubatch, const std::vector<PositionsCsvRow>& rows) const;

 private:
  std::string dir_;  // DIR/<model>-e<engine>, empty without a store
};

}  // namespace sjkv
