// Pre-tokenizers of byte-level BPE vocabularies: the text is cut into words before merges,
// by the regular expression the model's tokenizer.json names. C++17 has no regex engine
// with \p{..} classes, so each supported expression is a hand-written scanner that makes the
// same cuts as llama.cpp (src/unicode.cpp, unicode_regex_split and its custom splitters).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace sjkv {
namespace replay {

enum class PreTokenizer {
  // GPT-2: 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)
  gpt2,
  // SmolLM / StarCoder: every \p{N} code point on its own, then the GPT-2 expression.
  smollm,
  // Llama 3: (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
  //          ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
  llama3,
  // Qwen 2: the Llama 3 expression with \p{N} (one digit) in place of \p{N}{1,3}.
  qwen2,
  // Qwen 3.5: the Qwen 2 expression with combining marks counted with letters:
  //   (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}|
  //    ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
  qwen35,
  // GPT-4o (o200k, gpt-oss's o200k_harmony, Llama 4): letters cut at case changes,
  //   [^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|
  //   [^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|
  //   \p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+
  // as llama.cpp runs it: no custom splitter, std::regex over a copy of the text with each
  // non-ASCII code point replaced by one byte for its class, where "upper" is
  // (?=\p{L})[^a-z] and "lower" (?=\p{L})[^A-Z]. So a non-ASCII letter is both upper and
  // lower, combining marks are punctuation (no \p{M}), and the contraction is ASCII-only.
  gpt4o,
};

// The pre-tokenizer llama.cpp uses for a tokenizer.ggml.pre value; false when unsupported.
// `ignore_merges` tells whether a word that is itself a token skips the merges.
bool pre_tokenizer_from_name(std::string_view pre, PreTokenizer* out, bool* ignore_merges);

// The words of `text` (UTF-8, malformed bytes replaced by U+FFFD), in order; their
// concatenation is the (repaired) text.
std::vector<std::string> pre_tokenize(PreTokenizer kind, std::string_view text);

}  // namespace replay
}  // namespace sjkv
