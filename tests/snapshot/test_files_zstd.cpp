// Telling sjkv files apart (sniff_file), and the zstd filter (id 32015) on its own and against
// byte streams another writer (hdf5plugin) would produce.

#include <gtest/gtest.h>
#include <hdf5.h>
#include <zstd.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "sjkv/io/zstd_filter.h"

#include "file_fixtures.h"

using namespace sjkv;
using namespace sjkv::filetest;

namespace {

// ---- sniffing -------------------------------------------------------------------------------

TEST(Sniff, TellsFilesApart) {
  const std::string cap = scratch("sniff-cap.h5"), snap = scratch("sniff-snap.h5"), txt = scratch("sniff.txt"),
                    plain = scratch("sniff-plain.h5");
  write_capture(cap, base_capture());
  write_snapshot(snap, base_snapshot());
  std::ofstream(txt) << "hello";
  const hid_t f = H5Fcreate(plain.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  H5Fclose(f);
  EXPECT_EQ(sniff_file(cap), FileKind::capture);
  EXPECT_EQ(sniff_file(snap), FileKind::snapshot);
  EXPECT_EQ(sniff_file(txt), FileKind::not_hdf5);
  EXPECT_EQ(sniff_file(plain), FileKind::other_hdf5);
  EXPECT_TRUE(is_hdf5_file(cap));
  EXPECT_TRUE(is_hdf5_file(plain));
  EXPECT_FALSE(is_hdf5_file(txt));
  EXPECT_FALSE(is_hdf5_file(scratch("missing.h5")));
  EXPECT_THROW(sniff_file(scratch("missing.h5")), FileError);
  EXPECT_THROW(read_capture(scratch("missing.h5")), FileError);
  EXPECT_THROW(read_snapshot(scratch_dir()), FileError);
  EXPECT_STREQ(file_kind_name(FileKind::snapshot), "snapshot");
}

// A superblock at offset 512 (a user block) is still an HDF5 file.
TEST(Sniff, UserBlock) {
  const std::string p = scratch("userblock.h5");
  const hid_t fcpl = H5Pcreate(H5P_FILE_CREATE);
  H5Pset_userblock(fcpl, 512);
  const hid_t f = H5Fcreate(p.c_str(), H5F_ACC_TRUNC, fcpl, H5P_DEFAULT);
  H5Fclose(f);
  H5Pclose(fcpl);
  EXPECT_TRUE(is_hdf5_file(p));
}

// ---- zstd -----------------------------------------------------------------------------------

std::vector<uint8_t> sample_bytes(size_t n, uint64_t seed) {
  XorShift64 rng(seed);
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>((rng.next() & 15) + (i % 7));
  return v;
}

TEST(Zstd, ChunkCodecRoundTrip) {
  for (size_t n : {size_t{1}, size_t{1000}, size_t{1} << 20}) {
    const std::vector<uint8_t> x = sample_bytes(n, n);
    const std::vector<uint8_t> z = zstd_compress_chunk(x.data(), x.size(), 3);
    EXPECT_EQ(ZSTD_getFrameContentSize(z.data(), z.size()), n);  // what hdf5plugin's decoder reads
    EXPECT_TRUE(zstd_decompress_chunk(z.data(), z.size()) == x);
    // The frame ends with zstd's content checksum: damage there is detected.
    std::vector<uint8_t> bad = z;
    bad[bad.size() - 2] ^= 0x10;
    EXPECT_THROW(zstd_decompress_chunk(bad.data(), bad.size()), std::runtime_error);
  }
}

TEST(Zstd, ForeignStreams) {
  const std::vector<uint8_t> a = sample_bytes(70000, 1), b = sample_bytes(5000, 2);
  // Two frames back to back.
  std::vector<uint8_t> z = zstd_compress_chunk(a.data(), a.size(), 1);
  const std::vector<uint8_t> zb = zstd_compress_chunk(b.data(), b.size(), 19);
  z.insert(z.end(), zb.begin(), zb.end());
  std::vector<uint8_t> ab = a;
  ab.insert(ab.end(), b.begin(), b.end());
  EXPECT_TRUE(zstd_decompress_chunk(z.data(), z.size()) == ab);
  // A streaming writer's frame without a content size.
  ZSTD_CCtx* c = ZSTD_createCCtx();
  ZSTD_CCtx_setParameter(c, ZSTD_c_contentSizeFlag, 0);
  std::vector<uint8_t> s(ZSTD_compressBound(a.size()));
  const size_t n = ZSTD_compress2(c, s.data(), s.size(), a.data(), a.size());
  ZSTD_freeCCtx(c);
  ASSERT_FALSE(ZSTD_isError(n));
  s.resize(n);
  EXPECT_EQ(ZSTD_getFrameContentSize(s.data(), s.size()), ZSTD_CONTENTSIZE_UNKNOWN);
  EXPECT_TRUE(zstd_decompress_chunk(s.data(), s.size()) == a);
  // Limits and damage.
  EXPECT_THROW(zstd_decompress_chunk(s.data(), s.size(), 1000), std::runtime_error);
  EXPECT_THROW(zstd_decompress_chunk(z.data(), z.size(), 1000), std::runtime_error);
  EXPECT_THROW(zstd_decompress_chunk(s.data(), s.size() - 3), std::runtime_error);
  EXPECT_THROW(zstd_decompress_chunk(z.data(), 7), std::runtime_error);
  std::vector<uint8_t> bad = z;
  bad[0] ^= 0x55;
  EXPECT_THROW(zstd_decompress_chunk(bad.data(), bad.size()), std::runtime_error);
  EXPECT_THROW(zstd_decompress_chunk(z.data(), 0), std::runtime_error);
}

// Through HDF5: the filter's client data, the raw chunk bytes (one frame with its content
// size, what hdf5plugin decodes), and chunks written by another zstd writer.
TEST(Zstd, Hdf5FilterInterop) {
  register_zstd_filter();
  EXPECT_GT(H5Zfilter_avail(kZstdFilterId), 0);
  const std::string p = scratch("zstd-filter.h5");
  const hid_t f = H5Fcreate(p.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  const hsize_t dims[1] = {100000}, chunk[1] = {40000};
  const hid_t sp = H5Screate_simple(1, dims, nullptr);
  const hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
  H5Pset_chunk(dcpl, 1, chunk);
  const unsigned level = 7;
  ASSERT_GE(H5Pset_filter(dcpl, kZstdFilterId, H5Z_FLAG_MANDATORY, 1, &level), 0);
  const hid_t d = H5Dcreate2(f, "x", H5T_STD_U8LE, sp, H5P_DEFAULT, dcpl, H5P_DEFAULT);
  ASSERT_GE(d, 0);
  const std::vector<uint8_t> x = sample_bytes(100000, 9);
  ASSERT_GE(H5Dwrite(d, H5T_NATIVE_UINT8, H5S_ALL, H5S_ALL, H5P_DEFAULT, x.data()), 0);
  // Chunk 2 (the last, partial chunk) rewritten as a foreign writer would: no content size,
  // two frames.
  std::vector<uint8_t> tail(x.begin() + 80000, x.end());
  tail.resize(40000, 0);
  ZSTD_CCtx* c = ZSTD_createCCtx();
  ZSTD_CCtx_setParameter(c, ZSTD_c_contentSizeFlag, 0);
  std::vector<uint8_t> fr(ZSTD_compressBound(20000) * 2 + 64);
  const size_t n1 = ZSTD_compress2(c, fr.data(), fr.size(), tail.data(), 20000);
  const size_t n2 = ZSTD_compress2(c, fr.data() + n1, fr.size() - n1, tail.data() + 20000, 20000);
  ZSTD_freeCCtx(c);
  ASSERT_FALSE(ZSTD_isError(n1) || ZSTD_isError(n2));
  const hsize_t off[1] = {80000};
  ASSERT_GE(H5Dwrite_chunk(d, H5P_DEFAULT, 0, off, n1 + n2, fr.data()), 0);
  H5Dclose(d);
  H5Pclose(dcpl);
  H5Sclose(sp);
  H5Fclose(f);

  const hid_t g = H5Fopen(p.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  const hid_t e = H5Dopen2(g, "x", H5P_DEFAULT);
  std::vector<uint8_t> y(100000);
  ASSERT_GE(H5Dread(e, H5T_NATIVE_UINT8, H5S_ALL, H5S_ALL, H5P_DEFAULT, y.data()), 0);
  EXPECT_TRUE(y == x);
  const hid_t pl = H5Dget_create_plist(e);
  unsigned flags = 0, cd[4] = {0, 0, 0, 0};
  size_t ncd = 4;
  ASSERT_GE(H5Pget_filter_by_id2(pl, kZstdFilterId, &flags, &ncd, cd, 0, nullptr, nullptr), 0);
  EXPECT_EQ(ncd, 1u);
  EXPECT_EQ(cd[0], 7u);
  const hsize_t off0[1] = {0};
  hsize_t raw_n = 0;
  ASSERT_GE(H5Dget_chunk_storage_size(e, off0, &raw_n), 0);
  std::vector<uint8_t> raw(raw_n);
  uint32_t mask = 0;
  ASSERT_GE(H5Dread_chunk(e, H5P_DEFAULT, off0, &mask, raw.data()), 0);
  EXPECT_EQ(mask, 0u);
  EXPECT_EQ(ZSTD_getFrameContentSize(raw.data(), raw.size()), 40000u);
  EXPECT_EQ(ZSTD_findFrameCompressedSize(raw.data(), raw.size()), raw.size());  // exactly one frame
  H5Pclose(pl);
  H5Dclose(e);
  H5Fclose(g);
}

TEST(Zstd, LevelValidation) {
  EXPECT_TRUE(zstd_level_valid(1));
  EXPECT_TRUE(zstd_level_valid(19));
  EXPECT_TRUE(zstd_level_valid(-5));
  EXPECT_FALSE(zstd_level_valid(100));
}

}  // namespace
