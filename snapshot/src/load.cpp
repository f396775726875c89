#include "sjkv/io/load.h"

#include <cstdio>
#include <cstring>

#include "sjkv/io/capture_file.h"
#include "sjkv/io/file_error.h"
#include "sjkv/io/kvd.h"
#include "sjkv/io/llama_state.h"
#include "sjkv/io/model_geometry.h"
#include "sjkv/io/paths.h"
#include "sjkv/io/snapshot_file.h"
#include "sjkv/io/state_stream.h"

namespace sjkv {

InputKind sniff_input(const std::string& path) {
  const int fd = open_input_file(path);
  std::FILE* f = ::fdopen(fd, "rb");
  if (!f) {
    ::close(fd);
    throw FileError(path, std::string("cannot open: ") + std::strerror(errno));
  }
  unsigned char b[8] = {0};
  const size_t n = std::fread(b, 1, sizeof b, f);
  std::fclose(f);
  static const unsigned char hdf5_sig[8] = {0x89, 'H', 'D', 'F', '\r', '\n', 0x1a, '\n'};
  if (n == 8 && std::memcmp(b, hdf5_sig, 8) == 0) {
    // An HDF5 file that is not a snapshot goes to the capture reader, which names its defect.
    return sniff_file(path) == FileKind::snapshot ? InputKind::snapshot : InputKind::capture;
  }
  if (n == 8 && std::memcmp(b, kStateMagic, 8) == 0) return InputKind::state_stream;
  if (n >= 4) {
    const uint32_t magic = static_cast<uint32_t>(b[0]) | (static_cast<uint32_t>(b[1]) << 8) |
                           (static_cast<uint32_t>(b[2]) << 16) | (static_cast<uint32_t>(b[3]) << 24);
    if (magic == 0x31445643u) return InputKind::kvd;
    if (magic == 0x67677371u) return InputKind::llama_seq_state;
    if (magic == 0x6767736eu) return InputKind::llama_state;
  }
  return InputKind::unknown;
}

const char* input_kind_name(InputKind k) {
  switch (k) {
    case InputKind::capture: return "sjkv capture";
    case InputKind::snapshot: return "sjkv snapshot";
    case InputKind::state_stream: return "sequence-state stream";
    case InputKind::kvd: return ".kvd tile dump";
    case InputKind::llama_seq_state: return "llama.cpp sequence state";
    case InputKind::llama_state: return "llama.cpp state";
    case InputKind::unknown: return "unknown";
  }
  return "unknown";
}

namespace {

Capture load_unchecked(const std::string& path, const ImportOptions& opt) {
  switch (sniff_input(path)) {
    case InputKind::capture: return read_capture(path);
    case InputKind::kvd: return read_kvd(path);
    case InputKind::llama_seq_state:
    case InputKind::llama_state: {
      LlamaStateOptions lo;
      lo.head_dim = opt.head_dim;
      lo.layers = opt.layers;
      lo.layer_ids = opt.layer_ids;
      lo.kv_sections = opt.kv_sections;
      lo.recurrent = opt.recurrent;
      lo.cell_ext = opt.cell_ext;
      if (opt.head_dim == 0) throw FileError(path, "is a llama.cpp state file: give the head size with --head-dim");
      try {
        return read_llama_state(path, lo);
      } catch (const std::invalid_argument& e) {
        throw FileError(path, e.what());
      }
    }
    case InputKind::snapshot:
      throw FileError(path, "is an sjkv snapshot, not a capture (decode it first with sjkv-encode decode)");
    case InputKind::state_stream:
      throw FileError(path, "is a sequence-state stream, not a capture (decode it with sjkv-encode decode, or make "
                            "a snapshot of it with sjkv-encode import)");
    case InputKind::unknown: break;
  }
  throw FileError(path, "not a capture, .kvd dump or llama.cpp state file (unrecognised first bytes)");
}

}  // namespace

ImportOptions import_options_for(const ModelGeometry& g) {
  ImportOptions o;
  const std::vector<uint32_t> full = g.full_attention_layers();
  if (full.empty()) throw std::invalid_argument("the model (" + g.architecture + ") has no full-attention layer");
  o.head_dim = g.layers[full[0]].head_dim_k;
  o.cell_ext = g.state_cell_ext;
  bool split = false;
  for (uint32_t i = 0; i < g.layers.size(); ++i) {
    const LayerInfo& l = g.layers[i];
    if (l.kind == LayerKind::nextn && g.hybrid_memory) continue;  // no KV, no state (llama.cpp's filters)
    if (l.kind == LayerKind::nextn)
      throw std::invalid_argument("the model (" + g.architecture + ") has draft (nextn) layers; give --head-dim and --layers");
    if (l.kind != LayerKind::full_attention) split = true;
    else if (l.head_dim_k != o.head_dim || l.head_dim_v != o.head_dim)
      throw std::invalid_argument("the model's full-attention layers have differing head sizes (layer " + std::to_string(i) +
                                  "); give --head-dim and --layers");
  }
  if (g.hybrid_memory) {
    o.layer_ids = full;
    o.recurrent.n_layer = g.main_layers();
    o.recurrent.layers = g.recurrent_layers();
    o.recurrent.conv_values = g.recurrent.conv_values();
    o.recurrent.delta_values = g.recurrent.delta_values();
  } else if (split) {
    o.kv_sections = 1;
    o.layer_ids = full;
  }
  return o;
}

Capture load_capture_any(const std::string& path, const ImportOptions& opt) {
  Capture c = load_unchecked(path, opt);
  // Every importer's result must be a capture the rest of sjkv accepts (limits on head_dim
  // and kv_heads, token ids, names), whatever the importer itself allowed.
  try {
    c.check_consistent();
  } catch (const std::invalid_argument& e) {
    throw FileError(path, e.what());
  }
  return c;
}

Snapshot read_snapshot_any(const std::string& path, const StateImportOptions& opt) {
  return sniff_input(path) == InputKind::state_stream ? read_state_stream(path, opt) : read_snapshot(path);
}

}  // namespace sjkv
