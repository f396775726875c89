// Importer for the reference codec harness's `.kvd` tile dumps.
//
// A .kvd file is a sequence of blocks, each (little-endian):
//   int32 magic = 0x31445643 ("CVD1"), int32 D, int32 G, int32 head,
//   char  name[64]               (model name, NUL-padded; not necessarily NUL-terminated)
//   fp16  K[G][D], fp16 V[G][D]  (IEEE binary16 bit patterns)
// Blocks of the same head append G tokens each, in file order. Heads are numbered 0..H-1 and
// every head must end with the same token count. D is a power of two in [32, 4096], G a positive
// multiple of 16 up to 65536, head in [0, 4096). No value may be NaN or infinite.
#pragma once

#include <string>

#include "sjkv/io/capture.h"
#include "sjkv/io/file_error.h"

namespace sjkv {

// Reads a whole .kvd file as one layer (layer_id 0) of `H` kv heads, head_dim = D, rotated = true
// (kvd tiles are seal inputs, already in the rotated basis; rotation_block 0 = unknown),
// source "kvd:<file name>", model = the name field when every block carries the same name.
// Throws FileError(path, defect) for any malformed or unreadable input.
Capture read_kvd(const std::string& path);

}  // namespace sjkv
