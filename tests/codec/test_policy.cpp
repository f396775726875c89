// Journal policy (docs/SPEC.md §9.4, §9.5): the deterministic cases the spec lists, the default
// decode schedule figures, and a randomized run checked against a separate model of the rules
// plus the invariants an engine relies on (tail kept exact, ring never overrun, whole groups).
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <sstream>
#include <string>

#include "sjkv/cache.h"
#include "sjkv/config.h"
#include "sjkv/policy.h"

namespace {

using sjkv::JournalPolicy;
using sjkv::kNoPos;

constexpr uint32_t kSink = 128;
constexpr uint32_t kG = 128;

// The §8.4 test configuration (sink 128, G 128, tail 256, tail_max 512).
JournalPolicy small_policy(uint32_t flush_chunk) {
  JournalPolicy p;
  p.init(kSink, 256, 512, kG, flush_chunk);
  return p;
}

std::string state_str(const JournalPolicy& p) {
  std::ostringstream os;
  os << "B=" << p.B << " B_prev=" << p.B_prev << " B_pending=" << p.B_pending
     << " draining=" << p.draining;
  return os.str();
}

// ---- §8.3 ----------------------------------------------------------------------------------

TEST(PolicyRing, CapacityExamples) {
  EXPECT_EQ(sjkv::ring_capacity(4096, 8192, 128, 512), 9344u);  // defaults, n_ubatch 512
  EXPECT_EQ(sjkv::ring_capacity(256, 512, 128, 64), 768u);      // test_state configuration
  // Rounds up to a multiple of 128, and a fixed tail (tail_max 0) sizes from tail.
  EXPECT_EQ(sjkv::ring_capacity(256, 512, 128, 65), 896u);
  EXPECT_EQ(sjkv::ring_capacity(4096, 0, 128, 1), 4352u);
  EXPECT_EQ(sjkv::ring_capacity(0, 0, 128, 1), 256u);
}

// The limits that keep ring_capacity's 32-bit sum exact: the sizes a hostile file or option
// gave (tail 4294966144, n_ubatch 2^31 - 64 or 2^31) wrap to a capacity of 0 or a small one.
TEST(PolicyRing, CapacityLimits) {
  EXPECT_TRUE(sjkv::ring_capacity_valid(4096, 8192, 128, 512));
  EXPECT_TRUE(sjkv::ring_capacity_valid(sjkv::kMaxTail, sjkv::kMaxTail, 128, sjkv::kMaxUbatch));
  EXPECT_FALSE(sjkv::ring_capacity_valid(4294966144u, 0, 128, 512));
  EXPECT_FALSE(sjkv::ring_capacity_valid(4096, 8192, 128, 2147483584u));
  EXPECT_FALSE(sjkv::ring_capacity_valid(4096, 8192, 128, 2147483648u));
  EXPECT_FALSE(sjkv::ring_capacity_valid(4096, 8192, 128, 0));
  // At the limits the capacity is exact (no wrap): 2^30 + 128 + 2^21, rounded to 128.
  EXPECT_EQ(sjkv::ring_capacity(sjkv::kMaxTail, 0, 128, sjkv::kMaxUbatch), (1u << 30) + 128u + (1u << 21));
  sjkv::CodecConfig c;
  c.tail = 4294966144u;
  c.tail_max = 0;
  EXPECT_EQ(sjkv::can_implement(c), sjkv::Unsupported::size_too_large);
  sjkv::CacheShape shape{1, 1, 1024, 2147483584u};
  sjkv::SequenceCache cache(sjkv::CodecConfig{}, shape);
  EXPECT_FALSE(cache.status().ok());
}

TEST(PolicyRing, Slot) {
  EXPECT_EQ(sjkv::ring_slot(128, 128, 768), 0u);
  EXPECT_EQ(sjkv::ring_slot(129, 128, 768), 1u);
  EXPECT_EQ(sjkv::ring_slot(128 + 767, 128, 768), 767u);
  EXPECT_EQ(sjkv::ring_slot(128 + 768, 128, 768), 0u);
  EXPECT_EQ(sjkv::ring_slot(128 + 3 * 768 + 5, 128, 768), 5u);
}

// ---- §8.4 deterministic cases ------------------------------------------------------------

TEST(PolicyDeterministic, InitAndReset) {
  JournalPolicy p = small_policy(1);
  EXPECT_EQ(p.B, kSink);
  EXPECT_EQ(p.B_prev, kSink);
  EXPECT_EQ(p.B_pending, kSink);
  EXPECT_EQ(p.draining, 0u);
  EXPECT_EQ(p.begin_ubatch(2000, 1), 256u);  // chunk-limited: B + 1 group, drain owed
  p.commit();
  EXPECT_EQ(p.draining, 1u);
  p.reset();
  EXPECT_EQ(state_str(p), "B=128 B_prev=128 B_pending=128 draining=0");
  EXPECT_EQ(p.tail, 256u);
  EXPECT_EQ(p.tail_max, 512u);
  EXPECT_EQ(p.flush_chunk, 1u);
}

TEST(PolicyDeterministic, GroupFloor) {
  const JournalPolicy p = small_policy(0);
  EXPECT_EQ(p.group_floor(100), 100u);
  EXPECT_EQ(p.group_floor(383), 256u);
  EXPECT_EQ(p.group_floor(384), 384u);
  EXPECT_EQ(sjkv::group_floor(128, 128, 100), 100u);
  EXPECT_EQ(sjkv::group_floor(128, 128, 383), 256u);
  EXPECT_EQ(sjkv::group_floor(128, 128, 384), 384u);
  EXPECT_EQ(sjkv::group_floor(128, 128, 128), 128u);
  EXPECT_EQ(sjkv::group_floor(128, 128, 0), 0u);
}

TEST(PolicyDeterministic, IdleTable) {
  struct Case {
    uint32_t B, end, keep, want;
  };
  const Case cases[] = {
      {128, 1000, 0, 640},     // keep 0 means the tail: floor(1000 - 256) = 640
      {128, 1000, 100, 640},   // keep below the tail changes nothing
      {128, 1000, 256, 640},   // keep equal to the tail changes nothing
      {128, 1000, 400, 512},   // floor(1000 - 400) = 512
      {128, 1000, 872, 128},   // floor(128) = sink: nothing to seal
      {128, 1000, 5000, 128},  // margin reaches past position 0
      {640, 1000, 400, 640},   // margin target below B: idle never lowers B
      {128, 300, 0, 128},      // end <= sink + tail
  };
  for (const Case& c : cases) {
    JournalPolicy p = small_policy(0);
    p.B = p.B_prev = p.B_pending = c.B;  // state set directly (B is group aligned)
    EXPECT_EQ(p.idle(c.end, c.keep), c.want)
        << "B " << c.B << " end " << c.end << " keep " << c.keep;
    EXPECT_EQ(p.B, c.B) << "idle must not move B before commit";
    EXPECT_EQ(p.B_pending, c.want);
  }
}

TEST(PolicyDeterministic, FixedTailIdleNeverActs) {
  for (uint32_t keep : {0u, 100u, 300u, 4000u}) {
    for (uint32_t end : {0u, 128u, 385u, 1000u, 5000u, 40000u}) {
      JournalPolicy p;
      p.init(kSink, 256, 0, kG, 0);
      EXPECT_EQ(p.idle(end, keep), p.B) << "end " << end << " keep " << keep;
      EXPECT_EQ(p.B_pending, p.B);
      // Also after the fixed tail has sealed something.
      p.begin_ubatch(1000, 1);
      p.commit();
      ASSERT_EQ(p.B, 640u);
      EXPECT_EQ(p.idle(end + 5000, keep), 640u);
      EXPECT_EQ(p.B_pending, 640u);
    }
  }
}

TEST(PolicyDeterministic, FlushChunkDrainThroughIdle) {
  JournalPolicy p = small_policy(1);
  p.draining = 1;  // state set directly: a chunked drain is owed
  // Clamped by the keep-recent margin (floor(1000 - 600) = 384 < 640): the drain stays owed.
  EXPECT_EQ(p.idle(1000, 600), 384u);
  p.commit();
  EXPECT_EQ(p.draining, 1u);
  EXPECT_EQ(p.B, 384u);
  // Unclamped: seals to the full target and settles the drain.
  EXPECT_EQ(p.idle(1000, 0), 640u);
  p.commit();
  EXPECT_EQ(p.draining, 0u);
  EXPECT_EQ(p.B, 640u);
  EXPECT_EQ(p.B_prev, 384u);
}

// A keep margin reaching into the sink clamps to the sink itself, which is not below the full
// target when that is the sink too: the idle step counts as unclamped and settles the drain.
TEST(PolicyDeterministic, IdleMarginInsideSinkSettlesDrain) {
  JournalPolicy p;
  p.init(kSink, 128, 128, kG, 1);
  EXPECT_EQ(p.begin_ubatch(700, 1), 256u);  // chunk-limited seal
  p.commit();
  ASSERT_EQ(p.draining, 1u);
  uint32_t d = 99;
  ASSERT_EQ(p.truncate(300, &d), 300u);  // tail cut keeps the drain owed
  ASSERT_EQ(p.draining, 1u);
  // full = floor(300 - 128) = 128 = sink; keep_from = 50 lies in the sink, so lim = 128.
  EXPECT_EQ(p.idle(300, 250), 256u);
  EXPECT_EQ(p.draining, 0u);
  EXPECT_EQ(p.B_pending, 256u);
}

TEST(PolicyDeterministic, FlushChunkDrainThroughDecode) {
  // A due seal of 4 groups (target 640) delivered one group per decode ubatch.
  JournalPolicy p = small_policy(1);
  const uint32_t want[] = {256, 384, 512, 640, 640};
  const uint32_t drain[] = {1, 1, 1, 0, 0};
  for (uint32_t i = 0; i < 5; ++i) {
    EXPECT_EQ(p.begin_ubatch(1000 + i, 1), want[i]) << "step " << i;
    p.commit();
    EXPECT_EQ(p.draining, drain[i]) << "step " << i;
  }
  // A ubatch of G tokens or more is never chunk-limited.
  JournalPolicy q = small_policy(1);
  EXPECT_EQ(q.begin_ubatch(1000, kG), 640u);
  EXPECT_EQ(q.draining, 0u);
  // flush_chunk 2: two groups per step.
  JournalPolicy r = small_policy(2);
  EXPECT_EQ(r.begin_ubatch(1000, 1), 384u);
  r.commit();
  EXPECT_EQ(r.draining, 1u);
  EXPECT_EQ(r.begin_ubatch(1001, 1), 640u);
  r.commit();
  EXPECT_EQ(r.draining, 0u);
}

TEST(PolicyDeterministic, AdaptiveTailTrigger) {
  JournalPolicy p = small_policy(0);
  EXPECT_EQ(p.begin_ubatch(639, 1), 128u);  // 639 - 128 < tail_max: not due
  p.commit();
  EXPECT_EQ(p.begin_ubatch(640, 1), 384u);  // due: floor(640 - 256) = 384
  p.commit();
  EXPECT_EQ(p.B, 384u);
  EXPECT_EQ(p.B_prev, 128u);
  EXPECT_EQ(p.begin_ubatch(641, 1), 384u);  // no seal: commit still moves B_prev up
  p.commit();
  EXPECT_EQ(p.B_prev, 384u);
}

// Truncate table of §8.4 with B = 1024, reached two ways: (a) fields set directly
// (B = B_prev = B_pending = 1024); (b) driven, begin_ubatch(1300, 1) + commit from a fresh
// policy (floor(1300 - 256) = 1024), which leaves B_prev = 128. The table only depends on B.
TEST(PolicyDeterministic, TruncateTable) {
  struct Case {
    uint32_t cut, resume, B, dropped;
  };
  const Case cases[] = {
      {2000, 2000, 1024, 0},  // cut in the tail
      {1024, 1024, 1024, 0},  // exactly at B: still a tail cut
      {1023, 896, 896, 1},    // one below B: last group dropped
      {896, 896, 896, 1},     // on a boundary: resume there
      {897, 896, 896, 1},
      {500, 384, 384, 5},  // across several groups
      {256, 256, 256, 6},
      {129, 128, 128, 7},
      {128, 128, 128, 7},  // at the sink end: every record dropped
      {60, 60, 128, 7},    // inside the sink: exact, resume at the cut
      {0, 0, 128, 7},
  };
  for (int driven = 0; driven < 2; ++driven) {
    for (const Case& c : cases) {
      JournalPolicy p = small_policy(0);
      if (driven) {
        ASSERT_EQ(p.begin_ubatch(1300, 1), 1024u);
        p.commit();
      } else {
        p.B = p.B_prev = p.B_pending = 1024;
      }
      const uint32_t B_prev_before = p.B_prev;
      uint32_t dropped = 99;
      EXPECT_EQ(p.trunc_floor(c.cut), c.resume) << "cut " << c.cut;
      const uint32_t got = p.truncate(c.cut, &dropped);
      EXPECT_EQ(got, c.resume) << "cut " << c.cut << " driven " << driven;
      EXPECT_EQ(p.B, c.B) << "cut " << c.cut << " driven " << driven;
      EXPECT_EQ(dropped, c.dropped) << "cut " << c.cut << " driven " << driven;
      EXPECT_EQ(p.B_pending, p.B);
      if (c.dropped) {
        EXPECT_EQ(p.B_prev, c.B);
      } else {
        EXPECT_EQ(p.B_prev, B_prev_before);  // a tail cut changes nothing
      }
      EXPECT_EQ(p.draining, 0u);
    }
  }
}

TEST(PolicyDeterministic, TruncateClearsDrainOnlyWhenDropping) {
  JournalPolicy p = small_policy(1);
  p.begin_ubatch(2000, 1);
  p.commit();
  ASSERT_EQ(p.draining, 1u);
  ASSERT_EQ(p.B, 256u);
  uint32_t d = 99;
  EXPECT_EQ(p.truncate(1990, &d), 1990u);  // tail cut: drain still owed
  EXPECT_EQ(d, 0u);
  EXPECT_EQ(p.draining, 1u);
  EXPECT_EQ(p.truncate(200, &d), 128u);
  EXPECT_EQ(d, 1u);
  EXPECT_EQ(p.draining, 0u);
}

TEST(PolicyDeterministic, TruncateRefusedWhileSealPending) {
  JournalPolicy p = small_policy(0);
  EXPECT_EQ(p.begin_ubatch(2000, 1), 1664u);
  const std::string before = state_str(p);
  uint32_t d = 99;
  EXPECT_EQ(p.truncate(300, &d), kNoPos);
  EXPECT_EQ(d, 0u);
  EXPECT_EQ(state_str(p), before);
  EXPECT_EQ(p.truncate(300, nullptr), kNoPos);  // n_dropped is optional
  EXPECT_EQ(state_str(p), before);
  EXPECT_EQ(p.B, 128u);
  p.commit();
  EXPECT_EQ(p.truncate(300, nullptr), 256u);  // accepted once committed
}

// §10.5 growth pattern 4 over [0, 1500) (tail 256, tail_max 512): every golden-state config
// ends with B = B_prev = 1152 and no drain, with flush_chunk 0 and 1 alike.
TEST(PolicyDeterministic, GoldenStateGrowthFinalState) {
  for (uint32_t chunk : {0u, 1u}) {
    JournalPolicy p = small_policy(chunk);
    const uint32_t cap = sjkv::ring_capacity(256, 512, kG, 64);
    uint32_t pos = 0;
    for (uint32_t k = 0; pos < 1500; ++k) {
      uint32_t n = (k % 5 == 4) ? 1 + (4 * 7 + 13 * k) % 64 : 1 + (k + 4) % 4;
      if (pos + n > 1500) n = 1500 - pos;
      p.begin_ubatch(pos, n);
      p.commit();
      ASSERT_LE(pos + n, p.B_prev + cap);
      pos += n;
    }
    EXPECT_EQ(p.B, 1152u) << "chunk " << chunk;
    EXPECT_EQ(p.B_prev, 1152u) << "chunk " << chunk;
    EXPECT_EQ(p.draining, 0u) << "chunk " << chunk;
  }
}

// Default schedule: one token per ubatch for positions 0..99999, sealing only when the tail
// reaches tail_max (8192) and then back down to tail (4096): 23 seals, at pos0 = 8320 + 4096k.
//
// "Longest exact tail 8191" is the largest pos - B, taken right after storing position pos
// (equivalently: the number of unsealed positions already stored when the ubatch of pos begins,
// [B, pos)). It peaks at pos0 = 8319 with B = 128, the step before the tail_max trigger. Counting
// the just-stored row as well (n_stored - B = pos + 1 - B) gives 8192 = tail_max instead; the
// spec's figure is the former, which is also what the reference test measures.
TEST(PolicyDefaultSchedule, CommitsAndLongestTail) {
  JournalPolicy p;
  p.init(128, 4096, 8192, 128, 0);
  const uint32_t cap = sjkv::ring_capacity(4096, 8192, 128, 1);
  uint32_t advancing_commits = 0, longest = 0, longest_rows = 0, first_seal_pos = 0;
  for (uint32_t pos = 0; pos < 100000; ++pos) {
    const uint32_t before = p.B;
    if (p.begin_ubatch(pos, 1) > before) {
      ++advancing_commits;
      if (!first_seal_pos) first_seal_pos = pos;
      ASSERT_EQ(pos - p.B_pending, 4096u) << "a seal leaves exactly `tail` positions";
    }
    p.commit();
    ASSERT_LE(pos + 1, p.B_prev + cap);
    // Position pos is now stored.
    if (pos > p.B && pos - p.B > longest) longest = pos - p.B;
    const uint32_t rows = pos + 1 > p.B ? pos + 1 - p.B : 0;
    if (rows > longest_rows) longest_rows = rows;
  }
  EXPECT_EQ(advancing_commits, 23u);
  EXPECT_EQ(longest, 8191u);
  EXPECT_EQ(longest_rows, 8192u);  // the alternative reading, = tail_max
  EXPECT_EQ(first_seal_pos, 8320u);
  EXPECT_EQ(p.B, 128u + 4096u * 23u);
}

// ---- Randomized run against a separate model ---------------------------------------------

// xorshift64 of docs/SPEC.md §13.1.
struct XorShift64 {
  uint64_t s;
  uint32_t next() {
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    return static_cast<uint32_t>(s >> 11);
  }
};

// The §8.4 rules restated in signed 64-bit arithmetic, so that a missing or wrong unsigned
// guard in the header (a wrap-around) shows up as a difference. Written from the spec text,
// not from the header; idle's margin is expressed as one clamp by max(keep, tail).
struct ModelPolicy {
  int64_t sink, tail, tail_max, G, chunk;
  int64_t B, B_prev, B_pending;
  bool draining;

  void init(int64_t s, int64_t t, int64_t tm, int64_t g, int64_t c) {
    sink = s;
    tail = t;
    tail_max = tm;
    G = g;
    chunk = c;
    B = B_prev = B_pending = sink;
    draining = false;
  }
  // Largest group boundary <= x, for x >= sink.
  int64_t boundary_below(int64_t x) const { return x - (x - sink) % G; }

  int64_t begin(int64_t pos0, int64_t n) {
    B_pending = B;
    const bool due = tail_max == 0 || draining || pos0 - B >= tail_max;
    draining = false;
    if (!due || pos0 - tail <= sink) return B_pending;
    int64_t target = boundary_below(pos0 - tail);
    if (target < B) target = B;
    const bool small = n < G;
    if (tail_max != 0 && chunk != 0 && small && target - B > G * chunk) {
      target = B + G * chunk;
      draining = true;
    }
    B_pending = target;
    return B_pending;
  }
  void commit() {
    B_prev = B;
    B = B_pending;
  }
  int64_t idle(int64_t end, int64_t keep) {
    B_pending = B;
    if (tail_max == 0 || end - tail <= sink) return B;
    const int64_t full = boundary_below(end - tail);
    const int64_t margin = keep > tail ? keep : tail;
    const int64_t from = end - margin;
    const int64_t lim = from <= sink ? sink : boundary_below(from);
    const bool clamped = lim < full;  // only possible when keep > tail
    if (!clamped) draining = false;
    if (lim <= B) return B;
    B_pending = lim;
    return lim;
  }
  // Returns -1 for NO_POS.
  int64_t truncate(int64_t pos, int64_t* dropped) {
    *dropped = 0;
    if (B_pending != B) return -1;
    int64_t r = pos;
    if (pos > sink && pos < B) r = boundary_below(pos);
    if (r < B) {
      const int64_t nb = r < sink ? sink : r;
      *dropped = (B - nb) / G;
      B = B_prev = B_pending = nb;
      draining = false;
    }
    return r;
  }
};

// Empty when the header state equals the model state.
std::string compare_state(const JournalPolicy& p, const ModelPolicy& m) {
  if (p.B == m.B && p.B_prev == m.B_prev && p.B_pending == m.B_pending &&
      p.draining == (m.draining ? 1u : 0u))
    return {};
  std::ostringstream os;
  os << "header " << state_str(p) << " vs model B=" << m.B << " B_prev=" << m.B_prev
     << " B_pending=" << m.B_pending << " draining=" << m.draining;
  return os.str();
}

struct FuzzStats {
  uint64_t steps = 0, seals = 0, idles = 0, idle_seals = 0, truncs = 0, body_truncs = 0,
           refused = 0, drains = 0;
};

// One trial: grow to 40000 positions with random ubatches, idle steps and truncations.
// Returns an empty string, or what went wrong and where.
std::string run_trial(XorShift64& rng, uint32_t tail, uint32_t tail_max, uint32_t chunk,
                      FuzzStats& st) {
  const uint32_t n_ubatch = 1 + rng.next() % 512;
  const uint32_t cap = sjkv::ring_capacity(tail, tail_max, kG, n_ubatch);
  JournalPolicy p;
  p.init(kSink, tail, tail_max, kG, chunk);
  ModelPolicy m;
  m.init(kSink, tail, tail_max, kG, chunk);
  {
    const int64_t longest = tail_max > tail ? tail_max : tail;
    const int64_t rows = longest + kG + 2 * int64_t(n_ubatch);
    if (int64_t(cap) != (rows + 127) / 128 * 128 || cap % 128 != 0)
      return "ring_capacity " + std::to_string(cap);
  }
  uint32_t pos = 0;
  // Truncations are spaced by positions of progress (about 2000), not by steps, so that a
  // trial dominated by single-token decodes still drifts forward to 40000; at most one cut
  // per trial may jump back anywhere (down into the sink).
  uint32_t next_cut = 500 + rng.next() % 3000;
  bool deep_cut_done = false;
  std::string err;
  auto where = [&](const char* what) {
    std::ostringstream os;
    os << what << " at pos " << pos << " (n_ubatch " << n_ubatch << ", cap " << cap << ", "
       << state_str(p) << ")";
    return os.str();
  };
  while (pos < 40000) {
    // Decode steps mostly; a prefill-sized ubatch one time in four.
    const uint32_t n = (rng.next() % 4 != 0) ? 1 : 1 + rng.next() % n_ubatch;
    const uint32_t B_before = p.B;
    const uint32_t target = p.begin_ubatch(pos, n);
    const int64_t want = m.begin(pos, n);
    ++st.steps;
    if (target != want) return where("begin_ubatch result differs from the model");
    if (!(err = compare_state(p, m)).empty()) return where(("begin_ubatch: " + err).c_str());
    if (target < B_before) return where("seal target below B");
    if (p.draining) ++st.drains;
    if (target > B_before) {
      ++st.seals;
      if ((target - kSink) % kG != 0) return where("seal target off a group boundary");
      if (pos - target < tail) return where("seal ate into the exact tail");
      // A truncation in the middle of a seal is refused and changes nothing.
      if (rng.next() % 16 == 0) {
        const JournalPolicy saved = p;
        uint32_t d = 99;
        const uint32_t cut = rng.next() % (pos + 1);
        if (p.truncate(cut, &d) != kNoPos || d != 0)
          return where("truncate during a seal accepted");
        if (std::memcmp(&saved, &p, sizeof p) != 0) return where("refused truncate changed state");
        ++st.refused;
      }
    }
    p.commit();
    m.commit();
    if (!(err = compare_state(p, m)).empty()) return where(("commit: " + err).c_str());
    if (p.B_prev > p.B) return where("B_prev > B");
    if ((p.B - kSink) % kG != 0) return where("B off a group boundary");
    // This ubatch's rows and every row still unsealed before its seal must coexist.
    if (uint64_t(pos) + n > uint64_t(p.B_prev) + cap) return where("ring overrun");
    pos += n;

    if (rng.next() % 64 == 0) {
      const uint32_t keep = (rng.next() % 2) ? 0 : rng.next() % 12000;
      const uint32_t B0 = p.B;
      const uint32_t t = p.idle(pos, keep);
      const int64_t tw = m.idle(pos, keep);
      ++st.steps;
      ++st.idles;
      if (t != tw) return where("idle result differs from the model");
      if (!(err = compare_state(p, m)).empty()) return where(("idle: " + err).c_str());
      if (t < B0) return where("idle lowered B");
      if (t > B0) {
        ++st.idle_seals;
        const uint32_t margin = keep > tail ? keep : tail;
        if (tail_max == 0) return where("idle acted with a fixed tail");
        if (pos - t < margin) return where("idle sealed inside the keep margin");
        if ((t - kSink) % kG != 0) return where("idle target off a group boundary");
        p.commit();
        m.commit();
        if (!(err = compare_state(p, m)).empty()) return where(("idle commit: " + err).c_str());
      }
    }

    if (pos >= next_cut) {
      // Prompt-cache reuse: a look-back of up to 1500 positions (an edited prompt suffix),
      // once per trial possibly anywhere.
      uint32_t cut;
      if (deep_cut_done || rng.next() % 4 != 0) {
        const uint32_t look = pos < 1500 ? pos : 1500;
        cut = pos - rng.next() % (look + 1);
      } else {
        cut = rng.next() % (pos + 1);
        deep_cut_done = true;
      }
      const uint32_t B0 = p.B, B_prev0 = p.B_prev;
      uint32_t dropped = 99;
      const uint32_t r = p.truncate(cut, &dropped);
      int64_t mdropped = 0;
      const int64_t rw = m.truncate(cut, &mdropped);
      ++st.steps;
      ++st.truncs;
      if (r == kNoPos) return where("truncate refused with no seal pending");
      if (r != rw || dropped != mdropped) return where("truncate differs from the model");
      if (!(err = compare_state(p, m)).empty()) return where(("truncate: " + err).c_str());
      if (r > cut || cut - r > kG - 1) return where("resume point out of range");
      if (r >= B0) {
        if (p.B != B0 || p.B_prev != B_prev0 || dropped != 0) return where("tail cut changed B");
        if (r != cut) return where("tail cut moved the resume point");
      } else {
        ++st.body_truncs;
        const uint32_t nb = r > kSink ? r : kSink;
        if (p.B != nb || p.B_prev != nb || p.B_pending != nb || p.draining != 0)
          return where("body cut state");
        if (dropped != (B0 - nb) / kG) return where("dropped count");
        if (cut > kSink && (r - kSink) % kG != 0) return where("body cut off a group boundary");
        if (cut <= kSink && r != cut) return where("sink cut moved the resume point");
      }
      pos = r;
      next_cut = pos + 500 + rng.next() % 3000;
    }
  }
  return {};
}

// decode_run (blocked scoring): from states reached by prefill, decode, idle and drains on the
// fuzz grid, a block of decode_run's length leaves B and draining exactly where one-token steps
// leave them, and one more position would not.
struct StepResult {
  uint32_t B, draining;
  bool operator==(const StepResult& o) const { return B == o.B && draining == o.draining; }
};

StepResult one_token_steps(JournalPolicy p, uint32_t pos0, uint32_t r) {
  for (uint32_t i = 0; i < r; ++i) {
    p.begin_ubatch(pos0 + i, 1);
    p.commit();
  }
  return {p.B, p.draining};
}

StepResult one_block(JournalPolicy p, uint32_t pos0, uint32_t r) {
  p.begin_ubatch(pos0, r);
  p.commit();
  return {p.B, p.draining};
}

TEST(PolicyFuzz, DecodeRunIsTheOneTokenSteps) {
  const uint32_t tails[][2] = {{4096, 8192}, {4096, 0}, {256, 512},
                               {128, 128},   {0, 0},    {512, 1024}};
  XorShift64 rng{0x9e3779b97f4a7c15ull};
  uint64_t checks = 0, blocks_over_one = 0, cut_by_seal = 0, drained = 0;
  for (const auto& tp : tails) {
    for (uint32_t chunk = 0; chunk < 3; ++chunk) {
      JournalPolicy p;
      p.init(kSink, tp[0], tp[1], kG, chunk);
      uint32_t pos = 0;
      for (int step = 0; step < 6000 && pos < 200000; ++step) {
        const uint32_t limit = 1 + rng.next() % 512;
        const uint32_t r = p.decode_run(pos, limit);
        ++checks;
        ASSERT_GE(r, 1u);
        ASSERT_LE(r, limit);
        ASSERT_EQ(one_block(p, pos, r), one_token_steps(p, pos, r))
            << "tail " << tp[0] << "/" << tp[1] << " chunk " << chunk << " pos " << pos << " r " << r
            << " " << state_str(p);
        if (r < limit) {
          EXPECT_FALSE(one_block(p, pos, r + 1) == one_token_steps(p, pos, r + 1))
              << "tail " << tp[0] << "/" << tp[1] << " chunk " << chunk << " pos " << pos << " r " << r
              << " not the longest block";
          ++cut_by_seal;
        }
        if (r > 1) ++blocks_over_one;
        if (p.draining) ++drained;
        // Advance as a scorer would: the block, or now and then a prefill ubatch or an idle.
        const uint32_t what = rng.next() % 16;
        if (what == 0) {
          const uint32_t n = 1 + rng.next() % 2048;
          p.begin_ubatch(pos, n);
          p.commit();
          pos += n;
        } else if (what == 1 && tp[1] != 0) {
          if (p.idle(pos, (rng.next() % 2) ? 0 : rng.next() % 12000) > p.B) p.commit();
        } else {
          p.begin_ubatch(pos, r);
          p.commit();
          pos += r;
        }
      }
    }
  }
  EXPECT_GT(blocks_over_one, checks / 2);
  EXPECT_GT(cut_by_seal, 100u);
  EXPECT_GT(drained, 100u);  // clamped seals (flush_chunk) were met
  RecordProperty("checks", std::to_string(checks));
}

TEST(PolicyFuzz, MatchesModelAndInvariants) {
  // tail 0 passes layer validation (§8.1: tail mod G = 0; tail_max 0 skips the tail_max
  // checks), so (0, 0) is a legal configuration: seal every whole group at once.
  const uint32_t tails[][2] = {{4096, 8192}, {4096, 0}, {256, 512},
                               {128, 128},   {0, 0},    {512, 1024}};
  constexpr int kTrials = 40;
  XorShift64 rng{88172645463325252ull};
  FuzzStats total;
  for (const auto& tp : tails) {
    for (uint32_t chunk = 0; chunk < 3; ++chunk) {
      FuzzStats st;
      for (int trial = 0; trial < kTrials; ++trial) {
        const std::string err = run_trial(rng, tp[0], tp[1], chunk, st);
        if (!err.empty()) {
          ADD_FAILURE() << "tail " << tp[0] << " tail_max " << tp[1] << " flush_chunk " << chunk
                        << " trial " << trial << ": " << err;
          break;
        }
      }
      // Each configuration must actually exercise what it claims to.
      EXPECT_GT(st.seals, 0u) << "tail " << tp[0] << "/" << tp[1] << " chunk " << chunk;
      EXPECT_GT(st.body_truncs, 0u) << "tail " << tp[0] << "/" << tp[1] << " chunk " << chunk;
      if (tp[1] != 0) {
        EXPECT_GT(st.idle_seals, 0u) << "tail " << tp[0] << "/" << tp[1];
      }
      if (tp[1] != 0 && chunk != 0) {
        EXPECT_GT(st.drains, 0u) << "tail " << tp[0] << "/" << tp[1] << " chunk " << chunk;
      }
      total.steps += st.steps;
      total.seals += st.seals;
      total.truncs += st.truncs;
      total.refused += st.refused;
    }
  }
  EXPECT_GE(total.steps, 1000000u);
  EXPECT_GT(total.refused, 0u);
  RecordProperty("steps", std::to_string(total.steps));
  RecordProperty("seals", std::to_string(total.seals));
  RecordProperty("truncations", std::to_string(total.truncs));
}

}  // namespace
