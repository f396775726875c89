// Tokenizers built from a GGUF vocabulary. The algorithms follow llama.cpp's
// src/llama-vocab.cpp so that ids agree with it:
//   SentencePiece-style ("llama"): spaces become U+2581, optionally one is prepended; the text
//     is cut into UTF-8 characters and the adjacent pair whose concatenation is the
//     highest-scoring token is merged until no pair is a token (ties: leftmost pair); pieces
//     that are not tokens fall back to <0xNN> byte tokens.
//   Byte-level BPE ("gpt2"): the text is cut into words by the model's pre-tokenizer, each
//     byte mapped to a printable character (GPT-2's table), and within a word the adjacent
//     pair with the lowest merge rank is merged until none is listed (ties: leftmost).
//   Gemma 4 ("gemma4"): the same merges over raw UTF-8 characters, spaces as U+2581, the text
//     cut only into runs of newlines (one token when the vocabulary has the run) and runs of
//     anything else; pieces that are not tokens fall back to <0xNN> byte tokens; BOS always.
// Before either, user-defined tokens in the text are cut out and emitted as themselves
// (llama.cpp does this even when it is told not to parse special tokens; control tokens
// are never matched in the text here).
#include "sjkv/replay/tokenizer.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <queue>
#include <unordered_map>
#include <unordered_set>

#include "tokenizer_pretok.h"
#include "tokenizer_unicode.h"

namespace sjkv {
namespace replay {

namespace {

// The characters of a text as a doubly linked list of symbols, the starting point of both
// merge algorithms (a truncated UTF-8 sequence at the end is one symbol of what is left).
struct Sym {
  int prev, next;
  size_t off, n;
};

std::vector<Sym> utf8_symbols(const std::string& s) {
  std::vector<Sym> sym;
  for (size_t off = 0; off < s.size();) {
    const size_t n = std::min(unicode::utf8_len(uint8_t(s[off])), s.size() - off);
    const int i = int(sym.size());
    sym.push_back({i - 1, off + n == s.size() ? -1 : i + 1, off, n});
    off += n;
  }
  return sym;
}

// tokenizer.ggml.token_type values (llama.cpp's llama_token_type).
enum TokenType : uint8_t {
  kUndefined = 0, kNormal = 1, kUnknown = 2, kControl = 3, kUserDefined = 4, kUnused = 5, kByte = 6,
};

const char* const kSpace = "\xE2\x96\x81";  // U+2581, SentencePiece's visible space

struct Vocab {
  std::string file;
  std::vector<std::string> text;
  std::vector<float> score;
  std::vector<uint8_t> type;
  std::vector<bool> control;  // control-like: never matched in text, piece ""
  std::unordered_map<std::string, int32_t> id_of;
  int32_t bos = -1, eos = -1, unk = -1;
  bool add_bos = false, add_eos = false;
  std::vector<int32_t> user_defined;  // matched in text before tokenizing; longest first
  std::vector<int32_t> special;       // parse_special: user-defined and control tokens with a text; longest first
  std::unordered_set<int32_t> eog;

  int32_t find(const std::string& s) const {
    auto it = id_of.find(s);
    return it == id_of.end() ? -1 : it->second;
  }
  [[noreturn]] void fail(const std::string& defect) const { throw FileError(file, defect); }
};

// ---- Loading ---------------------------------------------------------------------------------

const GgufValue& array_of(const GgufFile& f, const char* key, GgufType want) {
  const GgufValue& v = f.get_array(key);
  if (v.type() != want) {
    throw FileError(f.path(), std::string("key '") + key + "' is an array of " + gguf_type_name(v.type()) +
                                  ", expected " + gguf_type_name(want));
  }
  return v;
}

// A token id key when present: FileError when it is not a valid id.
int32_t id_key(const GgufFile& f, const char* key, int32_t fallback, uint32_t n) {
  if (!f.has(key)) return fallback;
  const uint64_t id = f.get_uint(key);
  if (id >= n) {
    throw FileError(f.path(), std::string("key '") + key + "' is " + std::to_string(id) +
                                  ", outside the vocabulary of " + std::to_string(n) + " tokens");
  }
  return static_cast<int32_t>(id);
}

bool bool_key(const GgufFile& f, const char* key, bool fallback) {
  return f.has(key) ? f.get_bool(key) : fallback;
}

void load_common(const GgufFile& f, Vocab& v) {
  v.file = f.path();
  const GgufValue& tokens = array_of(f, "tokenizer.ggml.tokens", GgufType::string);
  if (tokens.count() == 0) v.fail("tokenizer.ggml.tokens is empty");
  if (tokens.count() > uint64_t(std::numeric_limits<int32_t>::max())) v.fail("tokenizer.ggml.tokens has too many entries");
  const auto n = static_cast<uint32_t>(tokens.count());
  v.text = tokens.strings();
  v.id_of.reserve(n);
  for (uint32_t i = 0; i < n; ++i) {
    // llama.cpp renames empty tokens so that they can never match.
    if (v.text[i].empty()) v.text[i] = "[EMPTY_" + std::to_string(i) + "]";
    auto ins = v.id_of.emplace(v.text[i], int32_t(i));
    if (!ins.second) {
      v.fail("tokenizer.ggml.tokens holds '" + v.text[i] + "' twice (ids " + std::to_string(ins.first->second) +
             " and " + std::to_string(i) + ")");
    }
  }

  v.score.assign(n, 0.0f);
  if (const GgufValue* s = f.find("tokenizer.ggml.scores")) {
    if (!s->is_array() || (s->type() != GgufType::f32 && s->type() != GgufType::i32)) {
      v.fail("tokenizer.ggml.scores is not an array of f32");
    }
    if (s->count() != n) {
      v.fail("tokenizer.ggml.scores has " + std::to_string(s->count()) + " entries for " + std::to_string(n) + " tokens");
    }
    for (uint32_t i = 0; i < n; ++i) {
      const float x = s->type() == GgufType::f32 ? s->f32(i) : float(s->i32(i));
      if (std::isnan(x)) v.fail("tokenizer.ggml.scores[" + std::to_string(i) + "] is NaN");
      v.score[i] = x;
    }
  }

  v.type.assign(n, kNormal);
  if (f.has("tokenizer.ggml.token_type")) {
    const GgufValue& t = array_of(f, "tokenizer.ggml.token_type", GgufType::i32);
    if (t.count() != n) {
      v.fail("tokenizer.ggml.token_type has " + std::to_string(t.count()) + " entries for " + std::to_string(n) + " tokens");
    }
    for (uint32_t i = 0; i < n; ++i) {
      const int32_t x = t.i32(i);
      if (x < kUndefined || x > kByte) {
        v.fail("tokenizer.ggml.token_type[" + std::to_string(i) + "] is " + std::to_string(x) + ", not a token type (0 to 6)");
      }
      v.type[i] = uint8_t(x);
    }
  }
  v.control.assign(n, false);
  for (uint32_t i = 0; i < n; ++i) v.control[i] = v.type[i] == kControl || v.type[i] == kUnknown;

  v.bos = id_key(f, "tokenizer.ggml.bos_token_id", v.bos < int32_t(n) ? v.bos : -1, n);
  v.eos = id_key(f, "tokenizer.ggml.eos_token_id", v.eos < int32_t(n) ? v.eos : -1, n);
  v.unk = id_key(f, "tokenizer.ggml.unknown_token_id", v.unk < int32_t(n) ? v.unk : -1, n);
  const int32_t eot = id_key(f, "tokenizer.ggml.eot_token_id", -1, n);
  const int32_t eom = id_key(f, "tokenizer.ggml.eom_token_id", -1, n);
  int32_t fim[6];
  const char* const fim_keys[6] = {"tokenizer.ggml.fim_pre_token_id", "tokenizer.ggml.fim_suf_token_id",
                                   "tokenizer.ggml.fim_mid_token_id", "tokenizer.ggml.fim_pad_token_id",
                                   "tokenizer.ggml.fim_rep_token_id", "tokenizer.ggml.fim_sep_token_id"};
  for (int k = 0; k < 6; ++k) fim[k] = id_key(f, fim_keys[k], -1, n);
  for (const char* key : {"tokenizer.ggml.padding_token_id", "tokenizer.ggml.seperator_token_id"}) {
    id_key(f, key, -1, n);  // validated only
  }

  v.add_bos = bool_key(f, "tokenizer.ggml.add_bos_token", v.add_bos);
  v.add_eos = bool_key(f, "tokenizer.ggml.add_eos_token", v.add_eos);
  if (v.add_bos && v.bos < 0) v.fail("a BOS token is to be added (tokenizer.ggml.add_bos_token or the default) but the vocabulary has none");
  if (v.add_eos && v.eos < 0) v.fail("tokenizer.ggml.add_eos_token is set but the vocabulary has no EOS token");

  // Token texts llama.cpp treats as control and end-of-generation whatever their type
  // (llama_vocab::impl::load, "auto-detect special tokens by text").
  static const char* const kEog[] = {
      "<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<|flush|>", "<|calls|>",
      "<end_of_turn>", "<|endoftext|>", "</s>", "<|eom_id|>", "<EOT>", "_<EOT>", "[EOT]", "[EOS]",
      "<|end_of_text|>", "<end_of_utterance>", "<eos>", "<turn|>", "<|tool_response>",
      "<\xEF\xBD\x9C" "end\xE2\x96\x81" "of\xE2\x96\x81" "sentence\xEF\xBD\x9C>", "[e~["};
  // FIM tokens found by text when their key is absent: pre, suf, mid, pad, rep, sep.
  static const std::vector<std::vector<const char*>> kFim = {
      {"<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>", "<\xEF\xBD\x9C" "fim\xE2\x96\x81" "begin\xEF\xBD\x9C>", "<PRE>",
       "\xE2\x96\x81<PRE>", "<|code_prefix|>", "<|prefix|>"},
      {"<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>", "<\xEF\xBD\x9C" "fim\xE2\x96\x81" "hole\xEF\xBD\x9C>", "<SUF>",
       "\xE2\x96\x81<SUF>", "<|code_suffix|>", "<|suffix|>"},
      {"<|fim_middle|>", "<fim-middle>", "<fim_middle>", "<\xEF\xBD\x9C" "fim\xE2\x96\x81" "end\xEF\xBD\x9C>", "<MID>",
       "\xE2\x96\x81<MID>", "<|code_middle|>", "<|middle|>"},
      {"<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]"},
      {"<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>"},
      {"<|file_sep|>"},
  };
  for (int k = 0; k < 6; ++k) {
    if (fim[k] >= 0) continue;
    int32_t best = -1;  // llama.cpp takes whichever its hash map yields first; we take the lowest id
    for (const char* name : kFim[size_t(k)]) {
      const int32_t id = v.find(name);
      if (id >= 0 && (best < 0 || id < best)) best = id;
    }
    fim[k] = best;
    if (best >= 0) v.control[size_t(best)] = true;
  }
  for (int k = 3; k < 6; ++k) {
    if (fim[k] >= 0) v.eog.insert(fim[k]);
  }
  for (const char* name : kEog) {
    const int32_t id = v.find(name);
    if (id < 0) continue;
    v.eog.insert(id);
    v.control[size_t(id)] = true;
  }
  // gpt-oss's harmony markers are always user-defined (matched in text, rendered as text),
  // whatever their type in the file.
  for (const char* name : {"<|channel|>", "<|message|>", "<|start|>", "<|constrain|>"}) {
    const int32_t id = v.find(name);
    if (id < 0) continue;
    v.type[size_t(id)] = kUserDefined;
    v.control[size_t(id)] = false;
  }
  // Gemma 4 and PLaMo 2 have an ordinary "</s>".
  if (v.find("<|tool_response>") >= 0 || v.find("<|plamo:eos|>") >= 0) {
    const int32_t s = v.find("</s>");
    if (s >= 0 && s != v.eos && s != eot && s != eom) {
      v.eog.erase(s);
      v.control[size_t(s)] = false;
    }
  }
  for (int32_t id : {v.eos, eot, eom}) {
    if (id >= 0) v.eog.insert(id);
  }
  // o200k_harmony (gpt-oss) and Solar Open end a message with <|end|> and a turn with <|return|>
  // or <|call|> (<|flush|> or <|calls|>): llama.cpp drops <|end|> from the end-of-generation
  // set, and makes it user-defined, when the set also holds <|return|> and <|call|> (or
  // <|calls|>), or <|call|> (or <|calls|>) and <|flush|>.
  {
    auto in_eog = [&](const char* name) {
      const int32_t id = v.find(name);
      return id >= 0 && v.eog.count(id) != 0;
    };
    const int32_t end = v.find("<|end|>");
    const bool call = in_eog("<|call|>") || in_eog("<|calls|>");
    if (end >= 0 && v.eog.count(end) != 0 && call && (in_eog("<|return|>") || in_eog("<|flush|>"))) {
      v.eog.erase(end);
      v.type[size_t(end)] = kUserDefined;
      v.control[size_t(end)] = false;
    }
  }

  for (uint32_t i = 0; i < n; ++i) {
    if (v.type[i] == kUserDefined && !v.control[i]) v.user_defined.push_back(int32_t(i));
  }
  std::stable_sort(v.user_defined.begin(), v.user_defined.end(),
                   [&](int32_t a, int32_t b) { return v.text[size_t(a)].size() > v.text[size_t(b)].size(); });
  for (uint32_t i = 0; i < n; ++i) {
    const bool ctrl = v.type[i] == kControl || v.control[i];
    if ((v.type[i] == kUserDefined || ctrl) && !v.text[i].empty() && v.type[i] != kUnknown) v.special.push_back(int32_t(i));
  }
  std::stable_sort(v.special.begin(), v.special.end(),
                   [&](int32_t a, int32_t b) { return v.text[size_t(a)].size() > v.text[size_t(b)].size(); });
}

// ---- Shared behaviour ------------------------------------------------------------------------

class VocabTokenizer : public Tokenizer {
 public:
  explicit VocabTokenizer(Vocab v) : v_(std::move(v)) {}

  std::vector<int32_t> encode(std::string_view text, bool add_special) const override {
    return encode_with(text, add_special, v_.user_defined);
  }
  std::vector<int32_t> encode_special(std::string_view text, bool add_special) const override {
    return encode_with(text, add_special, v_.special);
  }
  uint32_t n_vocab() const override { return uint32_t(v_.text.size()); }
  int32_t bos() const override { return v_.bos; }
  int32_t eos() const override { return v_.eos; }
  bool is_eog(int32_t id) const override { return v_.eog.count(id) != 0; }

  // decode() drops the space the encoder put before the first text fragment.
  virtual bool strips_space_prefix() const { return false; }

  // A vocabulary in which no text encodes to a token (every token empty, or each holding a
  // byte the encoder never produces, such as a trailing NUL) would have every prompt encode to
  // nothing or to <unk>: refused at load, naming the file, not blamed on the prompt. Every
  // vocabulary llama.cpp loads covers printable ASCII (byte-level BPE holds every byte,
  // SentencePiece falls back to byte tokens), so those characters are the probe.
  void check_usable() const {
    std::vector<int32_t> ids;
    for (char c = ' '; c <= '~'; ++c) {
      ids.clear();
      encode_text(std::string_view(&c, 1), v_.user_defined, ids);
      for (int32_t id : ids)
        if (id != v_.unk && !v_.control[size_t(id)]) return;
    }
    v_.fail("the vocabulary has no usable token (no printable ASCII character encodes to a token other than <unk>)");
  }

 protected:
  // A run of text between user-defined tokens (or the whole text).
  struct Fragment {
    int32_t token;  // -1: text
    size_t offset, length;
  };
  virtual void encode_text(std::string_view text, const std::vector<int32_t>& matched, std::vector<int32_t>& out) const = 0;

  // The text cut at every occurrence of a matched token (user-defined ones, and control ones
  // under encode_special), longest tokens first.
  std::vector<Fragment> fragments(std::string_view text, const std::vector<int32_t>& matched) const {
    std::vector<Fragment> frags;
    if (text.empty()) return frags;
    frags.push_back({-1, 0, text.size()});
    std::vector<Fragment> next;
    for (int32_t id : matched) {
      const std::string& tok = v_.text[size_t(id)];
      next.clear();
      for (const Fragment& fr : frags) {
        if (fr.token >= 0) {
          next.push_back(fr);
          continue;
        }
        size_t pos = fr.offset;
        const size_t end = fr.offset + fr.length;
        const std::string_view window = text.substr(0, end);
        for (;;) {
          const size_t m = window.find(tok, pos);
          if (m == std::string_view::npos) break;
          if (m > pos) next.push_back({-1, pos, m - pos});
          next.push_back({id, m, tok.size()});
          pos = m + tok.size();
        }
        if (pos < end) next.push_back({-1, pos, end - pos});
      }
      frags.swap(next);
    }
    return frags;
  }

  std::vector<int32_t> encode_with(std::string_view text, bool add_special, const std::vector<int32_t>& matched) const {
    std::vector<int32_t> out;
    if (add_special && v_.add_bos) out.push_back(v_.bos);
    encode_text(text, matched, out);
    if (add_special && v_.add_eos) out.push_back(v_.eos);
    return out;
  }

  // The piece of a token that is not a normal one (true), as llama.cpp's token_to_piece
  // without special tokens: control "", user-defined its text, byte its byte, others "".
  bool non_normal_piece(int32_t id, std::string* out) const {
    const uint8_t t = v_.type[size_t(id)];
    if (v_.control[size_t(id)]) return true;
    if (t == kUserDefined) {
      *out = v_.text[size_t(id)];
      return true;
    }
    if (t == kByte) {
      *out = std::string(1, char(byte_value(id)));
      return true;
    }
    return t != kNormal;
  }

  int byte_value(int32_t id) const {
    const std::string& s = v_.text[size_t(id)];
    if (s.size() == 6 && s.compare(0, 3, "<0x") == 0 && s[5] == '>') {
      return int(std::strtol(s.substr(3, 2).c_str(), nullptr, 16));
    }
    return 0;
  }

  Vocab v_;
};

// ---- SentencePiece-style ---------------------------------------------------------------------

class SpmTokenizer final : public VocabTokenizer {
 public:
  SpmTokenizer(Vocab v, bool add_space_prefix) : VocabTokenizer(std::move(v)), add_space_prefix_(add_space_prefix) {
    for (int b = 0; b < 256; ++b) {
      static const char* hex = "0123456789ABCDEF";
      const char name[7] = {'<', '0', 'x', hex[b >> 4], hex[b & 15], '>', 0};
      int32_t id = v_.find(name);
      if (id < 0) id = v_.find(std::string(1, char(b)));
      byte_token_[size_t(b)] = id;
    }
  }

  std::string piece(int32_t id) const override {
    if (id < 0 || uint32_t(id) >= n_vocab()) return {};
    std::string out;
    if (non_normal_piece(id, &out)) return out;
    const std::string& t = v_.text[size_t(id)];
    for (size_t i = 0; i < t.size();) {
      if (t.compare(i, 3, kSpace) == 0) {
        out += ' ';
        i += 3;
      } else {
        out += t[i++];
      }
    }
    return out;
  }
  bool strips_space_prefix() const override { return add_space_prefix_; }

 private:
  void encode_text(std::string_view text, const std::vector<int32_t>& matched, std::vector<int32_t>& out) const override {
    bool after_special = true;  // the first fragment counts as following a special token
    for (const Fragment& fr : fragments(text, matched)) {
      if (fr.token >= 0) {
        out.push_back(fr.token);
        after_special = true;
        continue;
      }
      std::string s;
      if (add_space_prefix_ && after_special) s = kSpace;
      for (char c : text.substr(fr.offset, fr.length)) {
        if (c == ' ') {
          s += kSpace;
        } else {
          s += c;
        }
      }
      merge(s, out);
      after_special = false;
    }
  }

  void merge(const std::string& s, std::vector<int32_t>& out) const {
    std::vector<Sym> sym = utf8_symbols(s);
    if (sym.empty()) return;

    struct Pair {
      int left, right;
      float score;
      size_t size;
    };
    // Highest score first; among equal scores the leftmost pair.
    auto lower = [](const Pair& a, const Pair& b) { return a.score < b.score || (a.score == b.score && a.left > b.left); };
    std::priority_queue<Pair, std::vector<Pair>, decltype(lower)> queue(lower);
    auto consider = [&](int l, int r) {
      if (l < 0 || r < 0) return;
      const size_t size = sym[size_t(l)].n + sym[size_t(r)].n;
      const int32_t id = v_.find(s.substr(sym[size_t(l)].off, size));
      if (id < 0) return;
      queue.push({l, r, v_.score[size_t(id)], size});
    };
    for (int i = 1; i < int(sym.size()); ++i) consider(i - 1, i);

    while (!queue.empty()) {
      const Pair p = queue.top();
      queue.pop();
      Sym& l = sym[size_t(p.left)];
      Sym& r = sym[size_t(p.right)];
      if (l.n == 0 || r.n == 0 || l.n + r.n != p.size) continue;  // stale
      l.n += r.n;
      r.n = 0;
      l.next = r.next;
      if (r.next >= 0) sym[size_t(r.next)].prev = p.left;
      consider(l.prev, p.left);
      consider(p.left, l.next);
    }

    for (int i = 0; i != -1; i = sym[size_t(i)].next) {
      const std::string piece = s.substr(sym[size_t(i)].off, sym[size_t(i)].n);
      const int32_t id = v_.find(piece);
      if (id >= 0) {
        out.push_back(id);
        continue;
      }
      // Byte fallback; a vocabulary without the byte token gives <unk> (llama.cpp throws).
      for (char c : piece) {
        const int32_t b = byte_token_[uint8_t(c)];
        if (b >= 0) {
          out.push_back(b);
        } else if (v_.unk >= 0) {
          out.push_back(v_.unk);
        }
      }
    }
  }

  bool add_space_prefix_;
  int32_t byte_token_[256];
};

// ---- Byte-level BPE --------------------------------------------------------------------------

class BpeTokenizer final : public VocabTokenizer {
 public:
  // raw_utf8: Gemma 4's kind (see the top of the file) instead of byte-level BPE.
  BpeTokenizer(Vocab v, PreTokenizer pre, bool ignore_merges, std::unordered_map<std::string, int32_t> ranks,
               bool raw_utf8 = false)
      : VocabTokenizer(std::move(v)), pre_(pre), ignore_merges_(ignore_merges), ranks_(std::move(ranks)), raw_utf8_(raw_utf8) {}

  std::string piece(int32_t id) const override {
    if (id < 0 || uint32_t(id) >= n_vocab()) return {};
    std::string out;
    if (non_normal_piece(id, &out)) return out;
    if (raw_utf8_) return unescape_spaces(v_.text[size_t(id)]);
    for (uint32_t cp : unicode::decode_utf8(v_.text[size_t(id)])) {
      const int b = unicode::code_point_to_byte(cp);
      if (b >= 0) {
        out += char(b);
      } else {
        unicode::append_utf8(out, cp);  // not from the byte table: kept as written
      }
    }
    return out;
  }

 private:
  void encode_text(std::string_view text, const std::vector<int32_t>& matched, std::vector<int32_t>& out) const override {
    for (const Fragment& fr : fragments(text, matched)) {
      if (fr.token >= 0) {
        out.push_back(fr.token);
        continue;
      }
      if (raw_utf8_) {
        encode_raw(text.substr(fr.offset, fr.length), out);
        continue;
      }
      for (const std::string& word : pre_tokenize(pre_, text.substr(fr.offset, fr.length))) {
        std::string enc;
        for (char c : word) unicode::append_utf8(enc, unicode::byte_to_code_point(uint8_t(c)));
        merge(enc, out);
      }
    }
  }

  // Gemma 4: spaces escaped, the text cut into runs of newlines and runs of other characters
  // (merge lookups never see a newline); a newline run that is a token is emitted whole. The
  // split decodes UTF-8, so an invalid byte becomes U+FFFD there, as in llama.cpp.
  void encode_raw(std::string_view text, std::vector<int32_t>& out) const {
    std::string esc;
    for (uint32_t cp : unicode::decode_utf8(text)) {
      if (cp == ' ') esc += "\xE2\x96\x81";
      else unicode::append_utf8(esc, cp);
    }
    size_t i = 0;
    while (i < esc.size()) {
      const bool nl = esc[i] == '\n';
      size_t j = i;
      while (j < esc.size() && (esc[j] == '\n') == nl) ++j;
      const std::string word = esc.substr(i, j - i);
      const int32_t id = nl ? v_.find(word) : -1;
      if (id >= 0) out.push_back(id);
      else merge(word, out);
      i = j;
    }
  }

  static std::string unescape_spaces(const std::string& t) {
    std::string out;
    for (size_t i = 0; i < t.size();) {
      if (t.compare(i, 3, "\xE2\x96\x81") == 0) {
        out += ' ';
        i += 3;
      } else {
        out += t[i++];
      }
    }
    return out;
  }

  void merge(const std::string& w, std::vector<int32_t>& out) const {
    if (ignore_merges_) {
      const int32_t id = v_.find(w);
      if (id >= 0) {
        out.push_back(id);
        return;
      }
    }
    std::vector<Sym> sym = utf8_symbols(w);
    struct Pair {
      int left, right;
      int32_t rank;
      std::string text;
    };
    // Lowest rank first; among equal ranks the leftmost pair.
    auto later = [](const Pair& a, const Pair& b) { return a.rank > b.rank || (a.rank == b.rank && a.left > b.left); };
    std::priority_queue<Pair, std::vector<Pair>, decltype(later)> queue(later);
    auto consider = [&](int l, int r) {
      if (l < 0 || r < 0) return;
      const Sym& a = sym[size_t(l)];
      const Sym& b = sym[size_t(r)];
      // Merge lines are "left right"; byte-level symbols never hold a space.
      std::string key = w.substr(a.off, a.n);
      key += ' ';
      key.append(w, b.off, b.n);
      auto it = ranks_.find(key);
      if (it == ranks_.end()) return;
      queue.push({l, r, it->second, w.substr(a.off, a.n) + w.substr(b.off, b.n)});
    };
    for (int i = 1; i < int(sym.size()); ++i) consider(i - 1, i);

    while (!queue.empty()) {
      const Pair p = queue.top();
      queue.pop();
      Sym& l = sym[size_t(p.left)];
      Sym& r = sym[size_t(p.right)];
      if (l.n == 0 || r.n == 0) continue;
      if (l.n + r.n != p.text.size() || w.compare(l.off, l.n + r.n, p.text) != 0) continue;  // stale
      l.n += r.n;
      r.n = 0;
      l.next = r.next;
      if (r.next >= 0) sym[size_t(r.next)].prev = p.left;
      consider(l.prev, p.left);
      consider(p.left, l.next);
    }

    for (const Sym& s : sym) {
      if (s.n == 0) continue;
      const std::string piece = w.substr(s.off, s.n);
      const int32_t id = v_.find(piece);
      if (id >= 0) {
        out.push_back(id);
        continue;
      }
      // As llama.cpp: each byte of the encoded piece that is a one-character token (Gemma 4: a
      // <0xXX> token), others dropped.
      for (char c : piece) {
        static const char* hex = "0123456789ABCDEF";
        const uint8_t u = uint8_t(c);
        const int32_t b = raw_utf8_ ? v_.find(std::string{'<', '0', 'x', hex[u >> 4], hex[u & 15], '>'}) : v_.find(std::string(1, c));
        if (b >= 0) out.push_back(b);
      }
    }
  }

  PreTokenizer pre_;
  bool ignore_merges_;
  std::unordered_map<std::string, int32_t> ranks_;  // "left right" -> merge rank
  bool raw_utf8_;
};

std::unordered_map<std::string, int32_t> merge_ranks(const GgufFile& f) {
  const GgufValue& merges = array_of(f, "tokenizer.ggml.merges", GgufType::string);
  if (merges.count() > uint64_t(std::numeric_limits<int32_t>::max())) {
    throw FileError(f.path(), "tokenizer.ggml.merges has too many entries");
  }
  std::unordered_map<std::string, int32_t> ranks;
  ranks.reserve(merges.count());
  for (uint64_t i = 0; i < merges.count(); ++i) {
    const std::string& m = merges.str(i);
    const size_t sp = m.size() > 1 ? m.find(' ', 1) : std::string::npos;
    if (sp == std::string::npos || sp + 1 >= m.size()) {
      throw FileError(f.path(), "tokenizer.ggml.merges[" + std::to_string(i) + "] '" + m +
                                    "' is not two parts separated by a space");
    }
    ranks.emplace(m, int32_t(i));  // a repeated merge keeps its first rank
  }
  return ranks;
}

}  // namespace

std::unique_ptr<Tokenizer> Tokenizer::from_gguf(const GgufFile& f) {
  const std::string& model = f.get_string("tokenizer.ggml.model");
  Vocab v;
  if (model == "llama") {
    // llama.cpp's SentencePiece defaults: <unk> 0, <s> 1, </s> 2, BOS added, space prefix.
    v.unk = 0;
    v.bos = 1;
    v.eos = 2;
    v.add_bos = true;
    load_common(f, v);
    const bool prefix = bool_key(f, "tokenizer.ggml.add_space_prefix", true);
    auto tok = std::make_unique<SpmTokenizer>(std::move(v), prefix);
    tok->check_usable();
    return tok;
  }
  if (model == "gpt2") {
    if (!f.has("tokenizer.ggml.pre")) {
      throw FileError(f.path(), "tokenizer.ggml.pre is missing (llama.cpp's 'default' pre-tokenizer is not supported)");
    }
    const std::string& pre_name = f.get_string("tokenizer.ggml.pre");
    PreTokenizer pre{};
    bool ignore_merges = false;
    if (!pre_tokenizer_from_name(pre_name, &pre, &ignore_merges)) {
      throw FileError(f.path(), "tokenizer.ggml.pre '" + pre_name + "' is not a supported pre-tokenizer");
    }
    // llama.cpp's BPE defaults: BOS = EOS = 11 (GPT-2), BOS added only for the Llama 3 family.
    v.bos = 11;
    v.eos = 11;
    v.add_bos = pre == PreTokenizer::llama3;
    load_common(f, v);
    auto tok = std::make_unique<BpeTokenizer>(std::move(v), pre, ignore_merges, merge_ranks(f));
    tok->check_usable();
    return tok;
  }
  if (model == "gemma4") {
    // llama.cpp: no default special ids (the file's), BOS added even where the file says not.
    load_common(f, v);
    v.add_bos = true;
    if (v.bos < 0) v.fail("a BOS token is always added for tokenizer.ggml.model 'gemma4' but the vocabulary has none");
    auto tok = std::make_unique<BpeTokenizer>(std::move(v), PreTokenizer{}, false, merge_ranks(f), true);
    tok->check_usable();
    return tok;
  }
  throw FileError(f.path(), "tokenizer.ggml.model '" + model + "' is not supported (llama, gpt2 and gemma4 are)");
}

std::string Tokenizer::decode(const std::vector<int32_t>& ids) const {
  const auto* vt = dynamic_cast<const VocabTokenizer*>(this);
  bool strip = vt != nullptr && vt->strips_space_prefix();
  std::string out;
  for (int32_t id : ids) {
    std::string p = piece(id);
    if (p.empty()) continue;
    if (strip && p[0] == ' ') p.erase(0, 1);
    strip = false;
    out += p;
  }
  return out;
}

}  // namespace replay
}  // namespace sjkv
