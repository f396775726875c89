#include "tokenizer_pretok.h"

#include "tokenizer_unicode.h"

namespace sjkv {
namespace replay {

using unicode::CharClass;

bool pre_tokenizer_from_name(std::string_view pre, PreTokenizer* out, bool* ignore_merges) {
  // Names and flags as llama.cpp's llama_vocab::impl::load maps them (src/llama-vocab.cpp).
  struct Entry {
    const char* name;
    PreTokenizer kind;
    bool ignore_merges;
  };
  static const Entry kNames[] = {
      {"gpt-2", PreTokenizer::gpt2, false},      {"phi-2", PreTokenizer::gpt2, false},
      {"mpt", PreTokenizer::gpt2, false},        {"olmo", PreTokenizer::gpt2, false},
      {"smollm", PreTokenizer::smollm, false},   {"starcoder", PreTokenizer::smollm, false},
      {"refact", PreTokenizer::smollm, false},   {"command-r", PreTokenizer::smollm, false},
      {"llama3", PreTokenizer::llama3, true},    {"llama-v3", PreTokenizer::llama3, true},
      {"llama-bpe", PreTokenizer::llama3, true}, {"falcon3", PreTokenizer::llama3, true},
      {"qwen2", PreTokenizer::qwen2, false},     {"stablelm2", PreTokenizer::qwen2, false},
      {"deepseek-r1-qwen", PreTokenizer::qwen2, false}, {"qwen35", PreTokenizer::qwen35, false},
      {"gpt-4o", PreTokenizer::gpt4o, false},    {"llama4", PreTokenizer::gpt4o, false},
      {"kanana2", PreTokenizer::gpt4o, false},   {"talkie", PreTokenizer::gpt4o, false},
  };
  for (const auto& e : kNames) {
    if (pre == e.name) {
      *out = e.kind;
      *ignore_merges = e.ignore_merges;
      return true;
    }
  }
  return false;
}

namespace {

// Character tests inside one segment [b, e) of code points; outside it nothing matches
// (the lookahead of \s+(?!\S) and the optional leading space stop at segment ends).
struct Segment {
  const std::vector<uint32_t>& cps;
  const std::vector<CharClass>& cls;
  size_t b, e;
  bool in(size_t p) const { return p >= b && p < e; }
  bool letter(size_t p) const { return in(p) && cls[p] == CharClass::letter; }
  bool number(size_t p) const { return in(p) && cls[p] == CharClass::number; }
  bool space(size_t p) const { return in(p) && unicode::is_white_space(cps[p]); }
  // [^\s\p{L}\p{N}] ([^\s\p{L}\p{M}\p{N}] for Qwen 3.5, whose marks are letters in `cls`)
  bool other(size_t p) const { return in(p) && cls[p] == CharClass::other && !unicode::is_white_space(cps[p]); }
  uint32_t at(size_t p) const { return in(p) ? cps[p] : 0xFFFFFFFFu; }
  bool newline(size_t p) const { return at(p) == '\r' || at(p) == '\n'; }
};

uint32_t ascii_lower(uint32_t c) { return (c >= 'A' && c <= 'Z') ? c + 32 : c; }

// Length of an English contraction ('s 't 're 've 'm 'll 'd) at p, or 0.
size_t contraction(const Segment& s, size_t p, bool any_case) {
  if (s.at(p) != '\'' || !s.in(p + 1)) return 0;
  auto low = [&](size_t q) { return any_case ? ascii_lower(s.at(q)) : s.at(q); };
  const uint32_t c1 = low(p + 1);
  if (c1 == 's' || c1 == 't' || c1 == 'm' || c1 == 'd') return 2;
  if (!s.in(p + 2)) return 0;
  const uint32_t c2 = low(p + 2);
  if ((c1 == 'r' && c2 == 'e') || (c1 == 'v' && c2 == 'e') || (c1 == 'l' && c2 == 'l')) return 3;
  return 0;
}

// After a run of n white-space characters at p: \s+(?!\S) leaves the last one to prefix the
// next word when a character follows inside the segment; otherwise the run is one word.
size_t white_space_word(const Segment& s, size_t p, size_t n) {
  if (n > 1 && s.in(p + n)) return n - 1;
  return n > 0 ? n : 1;
}

void split_gpt2(const Segment& s, std::vector<size_t>& lens) {
  size_t p = s.b;
  while (p < s.e) {
    size_t q = p;
    if (size_t c = contraction(s, p, false)) {
      q = p + c;
    } else {
      // ' ?' before a letter, number or other run.
      const size_t r = s.at(p) == ' ' ? p + 1 : p;
      if (s.letter(r)) {
        for (q = r; s.letter(q); ++q) {}
      } else if (s.number(r)) {
        for (q = r; s.number(q); ++q) {}
      } else if (s.other(r)) {
        for (q = r; s.other(q); ++q) {}
      } else {
        size_t n = 0;
        while (s.space(p + n)) ++n;
        q = p + white_space_word(s, p, n);
      }
    }
    lens.push_back(q - p);
    p = q;
  }
}

void split_llama3(const Segment& s, size_t max_digits, std::vector<size_t>& lens) {
  size_t p = s.b;
  auto emit = [&](size_t q) {
    lens.push_back(q - p);
    p = q;
  };
  while (p < s.e) {
    if (size_t c = contraction(s, p, true)) {
      emit(p + c);
      continue;
    }
    // [^\r\n\p{L}\p{N}]?\p{L}+
    if (!s.newline(p) && !s.number(p) && (s.letter(p) || s.letter(p + 1))) {
      size_t q = p + 1;
      while (s.letter(q)) ++q;
      emit(q);
      continue;
    }
    // \p{N}{1,max}
    if (s.number(p)) {
      size_t q = p;
      while (s.number(q) && q - p < max_digits) ++q;
      emit(q);
      continue;
    }
    //  ?[^\s\p{L}\p{N}]+[\r\n]*  (a lone space at the segment end also lands here)
    const size_t r = s.at(p) == ' ' ? p + 1 : p;
    if (s.other(r) || (r != p && !s.in(r))) {
      size_t q = r;
      while (s.other(q)) ++q;
      while (s.newline(q)) ++q;
      emit(q);
      continue;
    }
    // \s*[\r\n]+ up to the last newline of the white-space run, else \s+(?!\S) or \s+
    size_t n = 0, after_newline = 0;
    while (s.space(p + n)) {
      if (s.newline(p + n)) after_newline = p + n + 1;
      ++n;
    }
    if (after_newline > 0) {
      emit(after_newline);
    } else {
      emit(p + white_space_word(s, p, n));
    }
  }
}

// GPT-4o's expression with llama.cpp's classes (see PreTokenizer::gpt4o): "upper" is an ASCII
// capital or any non-ASCII letter, "lower" an ASCII small letter or any non-ASCII letter.
// std::regex tries the alternatives in order and backtracks greedy runs one character at a
// time; the cuts below are where that search first succeeds.
void split_gpt4o(const Segment& s, std::vector<size_t>& lens) {
  auto ascii_upper = [&](size_t q) { return s.at(q) >= 'A' && s.at(q) <= 'Z'; };
  auto upper = [&](size_t q) { return s.letter(q) && !(s.at(q) >= 'a' && s.at(q) <= 'z'); };
  auto lower = [&](size_t q) { return s.letter(q) && !ascii_upper(q); };
  size_t p = s.b;
  auto emit = [&](size_t q) {
    lens.push_back(q - p);
    p = q;
  };
  while (p < s.e) {
    // [^\r\n\p{L}\p{N}]? before the letters: any character that is in the segment and
    // neither a newline, a letter nor a number (white space included).
    const bool lead = s.in(p) && !s.newline(p) && !s.letter(p) && !s.number(p);
    const size_t q = lead ? p + 1 : p;
    if (s.letter(q)) {
      size_t r = q;  // upper* / upper+
      while (upper(r)) ++r;
      size_t end;
      if (lower(r)) {
        // upper* then lower+ from r (an ASCII small letter: non-ASCII ones are in the run)
        end = r;
        while (lower(end)) ++end;
      } else {
        // The run is followed by no letter. The first alternative gives back characters until
        // one that is also "lower" ends the word: the last non-ASCII letter of the run. With
        // none (ASCII capitals only) the second alternative takes the whole run.
        end = r;
        for (size_t k = r; k > q; --k) {
          if (!ascii_upper(k - 1)) {
            end = k;
            break;
          }
        }
      }
      emit(end + contraction(s, end, true));
      continue;
    }
    // \p{N}{1,3}
    if (s.number(p)) {
      size_t e = p;
      while (s.number(e) && e - p < 3) ++e;
      emit(e);
      continue;
    }
    //  ?[^\s\p{L}\p{N}]+[\r\n/]*
    const size_t r = s.at(p) == ' ' && s.other(p + 1) ? p + 1 : p;
    if (s.other(r)) {
      size_t e = r;
      while (s.other(e)) ++e;
      while (s.newline(e) || s.at(e) == '/') ++e;
      emit(e);
      continue;
    }
    // \s*[\r\n]+ up to the last newline of the white-space run, else \s+(?!\S) or \s+
    size_t n = 0, after_newline = 0;
    while (s.space(p + n)) {
      if (s.newline(p + n)) after_newline = p + n + 1;
      ++n;
    }
    emit(after_newline > 0 ? after_newline : p + white_space_word(s, p, n));
  }
}

}  // namespace

std::vector<std::string> pre_tokenize(PreTokenizer kind, std::string_view text) {
  const std::vector<uint32_t> cps = unicode::decode_utf8(text);
  // Qwen 3.5 reads a combining mark as a letter; in every class test of its expression
  // (the letter run, the punctuation run's complement) \p{M} stands beside \p{L}, and a mark
  // taken by [^\r\n\p{L}\p{N}]? before a run makes the same cut as the run starting at it.
  // The other expressions name no marks, so for them a mark is punctuation-like (other).
  const CharClass mark_as = kind == PreTokenizer::qwen35 ? CharClass::letter : CharClass::other;
  std::vector<CharClass> cls(cps.size());
  for (size_t i = 0; i < cps.size(); ++i) {
    cls[i] = unicode::char_class(cps[i]);
    if (cls[i] == CharClass::mark) cls[i] = mark_as;
  }

  // SmolLM first isolates every number code point; the other expressions see the whole text.
  std::vector<size_t> segments;
  if (kind == PreTokenizer::smollm) {
    size_t start = 0;
    for (size_t i = 0; i < cps.size(); ++i) {
      if (cls[i] != CharClass::number) continue;
      if (i > start) segments.push_back(i - start);
      segments.push_back(1);
      start = i + 1;
    }
    if (cps.size() > start) segments.push_back(cps.size() - start);
  } else if (!cps.empty()) {
    segments.push_back(cps.size());
  }

  std::vector<size_t> lens;
  size_t b = 0;
  for (size_t n : segments) {
    const Segment s{cps, cls, b, b + n};
    switch (kind) {
      case PreTokenizer::gpt2:
      case PreTokenizer::smollm: split_gpt2(s, lens); break;
      case PreTokenizer::llama3: split_llama3(s, 3, lens); break;
      case PreTokenizer::qwen2:
      case PreTokenizer::qwen35: split_llama3(s, 1, lens); break;
      case PreTokenizer::gpt4o: split_gpt4o(s, lens); break;
    }
    b += n;
  }

  std::vector<std::string> words;
  words.reserve(lens.size());
  size_t p = 0;
  for (size_t n : lens) {
    std::string w;
    for (size_t i = p; i < p + n; ++i) unicode::append_utf8(w, cps[i]);
    words.push_back(std::move(w));
    p += n;
  }
  return words;
}

}  // namespace replay
}  // namespace sjkv
