// Developer tool: token ids of text under a GGUF vocabulary, to compare with llama.cpp.
//
//   sjkv_tokenize MODEL.gguf [--bos] [--nul] [--decode] [FILE]
//   sjkv_tokenize MODEL.gguf --vocab
//
// Reads FILE (or stdin). Prints the ids of the whole text on one line, space separated;
// with --nul the input is a list of texts separated by NUL bytes and each gets its own line.
// --bos adds the special tokens the model expects (tokenizer.ggml.add_bos_token).
// --decode prints decode(encode(text)) instead of the ids. --vocab prints one line per token:
// id, its piece in hex, and 1 when it ends generation (0 otherwise), tab separated.
// Exit 2 for a bad model file.
#include <cstdio>
#include <fstream>
#include <iostream>
#include <iterator>
#include <string>
#include <vector>

#include "sjkv/io/model_geometry.h"
#include "sjkv/replay/tokenizer.h"

int main(int argc, char** argv) {
  std::string model, input;
  bool bos = false, nul = false, decode = false, vocab = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--bos") {
      bos = true;
    } else if (a == "--nul") {
      nul = true;
    } else if (a == "--decode") {
      decode = true;
    } else if (a == "--vocab") {
      vocab = true;
    } else if (a.size() > 1 && a[0] == '-') {
      std::fprintf(stderr, "sjkv_tokenize: unknown option %s\n", a.c_str());
      return 1;
    } else if (model.empty()) {
      model = a;
    } else if (input.empty()) {
      input = a;
    } else {
      std::fprintf(stderr, "usage: sjkv_tokenize MODEL.gguf [--bos] [--nul] [--decode] [FILE]\n");
      return 1;
    }
  }
  if (model.empty()) {
    std::fprintf(stderr, "usage: sjkv_tokenize MODEL.gguf [--bos] [--nul] [--decode] [FILE]\n");
    return 1;
  }
  std::string text;
  if (vocab) {
    // no input
  } else if (input.empty() || input == "-") {
    text.assign(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
  } else {
    std::ifstream in(input, std::ios::binary);
    if (!in) {
      std::fprintf(stderr, "sjkv_tokenize: cannot open %s\n", input.c_str());
      return 1;
    }
    text.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  try {
    const sjkv::GgufFile f = sjkv::GgufFile::open(model);
    const auto tok = sjkv::replay::Tokenizer::from_gguf(f);
    if (vocab) {
      std::string out;
      static const char* hex = "0123456789abcdef";
      for (uint32_t id = 0; id < tok->n_vocab(); ++id) {
        out += std::to_string(id) + '\t';
        for (unsigned char c : tok->piece(int32_t(id))) {
          out += hex[c >> 4];
          out += hex[c & 15];
        }
        out += tok->is_eog(int32_t(id)) ? "\t1\n" : "\t0\n";
      }
      std::fwrite(out.data(), 1, out.size(), stdout);
      return 0;
    }
    std::vector<std::string> texts;
    if (nul) {
      size_t start = 0;
      for (size_t i = 0; i <= text.size(); ++i) {
        if (i == text.size() || text[i] == '\0') {
          if (i < text.size() || i > start) texts.push_back(text.substr(start, i - start));
          start = i + 1;
        }
      }
    } else {
      texts.push_back(text);
    }
    std::string out;
    for (const std::string& t : texts) {
      const std::vector<int32_t> ids = tok->encode(t, bos);
      if (decode) {
        out += tok->decode(ids);
      } else {
        for (size_t i = 0; i < ids.size(); ++i) {
          if (i) out += ' ';
          out += std::to_string(ids[i]);
        }
      }
      out += '\n';
    }
    std::fwrite(out.data(), 1, out.size(), stdout);
  } catch (const sjkv::FileError& e) {
    std::fprintf(stderr, "sjkv_tokenize: %s\n", e.what());
    return 2;
  }
  return 0;
}
