// The frontier's store of scored rows (sjkv/io/frontier_store.h, docs/FORMAT.md section 14): the
// file names of every committed store, rows kept and read back, and a damaged file refused naming
// it.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "file_fixtures.h"
#include "sjkv/io/file_error.h"
#include "sjkv/io/frontier_store.h"
#include "sjkv/io/positions_csv.h"

namespace sjkv {
namespace {

namespace fs = std::filesystem;

std::vector<PositionsCsvRow> rows_of(const std::string& arm, uint32_t n) {
  std::vector<PositionsCsvRow> v;
  for (uint32_t i = 0; i < n; ++i) {
    PositionsCsvRow r;
    r.trajectory = "t.h5";
    r.position = 100 + i;
    r.arm = arm;
    r.kl = 0.001 * (i + 1) / 3.0;
    r.same_top = i % 3 != 0;
    r.bits_occupied = 4.5;
    r.bits_allocated = 9.25;
    v.push_back(r);
  }
  return v;
}

TEST(FrontierStore, ArmNames) {
  EXPECT_EQ(store_arm_name("f16"), "f16");
  EXPECT_EQ(store_arm_name("q4_0:rot:swa=same"), "q4_0:rot:swa=same");
  EXPECT_EQ(store_arm_name("sj:4/4:tail=512/1024:staging=q8_0"), "sj:4_4:tail=512_1024:staging=q8_0");
  // A cb= value without '_' or '%' keeps the '/' rule; one with either is escaped.
  EXPECT_EQ(store_arm_name("sj:3/2t:cb=study/codebooks/gemma3-270m-3bit.bin+study/codebooks/gemma3-270m-2bit.bin"),
            "sj:3_2t:cb=study_codebooks_gemma3-270m-3bit.bin+study_codebooks_gemma3-270m-2bit.bin");
  EXPECT_EQ(store_arm_name("sj:3/3t:tail=128:cb=cb/x.bin"), "sj:3_3t:tail=128:cb=cb_x.bin");
  EXPECT_EQ(store_arm_name("sj:3/3t:tail=128:cb=cb_x.bin"), "sj:3_3t:tail=128:cb=cb%5Fx.bin");
  EXPECT_EQ(store_arm_name("sj:3/3t:cb=a%/b_c.bin"), "sj:3_3t:cb=a%25%2Fb%5Fc.bin");
  // Past 200 bytes: the first 160 and a hash of the whole spec; two long specs stay apart.
  const std::string a = "sj:3/3t:cb=" + std::string(300, 'a') + ".bin", b = "sj:3/3t:cb=" + std::string(300, 'a') + ".bon";
  EXPECT_EQ(store_arm_name(a).size(), 160u + 1 + 24);
  EXPECT_EQ(store_arm_name(a).substr(0, 160), store_arm_name(b).substr(0, 160));
  EXPECT_NE(store_arm_name(a), store_arm_name(b));
  EXPECT_EQ(FrontierStore::trajectory_key("some/where/agent-1.h5", std::string(64, 'c')), "agent-1.h5-" + std::string(16, 'c'));
}

// Every file of the committed study stores is where the store looks for its arm's rows, and
// reads back through it.
TEST(FrontierStore, CommittedStoresAreFoundWhereTheyLie) {
  size_t files = 0;
  for (const auto& entry : fs::directory_iterator(std::string(SJKV_SOURCE_DIR) + "/study/frontier")) {
    const fs::path store = entry.path() / "store";
    if (!fs::is_directory(store)) continue;
    for (const auto& key : fs::directory_iterator(store)) {  // <model>-e<engine>
      const std::string k = key.path().filename().string();
      const size_t e = k.find("-e");
      ASSERT_NE(e, std::string::npos) << k;
      const FrontierStore s(store.string(), k.substr(0, e), k.substr(e + 2));
      for (const auto& traj : fs::directory_iterator(key.path()))
        for (const auto& f : fs::directory_iterator(traj.path())) {
          SCOPED_TRACE(f.path().string());
          const std::string name = f.path().filename().string();
          const size_t u = name.rfind("-u");
          ASSERT_NE(u, std::string::npos);
          const uint32_t ubatch = static_cast<uint32_t>(std::stoul(name.substr(u + 2)));
          const std::vector<PositionsCsvRow> rows = read_positions_csv_rows(f.path().string());
          ASSERT_FALSE(rows.empty());
          const std::string tkey = traj.path().filename().string();
          EXPECT_EQ(s.path(tkey, rows[0].arm, ubatch), f.path().string());
          std::vector<PositionsCsvRow> got;
          EXPECT_TRUE(s.get(tkey, rows[0].arm, ubatch, rows.size(), &got));
          EXPECT_EQ(got.size(), rows.size());
          ++files;
        }
    }
  }
  EXPECT_GT(files, 100u);
}

TEST(FrontierStore, KeepsRowsAndRefusesADamagedFile) {
  const std::string dir = filetest::scratch("store");
  const FrontierStore s(dir, std::string(64, 'a'), "2");
  const std::string arm = "sj:3/3t:tail=128:cb=cb_x.bin", key = FrontierStore::trajectory_key("t.h5", std::string(64, 'b'));
  EXPECT_EQ(s.path(key, arm, 64), dir + "/aaaaaaaaaaaaaaaa-e2/t.h5-bbbbbbbbbbbbbbbb/sj:3_3t:tail=128:cb=cb%5Fx.bin-u64.csv");
  std::vector<PositionsCsvRow> got;
  EXPECT_FALSE(s.has(key, arm, 64));
  EXPECT_FALSE(s.get(key, arm, 64, 5, &got));
  const std::vector<PositionsCsvRow> rows = rows_of(arm, 5);
  s.put(key, arm, 64, rows);
  EXPECT_TRUE(s.has(key, arm, 64));
  EXPECT_FALSE(s.has(key, arm, 128));
  ASSERT_TRUE(s.get(key, arm, 64, 5, &got));
  ASSERT_EQ(got.size(), 5u);
  for (size_t i = 0; i < 5; ++i) {
    EXPECT_EQ(got[i].position, rows[i].position);
    EXPECT_EQ(got[i].kl, rows[i].kl);
    EXPECT_EQ(got[i].same_top, rows[i].same_top);
  }
  const std::string p = s.path(key, arm, 64);
  try {
    (void)s.get(key, arm, 64, 6, &got);
    ADD_FAILURE() << "a short file accepted";
  } catch (const FileError& e) {
    EXPECT_EQ(std::string(e.what()), p + ": holds 5 rows, expected 6");
  }
  s.put(key, arm, 64, rows_of("f16", 5));  // another arm's rows under this arm's name
  try {
    (void)s.get(key, arm, 64, 5, &got);
    ADD_FAILURE() << "another arm's rows accepted";
  } catch (const FileError& e) {
    EXPECT_EQ(std::string(e.what()), p + ": holds rows of arm 'f16', expected '" + arm + "'");
  }
  std::ofstream(p, std::ios::binary) << kPositionsCsvHeader << "\nt.h5,1,f16,0.1,1,4";  // cut short
  try {
    (void)s.get(key, arm, 64, 1, &got);
    ADD_FAILURE() << "a damaged file accepted";
  } catch (const FileError& e) {
    EXPECT_EQ(e.path(), p);
  }
  // No folder: nothing kept, nothing found.
  const FrontierStore none("", std::string(64, 'a'), "2");
  none.put(key, arm, 64, rows);
  EXPECT_FALSE(none.has(key, arm, 64));
  EXPECT_FALSE(none.get(key, arm, 64, 5, &got));
}

}  // namespace
}  // namespace sjkv
