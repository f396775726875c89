// The three forms of a trellis codebook pair (docs/FORMAT.md sections 7 and 8), read and
// written here only: the raw engine table file (.bin: the K table then the V table, each
// 2^(6 + bits) fp16 bit patterns, little-endian, no header; 1,024, 2,048 or 4,096 bytes for
// 2, 3 or 4 bits, the size being the only thing that tells them apart), the C header for the
// reference generator (.h) and the self-describing sjkv container (.sjcb). Writers go through
// AtomicOutput; readers treat the file as hostile and throw FileError(path, defect), checking
// every hash the file carries.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "sjkv/trellis.h"

namespace sjkv {

struct RawCodebook {
  uint32_t bits = 0;
  std::vector<uint16_t> k, v;
};

// Validates size and entries (no NaN or infinity); throws FileError(path, defect).
RawCodebook read_raw_codebook(const std::string& path);

// Trained tables kept one pair per width: a configuration of widths bits_k/bits_v seals with the
// K table of the bits_k pair and the V table of the bits_v pair; a width without a pair keeps the
// format's table (null). The pairs must outlive the returned pointers.
struct CodebookPairs {
  std::vector<RawCodebook> pairs;
  const RawCodebook* of(uint32_t bits) const;
  TrellisCodebooks tables(uint32_t bits_k, uint32_t bits_v) const;
};

enum class CodebookAxis : uint32_t { token = 0, channel = 1 };
const char* axis_name(CodebookAxis a);

// Provenance of a trained codebook; every field is optional (empty / zero when unknown).
struct CodebookInput {
  std::string path;
  std::string sha256;  // lower-case hex of the whole input file
};
struct CodebookProvenance {
  std::string tool_version;
  std::vector<CodebookInput> inputs;
  uint64_t seed = 0;
  uint32_t iterations = 0;
  uint64_t train_tiles_k = 0, train_tiles_v = 0, heldout_tiles_k = 0, heldout_tiles_v = 0;
  double train_mse_k = 0, train_mse_v = 0, heldout_mse_k = 0, heldout_mse_v = 0;
  std::vector<std::pair<std::string, std::string>> extra;  // further key = value lines
};

struct CodebookContainer {
  uint32_t version = 1;
  CodebookAxis axis = CodebookAxis::token;
  RawCodebook table;          // bits, K and V tables (2^(6+bits) fp16 each)
  uint64_t codebook_id = 0;   // FNV-1a-64 (format basis) over K then V, little-endian
  std::string raw_sha256;     // SHA-256 hex of the raw table file form
  CodebookProvenance provenance;
};

// Raw table file bytes (K then V, little-endian) and its SHA-256.
std::vector<uint8_t> raw_codebook_bytes(const RawCodebook& cb);
std::string raw_codebook_sha256(const RawCodebook& cb);
uint64_t raw_codebook_id(const RawCodebook& cb);
// Throws std::invalid_argument when bits is not 2..4, a table has the wrong size or a
// non-finite entry (a caller's bug: writers create no file then).
void check_raw_codebook(const RawCodebook& cb);

void write_raw_codebook(const std::string& path, const RawCodebook& cb);

// C header text: SJKVARN_CB<bits>_TOK_{K,V}_INIT brace initializers (16 lower-case 0x%04x per
// line) and SJKVARN_CB<bits>_TOK_SHA256 (SHA-256 hex of the raw table file).
std::string codebook_header_text(const RawCodebook& cb, const std::string& comment = "");
void write_codebook_header(const std::string& path, const RawCodebook& cb, const std::string& comment = "");
// Reads one codebook pair from such a header (the widths present: exactly one of 2, 3, 4
// unless `bits` is given) and checks the SHA-256 string against the tables.
RawCodebook read_codebook_header(const std::string& path, uint32_t bits = 0);

std::vector<uint8_t> container_bytes(const CodebookContainer& c);  // fills nothing in c
// Computes codebook_id and raw_sha256 from the tables and writes the container.
void write_codebook_container(const std::string& path, CodebookContainer c);
CodebookContainer read_codebook_container(const std::string& path);
CodebookContainer parse_codebook_container(const std::string& path, const std::vector<uint8_t>& bytes);

enum class CodebookFileKind { container, raw, header };
// .sjcb by magic, .h by a "#define SJKVARN_" line, raw by size; throws FileError otherwise.
CodebookFileKind sniff_codebook_file(const std::string& path);
// Any of the three forms, as a container (raw and header forms have no provenance).
CodebookContainer read_codebook_any(const std::string& path, CodebookFileKind* kind = nullptr);

}  // namespace sjkv
