// Capture files (docs/FORMAT.md section 2) and telling sjkv's HDF5 files apart.
#pragma once

#include <string>

#include "sjkv/io/atomic_file.h"
#include "sjkv/io/capture.h"
#include "sjkv/io/file_error.h"

namespace sjkv {

// Writes `cap` atomically (AtomicOutput). Throws std::invalid_argument when `cap` fails
// check_consistent() or the level is not a zstd level (nothing is created), FileError when
// the file cannot be written (no output is left behind).
void write_capture(const std::string& path, const Capture& cap, int zstd_level = 3);
// The same into `out`'s temporary, not committed: for outputs committed together (commit_all).
void write_capture(AtomicOutput& out, const Capture& cap, int zstd_level = 3);

// Reads and validates a capture like hostile input; throws FileError(path, defect).
Capture read_capture(const std::string& path);

// True when the file starts with an HDF5 signature (at offset 0 or 512 * 2^k). False for a
// file that cannot be opened.
bool is_hdf5_file(const std::string& path);

enum class FileKind { not_hdf5, capture, snapshot, other_hdf5 };
const char* file_kind_name(FileKind k);  // "not HDF5", "capture", "snapshot", "HDF5 (not sjkv)"

// What a file is, by its signature and its `sjkv_format` attribute. Throws FileError when the
// file cannot be opened at all, or is HDF5 but unreadable.
FileKind sniff_file(const std::string& path);

}  // namespace sjkv
