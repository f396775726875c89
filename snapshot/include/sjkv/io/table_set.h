// Shipped trellis table sets (docs/FORMAT.md "Table sets"): trained tables that name the
// models they serve, read and checked here only. A set is a JSON description (data/tablesets/)
// and the .sjcb containers it lists, compiled into the library, so a tool finds the tables of
// a model without a path. A set is the default only for the width pairs its description lists
// (where the study measured lower KL); every other configuration keeps the format's tables.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "sjkv/io/codebook.h"
#include "sjkv/io/model_geometry.h"
#include "sjkv/trellis.h"

namespace sjkv {

// The model geometry a set serves: what must match for it to be a model's default.
struct TableSetServes {
  std::string architecture;             // general.architecture
  uint32_t n_layers = 0;                // block count
  std::vector<uint32_t> full_layers;    // the full-attention layers (the compressed ones)
  uint32_t n_head_kv = 0, head_dim = 0;  // of every full-attention layer
};

struct TableSet {
  std::string name;         // [a-z0-9.-]+, what --codebook and cb= take
  std::string description;  // one line
  TableSetServes serves;
  std::string trained_on_file, trained_on_sha256;  // the GGUF whose K/V trained the tables
  std::vector<CodebookContainer> tables;           // one per width, token axis
  std::vector<std::pair<uint32_t, uint32_t>> default_for;  // (K bits, V bits) trellis pairs
  std::string evidence;  // why those pairs: the measurement, in a sentence

  const RawCodebook* table(uint32_t bits) const;
  // The K table of the bits_k width and the V table of the bits_v width; a width the set
  // lacks keeps the format's table (null).
  TrellisCodebooks tables_for(uint32_t bits_k, uint32_t bits_v) const;
  bool is_default_for(uint32_t bits_k, uint32_t bits_v) const;
  // The model's geometry is the one the set serves; otherwise `why` says what differs.
  bool serves_model(const ModelGeometry& g, std::string* why = nullptr) const;
  // "NAME: gemma3, 18 layers, full 5+11+17, 1 KV head of 256; default for 3/2t, 2/2t" (or
  // "...; named only, the default for no width")
  std::string summary() const;
};

// Parses a set's description; `table_bytes(name)` returns the bytes of a listed .sjcb. Throws
// FileError(origin, defect) on any defect (unknown key, bad name, a table listed twice or of
// the channel axis, a default pair whose widths it lacks, ...).
TableSet parse_table_set(const std::string& origin, const std::string& json,
                         const std::function<std::vector<uint8_t>(const std::string&)>& table_bytes);

// The sets compiled in (data/tablesets/*.json), parsed once.
const std::vector<TableSet>& shipped_table_sets();
const TableSet* find_table_set(const std::string& name);  // null when none has that name
// The set serving this model among `sets` (default: the shipped ones), or null.
const TableSet* table_set_for(const ModelGeometry& g, const std::vector<TableSet>& sets = shipped_table_sets());
// One line per shipped set, for --help.
std::string table_sets_help();

// What trellis tables a tool uses where the user names none (--codebook / cb=):
//   auto       the model's shipped set for the width pairs it is the default for, else the format's
//   reference  the format's tables (the reference codec's)
//   NAME       that shipped set's tables of the widths it has
struct TableChoice {
  enum class Kind { automatic, reference, named } kind = Kind::automatic;
  const TableSet* set = nullptr;  // named
  // auto: the sets to look in for the model's (null: the shipped ones; tests give their own).
  const std::vector<TableSet>* sets = nullptr;
  // "auto", "reference" or a shipped set's name; throws std::invalid_argument otherwise.
  static TableChoice parse(const std::string& text);
  // The set a trellis configuration of these widths uses on this model (null: the format's
  // tables). `g` may be null (model unknown: auto is the format's tables).
  const TableSet* resolve(const ModelGeometry* g, uint32_t bits_k, uint32_t bits_v) const;
};

}  // namespace sjkv
