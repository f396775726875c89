#include "sjkv/io/codebook.h"

#include <cctype>
#include <cmath>
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include "sjkv/io/atomic_file.h"
#include "sjkv/io/file_error.h"
#include "sjkv/io/sha256.h"
#include "sjkv/trellis.h"
#include "byte_reader.h"

namespace sjkv {
namespace {

using bin::get_u32;
using bin::get_u64;
using bin::put_u32;
using bin::put_u64;

constexpr char kMagic[8] = {'S', 'J', 'K', 'V', 'C', 'B', '\r', '\n'};
constexpr size_t kFixedHeader = 72;
constexpr size_t kTrailer = 32;
constexpr uint32_t kMaxProvenance = 1u << 20;

std::string fmt_double(double v) {
  char b[64];
  std::snprintf(b, sizeof b, "%.17g", v);
  return b;
}

void check_value(const std::string& v, const char* what) {
  for (char ch : v)
    if (ch == '\n' || ch == '\r' || ch == '\0')
      throw std::invalid_argument(std::string("provenance ") + what + " contains a line break or NUL");
}

std::string provenance_text(const CodebookProvenance& p) {
  std::string s;
  auto line = [&](const std::string& k, const std::string& v) {
    check_value(k, "key");
    check_value(v, "value");
    if (k.empty() || k.find('=') != std::string::npos)
      throw std::invalid_argument("provenance key '" + k + "' is empty or contains '='");
    s += k + "=" + v + "\n";
  };
  line("tool_version", p.tool_version);
  for (const auto& in : p.inputs) line("input", in.sha256 + " " + in.path);
  line("seed", std::to_string(p.seed));
  line("iterations", std::to_string(p.iterations));
  line("train_tiles_k", std::to_string(p.train_tiles_k));
  line("train_tiles_v", std::to_string(p.train_tiles_v));
  line("heldout_tiles_k", std::to_string(p.heldout_tiles_k));
  line("heldout_tiles_v", std::to_string(p.heldout_tiles_v));
  line("train_mse_k", fmt_double(p.train_mse_k));
  line("train_mse_v", fmt_double(p.train_mse_v));
  line("heldout_mse_k", fmt_double(p.heldout_mse_k));
  line("heldout_mse_v", fmt_double(p.heldout_mse_v));
  for (const auto& kv : p.extra) line(kv.first, kv.second);
  return s;
}

bool is_hex64(const std::string& s) {
  if (s.size() != 64) return false;
  for (char c : s)
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  return true;
}

CodebookProvenance parse_provenance(const std::string& path, const std::string& text) {
  CodebookProvenance p;
  size_t pos = 0, lineno = 0;
  auto bad = [&](const std::string& why) {
    throw FileError(path, "provenance line " + std::to_string(lineno) + ": " + why);
  };
  for (unsigned char c : text)
    if (c == 0 || (c < 0x20 && c != '\n') || c == 0x7f) throw FileError(path, "provenance contains a control byte");
  if (!text.empty() && text.back() != '\n') throw FileError(path, "provenance does not end with a line break");
  auto to_u64 = [&](const std::string& v) {
    if (v.empty() || v.size() > 20) bad("not an unsigned integer: '" + v + "'");
    for (char c : v)
      if (c < '0' || c > '9') bad("not an unsigned integer: '" + v + "'");
    errno = 0;
    const unsigned long long x = std::strtoull(v.c_str(), nullptr, 10);
    if (errno) bad("integer out of range: '" + v + "'");
    return static_cast<uint64_t>(x);
  };
  auto to_double = [&](const std::string& v) {
    char* end = nullptr;
    const double x = std::strtod(v.c_str(), &end);
    if (v.empty() || end != v.c_str() + v.size()) bad("not a number: '" + v + "'");
    return x;
  };
  while (pos < text.size()) {
    ++lineno;
    const size_t nl = text.find('\n', pos);
    const std::string ln = text.substr(pos, nl - pos);
    pos = nl + 1;
    const size_t eq = ln.find('=');
    if (eq == std::string::npos || eq == 0) bad("not key=value");
    const std::string k = ln.substr(0, eq), v = ln.substr(eq + 1);
    if (k == "tool_version") p.tool_version = v;
    else if (k == "input") {
      const size_t sp = v.find(' ');
      if (sp == std::string::npos || !is_hex64(v.substr(0, sp))) bad("input is not '<sha256 hex> <path>'");
      p.inputs.push_back({v.substr(sp + 1), v.substr(0, sp)});
    } else if (k == "seed") p.seed = to_u64(v);
    else if (k == "iterations") {
      const uint64_t it = to_u64(v);
      if (it > 0xffffffffu) bad("iterations out of range");
      p.iterations = static_cast<uint32_t>(it);
    } else if (k == "train_tiles_k") p.train_tiles_k = to_u64(v);
    else if (k == "train_tiles_v") p.train_tiles_v = to_u64(v);
    else if (k == "heldout_tiles_k") p.heldout_tiles_k = to_u64(v);
    else if (k == "heldout_tiles_v") p.heldout_tiles_v = to_u64(v);
    else if (k == "train_mse_k") p.train_mse_k = to_double(v);
    else if (k == "train_mse_v") p.train_mse_v = to_double(v);
    else if (k == "heldout_mse_k") p.heldout_mse_k = to_double(v);
    else if (k == "heldout_mse_v") p.heldout_mse_v = to_double(v);
    else p.extra.emplace_back(k, v);
  }
  return p;
}

}  // namespace

RawCodebook read_raw_codebook(const std::string& path) {
  bin::FileReader in(path);
  RawCodebook cb;
  switch (in.size()) {
    case 1024: cb.bits = 2; break;
    case 2048: cb.bits = 3; break;
    case 4096: cb.bits = 4; break;
    default:
      in.fail("is " + std::to_string(in.size()) +
              " bytes; a raw codebook table file is 1024 (2-bit), 2048 (3-bit) or 4096 (4-bit) bytes");
  }
  const size_t n = size_t{1} << (6 + cb.bits);
  std::vector<uint8_t> raw(2 * n * 2);
  in.read(raw.data(), raw.size(), "tables");
  cb.k.resize(n);
  cb.v.resize(n);
  for (size_t i = 0; i < 2 * n; ++i) {
    const uint16_t h = static_cast<uint16_t>(raw[2 * i] | (raw[2 * i + 1] << 8));
    if (!codebook_entry_usable(h))
      in.fail(std::string(i < n ? "K" : "V") + " table entry " + std::to_string(i % n) +
              " is NaN, infinite or larger than 64 in magnitude");
    (i < n ? cb.k[i] : cb.v[i - n]) = h;
  }
  return cb;
}

const char* axis_name(CodebookAxis a) { return a == CodebookAxis::token ? "token" : "channel"; }

void check_raw_codebook(const RawCodebook& cb) {
  if (cb.bits < 2 || cb.bits > 4) throw std::invalid_argument("codebook width must be 2, 3 or 4 bits");
  const size_t n = trellis_entries(cb.bits);
  if (cb.k.size() != n || cb.v.size() != n)
    throw std::invalid_argument("codebook tables must have " + std::to_string(n) + " entries each");
  for (const auto* t : {&cb.k, &cb.v}) {
    const long bad = first_unusable_entry(t->data(), cb.bits);
    if (bad >= 0)
      throw std::invalid_argument(std::string(t == &cb.k ? "K" : "V") + " table entry " + std::to_string(bad) +
                                  " is NaN, infinite or larger than 64 in magnitude");
  }
}

std::vector<uint8_t> raw_codebook_bytes(const RawCodebook& cb) {
  check_raw_codebook(cb);
  std::vector<uint8_t> o;
  o.reserve(4 * cb.k.size());
  for (const auto* t : {&cb.k, &cb.v})
    for (uint16_t h : *t) {
      o.push_back(static_cast<uint8_t>(h & 0xff));
      o.push_back(static_cast<uint8_t>(h >> 8));
    }
  return o;
}

std::string raw_codebook_sha256(const RawCodebook& cb) {
  const auto b = raw_codebook_bytes(cb);
  return sha256_hex(b.data(), b.size());
}

uint64_t raw_codebook_id(const RawCodebook& cb) {
  check_raw_codebook(cb);
  return codebook_id(cb.bits, cb.bits, TrellisCodebooks{cb.k.data(), cb.v.data()});
}

void write_raw_codebook(const std::string& path, const RawCodebook& cb) {
  const auto b = raw_codebook_bytes(cb);
  write_file_atomic(path, b.data(), b.size());
}

std::string codebook_header_text(const RawCodebook& cb, const std::string& comment) {
  const std::string sha = raw_codebook_sha256(cb);
  const std::string p = "SJKVARN_CB" + std::to_string(cb.bits) + "_TOK_";
  std::ostringstream o;
  o << "/* sjkv trellis codebook: " << cb.bits << "-bit, token axis, window L = " << (6 + cb.bits) << ", "
    << cb.k.size() << " fp16 entries per side.\n";
  char idbuf[32];
  std::snprintf(idbuf, sizeof idbuf, "%016" PRIx64, raw_codebook_id(cb));
  o << " * codebook id (FNV-1a-64, format basis, K then V): " << idbuf << "\n";
  if (!comment.empty()) {
    std::string c = comment;
    for (size_t i; (i = c.find("*/")) != std::string::npos;) c.replace(i, 2, "* /");
    o << " * " << c << "\n";
  }
  o << " * Generated by sjkv-train; see docs/FORMAT.md section 8. */\n";
  o << "#ifndef " << p << "CODEBOOK_H\n#define " << p << "CODEBOOK_H\n\n";
  o << "/* sha256 of the uint16 K[] then V[] table file */\n";
  o << "#define " << p << "SHA256 \"" << sha << "\"\n";
  for (int s = 0; s < 2; ++s) {
    const auto& t = s == 0 ? cb.k : cb.v;
    o << "\n#define " << p << (s == 0 ? "K" : "V") << "_INIT { \\\n";
    for (size_t i = 0; i < t.size(); i += 16) {
      o << "    ";
      for (size_t j = i; j < i + 16 && j < t.size(); ++j) {
        char b[8];
        std::snprintf(b, sizeof b, "0x%04x", t[j]);
        o << b << (j + 1 < t.size() ? (j + 1 < i + 16 ? ", " : ",") : "");
      }
      o << (i + 16 < t.size() ? " \\\n" : " }\n");
    }
  }
  o << "\n#endif\n";
  return o.str();
}

void write_codebook_header(const std::string& path, const RawCodebook& cb, const std::string& comment) {
  const std::string s = codebook_header_text(cb, comment);
  write_file_atomic(path, s.data(), s.size());
}

RawCodebook read_codebook_header(const std::string& path, uint32_t bits) {
  const auto raw = bin::read_whole(path, 1u << 20, "a codebook file");
  const std::string text(raw.begin(), raw.end());
  if (text.find('\0') != std::string::npos) throw FileError(path, "contains a NUL byte; not a C header");
  auto find_define = [&](const std::string& name) -> size_t {
    // "#define NAME" followed by a space, tab or '{'
    size_t from = 0;
    while (true) {
      const size_t i = text.find(name, from);
      if (i == std::string::npos) return i;
      const size_t e = i + name.size();
      size_t b = i;
      while (b > 0 && (text[b - 1] == ' ' || text[b - 1] == '\t')) --b;
      const bool after_define = b >= 7 && text.compare(b - 7, 7, "#define") == 0;
      if (after_define && e < text.size() && (text[e] == ' ' || text[e] == '\t' || text[e] == '{')) return e;
      from = e;
    }
  };
  if (bits == 0) {
    for (uint32_t b = 2; b <= 4; ++b)
      if (find_define("SJKVARN_CB" + std::to_string(b) + "_TOK_K_INIT") != std::string::npos) {
        if (bits) throw FileError(path, "holds tables of more than one width; say which");
        bits = b;
      }
    if (!bits) throw FileError(path, "has no SJKVARN_CB{2,3,4}_TOK_K_INIT macro");
  }
  const std::string p = "SJKVARN_CB" + std::to_string(bits) + "_TOK_";
  const size_t n = trellis_entries(bits);
  RawCodebook cb;
  cb.bits = bits;
  for (int s = 0; s < 2; ++s) {
    const std::string name = p + (s == 0 ? "K" : "V") + "_INIT";
    const size_t e = find_define(name);
    if (e == std::string::npos) throw FileError(path, "has no " + name + " macro");
    const size_t open = text.find_first_not_of(" \t", e);
    if (open == std::string::npos || text[open] != '{') throw FileError(path, name + " is not a brace initializer");
    const size_t close = text.find('}', open);
    if (close == std::string::npos) throw FileError(path, name + " has no closing brace");
    auto& t = s == 0 ? cb.k : cb.v;
    size_t i = open + 1;
    while (i < close) {
      const char c = text[i];
      if (c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == ',' || c == '\\') { ++i; continue; }
      if (c == '0' && i + 6 <= close && (text[i + 1] == 'x' || text[i + 1] == 'X')) {
        uint32_t v = 0;
        for (int k = 0; k < 4; ++k) {
          const char h = text[i + 2 + k];
          int d = h >= '0' && h <= '9' ? h - '0' : h >= 'a' && h <= 'f' ? h - 'a' + 10 : h >= 'A' && h <= 'F' ? h - 'A' + 10 : -1;
          if (d < 0) throw FileError(path, name + ": value " + std::to_string(t.size()) + " is not 0x + 4 hex digits");
          v = v << 4 | static_cast<uint32_t>(d);
        }
        const size_t after = i + 6;
        if (after < close && std::isalnum(static_cast<unsigned char>(text[after])))
          throw FileError(path, name + ": value " + std::to_string(t.size()) + " is not 0x + 4 hex digits");
        if (!codebook_entry_usable(static_cast<uint16_t>(v)))
          throw FileError(path, name + ": entry " + std::to_string(t.size()) +
                                    " is NaN, infinite or larger than 64 in magnitude");
        t.push_back(static_cast<uint16_t>(v));
        i = after;
        continue;
      }
      throw FileError(path, name + ": unexpected character '" + std::string(1, c) + "' in the initializer");
    }
    if (t.size() != n)
      throw FileError(path, name + " has " + std::to_string(t.size()) + " values; " + std::to_string(bits) +
                                "-bit tables have " + std::to_string(n));
  }
  const std::string sname = p + "SHA256";
  const size_t e = find_define(sname);
  if (e == std::string::npos) throw FileError(path, "has no " + sname + " macro");
  const size_t q = text.find_first_not_of(" \t", e);
  if (q == std::string::npos || text[q] != '"' || q + 65 >= text.size() || text[q + 65] != '"' ||
      !is_hex64(text.substr(q + 1, 64)))
    throw FileError(path, sname + " is not a quoted 64-digit lower-case hex string");
  const std::string want = raw_codebook_sha256(cb);
  if (text.substr(q + 1, 64) != want)
    throw FileError(path, sname + " is " + text.substr(q + 1, 64) + " but the tables hash to " + want);
  return cb;
}

std::vector<uint8_t> container_bytes(const CodebookContainer& c) {
  const auto raw = raw_codebook_bytes(c.table);
  const std::string prov = provenance_text(c.provenance);
  if (prov.size() > kMaxProvenance) throw std::invalid_argument("provenance larger than 1 MiB");
  const auto rsha = sha256(raw.data(), raw.size());
  std::vector<uint8_t> o(kMagic, kMagic + 8);
  put_u32(o, c.version);
  put_u32(o, c.table.bits);
  put_u32(o, trellis_window_len(c.table.bits));
  put_u32(o, static_cast<uint32_t>(c.axis));
  put_u32(o, trellis_entries(c.table.bits));
  put_u32(o, static_cast<uint32_t>(prov.size()));
  put_u64(o, raw_codebook_id(c.table));
  o.insert(o.end(), rsha.begin(), rsha.end());
  o.insert(o.end(), raw.begin(), raw.end());
  o.insert(o.end(), prov.begin(), prov.end());
  const auto fsha = sha256(o.data(), o.size());
  o.insert(o.end(), fsha.begin(), fsha.end());
  return o;
}

void write_codebook_container(const std::string& path, CodebookContainer c) {
  if (c.version != 1) throw std::invalid_argument("only container version 1 can be written");
  const auto b = container_bytes(c);
  write_file_atomic(path, b.data(), b.size());
}

CodebookContainer parse_codebook_container(const std::string& path, const std::vector<uint8_t>& b) {
  auto fail = [&](const std::string& d) { throw FileError(path, d); };
  if (b.size() < 8 || std::memcmp(b.data(), kMagic, 8) != 0) fail("bad magic; not an sjkv codebook container");
  if (b.size() < kFixedHeader + kTrailer)
    fail("truncated: " + std::to_string(b.size()) + " bytes, the fixed header and checksum need " +
         std::to_string(kFixedHeader + kTrailer));
  CodebookContainer c;
  c.version = get_u32(&b[8]);
  if (c.version != 1) fail("unsupported container version " + std::to_string(c.version) + " (this reader knows 1)");
  const uint32_t bits = get_u32(&b[12]);
  if (bits < 2 || bits > 4) fail("bits is " + std::to_string(bits) + "; must be 2, 3 or 4");
  const uint32_t L = get_u32(&b[16]);
  if (L != trellis_window_len(bits))
    fail("window length is " + std::to_string(L) + "; a " + std::to_string(bits) + "-bit trellis has " +
         std::to_string(trellis_window_len(bits)));
  const uint32_t axis = get_u32(&b[20]);
  if (axis > 1) fail("axis is " + std::to_string(axis) + "; must be 0 (token) or 1 (channel)");
  c.axis = static_cast<CodebookAxis>(axis);
  const uint32_t n = get_u32(&b[24]);
  if (n != trellis_entries(bits))
    fail("entry count is " + std::to_string(n) + "; " + std::to_string(bits) + "-bit tables have " +
         std::to_string(trellis_entries(bits)));
  const uint32_t P = get_u32(&b[28]);
  if (P > kMaxProvenance) fail("provenance length " + std::to_string(P) + " exceeds 1 MiB");
  const size_t want = kFixedHeader + 4 * static_cast<size_t>(n) + P + kTrailer;
  if (b.size() < want) fail("truncated: " + std::to_string(b.size()) + " bytes of " + std::to_string(want));
  if (b.size() > want) fail(std::to_string(b.size() - want) + " trailing bytes after the checksum");
  const auto fsha = sha256(b.data(), want - kTrailer);
  if (std::memcmp(fsha.data(), &b[want - kTrailer], 32) != 0)
    fail("file checksum mismatch: stored " + to_hex(&b[want - kTrailer], 32) + ", content hashes to " +
         to_hex(fsha.data(), 32));
  c.codebook_id = get_u64(&b[32]);
  c.raw_sha256 = to_hex(&b[40], 32);
  c.table.bits = bits;
  c.table.k.resize(n);
  c.table.v.resize(n);
  for (size_t i = 0; i < 2 * static_cast<size_t>(n); ++i) {
    const uint8_t* p = &b[kFixedHeader + 2 * i];
    const uint16_t h = static_cast<uint16_t>(p[0] | (p[1] << 8));
    if (!codebook_entry_usable(h))
      fail(std::string(i < n ? "K" : "V") + " table entry " + std::to_string(i % n) +
           " is NaN, infinite or larger than 64 in magnitude");
    (i < n ? c.table.k[i] : c.table.v[i - n]) = h;
  }
  const uint64_t id = raw_codebook_id(c.table);
  if (id != c.codebook_id) {
    char m[128];
    std::snprintf(m, sizeof m, "codebook id mismatch: stored %016" PRIx64 ", tables give %016" PRIx64, c.codebook_id,
                  id);
    fail(m);
  }
  const std::string rs = raw_codebook_sha256(c.table);
  if (rs != c.raw_sha256) fail("raw table SHA-256 mismatch: stored " + c.raw_sha256 + ", tables give " + rs);
  const size_t po = kFixedHeader + 4 * static_cast<size_t>(n);
  c.provenance = parse_provenance(path, std::string(b.begin() + static_cast<long>(po), b.begin() + static_cast<long>(po + P)));
  return c;
}

CodebookContainer read_codebook_container(const std::string& path) {
  return parse_codebook_container(path, bin::read_whole(path, kFixedHeader + 4 * 1024 + kMaxProvenance + kTrailer, "a codebook file"));
}

CodebookFileKind sniff_codebook_file(const std::string& path) {
  const auto b = bin::read_whole(path, 4u << 20, "a codebook file");
  if (b.size() >= 8 && std::memcmp(b.data(), kMagic, 8) == 0) return CodebookFileKind::container;
  const std::string text(b.begin(), b.end());
  if (text.find("#define SJKVARN_") != std::string::npos) return CodebookFileKind::header;
  if (b.size() == 1024 || b.size() == 2048 || b.size() == 4096) return CodebookFileKind::raw;
  throw FileError(path, "is not a codebook file: no .sjcb magic, no SJKVARN_ header macros, and " +
                            std::to_string(b.size()) + " bytes is not a raw table size (1024, 2048, 4096)");
}

CodebookContainer read_codebook_any(const std::string& path, CodebookFileKind* kind) {
  const CodebookFileKind k = sniff_codebook_file(path);
  if (kind) *kind = k;
  if (k == CodebookFileKind::container) return read_codebook_container(path);
  CodebookContainer c;
  c.table = k == CodebookFileKind::raw ? read_raw_codebook(path) : read_codebook_header(path);
  c.codebook_id = raw_codebook_id(c.table);
  c.raw_sha256 = raw_codebook_sha256(c.table);
  return c;
}

const RawCodebook* CodebookPairs::of(uint32_t bits) const {
  for (const RawCodebook& r : pairs)
    if (r.bits == bits) return &r;
  return nullptr;
}

TrellisCodebooks CodebookPairs::tables(uint32_t bits_k, uint32_t bits_v) const {
  TrellisCodebooks t;
  if (const RawCodebook* k = of(bits_k)) t.k = k->k.data();
  if (const RawCodebook* v = of(bits_v)) t.v = v->v.data();
  return t;
}

}  // namespace sjkv
