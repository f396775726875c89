// Tokenizer built from a GGUF file's vocabulary (tokenizer.ggml.*): SentencePiece-style
// (model "llama", used by Gemma) and byte-level BPE (model "gpt2", used by Llama 3 and
// SmolLM2). Token ids must equal llama.cpp's for the same text.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "sjkv/io/model_geometry.h"

namespace sjkv {
namespace replay {

class Tokenizer {
 public:
  // Throws FileError naming the file when the vocabulary keys are missing or inconsistent.
  static std::unique_ptr<Tokenizer> from_gguf(const GgufFile& f);
  virtual ~Tokenizer() = default;

  // Text to ids; with add_special the BOS the model expects (tokenizer.ggml.add_bos_token).
  virtual std::vector<int32_t> encode(std::string_view text, bool add_special) const = 0;
  // encode() that also matches control tokens written in the text ("<start_of_turn>", ...)
  // and emits them as themselves, as llama.cpp's tokenizer does with parse_special (a chat
  // template's markers). Tokenizers without control tokens encode as encode() does.
  virtual std::vector<int32_t> encode_special(std::string_view text, bool add_special) const {
    return encode(text, add_special);
  }
  // The bytes one token stands for (control tokens give "").
  virtual std::string piece(int32_t id) const = 0;
  std::string decode(const std::vector<int32_t>& ids) const;

  virtual uint32_t n_vocab() const = 0;
  virtual int32_t bos() const = 0;     // -1 when none
  virtual int32_t eos() const = 0;     // -1 when none
  // End-of-generation tokens (eos, eot, <end_of_turn>...).
  virtual bool is_eog(int32_t id) const = 0;
};

}  // namespace replay
}  // namespace sjkv
