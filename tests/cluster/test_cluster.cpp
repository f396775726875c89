// sjkv/cluster.h as one process (no launcher): what every tool does without mpirun. The ranks
// themselves are tested end to end under mpirun (tests/cli/test_mpi.sh).
#include <gtest/gtest.h>

#include <cmath>
#include <stdexcept>

#include "sjkv/cluster.h"
#include "sjkv/io/file_error.h"

using namespace sjkv;
using namespace sjkv::cluster;

TEST(Cluster, PackerRoundTripsAndRefusesAShortMessage) {
  Packer p;
  p.u64(0).u64(~0ull).f64(-0.0).f64(1e-300).str("").str("rank 1: bad.kvd");
  Unpacker in(p.bytes);
  EXPECT_EQ(in.u64(), 0u);
  EXPECT_EQ(in.u64(), ~0ull);
  const double z = in.f64();
  EXPECT_TRUE(z == 0.0 && std::signbit(z));
  EXPECT_EQ(in.f64(), 1e-300);
  EXPECT_EQ(in.str(), "");
  EXPECT_EQ(in.str(), "rank 1: bad.kvd");
  EXPECT_TRUE(in.done());
  EXPECT_THROW(in.u64(), std::runtime_error);
  // little-endian whatever the machine
  Packer q;
  q.u64(0x0102030405060708ull);
  EXPECT_EQ(q.bytes, (std::vector<uint8_t>{8, 7, 6, 5, 4, 3, 2, 1}));
  // a string longer than what is left
  std::vector<uint8_t> b = p.bytes;
  b.resize(b.size() - 1);
  Unpacker cut(b);
  for (int i = 0; i < 5; ++i) cut.u64();
  EXPECT_THROW(cut.str(), std::runtime_error);
}

TEST(Cluster, OneProcessDoesWhatItWouldAnyway) {
  const Comm& w = Comm::world();
  EXPECT_EQ(w.rank(), 0);
  EXPECT_EQ(w.size(), 1);
  EXPECT_TRUE(w.root());
  EXPECT_FALSE(w.distributed());
  Accumulator acc{{1.5}, {2}};
  int calls = 0;
  w.ordered(acc, [&](Accumulator& a) {
    ++calls;
    a.d[0] += 1.0;
    a.u[0] += 3;
  });
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(acc.d[0], 2.5);
  EXPECT_EQ(acc.u[0], 5u);
  const std::vector<uint8_t> mine{1, 2, 3};
  EXPECT_EQ(w.gather(mine), std::vector<std::vector<uint8_t>>{mine});
  EXPECT_EQ(w.all_gather(mine), std::vector<std::vector<uint8_t>>{mine});
  std::vector<uint8_t> b = mine;
  w.broadcast(b);
  EXPECT_EQ(b, mine);
}

TEST(Cluster, AgreeAloneLetsTheExceptionThroughAsItIs) {
  const Comm& w = Comm::world();
  bool inside = false;
  w.agree([&](uint64_t&) { inside = Comm::in_agree(); });
  EXPECT_TRUE(inside);
  EXPECT_FALSE(Comm::in_agree());
  try {
    w.agree([](uint64_t& key) {
      key = 3;
      throw FileError("x.kvd", "truncated");
    });
    FAIL() << "no exception";
  } catch (const Failed&) {
    FAIL() << "one process does not turn a failure into Failed";
  } catch (const FileError& e) {
    EXPECT_NE(std::string(e.what()).find("x.kvd"), std::string::npos);
  }
  EXPECT_FALSE(Comm::in_agree());
}
