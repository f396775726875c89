// Importers (.kvd tile dumps, llama.cpp state files): valid files from our own writers, built
// from the layouts documented in sjkv/io/kvd.h and snapshot/src/llama_state.cpp, and one
// must-reject file per named defect. Every file is generated here; nothing binary is committed.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <functional>
#include <limits>
#include <numeric>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "sjkv/fp16.h"
#include "sjkv/io/kvd.h"
#include "sjkv/io/llama_state.h"
#include "sjkv/io/capture_file.h"
#include "sjkv/io/codebook.h"
#include "sjkv/io/gguf.h"
#include "sjkv/io/load.h"
#include "sjkv/io/model_geometry.h"
#include "sjkv/io/sha256.h"
#include "sjkv/io/snapshot_file.h"
#include "sjkv/io/state_stream.h"
#include "sjkv/io/trajectory.h"

namespace sjkv {
namespace {

using Bytes = std::vector<uint8_t>;

void put_u32(Bytes& b, uint32_t x) {
  for (int i = 0; i < 4; ++i) b.push_back(static_cast<uint8_t>(x >> (8 * i)));
}
void put_i32(Bytes& b, int32_t x) { put_u32(b, static_cast<uint32_t>(x)); }
void put_u64(Bytes& b, uint64_t x) {
  put_u32(b, static_cast<uint32_t>(x));
  put_u32(b, static_cast<uint32_t>(x >> 32));
}
void put_u16(Bytes& b, uint16_t x) {
  b.push_back(static_cast<uint8_t>(x));
  b.push_back(static_cast<uint8_t>(x >> 8));
}
void set_u32(Bytes& b, size_t at, uint32_t x) {
  for (int i = 0; i < 4; ++i) b[at + i] = static_cast<uint8_t>(x >> (8 * i));
}

class TempDir {
 public:
  TempDir()
      : dir_(std::filesystem::path(::testing::TempDir()) /
             ("sjkv_importers_" + std::to_string(getpid()))) {
    std::filesystem::create_directories(dir_);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  std::string write(const std::string& name, const Bytes& b) const {
    const std::string p = (dir_ / name).string();
    std::ofstream f(p, std::ios::binary | std::ios::trunc);
    f.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
    EXPECT_TRUE(f.good());
    return p;
  }

 private:
  std::filesystem::path dir_;
};

// Deterministic value of (layer, position, channel, K or V): small integers over 256, so every
// value is exact in fp16 and a misplaced row or channel changes it.
float cache_value(uint32_t layer, int32_t pos, uint32_t ch, int kv) {
  uint32_t h = layer * 0x9E3779B1u ^ static_cast<uint32_t>(pos) * 0x85EBCA77u ^ ch * 0xC2B2AE3Du ^
               static_cast<uint32_t>(kv) * 0x27D4EB2Fu;
  h ^= h >> 15;
  h *= 0x2C1B3C6Du;
  h ^= h >> 13;
  return static_cast<float>(static_cast<int32_t>(h % 4095u) - 2047) / 256.0f;
}

// Expects fn to throw FileError whose what() names the file and contains `defect`.
template <class Fn>
void expect_reject(Fn fn, const std::string& path, const std::string& defect) {
  try {
    fn();
    ADD_FAILURE() << "accepted " << path << " (expected: " << defect << ")";
  } catch (const FileError& e) {
    const std::string what = e.what();
    EXPECT_EQ(e.path(), path);
    EXPECT_NE(what.find(path), std::string::npos) << what;
    EXPECT_NE(what.find(defect), std::string::npos) << "expected \"" << defect << "\" in: " << what;
    EXPECT_EQ(what.find('\n'), std::string::npos) << "not one line: " << what;
  } catch (const std::exception& e) {
    ADD_FAILURE() << "not a FileError for " << path << ": " << e.what();
  }
}

// ---------------------------------------------------------------------------------------------
// .kvd

struct KvdBlock {
  uint32_t magic = 0x31445643u;
  int32_t D = 64, G = 16, head = 0;
  std::string name = "tiny-model";
  int32_t token0 = 0;  // first token of the head this block holds (for the value pattern)
  std::function<uint16_t(int kv, int32_t g, int32_t c)> value;  // default: cache_value
};

Bytes kvd_bytes(const std::vector<KvdBlock>& blocks) {
  Bytes b;
  for (const KvdBlock& k : blocks) {
    put_u32(b, k.magic);
    put_i32(b, k.D);
    put_i32(b, k.G);
    put_i32(b, k.head);
    char name[64] = {};
    std::memcpy(name, k.name.data(), std::min<size_t>(k.name.size(), 64));
    b.insert(b.end(), name, name + 64);
    for (int kv = 0; kv < 2; ++kv)
      for (int32_t g = 0; g < k.G; ++g)
        for (int32_t c = 0; c < k.D; ++c)
          put_u16(b, k.value ? k.value(kv, g, c)
                             : f32_to_f16(cache_value(static_cast<uint32_t>(k.head), k.token0 + g,
                                                      static_cast<uint32_t>(c), kv)));
  }
  return b;
}

// Three heads, two blocks each of different G, written out of head order.
std::vector<KvdBlock> kvd_valid_blocks() {
  std::vector<KvdBlock> v;
  auto add = [&](int32_t head, int32_t G, int32_t token0) {
    KvdBlock b;
    b.head = head;
    b.G = G;
    b.token0 = token0;
    v.push_back(b);
  };
  add(1, 32, 0);
  add(0, 32, 0);
  add(2, 16, 0);
  add(2, 16, 16);
  add(0, 16, 32);
  add(1, 16, 32);
  add(2, 16, 32);
  return v;
}

TEST(Kvd, ReadsHeadsAppendedInFileOrder) {
  TempDir tmp;
  const std::string path = tmp.write("tiles.kvd", kvd_bytes(kvd_valid_blocks()));
  const Capture cap = read_kvd(path);
  EXPECT_EQ(cap.model, "tiny-model");
  EXPECT_EQ(cap.source, "kvd:tiles.kvd");
  EXPECT_EQ(cap.head_dim, 64u);
  EXPECT_EQ(cap.kv_heads, 3u);
  EXPECT_EQ(cap.tokens, 48u);
  EXPECT_TRUE(cap.rotated);
  EXPECT_TRUE(cap.token_ids.empty());
  ASSERT_EQ(cap.layers.size(), 1u);
  EXPECT_EQ(cap.layers[0].layer_id, 0u);
  ASSERT_EQ(cap.layers[0].k.size(), cap.values_per_layer());
  ASSERT_EQ(cap.layers[0].v.size(), cap.values_per_layer());
  double norm = 0;
  for (uint32_t t = 0; t < 48; ++t)
    for (uint32_t h = 0; h < 3; ++h)
      for (uint32_t c = 0; c < 64; ++c) {
        const size_t i = (static_cast<size_t>(t) * 3 + h) * 64 + c;
        ASSERT_EQ(cap.layers[0].k[i], f32_to_f16(cache_value(h, static_cast<int32_t>(t), c, 0)))
            << t << " " << h << " " << c;
        ASSERT_EQ(cap.layers[0].v[i], f32_to_f16(cache_value(h, static_cast<int32_t>(t), c, 1)))
            << t << " " << h << " " << c;
        norm += std::fabs(f16_to_f32(cap.layers[0].k[i]));
      }
  EXPECT_GT(norm, 0.0);
}

TEST(Kvd, ModelNameOnlyWhenConsistent) {
  TempDir tmp;
  auto blocks = kvd_valid_blocks();
  blocks[3].name = "other";
  EXPECT_EQ(read_kvd(tmp.write("names.kvd", kvd_bytes(blocks))).model, "");
  blocks = kvd_valid_blocks();
  for (auto& b : blocks) b.name = std::string(64, 'x');  // no terminating NUL
  EXPECT_EQ(read_kvd(tmp.write("long.kvd", kvd_bytes(blocks))).model, std::string(64, 'x'));
}

TEST(Kvd, SingleBlockExtremes) {
  TempDir tmp;
  KvdBlock b;
  b.D = 32;
  b.G = 16;
  EXPECT_EQ(read_kvd(tmp.write("small.kvd", kvd_bytes({b}))).tokens, 16u);
  b.D = 4096;
  EXPECT_EQ(read_kvd(tmp.write("wide.kvd", kvd_bytes({b}))).head_dim, 4096u);
}

struct KvdDefect {
  const char* name;
  std::function<void(std::vector<KvdBlock>&)> edit;
  const char* defect;
};

TEST(Kvd, RejectsEachDefect) {
  TempDir tmp;
  const KvdDefect cases[] = {
      {"bad_magic", [](auto& v) { v[2].magic = 0x31445644u; },
       "block 2 (offset 16544): bad magic 0x31445644 (expected 0x31445643)"},
      {"bad_magic_text", [](auto& v) { v[0].magic = 0x46554747u; }, "bad magic 0x46554747"},
      {"d_not_pow2",
       [](auto& v) {
         for (auto& b : v) b.D = 48;
       },
       "D = 48 is not a power of two"},
      {"d_too_small",
       [](auto& v) {
         for (auto& b : v) b.D = 16;
       },
       "D = 16 is not a power of two in [32, 4096]"},
      {"d_too_large",
       [](auto& v) {
         v.resize(1);
         v[0].D = 8192;
       },
       "D = 8192"},
      {"d_negative",
       [](auto& v) {
         v[0].D = -64;
         v.resize(1);
       },
       "D = -64"},
      {"d_inconsistent", [](auto& v) { v[4].D = 128; }, "D = 128 differs from D = 64 of block 0"},
      {"g_zero", [](auto& v) { v[1].G = 0; }, "G = 0 is not a positive multiple of 16"},
      {"g_not_mult16", [](auto& v) { v[1].G = 24; }, "G = 24"},
      {"g_too_large",
       [](auto& v) {
         v.resize(1);
         v[0].G = 65552;
         v[0].D = 32;
       },
       "G = 65552"},
      {"head_negative", [](auto& v) { v[0].head = -1; }, "head = -1 is outside [0, 4096)"},
      {"head_too_large", [](auto& v) { v[0].head = 4096; }, "head = 4096"},
      {"missing_head",
       [](auto& v) {
         for (auto& b : v)
           if (b.head == 1) b.head = 3;
       },
       "head 1 is missing"},
      {"unequal_counts", [](auto& v) { v.pop_back(); },
       "unequal head token counts: head 2 holds 32 tokens, head 0 holds 48"},
      {"nan_k",
       [](auto& v) {
         v[5].value = [](int kv, int32_t g, int32_t c) -> uint16_t {
           return kv == 0 && g == 3 && c == 7 ? 0x7e00 : 0x3c00;
         };
       },
       "block 5 (head 1): K token 35 channel 7 is NaN"},
      {"inf_v",
       [](auto& v) {
         v[0].value = [](int kv, int32_t g, int32_t c) -> uint16_t {
           return kv == 1 && g == 31 && c == 63 ? 0xfc00 : 0x3c00;
         };
       },
       "block 0 (head 1): V token 31 channel 63 is infinite"},
  };
  for (const auto& c : cases) {
    auto blocks = kvd_valid_blocks();
    c.edit(blocks);
    const std::string path = tmp.write(std::string(c.name) + ".kvd", kvd_bytes(blocks));
    SCOPED_TRACE(c.name);
    expect_reject([&] { read_kvd(path); }, path, c.defect);
  }
}

TEST(Kvd, RejectsEmptyAndMissingFiles) {
  TempDir tmp;
  const std::string empty = tmp.write("empty.kvd", {});
  expect_reject([&] { read_kvd(empty); }, empty, "empty file");
  const std::string missing = empty + ".absent";
  expect_reject([&] { read_kvd(missing); }, missing, "cannot open");
}

TEST(Kvd, RejectsEveryTruncation) {
  TempDir tmp;
  std::vector<KvdBlock> blocks = kvd_valid_blocks();
  blocks.resize(2);
  blocks[0].G = blocks[1].G = 16;
  blocks[0].D = blocks[1].D = 32;
  const Bytes whole = kvd_bytes(blocks);
  ASSERT_NO_THROW(read_kvd(tmp.write("whole.kvd", whole)));
  for (size_t n = 1; n < whole.size(); ++n) {
    const std::string path =
        tmp.write("cut.kvd", Bytes(whole.begin(), whole.begin() + static_cast<ptrdiff_t>(n)));
    SCOPED_TRACE(n);
    // the first block is whole at 2128 bytes, but it is head 1 alone
    expect_reject([&] { read_kvd(path); }, path, n == 2128 ? "head 0 is missing" : "truncated");
  }
  // the count check uses the file size: a huge G*D in the header is refused before allocating
  Bytes big = kvd_bytes({blocks[0]});
  set_u32(big, 8, 65536);
  set_u32(big, 4, 4096);
  const std::string path = tmp.write("big.kvd", big);
  expect_reject([&] { read_kvd(path); }, path, "K and V tiles need 1073741824 bytes");
}

// ---------------------------------------------------------------------------------------------
// llama.cpp state files

constexpr uint32_t kGgsq = 0x67677371u, kGgsn = 0x6767736eu;

struct LCell {
  int32_t pos;
  std::vector<int32_t> seqs{0};
};

struct LLayer {
  uint32_t id = 0;        // layer index for the value pattern
  uint32_t n_embd = 128;  // kv_heads * head_dim
  int32_t k_type = 1, v_type = 1;
  uint64_t k_row = 0, v_row = 0;    // 0: n_embd * element size
  uint32_t v_el = 0, v_n_embd = 0;  // v_trans header, 0: from the type / n_embd
  std::function<float(int kv, int32_t pos, uint32_t ch)> value;  // default: cache_value
};

struct LStream {
  std::vector<LCell> cells;  // file order
  std::vector<LLayer> layers;
  uint32_t v_trans = 0;
  uint32_t n_layer_override = 0;
};

// A hybrid model's recurrent part (the layout at the top of snapshot/src/llama_state.cpp).
struct LRLayer {
  uint32_t id = 0;   // the model's layer index, for the value pattern
  int32_t type = 0;  // F32
  uint64_t row = 0;  // 0: values x element size
};

struct LRecurrent {
  bool present = false;
  std::vector<LCell> cells;  // seqs: empty in a sequence file, as llama.cpp writes it
  uint32_t s_trans = 0, n_layer = 0;
  uint64_t conv_values = 0, delta_values = 0;
  std::vector<LRLayer> conv, delta;
  // value j of (conv 0 / delta 1, layer, cell position); default: state_value
  std::function<float(int which, uint32_t layer, int32_t pos, uint64_t j)> value;
};

struct LState {
  uint32_t magic = kGgsq, version = 3;
  std::vector<int32_t> tokens;
  std::string arch = "llama";
  uint32_t ext_bytes = 0;
  // ggsn 9: output/logits/embeddings sections
  uint32_t n_outputs = 3;
  uint64_t n_logits = 5, n_embd_out = 2;
  std::vector<std::vector<LStream>> sections;  // section -> streams
  LRecurrent recurrent;                        // written after the sections when present
};

// Deterministic recurrent state value: exact in f32 and f16, different per layer, block, cell
// position and index.
float state_value(int which, uint32_t layer, int32_t pos, uint64_t j) {
  return cache_value(layer + 1000u * static_cast<uint32_t>(which + 1), pos, static_cast<uint32_t>(j), 0);
}

constexpr uint64_t kMaxWrite = 1u << 22;

uint32_t el_size(int32_t type) { return type == 0 ? 4 : type == 1 ? 2 : 1; }

void put_value(Bytes& b, int32_t type, float x) {
  if (type == 0)
    put_u32(b, f32_bits(x));
  else if (type == 1)
    put_u16(b, f32_to_f16(x));
  else
    b.push_back(0x11);
}

Bytes llama_bytes(const LState& s) {
  Bytes b;
  put_u32(b, s.magic);
  put_u32(b, s.version);
  put_u32(b, static_cast<uint32_t>(s.tokens.size()));
  for (int32_t t : s.tokens) put_i32(b, t);
  if (s.magic == kGgsn) {
    put_u32(b, static_cast<uint32_t>(s.arch.size()));
    b.insert(b.end(), s.arch.begin(), s.arch.end());
    if (s.version == 9) {
      put_u32(b, s.n_outputs);
      for (uint32_t i = 0; i < s.n_outputs; ++i) put_i32(b, static_cast<int32_t>(i));
      put_u64(b, s.n_logits);
      for (uint64_t i = 0; i < s.n_logits; ++i) put_u32(b, f32_bits(0.5f));
      put_u64(b, s.n_embd_out);
      for (uint64_t i = 0; i < s.n_embd_out; ++i) put_u32(b, f32_bits(-0.25f));
    }
  }
  for (const auto& section : s.sections) {
    put_u32(b, static_cast<uint32_t>(section.size()));
    for (const LStream& st : section) {
      put_u32(b, static_cast<uint32_t>(st.cells.size()));
      if (st.cells.empty()) continue;
      for (const LCell& c : st.cells) {
        put_i32(b, c.pos);
        put_u32(b, static_cast<uint32_t>(c.seqs.size()));
        for (uint32_t i = 0; i < s.ext_bytes; i += 4) put_i32(b, 0x45585421);  // x, y, tok
        for (int32_t q : c.seqs) put_i32(b, q);
      }
      put_u32(b, st.v_trans);
      put_u32(b,
              st.n_layer_override ? st.n_layer_override : static_cast<uint32_t>(st.layers.size()));
      auto val = [](const LLayer& l, int kv, int32_t pos, uint32_t ch) {
        return l.value ? l.value(kv, pos, ch) : cache_value(l.id, pos, ch, kv);
      };
      for (const LLayer& l : st.layers) {
        put_i32(b, l.k_type);
        const uint64_t row =
            l.k_row ? l.k_row : static_cast<uint64_t>(l.n_embd) * el_size(l.k_type);
        put_u64(b, row);
        if (row > kMaxWrite / st.cells.size()) continue;  // a hostile size: no data behind it
        for (const LCell& c : st.cells)
          for (uint64_t i = 0; i < row / el_size(l.k_type); ++i)
            put_value(b, l.k_type, val(l, 0, c.pos, static_cast<uint32_t>(i)));
      }
      for (const LLayer& l : st.layers) {
        put_i32(b, l.v_type);
        if (!st.v_trans) {
          const uint64_t row =
              l.v_row ? l.v_row : static_cast<uint64_t>(l.n_embd) * el_size(l.v_type);
          put_u64(b, row);
          if (row > kMaxWrite / st.cells.size()) continue;
          for (const LCell& c : st.cells)
            for (uint64_t i = 0; i < row / el_size(l.v_type); ++i)
              put_value(b, l.v_type, val(l, 1, c.pos, static_cast<uint32_t>(i)));
        } else {
          put_u32(b, l.v_el ? l.v_el : el_size(l.v_type));
          const uint32_t n = l.v_n_embd ? l.v_n_embd : l.n_embd;
          put_u32(b, n);
          if (n > kMaxWrite / st.cells.size()) continue;
          for (uint32_t ch = 0; ch < n; ++ch)
            for (const LCell& c : st.cells) put_value(b, l.v_type, val(l, 1, c.pos, ch));
        }
      }
    }
  }
  const LRecurrent& r = s.recurrent;
  if (r.present) {
    put_u32(b, static_cast<uint32_t>(r.cells.size()));
    for (const LCell& c : r.cells) {
      put_i32(b, c.pos);
      put_u32(b, static_cast<uint32_t>(c.seqs.size()));
      for (int32_t q : c.seqs) put_i32(b, q);
    }
    put_u32(b, r.s_trans);
    put_u32(b, r.n_layer);
    for (int which = 0; which < 2; ++which) {
      const uint64_t values = which ? r.delta_values : r.conv_values;
      for (const LRLayer& l : which ? r.delta : r.conv) {
        put_i32(b, l.type);
        const uint64_t row = l.row ? l.row : values * el_size(l.type);
        put_u64(b, row);
        if (row > kMaxWrite) continue;  // a hostile size: no data behind it
        for (const LCell& c : r.cells)
          for (uint64_t j = 0; j < row / el_size(l.type); ++j)
            put_value(b, l.type, r.value ? r.value(which, l.id, c.pos, j) : state_value(which, l.id, c.pos, j));
      }
    }
  }
  return b;
}

std::vector<LCell> shuffled_cells(int32_t n, uint32_t seed, int32_t first_pos = 0) {
  std::vector<LCell> cells;
  for (int32_t p = 0; p < n; ++p) cells.push_back({first_pos + p, {0}});
  std::mt19937 rng(seed);
  std::shuffle(cells.begin(), cells.end(), rng);
  return cells;
}

LStream make_stream(std::vector<LCell> cells, uint32_t n_layers, uint32_t first_id, uint32_t n_embd,
                    int32_t k_type, int32_t v_type, uint32_t v_trans) {
  LStream st;
  st.cells = std::move(cells);
  st.v_trans = v_trans;
  for (uint32_t l = 0; l < n_layers; ++l) {
    LLayer layer;
    layer.id = first_id + l;
    layer.n_embd = n_embd;
    layer.k_type = k_type;
    layer.v_type = v_type;
    st.layers.push_back(layer);
  }
  return st;
}

// Checks cap against the value pattern: layer ids `ids` (pattern ids `pattern`), positions.
void expect_cache(const Capture& cap, const std::vector<uint32_t>& pattern,
                  const std::vector<int32_t>& positions, uint32_t kv_heads, uint32_t head_dim,
                  bool exact = true) {
  ASSERT_EQ(cap.layers.size(), pattern.size());
  ASSERT_EQ(cap.tokens, positions.size());
  ASSERT_EQ(cap.kv_heads, kv_heads);
  ASSERT_EQ(cap.head_dim, head_dim);
  double norm = 0;
  for (size_t l = 0; l < pattern.size(); ++l) {
    ASSERT_EQ(cap.layers[l].k.size(), cap.values_per_layer());
    ASSERT_EQ(cap.layers[l].v.size(), cap.values_per_layer());
    for (size_t t = 0; t < positions.size(); ++t)
      for (uint32_t ch = 0; ch < kv_heads * head_dim; ++ch) {
        const size_t i = t * kv_heads * head_dim + ch;
        for (int kv = 0; kv < 2; ++kv) {
          const float want = cache_value(pattern[l], positions[t], ch, kv);
          const uint16_t got = kv == 0 ? cap.layers[l].k[i] : cap.layers[l].v[i];
          if (exact)
            ASSERT_EQ(f16_to_f32(got), want)
                << "layer " << l << " t " << t << " ch " << ch << " kv " << kv;
          else
            ASSERT_EQ(got, f32_to_f16(want));
          norm += std::fabs(f16_to_f32(got));
        }
      }
  }
  EXPECT_GT(norm, 0.0);
}

std::vector<int32_t> iota_pos(int32_t n, int32_t first = 0) {
  std::vector<int32_t> p(static_cast<size_t>(n));
  std::iota(p.begin(), p.end(), first);
  return p;
}

LState seq_state_f16() {
  LState s;
  s.tokens = iota_pos(40, 1000);
  s.sections = {{make_stream(shuffled_cells(40, 7), 3, 0, 4 * 32, 1, 1, 0)}};
  return s;
}

TEST(LlamaState, SeqStateF16SortedByPosition) {
  TempDir tmp;
  const std::string path = tmp.write("seq.bin", llama_bytes(seq_state_f16()));
  LlamaStateOptions opt;
  opt.head_dim = 32;
  const Capture cap = read_llama_state(path, opt);
  EXPECT_EQ(cap.source, "llama.cpp-seq-state:seq.bin");
  EXPECT_EQ(cap.model, "");
  EXPECT_FALSE(cap.rotated);
  EXPECT_EQ(cap.token_ids, iota_pos(40, 1000));
  expect_cache(cap, {0, 1, 2}, iota_pos(40), 4, 32);
  for (uint32_t l = 0; l < 3; ++l) EXPECT_EQ(cap.layers[l].layer_id, l);

  // head_dim 64 halves the heads over the same rows
  opt.head_dim = 64;
  EXPECT_EQ(read_llama_state(path, opt).kv_heads, 2u);
}

// Cells at positions 0 and 5 were renumbered to 0 and 1; a gap is refused, naming it, and
// the file is written to the fuzz corpus as a regression seed.
TEST(LlamaState, GapInPositionsIsRefused) {
  TempDir tmp;
  LState s;
  s.tokens = {7, 8};
  s.sections = {{make_stream({{0, {0}}, {5, {0}}}, 1, 0, 32, 1, 1, 0)}};
  const std::vector<uint8_t> bytes = llama_bytes(s);
  const std::string path = tmp.write("gap.bin", bytes);
  LlamaStateOptions opt;
  opt.head_dim = 32;
  expect_reject([&] { (void)read_llama_state(path, opt); }, path, "positions have a gap: 0 then 5");
  // a run that starts past 0 is kept (a shifted context)
  s.sections = {{make_stream({{6, {0}}, {5, {0}}}, 1, 0, 32, 1, 1, 0)}};
  const Capture cap = read_llama_state(tmp.write("shifted.bin", llama_bytes(s)), opt);
  EXPECT_EQ(cap.tokens, 2u);
  const std::string corpus = std::string(SJKV_SOURCE_DIR) + "/tests/fuzz/corpus/llama_state/regress-position-gap.bin";
  if (std::getenv("SJKV_REGENERATE")) std::ofstream(corpus, std::ios::binary).write(
      reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  std::ifstream in(corpus, std::ios::binary);
  const std::vector<uint8_t> stored((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(stored, bytes) << "write " << path << " to " << corpus;
}

// Found by fuzz_llama_state: a negative token id reached the capture (which then failed its
// own consistency check outside the reader). The reader refuses it, naming the token.
TEST(LlamaState, NegativeTokenIdIsRefused) {
  TempDir tmp;
  LState s = seq_state_f16();
  s.tokens[3] = -16777113;
  const std::string path = tmp.write("negtok.bin", llama_bytes(s));
  LlamaStateOptions opt;
  opt.head_dim = 32;
  expect_reject([&] { (void)read_llama_state(path, opt); }, path, "token 3 has the negative id -16777113");
}

// Found by fuzz_llama_state: an architecture name with a NUL byte became the capture's model
// string (which may not hold one). The reader refuses it.
TEST(LlamaState, NulInArchitectureNameIsRefused) {
  TempDir tmp;
  LState s;
  s.magic = kGgsn;
  s.version = 10;
  s.arch = std::string("gem\0ma3", 7);
  s.sections = {{make_stream(shuffled_cells(4, 1), 1, 0, 32, 1, 1, 0)}};
  const std::string path = tmp.write("nul.bin", llama_bytes(s));
  LlamaStateOptions opt;
  opt.head_dim = 32;
  expect_reject([&] { (void)read_llama_state(path, opt); }, path, "the architecture name contains a NUL byte");
}

TEST(LlamaState, SeqStateF32TransposedV) {
  TempDir tmp;
  LState s;
  s.tokens = iota_pos(5);  // fewer tokens than cells: no token ids
  s.sections = {{make_stream(shuffled_cells(24, 3, 100), 2, 4, 2 * 64, 0, 0, 1)}};
  // f32 values that are not exact in fp16: the reader must round with f32_to_f16
  for (auto& l : s.sections[0][0].layers)
    l.value = [id = l.id](int kv, int32_t pos, uint32_t ch) {
      return cache_value(id, pos, ch, kv) * 1.0001f + 1e-7f;
    };
  const std::string path = tmp.write("seq32.bin", llama_bytes(s));
  LlamaStateOptions opt;
  opt.head_dim = 64;
  const Capture cap = read_llama_state(path, opt);
  EXPECT_TRUE(cap.token_ids.empty());
  ASSERT_EQ(cap.tokens, 24u);
  for (uint32_t l = 0; l < 2; ++l)
    for (uint32_t t = 0; t < 24; ++t)
      for (uint32_t ch = 0; ch < 128; ++ch)
        for (int kv = 0; kv < 2; ++kv) {
          const float x =
              cache_value(4 + l, 100 + static_cast<int32_t>(t), ch, kv) * 1.0001f + 1e-7f;
          const auto& vec = kv == 0 ? cap.layers[l].k : cap.layers[l].v;
          ASSERT_EQ(vec[t * 128 + ch], f32_to_f16(x));
        }
}

TEST(LlamaState, MixedTypesBothVLayouts) {
  TempDir tmp;
  for (uint32_t v_trans = 0; v_trans < 2; ++v_trans) {
    LState s;
    s.tokens = iota_pos(17);
    s.sections = {{make_stream(shuffled_cells(17, 11 + v_trans), 2, 0, 8 * 64, 1, 0, v_trans)}};
    const std::string path = tmp.write("mixed.bin", llama_bytes(s));
    LlamaStateOptions opt;
    opt.head_dim = 64;
    expect_cache(read_llama_state(path, opt), {0, 1}, iota_pos(17), 8, 64);
  }
}

TEST(LlamaState, FullStateV10SelectsSequence) {
  TempDir tmp;
  LState s;
  s.magic = kGgsn;
  s.version = 10;
  s.arch = "gemma3";
  // positions 0..9 of sequence 0 and 0..5 of sequence 1, sharing cells 0..2
  std::vector<LCell> cells;
  for (int32_t p = 0; p < 10; ++p)
    cells.push_back({p, p < 3 ? std::vector<int32_t>{0, 1} : std::vector<int32_t>{0}});
  for (int32_t p = 3; p < 6; ++p) cells.push_back({p, {1}});
  std::mt19937 rng(5);
  std::shuffle(cells.begin(), cells.end(), rng);
  s.sections = {{make_stream(cells, 2, 0, 2 * 32, 1, 1, 1)}};
  const std::string path = tmp.write("ctx.bin", llama_bytes(s));
  LlamaStateOptions opt;
  opt.head_dim = 32;
  opt.seq_id = 0;
  const Capture cap = read_llama_state(path, opt);
  EXPECT_EQ(cap.model, "gemma3");
  EXPECT_EQ(cap.source, "llama.cpp-state:ctx.bin");
  expect_cache(cap, {0, 1}, iota_pos(10), 2, 32);
  opt.seq_id = 1;
  EXPECT_EQ(read_llama_state(path, opt).tokens, 6u);
  opt.seq_id = 2;
  expect_reject([&] { read_llama_state(path, opt); }, path, "no KV cells of sequence 2");
  opt.seq_id = -1;
  expect_reject([&] { read_llama_state(path, opt); }, path,
                "is held by two cells (several sequences? choose one with seq_id)");
}

TEST(LlamaState, FullStateV9SkipsOutputs) {
  TempDir tmp;
  LState s = seq_state_f16();
  s.magic = kGgsn;
  s.version = 9;
  const std::string path = tmp.write("ctx9.bin", llama_bytes(s));
  LlamaStateOptions opt;
  opt.head_dim = 32;
  const Capture cap = read_llama_state(path, opt);
  EXPECT_EQ(cap.model, "llama");
  expect_cache(cap, {0, 1, 2}, iota_pos(40), 4, 32);
}

TEST(LlamaState, SplitStreams) {
  TempDir tmp;
  LState s;
  s.magic = kGgsn;
  s.version = 10;
  std::vector<LCell> a = shuffled_cells(12, 1), b = shuffled_cells(9, 2);
  for (auto& c : b) c.seqs = {1};
  LStream empty;  // a stream of another sequence with no cells
  s.sections = {{make_stream(a, 2, 0, 64, 1, 1, 0), empty, make_stream(b, 2, 0, 64, 1, 1, 0)}};
  const std::string path = tmp.write("streams.bin", llama_bytes(s));
  LlamaStateOptions opt;
  opt.head_dim = 32;
  opt.seq_id = 1;
  expect_cache(read_llama_state(path, opt), {0, 1}, iota_pos(9), 2, 32);
}

TEST(LlamaState, CellExtRecordPerVersion) {
  TempDir tmp;
  for (uint32_t version : {2u, 3u}) {
    LState s = seq_state_f16();
    s.version = version;
    s.ext_bytes = version == 2 ? 8 : 12;
    const std::string path = tmp.write("ext.bin", llama_bytes(s));
    LlamaStateOptions opt;
    opt.head_dim = 32;
    opt.cell_ext = true;
    expect_cache(read_llama_state(path, opt), {0, 1, 2}, iota_pos(40), 4, 32);
    opt.cell_ext = false;  // misread without it, and refused
    EXPECT_THROW(read_llama_state(path, opt), FileError);
  }
}

// iSWA: the full-attention cache (2 layers, every position), then the SWA cache (3 layers, the
// last 8 positions only).
LState iswa_state() {
  LState s;
  s.tokens = iota_pos(30);
  s.sections = {{make_stream(shuffled_cells(30, 21), 2, 0, 128, 1, 1, 0)},
                {make_stream(shuffled_cells(8, 22, 22), 3, 2, 128, 1, 1, 0)}};
  return s;
}

TEST(LlamaState, IswaKeepsListedLayers) {
  TempDir tmp;
  const std::string path = tmp.write("iswa.bin", llama_bytes(iswa_state()));
  LlamaStateOptions opt;
  opt.head_dim = 128;
  opt.layers = {1, 0};
  opt.layer_ids = {11, 5};
  Capture cap = read_llama_state(path, opt);
  expect_cache(cap, {1, 0}, iota_pos(30), 1, 128);
  EXPECT_EQ(cap.layers[0].layer_id, 11u);
  EXPECT_EQ(cap.layers[1].layer_id, 5u);
  EXPECT_EQ(cap.token_ids.size(), 30u);

  opt.layers = {2, 4};  // the SWA layers alone
  opt.layer_ids.clear();
  cap = read_llama_state(path, opt);
  expect_cache(cap, {2, 4}, iota_pos(8, 22), 1, 128);
  EXPECT_EQ(cap.layers[1].layer_id, 4u);

  opt.layers.clear();  // all: the SWA layers hold fewer positions
  expect_reject([&] { read_llama_state(path, opt); }, path,
                "layer 2 holds other positions (8 cells) than layer 0 (30 cells)");

  // a hybrid-style file: one section, then bytes in another layout
  Bytes b = llama_bytes(iswa_state());
  b.resize(b.size() - 100);
  const std::string hybrid = tmp.write("hybrid.bin", b);
  opt.kv_sections = 1;
  expect_cache(read_llama_state(hybrid, opt), {0, 1}, iota_pos(30), 1, 128);
  opt.kv_sections = 3;
  expect_reject([&] { read_llama_state(path, opt); }, path,
                "the file holds 2 KV cache sections, 3 were asked for");
}

TEST(LlamaState, SkipsUnkeptQuantizedLayer) {
  TempDir tmp;
  LState s = seq_state_f16();
  LLayer& q = s.sections[0][0].layers[1];
  q.k_type = q.v_type = 8;  // Q8_0: 34 bytes per 32 values
  q.k_row = q.v_row = 136;
  const std::string path = tmp.write("q8.bin", llama_bytes(s));
  LlamaStateOptions opt;
  opt.head_dim = 32;
  opt.layers = {0, 2};
  expect_cache(read_llama_state(path, opt), {0, 2}, iota_pos(40), 4, 32);
  opt.layers.clear();
  expect_reject([&] { read_llama_state(path, opt); }, path, "layer 1 K cache type Q8_0");
}

TEST(LlamaState, OptionErrors) {
  TempDir tmp;
  const std::string path = tmp.write("opt.bin", llama_bytes(seq_state_f16()));
  LlamaStateOptions opt;
  EXPECT_THROW(read_llama_state(path, opt), std::invalid_argument);  // head_dim not given
  opt.head_dim = 48;
  EXPECT_THROW(read_llama_state(path, opt), std::invalid_argument);
  opt.head_dim = 32;
  opt.layers = {1, 1};
  EXPECT_THROW(read_llama_state(path, opt), std::invalid_argument);
  opt.layers = {1};
  opt.layer_ids = {1, 2};
  EXPECT_THROW(read_llama_state(path, opt), std::invalid_argument);
  opt.layers = {3};
  opt.layer_ids.clear();
  expect_reject([&] { read_llama_state(path, opt); }, path,
                "layer 3 was asked for, the file holds 3 layers");
  opt.layers.clear();
  opt.layer_ids = {1, 2};
  expect_reject([&] { read_llama_state(path, opt); }, path,
                "2 layer ids were given for the file's 3 layers");
  opt.layer_ids.clear();
  opt.head_dim = 256;
  expect_reject([&] { read_llama_state(path, opt); }, path,
                "layer 0: row of 128 values is not a multiple of head_dim 256");
}

struct LDefect {
  const char* name;
  std::function<void(LState&)> edit;
  const char* defect;
  std::function<void(Bytes&)> patch = nullptr;  // after writing
};

TEST(LlamaState, RejectsEachDefect) {
  TempDir tmp;
  auto first = [](LState& s) -> LStream& { return s.sections[0][0]; };
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  const LDefect cases[] = {
      {"bad_magic", [](LState& s) { s.magic = 0x67676c61u; }, "bad magic 0x67676c61"},
      {"future_seq_version", [](LState& s) { s.version = 4; },
       "sequence state ('ggsq') version 4 is newer than"},
      {"old_seq_version", [](LState& s) { s.version = 1; }, "version 1 is older than"},
      {"future_ctx_version",
       [](LState& s) {
         s.magic = kGgsn;
         s.version = 11;
       },
       "state ('ggsn') version 11 is newer than"},
      {"old_ctx_version",
       [](LState& s) {
         s.magic = kGgsn;
         s.version = 8;
       },
       "version 8 is older than"},
      {"quantized_k",
       [&](LState& s) {
         first(s).layers[1].k_type = 8;
         first(s).layers[1].k_row = 136;
       },
       "layer 1 K cache type Q8_0 (ggml type 8) is not read"},
      {"bf16_v",
       [&](LState& s) {
         first(s).layers[2].v_type = 30;
         first(s).layers[2].v_row = 256;
       },
       "layer 2 V cache type BF16"},
      {"quantized_v_trans",
       [&](LState& s) {
         first(s).v_trans = 1;
         first(s).layers[0].v_type = 2;
         first(s).layers[0].v_el = 18;
       },
       "layer 0 V cache type Q4_0"},
      {"token_count_past_eof", [](LState& s) { s.tokens.clear(); },
       "token count (1073741824 x 4 bytes) runs past the end",
       [](Bytes& b) { set_u32(b, 8, 0x40000000u); }},
      {"cell_count_past_eof", [](LState&) {}, "cell count (1000000 x 12 bytes) runs past the end",
       [](Bytes& b) { set_u32(b, 12 + 40 * 4 + 4, 1000000u); }},
      {"stream_count", [](LState&) {}, "stream count 257 outside 1..256",
       [](Bytes& b) { set_u32(b, 12 + 40 * 4, 257u); }},
      {"k_row_past_eof", [&](LState& s) { first(s).layers[0].k_row = 1ull << 40; },
       "layer 0 K data (1099511627776 x 40 bytes) runs past the end"},
      {"k_row_overflow", [&](LState& s) { first(s).layers[0].k_row = ~0ull; }, "runs past the end"},
      {"v_trans_n_embd_past_eof",
       [&](LState& s) {
         first(s).v_trans = 1;
         first(s).layers[1].v_n_embd = 0x7fffffff;
       },
       "layer 1 V data (2147483647 x 80 bytes) runs past the end"},
      {"layer_count_past_eof", [&](LState& s) { first(s).n_layer_override = 0x10000000; },
       "layer count (268435456 x 12 bytes) runs past the end"},
      {"nan_k",
       [&](LState& s) {
         first(s).layers[1].value = [=](int kv, int32_t pos, uint32_t ch) {
           return kv == 0 && pos == 17 && ch == 33 ? nan : 1.0f;
         };
       },
       "layer 1 K cell"},
      {"nan_k_names_channel",
       [&](LState& s) {
         first(s).layers[1].value = [=](int kv, int32_t pos, uint32_t ch) {
           return kv == 0 && pos == 17 && ch == 33 ? nan : 1.0f;
         };
       },
       "(pos 17) channel 33 is NaN"},
      {"inf_v_trans_f32",
       [&](LState& s) {
         first(s).v_trans = 1;
         first(s).layers[2].v_type = 0;
         first(s).layers[2].value = [=](int kv, int32_t pos, uint32_t ch) {
           return kv == 1 && pos == 39 && ch == 127 ? -inf : 1.0f;
         };
       },
       "(pos 39) channel 127 is infinite"},
      {"f32_overflows_fp16",
       [&](LState& s) {
         first(s).layers[0].k_type = 0;
         first(s).layers[0].value = [](int kv, int32_t pos, uint32_t ch) {
           return kv == 0 && pos == 2 && ch == 5 ? 70000.0f : 1.0f;
         };
       },
       "(pos 2) channel 5 = 70000.000000 overflows fp16"},
      {"v_trans_flag", [&](LState& s) { first(s).v_trans = 2; }, "v_trans flag 2 is not 0 or 1"},
      {"two_seq_ids_in_seq_file",
       [&](LState& s) {
         first(s).cells[4].seqs = {0, 1};
       },
       "cell 4: 2 sequence ids (a sequence state holds exactly 1)"},
      {"seq_id_range",
       [&](LState& s) {
         s.magic = kGgsn;
         s.version = 10;
         first(s).cells[4].seqs = {300};
       },
       "cell 4: sequence id 300 outside [0, 256)"},
      {"negative_position", [&](LState& s) { first(s).cells[9].pos = -3; },
       "cell 9: negative position -3"},
      {"duplicate_position", [&](LState& s) { first(s).cells[9].pos = first(s).cells[10].pos; },
       "is held by two cells"},
      {"k_row_not_whole",
       [&](LState& s) {
         first(s).layers[0].k_row = 255;
         first(s).layers[0].value = [](int, int32_t, uint32_t) { return 1.0f; };
       },
       "layer 0 K row size 255 is not a whole number of F16 values"},
      {"v_row_mismatch", [&](LState& s) { first(s).layers[1].v_row = 512; },
       "layer 1: V row size 512 does not hold the K row's 128 values"},
      {"v_trans_el_mismatch",
       [&](LState& s) {
         first(s).v_trans = 1;
         first(s).layers[1].v_el = 4;
       },
       "layer 1: V element size 4 does not match type F16"},
      {"v_trans_n_embd_mismatch",
       [&](LState& s) {
         first(s).v_trans = 1;
         first(s).layers[1].v_n_embd = 64;
       },
       "layer 1: V row length 64 differs from the K row's 128"},
      {"kv_heads_differ", [&](LState& s) { first(s).layers[2].n_embd = 64; },
       "layer 2: rows of 64 values, layer 0 has 128"},
      {"no_cells", [&](LState& s) { first(s).cells.clear(); }, "no KV cells"},
      {"no_kv_state", [&](LState& s) { s.sections.clear(); }, "no KV cache state after the header"},
      {"trailing_garbage", [](LState&) {}, "cell count (7 x 12 bytes) runs past the end",
       [](Bytes& b) {
         put_u32(b, 1);
         put_u32(b, 7);
       }},
      {"arch_name_length",
       [](LState& s) {
         s.magic = kGgsn;
         s.version = 10;
         s.arch = std::string(300, 'a');
       },
       "architecture name length 300 exceeds 256"},
      {"v9_logits_past_eof",
       [](LState& s) {
         s.magic = kGgsn;
         s.version = 9;
         s.n_logits = 0;
       },
       "logits count (4611686018427387904 x 4 bytes) runs past the end",
       [](Bytes& b) {
         const size_t at = 12 + 40 * 4 + 4 + 5 + 4 + 3 * 4;
         set_u32(b, at, 0);
         set_u32(b, at + 4, 0x40000000u);
       }},
  };
  for (const auto& c : cases) {
    LState s = seq_state_f16();
    c.edit(s);
    Bytes b = llama_bytes(s);
    if (c.patch) c.patch(b);
    const std::string path = tmp.write(std::string(c.name) + ".bin", b);
    SCOPED_TRACE(c.name);
    LlamaStateOptions opt;
    opt.head_dim = 32;
    expect_reject([&] { read_llama_state(path, opt); }, path, c.defect);
  }
}

// ---- Hybrid models (Qwen 3.5): the attention cache, then the recurrent state -----------------
//
// 8 main layers, full attention at 3 and 7 (2 KV heads of 32), Gated DeltaNet state at the
// other six: Kc 4, S 8, one key head and two value heads, so conv rows of 3 x (2 x 8 + 16) values
// and delta rows of 8 x 16; 12 tokens; the cells carry the 12-byte ext record of an iM-RoPE
// model (ggsq 3 / ggsn 10).
constexpr uint64_t kConv = 96, kDelta = 128;
const std::vector<uint32_t> kRecurrentLayers = {0, 1, 2, 4, 5, 6};

LRecurrent hybrid_recurrent(std::vector<LCell> cells) {
  LRecurrent r;
  r.present = true;
  r.cells = std::move(cells);
  r.n_layer = 8;
  r.conv_values = kConv;
  r.delta_values = kDelta;
  for (uint32_t id : kRecurrentLayers) {
    r.conv.push_back({id, 0, 0});
    r.delta.push_back({id, 0, 0});
  }
  return r;
}

LState hybrid_seq_state() {
  LState s;
  s.tokens = iota_pos(12, 500);
  s.ext_bytes = 12;
  s.sections = {{make_stream(shuffled_cells(12, 31), 2, 0, 2 * 32, 1, 1, 0)}};
  s.recurrent = hybrid_recurrent({{11, {}}});  // one cell, the last position, no sequence ids
  return s;
}

LlamaStateOptions hybrid_options() {
  LlamaStateOptions o;
  o.head_dim = 32;
  o.cell_ext = true;
  o.layer_ids = {3, 7};
  o.recurrent.n_layer = 8;
  o.recurrent.layers = kRecurrentLayers;
  o.recurrent.conv_values = kConv;
  o.recurrent.delta_values = kDelta;
  return o;
}

void expect_state(const LlamaRecurrentState& st, const std::vector<int32_t>& cell_pos) {
  EXPECT_EQ(st.layers, kRecurrentLayers);
  ASSERT_EQ(st.cell_pos, cell_pos);
  ASSERT_EQ(st.conv.size(), kRecurrentLayers.size());
  ASSERT_EQ(st.delta.size(), kRecurrentLayers.size());
  double norm = 0;
  for (size_t l = 0; l < kRecurrentLayers.size(); ++l)
    for (int which = 0; which < 2; ++which) {
      const std::vector<float>& v = which ? st.delta[l] : st.conv[l];
      const uint64_t n = which ? kDelta : kConv;
      ASSERT_EQ(v.size(), cell_pos.size() * n);
      for (size_t c = 0; c < cell_pos.size(); ++c)
        for (uint64_t j = 0; j < n; ++j) {
          ASSERT_EQ(v[c * n + j], state_value(which, kRecurrentLayers[l], cell_pos[c], j))
              << (which ? "delta" : "conv") << " layer " << kRecurrentLayers[l] << " cell " << c << " value " << j;
          norm += std::fabs(v[c * n + j]);
        }
    }
  EXPECT_GT(norm, 0.0);
}

TEST(LlamaStateHybrid, SeqStateReadsKvAndRecurrentState) {
  TempDir tmp;
  const std::string path = tmp.write("hybrid.bin", llama_bytes(hybrid_seq_state()));
  const LlamaStateOptions opt = hybrid_options();
  LlamaRecurrentState st;
  const Capture cap = read_llama_state(path, opt, &st);
  expect_cache(cap, {0, 1}, iota_pos(12), 2, 32);
  EXPECT_EQ(cap.layers[0].layer_id, 3u);
  EXPECT_EQ(cap.layers[1].layer_id, 7u);
  EXPECT_EQ(cap.token_ids, iota_pos(12, 500));
  expect_state(st, {11});
  // Without an output the state is skipped, its sizes still checked.
  expect_cache(read_llama_state(path, opt), {0, 1}, iota_pos(12), 2, 32);
  // F16 state rows (llama.cpp writes F32; F16 is read too).
  LState h = hybrid_seq_state();
  for (LRLayer& l : h.recurrent.conv) l.type = 1;
  const std::string f16 = tmp.write("hybrid-f16.bin", llama_bytes(h));
  LlamaRecurrentState st16;
  (void)read_llama_state(f16, opt, &st16);
  expect_state(st16, {11});
  // The older way (one section, the rest ignored) still reads the KV cache...
  LlamaStateOptions legacy = opt;
  legacy.recurrent = {};
  legacy.kv_sections = 1;
  expect_cache(read_llama_state(path, legacy), {0, 1}, iota_pos(12), 2, 32);
  // ...but without either the recurrent part is never taken for a second KV cache section.
  legacy.kv_sections = 0;
  EXPECT_THROW((void)read_llama_state(path, legacy), FileError);
}

TEST(LlamaStateHybrid, FullStateSelectsSequence) {
  TempDir tmp;
  LState s;
  s.magic = kGgsn;
  s.version = 10;
  s.arch = "qwen35";
  s.ext_bytes = 12;
  // sequence 0 at positions 0..11, sequence 1 at 0..5 (own cells); one recurrent cell each
  std::vector<LCell> cells;
  for (int32_t p = 0; p < 12; ++p) cells.push_back({p, {0}});
  for (int32_t p = 0; p < 6; ++p) cells.push_back({p, {1}});
  std::mt19937 rng(8);
  std::shuffle(cells.begin(), cells.end(), rng);
  s.sections = {{make_stream(cells, 2, 0, 2 * 32, 0, 0, 1)}};
  s.recurrent = hybrid_recurrent({{5, {1}}, {11, {0}}});
  const std::string path = tmp.write("hybrid.ggsn", llama_bytes(s));
  LlamaStateOptions opt = hybrid_options();
  LlamaRecurrentState st;
  for (int32_t seq : {0, 1}) {
    opt.seq_id = seq;
    const Capture cap = read_llama_state(path, opt, &st);
    EXPECT_EQ(cap.model, "qwen35");
    expect_cache(cap, {0, 1}, iota_pos(seq ? 6 : 12), 2, 32);
    expect_state(st, {seq ? 5 : 11});
  }
  opt.seq_id = 2;
  expect_reject([&] { read_llama_state(path, opt, &st); }, path, "no KV cells of sequence 2");
}

// What the model's geometry gives (sjkv-encode encode --model): the same options, and a draft
// (nextn) block is no obstacle in a hybrid, where it has neither KV nor state.
TEST(LlamaStateHybrid, OptionsFromTheModelsGeometry) {
  ModelGeometry g;
  g.architecture = "qwen35";
  g.n_layers = 9;
  g.layers.resize(9);
  for (uint32_t i = 0; i < 9; ++i) {
    LayerInfo& l = g.layers[i];
    l.kind = i == 8 ? LayerKind::nextn : (i + 1) % 4 == 0 ? LayerKind::full_attention : LayerKind::recurrent;
    l.n_head = 4;
    l.n_head_kv = 2;
    l.head_dim_k = l.head_dim_v = 32;
  }
  g.recurrent = {4, 16, 8, 2, 1};  // Kc, inner_size, S, Hv, Hk: the test file's shape
  g.hybrid_memory = true;
  g.state_cell_ext = true;
  const ImportOptions io = import_options_for(g);
  EXPECT_EQ(io.head_dim, 32u);
  EXPECT_EQ(io.kv_sections, 0u);
  EXPECT_TRUE(io.cell_ext);
  EXPECT_EQ(io.layer_ids, (std::vector<uint32_t>{3, 7}));
  EXPECT_TRUE(io.layers.empty());
  EXPECT_EQ(io.recurrent.n_layer, 8u);
  EXPECT_EQ(io.recurrent.layers, kRecurrentLayers);
  EXPECT_EQ(io.recurrent.conv_values, kConv);
  EXPECT_EQ(io.recurrent.delta_values, kDelta);
  TempDir tmp;
  const std::string path = tmp.write("hybrid.bin", llama_bytes(hybrid_seq_state()));
  expect_cache(load_capture_any(path, io), {0, 1}, iota_pos(12), 2, 32);
  // Another model's rows disagree with the file's: one line naming both.
  g.recurrent.group_count = 2;  // conv 3 x (2 x 2 x 8 + 16) = 144 values
  expect_reject([&] { (void)load_capture_any(path, import_options_for(g)); }, path,
                "layer 0 recurrent conv state: rows of 384 bytes, the model's conv state is 144 values (576 bytes in F32)");
  // A dense model with a draft block is still refused (its KV cache may hold the block).
  g.hybrid_memory = false;
  g.recurrent = {};
  EXPECT_THROW((void)import_options_for(g), std::invalid_argument);
}

TEST(LlamaStateHybrid, RejectsEachDefect) {
  TempDir tmp;
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const LDefect cases[] = {
      {"no_recurrent_part", [](LState& s) { s.recurrent.present = false; },
       "the file ends after the KV cache: a hybrid model's state has its recurrent part next"},
      {"truncated_delta", [](LState&) {}, "runs past the end", [](Bytes& b) { b.resize(b.size() - 100); }},
      {"truncated_in_header", [](LState&) {}, "truncated: layer 0 recurrent delta state row size at offset",
       [](Bytes& b) { b.resize(b.size() - 6 * (kDelta * 4 + 12) + 6); }},
      {"conv_row_size", [](LState& s) { s.recurrent.conv[2].row = 388; },
       "layer 2 recurrent conv state: rows of 388 bytes, the model's conv state is 96 values (384 bytes in F32)"},
      {"delta_row_size", [](LState& s) { s.recurrent.delta[5].row = 256; },
       "layer 6 recurrent delta state: rows of 256 bytes, the model's delta state is 128 values (512 bytes in F32)"},
      {"conv_row_huge", [](LState& s) { s.recurrent.conv[0].row = 1ull << 62; },
       "layer 0 recurrent conv state: rows of 4611686018427387904 bytes"},
      {"conv_type", [](LState& s) { s.recurrent.conv[1].type = 8; },
       "layer 1 recurrent conv state type Q8_0 (ggml type 8) is not read: only F32 (what llama.cpp writes) and F16"},
      {"fewer_layers_in_file", [](LState& s) { s.recurrent.conv.pop_back(); },
       "layer 6 recurrent conv state: rows of 512 bytes, the model's conv state is 96 values"},
      {"layer_count", [](LState& s) { s.recurrent.n_layer = 9; },
       "the recurrent state counts 9 layers, the model has 8 (not this model's state?)"},
      {"two_cells_in_seq_file", [](LState& s) { s.recurrent.cells.push_back({10, {}}); },
       "recurrent cell count 2 exceeds 1 (llama.cpp keeps one cell per sequence)"},
      {"cell_count_huge", [](LState&) {}, "recurrent cell count 4000000000 exceeds 1",
       [](Bytes& b) {
         const size_t at = b.size() - 6 * 2 * 12 - 6 * (kConv + kDelta) * 4 - 8 - 8 - 4;
         set_u32(b, at, 4000000000u);
       }},
      {"seq_id_in_seq_file", [](LState& s) { s.recurrent.cells[0].seqs = {0}; },
       "recurrent cell 0: 1 sequence ids (a sequence state writes none there)"},
      {"position", [](LState& s) { s.recurrent.cells[0].pos = -2; }, "recurrent cell 0: position -2 (-1 or more)"},
      {"s_trans", [](LState& s) { s.recurrent.s_trans = 1; },
       "recurrent s_trans flag 1: a transposed state is not read (llama.cpp writes 0)"},
      {"s_trans_junk", [](LState& s) { s.recurrent.s_trans = 7; }, "recurrent s_trans flag 7 is not 0"},
      {"trailing_bytes", [](LState&) {}, "4 bytes after the recurrent state, where a hybrid model's file ends",
       [](Bytes& b) { put_u32(b, 0); }},
      {"kv_layers_vs_model",
       [](LState& s) { s.sections = {{make_stream(shuffled_cells(12, 31), 3, 0, 2 * 32, 1, 1, 0)}}; },
       "the attention cache holds 3 layers, the model has 2 full-attention layers (not this model's state?)"},
      {"nan_conv",
       [=](LState& s) {
         s.recurrent.value = [=](int which, uint32_t layer, int32_t, uint64_t j) {
           return which == 0 && layer == 2 && j == 7 ? nan : 0.5f;
         };
       },
       "layer 2 recurrent conv state cell 0 value 7 is NaN"},
  };
  for (const auto& c : cases) {
    LState s = hybrid_seq_state();
    c.edit(s);
    Bytes b = llama_bytes(s);
    if (c.patch) c.patch(b);
    const std::string path = tmp.write(std::string(c.name) + ".bin", b);
    SCOPED_TRACE(c.name);
    LlamaRecurrentState st;
    expect_reject([&] { read_llama_state(path, hybrid_options(), &st); }, path, c.defect);
  }
  // Full state files: ids are required, each in range; up to 256 cells.
  LState s = hybrid_seq_state();
  s.magic = kGgsn;
  s.version = 10;
  for (const auto& [cells, defect] : std::vector<std::pair<std::vector<LCell>, std::string>>{
           {{{11, {}}}, "recurrent cell 0: 0 sequence ids (expected 1..256)"},
           {{{11, {300}}}, "recurrent cell 0: sequence id 300 outside [0, 256)"},
           {std::vector<LCell>(257, LCell{11, {0}}), "recurrent cell count 257 exceeds 256"}}) {
    s.recurrent.cells = cells;
    const std::string path = tmp.write("ctx-defect.bin", llama_bytes(s));
    expect_reject([&] { read_llama_state(path, hybrid_options()); }, path, defect);
  }
}

// A NaN is only found where the values are read: skipping checks sizes alone.
TEST(LlamaStateHybrid, SkippedStateIsNotValueChecked) {
  TempDir tmp;
  LState s = hybrid_seq_state();
  s.recurrent.value = [](int, uint32_t, int32_t, uint64_t) { return std::numeric_limits<float>::quiet_NaN(); };
  const std::string path = tmp.write("nan.bin", llama_bytes(s));
  EXPECT_NO_THROW((void)read_llama_state(path, hybrid_options()));
  LlamaRecurrentState st;
  expect_reject([&] { read_llama_state(path, hybrid_options(), &st); }, path, "is NaN");
}

TEST(LlamaStateHybrid, RejectsEveryTruncation) {
  TempDir tmp;
  LState s = hybrid_seq_state();
  s.recurrent.conv_values = 6;
  s.recurrent.delta_values = 4;
  s.tokens.resize(3);
  s.sections = {{make_stream(shuffled_cells(3, 9), 2, 0, 32, 1, 0, 0)}};
  s.recurrent.cells = {{2, {}}};
  const Bytes whole = llama_bytes(s);
  LlamaStateOptions opt = hybrid_options();
  opt.recurrent.conv_values = 6;
  opt.recurrent.delta_values = 4;
  LlamaRecurrentState st;
  ASSERT_NO_THROW(read_llama_state(tmp.write("whole.bin", whole), opt, &st));
  for (size_t n = 0; n < whole.size(); ++n) {
    const std::string path = tmp.write("cut.bin", Bytes(whole.begin(), whole.begin() + static_cast<ptrdiff_t>(n)));
    SCOPED_TRACE(n);
    try {
      read_llama_state(path, opt, &st);
      ADD_FAILURE() << "accepted a file cut at " << n;
    } catch (const FileError& e) {
      EXPECT_NE(std::string(e.what()).find(path), std::string::npos);
    }
  }
}

TEST(LlamaStateHybrid, OptionErrors) {
  TempDir tmp;
  const std::string path = tmp.write("hybrid.bin", llama_bytes(hybrid_seq_state()));
  LlamaStateOptions opt = hybrid_options();
  opt.kv_sections = 2;
  EXPECT_THROW(read_llama_state(path, opt), std::invalid_argument);
  opt = hybrid_options();
  opt.recurrent.layers = {0, 2, 1};
  EXPECT_THROW(read_llama_state(path, opt), std::invalid_argument);
  opt.recurrent.layers = {0, 8};
  EXPECT_THROW(read_llama_state(path, opt), std::invalid_argument);
  opt = hybrid_options();
  opt.recurrent.conv_values = 0;
  EXPECT_THROW(read_llama_state(path, opt), std::invalid_argument);
  opt.recurrent.conv_values = 1ull << 32;
  EXPECT_THROW(read_llama_state(path, opt), std::invalid_argument);
  opt = hybrid_options();
  opt.recurrent.n_layer = 0;
  EXPECT_THROW(read_llama_state(path, opt), std::invalid_argument);
  opt = hybrid_options();
  opt.kv_sections = 1;  // 0 and 1 both mean the one section
  EXPECT_NO_THROW(read_llama_state(path, opt));
}

TEST(LlamaState, PreStreamLayoutGetsAHint) {
  // llama.cpp before n_stream wrote the cell count right after the tokens, under version 2
  TempDir tmp;
  for (uint32_t magic : {kGgsq, kGgsn}) {
    LState s = seq_state_f16();
    s.magic = magic;
    s.version = magic == kGgsq ? 2 : 9;
    Bytes b = llama_bytes(s);
    const size_t at =
        12 + 40 * 4 + (magic == kGgsq ? 0 : 4 + 5 + 4 + 3 * 4 + 8 + 5 * 4 + 8 + 2 * 4);
    ASSERT_EQ(b[at], 1u);  // n_stream
    b.erase(b.begin() + static_cast<ptrdiff_t>(at), b.begin() + static_cast<ptrdiff_t>(at) + 4);
    const std::string path = tmp.write("prestream.bin", b);
    LlamaStateOptions opt;
    opt.head_dim = 32;
    expect_reject([&] { read_llama_state(path, opt); }, path,
                  "file written before llama.cpp added n_stream, mid-2025, has another layout");
  }
}

TEST(LlamaState, RejectsEveryTruncation) {
  TempDir tmp;
  for (uint32_t kind = 0; kind < 2; ++kind) {
    LState s;
    s.magic = kind ? kGgsn : kGgsq;
    s.version = kind ? 9 : 3;
    s.tokens = iota_pos(3);
    s.sections = {{make_stream(shuffled_cells(3, 9), 2, 0, 32, 1, 0, kind)}};
    const Bytes whole = llama_bytes(s);
    LlamaStateOptions opt;
    opt.head_dim = 32;
    ASSERT_NO_THROW(read_llama_state(tmp.write("whole.bin", whole), opt));
    for (size_t n = 0; n < whole.size(); ++n) {
      const std::string path =
          tmp.write("cut.bin", Bytes(whole.begin(), whole.begin() + static_cast<ptrdiff_t>(n)));
      SCOPED_TRACE(n);
      try {
        read_llama_state(path, opt);
        ADD_FAILURE() << "accepted a file cut at " << n;
      } catch (const FileError& e) {
        EXPECT_NE(std::string(e.what()).find(path), std::string::npos);
      }
    }
  }
}

TEST(LlamaState, RejectsMissingAndDirectory) {
  TempDir tmp;
  LlamaStateOptions opt;
  opt.head_dim = 32;
  const std::string p = tmp.write("x.bin", {});
  expect_reject([&] { read_llama_state(p, opt); }, p, "truncated: magic needs 4 bytes");
  const std::string dir = p.substr(0, p.size() - 5);
  expect_reject([&] { read_llama_state(dir, opt); }, dir, "not a regular file");
  expect_reject([&] { read_llama_state(p + ".absent", opt); }, p + ".absent", "cannot open");
}

// A FIFO given as an input is refused at once by every reader (open() of one blocked until a
// writer came, forever for a FIFO nobody writes).
TEST(Inputs, FifoRefusedWithoutBlocking) {
  TempDir tmp;
  const std::string f = tmp.write("x.bin", {}) + ".fifo";
  ASSERT_EQ(::mkfifo(f.c_str(), 0600), 0);
  const std::string why = "is a FIFO, not a regular file";
  LlamaStateOptions opt;
  opt.head_dim = 32;
  expect_reject([&] { (void)sniff_input(f); }, f, why);
  expect_reject([&] { (void)load_capture_any(f, ImportOptions{}); }, f, why);
  expect_reject([&] { (void)read_capture(f); }, f, why);
  expect_reject([&] { (void)read_snapshot(f); }, f, why);
  expect_reject([&] { (void)read_snapshot_any(f); }, f, why);
  expect_reject([&] { (void)read_trajectory(f); }, f, why);
  expect_reject([&] { (void)read_kvd(f); }, f, why);
  expect_reject([&] { (void)read_llama_state(f, opt); }, f, why);
  expect_reject([&] { (void)read_state_stream(f, StateImportOptions{}); }, f, why);
  expect_reject([&] { (void)GgufFile::open(f); }, f, why);
  expect_reject([&] { (void)sha256_file_hex(f); }, f, why);
  CodebookFileKind kind;
  expect_reject([&] { (void)read_codebook_any(f, &kind); }, f, why);
  EXPECT_FALSE(is_hdf5_file(f));
  ::unlink(f.c_str());
}

}  // namespace
}  // namespace sjkv
