// sjkv_fuzz_seeds CORPUS_DIR [REJECT_DIR]: writes the seed inputs of the fuzz targets into
// CORPUS_DIR/<reader>/ (capture, snapshot, kvd, llama_state, gguf, trajectory): small valid
// files made by the project's own writers (write_capture, encode_capture + write_snapshot,
// write_trajectory) or, for the
// formats sjkv only reads, by the documented byte layouts (the same layouts the writers in
// tests/snapshot/test_importers.cpp and tests/snapshot/test_gguf.cpp use), plus a few invalid ones. With
// REJECT_DIR (tests/reject) it also copies some of the must-reject HDF5 files. The output is
// deterministic; files a fuzzer found later (crash-*, regress-*) are left alone.
#include <sys/stat.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "sjkv/fp16.h"
#include "sjkv/io/capture_file.h"
#include "sjkv/io/encode.h"
#include "sjkv/io/snapshot_file.h"
#include "sjkv/replay/reference.h"
#include "sjkv/staging.h"

using namespace sjkv;

namespace {

using Bytes = std::vector<uint8_t>;
std::string g_root;

void put(Bytes& b, uint64_t v, int n) {
  for (int i = 0; i < n; ++i) b.push_back(static_cast<uint8_t>(v >> (8 * i)));
}
void put_u32(Bytes& b, uint32_t v) { put(b, v, 4); }
void put_u64(Bytes& b, uint64_t v) { put(b, v, 8); }
void put_str(Bytes& b, const std::string& s) {
  put_u64(b, s.size());
  b.insert(b.end(), s.begin(), s.end());
}
uint32_t f32_bits_of(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

std::string dir_of(const char* reader) {
  const std::string d = g_root + "/" + reader;
  ::mkdir(g_root.c_str(), 0755);
  ::mkdir(d.c_str(), 0755);
  return d;
}

void write_bytes(const char* reader, const std::string& name, const Bytes& b) {
  const std::string p = dir_of(reader) + "/" + name;
  std::ofstream f(p, std::ios::binary);
  f.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
  if (!f) throw std::runtime_error("cannot write " + p);
}

Bytes read_bytes(const std::string& p) {
  std::ifstream f(p, std::ios::binary);
  if (!f) throw std::runtime_error("cannot read " + p);
  return Bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

Bytes truncated(Bytes b, size_t keep) {
  b.resize(std::min(keep, b.size()));
  return b;
}

float value(uint32_t layer, uint32_t t, uint32_t h, uint32_t d, int kv) {
  return std::sin(0.37f * static_cast<float>(t) + 0.11f * static_cast<float>(d) + static_cast<float>(layer + h) +
                  0.5f * static_cast<float>(kv)) *
         (1.0f + static_cast<float>(d % 7) * 0.25f);
}

Capture make_capture(uint32_t D, uint32_t H, uint32_t T, std::vector<uint32_t> ids, bool rotated, bool tokens) {
  Capture c;
  c.model = "seed-model";
  c.source = "sjkv_fuzz_seeds";
  c.head_dim = D;
  c.kv_heads = H;
  c.tokens = T;
  c.rotated = rotated;
  c.rotation_block = rotated ? D : 0;
  if (tokens)
    for (uint32_t t = 0; t < T; ++t) c.token_ids.push_back(static_cast<int32_t>(t * 7 + 3));
  for (uint32_t id : ids) {
    CaptureLayer l;
    l.layer_id = id;
    for (uint32_t t = 0; t < T; ++t)
      for (uint32_t h = 0; h < H; ++h)
        for (uint32_t d = 0; d < D; ++d) {
          l.k.push_back(f32_to_f16(value(id, t, h, d, 0)));
          l.v.push_back(f32_to_f16(value(id, t, h, d, 1)));
        }
    c.layers.push_back(std::move(l));
  }
  return c;
}

// ---- capture and snapshot: the project's writers ---------------------------------------------

void capture_seeds(const std::string& reject) {
  const std::string d = dir_of("capture");
  write_capture(d + "/valid-d32-h1-t4.h5", make_capture(32, 1, 4, {0}, true, false));
  write_capture(d + "/valid-d64-h2-t40-2layers.h5", make_capture(64, 2, 40, {3, 7}, false, true));
  write_capture(d + "/valid-empty-t0.h5", make_capture(64, 1, 0, {5}, false, false));
  write_capture(d + "/valid-level1-unordered-layers.h5", make_capture(32, 3, 17, {9, 2, 4}, true, true), 1);
  const Bytes v = read_bytes(d + "/valid-d64-h2-t40-2layers.h5");
  write_bytes("capture", "invalid-truncated-half.h5", truncated(v, v.size() / 2));
  write_bytes("capture", "invalid-text.h5", Bytes{'K', ',', 'V', '\n'});
  if (!reject.empty())
    for (const char* f : {"capture-bad-magic.h5", "capture-corrupt-chunk.h5", "capture-nan-in-k.h5",
                          "capture-truncated-dataset.h5", "capture-tokens-mismatch.h5"})
      write_bytes("capture", std::string("reject-") + f, read_bytes(reject + "/" + f));
}

Snapshot encode_seed(const Capture& cap, uint32_t bk, uint32_t bv, StagingType st, SinkType sink_type,
                     uint32_t sink, uint32_t group, uint32_t tail, uint32_t tail_max, uint32_t ubatch,
                     Body body = Body::scalar) {
  EncodeOptions eo;
  eo.config.bits_k = bk;
  eo.config.bits_v = bv;
  eo.config.body = body;
  eo.config.staging = st;
  eo.config.sink_type = sink_type;
  eo.config.sink = sink;
  eo.config.group = group;
  eo.config.tail = tail;
  eo.config.tail_max = tail_max;
  eo.config.iters = 2;
  eo.n_ubatch = ubatch;
  eo.threads = 1;
  return encode_capture(cap, eo);
}

void snapshot_seeds(const std::string& reject) {
  const std::string d = dir_of("snapshot");
  const Capture c64 = make_capture(64, 1, 110, {0, 4}, false, true);
  // positions [0, 64) sink, then G = 16 records, then a fixed tail of 32 in the ring
  write_snapshot(d + "/valid-44-q8-d64.h5", encode_seed(c64, 4, 4, StagingType::q8_0, SinkType::f16, 64, 16, 32, 0, 16));
  write_snapshot(d + "/valid-32-f16-inherit.h5",
                 encode_seed(make_capture(64, 1, 120, {2}, true, false), 3, 2, StagingType::f16, SinkType::inherit, 64,
                             32, 0, 0, 24));
  write_snapshot(d + "/valid-n-below-sink.h5",
                 encode_seed(make_capture(64, 1, 10, {1}, true, false), 2, 2, StagingType::q8_0, SinkType::f16, 64, 16,
                             16, 128, 4));
  write_snapshot(d + "/valid-tq6-d128.h5",
                 encode_seed(make_capture(128, 1, 80, {6}, false, false), 2, 4, StagingType::tq6_0, SinkType::f16, 64,
                             16, 0, 0, 8));
  // A trellis 3/2 body (D = 128, G = 128: what trellis needs), sealed with the built-in
  // reference tables, which the snapshot carries under /codebooks.
  write_snapshot(d + "/valid-trellis-32.h5",
                 encode_seed(make_capture(128, 1, 200, {11}, true, false), 3, 2, StagingType::q8_0, SinkType::f16, 64,
                             128, 0, 0, 16, Body::trellis));
  const Bytes v = read_bytes(d + "/valid-44-q8-d64.h5");
  write_bytes("snapshot", "invalid-truncated.h5", truncated(v, v.size() / 2));
  write_capture(d + "/invalid-a-capture.h5", make_capture(32, 1, 3, {0}, true, false));
  if (!reject.empty())
    for (const char* f : {"snapshot-capacity-overflow.h5", "snapshot-codebook-id-mismatch.h5"})
      write_bytes("snapshot", std::string("reject-") + f, read_bytes(reject + "/" + f));
}

// ---- .kvd (sjkv/io/kvd.h) ----------------------------------------------------------------------

void kvd_block(Bytes& b, int32_t D, int32_t G, int32_t head, const char* name, uint32_t seed) {
  put_u32(b, 0x31445643u);
  put_u32(b, static_cast<uint32_t>(D));
  put_u32(b, static_cast<uint32_t>(G));
  put_u32(b, static_cast<uint32_t>(head));
  char n[64] = {0};
  std::memcpy(n, name, std::min<size_t>(std::strlen(name), sizeof n));
  b.insert(b.end(), n, n + 64);
  for (int kv = 0; kv < 2; ++kv)
    for (int32_t g = 0; g < G; ++g)
      for (int32_t c = 0; c < D; ++c) put(b, f32_to_f16(value(seed, static_cast<uint32_t>(g), 0, static_cast<uint32_t>(c), kv)), 2);
}

void kvd_seeds() {
  Bytes one, two, odd;
  kvd_block(one, 32, 16, 0, "seed", 1);
  write_bytes("kvd", "valid-one-block.kvd", one);
  for (int g = 0; g < 2; ++g)
    for (int h = 0; h < 2; ++h) kvd_block(two, 64, 16, h, "seed-model", static_cast<uint32_t>(g * 2 + h));
  write_bytes("kvd", "valid-2heads-2groups.kvd", two);
  kvd_block(odd, 32, 32, 1, "a", 5);
  kvd_block(odd, 32, 16, 0, "b", 6);
  kvd_block(odd, 32, 16, 0, "full-64-byte-name-without-a-terminating-nul-xxxxxxxxxxxxxxxxxxxx", 7);
  write_bytes("kvd", "valid-heads-out-of-order-names-differ.kvd", odd);
  Bytes nan = one;
  nan[80 + 2 * 5] = 0x00;
  nan[80 + 2 * 5 + 1] = 0x7e;
  write_bytes("kvd", "invalid-nan.kvd", nan);
  write_bytes("kvd", "invalid-truncated.kvd", truncated(two, two.size() - 7));
  Bytes bad = one;
  bad[4] = 48;  // D = 48
  write_bytes("kvd", "invalid-d48.kvd", bad);
  Bytes missing;
  kvd_block(missing, 32, 16, 1, "m", 2);
  write_bytes("kvd", "invalid-head0-missing.kvd", missing);
}

// ---- llama.cpp state (layout: snapshot/src/llama_state.cpp) --------------------------------------

struct LlamaSpec {
  uint32_t magic = 0x67677371u, version = 3;
  std::string arch = "llama";
  uint32_t ext_bytes = 0;
  uint32_t cells = 6, layers = 2, n_embd = 64, sections = 1, n_stream = 1;
  int32_t k_type = 1, v_type = 1;
  uint32_t v_trans = 0;
  bool seq_ids2 = false;  // ggsn: cells in sequences 0 and 1
};

Bytes llama_bytes(const LlamaSpec& s) {
  Bytes b;
  put_u32(b, s.magic);
  put_u32(b, s.version);
  put_u32(b, s.cells);
  for (uint32_t t = 0; t < s.cells; ++t) put_u32(b, 100 + t);
  if (s.magic == 0x6767736eu) {
    put_u32(b, static_cast<uint32_t>(s.arch.size()));
    b.insert(b.end(), s.arch.begin(), s.arch.end());
    if (s.version == 9) {
      put_u32(b, 1);
      put_u32(b, 0);
      put_u64(b, 2);
      put_u32(b, f32_bits_of(0.5f));
      put_u32(b, f32_bits_of(-0.5f));
      put_u64(b, 1);
      put_u32(b, f32_bits_of(1.0f));
    }
  }
  auto val = [&](uint32_t layer, uint32_t pos, uint32_t ch, int32_t type, int kv) {
    const float x = value(layer, pos, 0, ch, kv);
    if (type == 0) put_u32(b, f32_bits_of(x));
    else put(b, f32_to_f16(x), 2);
  };
  const uint32_t ek = s.k_type == 0 ? 4 : 2, ev = s.v_type == 0 ? 4 : 2;
  for (uint32_t sec = 0; sec < s.sections; ++sec) {
    put_u32(b, s.n_stream);
    for (uint32_t st = 0; st < s.n_stream; ++st) {
      put_u32(b, s.cells);
      std::vector<uint32_t> pos;
      for (uint32_t c = 0; c < s.cells; ++c) pos.push_back((c * 5 + st * s.cells + 3) % (s.cells * s.n_stream));
      for (uint32_t c = 0; c < s.cells; ++c) {
        put_u32(b, pos[c]);
        const bool two = s.seq_ids2 && c % 2 == 0;
        put_u32(b, two ? 2 : 1);
        for (uint32_t e = 0; e < s.ext_bytes; e += 4) put_u32(b, 7);
        put_u32(b, 0);
        if (two) put_u32(b, 1);
      }
      put_u32(b, s.v_trans);
      put_u32(b, s.layers);
      for (uint32_t l = 0; l < s.layers; ++l) {
        put_u32(b, static_cast<uint32_t>(s.k_type));
        put_u64(b, static_cast<uint64_t>(s.n_embd) * ek);
        for (uint32_t c = 0; c < s.cells; ++c)
          for (uint32_t ch = 0; ch < s.n_embd; ++ch) val(l, pos[c], ch, s.k_type, 0);
      }
      for (uint32_t l = 0; l < s.layers; ++l) {
        put_u32(b, static_cast<uint32_t>(s.v_type));
        if (!s.v_trans) {
          put_u64(b, static_cast<uint64_t>(s.n_embd) * ev);
          for (uint32_t c = 0; c < s.cells; ++c)
            for (uint32_t ch = 0; ch < s.n_embd; ++ch) val(l, pos[c], ch, s.v_type, 1);
        } else {
          put_u32(b, ev);
          put_u32(b, s.n_embd);
          for (uint32_t ch = 0; ch < s.n_embd; ++ch)
            for (uint32_t c = 0; c < s.cells; ++c) val(l, pos[c], ch, s.v_type, 1);
        }
      }
    }
  }
  return b;
}

void llama_seeds() {
  LlamaSpec s;
  write_bytes("llama_state", "valid-ggsq3-f16.bin", llama_bytes(s));
  LlamaSpec s2 = s;
  s2.version = 2;
  s2.k_type = 0;
  s2.v_type = 0;
  s2.v_trans = 1;
  s2.n_embd = 128;
  write_bytes("llama_state", "valid-ggsq2-f32-vtrans.bin", llama_bytes(s2));
  LlamaSpec s3 = s;
  s3.ext_bytes = 12;  // read with cell_ext (the target's second pass)
  write_bytes("llama_state", "valid-ggsq3-cell-ext.bin", llama_bytes(s3));
  LlamaSpec n10;
  n10.magic = 0x6767736eu;
  n10.version = 10;
  n10.arch = "qwen3";
  n10.seq_ids2 = true;
  n10.v_type = 0;
  write_bytes("llama_state", "valid-ggsn10-two-seqs.bin", llama_bytes(n10));
  LlamaSpec n9 = n10;
  n9.version = 9;
  n9.seq_ids2 = false;
  n9.sections = 2;  // iSWA: full-attention section then SWA section
  n9.n_stream = 2;
  n9.v_trans = 1;
  write_bytes("llama_state", "valid-ggsn9-2sections-2streams.bin", llama_bytes(n9));
  LlamaSpec q = s;
  q.k_type = 8;  // Q8_0: refused
  write_bytes("llama_state", "invalid-q8_0-cache.bin", llama_bytes(q));
  const Bytes v = llama_bytes(s);
  write_bytes("llama_state", "invalid-truncated.bin", truncated(v, v.size() - 3));
  Bytes future = v;
  future[4] = 4;
  write_bytes("llama_state", "invalid-version4.bin", future);
}

// ---- GGUF (layout: snapshot/include/sjkv/io/gguf.h) ---------------------------------------------------

struct Gguf {
  std::vector<Bytes> kvs;
  std::vector<std::pair<std::string, std::vector<uint64_t>>> tensors;  // F32
  uint32_t version = 3;

  Gguf& kv(const std::string& key, uint32_t type, const Bytes& value) {
    Bytes b;
    put_str(b, key);
    put_u32(b, type);
    b.insert(b.end(), value.begin(), value.end());
    kvs.push_back(b);
    return *this;
  }
  Gguf& u32(const std::string& k, uint32_t v) {
    Bytes b;
    put_u32(b, v);
    return kv(k, 4, b);
  }
  Gguf& f32(const std::string& k, float v) {
    Bytes b;
    put_u32(b, f32_bits_of(v));
    return kv(k, 6, b);
  }
  Gguf& str(const std::string& k, const std::string& v) {
    Bytes b;
    put_str(b, v);
    return kv(k, 8, b);
  }
  Gguf& arr_u32(const std::string& k, const std::vector<uint32_t>& v) {
    Bytes b;
    put_u32(b, 4);
    put_u64(b, v.size());
    for (uint32_t x : v) put_u32(b, x);
    return kv(k, 9, b);
  }
  Gguf& arr_bool(const std::string& k, const std::vector<bool>& v) {
    Bytes b;
    put_u32(b, 7);
    put_u64(b, v.size());
    for (bool x : v) b.push_back(x ? 1 : 0);
    return kv(k, 9, b);
  }
  Gguf& arr_str(const std::string& k, const std::vector<std::string>& v) {
    Bytes b;
    put_u32(b, 8);
    put_u64(b, v.size());
    for (const auto& x : v) put_str(b, x);
    return kv(k, 9, b);
  }
  Gguf& tensor(const std::string& name, std::vector<uint64_t> dims) {
    tensors.push_back({name, std::move(dims)});
    return *this;
  }
  Bytes bytes() const {
    Bytes b{'G', 'G', 'U', 'F'};
    put_u32(b, version);
    put_u64(b, tensors.size());
    put_u64(b, kvs.size());
    for (const Bytes& k : kvs) b.insert(b.end(), k.begin(), k.end());
    uint64_t off = 0;
    std::vector<uint64_t> sizes;
    for (const auto& t : tensors) {
      put_str(b, t.first);
      put_u32(b, static_cast<uint32_t>(t.second.size()));
      uint64_t n = 1;
      for (uint64_t d : t.second) {
        put_u64(b, d);
        n *= d;
      }
      put_u32(b, 0);  // F32
      put_u64(b, off);
      off += (4 * n + 31) / 32 * 32;
    }
    if (!tensors.empty()) {
      while (b.size() % 32) b.push_back(0);
      b.resize(b.size() + off, 0x3c);
    }
    return b;
  }
};

void gguf_seeds() {
  Gguf llama;
  llama.str("general.architecture", "llama").u32("llama.block_count", 2).u32("llama.attention.head_count", 8);
  llama.u32("llama.attention.head_count_kv", 2).u32("llama.embedding_length", 512).u32("llama.context_length", 4096);
  llama.arr_str("tokenizer.ggml.tokens", {"a", "b", "<s>"}).f32("llama.rope.freq_base", 10000.0f);
  llama.tensor("token_embd.weight", {64, 2}).tensor("output_norm.weight", {3});
  write_bytes("gguf", "valid-llama.gguf", llama.bytes());

  Gguf gemma;
  gemma.str("general.architecture", "gemma3").u32("gemma3.block_count", 12).u32("gemma3.attention.head_count", 4);
  gemma.u32("gemma3.attention.head_count_kv", 1).u32("gemma3.attention.key_length", 256);
  gemma.u32("gemma3.attention.value_length", 256).u32("gemma3.embedding_length", 640);
  gemma.u32("gemma3.attention.sliding_window", 512).u32("gemma3.context_length", 32768);
  write_bytes("gguf", "valid-gemma3-swa.gguf", gemma.bytes());

  Gguf qwen;
  qwen.str("general.architecture", "qwen35").u32("qwen35.block_count", 8).u32("qwen35.attention.head_count", 16);
  qwen.arr_u32("qwen35.attention.head_count_kv", {4, 4, 4, 4, 4, 4, 4, 4}).u32("qwen35.attention.key_length", 256);
  qwen.u32("qwen35.attention.value_length", 256).u32("qwen35.full_attention_interval", 4);
  qwen.u32("qwen35.embedding_length", 2048).u32("qwen35.nextn_predict_layers", 1);
  qwen.u32("qwen35.ssm.conv_kernel", 4).u32("qwen35.ssm.inner_size", 256).u32("qwen35.ssm.state_size", 64);
  qwen.u32("qwen35.ssm.time_step_rank", 4).u32("qwen35.ssm.group_count", 2);
  write_bytes("gguf", "valid-qwen35-hybrid-nextn.gguf", qwen.bytes());

  Gguf pattern;
  pattern.str("general.architecture", "gemma2").u32("gemma2.block_count", 4).u32("gemma2.attention.head_count", 8);
  pattern.u32("gemma2.attention.head_count_kv", 4).u32("gemma2.embedding_length", 1024);
  pattern.arr_bool("gemma2.attention.sliding_window_pattern", {true, false, true, false});
  pattern.u32("gemma2.attention.sliding_window", 4096).u32("general.alignment", 64);
  write_bytes("gguf", "valid-gemma2-pattern-array.gguf", pattern.bytes());

  const Bytes v = llama.bytes();
  write_bytes("gguf", "invalid-truncated.gguf", truncated(v, v.size() / 2));
  Bytes v2 = v;
  v2[4] = 2;
  write_bytes("gguf", "invalid-version2.gguf", v2);
  Gguf nohead;
  nohead.str("general.architecture", "llama").u32("llama.block_count", 2);
  write_bytes("gguf", "invalid-no-head-count.gguf", nohead.bytes());
}

}  // namespace

// ---- trajectory: the project's writer ------------------------------------------------------

// A small trajectory of G positions over V tokens: logits rows from a fixed formula, greedy
// unless `sample`; hidden encoding with E values per position, or sparse.
sjkv::Trajectory make_trajectory(uint32_t V, uint32_t G, bool hidden, uint32_t E, bool sample) {
  sjkv::Trajectory t;
  t.model_file = "seed.gguf";
  t.model_sha256 = std::string(64, 'c');
  t.architecture = "llama";
  t.n_vocab = V;
  t.prompt_tokens = 3;
  t.tokens = {1, 2, static_cast<int32_t>(V - 1)};
  t.settings.generate = G + 1;
  t.settings.sample = sample;
  t.settings.seed = 9;
  t.encoding = hidden ? sjkv::RefEncoding::hidden : sjkv::RefEncoding::sparse;
  t.n_embd = hidden ? E : 0;
  for (uint32_t j = 0; j < G; ++j) {
    std::vector<float> row(V), h(E);
    for (uint32_t i = 0; i < V; ++i)
      row[i] = 6.0f * std::sin(0.7f * static_cast<float>(i * (j + 1)) + 0.3f) - 0.01f * static_cast<float>(i % 50);
    for (uint32_t i = 0; i < E; ++i) h[i] = std::cos(0.5f * static_cast<float>(i + 3 * j));
    if (hidden) {
      t.hid.push_back(replay::encode_hidden(h.data(), E, row.data(), V));
    } else {
      t.ref.push_back(replay::encode_reference(row.data(), V, t.settings.self_kl_target));
      t.self_kl_max = std::max(t.self_kl_max, replay::self_kl(row.data(), V, t.ref.back()));
    }
    const int32_t top = hidden ? static_cast<int32_t>(t.hid.back().top_ids[0]) : t.ref.back().top();
    t.tokens.push_back(sample ? static_cast<int32_t>((j * 37) % V) : top);
  }
  return t;
}

void trajectory_seeds() {
  const std::string d = dir_of("trajectory");
  sjkv::write_trajectory(d + "/valid-hidden-v300-e16-g4.h5", make_trajectory(300, 4, true, 16, false));
  sjkv::write_trajectory(d + "/valid-hidden-v20-sampled.h5", make_trajectory(20, 3, true, 8, true), 1);
  sjkv::write_trajectory(d + "/valid-sparse-v300-g3.h5", make_trajectory(300, 3, false, 0, false));
  sjkv::write_trajectory(d + "/valid-sparse-v4-sampled.h5", make_trajectory(4, 2, false, 0, true));
  // Version 3 (segments, provenance): the four scored positions as two turns, the second an
  // answer after an idle step and one given token.
  sjkv::Trajectory v3 = make_trajectory(300, 4, true, 16, false);
  v3.tokens.insert(v3.tokens.begin() + 5, 7);
  v3.segments = {{sjkv::SegmentKind::given, 3, 0},
                 {sjkv::SegmentKind::generated, 2, 0},
                 {sjkv::SegmentKind::idle, 0, 1},
                 {sjkv::SegmentKind::given, 1, 0},
                 {sjkv::SegmentKind::answer, 2, 0}};
  v3.context = 16;
  v3.source = {std::string(64, 'd'), std::string(64, 'e'), "gguf", "2026-01-01", "3.1.6"};
  sjkv::write_trajectory(d + "/valid-hidden-v3-segments.h5", v3);
  const Bytes v = read_bytes(d + "/valid-hidden-v300-e16-g4.h5");
  write_bytes("trajectory", "invalid-truncated-half.h5", truncated(v, v.size() / 2));
  write_capture(d + "/invalid-a-capture.h5", make_capture(32, 1, 3, {0}, true, false));
}

int main(int argc, char** argv) {
  if (argc < 2 || argc > 3) {
    std::fprintf(stderr, "usage: sjkv_fuzz_seeds CORPUS_DIR [REJECT_DIR]\n");
    return 1;
  }
  g_root = argv[1];
  const std::string reject = argc > 2 ? argv[2] : "";
  try {
    capture_seeds(reject);
    snapshot_seeds(reject);
    kvd_seeds();
    llama_seeds();
    gguf_seeds();
    trajectory_seeds();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "sjkv_fuzz_seeds: %s\n", e.what());
    return 1;
  }
  return 0;
}
