#include "sjkv/io/lloyd_checkpoint.h"

#include <cmath>
#include <cstring>
#include <stdexcept>

#include "byte_reader.h"
#include "sjkv/io/atomic_file.h"
#include "sjkv/io/file_error.h"
#include "sjkv/io/sha256.h"
#include "sjkv/trellis.h"

namespace sjkv {
namespace {

using bin::get_f64;
using bin::get_u32;
using bin::put_f64;
using bin::put_u32;

constexpr char kCkptMagic[8] = {'S', 'J', 'K', 'V', 'L', 'C', 'K', '\n'};
constexpr size_t kCkptHeader = 64;
constexpr size_t kCkptIteration = 32;
constexpr uint32_t kCkptMaxHistory = 100000;
const char* const kStops[] = {"", "converged", "cap", "no gain", "empty"};
constexpr size_t kTrailer = 32;  // SHA-256 of everything before it

}  // namespace

std::vector<uint8_t> lloyd_checkpoint_bytes(const LloydCheckpoint& c) {
  const uint32_t ne = trellis_entries(c.bits);
  if (c.bits < 2 || c.bits > 4 || c.side > 1 || c.state.table.size() != ne || c.state.history.empty() ||
      c.state.history.size() > kCkptMaxHistory)
    throw std::invalid_argument("checkpoint state does not fit its width");
  uint32_t stop = 0;
  while (stop < 5 && c.state.stop != kStops[stop]) ++stop;
  if (stop == 5) throw std::invalid_argument("checkpoint stop reason '" + c.state.stop + "' is not one of the trainer's");
  std::vector<uint8_t> o(kCkptMagic, kCkptMagic + 8);
  put_u32(o, 1);
  put_u32(o, c.bits);
  put_u32(o, c.side);
  put_u32(o, ne);
  put_u32(o, static_cast<uint32_t>(c.state.history.size()));
  put_u32(o, stop);
  o.insert(o.end(), c.run_key.begin(), c.run_key.end());
  for (float v : c.state.table) {
    uint32_t u;
    std::memcpy(&u, &v, 4);
    put_u32(o, u);
  }
  for (const LloydIteration& it : c.state.history) {
    put_u32(o, it.iter);
    put_u32(o, it.entries_used);
    put_f64(o, it.train_mse);
    put_f64(o, it.heldout_mse);
    put_f64(o, it.heldout_real_mse);
  }
  const auto sha = sha256(o.data(), o.size());
  o.insert(o.end(), sha.begin(), sha.end());
  return o;
}

void write_lloyd_checkpoint(const std::string& path, const LloydCheckpoint& c) {
  const auto b = lloyd_checkpoint_bytes(c);
  write_file_atomic(path, b.data(), b.size());
}

LloydCheckpoint parse_lloyd_checkpoint(const std::string& path, const std::vector<uint8_t>& b) {
  auto fail = [&](const std::string& d) { throw FileError(path, d); };
  if (b.size() < 8 || std::memcmp(b.data(), kCkptMagic, 8) != 0) fail("bad magic; not an sjkv-train checkpoint");
  if (b.size() < kCkptHeader + kTrailer) fail("truncated: " + std::to_string(b.size()) + " bytes");
  if (get_u32(&b[8]) != 1) fail("unsupported checkpoint version " + std::to_string(get_u32(&b[8])) + " (this reader knows 1)");
  LloydCheckpoint c;
  c.bits = get_u32(&b[12]);
  if (c.bits < 2 || c.bits > 4) fail("bits is " + std::to_string(c.bits) + "; must be 2, 3 or 4");
  c.side = get_u32(&b[16]);
  if (c.side > 1) fail("side is " + std::to_string(c.side) + "; must be 0 (K) or 1 (V)");
  const uint32_t ne = get_u32(&b[20]);
  if (ne != trellis_entries(c.bits))
    fail("entry count is " + std::to_string(ne) + "; " + std::to_string(c.bits) + "-bit tables have " +
         std::to_string(trellis_entries(c.bits)));
  const uint32_t nh = get_u32(&b[24]);
  if (nh == 0 || nh > kCkptMaxHistory) fail("iteration count " + std::to_string(nh) + " is not in 1.." + std::to_string(kCkptMaxHistory));
  const uint32_t stop = get_u32(&b[28]);
  if (stop >= 5) fail("stop code " + std::to_string(stop) + " is not 0..4");
  const size_t want = kCkptHeader + 4 * static_cast<size_t>(ne) + kCkptIteration * nh + kTrailer;
  if (b.size() < want) fail("truncated: " + std::to_string(b.size()) + " bytes of " + std::to_string(want));
  if (b.size() > want) fail(std::to_string(b.size() - want) + " trailing bytes after the checksum");
  const auto sha = sha256(b.data(), want - kTrailer);
  if (std::memcmp(sha.data(), &b[want - kTrailer], 32) != 0) fail("checksum mismatch");
  std::memcpy(c.run_key.data(), &b[32], 32);
  c.state.stop = kStops[stop];
  c.state.table.resize(ne);
  for (uint32_t w = 0; w < ne; ++w) {
    const uint32_t u = get_u32(&b[kCkptHeader + 4 * static_cast<size_t>(w)]);
    std::memcpy(&c.state.table[w], &u, 4);
    if (!std::isfinite(c.state.table[w])) fail("table entry " + std::to_string(w) + " is NaN or infinite");
  }
  for (uint32_t i = 0; i < nh; ++i) {
    const uint8_t* p = &b[kCkptHeader + 4 * static_cast<size_t>(ne) + kCkptIteration * i];
    LloydIteration it;
    it.iter = get_u32(p);
    it.entries_used = get_u32(p + 4);
    it.train_mse = get_f64(p + 8);
    it.heldout_mse = get_f64(p + 16);
    it.heldout_real_mse = get_f64(p + 24);
    if (it.iter != i) fail("iteration " + std::to_string(i) + " is numbered " + std::to_string(it.iter));
    if (it.entries_used > ne) fail("iteration " + std::to_string(i) + " uses more entries than the table has");
    if (!std::isfinite(it.train_mse) || it.train_mse < 0)
      fail("iteration " + std::to_string(i) + " has a train MSE that is negative, NaN or infinite");
    c.state.history.push_back(it);
  }
  return c;
}

LloydCheckpoint read_lloyd_checkpoint(const std::string& path) {
  return parse_lloyd_checkpoint(path, bin::read_whole(path, kCkptHeader + 4 * 1024 + kCkptIteration * kCkptMaxHistory + kTrailer,
                                                "an sjkv-train checkpoint"));
}

}  // namespace sjkv
