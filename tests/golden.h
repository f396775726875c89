// Loading the golden tables copied into tests/golden (source named in its README).
#pragma once

#include <cstdint>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

namespace sjkv_test {

inline std::string golden_path(const std::string& name) { return std::string(SJKV_GOLDEN_DIR) + "/" + name; }

// key=value tokens of each non-comment line of a text file.
inline std::vector<std::map<std::string, std::string>> read_kv_lines(const std::string& name) {
  std::ifstream in(golden_path(name));
  std::vector<std::map<std::string, std::string>> out;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream ss(line);
    std::map<std::string, std::string> kv;
    std::string tok;
    ss >> tok;
    kv["kind"] = tok;
    while (ss >> tok) {
      const auto eq = tok.find('=');
      if (eq != std::string::npos) kv[tok.substr(0, eq)] = tok.substr(eq + 1);
    }
    out.push_back(kv);
  }
  return out;
}

// Rows of a CSV file with a header line, as name -> string maps.
inline std::vector<std::map<std::string, std::string>> read_csv(const std::string& name) {
  std::ifstream in(golden_path(name));
  std::vector<std::map<std::string, std::string>> out;
  std::string line;
  std::vector<std::string> head;
  auto split = [](const std::string& s) {
    std::vector<std::string> f;
    std::string cell;
    std::istringstream ss(s);
    while (std::getline(ss, cell, ',')) f.push_back(cell);
    return f;
  };
  if (!std::getline(in, line)) return out;
  head = split(line);
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    const auto f = split(line);
    std::map<std::string, std::string> row;
    for (size_t i = 0; i < head.size() && i < f.size(); ++i) row[head[i]] = f[i];
    out.push_back(row);
  }
  return out;
}

}  // namespace sjkv_test
