// Codebook files: SHA-256, the raw table, the C header and the .sjcb container (FORMAT.md 8).
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include <unistd.h>

#include "sjkv/io/file_error.h"
#include "sjkv/io/codebook.h"
#include "sjkv/io/sha256.h"
#include "sjkv/trellis.h"

using namespace sjkv;

namespace {

const std::string kData = std::string(SJKV_SOURCE_DIR) + "/data/codebooks/";

// A scratch folder removed at exit.
struct Scratch {
  std::string path;
  Scratch() {
    auto p = std::filesystem::temp_directory_path() / ("sjkv-cbtest-" + std::to_string(::getpid()));
    std::filesystem::create_directories(p);
    path = p.string();
  }
  ~Scratch() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
};

std::string tmpdir() {
  static Scratch s;
  return s.path;
}

std::vector<uint8_t> slurp(const std::string& p) {
  std::ifstream f(p, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(f), {});
}
void spit(const std::string& p, const std::vector<uint8_t>& b) {
  std::ofstream f(p, std::ios::binary | std::ios::trunc);
  f.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
}
void spit(const std::string& p, const std::string& s) { spit(p, std::vector<uint8_t>(s.begin(), s.end())); }

RawCodebook reference(uint32_t bits) {
  RawCodebook cb;
  cb.bits = bits;
  const uint32_t n = trellis_entries(bits);
  cb.k.assign(reference_codebook(Side::k, bits), reference_codebook(Side::k, bits) + n);
  cb.v.assign(reference_codebook(Side::v, bits), reference_codebook(Side::v, bits) + n);
  return cb;
}

RawCodebook four_bit() {
  RawCodebook cb;
  cb.bits = 4;
  cb.k.resize(1024);
  cb.v.resize(1024);
  identity_codebook(4, cb.k.data());
  for (uint32_t i = 0; i < 1024; ++i) cb.v[i] = static_cast<uint16_t>(0x3c00 + i);
  return cb;
}

// Expects FileError whose defect contains `what`.
template <class F>
void expect_defect(F f, const std::string& what) {
  try {
    f();
    FAIL() << "accepted; expected a defect containing '" << what << "'";
  } catch (const FileError& e) {
    EXPECT_NE(e.defect().find(what), std::string::npos) << e.what();
  }
}

}  // namespace

TEST(Sha256, Fips180Vectors) {
  EXPECT_EQ(sha256_hex("abc", 3), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(sha256_hex("", 0), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  const std::string two = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
  EXPECT_EQ(sha256_hex(two.data(), two.size()), "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  Sha256 s;
  const std::string chunk(1000, 'a');
  for (int i = 0; i < 1000; ++i) s.update(chunk.data(), chunk.size());
  const auto d = s.digest();
  EXPECT_EQ(to_hex(d.data(), 32), "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
  // odd-sized pieces give the same digest as one call
  Sha256 t;
  const std::string m(1000000, 'a');
  size_t off = 0, step = 1;
  while (off < m.size()) {
    const size_t n = std::min(step, m.size() - off);
    t.update(m.data() + off, n);
    off += n;
    step = step * 7 % 131 + 1;
  }
  const auto e = t.digest();
  EXPECT_EQ(to_hex(e.data(), 32), "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST(CodebookFiles, ReferenceTablesHashesAndIds) {
  EXPECT_EQ(sha256_file_hex(kData + "reference-3bit.bin"),
            "0d6e6d63309612d0df48ec6ea2bacd00c56e97fe35a67848c53892eafa1ac078");
  EXPECT_EQ(sha256_file_hex(kData + "reference-2bit.bin"),
            "c7a63f25c47604af04a5be15d4704204d2fd8c7235ce441b88fb4a2da692dba8");
  EXPECT_EQ(raw_codebook_sha256(reference(3)), "0d6e6d63309612d0df48ec6ea2bacd00c56e97fe35a67848c53892eafa1ac078");
  EXPECT_EQ(raw_codebook_sha256(reference(2)), "c7a63f25c47604af04a5be15d4704204d2fd8c7235ce441b88fb4a2da692dba8");
  EXPECT_EQ(raw_codebook_id(reference(3)), 0xd3b4c98ce0f8406cull);
  EXPECT_EQ(raw_codebook_id(reference(2)), 0x99ad6255c4c521a1ull);
  const auto r3 = read_raw_codebook(kData + "reference-3bit.bin");
  EXPECT_EQ(r3.k, reference(3).k);
  EXPECT_EQ(r3.v, reference(3).v);
}

TEST(CodebookFiles, RawRoundTrip) {
  for (const RawCodebook& cb : {reference(3), reference(2), four_bit()}) {
    const std::string p = tmpdir() + "/raw" + std::to_string(cb.bits) + ".bin";
    write_raw_codebook(p, cb);
    const auto back = read_raw_codebook(p);
    EXPECT_EQ(back.bits, cb.bits);
    EXPECT_EQ(back.k, cb.k);
    EXPECT_EQ(back.v, cb.v);
    EXPECT_EQ(sha256_file_hex(p), raw_codebook_sha256(cb));
  }
  EXPECT_EQ(slurp(tmpdir() + "/raw3.bin"), slurp(kData + "reference-3bit.bin"));
  EXPECT_EQ(slurp(tmpdir() + "/raw2.bin"), slurp(kData + "reference-2bit.bin"));
}

TEST(CodebookFiles, HeaderRoundTripAndNames) {
  for (const RawCodebook& cb : {reference(3), reference(2), four_bit()}) {
    const std::string p = tmpdir() + "/cb" + std::to_string(cb.bits) + ".h";
    write_codebook_header(p, cb, "test */ comment");
    const auto back = read_codebook_header(p);
    EXPECT_EQ(back.bits, cb.bits);
    EXPECT_EQ(back.k, cb.k);
    EXPECT_EQ(back.v, cb.v);
    const auto any = read_codebook_any(p);
    EXPECT_EQ(any.raw_sha256, raw_codebook_sha256(cb));
  }
  const std::string t = codebook_header_text(reference(3));
  EXPECT_NE(t.find("#define SJKVARN_CB3_TOK_SHA256 \"0d6e6d63309612d0df48ec6ea2bacd00c56e97fe35a67848c53892eafa1ac078\""),
            std::string::npos);
  EXPECT_NE(t.find("#define SJKVARN_CB3_TOK_K_INIT {"), std::string::npos);
  EXPECT_NE(t.find("#define SJKVARN_CB3_TOK_V_INIT {"), std::string::npos);
  // 16 lower-case values per line
  char first[128];
  const uint16_t* k = reference_codebook(Side::k, 3);
  std::snprintf(first, sizeof first, "    0x%04x, 0x%04x,", k[0], k[1]);
  EXPECT_NE(t.find(first), std::string::npos);
  const std::string t2 = codebook_header_text(reference(2));
  EXPECT_NE(t2.find("SJKVARN_CB2_TOK_SHA256 \"c7a63f25c47604af04a5be15d4704204d2fd8c7235ce441b88fb4a2da692dba8\""),
            std::string::npos);
  EXPECT_NE(codebook_header_text(four_bit()).find("SJKVARN_CB4_TOK_K_INIT"), std::string::npos);
}

TEST(CodebookFiles, ContainerRoundTrip) {
  CodebookContainer c;
  c.table = reference(3);
  c.axis = CodebookAxis::token;
  c.provenance.tool_version = "sjkv-train 0.1.0";
  c.provenance.inputs = {{"/some/capture.h5", std::string(64, 'a')}, {"x y z.kvd", std::string(64, '0')}};
  c.provenance.seed = 42;
  c.provenance.iterations = 7;
  c.provenance.train_tiles_k = 10;
  c.provenance.heldout_tiles_v = 3;
  c.provenance.train_mse_k = 0.125;
  c.provenance.heldout_mse_v = 1.0 / 3.0;
  c.provenance.extra = {{"note", "hello = world"}};
  const std::string p = tmpdir() + "/c.sjcb";
  write_codebook_container(p, c);
  const auto b = read_codebook_container(p);
  EXPECT_EQ(b.table.bits, 3u);
  EXPECT_EQ(b.table.k, c.table.k);
  EXPECT_EQ(b.table.v, c.table.v);
  EXPECT_EQ(b.codebook_id, 0xd3b4c98ce0f8406cull);
  EXPECT_EQ(b.raw_sha256, "0d6e6d63309612d0df48ec6ea2bacd00c56e97fe35a67848c53892eafa1ac078");
  EXPECT_EQ(b.provenance.tool_version, c.provenance.tool_version);
  ASSERT_EQ(b.provenance.inputs.size(), 2u);
  EXPECT_EQ(b.provenance.inputs[1].path, "x y z.kvd");
  EXPECT_EQ(b.provenance.inputs[0].sha256, std::string(64, 'a'));
  EXPECT_EQ(b.provenance.seed, 42u);
  EXPECT_EQ(b.provenance.iterations, 7u);
  EXPECT_EQ(b.provenance.train_tiles_k, 10u);
  EXPECT_EQ(b.provenance.heldout_tiles_v, 3u);
  EXPECT_EQ(b.provenance.train_mse_k, 0.125);
  EXPECT_EQ(b.provenance.heldout_mse_v, 1.0 / 3.0);
  ASSERT_EQ(b.provenance.extra.size(), 1u);
  EXPECT_EQ(b.provenance.extra[0].second, "hello = world");
  CodebookFileKind kind;
  read_codebook_any(p, &kind);
  EXPECT_EQ(kind, CodebookFileKind::container);
  // 4-bit and channel axis
  CodebookContainer c4;
  c4.table = four_bit();
  c4.axis = CodebookAxis::channel;
  write_codebook_container(tmpdir() + "/c4.sjcb", c4);
  const auto b4 = read_codebook_container(tmpdir() + "/c4.sjcb");
  EXPECT_EQ(b4.axis, CodebookAxis::channel);
  EXPECT_EQ(b4.table.v, c4.table.v);
  EXPECT_EQ(b4.codebook_id, codebook_id(4, 4, TrellisCodebooks{c4.table.k.data(), c4.table.v.data()}));
}

TEST(CodebookFiles, WritersRefuseBadTables) {
  RawCodebook cb = reference(3);
  cb.k[5] = 0x7c00;
  EXPECT_THROW(write_raw_codebook(tmpdir() + "/never.bin", cb), std::invalid_argument);
  EXPECT_FALSE(std::filesystem::exists(tmpdir() + "/never.bin"));
  cb = reference(3);
  cb.v.pop_back();
  EXPECT_THROW(write_codebook_header(tmpdir() + "/never.h", cb), std::invalid_argument);
  CodebookContainer c;
  c.table = reference(2);
  c.provenance.tool_version = "a\nb";
  EXPECT_THROW(write_codebook_container(tmpdir() + "/never.sjcb", c), std::invalid_argument);
  EXPECT_FALSE(std::filesystem::exists(tmpdir() + "/never.sjcb"));
}

namespace {

// Container bytes with a field changed and the trailing checksum recomputed.
std::vector<uint8_t> valid_container() {
  CodebookContainer c;
  c.table = reference(2);
  c.provenance.tool_version = "t";
  return container_bytes(c);
}
void reseal(std::vector<uint8_t>& b) {
  const auto h = sha256(b.data(), b.size() - 32);
  std::copy(h.begin(), h.end(), b.end() - 32);
}
void put32(std::vector<uint8_t>& b, size_t off, uint32_t v) {
  for (int i = 0; i < 4; ++i) b[off + i] = static_cast<uint8_t>(v >> (8 * i));
}
void expect_container_defect(std::vector<uint8_t> b, const std::string& what) {
  const std::string p = tmpdir() + "/bad.sjcb";
  spit(p, b);
  expect_defect([&] { read_codebook_container(p); }, what);
}

}  // namespace

TEST(CodebookFiles, ContainerRejects) {
  const auto good = valid_container();
  { auto b = good; b[0] = 'X'; expect_container_defect(b, "bad magic"); }
  { auto b = good; b.resize(50); expect_container_defect(b, "truncated"); }
  { auto b = good; put32(b, 8, 2); reseal(b); expect_container_defect(b, "unsupported container version"); }
  { auto b = good; put32(b, 12, 5); reseal(b); expect_container_defect(b, "bits is 5"); }
  { auto b = good; put32(b, 16, 9); reseal(b); expect_container_defect(b, "window length is 9"); }
  { auto b = good; put32(b, 20, 2); reseal(b); expect_container_defect(b, "axis is 2"); }
  { auto b = good; put32(b, 24, 512); reseal(b); expect_container_defect(b, "entry count is 512"); }
  { auto b = good; put32(b, 28, 2u << 20); expect_container_defect(b, "exceeds 1 MiB"); }
  { auto b = good; b.pop_back(); expect_container_defect(b, "truncated"); }
  { auto b = good; b.push_back(0); expect_container_defect(b, "trailing bytes"); }
  { auto b = good; b[100] ^= 1; expect_container_defect(b, "file checksum mismatch"); }
  { auto b = good; b[72 + 2 * 3] = 0x00; b[72 + 2 * 3 + 1] = 0x7e; reseal(b); expect_container_defect(b, "K table entry 3 is NaN"); }
  { auto b = good; b[32] ^= 1; reseal(b); expect_container_defect(b, "codebook id mismatch"); }
  { auto b = good; b[40] ^= 1; reseal(b); expect_container_defect(b, "raw table SHA-256 mismatch"); }
  {  // a table change with id and sha unchanged is caught by the id
    auto b = good; b[72 + 600] ^= 1; reseal(b); expect_container_defect(b, "codebook id mismatch");
  }
  {  // provenance: a line without '='
    auto b = good;
    const size_t po = 72 + 4 * 256;
    b[po + 12] = '#';  // "tool_version=t\n" -> "tool_version#t\n"
    reseal(b);
    expect_container_defect(b, "not key=value");
  }
  {
    auto b = good;
    const size_t po = 72 + 4 * 256;
    b[po + 13] = 0x01;
    reseal(b);
    expect_container_defect(b, "control byte");
  }
  {  // seed that is not a number
    auto b = good;
    const std::string prov = "seed=12x\n";
    const size_t po = 72 + 4 * 256;
    std::vector<uint8_t> nb(b.begin(), b.begin() + po);
    put32(nb, 28, static_cast<uint32_t>(prov.size()));
    nb.insert(nb.end(), prov.begin(), prov.end());
    nb.resize(nb.size() + 32);
    reseal(nb);
    expect_container_defect(nb, "not an unsigned integer");
  }
  expect_defect([&] { read_codebook_container(tmpdir() + "/does-not-exist.sjcb"); }, "cannot open");
}

TEST(CodebookFiles, HeaderRejects) {
  const std::string good = codebook_header_text(reference(2));
  const std::string p = tmpdir() + "/bad.h";
  auto check = [&](std::string text, const std::string& what) {
    spit(p, text);
    expect_defect([&] { read_codebook_header(p); }, what);
  };
  auto replace = [](std::string s, const std::string& a, const std::string& b) {
    const size_t i = s.find(a);
    EXPECT_NE(i, std::string::npos) << a;
    if (i != std::string::npos) s.replace(i, a.size(), b);
    return s;
  };
  check("int x;\n", "has no SJKVARN_CB{2,3,4}_TOK_K_INIT");
  check(replace(good, "SJKVARN_CB2_TOK_V_INIT", "SJKVARN_CB2_TOK_W_INIT"), "has no SJKVARN_CB2_TOK_V_INIT");
  check(replace(good, "SJKVARN_CB2_TOK_SHA256", "SJKVARN_CB2_TOK_SHA255"), "has no SJKVARN_CB2_TOK_SHA256");
  check(replace(good, "_K_INIT {", "_K_INIT ("), "not a brace initializer");
  check(good.substr(0, good.find("_V_INIT {") + 20), "no closing brace");
  {
    const size_t i = good.find("_K_INIT {");
    const size_t v = good.find("0x", i);
    check(replace(good, good.substr(v, 7), ""), "has 255 values");
  }
  {
    const size_t i = good.find("_K_INIT {");
    const size_t v = good.find("0x", i);
    std::string s = good;
    s.replace(v, 6, "0x12g4");
    check(s, "not 0x + 4 hex digits");
    s = good;
    s.replace(v, 6, "0x7c00");
    check(s, "is NaN, infinite or larger than 64");
    s = good;
    s.replace(v, 6, "0x7bff");  // 65504: decodes to values that overflow fp16
    check(s, "is NaN, infinite or larger than 64");
    s = good;
    s.replace(v, 1, "#");
    check(s, "unexpected character");
  }
  {
    std::string s = good;
    const size_t q = s.find("SHA256 \"") + 8;
    s[q] = s[q] == '0' ? '1' : '0';
    check(s, "but the tables hash to");
    s = good;
    s.replace(q, 64, "XYZ");
    check(s, "not a quoted 64-digit");
  }
  check(good + codebook_header_text(reference(3)), "more than one width");
  // a header with both widths reads with an explicit width
  spit(p, good + codebook_header_text(reference(3)));
  EXPECT_EQ(read_codebook_header(p, 3).k, reference(3).k);
}

TEST(CodebookFiles, RawAndSniffRejects) {
  const std::string p = tmpdir() + "/bad.bin";
  spit(p, std::vector<uint8_t>(100, 0));
  expect_defect([&] { read_raw_codebook(p); }, "is 100 bytes");
  expect_defect([&] { read_codebook_any(p); }, "is not a codebook file");
  auto b = slurp(kData + "reference-2bit.bin");
  b[600] = 0x00;
  b[601] = 0x7c;  // V entry 44 infinite
  spit(p, b);
  expect_defect([&] { read_codebook_any(p); }, "V table entry 44 is NaN, infinite or larger than 64");
  // every entry 65504 (was accepted, and encode then wrote snapshots it could not decode)
  for (size_t i = 0; i + 1 < b.size(); i += 2) {
    b[i] = 0xff;
    b[i + 1] = 0x7b;
  }
  spit(p, b);
  expect_defect([&] { read_codebook_any(p); }, "K table entry 0 is NaN, infinite or larger than 64");
  b[0] = 0x00;  // 64.0 exactly is accepted
  b[1] = 0x54;
  for (size_t i = 2; i + 1 < b.size(); i += 2) b[i] = b[i + 1] = 0;
  spit(p, b);
  EXPECT_NO_THROW(read_codebook_any(p));
}

// The codebooks sjkv ships (data/codebooks/gemma3-270m-*): all three forms agree, the ids
// are the documented ones, and the provenance says what they were trained on.
TEST(ShippedCodebooks, TrainedGemmaTablesAreConsistent) {
  const std::string dir = std::string(SJKV_GOLDEN_DIR) + "/../../data/codebooks/";
  const struct {
    const char* stem;
    uint32_t bits;
    uint64_t id;
  } cases[] = {{"gemma3-270m-3bit", 3, 0x2351b7601c729c52ull}, {"gemma3-270m-2bit", 2, 0x96c6e102ca78d85eull}};
  for (const auto& c : cases) {
    const CodebookContainer box = read_codebook_container(dir + c.stem + ".sjcb");
    EXPECT_EQ(box.table.bits, c.bits);
    EXPECT_EQ(box.codebook_id, c.id);
    EXPECT_EQ(box.provenance.inputs.size(), 2u);
    EXPECT_GT(box.provenance.iterations, 0u);
    // trained held-out MSE is recorded and below scalar RTN's ~0.083 by a wide margin
    EXPECT_LT(box.provenance.heldout_mse_k, 0.05);
    EXPECT_LT(box.provenance.heldout_mse_v, 0.05);
    const CodebookContainer raw = read_codebook_any(dir + c.stem + ".bin");
    const CodebookContainer hdr = read_codebook_any(dir + c.stem + ".h");
    EXPECT_EQ(raw.table.k, box.table.k);
    EXPECT_EQ(raw.table.v, box.table.v);
    EXPECT_EQ(hdr.table.k, box.table.k);
    EXPECT_EQ(hdr.table.v, box.table.v);
    EXPECT_EQ(codebook_id(c.bits, c.bits, TrellisCodebooks{box.table.k.data(), box.table.v.data()}), c.id);
  }
}
