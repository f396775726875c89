// Fuzz target: llama.cpp state files (read_llama_state, sjkv/io/llama_state.h) with
// head_dim 64: once with the default options, once as an M-RoPE model (cell ext records)
// keeping sequence 0 and one cache section. The input is written to a temporary file, since
// the reader takes a path. A file that passes must give a consistent capture.
#include <stdexcept>

#include "fuzz_common.h"
#include "sjkv/io/llama_state.h"

namespace {

void read_with(const std::string& path, const sjkv::LlamaStateOptions& opt) {
  try {
    const sjkv::Capture cap = sjkv::read_llama_state(path, opt);
    sjkv_fuzz::expect_consistent([&] { cap.check_consistent(); });  // what encode needs
  } catch (const sjkv::FileError&) {
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string& path = sjkv_fuzz::write_input("llama", data, size);
  sjkv::LlamaStateOptions plain;
  plain.head_dim = 64;
  read_with(path, plain);
  sjkv::LlamaStateOptions ext = plain;
  ext.cell_ext = true;
  ext.seq_id = 0;
  ext.kv_sections = 1;
  read_with(path, ext);
  return 0;
}
