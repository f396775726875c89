// Shipped trellis table sets (sjkv/io/table_set.h): the compiled-in Gemma 3 270M set is the
// study's tables byte for byte, serves exactly Gemma 3 270M's geometry, is the default for no
// width (the study's recheck) and auto picks a set only for its pairs; descriptions with defects are refused naming the defect; a snapshot names
// its set.

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "file_fixtures.h"
#include "sjkv/io/codebook.h"
#include "sjkv/io/file_error.h"
#include "sjkv/io/table_set.h"

using namespace sjkv;

namespace {

const std::string kSrc = SJKV_SOURCE_DIR;

ModelGeometry gemma3_270m() {
  ModelGeometry g;
  g.architecture = "gemma3";
  g.n_layers = 18;
  g.layers.resize(18);
  for (uint32_t l = 0; l < 18; ++l) {
    g.layers[l].kind = (l + 1) % 6 == 0 ? LayerKind::full_attention : LayerKind::sliding_window;
    g.layers[l].n_head = 4;
    g.layers[l].n_head_kv = 1;
    g.layers[l].head_dim_k = g.layers[l].head_dim_v = 256;
  }
  return g;
}

TEST(TableSet, ShippedGemmaSetIsTheStudyTables) {
  const TableSet* s = find_table_set("gemma3-270m");
  ASSERT_NE(s, nullptr);
  for (uint32_t bits : {3u, 2u}) {
    const RawCodebook file = read_raw_codebook(kSrc + "/study/codebooks/gemma3-270m-" + std::to_string(bits) + "bit.bin");
    const RawCodebook* t = s->table(bits);
    ASSERT_NE(t, nullptr) << bits;
    EXPECT_TRUE(t->k == file.k && t->v == file.v) << bits;
  }
  EXPECT_EQ(s->table(4), nullptr);
  // The default for no width: on histories it was not chosen on, the interval over histories
  // reaches 1 at 3/2t and 2/2t (docs/RESULTS.md finding 11), so it is used only when named.
  for (uint32_t k : {2u, 3u, 4u})
    for (uint32_t v : {2u, 3u, 4u}) EXPECT_FALSE(s->is_default_for(k, v)) << k << "/" << v;
  EXPECT_EQ(s->trained_on_sha256.size(), 64u);
  EXPECT_NE(table_sets_help().find("gemma3-270m: gemma3, 18 layers, full 5+11+17, 1 KV head of 256; named only, the "
                                   "default for no width"),
            std::string::npos)
      << table_sets_help();
}

TEST(TableSet, ServesOnlyItsGeometry) {
  const ModelGeometry g = gemma3_270m();
  EXPECT_EQ(table_set_for(g), find_table_set("gemma3-270m"));
  std::string why;
  ModelGeometry other = g;
  other.architecture = "gemma2";
  EXPECT_EQ(table_set_for(other), nullptr);
  EXPECT_FALSE(find_table_set("gemma3-270m")->serves_model(other, &why));
  EXPECT_NE(why.find("architecture gemma2"), std::string::npos) << why;
  other = g;
  other.layers[11].head_dim_k = 128;
  EXPECT_EQ(table_set_for(other), nullptr);
  other = g;
  other.layers[4].kind = LayerKind::full_attention;
  EXPECT_FALSE(find_table_set("gemma3-270m")->serves_model(other, &why));
  EXPECT_NE(why.find("full-attention layers 4+5+11+17"), std::string::npos) << why;
}

// The shipped set as it would be were it the default for 3/2t and 2/2t (as it was until finding
// 11): what auto does with a set that is a default somewhere.
std::vector<TableSet> gemma_set_defaulting() {
  std::vector<TableSet> v = {*find_table_set("gemma3-270m")};
  v[0].default_for = {{3, 2}, {2, 2}};
  return v;
}

TEST(TableSet, ChoiceResolves) {
  const ModelGeometry g = gemma3_270m();
  const TableSet* s = find_table_set("gemma3-270m");
  const TableChoice r = TableChoice::parse("reference"), n = TableChoice::parse("gemma3-270m");
  TableChoice a = TableChoice::parse("auto");
  for (uint32_t k : {2u, 3u, 4u}) EXPECT_EQ(a.resolve(&g, k, 2), nullptr) << k;  // the shipped set: named only
  const std::vector<TableSet> sets = gemma_set_defaulting();
  a.sets = &sets;
  EXPECT_EQ(a.resolve(&g, 3, 2), &sets[0]);
  EXPECT_EQ(a.resolve(&g, 2, 2), &sets[0]);
  EXPECT_EQ(a.resolve(&g, 3, 3), nullptr);  // not one of its pairs: the format's tables
  EXPECT_EQ(a.resolve(nullptr, 3, 2), nullptr);  // model unknown
  ModelGeometry other = g;
  other.layers[11].head_dim_k = other.layers[11].head_dim_v = 128;
  EXPECT_EQ(a.resolve(&other, 3, 2), nullptr);  // a set serves its geometry only
  EXPECT_EQ(r.resolve(&g, 3, 2), nullptr);
  EXPECT_EQ(n.resolve(nullptr, 3, 3), s);  // named: its tables wherever it has the widths
  EXPECT_EQ(n.resolve(nullptr, 4, 4), nullptr);
  const TrellisCodebooks t = s->tables_for(4, 2);
  EXPECT_EQ(t.k, nullptr);
  EXPECT_EQ(t.v, s->table(2)->v.data());
  EXPECT_THROW(TableChoice::parse("gemma3"), std::invalid_argument);
  EXPECT_THROW(TableChoice::parse(""), std::invalid_argument);
}

// A description that parses, and the defects it is refused for.
std::string good_json() {
  return R"({"name": "t", "description": "d", "serves": {"architecture": "a", "n_layers": 2, "full_layers": [1],
  "n_head_kv": 1, "head_dim": 128}, "trained_on": {"file": "m.gguf", "sha256": ")" +
         std::string(64, 'a') + R"("}, "tables": ["three.sjcb"], "default_for": ["3/3t"], "evidence": "e"})";
}

std::vector<uint8_t> three_bit_container(CodebookAxis axis = CodebookAxis::token) {
  CodebookContainer c;
  c.axis = axis;
  c.table = read_raw_codebook(kSrc + "/data/codebooks/reference-3bit.bin");
  return container_bytes([&] {
    CodebookContainer x = c;
    x.codebook_id = raw_codebook_id(x.table);
    x.raw_sha256 = raw_codebook_sha256(x.table);
    return x;
  }());
}

TEST(TableSet, ParsesAGoodDescription) {
  const TableSet s = parse_table_set("t.json", good_json(), [](const std::string&) { return three_bit_container(); });
  EXPECT_EQ(s.name, "t");
  ASSERT_EQ(s.tables.size(), 1u);
  EXPECT_EQ(s.tables[0].table.bits, 3u);
  EXPECT_TRUE(s.is_default_for(3, 3));
}

TEST(TableSet, RefusesDefects) {
  auto refused = [](const std::string& json, const std::string& defect, CodebookAxis axis = CodebookAxis::token) {
    try {
      (void)parse_table_set("t.json", json, [&](const std::string& n) {
        if (n != "three.sjcb") throw FileError(n, "cannot open");
        return three_bit_container(axis);
      });
    } catch (const FileError& e) {
      EXPECT_EQ(e.path(), "t.json");
      EXPECT_NE(e.defect().find(defect), std::string::npos) << e.defect() << " | wanted: " << defect;
      return;
    }
    ADD_FAILURE() << "accepted; wanted: " << defect;
  };
  auto with = [](const std::string& from, const std::string& to) {
    std::string j = good_json();
    const size_t p = j.find(from);
    EXPECT_NE(p, std::string::npos) << from;
    return j.replace(p, from.size(), to);
  };
  refused("{", "not JSON");
  refused("[]", "must be a JSON object");
  refused(with("\"evidence\"", "\"extra\": 1, \"evidence\""), "unknown key 'extra'");
  refused(with("\"name\": \"t\",", ""), "missing key 'name'");
  refused(with("\"name\": \"t\"", "\"name\": \"T x\""), "must be lower-case");
  refused(with("\"name\": \"t\"", "\"name\": \"reference\""), "not auto or reference");
  refused(with("\"n_layers\": 2", "\"n_layers\": -2"), "serves.n_layers must be a non-negative integer");
  refused(with("\"full_layers\": [1]", "\"full_layers\": [2]"), "serves.full_layers[] = 2 is outside 0..1");
  refused(with("\"full_layers\": [1]", "\"full_layers\": [1, 0]"), "must increase");
  refused(with(std::string(64, 'a'), std::string(63, 'a')), "64 lower-case hex");
  refused(with("\"three.sjcb\"]", "\"three.sjcb\", \"three.sjcb\"]"), "two 3-bit tables");
  refused(with("\"three.sjcb\"]", "\"missing.sjcb\"]"), "table missing.sjcb: cannot open");
  refused(good_json(), "channel axis", CodebookAxis::channel);
  refused(with("\"3/3t\"", "\"2/2t\""), "2/2t uses none of the set's tables");
  refused(with("\"3/3t\"", "\"3/3\""), "is not K/Vt");
  refused(with("\"3/3t\"", "\"3/3t\", \"3/3t\""), "lists 3/3t twice");
  refused(with("\"description\": \"d\"", "\"description\": \"a\\nb\""), "must be one line");
}

TEST(TableSet, SnapshotNamesItsSet) {
  EmbeddedCodebooks cb;
  Snapshot s = filetest::make_snapshot(filetest::trellis_spec(), &cb);
  s.codebook_set = "gemma3-270m";
  const std::string p = filetest::scratch("set.h5");
  write_snapshot(p, s, 3, &cb);
  EXPECT_EQ(read_snapshot(p).codebook_set, "gemma3-270m");
  s.codebook_set.clear();  // files written before table sets have no attribute
  write_snapshot(p, s, 3, &cb);
  EXPECT_EQ(read_snapshot(p).codebook_set, "");
}

}  // namespace
