// Unicode helpers for the tokenizers: lenient UTF-8 decoding as llama.cpp does it, the
// letter/number/mark/white-space classes the byte-level BPE pre-tokenizers test, and GPT-2's
// byte-to-character mapping.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace sjkv {
namespace replay {
namespace unicode {

// Bytes in the UTF-8 sequence that starts with `lead`, from its high nibble alone (1 for a
// continuation byte): how SentencePiece-style tokenizers cut text into characters.
size_t utf8_len(uint8_t lead);

// Code points of `text`. A malformed sequence (bad lead byte, missing or bad continuation
// byte) becomes U+FFFD and decoding resumes at the next byte. Overlong forms and surrogates
// are accepted as they decode, like llama.cpp's unicode_cpts_from_utf8.
std::vector<uint32_t> decode_utf8(std::string_view text);
void append_utf8(std::string& out, uint32_t cp);

// The values are the two class bits of tokenizer_unicode_data.h's table.
enum class CharClass : uint8_t { other = 0, letter = 1, number = 2, mark = 3 };
// General category L* -> letter, N* -> number, M* (Mn Mc Me, combining marks) -> mark,
// anything else (and beyond U+10FFFF) other.
CharClass char_class(uint32_t cp);
// The Unicode White_Space property (\s in the pre-tokenizer patterns).
bool is_white_space(uint32_t cp);

// GPT-2 byte-level encoding: each byte stands for one printable code point (the byte itself
// for '!'..'~', 0xA1..0xAC, 0xAE..0xFF; 256 + n for the n-th other byte in order).
uint32_t byte_to_code_point(uint8_t b);
// The byte a code point stands for, or -1 when it is not one of the 256.
int code_point_to_byte(uint32_t cp);

}  // namespace unicode
}  // namespace replay
}  // namespace sjkv
