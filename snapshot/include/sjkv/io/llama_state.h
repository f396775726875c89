// Importer for llama.cpp state files holding an f16 or f32 KV cache:
//   - sequence state files, written by llama_state_seq_save_file() (magic 'ggsq'),
//   - full context state files, written by llama_state_save_file() (magic 'ggsn'),
// including a hybrid model's (attention cache, then recurrent state).
// The byte layout, and which llama.cpp versions write it, is documented at the top of
// snapshot/src/llama_state.cpp.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "sjkv/io/capture.h"
#include "sjkv/io/file_error.h"

namespace sjkv {

// The recurrent part a hybrid model's state file holds after its attention cache (llama.cpp's
// hybrid memory: Qwen 3.5, Qwen3-Next; the byte layout is at the top of
// snapshot/src/llama_state.cpp). The file counts the model's main layers but stores rows only
// for the recurrent ones, and never says which those are or how long their rows are: the
// model's geometry does (import_options_for in sjkv/io/load.h fills this from a GGUF).
struct LlamaRecurrentLayout {
  uint32_t n_layer = 0;          // layers the part counts: the model's layers less its nextn blocks
  std::vector<uint32_t> layers;  // the recurrent ones among them, ascending, each < n_layer
  uint64_t conv_values = 0;      // one cell's conv-state row per layer (RecurrentShape::conv_values)
  uint64_t delta_values = 0;     // one cell's delta-state row per layer (RecurrentShape::delta_values)

  bool empty() const { return n_layer == 0; }
};

// A hybrid's recurrent state as read (read_llama_state's optional output), converted to float.
struct LlamaRecurrentState {
  std::vector<uint32_t> layers;          // the model's recurrent layers (the layout's)
  std::vector<int32_t> cell_pos;         // per kept cell: the position of the last token it took
  std::vector<std::vector<float>> conv;  // per layer: kept cells x conv_values, [cell][value]
  std::vector<std::vector<float>> delta; // per layer: kept cells x delta_values, [cell][value]
};

struct LlamaStateOptions {
  // Size of one attention head. The state only stores per-layer row sizes
  // (kv_heads * head_dim), so this is required (0 = not given); a power of two.
  uint32_t head_dim = 0;

  // Which layers to keep, as indices in file order: the layers of the first KV cache section
  // are 0..n0-1, those of the next section follow, and so on. Empty = every layer in the file.
  // An iSWA model (e.g. Gemma 3) writes its full-attention layers in the first section and its
  // sliding-window layers in the second; other models do not mark SWA layers in the file at all,
  // so pass the full-attention layers here.
  std::vector<uint32_t> layers;

  // The model's layer index of each kept layer, in the order of `layers` (or of the file when
  // `layers` is empty); becomes CaptureLayer::layer_id. Empty = the file index.
  std::vector<uint32_t> layer_ids;

  // KV cache sections to read: 0 = until the end of the file (plain and iSWA caches).
  // A hybrid model writes its attention cache followed by a recurrent state: give `recurrent`
  // to walk that state too, or pass 1 here and the bytes after the first section are ignored.
  uint32_t kv_sections = 0;

  // Non-empty: the file is a hybrid model's (kv_sections must then be 0 or 1). The reader takes
  // one KV cache section (the full-attention layers: give their model indices as layer_ids),
  // then the recurrent part, every count and row size checked against this layout, and then
  // the end of the file. The recurrent bytes are never read as KV.
  LlamaRecurrentLayout recurrent;

  // True for models whose cells carry llama.cpp's llama_kv_cell_ext record (M-RoPE / iM-RoPE
  // models such as Qwen2-VL, Qwen3-VL, Qwen3.5; llama.cpp's has_cell_ext()). The file does not
  // say, so it must be told.
  bool cell_ext = false;

  // Full state files ('ggsn') may hold several sequences: keep the cells of this one
  // (-1 = all cells, which must then hold each position once). Ignored for 'ggsq' files.
  int32_t seq_id = -1;
};

// Reads the KV cache of a llama.cpp state file. The result has the kept layers, cells sorted by
// position, head_dim from the options, kv_heads = row size / head_dim, rotated = false, model =
// the architecture name of a full state file (empty for a sequence file), source
// "llama.cpp-seq-state:<file name>" or "llama.cpp-state:<file name>", and token_ids = the file's
// token list when it has exactly one token per kept cell (empty otherwise).
// Throws FileError(path, defect) for malformed input, an unsupported version or cache type, a
// value that is NaN, infinite or outside fp16's range, or options the file contradicts (a layer
// index past the file's layers, a head_dim that does not divide the row size).
// With options.recurrent set, `recurrent` (if not null) receives the recurrent state of the
// kept cells (a sequence file's one cell; a full state's cells of seq_id, or all), each value
// checked finite; null skips those bytes after checking their sizes.
// Throws std::invalid_argument for options that are wrong on their own (head_dim 0 or not a
// power of two, repeated layer indices, layer_ids of the wrong length, a recurrent layout whose
// layers are not ascending below n_layer or whose row sizes are 0 or past 2^32 - 1 values).
Capture read_llama_state(const std::string& path, const LlamaStateOptions& options,
                         LlamaRecurrentState* recurrent = nullptr);

}  // namespace sjkv
