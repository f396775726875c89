// Open any input the tools accept as a capture: an sjkv capture (HDF5), a .kvd tile dump,
// or a llama.cpp state file ('ggsq' sequence or 'ggsn' full state). The kind is told from
// the file's first bytes, not its name.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "sjkv/io/capture.h"
#include "sjkv/io/llama_state.h"
#include "sjkv/io/state_stream.h"

namespace sjkv {

// llama.cpp state files store only row widths and no layer kinds, so the caller says what
// the file cannot (see llama_state.h).
struct ImportOptions {
  uint32_t head_dim = 0;             // head size (required for llama.cpp state files)
  std::vector<uint32_t> layers;      // layers to keep, as positions in the file (empty: all)
  std::vector<uint32_t> layer_ids;   // the model's layer number of each kept layer (empty: file index)
  uint32_t kv_sections = 0;          // cache sections to read (0: all; Gemma 3 writes full then SWA)
  LlamaRecurrentLayout recurrent;    // a hybrid model's recurrent state (empty: none)
  bool cell_ext = false;             // the cells carry llama.cpp's ext record (M-RoPE models)
};

struct ModelGeometry;
// The options that read a llama.cpp state file of the model a GGUF geometry describes: the head
// size of its full-attention layers and where they sit in the file. An iSWA model (sliding
// layers beside full ones, e.g. Gemma 2 and 3) writes its full-attention layers as the first
// cache section: there the first section is read and its layers are numbered as the model's
// full-attention layers. A hybrid model with a known state shape (the Qwen 3.5 family,
// Qwen3-Next: ModelGeometry::hybrid_memory) writes its full-attention layers, then its recurrent
// state: its layers are numbered the same way and the recurrent part is walked with the
// model's layout (its nextn blocks have neither, so they are allowed); its cells carry the ext
// record when the model uses M-RoPE. Any other model writes every layer in order.
// std::invalid_argument when the model has no full-attention layer, draft (nextn) layers
// outside a hybrid, or full-attention layers of differing head sizes.
ImportOptions import_options_for(const ModelGeometry& g);

enum class InputKind { capture, snapshot, state_stream, kvd, llama_seq_state, llama_state, unknown };

InputKind sniff_input(const std::string& path);  // throws FileError when unreadable
const char* input_kind_name(InputKind k);
Capture load_capture_any(const std::string& path, const ImportOptions& opt);
// A snapshot from either container, told by its first bytes (sniff_input): an sjkv snapshot
// file or a sequence-state stream.
Snapshot read_snapshot_any(const std::string& path, const StateImportOptions& opt = {});

}  // namespace sjkv
