// .kvd tile dumps (layout in sjkv/io/kvd.h). The file is scanned twice: once over the block
// headers only, to validate the structure and size the result from the file size before anything
// is allocated, then over the tiles to copy and check the values.
#include "sjkv/io/kvd.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "byte_reader.h"
#include "sjkv/io/paths.h"

namespace sjkv {
namespace {

constexpr uint32_t kKvdMagic = 0x31445643u;
constexpr uint64_t kNameBytes = 64;
constexpr uint64_t kHeaderBytes = 16 + kNameBytes;
constexpr int32_t kMinD = 32, kMaxD = 4096;
constexpr int32_t kMaxG = 65536;
constexpr int32_t kMaxHeads = 4096;

struct BlockInfo {
  uint64_t data_offset;  // file offset of K[0][0]
  uint32_t G;
  uint32_t head;
  uint32_t token0;  // this head's token count before the block
};

bool is_pow2(int64_t x) { return x > 0 && (x & (x - 1)) == 0; }

}  // namespace

Capture read_kvd(const std::string& path) {
  bin::FileReader in(path);
  if (in.size() == 0) in.fail("empty file (no .kvd blocks)");

  std::vector<BlockInfo> blocks;
  std::map<uint32_t, uint64_t> head_tokens;  // head -> tokens so far
  int32_t D = 0;
  std::string model;
  bool same_name = true;

  // Pass 1: headers only. Every block must fit whole in what remains of the file.
  while (in.remaining() > 0) {
    const size_t bi = blocks.size();
    const std::string at =
        "block " + std::to_string(bi) + " (offset " + std::to_string(in.pos()) + ")";
    if (in.remaining() < kHeaderBytes)
      in.fail(at + " truncated: the header needs " + std::to_string(kHeaderBytes) + " bytes, " +
              std::to_string(in.remaining()) + " remain");
    const uint32_t magic = static_cast<uint32_t>(in.i32());
    if (magic != kKvdMagic) {
      char hex[16];
      std::snprintf(hex, sizeof hex, "0x%08x", magic);
      in.fail(at + ": bad magic " + hex + " (expected 0x31445643)");
    }
    const int32_t d = in.i32(), g = in.i32(), head = in.i32();
    char name[kNameBytes];
    in.read(name, kNameBytes);

    if (!is_pow2(d) || d < kMinD || d > kMaxD)
      in.fail(at + ": D = " + std::to_string(d) + " is not a power of two in [32, 4096]");
    if (D == 0) D = d;
    if (d != D)
      in.fail(at + ": D = " + std::to_string(d) + " differs from D = " + std::to_string(D) +
              " of block 0");
    if (g <= 0 || g % 16 != 0 || g > kMaxG)
      in.fail(at + ": G = " + std::to_string(g) + " is not a positive multiple of 16 up to 65536");
    if (head < 0 || head >= kMaxHeads)
      in.fail(at + ": head = " + std::to_string(head) + " is outside [0, 4096)");

    // G <= 2^16 and D <= 2^12, so the tile bytes cannot overflow 64 bits.
    const uint64_t data_bytes = 2ull * static_cast<uint64_t>(g) * static_cast<uint64_t>(d) * 2ull;
    if (data_bytes > in.remaining())
      in.fail(at + " truncated: K and V tiles need " + std::to_string(data_bytes) + " bytes, " +
              std::to_string(in.remaining()) + " remain");

    const std::string nm(name, strnlen(name, kNameBytes));
    if (bi == 0)
      model = nm;
    else if (nm != model)
      same_name = false;

    uint64_t& tokens = head_tokens[static_cast<uint32_t>(head)];
    if (tokens + static_cast<uint64_t>(g) > std::numeric_limits<uint32_t>::max())
      in.fail(at + ": head " + std::to_string(head) + " holds more than 2^32-1 tokens");
    blocks.push_back({in.pos(), static_cast<uint32_t>(g), static_cast<uint32_t>(head),
                      static_cast<uint32_t>(tokens)});
    tokens += static_cast<uint64_t>(g);
    in.seek(in.pos() + data_bytes);
  }

  const uint32_t H = head_tokens.rbegin()->first + 1;
  if (head_tokens.size() != H) {
    uint32_t missing = 0;
    while (head_tokens.count(missing)) ++missing;
    in.fail("head " + std::to_string(missing) + " is missing: heads must be numbered 0.." +
            std::to_string(H - 1) + " with every one present");
  }
  const uint64_t T = head_tokens.begin()->second;
  for (const auto& ht : head_tokens)
    if (ht.second != T)
      in.fail("unequal head token counts: head " + std::to_string(ht.first) + " holds " +
              std::to_string(ht.second) + " tokens, head 0 holds " + std::to_string(T));

  Capture cap;
  cap.model = same_name ? model : std::string();
  cap.source = "kvd:" + base_name(path);
  cap.head_dim = static_cast<uint32_t>(D);
  cap.kv_heads = H;
  cap.tokens = static_cast<uint32_t>(T);
  cap.rotated = true;
  cap.rotation_block = 0;
  cap.layers.resize(1);
  CaptureLayer& layer = cap.layers[0];
  layer.layer_id = 0;
  // T * H * D * 2 bytes per tensor is at most the file size already seen, so this fits.
  layer.k.resize(static_cast<size_t>(T) * H * static_cast<size_t>(D));
  layer.v.resize(layer.k.size());

  // Pass 2: the tiles.
  std::vector<unsigned char> raw;
  for (size_t bi = 0; bi < blocks.size(); ++bi) {
    const BlockInfo& b = blocks[bi];
    const size_t tile = static_cast<size_t>(b.G) * static_cast<size_t>(D);
    raw.resize(tile * 2);
    in.seek(b.data_offset);
    for (int kv = 0; kv < 2; ++kv) {
      in.read(raw.data(), raw.size());
      std::vector<uint16_t>& dst = kv == 0 ? layer.k : layer.v;
      for (uint32_t g = 0; g < b.G; ++g) {
        const size_t token = static_cast<size_t>(b.token0) + g;
        uint16_t* row = dst.data() + (token * H + b.head) * static_cast<size_t>(D);
        const unsigned char* src = raw.data() + static_cast<size_t>(g) * D * 2;
        for (int32_t c = 0; c < D; ++c) {
          const uint16_t h = static_cast<uint16_t>(src[2 * c] | src[2 * c + 1] << 8);
          if ((h & 0x7c00u) == 0x7c00u)
            in.fail("block " + std::to_string(bi) + " (head " + std::to_string(b.head) +
                    "): " + (kv == 0 ? "K" : "V") + " token " + std::to_string(token) +
                    " channel " + std::to_string(c) + " is " + ((h & 0x3ffu) ? "NaN" : "infinite"));
          row[c] = h;
        }
      }
    }
  }
  return cap;
}

}  // namespace sjkv
