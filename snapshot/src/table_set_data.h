// The table sets compiled into the library: generated at configure time from
// data/tablesets/*.json and the .sjcb files each lists (snapshot/CMakeLists.txt).
#pragma once

#include <cstddef>

namespace sjkv {
namespace detail {

struct EmbeddedFile {
  const char* name;  // as the description lists it
  const unsigned char* data;
  size_t size;
};

struct EmbeddedTableSet {
  const char* origin;  // the description's path in the source tree, for errors
  const unsigned char* json;
  size_t json_size;
  const EmbeddedFile* files;
  size_t n_files;
};

extern const EmbeddedTableSet kEmbeddedTableSets[];
extern const size_t kEmbeddedTableSetCount;

}  // namespace detail
}  // namespace sjkv
