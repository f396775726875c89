// The configuration grammar (config.h, docs/SPEC.md §9.1) both ways: parse_config reads back
// what CodecConfig::name() prints for many configurations, hand-written names mean what the
// grammar says, and malformed names are refused with a message naming the offending part.
#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "sjkv/config.h"

using namespace sjkv;

namespace {

// What name() keeps: the resolved body and rotation, no flush, the axis of trellis bodies only.
CodecConfig printed(CodecConfig c) {
  c.body = c.resolved_body();
  c.rotation_block = c.rotation();
  c.flush_chunk = 0;
  return c;
}

std::vector<CodecConfig> many_configs() {
  std::vector<CodecConfig> out;
  const Body bodies[] = {Body::automatic, Body::scalar, Body::trellis};
  const TrellisAxis axes[] = {TrellisAxis::token, TrellisAxis::channel};
  const uint32_t dims[] = {32, 64, 128, 256, 512};
  uint32_t salt = 0;
  for (uint32_t bk = 2; bk <= 4; ++bk)
    for (uint32_t bv = 2; bv <= 4; ++bv)
      for (Body body : bodies)
        for (TrellisAxis axis : axes)
          for (uint32_t D : dims)
            for (StagingType st : kStagingTypes)
              for (BalanceMode bal : {BalanceMode::final_scales, BalanceMode::best_of}) {
                ++salt;
                CodecConfig c = bal == BalanceMode::best_of ? kvarn_config(D, bk, bv, 0) : CodecConfig{};
                c.head_dim = D;
                c.bits_k = bk;
                c.bits_v = bv;
                c.body = body;
                c.trellis_axis = axis;
                c.staging = st;
                c.group = salt % 3 == 0 && c.resolved_body() != Body::trellis ? 64 : 128;
                c.sink_type = salt % 4 == 1 ? SinkType::inherit : SinkType::f16;
                c.sink = 64 * (1 + salt % 3);
                c.tail = c.group * (salt % 5);
                c.tail_max = salt % 2 ? 0 : 128 * (salt % 5 + 8);
                c.iters = salt % 7 == 0 ? 0 : bal == BalanceMode::best_of ? 8 : 16 + salt % 3;
                c.rotation_block = salt % 3 == 0 ? 0 : salt % 3 == 1 ? 32 : D;
                if (can_implement(c) == Unsupported::none) out.push_back(c);
              }
  return out;
}

TEST(ConfigGrammar, ParseReadsBackEveryName) {
  const std::vector<CodecConfig> configs = many_configs();
  ASSERT_GT(configs.size(), 500u);
  size_t kvarn = 0, trellis = 0, channel = 0, inherit = 0;
  for (const CodecConfig& c : configs) {
    const std::string name = c.name();
    SCOPED_TRACE(name);
    CodecConfig back;
    std::string error;
    ASSERT_TRUE(parse_config(name, &back, &error)) << error;
    EXPECT_TRUE(back == printed(c));
    EXPECT_EQ(back.name(), name);
    EXPECT_EQ(can_implement(back), Unsupported::none);
    // flush is a field of the grammar that name() does not print.
    ASSERT_TRUE(parse_config(name + ":flush=3", &back, &error)) << error;
    EXPECT_EQ(back.flush_chunk, 3u);
    kvarn += c.balance == BalanceMode::best_of;
    trellis += c.resolved_body() == Body::trellis;
    channel += c.trellis_axis == TrellisAxis::channel;
    inherit += c.sink_type == SinkType::inherit;
  }
  // The sample covers every printed variant.
  EXPECT_GT(kvarn, 100u);
  EXPECT_GT(trellis, 100u);
  EXPECT_GT(channel, 50u);
  EXPECT_GT(inherit, 100u);
  // Names of configurations the codec cannot serve still read back: the grammar is syntax.
  CodecConfig odd;
  odd.head_dim = 48;
  odd.group = 100;
  CodecConfig back;
  std::string error;
  ASSERT_TRUE(parse_config(odd.name(), &back, &error)) << error;
  EXPECT_TRUE(back == printed(odd));
}

TEST(ConfigGrammar, HandWrittenNames) {
  CodecConfig c;
  std::string error;
  ASSERT_TRUE(parse_config("sj:4/4", &c, &error)) << error;
  CodecConfig want;
  want.body = Body::scalar;
  EXPECT_TRUE(c == want);
  // The KVarN arm's short form is kvarn_config.
  ASSERT_TRUE(parse_config("kvarn:4/4:tail=1024", &c, &error)) << error;
  EXPECT_TRUE(c == kvarn_config(128, 4, 4, 1024));
  ASSERT_TRUE(parse_config("kvarn:3/2:iters=8(best)", &c, &error)) << error;
  EXPECT_TRUE(c == kvarn_config(128, 3, 2));
  ASSERT_TRUE(parse_config("sj:3/2t:axis=channel:staging=q8_0:sink=256(inherit):tail=512/1024:rot=64:iters=8:G=128:D=256:flush=2",
                           &c, &error))
      << error;
  EXPECT_EQ(c.bits_k, 3u);
  EXPECT_EQ(c.bits_v, 2u);
  EXPECT_EQ(c.body, Body::trellis);
  EXPECT_EQ(c.trellis_axis, TrellisAxis::channel);
  EXPECT_EQ(c.staging, StagingType::q8_0);
  EXPECT_EQ(c.sink_type, SinkType::inherit);
  EXPECT_EQ(c.sink, 256u);
  EXPECT_EQ(c.tail, 512u);
  EXPECT_EQ(c.tail_max, 1024u);
  EXPECT_EQ(c.rotation_block, 64u);
  EXPECT_EQ(c.iters, 8u);
  EXPECT_EQ(c.group, 128u);
  EXPECT_EQ(c.head_dim, 256u);
  EXPECT_EQ(c.flush_chunk, 2u);
  EXPECT_EQ(c.balance, BalanceMode::final_scales);
  // A later field overrides; "tail=N" is a fixed tail and "sink=N" an f16 sink.
  ASSERT_TRUE(parse_config("sj:4/4:tail=512/1024:tail=256:sink=128(inherit):sink=192", &c, &error)) << error;
  EXPECT_EQ(c.tail, 256u);
  EXPECT_EQ(c.tail_max, 0u);
  EXPECT_EQ(c.sink, 192u);
  EXPECT_EQ(c.sink_type, SinkType::f16);
}

TEST(ConfigGrammar, MalformedNamesAreRefusedWithAReason) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"", "empty"},
      {"sj", "missing widths"},
      {"xx:4/4", "'xx' is not sj or kvarn"},
      {"sj:44", "widths '44'"},
      {"sj:4/4/4", "widths"},
      {"sj:4/x", "widths"},
      {"sj:t", "widths"},
      {"sj:4/4:G", "field 'G' is not key=value"},
      {"sj:4/4:bogus=1", "unknown field 'bogus'"},
      {"sj:4/4:G=-1", "G=-1 is not a non-negative integer"},
      {"sj:4/4:D=1234567890", "D=1234567890 is not a non-negative integer"},
      {"sj:4/4:sink=128(f16)", "sink=128(f16) is not a non-negative integer"},
      {"sj:4/4:tail=", "tail= is not a non-negative integer"},
      {"sj:4/4:tail=1/2/3", "tail is N or N/MAX"},
      {"sj:4/4:tail=512/x", "tail=512/x is not a non-negative integer"},
      {"sj:3/2t:axis=diagonal", "axis must be token or channel"},
      {"sj:4/4:staging=q4_0", "staging must be tq6_0, q8_0 or f16"},
      {"sj:4/4:iters=16(best)", "(best)"},
      {"sj:4/4:", "field '' is not key=value"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.first);
    CodecConfig out;
    out.iters = 33;  // untouched on failure
    std::string error;
    EXPECT_FALSE(parse_config(c.first, &out, &error));
    EXPECT_NE(error.find(c.second), std::string::npos) << error;
    EXPECT_EQ(error.rfind("configuration '" + c.first + "': ", 0), 0u) << error;
    EXPECT_EQ(error.find('\n'), std::string::npos) << error;
    EXPECT_EQ(out.iters, 33u);
  }
}

TEST(ConfigGrammar, FieldsOneAtATime) {
  CodecConfig c;
  std::string error;
  EXPECT_EQ(parse_config_field("G", "64", false, &c, &error), ConfigField::applied);
  EXPECT_EQ(c.group, 64u);
  EXPECT_EQ(parse_config_field("tier", "edge", false, &c, &error), ConfigField::unknown);
  EXPECT_TRUE(error.empty());
  EXPECT_EQ(parse_config_field("G", "x", false, &c, &error), ConfigField::invalid);
  EXPECT_EQ(error, "G=x is not a non-negative integer");
  EXPECT_EQ(c.group, 64u);
  EXPECT_EQ(parse_config_field("iters", "8(best)", true, &c, &error), ConfigField::applied);
  EXPECT_EQ(c.iters, 8u);
}

// Staging names in code order, as snapshot files list them when they refuse one.
TEST(ConfigGrammar, StagingNamesByCode) {
  const std::vector<std::string> want = {"tq6_0", "f16", "q8_0"};
  EXPECT_EQ(staging_names_by_code(), want);
  for (StagingType t : kStagingTypes) EXPECT_EQ(staging_names_by_code()[static_cast<uint32_t>(t)], staging_name(t));
}

}  // namespace
