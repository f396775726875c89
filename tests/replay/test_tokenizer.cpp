// Tokenizer from a GGUF vocabulary (replay/tokenizer.h).
//  - Small vocabularies built in memory, whose ids are worked out by hand: the SentencePiece
//    merge order by score, byte fallback, the space prefix, user-defined tokens; byte-level
//    BPE merge order by rank and the pre-tokenizer's cuts.
//  - The qwen2 and qwen35 pre-tokenizers on text with combining marks: their words against
//    the patterns' (PyPI regex), and a vocabulary whose merges join marks against llama.cpp's ids.
//  - GPT-4o's pre-tokenizer (gpt-oss) on words worked out by hand, and the o200k_harmony rule that
//    takes <|end|> out of the end-of-generation set.
//  - One reject per vocabulary defect, each a FileError naming the file.
//  - The real models when present (Gemma 3 270M, SmolLM2 135M): ids equal to llama.cpp's for
//    the strings in tests/golden/tokenizer/*.txt (produced by llama.cpp, see the README there),
//    and decode(encode(s)) == s over those strings and the project's own documentation.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <limits>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "../model_dir.h"
#include "sjkv/io/model_geometry.h"
#include "sjkv/replay/tokenizer.h"
// The library's private Unicode helpers and pre-tokenizers (linked into sjkv_replay).
#include "../../replay/src/tokenizer_pretok.h"
#include "../../replay/src/tokenizer_unicode.h"

namespace {

using sjkv::FileError;
using sjkv::GgufFile;
using sjkv::replay::Tokenizer;
using Ids = std::vector<int32_t>;

// ---- A GGUF v3 metadata writer (no tensors, so no data section) ------------------------------

class Gguf {
 public:
  Gguf& str(const std::string& key, const std::string& v) { return head(key, 8).s(v); }
  Gguf& u32(const std::string& key, uint32_t v) { return head(key, 4).le(v, 4); }
  Gguf& i32(const std::string& key, int32_t v) { return head(key, 5).le(uint32_t(v), 4); }
  Gguf& boolean(const std::string& key, bool v) { return head(key, 7).le(v ? 1 : 0, 1); }
  Gguf& strings(const std::string& key, const std::vector<std::string>& v) {
    head(key, 9).le(8, 4).le(v.size(), 8);
    for (const auto& x : v) s(x);
    return *this;
  }
  Gguf& f32s(const std::string& key, const std::vector<float>& v) {
    head(key, 9).le(6, 4).le(v.size(), 8);
    for (float x : v) {
      uint32_t b;
      std::memcpy(&b, &x, 4);
      le(b, 4);
    }
    return *this;
  }
  Gguf& i32s(const std::string& key, const std::vector<int32_t>& v) {
    head(key, 9).le(5, 4).le(v.size(), 8);
    for (int32_t x : v) le(uint32_t(x), 4);
    return *this;
  }
  GgufFile parse() const {
    std::vector<uint8_t> b = {'G', 'G', 'U', 'F'};
    auto put = [&](uint64_t v, int n) {
      for (int i = 0; i < n; ++i) b.push_back(uint8_t(v >> (8 * i)));
    };
    put(3, 4);
    put(0, 8);
    put(n_kv_, 8);
    b.insert(b.end(), body_.begin(), body_.end());
    return GgufFile::parse(std::move(b), "vocab.gguf");
  }

 private:
  Gguf& le(uint64_t v, int n) {
    for (int i = 0; i < n; ++i) body_.push_back(uint8_t(v >> (8 * i)));
    return *this;
  }
  Gguf& s(const std::string& v) {
    le(v.size(), 8);
    body_.insert(body_.end(), v.begin(), v.end());
    return *this;
  }
  Gguf& head(const std::string& key, uint32_t type) {
    ++n_kv_;
    return s(key).le(type, 4);
  }
  std::vector<uint8_t> body_;
  uint64_t n_kv_ = 0;
};

const std::string kU2581 = "\xE2\x96\x81";  // SentencePiece's visible space

// A golden file's line split at its tabs.
std::vector<std::string> tab_columns(const std::string& line) {
  std::vector<std::string> col;
  std::stringstream ss(line);
  std::string c;
  while (std::getline(ss, c, '\t')) col.push_back(c);
  return col;
}

std::string unhex(const std::string& h) {
  std::string s;
  for (size_t i = 0; i + 1 < h.size(); i += 2) s += char(std::stoi(h.substr(i, 2), nullptr, 16));
  return s;
}

// ---- Unicode facts the pre-tokenizers rely on ------------------------------------------------

TEST(TokenizerUnicode, ClassesWhiteSpaceAndByteMap) {
  namespace u = sjkv::replay::unicode;
  using C = u::CharClass;
  const std::pair<uint32_t, C> cases[] = {
      {'a', C::letter},     {'Z', C::letter},     {'0', C::number},      {'_', C::other},
      {0xAA, C::letter},    {0xB2, C::number},    {0xBD, C::number},     {0xD7, C::other},   // ª ² ½ ×
      {0x0301, C::mark},    {0x0416, C::letter},  {0x0663, C::number},   {0x2167, C::number},  // Nl
      {0x0903, C::mark},    {0x20DD, C::mark},    {0xE0100, C::mark},    {0x0964, C::other},  // Mc Me Mn Po
      {0x1DFF, C::mark},    {0x11F00, C::mark},   {0x1E4EC, C::mark},    // the last two new in 15.0
      {0x1ACF, C::other},   {0x10EFC, C::other},  // marks since Unicode 16.0, unassigned in 15.1
      {0x3007, C::number},  {0x4E2D, C::letter},  {0xAC00, C::letter},   {0x3000, C::other},
      {0x1F999, C::other},  {0x1D400, C::letter}, {0x2EBF0, C::letter},  // CJK Ext. I (Unicode 15.1)
      {0x0378, C::other},   {0x10FFFF, C::other}, {0x110000, C::other},  {0x1FFFFF, C::other},
  };
  for (const auto& c : cases) EXPECT_EQ(u::char_class(c.first), c.second) << std::hex << c.first;
  int spaces = 0, per_class[4] = {};
  for (uint32_t cp = 0; cp < 0x110000; ++cp) {
    spaces += u::is_white_space(cp);
    ++per_class[int(u::char_class(cp))];
  }
  EXPECT_EQ(spaces, 25);  // PropList.txt White_Space
  // Code points of general category L, N and M in Unicode 15.1 (UnicodeData.txt).
  EXPECT_EQ(per_class[int(C::letter)], 136726);
  EXPECT_EQ(per_class[int(C::number)], 1831);
  EXPECT_EQ(per_class[int(C::mark)], 2450);
  EXPECT_TRUE(u::is_white_space(0x85));
  EXPECT_FALSE(u::is_white_space(0x200B));  // zero width space is not White_Space
  // GPT-2's table: ' ' -> U+0120 'Ġ', '\n' -> U+010A 'Ċ', 0xAD -> U+0143; printable bytes map to themselves.
  EXPECT_EQ(u::byte_to_code_point(' '), 0x120u);
  EXPECT_EQ(u::byte_to_code_point('\n'), 0x10Au);
  EXPECT_EQ(u::byte_to_code_point(0xAD), 0x143u);
  EXPECT_EQ(u::byte_to_code_point('A'), uint32_t('A'));
  for (int b = 0; b < 256; ++b) EXPECT_EQ(u::code_point_to_byte(u::byte_to_code_point(uint8_t(b))), b);
  EXPECT_EQ(u::code_point_to_byte(0x20), -1);
  EXPECT_EQ(u::code_point_to_byte(0x144), -1);
  // Malformed UTF-8 gives U+FFFD per bad byte and resumes at the next byte.
  EXPECT_EQ(u::decode_utf8("a\xC3(\xE2\x82\xAC\xFF"), (std::vector<uint32_t>{'a', 0xFFFD, '(', 0x20AC, 0xFFFD}));
  EXPECT_EQ(u::decode_utf8("\xF0\x9F\xA6\x99"), (std::vector<uint32_t>{0x1F999}));
}

// ---- Pre-tokenizer words ---------------------------------------------------------------------

// The words of the qwen2 and qwen35 expressions as PyPI's regex module cuts them, for strings
// with combining marks in every position (tests/golden/tokenizer/pretok-splits.txt, written by
// `scripts/compare-tokenizer.py splits`, which lists the strings). Where llama.cpp's
// hand-written splitter cuts otherwise the file holds llama.cpp's words, marked 'llama.cpp'.
TEST(TokenizerPreTokenize, MatchesThePatternsOnMarks) {
  using sjkv::replay::PreTokenizer;
  std::ifstream in(std::string(SJKV_GOLDEN_DIR) + "/tokenizer/pretok-splits.txt");
  ASSERT_TRUE(in) << "missing golden file pretok-splits.txt";
  auto unhex_words = [](const std::string& col) {
    std::vector<std::string> words;
    std::stringstream ss(col);
    std::string h;
    while (ss >> h) words.push_back(unhex(h));
    return words;
  };
  size_t cases = 0, by_llama_cpp = 0, qwen35_differs = 0;
  std::string line;
  std::vector<std::pair<std::string, std::vector<std::string>>> qwen2_words;  // (text, words)
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::vector<std::string> col = tab_columns(line);
    ASSERT_GE(col.size(), 4u) << line;
    PreTokenizer kind{};
    bool ignore_merges = false;
    ASSERT_TRUE(sjkv::replay::pre_tokenizer_from_name(col[0], &kind, &ignore_merges)) << col[0];
    const std::string text = unhex(col[1]);
    const std::vector<std::string> want = unhex_words(col[2]);
    EXPECT_EQ(sjkv::replay::pre_tokenize(kind, text), want) << col[0] << " text: '" << text << "'";
    ++cases;
    by_llama_cpp += col[3] == "llama.cpp";
    // The same strings come first for qwen2, then for qwen35.
    if (col[0] == "qwen2") qwen2_words.emplace_back(text, want);
    if (col[0] == "qwen35") {
      for (const auto& q2 : qwen2_words) qwen35_differs += q2.first == text && q2.second != want;
    }
  }
  EXPECT_GE(cases, 100u);
  EXPECT_GE(by_llama_cpp, 2u);
  EXPECT_GE(qwen35_differs, 20u);  // the samples do tell the two expressions apart
}

TEST(TokenizerPreTokenize, Qwen35CountsMarksWithLetters) {
  using sjkv::replay::PreTokenizer;
  using sjkv::replay::pre_tokenize;
  using W = std::vector<std::string>;
  PreTokenizer kind{};
  bool ignore_merges = true;
  ASSERT_TRUE(sjkv::replay::pre_tokenizer_from_name("qwen35", &kind, &ignore_merges));
  EXPECT_EQ(kind, PreTokenizer::qwen35);
  EXPECT_FALSE(ignore_merges);  // as llama.cpp's LLAMA_VOCAB_PRE_TYPE_QWEN35
  // e + U+0301: one word for qwen35; qwen2 leaves the mark to the punctuation run.
  const std::string acute = "\xCC\x81";
  EXPECT_EQ(pre_tokenize(PreTokenizer::qwen35, "cafe" + acute + "!"), (W{"cafe" + acute, "!"}));
  EXPECT_EQ(pre_tokenize(PreTokenizer::qwen2, "cafe" + acute + "!"), (W{"cafe", acute + "!"}));
  // A mark opens a word after a space, a digit or punctuation; the punctuation run stops at it.
  EXPECT_EQ(pre_tokenize(PreTokenizer::qwen35, " " + acute + "x"), (W{" " + acute + "x"}));
  EXPECT_EQ(pre_tokenize(PreTokenizer::qwen35, "1" + acute), (W{"1", acute}));
  EXPECT_EQ(pre_tokenize(PreTokenizer::qwen35, "!!" + acute), (W{"!!", acute}));
  EXPECT_EQ(pre_tokenize(PreTokenizer::qwen35, "(" + acute + "x"), (W{"(" + acute + "x"}));
  // Not after a newline: [^\r\n...]? cannot take it, so the newline is its own word.
  EXPECT_EQ(pre_tokenize(PreTokenizer::qwen35, "\n" + acute), (W{"\n", acute}));
}

// ---- SentencePiece-style vocabulary ----------------------------------------------------------

// ids: 0 <unk>, 1 <s>, 2 </s>, 3..258 <0x00>..<0xFF>, then the entries of kSpmWords.
struct Word {
  std::string text;
  float score;
  int32_t type;
};
const std::vector<Word> kSpmWords = {
    {kU2581, -1.0f, 1},             // 259
    {"a", -2.0f, 1},                // 260
    {"b", -2.0f, 1},                // 261
    {"c", -2.0f, 1},                // 262
    {"ab", -3.0f, 1},               // 263
    {"bc", -1.5f, 1},               // 264
    {kU2581 + "a", -4.0f, 1},       // 265
    {"abc", -5.0f, 1},              // 266
    {"<tag>", 0.0f, 4},             // 267 user-defined
    {"<end_of_turn>", 0.0f, 3},     // 268 control, end of generation by name
    {"<unused0>", 0.0f, 5},         // 269 unused
    {"aa", -2.5f, 1},               // 270
};
constexpr int32_t kByte0 = 3, kSp = 259, kA = 260, kB = 261, kC = 262, kAB = 263, kBC = 264, kSpA = 265, kABC = 266,
                  kTag = 267, kEot = 268, kUnused = 269, kAA = 270;

Gguf spm_vocab(bool add_space_prefix = true) {
  std::vector<std::string> tokens = {"<unk>", "<s>", "</s>"};
  std::vector<float> scores = {0, 0, 0};
  std::vector<int32_t> types = {2, 3, 3};
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof name, "<0x%02X>", b);
    tokens.push_back(name);
    scores.push_back(0);
    types.push_back(6);
  }
  for (const Word& w : kSpmWords) {
    tokens.push_back(w.text);
    scores.push_back(w.score);
    types.push_back(w.type);
  }
  Gguf g;
  g.str("tokenizer.ggml.model", "llama").strings("tokenizer.ggml.tokens", tokens);
  g.f32s("tokenizer.ggml.scores", scores).i32s("tokenizer.ggml.token_type", types);
  g.u32("tokenizer.ggml.bos_token_id", 1).u32("tokenizer.ggml.eos_token_id", 2);
  g.boolean("tokenizer.ggml.add_space_prefix", add_space_prefix);
  return g;
}

TEST(TokenizerSpm, MergesTheBestScoringPairFirst) {
  const auto tok = Tokenizer::from_gguf(spm_vocab().parse());
  // "▁abc": pairs ▁a (-4), ab (-3), bc (-1.5). bc merges first, then ▁a (-4) beats abc (-5),
  // and ▁a+bc is no token: [▁a, bc]. Longest-match would have given [▁, abc].
  EXPECT_EQ(tok->encode("abc", false), (Ids{kSpA, kBC}));
  // Equal scores merge the leftmost pair: "aaa" -> aa + a.
  EXPECT_EQ(tok->encode("aaa", false), (Ids{kSp, kAA, kA}));
  // Spaces become ▁; only the start gets the prefix. ab (-3) beats ▁a (-4) here.
  EXPECT_EQ(tok->encode("ab c", false), (Ids{kSp, kAB, kSp, kC}));
  EXPECT_EQ(tok->encode("", false), Ids{});
  EXPECT_EQ(tok->encode("", true), Ids{1});
  EXPECT_EQ(tok->encode("a", true), (Ids{1, kSpA}));
}

TEST(TokenizerSpm, BytesFallBackToByteTokens) {
  const auto tok = Tokenizer::from_gguf(spm_vocab().parse());
  // é is U+00E9 (C3 A9), not in the vocabulary; a tab neither.
  EXPECT_EQ(tok->encode("\xC3\xA9\t", false), (Ids{kSp, kByte0 + 0xC3, kByte0 + 0xA9, kByte0 + 0x09}));
  EXPECT_EQ(tok->piece(kByte0 + 0xC3), "\xC3");
  EXPECT_EQ(tok->decode(tok->encode("\xC3\xA9\tabc", false)), "\xC3\xA9\tabc");
}

TEST(TokenizerSpm, SpacePrefixFollowsTheKey) {
  const auto tok = Tokenizer::from_gguf(spm_vocab(false).parse());
  // Without the prefix, bc then abc (-5) merge: the whole word.
  EXPECT_EQ(tok->encode("abc", false), (Ids{kABC}));
  EXPECT_EQ(tok->encode(" abc", false), (Ids{kSpA, kBC}));
  EXPECT_EQ(tok->decode(tok->encode(" abc", false)), " abc");
  const auto with = Tokenizer::from_gguf(spm_vocab(true).parse());
  EXPECT_EQ(with->decode(with->encode(" abc", false)), " abc");
  EXPECT_EQ(with->decode(with->encode("abc", true)), "abc");
}

TEST(TokenizerSpm, UserDefinedTokensAreCutOutControlTokensAreNot) {
  const auto tok = Tokenizer::from_gguf(spm_vocab().parse());
  // Text after a user-defined token gets the space prefix again, as in llama.cpp.
  EXPECT_EQ(tok->encode("a<tag>b", false), (Ids{kSpA, kTag, kSp, kB}));
  // A control token's text is ordinary text: < e n d ... fall back to bytes.
  const Ids ids = tok->encode("<end_of_turn>", false);
  EXPECT_EQ(ids.size(), 1u + 13u);
  EXPECT_EQ(ids[1], kByte0 + '<');
  EXPECT_EQ(tok->piece(kTag), "<tag>");
  EXPECT_EQ(tok->piece(kEot), "");
  EXPECT_EQ(tok->piece(kUnused), "");
  EXPECT_EQ(tok->piece(1), "");
  EXPECT_EQ(tok->piece(kSpA), " a");
}

// encode_special matches control tokens written in the text as well (llama.cpp's
// parse_special), and only then; text between them tokenizes as before.
TEST(TokenizerSpm, ParseSpecialCutsOutControlTokens) {
  const auto tok = Tokenizer::from_gguf(spm_vocab().parse());
  EXPECT_EQ(tok->encode_special("a<end_of_turn>b", false), (Ids{kSpA, kEot, kSp, kB}));
  EXPECT_EQ(tok->encode_special("a<tag>b", false), tok->encode("a<tag>b", false));
  EXPECT_EQ(tok->encode_special("ab c", true), tok->encode("ab c", true));
  EXPECT_NE(tok->encode("a<end_of_turn>b", false), tok->encode_special("a<end_of_turn>b", false));
}

TEST(TokenizerSpm, SpecialIds) {
  const auto tok = Tokenizer::from_gguf(spm_vocab().parse());
  EXPECT_EQ(tok->n_vocab(), 3u + 256u + kSpmWords.size());
  EXPECT_EQ(tok->bos(), 1);
  EXPECT_EQ(tok->eos(), 2);
  EXPECT_TRUE(tok->is_eog(2));
  EXPECT_TRUE(tok->is_eog(kEot));  // <end_of_turn> by name
  EXPECT_FALSE(tok->is_eog(1));
  EXPECT_FALSE(tok->is_eog(kA));
}

// ---- Byte-level BPE vocabulary ---------------------------------------------------------------

// "Ġ" (U+0120) is the byte-level character for a space.
const std::string kG = "\xC4\xA0";

Gguf bpe_vocab(const std::string& pre, std::vector<std::string> merges = {}) {
  const std::vector<std::string> tokens = {"<|endoftext|>", "a", "b", "c", kG, "1", "2", "ab",
                                           kG + "a", kG + "ab", "12", "abc", "<tag>"};
  if (merges.empty()) merges = {"a b", kG + " a", kG + "a b", "1 2", "ab c"};
  std::vector<int32_t> types(tokens.size(), 1);
  types[0] = 3;
  types[12] = 4;
  Gguf g;
  g.str("tokenizer.ggml.model", "gpt2").str("tokenizer.ggml.pre", pre);
  g.strings("tokenizer.ggml.tokens", tokens).i32s("tokenizer.ggml.token_type", types);
  g.strings("tokenizer.ggml.merges", merges);
  g.u32("tokenizer.ggml.bos_token_id", 0).u32("tokenizer.ggml.eos_token_id", 0);
  return g;
}

TEST(TokenizerBpe, MergesTheLowestRankFirst) {
  const auto tok = Tokenizer::from_gguf(bpe_vocab("smollm").parse());
  EXPECT_EQ(tok->encode("ab", false), (Ids{7}));
  EXPECT_EQ(tok->encode("abc", false), (Ids{11}));
  // " ab": 'a b' (rank 0) merges before 'Ġ a' (rank 1), and 'Ġ ab' is no merge.
  EXPECT_EQ(tok->encode(" ab", false), (Ids{4, 7}));
  // " a b": the GPT-2 expression cuts " a" and " b"; no merge crosses words.
  EXPECT_EQ(tok->encode(" a b", false), (Ids{8, 4, 2}));
  // Reordered merges give the other result.
  const auto other = Tokenizer::from_gguf(bpe_vocab("smollm", {kG + " a", kG + "a b", "a b"}).parse());
  EXPECT_EQ(other->encode(" ab", false), (Ids{9}));
  EXPECT_EQ(tok->decode(tok->encode(" ab abc", false)), " ab abc");
  EXPECT_EQ(tok->piece(0), "");
  EXPECT_EQ(tok->piece(8), " a");
}

TEST(TokenizerBpe, PreTokenizerDecidesTheWords) {
  // SmolLM isolates every digit; GPT-2 keeps the number whole so '1 2' merges.
  EXPECT_EQ(Tokenizer::from_gguf(bpe_vocab("smollm").parse())->encode("12", false), (Ids{5, 6}));
  EXPECT_EQ(Tokenizer::from_gguf(bpe_vocab("gpt-2").parse())->encode("12", false), (Ids{10}));
  // Llama 3: runs of up to three digits; "ab12" is a letter run then a number run.
  EXPECT_EQ(Tokenizer::from_gguf(bpe_vocab("llama-bpe").parse())->encode("ab12", false), (Ids{7, 10}));
}

TEST(TokenizerBpe, BosOnlyWhenTheModelAsksForIt) {
  const auto plain = Tokenizer::from_gguf(bpe_vocab("smollm").parse());
  EXPECT_EQ(plain->encode("ab", true), (Ids{7}));
  auto g = bpe_vocab("smollm");
  g.boolean("tokenizer.ggml.add_bos_token", true);
  EXPECT_EQ(Tokenizer::from_gguf(g.parse())->encode("ab", true), (Ids{0, 7}));
  EXPECT_EQ(plain->encode("a<tag>b", false), (Ids{1, 12, 2}));
  EXPECT_TRUE(plain->is_eog(0));
}

// GPT-4o's expression as llama.cpp runs it (PreTokenizer::gpt4o): letters cut where a capital
// follows small letters, a non-ASCII letter counted both capital and small, contractions kept
// with the word, digits in runs of 1-3, slashes and newlines after punctuation, marks as
// punctuation. Words worked out by hand from the expression; the ids of the same strings under
// gptoss-tok's vocabulary agree with llama.cpp's (arch-gptoss-tok.txt, compare-tokenizer.py).
TEST(TokenizerPreTokenize, Gpt4oCutsAtCaseChanges) {
  using sjkv::replay::PreTokenizer;
  using sjkv::replay::pre_tokenize;
  using Words = std::vector<std::string>;
  EXPECT_EQ(pre_tokenize(PreTokenizer::gpt4o, "HTTPServer getHTTPResponse iPhone"),
            (Words{"HTTPServer", " get", "HTTPResponse", " i", "Phone"}));
  // "É" is capital and small: the first alternative ends the word at the last non-ASCII letter
  // of a run of capitals followed by no small letter.
  EXPECT_EQ(pre_tokenize(PreTokenizer::gpt4o, "\xC3\x89" "COLE caf\xC3\xA9" "COLE ABC\xC3\x89"),
            (Words{"\xC3\x89", "COLE", " caf\xC3\xA9", "COLE", " ABC\xC3\x89"}));
  EXPECT_EQ(pre_tokenize(PreTokenizer::gpt4o, "DON'T we'RE it's'll 'S"),
            (Words{"DON'T", " we'RE", " it's", "'ll", " '", "S"}));
  EXPECT_EQ(pre_tokenize(PreTokenizer::gpt4o, "12345 x//y!!\n/z"),
            (Words{"123", "45", " x", "//", "y", "!!\n/", "z"}));
  EXPECT_EQ(pre_tokenize(PreTokenizer::gpt4o, "e\xCC\x81x  \n\n a\tb"),
            (Words{"e", "\xCC\x81x", "  \n\n", " a", "\tb"}));
}

// o200k_harmony's end-of-generation rule: with <|return|> and <|call|> also EOG, llama.cpp
// takes <|end|> out of the set and makes it user-defined (matched in text, rendered as text);
// without <|call|> it stays an EOG control token. <|start|> <|message|> <|channel|> are always
// user-defined.
TEST(TokenizerBpe, HarmonyEndIsNotEndOfGeneration) {
  auto vocab = [](bool with_call) {
    std::vector<std::string> tokens = {"<|endoftext|>", "a", "b", "<|end|>", "<|return|>", "<|start|>", "<|message|>"};
    if (with_call) tokens.push_back("<|call|>");
    std::vector<int32_t> types(tokens.size(), 3);
    types[1] = types[2] = 1;
    Gguf g;
    g.str("tokenizer.ggml.model", "gpt2").str("tokenizer.ggml.pre", "gpt-4o");
    g.strings("tokenizer.ggml.tokens", tokens).i32s("tokenizer.ggml.token_type", types);
    g.strings("tokenizer.ggml.merges", {"a b"});
    g.u32("tokenizer.ggml.bos_token_id", 0).u32("tokenizer.ggml.eos_token_id", 4);
    return Tokenizer::from_gguf(g.parse());
  };
  const auto harmony = vocab(true);
  EXPECT_FALSE(harmony->is_eog(3));
  for (int32_t id : {0, 4, 7}) EXPECT_TRUE(harmony->is_eog(id)) << id;
  EXPECT_EQ(harmony->encode("<|start|>a<|message|>b<|end|>", false), (Ids{5, 1, 6, 2, 3}));
  EXPECT_EQ(harmony->encode("a<|return|>", false), (Ids{1}));  // control: not matched (no byte tokens here)
  EXPECT_EQ(harmony->encode_special("a<|return|>", false), (Ids{1, 4}));
  EXPECT_EQ(harmony->piece(3), "<|end|>");
  EXPECT_EQ(harmony->piece(4), "");
  const auto no_call = vocab(false);
  EXPECT_TRUE(no_call->is_eog(3));
  EXPECT_EQ(no_call->piece(3), "");
  EXPECT_EQ(no_call->encode_special("b<|end|>", false), (Ids{2, 3}));
  EXPECT_EQ(no_call->encode("<|start|>", false), (Ids{5}));
}

// A vocabulary whose merges join combining marks to their neighbours, and llama.cpp's ids for
// strings with marks under qwen2 and qwen35 (tests/golden/tokenizer/marks-vocab.txt, written
// by `scripts/compare-tokenizer.py marks`). The test models' merges are ASCII-only, so a mark's
// bytes never merge there and their ids cannot tell the two pre-tokenizers apart; these can.
TEST(TokenizerBpe, MarksVocabularyMatchesLlamaCpp) {
  std::ifstream in(std::string(SJKV_GOLDEN_DIR) + "/tokenizer/marks-vocab.txt");
  ASSERT_TRUE(in) << "missing golden file marks-vocab.txt";
  std::vector<std::string> tokens, merges;
  struct Case {
    std::string pre, text;
    Ids ids;
  };
  std::vector<Case> cases;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::vector<std::string> col = tab_columns(line);
    if (col[0] == "token" && col.size() >= 2) {
      tokens.push_back(unhex(col[1]));
    } else if (col[0] == "merge" && col.size() >= 2) {
      merges.push_back(unhex(col[1]));
    } else if (col[0] == "case" && col.size() >= 4) {
      Case k{col[1], unhex(col[2]), {}};
      std::stringstream ids(col[3]);
      int32_t id;
      while (ids >> id) k.ids.push_back(id);
      cases.push_back(std::move(k));
    } else {
      FAIL() << "bad line: " << line;
    }
  }
  ASSERT_GE(tokens.size(), 257u);
  std::vector<int32_t> types(tokens.size(), 1);
  types.back() = 3;
  size_t differ = 0;
  for (const char* pre : {"qwen2", "qwen35"}) {
    Gguf g;
    g.str("tokenizer.ggml.model", "gpt2").str("tokenizer.ggml.pre", pre);
    g.strings("tokenizer.ggml.tokens", tokens).i32s("tokenizer.ggml.token_type", types);
    g.strings("tokenizer.ggml.merges", merges);
    const int32_t end = int32_t(tokens.size()) - 1;
    g.u32("tokenizer.ggml.bos_token_id", uint32_t(end)).u32("tokenizer.ggml.eos_token_id", uint32_t(end));
    const auto tok = Tokenizer::from_gguf(g.parse());
    size_t n = 0;
    for (const Case& k : cases) {
      if (k.pre != pre) continue;
      EXPECT_EQ(tok->encode(k.text, false), k.ids) << pre << " text: '" << k.text << "'";
      EXPECT_EQ(tok->decode(k.ids), k.text);
      ++n;
      // qwen2's cases come first; count the texts whose ids qwen35 changes.
      if (std::string(pre) == "qwen35") {
        for (const Case& q2 : cases) differ += q2.pre == "qwen2" && q2.text == k.text && q2.ids != k.ids;
      }
    }
    EXPECT_GE(n, 10u) << pre;
  }
  EXPECT_GE(differ, 8u);
}

// ---- Rejected vocabularies -------------------------------------------------------------------

std::string defect(const Gguf& g) {
  try {
    Tokenizer::from_gguf(g.parse());
  } catch (const FileError& e) {
    EXPECT_EQ(e.path(), "vocab.gguf");
    return e.defect();
  }
  ADD_FAILURE() << "accepted";
  return {};
}

void expect_defect(const Gguf& g, const std::string& part) {
  const std::string d = defect(g);
  EXPECT_NE(d.find(part), std::string::npos) << "defect: " << d;
}

TEST(TokenizerReject, MalformedVocabularies) {
  {
    Gguf g;
    g.strings("tokenizer.ggml.tokens", {"a"});
    expect_defect(g, "tokenizer.ggml.model");
  }
  {
    Gguf g;
    g.str("tokenizer.ggml.model", "bert").strings("tokenizer.ggml.tokens", {"a"});
    expect_defect(g, "'bert' is not supported");
  }
  {
    Gguf g;
    g.str("tokenizer.ggml.model", "llama");
    expect_defect(g, "tokenizer.ggml.tokens");
  }
  {
    Gguf g;
    g.str("tokenizer.ggml.model", "llama").i32s("tokenizer.ggml.tokens", {1, 2});
    expect_defect(g, "expected string");
  }
  {
    Gguf g;
    g.str("tokenizer.ggml.model", "llama").strings("tokenizer.ggml.tokens", {});
    expect_defect(g, "empty");
  }
  {
    Gguf g;
    g.str("tokenizer.ggml.model", "llama").strings("tokenizer.ggml.tokens", {"<unk>", "a", "b", "a"});
    expect_defect(g, "'a' twice (ids 1 and 3)");
  }
  {
    Gguf g;
    g.str("tokenizer.ggml.model", "llama").strings("tokenizer.ggml.tokens", {"<unk>", "<s>", "</s>"});
    g.f32s("tokenizer.ggml.scores", {0, 0});
    expect_defect(g, "scores has 2 entries for 3 tokens");
  }
  {
    Gguf g;
    g.str("tokenizer.ggml.model", "llama").strings("tokenizer.ggml.tokens", {"<unk>", "<s>", "</s>"});
    g.f32s("tokenizer.ggml.scores", {0, std::numeric_limits<float>::quiet_NaN(), 0});
    expect_defect(g, "scores[1] is NaN");
  }
  {
    Gguf g;
    g.str("tokenizer.ggml.model", "llama").strings("tokenizer.ggml.tokens", {"<unk>", "<s>", "</s>"});
    g.i32s("tokenizer.ggml.token_type", {2, 3, 3, 1});
    expect_defect(g, "token_type has 4 entries for 3 tokens");
  }
  {
    Gguf g;
    g.str("tokenizer.ggml.model", "llama").strings("tokenizer.ggml.tokens", {"<unk>", "<s>", "</s>"});
    g.i32s("tokenizer.ggml.token_type", {2, 3, 9});
    expect_defect(g, "token_type[2] is 9");
  }
  {
    Gguf g = spm_vocab();
    g.u32("tokenizer.ggml.eot_token_id", 100000);
    expect_defect(g, "'tokenizer.ggml.eot_token_id' is 100000, outside the vocabulary");
  }
  {
    Gguf g;  // the SentencePiece default BOS (1) does not exist in a one-token vocabulary
    g.str("tokenizer.ggml.model", "llama").strings("tokenizer.ggml.tokens", {"<unk>"});
    expect_defect(g, "a BOS token is to be added");
  }
  expect_defect(bpe_vocab("smollm", {"a b", "ab"}), "merges[1] 'ab' is not two parts");
  expect_defect(bpe_vocab("smollm", {"a b", " ab"}), "merges[1]");
  expect_defect(bpe_vocab("smollm", {"a "}), "merges[0]");
  expect_defect(bpe_vocab("no-such-pre"), "'no-such-pre' is not a supported pre-tokenizer");
  {
    Gguf g;
    g.str("tokenizer.ggml.model", "gpt2").str("tokenizer.ggml.pre", "smollm");
    g.strings("tokenizer.ggml.tokens", {"a", "b"});
    expect_defect(g, "tokenizer.ggml.merges");
  }
}

// A vocabulary no text encodes to is the model file's defect, found at load: before, every
// prompt encoded to nothing (or to <unk>) and the tool said "the prompt is empty".
TEST(TokenizerReject, VocabularyWithNoUsableToken) {
  const std::string want = "the vocabulary has no usable token";
  using namespace std::string_literals;
  const std::vector<std::vector<std::string>> bpe = {
      {"", "", "", ""},                                   // every token empty
      {"a\0"s, "b\0"s, "ab\0"s, "\xC4\xA0\0"s},     // every token with a trailing NUL
  };
  for (const auto& tokens : bpe) {
    Gguf g;
    g.str("tokenizer.ggml.model", "gpt2").str("tokenizer.ggml.pre", "smollm");
    g.strings("tokenizer.ggml.tokens", tokens).strings("tokenizer.ggml.merges", {"a b"});
    expect_defect(g, want);
  }
  // SentencePiece without byte tokens: every character falls back to <unk>.
  Gguf spm;
  spm.str("tokenizer.ggml.model", "llama");
  spm.strings("tokenizer.ggml.tokens", {"<unk>", "<s>", "</s>", "a\0"s, "\xE2\x96\x81\0"s});
  spm.i32s("tokenizer.ggml.token_type", {2, 3, 3, 1, 1});
  expect_defect(spm, want);
  // One usable token is enough (the probe is not a coverage rule).
  Gguf one;
  one.str("tokenizer.ggml.model", "gpt2").str("tokenizer.ggml.pre", "smollm");
  one.strings("tokenizer.ggml.tokens", {"", "x\0"s, "q"}).strings("tokenizer.ggml.merges", {"a b"});
  EXPECT_EQ(Tokenizer::from_gguf(one.parse())->encode("q", false), (Ids{2}));
}

// ---- Real models -----------------------------------------------------------------------------

// `env` names a variable that overrides the whole path; else the file is where scripts/setup links it.
std::string model_path(const char* env, const char* file) {
  if (const char* p = std::getenv(env)) return p;
  return sjkv_test::model_dir() + "/" + file;
}

struct GoldenCase {
  std::string text;
  bool add_special = false;
  Ids ids;
};

struct Golden {
  uint32_t n_vocab = 0;
  std::vector<GoldenCase> cases;
};

// Format (README.md beside the files): '#' comments, "n_vocab N", then one case per line:
// hex(text) TAB add_special(0/1) TAB ids (space separated) [TAB readable text].
Golden read_golden(const std::string& name) {
  Golden g;
  std::ifstream in(std::string(SJKV_GOLDEN_DIR) + "/tokenizer/" + name);
  EXPECT_TRUE(in) << "missing golden file " << name;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    if (line.compare(0, 8, "n_vocab ") == 0) {
      g.n_vocab = uint32_t(std::stoul(line.substr(8)));
      continue;
    }
    std::vector<std::string> col = tab_columns(line);
    if (col.size() < 3) col.resize(3);
    GoldenCase gc;
    gc.text = unhex(col[0]);
    gc.add_special = col[1] == "1";
    std::stringstream ids(col[2]);
    int32_t id;
    while (ids >> id) gc.ids.push_back(id);
    g.cases.push_back(std::move(gc));
  }
  return g;
}

bool valid_utf8(const std::string& s) {
  for (size_t i = 0; i < s.size();) {
    const auto b = uint8_t(s[i]);
    const size_t n = b < 0x80 ? 1 : (b >> 5) == 6 ? 2 : (b >> 4) == 14 ? 3 : (b >> 3) == 30 ? 4 : 0;
    if (n == 0 || i + n > s.size()) return false;
    for (size_t k = 1; k < n; ++k) {
      if ((uint8_t(s[i + k]) & 0xC0) != 0x80) return false;
    }
    i += n;
  }
  return true;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void check_real_model(const std::string& path, const std::string& golden_name) {
  if (::access(path.c_str(), R_OK) != 0) GTEST_SKIP() << "no model at " << path;
  const auto tok = Tokenizer::from_gguf(GgufFile::open(path));
  const Golden golden = read_golden(golden_name);
  ASSERT_EQ(tok->n_vocab(), golden.n_vocab) << path << " is not the model " << golden_name << " was made with";
  ASSERT_GE(golden.cases.size(), 20u);
  size_t round_trips = 0;
  for (const GoldenCase& c : golden.cases) {
    EXPECT_EQ(tok->encode(c.text, c.add_special), c.ids) << "text: '" << c.text << "'";
    if (valid_utf8(c.text)) {
      EXPECT_EQ(tok->decode(tok->encode(c.text, c.add_special)), c.text);
      ++round_trips;
    }
  }
  EXPECT_GE(round_trips, golden.cases.size() - 2);
  // Round trip over longer, varied text: the project's own documentation.
  for (const char* doc : {"/README.md", "/docs/FORMAT.md", "/docs/CODEC.md"}) {
    const std::string text = read_file(std::string(SJKV_SOURCE_DIR) + doc);
    if (text.empty()) continue;
    const Ids ids = tok->encode(text, false);
    EXPECT_LT(ids.size(), text.size());
    EXPECT_EQ(tok->decode(ids), text) << doc;
  }
}

TEST(TokenizerRealModel, Gemma3MatchesLlamaCpp) {
  const std::string path = model_path("SJKV_GEMMA3_GGUF", "default.gguf");
  check_real_model(path, "gemma3-270m.txt");
  if (::access(path.c_str(), R_OK) != 0) return;
  const auto tok = Tokenizer::from_gguf(GgufFile::open(path));
  EXPECT_EQ(tok->bos(), 2);
  EXPECT_EQ(tok->eos(), 1);
  EXPECT_TRUE(tok->is_eog(1));
  EXPECT_TRUE(tok->is_eog(106));  // <end_of_turn>
  EXPECT_EQ(tok->piece(106), "");
  // Gemma's chat markers as llama.cpp's parse_special tokenizes them: <start_of_turn> 105.
  const Ids chat = tok->encode_special("<start_of_turn>user\nhi<end_of_turn>\n<start_of_turn>model\n", true);
  ASSERT_EQ(chat.size(), 10u);
  EXPECT_EQ(chat[0], 2);
  EXPECT_EQ(chat[1], 105);
  EXPECT_EQ(chat[5], 106);
  EXPECT_EQ(chat[7], 105);
  EXPECT_EQ(tok->encode("<start_of_turn>", false).size() > 1, true);
}

// The random-weight test models' small vocabularies (scripts/make-test-models.py): BPE with
// the qwen2, qwen35 and llama-bpe pre-tokenizers, SentencePiece as Mistral, Gemma 2 and Phi-3
// declare it. (qwen35's merges are ASCII-only like qwen2's, so its golden ids equal qwen2's even
// on text with marks; MarksVocabularyMatchesLlamaCpp is the test that tells them apart.)
class TokenizerTestModel : public ::testing::TestWithParam<const char*> {};
TEST_P(TokenizerTestModel, MatchesLlamaCpp) {
  const std::string name = GetParam();
  const std::string path = std::string(SJKV_TEST_MODELS_DIR) + "/" + name + ".gguf";
  ASSERT_EQ(::access(path.c_str(), R_OK), 0) << "no test model at " << path << " (the arch_test_models test makes it)";
  check_real_model(path, "arch-" + name + ".txt");
}
INSTANTIATE_TEST_SUITE_P(Arch, TokenizerTestModel,
                         ::testing::Values("qwen2", "qwen3", "qwen35", "llama3", "mistral", "gemma2",
                                           "phi3", "gemma4-tok", "gptoss-tok"));

// Gemma 4's kind (tokenizer.ggml.model "gemma4", BPE over raw UTF-8): BOS 2 always, newline
// runs whole, spaces as U+2581 in the pieces, byte tokens for what no merge covers.
TEST(TokenizerGemma4, KindAsLlamaCpp) {
  const std::string path = std::string(SJKV_TEST_MODELS_DIR) + "/gemma4-tok.gguf";
  ASSERT_EQ(::access(path.c_str(), R_OK), 0) << "no test model at " << path << " (the arch_test_models test makes it)";
  const auto tok = Tokenizer::from_gguf(GgufFile::open(path));
  EXPECT_EQ(tok->bos(), 2);
  EXPECT_EQ(tok->eos(), 1);
  const Ids nl = tok->encode("\n\n", true);
  ASSERT_EQ(nl.size(), 2u);
  EXPECT_EQ(nl[0], 2);
  EXPECT_EQ(tok->piece(nl[1]), "\n\n");
  const Ids e = tok->encode("\xC3\xA9", false);  // no merge: its two byte tokens
  ASSERT_EQ(e.size(), 2u);
  EXPECT_EQ(tok->decode(e), "\xC3\xA9");
  EXPECT_EQ(tok->decode(tok->encode(" a  b", false)), " a  b");
}

// Gemma 4's chat markers (control tokens 589-599 of the test vocabulary) as llama.cpp's
// parse_special tokenizes them, and its end-of-generation set: <turn|> and <|tool_response>
// (llama.cpp's auto-detected names) besides <eos>. Ids from llama-cpp-python 0.3.36:
// Llama(vocab_only=True).tokenize(text, add_bos=True, special=True) and llama_vocab_is_eog.
TEST(TokenizerGemma4, ChatMarkersAsLlamaCpp) {
  const std::string path = std::string(SJKV_TEST_MODELS_DIR) + "/gemma4-tok.gguf";
  ASSERT_EQ(::access(path.c_str(), R_OK), 0) << "no test model at " << path << " (the arch_test_models test makes it)";
  const auto tok = Tokenizer::from_gguf(GgufFile::open(path));
  const std::string chat =
      "<|turn>user\nhi<turn|>\n<|turn>model\n<|channel>thought\n<channel|>ok<|tool_call>call:f{a:<|\"|>x<|\"|>}"
      "<tool_call|><|tool_response>";
  const Ids want = {2,   589, 320, 318, 335, 4,   307, 308, 590, 4,   589, 496, 4,   597, 332, 355, 387, 319,
                    4,   598, 314, 310, 593, 302, 405, 283, 305, 326, 300, 283, 599, 323, 599, 327, 594, 595};
  EXPECT_EQ(tok->encode_special(chat, true), want);
  EXPECT_EQ(tok->encode("<|turn>", false).size(), 5u);  // without parse_special: text
  for (int32_t id = 589; id < 600; ++id) EXPECT_EQ(tok->is_eog(id), id == 590 || id == 595) << id;
  for (int32_t id = 0; id < 4; ++id) EXPECT_EQ(tok->is_eog(id), id == 1) << id;
}

// gpt-oss's tokenizer (gptoss-tok: pre-tokenizer gpt-4o, the harmony markers 791-799) on a
// harmony conversation: llama.cpp matches <|start|> <|message|> <|channel|> <|constrain|> and
// <|end|> as user-defined tokens even without parse_special, <|return|> and <|call|> only with
// it; its end-of-generation set is <|endoftext|> <|return|> <|call|>, not <|end|>. Ids from
// llama-cpp-python 0.3.36: Llama(vocab_only=True).tokenize(text, add_bos=False, special=True /
// False) and llama_vocab_is_eog.
TEST(TokenizerGptOss, HarmonyAsLlamaCpp) {
  const std::string path = std::string(SJKV_TEST_MODELS_DIR) + "/gptoss-tok.gguf";
  ASSERT_EQ(::access(path.c_str(), R_OK), 0) << "no test model at " << path << " (the arch_test_models test makes it)";
  const auto tok = Tokenizer::from_gguf(GgufFile::open(path));
  EXPECT_EQ(tok->bos(), 791);
  EXPECT_EQ(tok->eos(), 793);
  // The user's message holds what GPT-4o's expression cuts apart and Llama 3's does not.
  const std::string chat =
      "<|start|>system<|message|>You are ChatGPT.<|end|><|start|>user<|message|>What's 2+2? getHTTPResponse, CamelCase, "
      "XMLHttpRequest; DON'T // 2025-12-05\n/\xC3\x89" "COLE<|end|><|start|>assistant<|channel|>analysis<|message|>SIMPLE "
      "sum.<|end|><|start|>assistant<|channel|>final<|message|>4<|return|><|start|>assistant "
      "to=f<|constrain|>json<|message|>{}<|call|>";
  const Ids head = {796, 82, 88, 276, 571, 798, 56, 289, 359, 220, 34, 395, 38, 47, 51, 13, 797, 796,
                    602, 262, 798, 54, 395, 510, 220, 17, 10, 17, 30, 481, 439, 11, 220, 776, 433, 11,
                    220, 441, 39, 599, 49, 68, 376, 371, 26, 220, 781, 501, 14, 220, 429, 20, 12, 428,
                    12, 749, 198, 14, 127, 231, 34, 46, 43, 36, 797, 796, 558, 795, 298, 266, 88, 82,
                    587, 798, 50, 40, 44, 47, 43, 36, 696, 13, 797, 796, 558, 795, 69, 264, 266, 798,
                    19};
  Ids special = head;
  for (int32_t id : {793, 796, 558, 286, 28, 69, 794, 73, 82, 271, 798, 90, 92, 799}) special.push_back(id);
  Ids plain = head;
  for (int32_t id : {300, 469, 302, 796, 558, 286, 28, 69, 794, 73, 82, 271, 798, 90, 92, 300, 66, 366, 302}) {
    plain.push_back(id);
  }
  EXPECT_EQ(tok->encode_special(chat, false), special);
  EXPECT_EQ(tok->encode(chat, false), plain);
  for (int32_t id = 791; id < 800; ++id) EXPECT_EQ(tok->is_eog(id), id == 792 || id == 793 || id == 799) << id;
  EXPECT_EQ(tok->piece(797), "<|end|>");
  EXPECT_EQ(tok->piece(796), "<|start|>");
  EXPECT_EQ(tok->piece(793), "");
}

TEST(TokenizerRealModel, SmolLM2MatchesLlamaCpp) {
  const std::string path = model_path("SJKV_SMOLLM2_GGUF", "smollm2.gguf");
  check_real_model(path, "smollm2-135m.txt");
}

}  // namespace
