// ArmSpec (sjkv/replay/arm_spec.h): the arm grammar's parser and printer as a round trip over
// the arm strings the repository uses (study, tests, docs, the frontier's candidates), the same
// refusals as make_arm, and the classification the frontier's tables use.
#include <gtest/gtest.h>

#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "sjkv/replay/arm_spec.h"
#include "sjkv/replay/arms.h"
#include "sjkv/replay/frontier.h"
#include "sjkv/replay/kv.h"

namespace sjkv {
namespace replay {
namespace {

// Specs written in the canonical order: they print themselves.
const char* const kCanonical[] = {
    "bf16", "f16", "f16:state=bf16", "f16:state=f16", "f16:state=q8_0", "f32", "iq4_nl", "iq4_nl:rot",
    "kvarn:2/2:tail=0", "kvarn:3/2:tail=0", "kvarn:3/3:tail=0", "kvarn:4/4", "kvarn:4/4:tail=0",
    "kvarn:4/4:tail=0:state=bf16", "kvarn:4/4:tail=1024", "kvarn:4/4:tail=128", "kvarn:4/4:tail=8192", "q4_0",
    "q4_0:rot", "q4_0:rot:state=f16", "q4_0:rot:swa=same", "q4_0:swa=same", "q4_1", "q4_1:rot", "q5_0",
    "q5_0:rot", "q5_1", "q5_1:rot", "q8_0", "q8_0:rot", "q8_0:rot:swa=same", "q8_0:swa=same", "sj:2/2t",
    "sj:2/2t:cb=gemma3-270m", "sj:2/2t:cb=study/codebooks/gemma3-270m-2bit.bin", "sj:3/2",
    "sj:3/2:staging=q8_0:tail=512/1024", "sj:3/2t", "sj:3/2t:axis=channel", "sj:3/2t:axis=channel:tail=128",
    "sj:3/2t:cb=data/codebooks/gemma3-270m-3bit.bin+data/codebooks/gemma3-270m-2bit.bin",
    "sj:3/2t:cb=gemma3-270m", "sj:3/2t:cb=reference",
    "sj:3/2t:cb=study/codebooks/gemma3-270m-3bit.bin+study/codebooks/gemma3-270m-2bit.bin", "sj:3/2t:layers=40",
    "sj:3/2t:staging=q8_0", "sj:3/2t:state=f16", "sj:3/2t:state=f32", "sj:3/2t:tail=1024/2048",
    "sj:3/2t:tail=128", "sj:3/2t:tail=128/1024", "sj:3/2t:tail=128/256", "sj:3/2t:tail=128:cb=gemma3-270m",
    "sj:3/2t:tail=128:cb=reference", "sj:3/2t:tier=edge", "sj:3/2t:wide=11", "sj:3/2t:wide=7", "sj:3/3",
    "sj:3/3:layers=0+3", "sj:3/3:layers=1", "sj:3/3:staging=q8_0:tail=128/256", "sj:3/3:staging=q8_0:tail=256",
    "sj:3/3:staging=q8_0:tail=512/1024", "sj:3/3:tier=edge", "sj:3/3:wide=1", "sj:3/3:wide=5", "sj:3/3t",
    "sj:3/3t:axis=channel:tail=128", "sj:3/3t:cb=gemma3-270m",
    "sj:3/3t:cb=study/codebooks/gemma3-270m-3bit.bin", "sj:3/3t:staging=q8_0:tail=128",
    "sj:3/3t:staging=q8_0:tail=128/256", "sj:3/3t:staging=q8_0:tail=512/1024", "sj:3/3t:tail=1024/2048",
    "sj:3/3t:tail=128", "sj:3/3t:tail=128/256:flush=1", "sj:3/3t:tail=128/256:flush=1:tier=edge",
    "sj:3/3t:tail=128:cb=cb/x.bin", "sj:3/3t:tail=128:cb=cb_x.bin", "sj:3/3t:tier=edge", "sj:4/2",
    "sj:4/2:sink=64:tail=256/512", "sj:4/2:staging=q8_0:tail=512/1024", "sj:4/2:tail=128",
    "sj:4/2t:cb=study/codebooks/gemma3-270m-4bit.bin+study/codebooks/gemma3-270m-2bit.bin", "sj:4/3",
    "sj:4/3:staging=q8_0:tail=512/1024",
    "sj:4/3t:cb=study/codebooks/gemma3-270m-4bit.bin+study/codebooks/gemma3-270m-3bit.bin", "sj:4/4",
    "sj:4/4:G=16:sink=64:tail=32/128", "sj:4/4:exact=k", "sj:4/4:exact=v", "sj:4/4:kmean=sink",
    "sj:4/4:kmean=sink:exact=k", "sj:4/4:layers=11", "sj:4/4:layers=17", "sj:4/4:layers=5",
    "sj:4/4:layers=5+11", "sj:4/4:layers=5+17", "sj:4/4:sink=192:tail=128", "sj:4/4:sink=256:iters=8",
    "sj:4/4:sink=64:tail=0", "sj:4/4:sink=64:tail=128", "sj:4/4:staging=f16",
    "sj:4/4:staging=f16:tail=512/1024", "sj:4/4:staging=q8_0", "sj:4/4:staging=q8_0:sink=128:tail=128",
    "sj:4/4:staging=q8_0:tail=128/256", "sj:4/4:staging=q8_0:tail=128/256:flush=1",
    "sj:4/4:staging=q8_0:tail=128/256:tier=edge", "sj:4/4:staging=q8_0:tail=256",
    "sj:4/4:staging=q8_0:tail=512/1024", "sj:4/4:staging=tq6_0:tail=128", "sj:4/4:state=bf16",
    "sj:4/4:state=f16", "sj:4/4:state=f32", "sj:4/4:state=q8_0", "sj:4/4:tail=1024/2048", "sj:4/4:tail=128",
    "sj:4/4:tail=128/1024", "sj:4/4:tail=128/256", "sj:4/4:tail=128/256:tier=edge",
    "sj:4/4:tail=128:kmean=sink", "sj:4/4:tail=256", "sj:4/4:tail=512/1024", "sj:4/4:tier=edge",
    "sj:4/4t:axis=channel", "sj:4/4t:cb=study/codebooks/gemma3-270m-4bit.bin", "tq5_0", "tq6_0", "turbo3",
    "turbo4", "sj:3/2t:staging=q8_0:sink=128(inherit)", "sj:4/4:sink=128(inherit)",
    "sj:3/2t:axis=channel:staging=q8_0:sink=256(inherit)",
    // every option at once, in the printing order
    "sj:4/4:G=128:staging=q8_0:sink=128(inherit):tail=256/512:rot=64:iters=8:flush=1:tier=edge:wide=1+2:layers=3+1:"
    "kmean=sink:exact=v:state=bf16",
    "sj:3/2t:axis=token:G=128:staging=f16:sink=64:tail=0:rot=128:iters=4:wide=7:layers=7+9:exact=k:state=f16:"
    "cb=gemma3-270m",
    "sj:4/4:rot=128", "sj:4/4:iters=8", "sj:3/2t:axis=token", "bf16:state=q8_0", "tq6_0:swa=same",
    "turbo3:swa=same:state=f16", "iq4_nl:rot:swa=same:state=f32",
    // swa=FMT: the sliding layers' block format (the note's Gemma 4 setting, reference arms too)
    "f16:swa=q8_0", "f32:swa=q4_0:state=f16", "kvarn:4/4:tail=0:swa=q8_0", "sj:4/4:swa=q8_0",
    "sj:3/2t:tail=128:exact=v:swa=q8_0:state=f16:cb=gemma3-270m",
};

// Specs written in another order or spelling, and the canonical form they print.
const std::pair<const char*, const char*> kWrittenOtherwise[] = {
    {"sj:2/2t:tail=128:staging=q8_0",
     "sj:2/2t:staging=q8_0:tail=128"},
    {"sj:2/2t:tail=512/1024:staging=q8_0",
     "sj:2/2t:staging=q8_0:tail=512/1024"},
    {"sj:2/2t:tail=512/1024:staging=q8_0:cb=gemma3-270m",
     "sj:2/2t:staging=q8_0:tail=512/1024:cb=gemma3-270m"},
    {"sj:2/2t:tail=512/1024:staging=q8_0:wide=11",
     "sj:2/2t:staging=q8_0:tail=512/1024:wide=11"},
    {"sj:2/2t:tail=512/1024:staging=q8_0:wide=17",
     "sj:2/2t:staging=q8_0:tail=512/1024:wide=17"},
    {"sj:2/2t:tail=512/1024:staging=q8_0:wide=5",
     "sj:2/2t:staging=q8_0:tail=512/1024:wide=5"},
    {"sj:3/2t:tail=512/1024:staging=q8_0",
     "sj:3/2t:staging=q8_0:tail=512/1024"},
    {"sj:3/2t:tail=512/1024:staging=q8_0:cb=gemma3-270m",
     "sj:3/2t:staging=q8_0:tail=512/1024:cb=gemma3-270m"},
    {"sj:3/2t:tail=512/1024:staging=q8_0:wide=11",
     "sj:3/2t:staging=q8_0:tail=512/1024:wide=11"},
    {"sj:3/2t:tail=512/1024:staging=q8_0:wide=11:cb=gemma3-270m",
     "sj:3/2t:staging=q8_0:tail=512/1024:wide=11:cb=gemma3-270m"},
    {"sj:3/2t:tail=512/1024:staging=q8_0:wide=17",
     "sj:3/2t:staging=q8_0:tail=512/1024:wide=17"},
    {"sj:3/2t:tail=512/1024:staging=q8_0:wide=5",
     "sj:3/2t:staging=q8_0:tail=512/1024:wide=5"},
    {"sj:3/2t:tail=512/1024:staging=q8_0:wide=5:cb=gemma3-270m",
     "sj:3/2t:staging=q8_0:tail=512/1024:wide=5:cb=gemma3-270m"},
    {"sj:3/2t:tier=edge:tail=128",
     "sj:3/2t:tail=128:tier=edge"},
    {"sj:3/3t:staging=q8_0:tail=512/1024:sink=256:iters=8",
     "sj:3/3t:staging=q8_0:sink=256:tail=512/1024:iters=8"},
    {"sj:4/4:kmean=sink:exact=k:tail=128/256",
     "sj:4/4:tail=128/256:kmean=sink:exact=k"},
    {"sj:4/4:staging=q8_0:G=16:sink=64:tail=32/128",
     "sj:4/4:G=16:staging=q8_0:sink=64:tail=32/128"},
    {"sj:4/4:staging=q8_0:kmean=sink:exact=k:tail=128/256",
     "sj:4/4:staging=q8_0:tail=128/256:kmean=sink:exact=k"},
    {"sj:4/4:staging=q8_0:kmean=sink:tail=512/1024",
     "sj:4/4:staging=q8_0:tail=512/1024:kmean=sink"},
    {"sj:4/4:staging=q8_0:sink=64:tail=16/128:G=16",
     "sj:4/4:G=16:staging=q8_0:sink=64:tail=16/128"},
    {"sj:4/4:staging=q8_0:sink=64:tail=16/128:G=16:rot=32",
     "sj:4/4:G=16:staging=q8_0:sink=64:tail=16/128:rot=32"},
    {"sj:4/4:staging=q8_0:sink=64:tail=16:G=16:rot=32",
     "sj:4/4:G=16:staging=q8_0:sink=64:tail=16:rot=32"},
    {"sj:4/4:tail=0:sink=64",
     "sj:4/4:sink=64:tail=0"},
    {"sj:4/4:tail=1024/2048:staging=q8_0",
     "sj:4/4:staging=q8_0:tail=1024/2048"},
    {"sj:4/4:tail=128:staging=f16",
     "sj:4/4:staging=f16:tail=128"},
    {"sj:4/4:tail=128:staging=q8_0",
     "sj:4/4:staging=q8_0:tail=128"},
    {"sj:4/4:tail=2048/4096:staging=q8_0",
     "sj:4/4:staging=q8_0:tail=2048/4096"},
    {"sj:4/4:tail=256:staging=q8_0",
     "sj:4/4:staging=q8_0:tail=256"},
    {"sj:4/4:tail=512/1024:staging=q8_0",
     "sj:4/4:staging=q8_0:tail=512/1024"},
    {"sj:4/4:tail=0256", "sj:4/4:tail=256"},
    {"sj:4/4:tail=512/0", "sj:4/4:tail=512"},
    {"sj:4/4:wide=05+011", "sj:4/4:wide=5+11"},
    {"q4_0:swa=same:rot", "q4_0:rot:swa=same"},
    {"kvarn:4/4:state=f16:tail=0", "kvarn:4/4:tail=0:state=f16"},
};

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in.good()) << path;
  std::ostringstream o;
  o << in.rdbuf();
  return o.str();
}

// The committed study's arms: every quoted arm string of study/arms.toml and the arm and
// baseline columns of study/results.csv.
std::set<std::string> study_arms() {
  std::set<std::string> out;
  const std::string toml = slurp(std::string(SJKV_SOURCE_DIR) + "/study/arms.toml");
  const std::regex quoted("\"((?:sj|kvarn):[^\"]*|(?:f32|f16|bf16|q8_0|q4_0|q4_1|q5_0|q5_1|iq4_nl|turbo3|turbo4|tq5_0|tq6_0)(?::[^\"]*)?)\"");
  for (auto it = std::sregex_iterator(toml.begin(), toml.end(), quoted); it != std::sregex_iterator(); ++it)
    out.insert((*it)[1]);
  std::istringstream csv(slurp(std::string(SJKV_SOURCE_DIR) + "/study/results.csv"));
  std::string line;
  std::getline(csv, line);
  EXPECT_EQ(line, "set,history,arm,baseline,statistic,value");
  while (std::getline(csv, line)) {
    std::vector<std::string> f;
    std::string cell;
    std::istringstream l(line);
    while (std::getline(l, cell, ',')) f.push_back(cell);
    if (f.size() < 4) continue;
    out.insert(f[2]);
    if (!f[3].empty()) out.insert(f[3]);
  }
  return out;
}

// Every spec the repository uses.
std::vector<std::string> every_spec() {
  std::vector<std::string> v(std::begin(kCanonical), std::end(kCanonical));
  for (const auto& p : kWrittenOtherwise) v.push_back(p.first);
  for (const std::string& s : arm_examples()) v.push_back(s);
  for (bool quick : {true, false})
    for (const std::string& s : frontier_candidates(quick)) v.push_back(s);
  for (const std::string& s : frontier_wide_candidates(false, {5, 11, 17})) v.push_back(s);
  for (const std::string& s : study_arms()) v.push_back(s);
  return v;
}

// parse(to_string(parse(s))) == parse(s), the printer's form is a fixed point, and it is the
// same arm as s by arm_identity (the codec configuration make_arm resolves, independent of the
// printer).
TEST(ArmSpec, EveryRepositorySpecRoundTrips) {
  const std::vector<std::string> specs = every_spec();
  EXPECT_GT(study_arms().size(), 40u);
  for (const std::string& s : specs) {
    SCOPED_TRACE(s);
    ArmSpec a;
    ASSERT_NO_THROW(a = ArmSpec::parse(s));
    const std::string t = a.to_string();
    const ArmSpec b = ArmSpec::parse(t);
    EXPECT_TRUE(b == a) << t;
    EXPECT_EQ(b.to_string(), t);
    EXPECT_EQ(to_string(a), t);
    // (a row format's identity is its spec as written; make_arm reads cb= files relative to the
    // working folder)
    if (a.codec() && a.cb_files().empty()) {
      EXPECT_EQ(arm_identity(t), arm_identity(s));
    }
  }
}

TEST(ArmSpec, CanonicalSpecsPrintThemselves) {
  for (const char* s : kCanonical) EXPECT_EQ(ArmSpec::parse(s).to_string(), s);
  for (const auto& p : kWrittenOtherwise) {
    SCOPED_TRACE(p.first);
    EXPECT_EQ(ArmSpec::parse(p.first).to_string(), p.second);
    EXPECT_TRUE(ArmSpec::parse(p.first) == ArmSpec::parse(p.second));
  }
}

// A value is what the spec names: the order of the options does not matter, a field left to
// its default is not the same spec as the default written out.
TEST(ArmSpec, EqualityIsOfWhatTheSpecNames) {
  EXPECT_TRUE(ArmSpec::parse("sj:4/4:tail=256:staging=q8_0") == ArmSpec::parse("sj:4/4:staging=q8_0:tail=256"));
  EXPECT_TRUE(ArmSpec::parse("sj:4/4:tail=256") != ArmSpec::parse("sj:4/4:tail=256:staging=q8_0"));
  EXPECT_TRUE(ArmSpec::parse("sj:4/4") != ArmSpec::parse("sj:4/4:tail=4096/8192"));
  EXPECT_TRUE(ArmSpec::parse("sj:4/4:wide=5+11") != ArmSpec::parse("sj:4/4:wide=11+5"));
  EXPECT_TRUE(ArmSpec::parse("sj:4/4") != ArmSpec::parse("kvarn:4/4"));
  EXPECT_TRUE(ArmSpec::parse("q4_0") != ArmSpec::parse("q4_0:rot"));
  EXPECT_TRUE(ArmSpec::parse("f16") != ArmSpec::parse("f16:state=f32"));
  const ArmSpec a = ArmSpec::parse("sj:3/2t:tail=512/1024:staging=q8_0:wide=5:cb=gemma3-270m");
  EXPECT_EQ(a.family, ArmFamily::sj);
  EXPECT_TRUE(a.trellis());
  EXPECT_EQ(a.config.bits_k, 3u);
  EXPECT_EQ(a.config.bits_v, 2u);
  EXPECT_EQ(a.config.tail, 512u);
  EXPECT_EQ(a.config.tail_max, 1024u);
  EXPECT_EQ(a.config.staging, StagingType::q8_0);
  EXPECT_EQ(a.fields, uint32_t(kArmFieldTail | kArmFieldStaging));
  EXPECT_EQ(a.wide, std::vector<uint32_t>{5});
  ASSERT_NE(a.cb_set(), nullptr);
  EXPECT_TRUE(a.cb_files().empty());
  EXPECT_EQ(ArmSpec::parse("sj:3/2t:cb=a.bin+b.bin").cb_files(), (std::vector<std::string>{"a.bin", "b.bin"}));
  EXPECT_TRUE(ArmSpec::parse("sj:3/2t:cb=reference").cb_reference());
  EXPECT_EQ(ArmSpec::parse("sj:3/2t:cb=reference").cb_set(), nullptr);
}

// The prefix rules the frontier classified arm strings by before ArmSpec, kept as the reference
// its family column and plain formats must keep to.
std::string prefix_family(const std::string& spec) {
  if (spec.rfind("kvarn:", 0) == 0) return "kvarn";
  if (spec.rfind("sj:", 0) == 0) {
    const size_t c = spec.find(':', 3);
    const std::string widths = spec.substr(3, c == std::string::npos ? std::string::npos : c - 3);
    return !widths.empty() && widths.back() == 't' ? "sj trellis" : "sj scalar";
  }
  const size_t c = spec.find(':');
  if (c != std::string::npos && spec.compare(c, 4, ":rot") == 0) return spec.substr(0, c) + ":rot";
  return spec.substr(0, c);
}

bool prefix_plain(const std::string& spec) {
  static const std::set<std::string> plain = {"f16", "bf16", "q8_0", "q5_1", "q5_0", "q4_1", "q4_0", "iq4_nl",
                                              "q8_0:rot", "q5_1:rot", "q5_0:rot", "q4_1:rot", "q4_0:rot", "iq4_nl:rot"};
  return plain.count(prefix_family(spec)) > 0;
}

// The frontier's family column and its plain formats, the same for every repository spec as the
// prefix rules gave (f32 and the TurboQuant-style rows are not plain).
TEST(ArmSpec, FamiliesAndPlainFormats) {
  const struct {
    const char* spec;
    const char* family;
    bool plain;
  } cases[] = {{"f16", "f16", true},
               {"f32", "f32", false},
               {"bf16:state=f16", "bf16", true},
               {"q8_0", "q8_0", true},
               {"q4_0:rot:swa=same", "q4_0:rot", true},
               {"q5_1:swa=same", "q5_1", true},
               {"iq4_nl:rot", "iq4_nl:rot", true},
               {"turbo3", "turbo3", false},
               {"turbo4:swa=same", "turbo4", false},
               {"tq5_0", "tq5_0", false},
               {"tq6_0", "tq6_0", false},
               {"kvarn:4/4:tail=0", "kvarn", false},
               {"sj:4/4:tail=128", "sj scalar", false},
               {"sj:4/2", "sj scalar", false},
               {"sj:3/2t:cb=gemma3-270m", "sj trellis", false},
               {"sj:4/4t:cb=study/codebooks/gemma3-270m-4bit.bin", "sj trellis", false},
               {"sj:3/2t:axis=channel", "sj trellis", false}};
  for (const auto& c : cases) {
    SCOPED_TRACE(c.spec);
    const ArmSpec a = ArmSpec::parse(c.spec);
    EXPECT_EQ(a.family_name(), c.family);
    EXPECT_EQ(a.plain_format(), c.plain);
    EXPECT_EQ(prefix_family(c.spec), c.family);
    EXPECT_EQ(prefix_plain(c.spec), c.plain);
  }
  // Options in any order: the prefix rule read "q4_0:state=f16:rot" as plain q4_0.
  EXPECT_EQ(ArmSpec::parse("q4_0:state=f16:rot").family_name(), "q4_0:rot");
  for (const std::string& s : every_spec()) {
    SCOPED_TRACE(s);
    if (!ArmSpec::parse(s).codec() && ArmSpec::parse(s).to_string() != s) continue;  // the prefix rule's blind spot, above
    EXPECT_EQ(ArmSpec::parse(s).family_name(), prefix_family(s));
    EXPECT_EQ(ArmSpec::parse(s).plain_format(), prefix_plain(s));
  }
}

// A refused spec: parse and make_arm give the same one line, word for word; a cb= file is read
// (and refused) by make_arm only.
TEST(ArmSpec, RefusalsAreMakeArmsWordForWord) {
  const std::pair<const char*, const char*> cases[] = {
      {"", "arm '': empty spec"},
      {"q4_2", "arm 'q4_2': unknown arm 'q4_2' (known: f32 f16 bf16 q8_0 q4_0 q4_1 q5_0 q5_1 iq4_nl [:rot], turbo3 "
               "turbo4 tq5_0 tq6_0, kvarn:K/V, sj:K/V[t])"},
      {"f16:rot", "arm 'f16:rot': f16 takes no ':rot' (only the ggml block formats do)"},
      {"q4_0:rot:rot", "arm 'q4_0:rot:rot': option 'rot' is given twice (each option once)"},
      {"f16:swa=same", "arm 'f16:swa=same': f16 already stores sliding layers in its own type"},
      {"q4_0::rot", "arm 'q4_0::rot': an empty option (':' doubled or at the end)"},
      {"f16:state=q4_0", "arm 'f16:state=q4_0': state=q4_0: the recurrent state is f32, f16, bf16 or q8_0"},
      {"sj", "arm 'sj': missing widths, e.g. sj:4/4"},
      {"kvarn:3/3t", "arm 'kvarn:3/3t': KVarN arms have a scalar body ('t' is SJ only)"},
      {"kvarn:4/4:staging=q8_0",
       "arm 'kvarn:4/4:staging=q8_0': KVarN arms take only tail=N (the exact fp16 tail), swa= and state=, not "
       "'staging'"},
      {"sj:4/4:swa=f16", "arm 'sj:4/4:swa=f16': swa=f16: the sliding layers take a ggml block format (q8_0, q5_1, "
                         "q5_0, q4_1, q4_0, iq4_nl); f16, their default, is not named"},
      {"sj:4/4:swa=turbo3", "arm 'sj:4/4:swa=turbo3': swa=turbo3: the sliding layers take a ggml block format (q8_0, "
                            "q5_1, q5_0, q4_1, q4_0, iq4_nl); f16, their default, is not named"},
      {"q4_0:swa=q8_0", "arm 'q4_0:swa=q8_0': q4_0 takes swa=same, not swa=q8_0"},
      {"f16:swa=q8_0:swa=q4_0", "arm 'f16:swa=q8_0:swa=q4_0': option 'swa=' is given twice (each option once)"},
      {"sj:4/4:swa=q8_0:swa=q8_0", "arm 'sj:4/4:swa=q8_0:swa=q8_0': option 'swa=' is given twice (each option once)"},
      {"kvarn:4/4:tail=128/256", "arm 'kvarn:4/4:tail=128/256': tail=128/256 is not a non-negative integer"},
      {"sj:4/4:D=64", "arm 'sj:4/4:D=64': unknown option 'D'"},
      {"sj:4/4:G", "arm 'sj:4/4:G': option 'G' is not key=value"},
      {"sj:4/4:tail=", "arm 'sj:4/4:tail=': option 'tail=' has no value"},
      {"sj:4/4:wide=5:wide=11", "arm 'sj:4/4:wide=5:wide=11': option 'wide=' is given twice (each option once)"},
      {"sj:3/2t:wide=5+5", "arm 'sj:3/2t:wide=5+5': wide= lists a layer twice"},
      {"sj:4/4:layers=a", "arm 'sj:4/4:layers=a': layers=a is not a non-negative integer"},
      {"sj:4/4:tier=middle", "arm 'sj:4/4:tier=middle': tier must be edge"},
      {"sj:4/4:kmean=mean", "arm 'sj:4/4:kmean=mean': kmean must be sink (one K mean per head, from the first sink keys)"},
      {"sj:4/4:exact=x", "arm 'sj:4/4:exact=x': exact must be k or v"},
      {"sj:4/4:bogus=1", "arm 'sj:4/4:bogus=1': unknown option 'bogus'"},
      {"sj:4/4:staging=q4_0", "arm 'sj:4/4:staging=q4_0': staging must be tq6_0, q8_0 or f16"},
      {"sj:4/4:axis=channel", "arm 'sj:4/4:axis=channel': axis=channel needs a trellis body (e.g. sj:3/2t:axis=channel)"},
      {"sj:4/4:cb=reference", "arm 'sj:4/4:cb=reference': cb= applies to trellis bodies (e.g. sj:3/2t:cb=FILE)"},
      {"sj:3/3t:axis=channel:cb=reference",
       "arm 'sj:3/3t:axis=channel:cb=reference': cb= tables are token-axis tables; axis=channel keeps its own"},
      {"sj:4/4t:cb=gemma3-270m", "arm 'sj:4/4t:cb=gemma3-270m': table set gemma3-270m holds no 4-bit or 4-bit table"},
      {"sj:3/3t:cb=a.bin++b.bin", "arm 'sj:3/3t:cb=a.bin++b.bin': cb=FILE[+FILE]: an empty file name"},
      {"sj:5/5", "arm 'sj:5/5': bits_k and bits_v must be 2, 3 or 4"},
      {"sj:4/4:tail=100", "arm 'sj:4/4:tail=100': tail must be a multiple of the group"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.first);
    std::string from_parse, from_make;
    try {
      (void)ArmSpec::parse(c.first);
    } catch (const std::invalid_argument& e) {
      from_parse = e.what();
    }
    try {
      (void)make_arm(c.first);
    } catch (const std::invalid_argument& e) {
      from_make = e.what();
    }
    EXPECT_EQ(from_parse, c.second);
    EXPECT_EQ(from_make, c.second);
  }
  // Files: the spec parses; make_arm reads them and refuses in the same one-line form.
  const std::string missing = "sj:3/3t:cb=" + std::string(SJKV_SOURCE_DIR) + "/no-such-table.bin";
  EXPECT_NO_THROW((void)ArmSpec::parse(missing));
  try {
    (void)make_arm(missing);
    ADD_FAILURE() << "accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_EQ(std::string(e.what()).rfind("arm '" + missing + "': " + SJKV_SOURCE_DIR + "/no-such-table.bin: ", 0), 0u)
        << e.what();
  }
}

// The names users write stay the arms' names: make_arm keeps the string, whatever its order.
TEST(ArmSpec, MakeArmKeepsTheWrittenSpec) {
  for (const auto& p : kWrittenOtherwise) {
    const ArmSpec a = ArmSpec::parse(p.first);
    if (!a.cb_files().empty()) continue;
    EXPECT_EQ(make_arm(p.first)->spec(), p.first);
  }
}

}  // namespace
}  // namespace replay
}  // namespace sjkv
