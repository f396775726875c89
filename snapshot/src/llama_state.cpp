// llama.cpp state files: the layout this reader implements.
//
// Source: llama.cpp commit 0c1e57098 (ggml-org/llama.cpp, as vendored by llama-cpp-python 0.3.36,
// read 2026-11-29): include/llama.h (magics, versions), src/llama-context.cpp
// (state_save_file, state_seq_save_file, state_write_data), src/llama-io.cpp (write_string),
// src/llama-kv-cache.cpp (state_write, state_write_meta, state_write_data),
// src/llama-kv-cache-iswa.cpp and src/llama-memory-hybrid.cpp (section order).
// Everything is little-endian, packed, no alignment.
//
//   u32 magic        'ggsq' 0x67677371 (llama_state_seq_save_file) or
//                    'ggsn' 0x6767736e (llama_state_save_file)
//   u32 version      ggsq: 3 current, 2 accepted; ggsn: 10 current, 9 accepted
//   u32 n_tokens;  i32 tokens[n_tokens]
//   ggsn only:
//     u32 len; char arch[len]                      the model architecture, e.g. "llama"
//     ggsn 9 only (removed in 10, llama.cpp PR #18862):
//       u32 n_outputs; i32 output_pos[n_outputs]
//       u64 n_logits;  f32 logits[n_logits]
//       u64 n_embd;    f32 embd[n_embd]
//   then one or more KV cache sections up to the end of the file (a plain cache writes one;
//   iSWA writes the full-attention cache, then the SWA cache; a hybrid model writes its
//   attention cache, then a recurrent state in another layout). One section:
//     u32 n_stream                                 1 unless the cache is split per sequence
//     per stream:
//       u32 cell_count                             0: the stream ends here
//       per cell (cells in cache order, not sorted by position):
//         i32 pos; u32 n_seq_id
//         [cell ext: i32 x, i32 y (+ i32 tok from ggsq 3 / ggsn 10), only for M-RoPE/PLE models]
//         i32 seq_id[n_seq_id]                     ggsq: exactly one (the saved sequence)
//       u32 v_trans (0 or 1); u32 n_layer
//       per layer: i32 k_type; u64 k_row_bytes; k_row_bytes * cell_count bytes ([cell][row])
//       v_trans == 0, per layer: i32 v_type; u64 v_row_bytes; v_row_bytes * cell_count bytes
//       v_trans == 1, per layer: i32 v_type; u32 v_elem_bytes; u32 n_embd_v;
//                                n_embd_v * cell_count * v_elem_bytes bytes ([channel][cell])
// A row is n_embd_gqa = kv_heads * head_dim values, head-major. Type ids are ggml's
// (0 F32, 1 F16, 8 Q8_0, 30 BF16, ...). Layer indices are not stored: a section's layers are the
// cache's layers in model order, minus those the cache does not hold (SWA or shared layers).
//
// A hybrid model (src/llama-memory-hybrid.cpp; Qwen 3.5, Qwen3-Next) writes exactly one KV cache
// section, holding its full-attention layers only (the main layers that are not recurrent, in
// order), then its recurrent state (src/llama-memory-recurrent.cpp: state_write,
// state_write_meta, state_write_data), and nothing after it:
//     u32 cell_count                               cells of the saved sequence(s): llama.cpp keeps
//                                                  one per sequence, so at most 256 (ggsq: 0 or 1)
//     per cell: i32 pos                            the last position the cell took (-1: none yet)
//               u32 n_seq_id; i32 seq_id[n_seq_id] ggsq: 0 ids (the saved sequence is implied);
//                                                  ggsn: the cell's sequences, 1 or more
//     u32 s_trans                                  0: llama.cpp writes no other
//     u32 n_layer                                  the model's main layers (nextn blocks excluded),
//                                                  recurrent or not
//     per recurrent layer, in order: i32 type; u64 row_bytes; row_bytes * cell_count bytes
//                                                  the conv state, (Kc - 1) x conv_dim values
//     per recurrent layer, in order: i32 type; u64 row_bytes; row_bytes * cell_count bytes
//                                                  the delta state, S x inner_size values
// Rows are F32 in llama.cpp (docs/design/qwen35.md section 8). Layers without a state write
// nothing, so the file alone cannot be walked: the model says which layers are recurrent and
// how long their rows are (LlamaRecurrentLayout).
//
// Versions: the n_stream field and the per-cell ext record were added without a version bump,
// so a ggsq 2 / ggsn 9 file from before n_stream (llama.cpp before mid-2025) is not this layout;
// the strict checks below refuse it (with a hint at that cause) rather than misread it. ggsq 3
// (PR #27762, 2026-08-26) grew the ext record from 8 to 12 bytes; ggsn 10 is read with the
// 12-byte record and ggsn 9 with the 8-byte one, so a ggsn 10 file of an M-RoPE model written
// with the 8-byte record (if any llama.cpp wrote one) is refused. MLA caches (no V tensor) and
// caches with padded rows are not this layout either. Other versions are refused by number.
#include "sjkv/io/llama_state.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <numeric>
#include <stdexcept>
#include <string>
#include <vector>

#include "byte_reader.h"
#include "sjkv/block_formats.h"
#include "sjkv/io/paths.h"
#include "sjkv/fp16.h"

namespace sjkv {
namespace {

constexpr uint32_t kMagicSeq = 0x67677371u;  // 'ggsq'
constexpr uint32_t kMagicCtx = 0x6767736eu;  // 'ggsn'
constexpr uint32_t kMaxSeq = 256;            // LLAMA_MAX_SEQ
constexpr uint32_t kMaxArchName = 256;
constexpr uint64_t kChunkBytes = 1u << 20;  // read granularity for cache data
constexpr int32_t kTypeF32 = 0, kTypeF16 = 1;

std::string ggml_type_name(int32_t t) {
  if (t < 0) return "unknown";
  if (const BlockFormatInfo* f = format_by_gguf_id(static_cast<uint32_t>(t))) return f->gguf_name;
  const char* removed = removed_gguf_type_name(static_cast<uint32_t>(t));
  return removed ? removed : "unknown";
}


// A kept layer, gathered over all streams: rows in stream/cell order, fp16 [cell][n_embd].
struct LayerAcc {
  bool seen = false;
  uint32_t n_embd = 0;
  std::vector<int32_t> pos;
  std::vector<uint16_t> k, v;
};

struct Cell {
  int32_t pos;
  bool keep;
};

class StateReader {
 public:
  StateReader(const std::string& path, const LlamaStateOptions& opt)
      : path_(path), opt_(opt), in_(path) {
    if (!opt.layers.empty()) {
      kept_.resize(opt.layers.size());
      kept_file_index_ = opt.layers;
    }
  }

  Capture run(LlamaRecurrentState* recurrent);

 private:
  std::string where(uint32_t layer, const char* kv, uint32_t cell, const Cell& c,
                    uint32_t ch) const {
    return "layer " + std::to_string(layer) + " " + kv + " " + stream_name_ + "cell " +
           std::to_string(cell) + " (pos " + std::to_string(c.pos) + ") channel " +
           std::to_string(ch);
  }
  // Throws the defect of a value that is not finite in fp16.
  [[noreturn]] void fail_value(const unsigned char* p, int32_t type, uint32_t layer, const char* kv,
                               uint32_t cell, const Cell& c, uint32_t ch) const;
  uint32_t check_type(int32_t type, uint32_t layer, const char* kv) const;
  void check_n_embd(uint32_t n_embd, uint32_t layer) const;
  void read_section(uint32_t section);
  void read_rows(const std::vector<Cell>& cells, uint64_t row, uint32_t n_embd, int32_t type,
                 uint32_t el, uint32_t layer, const char* kv, std::vector<uint16_t>* dst,
                 uint32_t n_keep);
  void read_stream(uint32_t section, uint32_t layer0, uint32_t* n_layer_section);
  void read_recurrent(LlamaRecurrentState* out);
  void read_state_rows(const char* what, uint64_t values, const std::vector<bool>& keep, uint32_t n_keep,
                       std::vector<std::vector<float>>* out);

  std::string path_;
  const LlamaStateOptions& opt_;
  bin::FileReader in_;
  bool seq_file_ = false;
  uint32_t version_ = 0;
  uint32_t ext_bytes_ = 0;
  std::vector<int32_t> keep_layer_;  // file layer index -> slot in kept_, or -1; grows per section
  std::vector<LayerAcc> kept_;
  std::vector<uint32_t> kept_file_index_;
  uint32_t n_file_layers_ = 0;
  std::string stream_name_;
  mutable bool value_defect_ = false;  // the failure is a bad value, not a misread structure
};

uint32_t StateReader::check_type(int32_t type, uint32_t layer, const char* kv) const {
  if (type == kTypeF16) return 2;
  if (type == kTypeF32) return 4;
  in_.fail("layer " + std::to_string(layer) + " " + kv + " cache type " + ggml_type_name(type) +
           " (ggml type " + std::to_string(type) + ") is not read: only F16 and F32 caches are");
}

void StateReader::check_n_embd(uint32_t n_embd, uint32_t layer) const {
  if (n_embd == 0 || n_embd % opt_.head_dim != 0)
    in_.fail("layer " + std::to_string(layer) + ": row of " + std::to_string(n_embd) +
             " values is not a multiple of head_dim " + std::to_string(opt_.head_dim));
}

void StateReader::fail_value(const unsigned char* p, int32_t type, uint32_t layer, const char* kv,
                             uint32_t cell, const Cell& c, uint32_t ch) const {
  value_defect_ = true;
  const std::string at = where(layer, kv, cell, c, ch);
  if (type == kTypeF16) {
    const uint16_t h = static_cast<uint16_t>(p[0] | p[1] << 8);
    in_.fail(at + " is " + ((h & 0x3ffu) ? "NaN" : "infinite"));
  }
  const uint32_t u = static_cast<uint32_t>(p[0]) | static_cast<uint32_t>(p[1]) << 8 |
                     static_cast<uint32_t>(p[2]) << 16 | static_cast<uint32_t>(p[3]) << 24;
  if ((u & 0x7f800000u) == 0x7f800000u)
    in_.fail(at + " is " + ((u & 0x7fffffu) ? "NaN" : "infinite"));
  in_.fail(at + " = " + std::to_string(f32_from_bits(u)) + " overflows fp16");
}

// Converts n values of an F16 or F32 array (element stride 1 in the source, `stride` in dst) to
// fp16 bit patterns; bad(j) is called for the first value that is not finite in fp16 and throws.
template <class Bad>
void convert(const unsigned char* src, int32_t type, size_t n, uint16_t* dst, size_t stride,
             Bad bad) {
  if (type == kTypeF16) {
    for (size_t j = 0; j < n; ++j) {
      const uint16_t h = static_cast<uint16_t>(src[2 * j] | src[2 * j + 1] << 8);
      if ((h & 0x7c00u) == 0x7c00u) bad(j);
      dst[j * stride] = h;
    }
  } else {
    for (size_t j = 0; j < n; ++j) {
      const unsigned char* p = src + 4 * j;
      const uint32_t u = static_cast<uint32_t>(p[0]) | static_cast<uint32_t>(p[1]) << 8 |
                         static_cast<uint32_t>(p[2]) << 16 | static_cast<uint32_t>(p[3]) << 24;
      const uint16_t h = f32_to_f16(f32_from_bits(u));
      if ((h & 0x7c00u) == 0x7c00u) bad(j);  // NaN, infinity or out of fp16's range
      dst[j * stride] = h;
    }
  }
}

// cell_count rows of `row` bytes in [cell][channel] order; the kept cells' rows are appended.
void StateReader::read_rows(const std::vector<Cell>& cells, uint64_t row, uint32_t n_embd,
                            int32_t type, uint32_t el, uint32_t layer, const char* kv,
                            std::vector<uint16_t>* dst, uint32_t n_keep) {
  size_t out = dst->size();
  dst->resize(out + static_cast<size_t>(n_keep) * n_embd);
  const uint32_t n_cells = static_cast<uint32_t>(cells.size());
  const uint32_t chunk = static_cast<uint32_t>(std::max<uint64_t>(1, kChunkBytes / row));
  std::vector<unsigned char> buf;
  for (uint32_t i0 = 0; i0 < n_cells; i0 += chunk) {
    const uint32_t nr = std::min(chunk, n_cells - i0);
    buf.resize(row * nr);
    in_.read(buf.data(), buf.size(), kv[0] == 'K' ? "K data" : "V data");
    for (uint32_t i = i0; i < i0 + nr; ++i) {
      if (!cells[i].keep) continue;
      const unsigned char* src = buf.data() + (i - i0) * row;
      convert(src, type, n_embd, dst->data() + out, 1, [&](size_t c) {
        fail_value(src + c * el, type, layer, kv, i, cells[i], static_cast<uint32_t>(c));
      });
      out += n_embd;
    }
  }
}

void StateReader::read_stream(uint32_t section, uint32_t layer0, uint32_t* n_layer_section) {
  const uint32_t cell_count = in_.u32("cell count");
  if (cell_count == 0) return;
  // pos + n_seq_id + ext + one seq id, the least a cell's metadata takes
  in_.check_count(cell_count, 12 + ext_bytes_, "cell count");

  std::vector<Cell> cells(cell_count);
  uint32_t n_keep = 0;
  for (uint32_t i = 0; i < cell_count; ++i) {
    const int32_t pos = in_.i32("cell position");
    const uint32_t n_seq = in_.u32("cell sequence count");
    const std::string cell = stream_name_ + "cell " + std::to_string(i);
    if (pos < 0) in_.fail(cell + ": negative position " + std::to_string(pos));
    if (seq_file_ ? n_seq != 1 : (n_seq == 0 || n_seq > kMaxSeq))
      in_.fail(cell + ": " + std::to_string(n_seq) + " sequence ids (" +
               (seq_file_ ? "a sequence state holds exactly 1)" : "expected 1..256)"));
    in_.skip(ext_bytes_, "cell ext record");
    bool keep = seq_file_ || opt_.seq_id < 0;
    for (uint32_t s = 0; s < n_seq; ++s) {
      const int32_t id = in_.i32("cell sequence id");
      if (id < 0 || static_cast<uint32_t>(id) >= kMaxSeq)
        in_.fail(cell + ": sequence id " + std::to_string(id) + " outside [0, 256)");
      if (id == opt_.seq_id) keep = true;
    }
    cells[i] = {pos, keep};
    n_keep += keep;
  }

  const uint32_t v_trans = in_.u32("v_trans flag");
  if (v_trans > 1)
    in_.fail("section " + std::to_string(section) + ": v_trans flag " + std::to_string(v_trans) +
             " is not 0 or 1" + (opt_.cell_ext ? "" : " (an M-RoPE model's file? see cell_ext)"));
  const uint32_t n_layer = in_.u32("layer count");
  if (n_layer == 0) in_.fail("section " + std::to_string(section) + ": layer count 0");
  in_.check_count(n_layer, 12, "layer count");  // each K header is 12 bytes
  if (*n_layer_section == UINT32_MAX) {
    *n_layer_section = n_layer;
    n_file_layers_ = layer0 + n_layer;
    for (uint32_t l = 0; l < n_layer; ++l) {
      const uint32_t fl = layer0 + l;
      int32_t slot = -1;
      if (opt_.layers.empty()) {
        slot = static_cast<int32_t>(kept_.size());
      } else {
        const auto it = std::find(opt_.layers.begin(), opt_.layers.end(), fl);
        if (it != opt_.layers.end()) slot = static_cast<int32_t>(it - opt_.layers.begin());
      }
      keep_layer_.push_back(slot);
      if (opt_.layers.empty()) {
        kept_.emplace_back();
        kept_file_index_.push_back(fl);
      }
    }
  } else if (n_layer != *n_layer_section) {
    in_.fail(stream_name_ + "layer count " + std::to_string(n_layer) +
             " differs from the section's " + std::to_string(*n_layer_section));
  }

  std::vector<unsigned char> buf;
  std::vector<uint32_t> k_embd(n_layer);

  // K: per layer, cell_count rows.
  for (uint32_t l = 0; l < n_layer; ++l) {
    const uint32_t fl = layer0 + l;
    const int32_t slot = keep_layer_[fl];
    const int32_t type = in_.i32("K type");
    const uint64_t row = in_.u64("K row size");
    const std::string what = "layer " + std::to_string(fl) + " K row size";
    const uint32_t el = slot < 0 ? 1 : check_type(type, fl, "K");
    if (row == 0) in_.fail(what + " is 0");
    in_.check_count(row, cell_count, "layer " + std::to_string(fl) + " K data");
    if (slot < 0) {
      in_.skip(row * cell_count, "K data");
      continue;
    }
    if (row % el != 0 || row / el > std::numeric_limits<uint32_t>::max())
      in_.fail(what + " " + std::to_string(row) + " is not a whole number of " +
               ggml_type_name(type) + " values");
    const uint32_t n_embd = static_cast<uint32_t>(row / el);
    check_n_embd(n_embd, fl);
    LayerAcc& acc = kept_[static_cast<size_t>(slot)];
    if (acc.seen && acc.n_embd != n_embd)
      in_.fail("layer " + std::to_string(fl) + ": K row of " + std::to_string(n_embd) +
               " values differs between streams");
    acc.seen = true;
    acc.n_embd = n_embd;
    k_embd[l] = n_embd;
    read_rows(cells, row, n_embd, type, el, fl, "K", &acc.k, n_keep);
  }

  // V: per layer, rows or (v_trans) channels.
  for (uint32_t l = 0; l < n_layer; ++l) {
    const uint32_t fl = layer0 + l;
    const int32_t slot = keep_layer_[fl];
    const int32_t type = in_.i32("V type");
    const std::string lname = "layer " + std::to_string(fl);
    if (!v_trans) {
      const uint64_t row = in_.u64("V row size");
      const uint32_t el = slot < 0 ? 1 : check_type(type, fl, "V");
      if (row == 0) in_.fail(lname + " V row size is 0");
      in_.check_count(row, cell_count, lname + " V data");
      if (slot < 0) {
        in_.skip(row * cell_count, "V data");
        continue;
      }
      if (row != static_cast<uint64_t>(k_embd[l]) * el)
        in_.fail(lname + ": V row size " + std::to_string(row) + " does not hold the K row's " +
                 std::to_string(k_embd[l]) + " values (K and V head sizes must match)");
      read_rows(cells, row, k_embd[l], type, el, fl, "V", &kept_[static_cast<size_t>(slot)].v,
                n_keep);
    } else {
      const uint32_t el_file = in_.u32("V element size");
      const uint32_t n_embd = in_.u32("V row length");
      const uint32_t el = slot < 0 ? 1 : check_type(type, fl, "V");
      if (el_file == 0 || n_embd == 0)
        in_.fail(lname + ": V element size " + std::to_string(el_file) + " / row length " +
                 std::to_string(n_embd) + " must be non-zero");
      const uint64_t per_channel = static_cast<uint64_t>(cell_count) * el_file;  // < 2^64
      in_.check_count(n_embd, per_channel, lname + " V data");
      if (slot < 0) {
        in_.skip(per_channel * n_embd, "V data");
        continue;
      }
      if (el_file != el)
        in_.fail(lname + ": V element size " + std::to_string(el_file) + " does not match type " +
                 ggml_type_name(type));
      if (n_embd != k_embd[l])
        in_.fail(lname + ": V row length " + std::to_string(n_embd) + " differs from the K row's " +
                 std::to_string(k_embd[l]) + " (K and V head sizes must match)");
      // [channel][cell] in the file: read whole channels, scatter into [cell][channel]
      std::vector<uint16_t>& dst = kept_[static_cast<size_t>(slot)].v;
      const size_t base = dst.size();
      dst.resize(base + static_cast<size_t>(n_keep) * n_embd);
      const uint32_t chunk =
          static_cast<uint32_t>(std::max<uint64_t>(1, kChunkBytes / per_channel));
      for (uint32_t c0 = 0; c0 < n_embd; c0 += chunk) {
        const uint32_t nc = std::min(chunk, n_embd - c0);
        buf.resize(per_channel * nc);
        in_.read(buf.data(), buf.size(), "V data");
        for (uint32_t c = c0; c < c0 + nc; ++c) {
          const unsigned char* src = buf.data() + (c - c0) * per_channel;
          size_t out = 0;
          for (uint32_t i = 0; i < cell_count; ++i) {
            if (!cells[i].keep) continue;
            convert(src + static_cast<size_t>(i) * el, type, 1, &dst[base + out * n_embd + c], 1,
                    [&](size_t) {
                      fail_value(src + static_cast<size_t>(i) * el, type, fl, "V", i, cells[i], c);
                    });
            ++out;
          }
        }
      }
    }
  }

  for (uint32_t l = 0; l < n_layer; ++l) {
    const int32_t slot = keep_layer_[layer0 + l];
    if (slot < 0) continue;
    for (const Cell& c : cells)
      if (c.keep) kept_[static_cast<size_t>(slot)].pos.push_back(c.pos);
  }
}

// One of the recurrent part's two blocks (conv or delta): per recurrent layer a type, a row size
// and cell_count rows; the kept cells' rows go to `out` (null: skipped after the size checks).
void StateReader::read_state_rows(const char* what, uint64_t values, const std::vector<bool>& keep, uint32_t n_keep,
                                  std::vector<std::vector<float>>* out) {
  const std::vector<uint32_t>& layers = opt_.recurrent.layers;
  const uint64_t cell_count = keep.size();
  if (out) out->assign(layers.size(), {});
  for (size_t li = 0; li < layers.size(); ++li) {
    const std::string lname = "layer " + std::to_string(layers[li]) + " recurrent " + what + " state";
    const int32_t type = in_.i32(lname + " type");
    const uint64_t row = in_.u64(lname + " row size");
    const uint32_t el = type == kTypeF32 ? 4 : type == kTypeF16 ? 2 : 0;
    if (el == 0)
      in_.fail(lname + " type " + ggml_type_name(type) + " (ggml type " + std::to_string(type) +
               ") is not read: only F32 (what llama.cpp writes) and F16");
    if (row != values * el)  // values < 2^32 (checked with the options)
      in_.fail(lname + ": rows of " + std::to_string(row) + " bytes, the model's " + what + " state is " +
               std::to_string(values) + " values (" + std::to_string(values * el) + " bytes in " + ggml_type_name(type) +
               ")");
    in_.check_count(row, cell_count, lname + " data");
    if (!out) {
      in_.skip(row * cell_count, lname + " data");
      continue;
    }
    std::vector<float>& dst = (*out)[li];
    dst.resize(static_cast<size_t>(n_keep) * values);
    float* o = dst.data();
    for (uint64_t c = 0; c < cell_count; ++c) {
      const uint8_t* p = in_.here();
      in_.skip(row, lname + " data");
      if (!keep[c]) continue;
      for (uint64_t j = 0; j < values; ++j, ++o) {
        float x;
        if (el == 4) {
          x = f32_from_bits(static_cast<uint32_t>(bin::load_le(p + 4 * j, 4)));
        } else {
          x = f16_to_f32(static_cast<uint16_t>(bin::load_le(p + 2 * j, 2)));
        }
        if (!std::isfinite(x))
          in_.fail(lname + " cell " + std::to_string(c) + " value " + std::to_string(j) + " is " +
                   (std::isnan(x) ? "NaN" : "infinite"));
        *o = x;
      }
    }
  }
}

void StateReader::read_recurrent(LlamaRecurrentState* out) {
  const LlamaRecurrentLayout& r = opt_.recurrent;
  if (in_.remaining() == 0)
    in_.fail("the file ends after the KV cache: a hybrid model's state has its recurrent part next");
  const uint32_t cell_count = in_.u32("recurrent cell count");
  if (cell_count > (seq_file_ ? 1 : kMaxSeq))
    in_.fail("recurrent cell count " + std::to_string(cell_count) + " exceeds " + (seq_file_ ? "1" : "256") +
             " (llama.cpp keeps one cell per sequence)");
  in_.check_count(cell_count, 8, "recurrent cell count");  // pos + n_seq_id
  std::vector<bool> keep(cell_count);
  std::vector<int32_t> pos;
  for (uint32_t i = 0; i < cell_count; ++i) {
    const std::string cell = "recurrent cell " + std::to_string(i);
    const int32_t p = in_.i32(cell + " position");
    const uint32_t n_seq = in_.u32(cell + " sequence count");
    if (p < -1) in_.fail(cell + ": position " + std::to_string(p) + " (-1 or more)");
    if (seq_file_ ? n_seq != 0 : (n_seq == 0 || n_seq > kMaxSeq))
      in_.fail(cell + ": " + std::to_string(n_seq) + " sequence ids (" +
               (seq_file_ ? "a sequence state writes none there)" : "expected 1..256)"));
    bool k = seq_file_ || opt_.seq_id < 0;
    for (uint32_t q = 0; q < n_seq; ++q) {
      const int32_t id = in_.i32(cell + " sequence id");
      if (id < 0 || static_cast<uint32_t>(id) >= kMaxSeq)
        in_.fail(cell + ": sequence id " + std::to_string(id) + " outside [0, 256)");
      if (id == opt_.seq_id) k = true;
    }
    keep[i] = k;
    if (k) pos.push_back(p);
  }
  const uint32_t s_trans = in_.u32("recurrent s_trans flag");
  if (s_trans != 0)
    in_.fail("recurrent s_trans flag " + std::to_string(s_trans) +
             (s_trans == 1 ? ": a transposed state is not read (llama.cpp writes 0)" : " is not 0"));
  const uint32_t n_layer = in_.u32("recurrent layer count");
  if (n_layer != r.n_layer)
    in_.fail("the recurrent state counts " + std::to_string(n_layer) + " layers, the model has " +
             std::to_string(r.n_layer) + " (not this model's state?)");
  const uint32_t n_keep = static_cast<uint32_t>(pos.size());
  read_state_rows("conv", r.conv_values, keep, n_keep, out ? &out->conv : nullptr);
  read_state_rows("delta", r.delta_values, keep, n_keep, out ? &out->delta : nullptr);
  if (in_.remaining() != 0)
    in_.fail(std::to_string(in_.remaining()) + " bytes after the recurrent state, where a hybrid model's file ends");
  if (out) {
    out->layers = r.layers;
    out->cell_pos = std::move(pos);
  }
}

void StateReader::read_section(uint32_t section) {
  const uint32_t n_stream = in_.u32("stream count");
  if (n_stream == 0 || n_stream > kMaxSeq)
    in_.fail("section " + std::to_string(section) + ": stream count " + std::to_string(n_stream) +
             " outside 1..256");
  in_.check_count(n_stream, 4, "stream count");
  const uint32_t layer0 = n_file_layers_;
  uint32_t n_layer_section = UINT32_MAX;  // set by the first non-empty stream
  for (uint32_t s = 0; s < n_stream; ++s) {
    stream_name_ = n_stream > 1 ? "stream " + std::to_string(s) + " " : "";
    if (section > 0) stream_name_ = "section " + std::to_string(section) + " " + stream_name_;
    read_stream(section, layer0, &n_layer_section);
  }
  stream_name_.clear();
}

Capture StateReader::run(LlamaRecurrentState* recurrent) {
  if (in_.size() < 4) in_.fail("truncated: magic needs 4 bytes, the file has " + std::to_string(in_.size()));
  const uint32_t magic = in_.u32("magic");
  if (magic != kMagicSeq && magic != kMagicCtx) {
    char hex[16];
    std::snprintf(hex, sizeof hex, "0x%08x", magic);
    in_.fail(std::string("bad magic ") + hex +
             " (expected 'ggsq' 0x67677371 or 'ggsn' 0x6767736e, a llama.cpp state file)");
  }
  seq_file_ = magic == kMagicSeq;
  version_ = in_.u32("version");
  const uint32_t lo = seq_file_ ? 2 : 9, hi = seq_file_ ? 3 : 10;
  const std::string kind = seq_file_ ? "sequence state ('ggsq')" : "state ('ggsn')";
  if (version_ < lo || version_ > hi)
    in_.fail("llama.cpp " + kind + " version " + std::to_string(version_) + " is " +
             (version_ > hi ? "newer than" : "older than") + " the versions this reader knows (" +
             std::to_string(lo) + " and " + std::to_string(hi) + ")");
  if (opt_.cell_ext) ext_bytes_ = version_ == hi ? 12 : 8;

  const uint32_t n_tokens = in_.u32("token count");
  in_.check_count(n_tokens, 4, "token count");
  std::vector<int32_t> tokens(n_tokens);
  for (size_t i = 0; i < tokens.size(); ++i) {
    tokens[i] = in_.i32("tokens");
    if (tokens[i] < 0) in_.fail("token " + std::to_string(i) + " has the negative id " + std::to_string(tokens[i]));
  }

  Capture cap;
  if (!seq_file_) {
    const uint32_t len = in_.u32("architecture name length");
    if (len > kMaxArchName)
      in_.fail("architecture name length " + std::to_string(len) + " exceeds " +
               std::to_string(kMaxArchName));
    cap.model.resize(len);
    in_.read(&cap.model[0], len, "architecture name");
    // It becomes the capture's model string, which holds no NUL (FORMAT.md section 1).
    if (cap.model.find('\0') != std::string::npos) in_.fail("the architecture name contains a NUL byte");
    if (version_ == 9) {
      const uint32_t n_outputs = in_.u32("output count");
      in_.check_count(n_outputs, 4, "output count");
      in_.skip(static_cast<uint64_t>(n_outputs) * 4, "output ids");
      const uint64_t n_logits = in_.u64("logits count");
      in_.check_count(n_logits, 4, "logits count");
      in_.skip(n_logits * 4, "logits");
      const uint64_t n_embd = in_.u64("embeddings count");
      in_.check_count(n_embd, 4, "embeddings count");
      in_.skip(n_embd * 4, "embeddings");
    }
  }
  if (in_.remaining() == 0) in_.fail("no KV cache state after the header (a model without one?)");

  uint32_t sections = 0;
  const bool hybrid = !opt_.recurrent.empty();
  const uint32_t want = hybrid ? 1 : opt_.kv_sections;  // a hybrid writes one KV cache section
  while (want == 0 ? in_.remaining() > 0 : sections < want) {
    if (in_.remaining() == 0)
      in_.fail("the file holds " + std::to_string(sections) + " KV cache sections, " + std::to_string(want) +
               " were asked for");
    try {
      read_section(sections++);
    } catch (const FileError& e) {
      // Same version number, older layout: say so rather than only name the misread field.
      if (version_ != lo || value_defect_) throw;
      in_.fail(e.defect() + " (a version " + std::to_string(lo) +
               " file written before llama.cpp added n_stream, mid-2025, has another layout)");
    }
  }

  if (hybrid) read_recurrent(recurrent);

  if (sections == 0) in_.fail("no KV cache section");
  if (n_file_layers_ == 0) in_.fail("no KV cells (every stream is empty)");
  for (size_t i = 0; i < opt_.layers.size(); ++i)
    if (opt_.layers[i] >= n_file_layers_)
      in_.fail("layer " + std::to_string(opt_.layers[i]) + " was asked for, the file holds " +
               std::to_string(n_file_layers_) + " layers");
  if (!opt_.layer_ids.empty() && opt_.layer_ids.size() != kept_.size())
    in_.fail(hybrid && opt_.layers.empty()
                 ? "the attention cache holds " + std::to_string(kept_.size()) + " layers, the model has " +
                       std::to_string(opt_.layer_ids.size()) + " full-attention layers (not this model's state?)"
                 : std::to_string(opt_.layer_ids.size()) + " layer ids were given for the file's " +
                       std::to_string(kept_.size()) + " layers");
  if (kept_.empty()) in_.fail("no layers");
  if (!kept_[0].seen || kept_[0].pos.empty())
    in_.fail(opt_.seq_id >= 0 && !seq_file_
                 ? "no KV cells of sequence " + std::to_string(opt_.seq_id)
                 : std::string("no KV cells"));

  // Cells sorted by position; every kept layer must hold the same positions.
  const uint32_t n_embd = kept_[0].n_embd;
  std::vector<int32_t> sorted_pos;
  Capture out_cap = std::move(cap);
  out_cap.layers.resize(kept_.size());
  for (size_t li = 0; li < kept_.size(); ++li) {
    LayerAcc& acc = kept_[li];
    const uint32_t fl = kept_file_index_[li];
    const std::string lname = "layer " + std::to_string(fl);
    if (acc.n_embd != n_embd)
      in_.fail(lname + ": rows of " + std::to_string(acc.n_embd) + " values, layer " +
               std::to_string(kept_file_index_[0]) + " has " + std::to_string(n_embd) +
               " (kept layers must share kv_heads * head_dim)");
    std::vector<uint32_t> order(acc.pos.size());
    std::iota(order.begin(), order.end(), 0u);
    std::stable_sort(order.begin(), order.end(),
                     [&](uint32_t a, uint32_t b) { return acc.pos[a] < acc.pos[b]; });
    for (size_t i = 1; i < order.size(); ++i)
      if (acc.pos[order[i]] == acc.pos[order[i - 1]])
        in_.fail(lname + ": position " + std::to_string(acc.pos[order[i]]) +
                 " is held by two cells" +
                 (seq_file_ ? "" : " (several sequences? choose one with seq_id)"));
    if (li == 0) {
      sorted_pos.resize(order.size());
      for (size_t i = 0; i < order.size(); ++i) sorted_pos[i] = acc.pos[order[i]];
      // Capture rows are consecutive positions. A run that starts past 0 (a shifted
      // context) keeps its order; a gap would be closed up silently, moving rows next to
      // rows they were never next to, so it is refused.
      for (size_t i = 1; i < sorted_pos.size(); ++i)
        if (sorted_pos[i] != sorted_pos[i - 1] + 1)
          in_.fail(lname + ": the cells' positions have a gap: " + std::to_string(sorted_pos[i - 1]) + " then " +
                   std::to_string(sorted_pos[i]) + " (a capture needs consecutive positions)");
    } else {
      bool same = order.size() == sorted_pos.size();
      for (size_t i = 0; same && i < order.size(); ++i) same = acc.pos[order[i]] == sorted_pos[i];
      if (!same)
        in_.fail(lname + " holds other positions (" + std::to_string(order.size()) +
                 " cells) than layer " + std::to_string(kept_file_index_[0]) + " (" +
                 std::to_string(sorted_pos.size()) +
                 " cells): a sliding-window layer? keep only full-attention layers");
    }
    CaptureLayer& cl = out_cap.layers[li];
    cl.layer_id = opt_.layer_ids.empty() ? fl : opt_.layer_ids[li];
    cl.k.resize(acc.k.size());
    cl.v.resize(acc.v.size());
    for (size_t i = 0; i < order.size(); ++i) {
      std::copy_n(acc.k.begin() + static_cast<ptrdiff_t>(order[i]) * n_embd, n_embd,
                  cl.k.begin() + static_cast<ptrdiff_t>(i) * n_embd);
      std::copy_n(acc.v.begin() + static_cast<ptrdiff_t>(order[i]) * n_embd, n_embd,
                  cl.v.begin() + static_cast<ptrdiff_t>(i) * n_embd);
    }
    std::vector<uint16_t>().swap(acc.k);
    std::vector<uint16_t>().swap(acc.v);
  }

  out_cap.source = (seq_file_ ? "llama.cpp-seq-state:" : "llama.cpp-state:") + base_name(path_);
  out_cap.head_dim = opt_.head_dim;
  out_cap.kv_heads = n_embd / opt_.head_dim;
  out_cap.tokens = static_cast<uint32_t>(sorted_pos.size());
  out_cap.rotated = false;
  out_cap.rotation_block = 0;
  if (tokens.size() == sorted_pos.size()) out_cap.token_ids = std::move(tokens);
  return out_cap;
}

}  // namespace

Capture read_llama_state(const std::string& path, const LlamaStateOptions& options,
                         LlamaRecurrentState* recurrent) {
  const uint32_t hd = options.head_dim;
  if (hd == 0)
    throw std::invalid_argument(
        "llama.cpp state import needs head_dim (the state does not store it)");
  if ((hd & (hd - 1)) != 0)
    throw std::invalid_argument("head_dim " + std::to_string(hd) + " is not a power of two");
  std::vector<uint32_t> sorted = options.layers;
  std::sort(sorted.begin(), sorted.end());
  if (std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end())
    throw std::invalid_argument("a layer index is listed twice");
  if (!options.layers.empty() && !options.layer_ids.empty() &&
      options.layer_ids.size() != options.layers.size())
    throw std::invalid_argument("layer_ids must have one entry per kept layer");
  const LlamaRecurrentLayout& rl = options.recurrent;
  if (!rl.empty()) {
    if (options.kv_sections > 1)
      throw std::invalid_argument("a hybrid model's state has one KV cache section, " +
                                  std::to_string(options.kv_sections) + " were asked for");
    for (size_t i = 0; i < rl.layers.size(); ++i)
      if (rl.layers[i] >= rl.n_layer || (i > 0 && rl.layers[i] <= rl.layers[i - 1]))
        throw std::invalid_argument("the recurrent layers must be ascending and below the layer count " +
                                    std::to_string(rl.n_layer));
    constexpr uint64_t kMax = std::numeric_limits<uint32_t>::max();
    if (!rl.layers.empty() &&
        (rl.conv_values == 0 || rl.delta_values == 0 || rl.conv_values > kMax || rl.delta_values > kMax))
      throw std::invalid_argument("the recurrent conv and delta rows must hold 1 to 2^32 - 1 values (" +
                                  std::to_string(rl.conv_values) + ", " + std::to_string(rl.delta_values) + ")");
  } else if (!rl.layers.empty()) {
    throw std::invalid_argument("recurrent layers given with a layer count of 0");
  }
  StateReader r(path, options);
  return r.run(recurrent);
}

}  // namespace sjkv
