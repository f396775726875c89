// json_string (sjkv/io/text.h) escapes through nlohmann-json and must keep the bytes of the
// hand-written escaper it replaced, which every tool's JSON and the results files carry.
#include <gtest/gtest.h>

#include <cstdio>
#include <random>
#include <string>

#include <nlohmann/json.hpp>

#include "sjkv/io/text.h"

using namespace sjkv;

namespace {

// The escaper json_string had before nlohmann (kept as the reference): quotes and backslashes
// escaped, control bytes and DEL as \u00XX, each byte that is not UTF-8 as \ufffd.
std::string reference_json_string(const std::string& s) {
  const auto* u = reinterpret_cast<const unsigned char*>(s.data());
  std::string o = "\"";
  for (size_t i = 0; i < s.size();) {
    const size_t len = utf8_sequence_at(u, s.size(), i);
    if (len == 0) {
      o += "\\ufffd";
      ++i;
      continue;
    }
    const unsigned char c = u[i];
    if (c == '"' || c == '\\') {
      o += '\\';
      o += static_cast<char>(c);
    } else if (c < 0x20 || c == 0x7f) {
      char b[8];
      std::snprintf(b, sizeof b, "\\u%04x", c);
      o += b;
    } else {
      o.append(s, i, len);
    }
    i += len;
  }
  return o + "\"";
}

TEST(JsonString, HandWorked) {
  EXPECT_EQ(json_string(""), "\"\"");
  EXPECT_EQ(json_string("model.gguf"), "\"model.gguf\"");
  EXPECT_EQ(json_string("a\"b\\c/d"), "\"a\\\"b\\\\c/d\"");
  EXPECT_EQ(json_string("t\tn\nr\rb\bf\fz"), "\"t\\u0009n\\u000ar\\u000db\\u0008f\\u000cz\"");
  EXPECT_EQ(json_string(std::string("\x01\x1f\x7f", 3)), "\"\\u0001\\u001f\\u007f\"");
  EXPECT_EQ(json_string(std::string("\0x", 2)), "\"\\u0000x\"");
  EXPECT_EQ(json_string("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80"), "\"caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80\"");
  // Not UTF-8: one \ufffd per byte (a cut sequence, a stray continuation, an overlong form, a
  // surrogate, past U+10FFFF), the raw U+FFFD of valid input kept as it is.
  EXPECT_EQ(json_string("a\xe2\x82"), "\"a\\ufffd\\ufffd\"");
  EXPECT_EQ(json_string("\x80\xbf"), "\"\\ufffd\\ufffd\"");
  EXPECT_EQ(json_string("\xc0\xaf"), "\"\\ufffd\\ufffd\"");
  EXPECT_EQ(json_string("\xed\xa0\x80"), "\"\\ufffd\\ufffd\\ufffd\"");
  EXPECT_EQ(json_string("\xf4\x90\x80\x80!"), "\"\\ufffd\\ufffd\\ufffd\\ufffd!\"");
  EXPECT_EQ(json_string("\xef\xbf\xbd"), "\"\xef\xbf\xbd\"");
}

TEST(JsonString, SameBytesAsTheReferenceForEveryShortString) {
  std::string s;
  for (int a = 0; a < 256; ++a) {
    s.assign(1, static_cast<char>(a));
    ASSERT_EQ(json_string(s), reference_json_string(s)) << "byte " << a;
    for (int b = 0; b < 256; ++b) {
      s.assign({static_cast<char>(a), static_cast<char>(b)});
      ASSERT_EQ(json_string(s), reference_json_string(s)) << "bytes " << a << " " << b;
    }
  }
}

TEST(JsonString, SameBytesAsTheReferenceForRandomStrings) {
  // Bytes drawn mostly from the UTF-8 lead and continuation ranges, so that valid multi-byte
  // sequences, cut ones and escapes sit next to each other.
  const unsigned char pool[] = {'a', 'Z', ' ', '"', '\\', '/', 0x00, 0x08, 0x09, 0x0a, 0x0c, 0x0d, 0x1b, 0x1f,
                                0x7f, 0x80, 0x8f, 0x9f, 0xa0, 0xbf, 0xc0, 0xc2, 0xdf, 0xe0, 0xed, 0xef, 0xf0,
                                0xf4, 0xf5, 0xff};
  std::mt19937_64 rng(20240611);
  for (int n = 0; n < 200000; ++n) {
    std::string s(rng() % 16, '\0');
    for (char& c : s) c = static_cast<char>(rng() % 4 == 0 ? rng() % 256 : pool[rng() % sizeof pool]);
    ASSERT_EQ(json_string(s), reference_json_string(s)) << "case " << n;
  }
}

TEST(JsonString, OutputIsValidJsonThatReadsBackForUtf8Input) {
  for (const std::string s : {"plain", "q\"b\\s", "tab\tnl\n\x01\x7f", "\xc3\xa9\xe2\x82\xac"}) {
    const nlohmann::json j = nlohmann::json::parse(json_string(s));
    EXPECT_EQ(j.get<std::string>(), s);
  }
  EXPECT_EQ(nlohmann::json::parse(json_string("x\xff")).get<std::string>(), "x\xef\xbf\xbd");
}

}  // namespace
