// Shipped trellis table sets: description parsing, matching and the compiled-in registry.
#include "sjkv/io/table_set.h"

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <regex>
#include <set>
#include <sstream>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "sjkv/io/file_error.h"
#include "table_set_data.h"

namespace sjkv {

namespace {

std::string join_u32(const std::vector<uint32_t>& v, const char* sep) {
  std::string o;
  for (size_t i = 0; i < v.size(); ++i) o += (i ? sep : "") + std::to_string(v[i]);
  return o;
}

std::string pair_text(const std::pair<uint32_t, uint32_t>& p) {
  return std::to_string(p.first) + "/" + std::to_string(p.second) + "t";
}

}  // namespace

const RawCodebook* TableSet::table(uint32_t bits) const {
  for (const CodebookContainer& c : tables)
    if (c.table.bits == bits) return &c.table;
  return nullptr;
}

TrellisCodebooks TableSet::tables_for(uint32_t bits_k, uint32_t bits_v) const {
  TrellisCodebooks t;
  if (const RawCodebook* k = table(bits_k)) t.k = k->k.data();
  if (const RawCodebook* v = table(bits_v)) t.v = v->v.data();
  return t;
}

bool TableSet::is_default_for(uint32_t bits_k, uint32_t bits_v) const {
  return std::find(default_for.begin(), default_for.end(), std::make_pair(bits_k, bits_v)) != default_for.end();
}

bool TableSet::serves_model(const ModelGeometry& g, std::string* why) const {
  auto no = [&](const std::string& w) {
    if (why) *why = w;
    return false;
  };
  if (g.architecture != serves.architecture)
    return no("architecture " + g.architecture + ", the set serves " + serves.architecture);
  if (g.n_layers != serves.n_layers)
    return no(std::to_string(g.n_layers) + " layers, the set serves " + std::to_string(serves.n_layers));
  const std::vector<uint32_t> full = g.full_attention_layers();
  if (full != serves.full_layers)
    return no("full-attention layers " + join_u32(full, "+") + ", the set serves " + join_u32(serves.full_layers, "+"));
  for (uint32_t l : full) {
    const LayerInfo& li = g.layers[l];
    if (li.n_head_kv != serves.n_head_kv || li.head_dim_k != serves.head_dim || li.head_dim_v != serves.head_dim)
      return no("layer " + std::to_string(l) + " has " + std::to_string(li.n_head_kv) + " KV heads of " +
                std::to_string(li.head_dim_k) + "/" + std::to_string(li.head_dim_v) + ", the set serves " +
                std::to_string(serves.n_head_kv) + " of " + std::to_string(serves.head_dim));
  }
  return true;
}

std::string TableSet::summary() const {
  std::string o = name + ": " + serves.architecture + ", " + std::to_string(serves.n_layers) + " layers, full " +
                  join_u32(serves.full_layers, "+") + ", " + std::to_string(serves.n_head_kv) + " KV head" +
                  (serves.n_head_kv == 1 ? "" : "s") + " of " + std::to_string(serves.head_dim) + "; ";
  if (default_for.empty()) return o + "named only, the default for no width";
  o += "default for ";
  for (size_t i = 0; i < default_for.size(); ++i) o += (i ? ", " : "") + pair_text(default_for[i]);
  return o;
}

TableSet parse_table_set(const std::string& origin, const std::string& text,
                         const std::function<std::vector<uint8_t>(const std::string&)>& table_bytes) {
  auto bad = [&](const std::string& d) -> void { throw FileError(origin, d); };
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw FileError(origin, std::string("not JSON: ") + e.what());
  }
  if (!j.is_object()) bad("the description must be a JSON object");
  static const std::set<std::string> keys = {"name", "description", "serves", "trained_on", "tables", "default_for", "evidence"};
  for (auto it = j.begin(); it != j.end(); ++it)
    if (!keys.count(it.key())) bad("unknown key '" + it.key() + "'");
  for (const char* k : {"name", "description", "serves", "trained_on", "tables", "default_for", "evidence"})
    if (!j.contains(k)) bad(std::string("missing key '") + k + "'");
  auto str = [&](const nlohmann::json& v, const std::string& what) {
    if (!v.is_string() || v.get<std::string>().empty()) bad(what + " must be a non-empty string");
    const std::string s = v.get<std::string>();
    if (s.find('\n') != std::string::npos) bad(what + " must be one line");
    return s;
  };
  auto u32 = [&](const nlohmann::json& v, const std::string& what, uint32_t lo, uint32_t hi) {
    if (!v.is_number_unsigned()) bad(what + " must be a non-negative integer");
    const uint64_t x = v.get<uint64_t>();
    if (x < lo || x > hi) bad(what + " = " + std::to_string(x) + " is outside " + std::to_string(lo) + ".." + std::to_string(hi));
    return static_cast<uint32_t>(x);
  };
  TableSet s;
  s.name = str(j["name"], "name");
  if (!std::regex_match(s.name, std::regex("[a-z0-9][a-z0-9.-]*")) || s.name == "auto" || s.name == "reference")
    bad("name '" + s.name + "' must be lower-case letters, digits, '.' and '-', and not auto or reference");
  s.description = str(j["description"], "description");
  s.evidence = str(j["evidence"], "evidence");

  const nlohmann::json& sv = j["serves"];
  if (!sv.is_object()) bad("serves must be an object");
  for (auto it = sv.begin(); it != sv.end(); ++it)
    if (it.key() != "architecture" && it.key() != "n_layers" && it.key() != "full_layers" && it.key() != "n_head_kv" &&
        it.key() != "head_dim")
      bad("serves: unknown key '" + it.key() + "'");
  for (const char* k : {"architecture", "n_layers", "full_layers", "n_head_kv", "head_dim"})
    if (!sv.contains(k)) bad(std::string("serves: missing key '") + k + "'");
  s.serves.architecture = str(sv["architecture"], "serves.architecture");
  s.serves.n_layers = u32(sv["n_layers"], "serves.n_layers", 1, 65536);
  s.serves.n_head_kv = u32(sv["n_head_kv"], "serves.n_head_kv", 1, 1024);
  s.serves.head_dim = u32(sv["head_dim"], "serves.head_dim", 1, 4096);
  if (!sv["full_layers"].is_array() || sv["full_layers"].empty()) bad("serves.full_layers must be a non-empty array");
  for (const auto& l : sv["full_layers"]) {
    const uint32_t id = u32(l, "serves.full_layers[]", 0, s.serves.n_layers - 1);
    if (!s.serves.full_layers.empty() && id <= s.serves.full_layers.back()) bad("serves.full_layers must increase");
    s.serves.full_layers.push_back(id);
  }

  const nlohmann::json& to = j["trained_on"];
  if (!to.is_object() || to.size() != 2 || !to.contains("file") || !to.contains("sha256"))
    bad("trained_on must be an object with file and sha256");
  s.trained_on_file = str(to["file"], "trained_on.file");
  s.trained_on_sha256 = str(to["sha256"], "trained_on.sha256");
  if (!std::regex_match(s.trained_on_sha256, std::regex("[0-9a-f]{64}"))) bad("trained_on.sha256 must be 64 lower-case hex digits");

  if (!j["tables"].is_array() || j["tables"].empty()) bad("tables must be a non-empty array of .sjcb names");
  for (const auto& t : j["tables"]) {
    const std::string f = str(t, "tables[]");
    CodebookContainer c;
    try {
      c = parse_codebook_container(f, table_bytes(f));
    } catch (const FileError& e) {
      bad(std::string("table ") + e.what());
    }
    if (c.axis != CodebookAxis::token) bad("table " + f + " is of the channel axis; a set holds token-axis tables");
    if (s.table(c.table.bits)) bad("two " + std::to_string(c.table.bits) + "-bit tables");
    s.tables.push_back(std::move(c));
  }

  if (!j["default_for"].is_array()) bad("default_for must be an array of \"K/Vt\" strings");
  for (const auto& p : j["default_for"]) {
    const std::string t = str(p, "default_for[]");
    std::smatch m;
    if (!std::regex_match(t, m, std::regex("([234])/([234])t"))) bad("default_for: '" + t + "' is not K/Vt (e.g. 3/2t)");
    const auto pr = std::make_pair(static_cast<uint32_t>(std::stoul(m[1])), static_cast<uint32_t>(std::stoul(m[2])));
    if (s.is_default_for(pr.first, pr.second)) bad("default_for lists " + t + " twice");
    if (!s.table(pr.first) && !s.table(pr.second)) bad("default_for: " + t + " uses none of the set's tables");
    s.default_for.push_back(pr);
  }
  return s;
}

const std::vector<TableSet>& shipped_table_sets() {
  static const std::vector<TableSet> sets = [] {
    std::vector<TableSet> out;
    for (size_t i = 0; i < detail::kEmbeddedTableSetCount; ++i) {
      const detail::EmbeddedTableSet& e = detail::kEmbeddedTableSets[i];
      auto bytes = [&](const std::string& name) {
        for (size_t k = 0; k < e.n_files; ++k)
          if (name == e.files[k].name) return std::vector<uint8_t>(e.files[k].data, e.files[k].data + e.files[k].size);
        throw FileError(name, "is not compiled in with the set");
      };
      out.push_back(parse_table_set(e.origin, std::string(reinterpret_cast<const char*>(e.json), e.json_size), bytes));
      for (size_t k = 0; k + 1 < out.size(); ++k)
        if (out[k].name == out.back().name) throw FileError(e.origin, "a second set named " + out.back().name);
    }
    return out;
  }();
  return sets;
}

const TableSet* find_table_set(const std::string& name) {
  for (const TableSet& s : shipped_table_sets())
    if (s.name == name) return &s;
  return nullptr;
}

const TableSet* table_set_for(const ModelGeometry& g, const std::vector<TableSet>& sets) {
  for (const TableSet& s : sets)
    if (s.serves_model(g)) return &s;
  return nullptr;
}

std::string table_sets_help() {
  std::string o;
  for (const TableSet& s : shipped_table_sets()) o += (o.empty() ? "" : "; ") + s.summary();
  return o.empty() ? "none" : o;
}

TableChoice TableChoice::parse(const std::string& text) {
  TableChoice c;
  if (text == "auto") return c;
  if (text == "reference") {
    c.kind = Kind::reference;
    return c;
  }
  c.set = find_table_set(text);
  if (!c.set) {
    std::string names;
    for (const TableSet& s : shipped_table_sets()) names += ", " + s.name;
    throw std::invalid_argument("'" + text + "' is not auto, reference or a shipped table set (shipped:" +
                                (names.empty() ? std::string(" none") : names.substr(1)) + ")");
  }
  c.kind = Kind::named;
  return c;
}

const TableSet* TableChoice::resolve(const ModelGeometry* g, uint32_t bits_k, uint32_t bits_v) const {
  switch (kind) {
    case Kind::reference: return nullptr;
    case Kind::named: return set->table(bits_k) || set->table(bits_v) ? set : nullptr;
    case Kind::automatic: break;
  }
  if (!g) return nullptr;
  const TableSet* s = table_set_for(*g, sets ? *sets : shipped_table_sets());
  return s && s->is_default_for(bits_k, bits_v) ? s : nullptr;
}

}  // namespace sjkv
