// Where scripts/setup links the models: $SJKV_MODEL_DIR, else
// ${XDG_CACHE_HOME:-$HOME/.cache}/sjkv/models.
#pragma once

#include <cstdlib>
#include <string>

namespace sjkv_test {

inline std::string model_dir() {
  if (const char* d = std::getenv("SJKV_MODEL_DIR"); d != nullptr && *d != '\0') return d;
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x != nullptr && *x != '\0') return std::string(x) + "/sjkv/models";
  const char* home = std::getenv("HOME");
  return std::string(home ? home : "") + "/.cache/sjkv/models";
}

}  // namespace sjkv_test
