// The zstd HDF5 filter, registered id 32015 (docs/FORMAT.md section 4): one zstd frame per
// chunk, cd_values[0] = compression level, the byte stream hdf5plugin's Zstd filter reads
// and writes. sjkv registers it in-process before any read or write.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace sjkv {

constexpr unsigned kZstdFilterId = 32015;
constexpr int kZstdDefaultLevel = 3;
// The largest chunk the decoder produces: HDF5 chunks are below 4 GiB.
constexpr uint64_t kZstdMaxChunkBytes = 0xffffffffull;

// Registers the filter with the HDF5 library of this process (H5Zregister). Idempotent and
// thread-safe; throws std::runtime_error when HDF5 refuses.
void register_zstd_filter();

// Whether `level` is a level libzstd accepts (ZSTD_minCLevel() ... ZSTD_maxCLevel()).
bool zstd_level_valid(int level);

// The chunk codec the filter runs, exposed for tests and tools. compress: one frame with
// its content size. decompress: every frame of `n` bytes, at most `max_bytes` of output;
// throws std::runtime_error on a corrupt, incomplete or oversized stream.
std::vector<uint8_t> zstd_compress_chunk(const void* data, size_t n, int level);
std::vector<uint8_t> zstd_decompress_chunk(const void* data, size_t n, uint64_t max_bytes = kZstdMaxChunkBytes);

}  // namespace sjkv
