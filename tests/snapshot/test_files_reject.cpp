// Capture and snapshot files the readers must refuse (docs/FORMAT.md 5): one hostile file per
// defect, built by writing a valid file and damaging it with the HDF5 C API; the ones marked
// commit are also the files under tests/reject/.

#include <gtest/gtest.h>
#include <hdf5.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include "sjkv/io/zstd_filter.h"

#include "file_fixtures.h"

using namespace sjkv;
using namespace sjkv::filetest;

namespace {

// ---- HDF5 surgery on written files (the hostile-file fixtures) -------------------------------

struct H5File {
  hid_t id;
  explicit H5File(const std::string& p) : id(H5Fopen(p.c_str(), H5F_ACC_RDWR, H5P_DEFAULT)) {
    if (id < 0) throw std::runtime_error("fixture: cannot open " + p);
  }
  ~H5File() { H5Fclose(id); }
};

void must(herr_t st, const char* what) {
  if (st < 0) throw std::runtime_error(std::string("fixture: ") + what);
}

// Splits "a/b/attr" into object path "a/b" (or "/") and attribute name.
std::pair<std::string, std::string> split_attr(const std::string& p) {
  const size_t s = p.find_last_of('/');
  if (s == std::string::npos) return {"/", p};
  return {p.substr(0, s), p.substr(s + 1)};
}

void put_attr(hid_t f, const std::string& path, hid_t type, const void* v, hsize_t n = 0) {
  const auto [obj, name] = split_attr(path);
  if (H5Aexists_by_name(f, obj.c_str(), name.c_str(), H5P_DEFAULT) > 0)
    must(H5Adelete_by_name(f, obj.c_str(), name.c_str(), H5P_DEFAULT), "delete attribute");
  const hid_t sp = n ? H5Screate_simple(1, &n, nullptr) : H5Screate(H5S_SCALAR);
  const hid_t a = H5Acreate_by_name(f, obj.c_str(), name.c_str(), type, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  must(a, "create attribute");
  must(H5Awrite(a, type, v), "write attribute");
  H5Aclose(a);
  H5Sclose(sp);
}
void put_u32(hid_t f, const std::string& path, uint32_t v) { put_attr(f, path, H5T_NATIVE_UINT32, &v); }
void put_i64(hid_t f, const std::string& path, int64_t v) { put_attr(f, path, H5T_NATIVE_INT64, &v); }
void put_u64(hid_t f, const std::string& path, uint64_t v) { put_attr(f, path, H5T_NATIVE_UINT64, &v); }
// A string as sjkv writes it (fixed-length, null-padded).
void put_str(hid_t f, const std::string& path, const std::string& s) {
  const hid_t t = H5Tcopy(H5T_C_S1);
  H5Tset_size(t, s.size());
  H5Tset_strpad(t, H5T_STR_NULLPAD);
  put_attr(f, path, t, s.data());
  H5Tclose(t);
}
// A variable-length string, as h5py writes a Python str.
void put_vlen_str(hid_t f, const std::string& path, const std::string& s) {
  const hid_t t = H5Tcopy(H5T_C_S1);
  H5Tset_size(t, H5T_VARIABLE);
  H5Tset_cset(t, H5T_CSET_UTF8);
  const char* p = s.c_str();
  put_attr(f, path, t, &p);
  H5Tclose(t);
}
// Fixed-length, null-terminated, with `extra` trailing spaces in a space-padded type.
void put_spacepad_str(hid_t f, const std::string& path, const std::string& s) {
  const hid_t t = H5Tcopy(H5T_C_S1);
  const std::string padded = s + "   ";
  H5Tset_size(t, padded.size());
  H5Tset_strpad(t, H5T_STR_SPACEPAD);
  put_attr(f, path, t, padded.data());
  H5Tclose(t);
}
void drop_attr(hid_t f, const std::string& path) {
  const auto [obj, name] = split_attr(path);
  must(H5Adelete_by_name(f, obj.c_str(), name.c_str(), H5P_DEFAULT), "delete attribute");
}
void drop(hid_t f, const std::string& path) { must(H5Ldelete(f, path.c_str(), H5P_DEFAULT), "delete link"); }

hid_t fp16_type() {
  const hid_t t = H5Tcopy(H5T_IEEE_F32LE);
  H5Tset_fields(t, 15, 10, 5, 0, 10);
  H5Tset_size(t, 2);
  H5Tset_ebias(t, 15);
  return t;
}

// Replaces a dataset by a contiguous one of the given type and shape, filled with `fill`.
void replace_dataset(hid_t f, const std::string& path, hid_t type, std::vector<hsize_t> dims, uint8_t fill = 0) {
  if (H5Lexists(f, path.c_str(), H5P_DEFAULT) > 0) drop(f, path);
  const hid_t sp = H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr);
  const hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
  H5Pset_obj_track_times(dcpl, 0);  // reproducible fixture bytes
  const hid_t d = H5Dcreate2(f, path.c_str(), type, sp, H5P_DEFAULT, dcpl, H5P_DEFAULT);
  H5Pclose(dcpl);
  must(d, "create dataset");
  size_t n = H5Tget_size(type);
  for (hsize_t v : dims) n *= v;
  if (n) {
    std::vector<uint8_t> buf(n, fill);
    must(H5Dwrite(d, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf.data()), "write dataset");
  }
  H5Dclose(d);
  H5Sclose(sp);
}

// Writes one element of a 3-D (or 1-D) dataset with the dataset's own type.
void poke(hid_t f, const std::string& path, std::vector<hsize_t> at, const void* value) {
  const hid_t d = H5Dopen2(f, path.c_str(), H5P_DEFAULT);
  must(d, "open dataset");
  const hid_t t = H5Dget_type(d);
  const hid_t fs = H5Dget_space(d);
  std::vector<hsize_t> one(at.size(), 1);
  must(H5Sselect_hyperslab(fs, H5S_SELECT_SET, at.data(), nullptr, one.data(), nullptr), "select");
  const hsize_t n1 = 1;
  const hid_t ms = H5Screate_simple(1, &n1, nullptr);
  must(H5Dwrite(d, t, ms, fs, H5P_DEFAULT, value), "write element");
  H5Sclose(ms);
  H5Sclose(fs);
  H5Tclose(t);
  H5Dclose(d);
}

void poke_u16(hid_t f, const std::string& path, std::vector<hsize_t> at, uint16_t v) { poke(f, path, at, &v); }
void poke_u8(hid_t f, const std::string& path, std::vector<hsize_t> at, uint8_t v) { poke(f, path, at, &v); }

// Recreates a dataset chunked along its first axis with the zstd filter and writes only
// the first chunk: a dataset whose other chunks were never stored.
void truncate_chunks(hid_t f, const std::string& path, hsize_t rows_per_chunk) {
  const hid_t d0 = H5Dopen2(f, path.c_str(), H5P_DEFAULT);
  const hid_t t = H5Dget_type(d0);
  const hid_t sp = H5Dget_space(d0);
  std::vector<hsize_t> dims(static_cast<size_t>(H5Sget_simple_extent_ndims(sp)));
  H5Sget_simple_extent_dims(sp, dims.data(), nullptr);
  H5Dclose(d0);
  drop(f, path);
  const hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
  H5Pset_obj_track_times(dcpl, 0);
  std::vector<hsize_t> chunk = dims;
  chunk[0] = rows_per_chunk;
  must(H5Pset_chunk(dcpl, static_cast<int>(chunk.size()), chunk.data()), "chunk");
  const unsigned level = 3;
  must(H5Pset_filter(dcpl, kZstdFilterId, H5Z_FLAG_MANDATORY, 1, &level), "filter");
  const hid_t d = H5Dcreate2(f, path.c_str(), t, sp, H5P_DEFAULT, dcpl, H5P_DEFAULT);
  must(d, "create chunked");
  const hid_t fs = H5Dget_space(d);
  std::vector<hsize_t> start(dims.size(), 0);
  must(H5Sselect_hyperslab(fs, H5S_SELECT_SET, start.data(), nullptr, chunk.data(), nullptr), "select");
  size_t n = H5Tget_size(t);
  for (hsize_t v : chunk) n *= v;
  std::vector<uint8_t> buf(n, 0);
  const hid_t ms = H5Screate_simple(static_cast<int>(chunk.size()), chunk.data(), nullptr);
  must(H5Dwrite(d, t, ms, fs, H5P_DEFAULT, buf.data()), "write first chunk");
  H5Sclose(ms);
  H5Sclose(fs);
  H5Dclose(d);
  H5Pclose(dcpl);
  H5Sclose(sp);
  H5Tclose(t);
}

// Replaces the first chunk of a chunked dataset by bytes that are not a zstd frame.
void corrupt_first_chunk(hid_t f, const std::string& path) {
  const hid_t d = H5Dopen2(f, path.c_str(), H5P_DEFAULT);
  const hid_t sp = H5Dget_space(d);
  std::vector<hsize_t> off(static_cast<size_t>(H5Sget_simple_extent_ndims(sp)), 0);
  const std::vector<uint8_t> junk = {0x28, 0xb5, 0x2f, 0xfd, 0x00, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07};
  must(H5Dwrite_chunk(d, H5P_DEFAULT, 0, off.data(), junk.size(), junk.data()), "write chunk");
  H5Sclose(sp);
  H5Dclose(d);
}

// Moves an object to the root and points a soft link at it under its old name.
void make_soft_link(hid_t f, const std::string& path) {
  const std::string moved = "/moved_away";
  must(H5Lmove(f, path.c_str(), f, moved.c_str(), H5P_DEFAULT, H5P_DEFAULT), "move");
  must(H5Lcreate_soft(moved.c_str(), f, path.c_str(), H5P_DEFAULT, H5P_DEFAULT), "soft link");
}

// Replaces a dataset by a contiguous one whose raw data lives in an external file.
void make_external(hid_t f, const std::string& path, const std::string& ext_file) {
  const hid_t d0 = H5Dopen2(f, path.c_str(), H5P_DEFAULT);
  const hid_t t = H5Dget_type(d0);
  const hid_t sp = H5Dget_space(d0);
  const hsize_t bytes = H5Dget_storage_size(d0) ? static_cast<hsize_t>(H5Sget_simple_extent_npoints(sp)) * H5Tget_size(t) : 0;
  H5Dclose(d0);
  drop(f, path);
  std::ofstream(ext_file, std::ios::binary) << std::string(bytes, '\0');
  const hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
  H5Pset_obj_track_times(dcpl, 0);
  must(H5Pset_external(dcpl, ext_file.c_str(), 0, bytes), "external");
  const hid_t d = H5Dcreate2(f, path.c_str(), t, sp, H5P_DEFAULT, dcpl, H5P_DEFAULT);
  must(d, "create external");
  H5Dclose(d);
  H5Pclose(dcpl);
  H5Sclose(sp);
  H5Tclose(t);
}

void truncate_file(const std::string& p, double keep) {
  struct stat st;
  ASSERT_EQ(::stat(p.c_str(), &st), 0);
  ASSERT_EQ(::truncate(p.c_str(), static_cast<off_t>(static_cast<double>(st.st_size) * keep)), 0);
}

enum class Kind { capture, snapshot };

struct RejectCase {
  const char* name;    // file name under tests/reject/ (without .h5)
  Kind kind;           // which reader must refuse it
  const char* defect;  // what the README says
  const char* expect;  // a fragment the error message must contain
  bool commit;         // also committed as a file under tests/reject/
  std::function<void(const std::string&)> make;
};

void write_base_capture(const std::string& p) { write_capture(p, base_capture(), 3); }
void write_base_snapshot(const std::string& p) { write_snapshot(p, base_snapshot(), 3); }

// Writes a valid base file and applies `edit` to it with HDF5.
std::function<void(const std::string&)> capture_with(std::function<void(hid_t)> edit) {
  return [edit](const std::string& p) {
    write_base_capture(p);
    H5File f(p);
    edit(f.id);
  };
}
std::function<void(const std::string&)> snapshot_with(std::function<void(hid_t)> edit, SnapSpec sp = base_snap_spec()) {
  return [edit, sp](const std::string& p) {
    EmbeddedCodebooks cb;
    const Snapshot s = make_snapshot(sp, &cb);
    write_snapshot(p, s, 3, s.config.resolved_body() == Body::trellis ? &cb : nullptr);
    H5File f(p);
    edit(f.id);
  };
}

const std::vector<RejectCase>& reject_cases() {
  static const std::vector<RejectCase> cases = {
      // -- not a readable sjkv file
      {"capture-not-hdf5", Kind::capture, "a text file, no HDF5 signature", "not an HDF5 file", true,
       [](const std::string& p) { std::ofstream(p) << "K,V\n1,2\n"; }},
      {"capture-truncated-file", Kind::capture, "a valid capture cut to 60% of its bytes",
       "unreadable HDF5 file (truncated or corrupt)", true,
       [](const std::string& p) {
         write_base_capture(p);
         truncate_file(p, 0.6);
       }},
      {"capture-no-magic", Kind::capture, "an HDF5 file without the sjkv_format attribute",
       "not an sjkv file (no sjkv_format attribute)", false, capture_with([](hid_t f) { drop_attr(f, "sjkv_format"); })},
      {"capture-bad-magic", Kind::capture, "sjkv_format = 'sjkv-captur'",
       "sjkv_format is 'sjkv-captur', expected 'sjkv-capture'", true,
       capture_with([](hid_t f) { put_str(f, "sjkv_format", "sjkv-captur"); })},
      {"capture-is-snapshot", Kind::capture, "a snapshot given to the capture reader",
       "sjkv_format is 'sjkv-snapshot', expected 'sjkv-capture'", false, write_base_snapshot},
      {"capture-future-version", Kind::capture, "version = 2", "version 2 is newer than this build reads (1)", true,
       capture_with([](hid_t f) { put_u32(f, "version", 2); })},
      {"capture-version-zero", Kind::capture, "version = 0", "version 0 is invalid", false,
       capture_with([](hid_t f) { put_u32(f, "version", 0); })},
      {"capture-version-string", Kind::capture, "version stored as a string", "attribute version: expected an integer",
       false, capture_with([](hid_t f) { put_str(f, "version", "1"); })},
      {"capture-missing-head-dim", Kind::capture, "no head_dim attribute", "missing attribute head_dim", false,
       capture_with([](hid_t f) { drop_attr(f, "head_dim"); })},
      {"capture-head-dim-not-pow2", Kind::capture, "head_dim = 96", "head_dim = 96 is not a power of two", true,
       capture_with([](hid_t f) { put_u32(f, "head_dim", 96); })},
      {"capture-head-dim-too-large", Kind::capture, "head_dim = 2048", "head_dim = 2048 is outside [32, 1024]", false,
       capture_with([](hid_t f) { put_u32(f, "head_dim", 2048); })},
      {"capture-kv-heads-zero", Kind::capture, "kv_heads = 0", "kv_heads = 0 is outside [1, 256]", false,
       capture_with([](hid_t f) { put_u32(f, "kv_heads", 0); })},
      {"capture-tokens-mismatch", Kind::capture, "tokens = 41 but the datasets hold 40 positions",
       "dataset layers/3/k: shape [40, 2, 32] does not match [tokens, kv_heads, head_dim] = [41, 2, 32]", true,
       capture_with([](hid_t f) {
         put_u32(f, "tokens", 41);
         drop(f, "token_ids");
       })},
      {"capture-kv-heads-mismatch", Kind::capture, "kv_heads = 4 but the datasets hold 2 heads",
       "does not match [tokens, kv_heads, head_dim] = [40, 4, 32]", false,
       capture_with([](hid_t f) { put_u32(f, "kv_heads", 4); })},
      {"capture-head-dim-mismatch", Kind::capture, "head_dim = 64 but the datasets hold 32 channels",
       "does not match [tokens, kv_heads, head_dim] = [40, 2, 64]", false,
       capture_with([](hid_t f) { put_u32(f, "head_dim", 64); })},
      {"capture-negative-tokens", Kind::capture, "tokens = -1 (int64)", "attribute tokens = -1 is out of range", false,
       capture_with([](hid_t f) { put_i64(f, "tokens", -1); })},
      {"capture-rotated-not-bool", Kind::capture, "rotated = 2", "attribute rotated = 2 is out of range [0, 1]", false,
       capture_with([](hid_t f) { put_u32(f, "rotated", 2); })},
      {"capture-rotation-block-unrotated", Kind::capture, "rotation_block = 32 with rotated = 0",
       "but the values are not rotated", false, capture_with([](hid_t f) {
         put_u32(f, "rotated", 0);
         put_u32(f, "rotation_block", 32);
       })},
      {"capture-model-not-string", Kind::capture, "model stored as an integer", "attribute model: expected a string",
       false, capture_with([](hid_t f) { put_u32(f, "model", 5); })},
      {"capture-duplicate-layer", Kind::capture, "layer_ids = [3, 3]", "layer id 3 appears twice", false,
       capture_with([](hid_t f) {
         const uint32_t ids[2] = {3, 3};
         put_attr(f, "layer_ids", H5T_NATIVE_UINT32, ids, 2);
       })},
      {"capture-layer-missing", Kind::capture, "layer 7 listed but its group deleted", "group layers/7 is missing",
       false, capture_with([](hid_t f) { drop(f, "layers/7"); })},
      {"capture-layer-unlisted", Kind::capture, "layers/7 present but layer_ids = [3]",
       "group layers/7 is not in layer_ids", false, capture_with([](hid_t f) {
         const uint32_t ids[1] = {3};
         put_attr(f, "layer_ids", H5T_NATIVE_UINT32, ids, 1);
       })},
      {"capture-missing-dataset", Kind::capture, "layers/3/k deleted", "dataset layers/3/k is missing", true,
       capture_with([](hid_t f) { drop(f, "layers/3/k"); })},
      {"capture-unexpected-object", Kind::capture, "an extra dataset layers/3/q",
       "group layers/3 holds an unexpected object 'q'", false,
       capture_with([](hid_t f) { replace_dataset(f, "layers/3/q", H5T_NATIVE_UINT8, {1}); })},
      {"capture-k-not-fp16", Kind::capture, "layers/3/k stored as uint16",
       "dataset layers/3/k: element type is not fp16", false,
       capture_with([](hid_t f) { replace_dataset(f, "layers/3/k", H5T_STD_U16LE, {40, 2, 32}); })},
      {"capture-k-rank", Kind::capture, "layers/3/k stored as [40, 64]", "dataset layers/3/k: rank 2, expected 3",
       false, capture_with([](hid_t f) {
         const hid_t t = fp16_type();
         replace_dataset(f, "layers/3/k", t, {40, 64});
         H5Tclose(t);
       })},
      {"capture-nan-in-k", Kind::capture, "a NaN (0x7e00) at layer 3, token 5, head 1, channel 7 of K",
       "layers/3/k: NaN or infinity at token 5, head 1, channel 7", true,
       capture_with([](hid_t f) { poke_u16(f, "layers/3/k", {5, 1, 7}, 0x7e00); })},
      {"capture-inf-in-v", Kind::capture, "-infinity (0xfc00) at layer 7, token 39, head 0, channel 31 of V",
       "layers/7/v: NaN or infinity at token 39, head 0, channel 31", false,
       capture_with([](hid_t f) { poke_u16(f, "layers/7/v", {39, 0, 31}, 0xfc00); })},
      {"capture-truncated-dataset", Kind::capture, "layers/3/v chunked by 16 tokens with only the first chunk stored",
       "dataset layers/3/v is truncated: 1 of 3 chunks stored", true,
       capture_with([](hid_t f) { truncate_chunks(f, "layers/3/v", 16); })},
      {"capture-corrupt-chunk", Kind::capture, "the first chunk of layers/7/k is not a valid zstd frame",
       "cannot read dataset layers/7/k", true, capture_with([](hid_t f) { corrupt_first_chunk(f, "layers/7/k"); })},
      {"capture-soft-link", Kind::capture, "layers/3 is a soft link to another group",
       "layers/3 is a soft or external link (not allowed)", false,
       capture_with([](hid_t f) { make_soft_link(f, "layers/3"); })},
      {"capture-external-storage", Kind::capture, "layers/3/k keeps its data in an external file",
       "dataset layers/3/k uses external storage (not allowed)", false, [](const std::string& p) {
         write_base_capture(p);
         H5File f(p);
         make_external(f.id, "layers/3/k", p + ".raw");
       }},
      {"capture-token-id-negative", Kind::capture, "token_ids[4] = -1",
       "token_ids[4] = -1 is out of range [0, 2147483647]", false,
       capture_with([](hid_t f) {
         const int32_t v = -1;
         poke(f, "token_ids", {4}, &v);
       })},
      {"capture-token-ids-length", Kind::capture, "token_ids with 39 entries for 40 tokens",
       "dataset token_ids: shape [39] does not match [tokens] = [40]", false,
       capture_with([](hid_t f) { replace_dataset(f, "token_ids", H5T_STD_I32LE, {39}); })},

      // -- snapshots
      {"snapshot-future-version", Kind::snapshot, "version = 2", "version 2 is newer than this build reads (1)", true,
       snapshot_with([](hid_t f) { put_u32(f, "version", 2); })},
      {"snapshot-future-record-format", Kind::snapshot, "record_format_version = 2",
       "record_format_version 2 is newer than this build reads (1)", false,
       snapshot_with([](hid_t f) { put_u32(f, "record_format_version", 2); })},
      {"snapshot-is-capture", Kind::snapshot, "a capture given to the snapshot reader",
       "sjkv_format is 'sjkv-capture', expected 'sjkv-snapshot'", false, write_base_capture},
      {"snapshot-spacepad-magic-ok-version-bad", Kind::snapshot,
       "magic as a space-padded string (accepted) and version = 3", "version 3 is newer", false,
       snapshot_with([](hid_t f) {
         put_spacepad_str(f, "sjkv_format", "sjkv-snapshot");
         put_u32(f, "version", 3);
       })},
      {"snapshot-vlen-string", Kind::snapshot, "model as a variable-length string (HDF5's global heap)",
       "attribute model: variable-length strings are not accepted", true,
       snapshot_with([](hid_t f) { put_vlen_str(f, "model", "x"); })},
      {"capture-string-with-nul", Kind::capture, "source = 'ab<NUL>cd' in a null-padded string",
       "attribute source contains a NUL byte", false, capture_with([](hid_t f) { put_str(f, "source", std::string("ab\0cd", 5)); })},
      {"snapshot-unknown-staging", Kind::snapshot, "staging = 'q4_0'",
       "attribute staging: unknown value 'q4_0' (expected one of tq6_0, f16, q8_0)", true,
       snapshot_with([](hid_t f) { put_str(f, "staging", "q4_0"); })},
      {"snapshot-unknown-body", Kind::snapshot, "body = 'auto' (files store the resolved body)",
       "attribute body: unknown value 'auto' (expected one of scalar, trellis)", false,
       snapshot_with([](hid_t f) { put_str(f, "body", "auto"); })},
      {"snapshot-unknown-sink-type", Kind::snapshot, "sink_type = 'bf16'", "attribute sink_type: unknown value 'bf16'",
       false, snapshot_with([](hid_t f) { put_str(f, "sink_type", "bf16"); })},
      {"snapshot-unknown-balance", Kind::snapshot, "balance = 'last'", "attribute balance: unknown value 'last'", false,
       snapshot_with([](hid_t f) { put_str(f, "balance", "last"); })},
      {"snapshot-unknown-axis", Kind::snapshot, "axis = 'row'", "attribute axis: unknown value 'row'", false,
       snapshot_with([](hid_t f) { put_str(f, "axis", "row"); })},
      {"snapshot-channel-axis-scalar", Kind::snapshot, "axis = 'channel' with a scalar body",
       "axis = 'channel' with a scalar body", false, snapshot_with([](hid_t f) { put_str(f, "axis", "channel"); })},
      {"snapshot-head-dim-not-pow2", Kind::snapshot, "head_dim = 96", "head_dim = 96 is not a power of two", false,
       snapshot_with([](hid_t f) { put_u32(f, "head_dim", 96); })},
      {"snapshot-bits-out-of-range", Kind::snapshot, "bits_k = 5", "attribute bits_k = 5 is out of range [2, 4]", false,
       snapshot_with([](hid_t f) { put_u32(f, "bits_k", 5); })},
      {"snapshot-group-invalid", Kind::snapshot, "group = 24", "group = 24 is not a multiple of 16", false,
       snapshot_with([](hid_t f) { put_u32(f, "group", 24); })},
      {"snapshot-sink-invalid", Kind::snapshot, "sink = 100", "sink must be a positive multiple of 64", false,
       snapshot_with([](hid_t f) { put_u32(f, "sink", 100); })},
      {"snapshot-staging-block", Kind::snapshot, "staging tq6_0 with head_dim 64",
       "head_dim must be a multiple of the staging block", false,
       snapshot_with([](hid_t f) { put_str(f, "staging", "tq6_0"); })},
      {"snapshot-rotation-zero", Kind::snapshot, "rotation_block = 0", "rotation_block = 0 (the file stores the resolved block)",
       false, snapshot_with([](hid_t f) { put_u32(f, "rotation_block", 0); })},
      {"snapshot-rotation-invalid", Kind::snapshot, "rotation_block = 48",
       "rotation block must be a power of two >= 32 that divides head_dim", false,
       snapshot_with([](hid_t f) { put_u32(f, "rotation_block", 48); })},
      {"snapshot-record-bytes-mismatch", Kind::snapshot, "record_bytes = 1500 (the layout says 1504)",
       "attribute record_bytes = 1500 does not match the layout", true,
       snapshot_with([](hid_t f) { put_u32(f, "record_bytes", 1500); })},
      {"snapshot-row-bytes-mismatch", Kind::snapshot, "row_bytes = 64 (q8_0 rows of 64 values are 68 bytes)",
       "attribute row_bytes = 64 does not match q8_0 rows", false,
       snapshot_with([](hid_t f) { put_u32(f, "row_bytes", 64); })},
      {"snapshot-body-shape", Kind::snapshot, "layers/0/body records of 1500 bytes, record_bytes 1504",
       "dataset layers/0/body: shape [2, 2, 1500] does not match [(B - sink) / group, kv_heads, record_bytes] = [2, 2, 1504]",
       false, snapshot_with([](hid_t f) { replace_dataset(f, "layers/0/body", H5T_STD_U8LE, {2, 2, 1500}); })},
      {"snapshot-kv-heads-mismatch", Kind::snapshot, "kv_heads = 3 while the datasets hold 2 heads",
       "does not match [min(N, sink), kv_heads, head_dim] = [64, 3, 64]", false,
       snapshot_with([](hid_t f) { put_u32(f, "kv_heads", 3); })},
      {"snapshot-b-below-sink", Kind::snapshot, "B = 32 < sink = 64", "B = 32 < sink = 64", false,
       snapshot_with([](hid_t f) {
         put_u32(f, "B", 32);
         put_u32(f, "B_prev", 32);
       })},
      {"snapshot-b-misaligned", Kind::snapshot, "B = 100: (B - sink) % group = 4", "B = 100 is not group-aligned", true,
       snapshot_with([](hid_t f) { put_u32(f, "B", 100); })},
      {"snapshot-b-prev-above-b", Kind::snapshot, "B_prev = 112 > B = 96", "B_prev = 112 > B = 96", true,
       snapshot_with([](hid_t f) { put_u32(f, "B_prev", 112); })},
      {"snapshot-draining-not-bool", Kind::snapshot, "draining = 2", "draining = 2 is not 0 or 1", false,
       snapshot_with([](hid_t f) { put_u32(f, "draining", 2); })},
      {"snapshot-b-above-n", Kind::snapshot, "B = 96 > N = 90", "B = 96 > N = 90", false,
       snapshot_with([](hid_t f) { put_u32(f, "N", 90); })},
      {"snapshot-ring-over-capacity", Kind::snapshot, "N = 100000: 99904 ring rows, capacity 384",
       "rows, more than its capacity 384", false, snapshot_with([](hid_t f) { put_u32(f, "N", 100000); })},
      {"snapshot-capacity-overflow", Kind::snapshot, "n_ubatch = 2^31: the ring capacity overflows 32 bits",
       "n_ubatch = 2147483648 is outside [1, 2^20]", true, snapshot_with([](hid_t f) { put_u32(f, "n_ubatch", 0x80000000u); })},
      {"snapshot-n-ubatch-zero", Kind::snapshot, "n_ubatch = 0", "n_ubatch = 0 is outside [1, 2^20]", false,
       snapshot_with([](hid_t f) { put_u32(f, "n_ubatch", 0); })},
      {"snapshot-missing-body", Kind::snapshot, "layers/5/body deleted", "dataset layers/5/body is missing", false,
       snapshot_with([](hid_t f) { drop(f, "layers/5/body"); })},
      {"snapshot-staged-sink-with-f16-sink", Kind::snapshot, "sink_k_staged present with sink_type f16",
       "group layers/0 holds an unexpected object 'sink_k_staged' (sink_type f16)", false,
       snapshot_with([](hid_t f) { replace_dataset(f, "layers/0/sink_k_staged", H5T_STD_U8LE, {64, 2, 68}); })},
      {"snapshot-nan-in-sink", Kind::snapshot, "a NaN at layer 5 sink_k position 63, head 1, channel 0",
       "layers/5/sink_k: NaN or infinity at position 63, head 1, channel 0", true,
       snapshot_with([](hid_t f) { poke_u16(f, "layers/5/sink_k", {63, 1, 0}, 0x7e01); })},
      {"snapshot-inf-q8-scale-in-ring", Kind::snapshot, "the q8_0 scale of block 1 of ring_v row (position 100, head 1) is +inf",
       "layers/0/ring_v: non-finite q8_0 block scale at position 100, head 1, block 1", false,
       snapshot_with([](hid_t f) {
         poke_u8(f, "layers/0/ring_v", {4, 1, 34}, 0x00);
         poke_u8(f, "layers/0/ring_v", {4, 1, 35}, 0x7c);
       })},
      {"snapshot-nan-tq6-norm-in-ring", Kind::snapshot, "the tq6_0 norm of ring_k (position 97, head 0) is NaN",
       "layers/1/ring_k: non-finite tq6_0 block norm at position 97, head 0, block 0", false,
       snapshot_with(
           [](hid_t f) {
             poke_u8(f, "layers/1/ring_k", {1, 0, 0}, 0x00);
             poke_u8(f, "layers/1/ring_k", {1, 0, 1}, 0x7e);
           },
           tq6_spec(SinkType::f16))},
      {"snapshot-inf-in-staged-sink", Kind::snapshot, "inherit sink: tq6_0 norm of sink_v_staged position 3 is +inf",
       "layers/1/sink_v_staged: non-finite tq6_0 block norm at position 3, head 0, block 0", false,
       snapshot_with(
           [](hid_t f) {
             poke_u8(f, "layers/1/sink_v_staged", {3, 0, 0}, 0x00);
             poke_u8(f, "layers/1/sink_v_staged", {3, 0, 1}, 0x7c);
           },
           tq6_spec(SinkType::inherit))},
      {"snapshot-codebook-id-mismatch", Kind::snapshot, "trellis 3/2: codebook_id (root and group) off by one",
       "does not match the embedded codebooks (FNV-1a-64 0x", true,
       snapshot_with(
           [](hid_t f) {
             uint64_t id = 0;
             const hid_t a = H5Aopen(f, "codebook_id", H5P_DEFAULT);
             H5Aread(a, H5T_NATIVE_UINT64, &id);
             H5Aclose(a);
             put_u64(f, "codebook_id", id + 1);
             put_u64(f, "codebooks/codebook_id", id + 1);
           },
           trellis_spec())},
      {"snapshot-codebook-table-edited", Kind::snapshot, "trellis 3/2: one k_table entry changed after writing",
       "does not match the embedded codebooks", false,
       snapshot_with([](hid_t f) { poke_u16(f, "codebooks/k_table", {17}, 0x3c00); }, trellis_spec())},
      {"snapshot-codebook-group-id-differs", Kind::snapshot, "codebooks/codebook_id differs from the root's",
       "codebooks/codebook_id = 0x0000000000000001 differs from codebook_id", false,
       snapshot_with([](hid_t f) { put_u64(f, "codebooks/codebook_id", 1); }, trellis_spec())},
      {"snapshot-codebook-window", Kind::snapshot, "codebooks/window_k = 8 for bits_k = 3",
       "codebooks/window_k = 8, expected 6 + bits_k = 9", false,
       snapshot_with([](hid_t f) { put_u32(f, "codebooks/window_k", 8); }, trellis_spec())},
      // The table set's name (docs/FORMAT.md 13) is optional; when present it names a set.
      {"snapshot-codebook-set-empty", Kind::snapshot, "codebooks/set is an empty string",
       "codebooks/set is empty", true,
       snapshot_with([](hid_t f) { put_str(f, "codebooks/set", std::string(1, '\0')); }, trellis_spec())},
      {"snapshot-codebook-set-not-string", Kind::snapshot, "codebooks/set is an integer",
       "codebooks/set", false, snapshot_with([](hid_t f) { put_u32(f, "codebooks/set", 7); }, trellis_spec())},
      {"snapshot-codebooks-missing", Kind::snapshot, "trellis body without /codebooks",
       "a trellis body needs its codebooks embedded (/codebooks is missing)", false,
       snapshot_with([](hid_t f) { drop(f, "codebooks"); }, trellis_spec())},
      {"snapshot-codebooks-for-scalar", Kind::snapshot, "/codebooks present with a scalar body",
       "/codebooks is present for a scalar body", false, snapshot_with([](hid_t f) {
         const hid_t gcpl = H5Pcreate(H5P_GROUP_CREATE);
         H5Pset_obj_track_times(gcpl, 0);
         H5Gclose(H5Gcreate2(f, "codebooks", H5P_DEFAULT, gcpl, H5P_DEFAULT));
         H5Pclose(gcpl);
       })},
      {"snapshot-codebook-id-scalar", Kind::snapshot, "codebook_id = 5 with a scalar body",
       "codebook_id = 0x0000000000000005 must be 0 for a scalar body", false,
       snapshot_with([](hid_t f) { put_u64(f, "codebook_id", 5); })},
      {"snapshot-layer-ids-scalar", Kind::snapshot, "layer_ids stored as a scalar", "attribute layer_ids: expected a 1-D array",
       false, snapshot_with([](hid_t f) { put_u32(f, "layer_ids", 0); })},
  };
  return cases;
}

void expect_rejected(const RejectCase& c, const std::string& p) {
  try {
    if (c.kind == Kind::capture)
      (void)read_capture(p);
    else
      (void)read_snapshot(p);
    ADD_FAILURE() << c.name << ": the reader accepted " << p;
  } catch (const FileError& e) {
    EXPECT_EQ(e.path(), p);
    const std::string what = e.what();
    EXPECT_EQ(what.rfind(p + ": ", 0), 0u) << what;  // "<path>: <defect>"
    EXPECT_NE(e.defect().find(c.expect), std::string::npos) << c.name << "\n  got:      " << e.defect()
                                                          << "\n  expected: " << c.expect;
    EXPECT_EQ(what.find('\n'), std::string::npos) << "one line: " << what;
  } catch (const std::exception& e) {
    ADD_FAILURE() << c.name << ": expected FileError, got " << e.what();
  }
}

class Reject : public ::testing::TestWithParam<size_t> {};

TEST_P(Reject, RefusedWithNamedDefect) {
  const RejectCase& c = reject_cases()[GetParam()];
  const std::string p = scratch(std::string(c.name) + ".h5");
  ASSERT_NO_THROW(c.make(p)) << c.name;
  expect_rejected(c, p);
}

INSTANTIATE_TEST_SUITE_P(Files, Reject, ::testing::Range<size_t>(0, reject_cases().size()),
                         [](const ::testing::TestParamInfo<size_t>& info) {
                           std::string n = reject_cases()[info.param].name;
                           for (char& ch : n)
                             if (ch == '-') ch = '_';
                           return n;
                         });

std::string reject_dir() { return std::string(SJKV_GOLDEN_DIR) + "/../reject"; }

// The committed files (golden must-reject files): each still refused with its defect.
TEST(RejectFixtures, CommittedFilesRefused) {
  size_t n = 0;
  for (const RejectCase& c : reject_cases()) {
    if (!c.commit) continue;
    const std::string p = reject_dir() + "/" + c.name + ".h5";
    ASSERT_TRUE(exists(p)) << p << " is missing; regenerate with SJKV_REGENERATE_REJECT_DIR (docs/FORMAT.md 5.1)";
    expect_rejected(c, p);
    ++n;
  }
  EXPECT_GE(n, 15u);
}

// SJKV_REGENERATE_REJECT_DIR=tests/reject build/tests/snapshot/test_files_reject --gtest_filter=RejectFixtures.*
TEST(RejectFixtures, Regenerate) {
  const char* dir = std::getenv("SJKV_REGENERATE_REJECT_DIR");
  if (!dir || !*dir) GTEST_SKIP() << "set SJKV_REGENERATE_REJECT_DIR to rewrite tests/reject/";
  std::ofstream readme(std::string(dir) + "/README.md");
  readme << "# Must-reject files\n\n"
            "Each file below is a small capture or snapshot with one defect. Every sjkv reader must\n"
            "refuse it with `sjkv::FileError` (the CLIs: exit 2 and one line `<tool>: <path>: <defect>`)\n"
            "whose defect contains the text in the last column. `tests/snapshot/test_files_reject.cpp` checks them\n"
            "(`RejectFixtures.CommittedFilesRefused`) and builds more cases the same way\n"
            "(`Files/Reject.*`); docs/FORMAT.md section 5 lists the rules. Regenerate with\n\n"
            "    SJKV_REGENERATE_REJECT_DIR=tests/reject build/tests/snapshot/test_files_reject --gtest_filter='RejectFixtures.*'\n\n"
            "| file | reader | defect | message contains |\n|---|---|---|---|\n";
  g_low_entropy = true;
  for (const RejectCase& c : reject_cases()) {
    if (!c.commit) continue;
    const std::string p = std::string(dir) + "/" + c.name + ".h5";
    std::remove(p.c_str());
    ASSERT_NO_THROW(c.make(p)) << c.name;
    std::remove((p + ".raw").c_str());
    readme << "| `" << c.name << ".h5` | " << (c.kind == Kind::capture ? "capture" : "snapshot") << " | " << c.defect
           << " | `" << c.expect << "` |\n";
  }
  readme << "\nGGUF files (model headers for `GgufFile::open`): one per named defect under `gguf/`, listed\n"
            "with their expected messages in `gguf/README.md`; `tests/snapshot/test_gguf.cpp` writes and checks them\n"
            "(`GgufRejectFixtures.*`).\n";
  readme << "\nTrajectory files (`sjkv-replay`, hidden encoding): one per named defect under `trajectory/`,\n"
            "with their expected messages in `kRejectFixtures` of `tests/snapshot/test_trajectory.cpp`, which\n"
            "writes (`SJKV_REGENERATE_REJECT_DIR=tests/reject build/tests/snapshot/test_trajectory`) and checks them\n"
            "(`TrajectoryRejectFixtures.*`).\n";
  readme << "\nSequence-state streams (`sjkv-encode import`, `inspect`, `decode`): one per named defect under\n"
            "`state/`, listed with their expected messages in `state/README.md`; `tests/snapshot/test_state_stream.cpp`\n"
            "writes and checks them (`StateStreamRejectFixtures.*`).\n";
  g_low_entropy = false;
}

}  // namespace
