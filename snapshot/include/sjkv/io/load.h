// Open any input the tools accept as a capture: an sjkv capture (HDF5), a .kvd tile dump,
// or a llama.cpp state file ('ggsq' sequence or 'ggsn' full state). The kind is told from
// the file's first bytes, not its name.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "sjkv/io/capture.h"

namespace sjkv {

// llama.cpp state files store only row widths and no layer kinds, so the caller says what
// the file cannot (see llama_state.h).
struct ImportOptions {
  uint32_t head_dim = 0;             // head size (required for llama.cpp state files)
  std::vector<uint32_t> layers;      // layers to keep, as positions in the file (empty: all)
  std::vector<uint32_t> layer_ids;   // the model's layer number of each kept layer (empty: file index)
  uint32_t kv_sections = 0;          // cache sections to read (0: all; Gemma 3 writes full then SWA)
};

enum class InputKind { capture, snapshot, state_stream, kvd, llama_seq_state, llama_state, unknown };

InputKind sniff_input(const std::string& path);  // throws FileError when unreadable
const char* input_kind_name(InputKind k);
Capture load_capture_any(const std::string& path, const ImportOptions& opt);

}  // namespace sjkv
