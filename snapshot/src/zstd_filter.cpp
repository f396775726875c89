// The zstd HDF5 filter (id 32015, docs/FORMAT.md section 4) on libzstd.
//
// Compiled twice: into sjkv_snapshot, which registers it in-process, and with
// SJKV_H5_PLUGIN into an HDF5 plugin module (H5PLget_plugin_*) so that other HDF5 programs
// (h5py with Debian's hdf5plugin, which ships no zstd) can read sjkv files through
// HDF5_PLUGIN_PATH.
#include "sjkv/io/zstd_filter.h"

#include <hdf5.h>
#include <zstd.h>

#include <cstring>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>

#if defined(SJKV_H5_PLUGIN)
#include <H5PLextern.h>
#endif

namespace sjkv {

namespace {

struct CctxFree {
  void operator()(ZSTD_CCtx* c) const { ZSTD_freeCCtx(c); }
};
struct DctxFree {
  void operator()(ZSTD_DCtx* d) const { ZSTD_freeDCtx(d); }
};

// One context per thread: HDF5 runs filters on the calling thread, and a context reused
// across chunks saves its allocation (several hundred KiB at level 3) per chunk.
// Frames carry zstd's content checksum (FORMAT.md section 4), so a damaged chunk fails to
// decode instead of decoding to other values.
ZSTD_CCtx* thread_cctx() {
  thread_local std::unique_ptr<ZSTD_CCtx, CctxFree> c([] {
    ZSTD_CCtx* x = ZSTD_createCCtx();
    if (x) ZSTD_CCtx_setParameter(x, ZSTD_c_checksumFlag, 1);
    return x;
  }());
  return c.get();
}
ZSTD_DCtx* thread_dctx() {
  thread_local std::unique_ptr<ZSTD_DCtx, DctxFree> d(ZSTD_createDCtx());
  return d.get();
}

int clamp_level(int level) {
  if (level < ZSTD_minCLevel()) return ZSTD_minCLevel();
  if (level > ZSTD_maxCLevel()) return ZSTD_maxCLevel();
  return level;
}

// Decodes every frame of src with the streaming API (frames without a content size),
// refusing more than max_bytes of output or an incomplete last frame.
std::vector<uint8_t> decode_stream(const void* src, size_t n, uint64_t max_bytes) {
  ZSTD_DCtx* d = thread_dctx();
  if (!d) throw std::runtime_error("zstd: out of memory");
  ZSTD_DCtx_reset(d, ZSTD_reset_session_only);
  std::vector<uint8_t> out;
  size_t produced = 0;
  ZSTD_inBuffer in{src, n, 0};
  for (;;) {
    if (out.size() - produced < ZSTD_DStreamOutSize()) {
      uint64_t want = static_cast<uint64_t>(out.size()) * 2;
      if (want < produced + ZSTD_DStreamOutSize()) want = produced + ZSTD_DStreamOutSize();
      if (want > max_bytes + 1) want = max_bytes + 1;  // room to notice an oversized stream
      if (want <= produced) throw std::runtime_error("zstd: chunk decodes to more than the limit");
      out.resize(static_cast<size_t>(want));
    }
    ZSTD_outBuffer o{out.data() + produced, out.size() - produced, 0};
    const size_t in_before = in.pos;
    const size_t ret = ZSTD_decompressStream(d, &o, &in);
    if (ZSTD_isError(ret)) throw std::runtime_error(std::string("zstd: ") + ZSTD_getErrorName(ret));
    produced += o.pos;
    if (produced > max_bytes) throw std::runtime_error("zstd: chunk decodes to more than the limit");
    if (in.pos == in.size && ret == 0) break;  // every frame complete
    if (o.pos == o.size) continue;              // output full: flush more
    if (in.pos == in.size) throw std::runtime_error("zstd: truncated frame");
    if (in.pos == in_before && o.pos == 0) throw std::runtime_error("zstd: decoder made no progress");
  }
  out.resize(produced);
  return out;
}

// Size of the decoded chunk when every frame states it; 0 with *unknown = true otherwise.
// Walks the frames with the stable API (ZSTD_findDecompressedSize is experimental-only).
uint64_t stated_size(const void* src, size_t n, bool* unknown) {
  *unknown = false;
  const uint8_t* p = static_cast<const uint8_t*>(src);
  size_t left = n;
  uint64_t total = 0;
  while (left > 0) {
    const unsigned long long s = ZSTD_getFrameContentSize(p, left);
    if (s == ZSTD_CONTENTSIZE_ERROR) throw std::runtime_error("zstd: not a sequence of complete zstd frames");
    if (s == ZSTD_CONTENTSIZE_UNKNOWN) {
      *unknown = true;
      return 0;
    }
    const size_t frame = ZSTD_findFrameCompressedSize(p, left);
    if (ZSTD_isError(frame) || frame == 0 || frame > left)
      throw std::runtime_error("zstd: not a sequence of complete zstd frames");
    if (s > kZstdMaxChunkBytes || total + s > kZstdMaxChunkBytes)
      throw std::runtime_error("zstd: chunk decodes to more than the limit");
    total += s;
    p += frame;
    left -= frame;
  }
  return total;
}

}  // namespace

bool zstd_level_valid(int level) { return level >= ZSTD_minCLevel() && level <= ZSTD_maxCLevel(); }

std::vector<uint8_t> zstd_compress_chunk(const void* data, size_t n, int level) {
  ZSTD_CCtx* c = thread_cctx();
  if (!c) throw std::runtime_error("zstd: out of memory");
  std::vector<uint8_t> out(ZSTD_compressBound(n));
  ZSTD_CCtx_setParameter(c, ZSTD_c_compressionLevel, clamp_level(level));
  const size_t r = ZSTD_compress2(c, out.data(), out.size(), data, n);
  if (ZSTD_isError(r)) throw std::runtime_error(std::string("zstd: ") + ZSTD_getErrorName(r));
  out.resize(r);
  return out;
}

std::vector<uint8_t> zstd_decompress_chunk(const void* data, size_t n, uint64_t max_bytes) {
  if (n == 0) throw std::runtime_error("zstd: empty chunk");
  bool unknown = false;
  const uint64_t size = stated_size(data, n, &unknown);
  if (unknown) return decode_stream(data, n, max_bytes);
  if (size > max_bytes) throw std::runtime_error("zstd: chunk decodes to more than the limit");
  std::vector<uint8_t> out(static_cast<size_t>(size));
  ZSTD_DCtx* d = thread_dctx();
  if (!d) throw std::runtime_error("zstd: out of memory");
  const size_t r = ZSTD_decompressDCtx(d, out.data(), out.size(), data, n);
  if (ZSTD_isError(r)) throw std::runtime_error(std::string("zstd: ") + ZSTD_getErrorName(r));
  if (r != size) throw std::runtime_error("zstd: frame shorter than its stated size");
  return out;
}

namespace {

// H5Z_func_t. Returns the size of the new *buf, or 0 on failure (HDF5 then fails the I/O).
// Buffers belong to HDF5, so they are allocated and freed with its allocator.
size_t zstd_h5_filter(unsigned int flags, size_t cd_nelmts, const unsigned int cd_values[], size_t nbytes,
                      size_t* buf_size, void** buf) {
  try {
    if (flags & H5Z_FLAG_REVERSE) {
      if (nbytes == 0) return 0;
      bool unknown = false;
      const uint64_t size = stated_size(*buf, nbytes, &unknown);
      void* out = nullptr;
      size_t out_n = 0;
      if (!unknown) {
        if (size == 0 || size > kZstdMaxChunkBytes) return 0;
        out_n = static_cast<size_t>(size);
        out = H5allocate_memory(out_n, false);
        if (!out) return 0;
        const size_t r = ZSTD_decompressDCtx(thread_dctx(), out, out_n, *buf, nbytes);
        if (ZSTD_isError(r) || r != out_n) {
          H5free_memory(out);
          return 0;
        }
      } else {
        const std::vector<uint8_t> v = decode_stream(*buf, nbytes, kZstdMaxChunkBytes);
        if (v.empty()) return 0;
        out_n = v.size();
        out = H5allocate_memory(out_n, false);
        if (!out) return 0;
        std::memcpy(out, v.data(), out_n);
      }
      H5free_memory(*buf);
      *buf = out;
      *buf_size = out_n;
      return out_n;
    }
    const int level = cd_nelmts > 0 ? static_cast<int>(cd_values[0]) : kZstdDefaultLevel;
    const size_t bound = ZSTD_compressBound(nbytes);
    void* out = H5allocate_memory(bound, false);
    if (!out) return 0;
    ZSTD_CCtx* c = thread_cctx();
    if (c) ZSTD_CCtx_setParameter(c, ZSTD_c_compressionLevel, clamp_level(level));
    const size_t r = c ? ZSTD_compress2(c, out, bound, *buf, nbytes) : 0;
    if (!c || ZSTD_isError(r)) {
      H5free_memory(out);
      return 0;
    }
    H5free_memory(*buf);
    *buf = out;
    *buf_size = bound;
    return r;
  } catch (...) {
    return 0;
  }
}

const H5Z_class2_t kZstdClass = {
    H5Z_CLASS_T_VERS,
    static_cast<H5Z_filter_t>(kZstdFilterId),
    1,  // encoder present
    1,  // decoder present
    "Zstandard (sjkv, libzstd)",
    nullptr,  // can_apply: any type
    nullptr,  // set_local: cd_values[0] is the level the writer chose
    zstd_h5_filter,
};

}  // namespace

void register_zstd_filter() {
  static std::once_flag once;
  static bool ok = false;
  std::call_once(once, [] {
    H5E_auto2_t func = nullptr;
    void* data = nullptr;
    H5Eget_auto2(H5E_DEFAULT, &func, &data);
    H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
    ok = H5Zregister(&kZstdClass) >= 0;
    H5Eset_auto2(H5E_DEFAULT, func, data);
  });
  if (!ok) throw std::runtime_error("HDF5 refused to register the zstd filter (id 32015)");
}

}  // namespace sjkv

#if defined(SJKV_H5_PLUGIN)
extern "C" {
H5PL_type_t H5PLget_plugin_type(void) { return H5PL_TYPE_FILTER; }
const void* H5PLget_plugin_info(void) { return &sjkv::kZstdClass; }
}
#endif
