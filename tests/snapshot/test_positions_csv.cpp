// positions.csv (sjkv/io/positions_csv.h, docs/FORMAT.md section 10): the lines read back bit
// for bit, and one must-reject case per defect, each naming the file and the line.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "file_fixtures.h"
#include "sjkv/io/file_error.h"
#include "sjkv/io/positions_csv.h"

namespace sjkv {
namespace {

std::string write_text(const std::string& name, const std::string& text) {
  const std::string p = filetest::scratch(name);
  std::ofstream(p, std::ios::binary) << text;
  return p;
}

PositionsCsvRow row(const std::string& traj, uint32_t pos, const std::string& arm, double kl, bool top, double occ,
                    double alc) {
  PositionsCsvRow r;
  r.trajectory = traj;
  r.position = pos;
  r.arm = arm;
  r.kl = kl;
  r.same_top = top;
  r.bits_occupied = occ;
  r.bits_allocated = alc;
  return r;
}

// The bytes of a line: names quoted where they hold a comma or a quote, KL at 17 digits or inf,
// bits at 6.
TEST(PositionsCsv, LinesAreTheDocumentedBytes) {
  EXPECT_EQ(positions_csv_line(row("a.h5", 7, "sj:4/4", 0.1, true, 4.5, 9.0)), "a.h5,7,sj:4/4,0.10000000000000001,1,4.5,9\n");
  EXPECT_EQ(positions_csv_line(row("a,b.h5", 4294967295u, "sj:3/2t:cb=x\"y.bin", std::numeric_limits<double>::infinity(),
                                   false, 2.0 / 3.0, 16.0)),
            "\"a,b.h5\",4294967295,\"sj:3/2t:cb=x\"\"y.bin\",inf,0,0.666667,16\n");
  EXPECT_EQ(std::string(kPositionsCsvHeader), "trajectory,position,arm,kl,same_top,bits_occupied,bits_allocated");
}

TEST(PositionsCsv, ReadsBackBitForBit) {
  std::vector<PositionsCsvRow> in;
  for (uint32_t i = 0; i < 40; ++i)
    in.push_back(row(i % 2 ? "t,1.h5" : "t2.h5", 1000 + 3 * i, i % 3 ? "q4_0:rot" : "sj:\"4/4\"",
                     i == 7 ? std::numeric_limits<double>::infinity() : std::ldexp(1.0 + 0.013 * i, -static_cast<int>(i % 9)),
                     i % 4 == 0, 4.25 + i, 9.0625));
  std::string text = std::string(kPositionsCsvHeader) + "\n";
  for (const PositionsCsvRow& r : in) text += positions_csv_line(r);
  const std::string p = write_text("positions.csv", text);
  const std::vector<PositionsCsvRow> back = read_positions_csv_rows(p);
  ASSERT_EQ(back.size(), in.size());
  for (size_t i = 0; i < in.size(); ++i) {
    SCOPED_TRACE(i);
    EXPECT_EQ(back[i].trajectory, in[i].trajectory);
    EXPECT_EQ(back[i].arm, in[i].arm);
    EXPECT_EQ(back[i].position, in[i].position);
    EXPECT_EQ(0, std::memcmp(&back[i].kl, &in[i].kl, sizeof(double)));
    EXPECT_EQ(back[i].same_top, in[i].same_top);
    EXPECT_EQ(back[i].bits_occupied, in[i].bits_occupied);
    EXPECT_EQ(back[i].bits_allocated, in[i].bits_allocated);
    EXPECT_EQ(back[i].source, p);
    EXPECT_EQ(back[i].line, i + 2);
  }
  // Only the header: no rows.
  EXPECT_TRUE(read_positions_csv_rows(write_text("empty.csv", text.substr(0, text.find('\n') + 1))).empty());
}

TEST(PositionsCsv, EachDefectIsRefusedNamingTheFileAndTheLine) {
  const std::string head = std::string(kPositionsCsvHeader) + "\n";
  const std::pair<const char*, const char*> bad[] = {
      {"x,y\n", "not a positions.csv (its first line is not 'trajectory,position,arm,kl,same_top,bits_occupied,bits_allocated')"},
      {"a.h5,3,f16,0.1,1,16\n", "line 2: not seven comma-separated fields"},
      {"a.h5,3,f16,0.1,1,16,16,16\n", "line 2: not seven comma-separated fields"},
      {"\"a.h5,3,f16,0.1,1,16,16\n", "line 2: not seven comma-separated fields"},  // unterminated quote
      {"a\"b.h5,3,f16,0.1,1,16,16\n", "line 2: not seven comma-separated fields"},  // a bare quote
      {",3,f16,0.1,1,16,16\n", "line 2: empty trajectory or arm name"},
      {"a.h5,3,,0.1,1,16,16\n", "line 2: empty trajectory or arm name"},
      {"a.h5,-3,f16,0.1,1,16,16\n", "line 2: position '-3' is not a whole number"},
      {"a.h5,3.5,f16,0.1,1,16,16\n", "line 2: position '3.5' is not a whole number"},
      {"a.h5,4294967296,f16,0.1,1,16,16\n", "line 2: position '4294967296' is not a whole number"},
      {"a.h5,3,f16,nan,1,16,16\n", "line 2: KL 'nan' is not a finite number >= 0 (or inf)"},
      {"a.h5,3,f16,-1e-3,1,16,16\n", "line 2: KL '-1e-3' is not a finite number >= 0 (or inf)"},
      {"a.h5,3,f16,-inf,1,16,16\n", "line 2: KL '-inf' is not a finite number >= 0 (or inf)"},
      {"a.h5,3,f16,0.1,2,16,16\n", "line 2: same_top is not 0 or 1"},
      {"a.h5,3,f16,0.1,1,16,inf\n", "line 2: bits are not finite numbers >= 0"},
      {"a.h5,3,f16,0.1,1,-1,16\n", "line 2: bits are not finite numbers >= 0"},
      {"a.h5,3,f16,0.1,1,16,16\na.h5,4,f16,0.1,1,16,1", "line 3: no line end (the file is cut short)"},
  };
  for (const auto& [body, defect] : bad) {
    SCOPED_TRACE(body);
    const std::string p = write_text("bad.csv", std::string(body).rfind("x,y", 0) == 0 ? body : head + body);
    try {
      (void)read_positions_csv_rows(p);
      ADD_FAILURE() << "accepted";
    } catch (const FileError& e) {
      EXPECT_EQ(e.path(), p);
      EXPECT_EQ(e.defect(), defect);
      EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos);
    }
  }
  EXPECT_THROW((void)read_positions_csv_rows(filetest::scratch("missing.csv")), FileError);
  const std::string fifo = filetest::scratch("positions.fifo");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  try {
    (void)read_positions_csv_rows(fifo);
    ADD_FAILURE() << "a FIFO accepted";
  } catch (const FileError& e) {
    EXPECT_EQ(e.defect(), "is a FIFO, not a regular file");
  }
}

}  // namespace
}  // namespace sjkv
