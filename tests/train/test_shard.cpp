// How sjkv-train spreads its work over MPI ranks, checked in one process: every rank's records
// are whole Lloyd chunks, the ranks together hold every record once and in order, and the
// targets a rank computes for its records are those records' targets in the whole set.
#include <gtest/gtest.h>

#include <vector>

#include "sjkv/lloyd.h"
#include "sjkv/train/train.h"
#include "train_fixtures.h"

using namespace sjkv;
using namespace sjkv::train;

using sjkv::train_test::make_capture;

TEST(Shard, WholeChunksCoverTheSetInOrder) {
  for (uint32_t spr : {64u, 128u, 256u, 512u, 1024u})
    for (uint64_t n : {0ull, 1ull, 3ull, 7ull, 8ull, 100ull, 1001ull})
      for (int size = 1; size <= 5; ++size) {
        uint64_t next = 0;
        for (int r = 0; r < size; ++r) {
          const RecordRange g = shard_records(n, spr, r, size);
          EXPECT_EQ(g.first, next) << spr << " " << n << " " << r << "/" << size;
          EXPECT_LE(g.first, g.last);
          // a slice starts on a chunk boundary of the sequences
          EXPECT_EQ(g.first * spr % kLloydChunk, 0u) << spr << " " << n << " " << r << "/" << size;
          next = g.last;
        }
        EXPECT_EQ(next, n);
        EXPECT_EQ(shard_records(n, spr, 0, 1).last, n);
      }
}

TEST(Shard, RanksTargetsAreTheWholeSetsInOrder) {
  // Two inputs, as the pipeline reads them: the split drawn over both in input order.
  const Capture caps[2] = {make_capture(3, 9, 11), make_capture(2, 6, 5)};
  TargetOptions to;
  to.config.bits_k = to.config.bits_v = 3;
  to.config.sink = 128;
  SplitDrawer split(7, 0.3);
  std::vector<uint8_t> held[2];
  TrainingSet whole;
  uint64_t n_tr = 0, n_ho = 0;
  for (int i = 0; i < 2; ++i) {
    held[i] = split.draw(capture_records(caps[i], to));
    append_capture_targets(caps[i], to, held[i], {}, whole);
    for (uint8_t h : held[i]) ++(h ? n_ho : n_tr);
  }
  ASSERT_EQ(whole.train_records, n_tr);
  ASSERT_GT(n_ho, 4u);
  const uint32_t spr = sequences_per_record(target_config(128, to));
  EXPECT_EQ(spr, 128u);
  for (int size = 1; size <= 4; ++size) {
    TrainingSet joined;
    for (int r = 0; r < size; ++r) {
      const RecordRange tr = shard_records(n_tr, spr, r, size), ho = shard_records(n_ho, spr, r, size);
      TrainingSet part;
      uint64_t before_tr = 0, before_ho = 0;
      for (int i = 0; i < 2; ++i) {
        const std::vector<uint8_t> keep = records_in_shard(held[i], tr, ho, &before_tr, &before_ho);
        append_capture_targets(caps[i], to, held[i], keep, part);
      }
      EXPECT_EQ(before_tr, n_tr);
      EXPECT_EQ(part.train_records, tr.last - tr.first);
      EXPECT_EQ(part.heldout_records, ho.last - ho.first);
      for (auto [dst, src] : {std::pair{&joined.train_k, &part.train_k}, {&joined.train_v, &part.train_v},
                              {&joined.heldout_k, &part.heldout_k}, {&joined.heldout_v, &part.heldout_v}})
        dst->y.insert(dst->y.end(), src->y.begin(), src->y.end());
      joined.heldout_k_rows.insert(joined.heldout_k_rows.end(), part.heldout_k_rows.begin(), part.heldout_k_rows.end());
    }
    EXPECT_EQ(joined.train_k.y, whole.train_k.y) << size;
    EXPECT_EQ(joined.train_v.y, whole.train_v.y) << size;
    EXPECT_EQ(joined.heldout_k.y, whole.heldout_k.y) << size;
    EXPECT_EQ(joined.heldout_v.y, whole.heldout_v.y) << size;
    EXPECT_EQ(joined.heldout_k_rows, whole.heldout_k_rows) << size;
  }
}
