// Capture files (docs/FORMAT.md section 2), the HDF5 signature test and the file sniffer.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <stdexcept>
#include <string>
#include <unordered_set>

#include "h5util.h"
#include "sjkv/io/atomic_file.h"
#include "sjkv/io/capture_file.h"
#include "sjkv/io/zstd_filter.h"

namespace sjkv {

namespace {

constexpr const char* kCaptureMagic = "sjkv-capture";
constexpr const char* kSnapshotMagic = "sjkv-snapshot";
constexpr const char* kKvDims = "[tokens, kv_heads, head_dim]";

}  // namespace

namespace {

// The file into out's temporary; `cap` was checked by the caller.
void write_checked_capture(AtomicOutput& out, const Capture& cap, int zstd_level) {
  h5::write_file(out, zstd_level, [&](const h5::Writer& w, hid_t root) {
    w.attr_string(root, "sjkv_format", kCaptureMagic);
    w.attr_u32(root, "version", h5::kFileVersion);
    w.attr_string(root, "model", cap.model);
    w.attr_string(root, "source", cap.source);
    w.attr_u32(root, "head_dim", cap.head_dim);
    w.attr_u32(root, "kv_heads", cap.kv_heads);
    w.attr_u32(root, "tokens", cap.tokens);
    w.attr_u8(root, "rotated", cap.rotated ? 1 : 0);
    w.attr_u32(root, "rotation_block", cap.rotation_block);
    w.layer_ids_and_tokens(root, cap.layers, cap.token_ids, cap.tokens, zstd_level);

    h5::Hid fp16(w.check(h5::make_fp16_type(), "fp16 type"));
    h5::Hid layers = w.create_group(root, "layers");
    const std::vector<uint64_t> dims = {cap.tokens, cap.kv_heads, cap.head_dim};
    for (const CaptureLayer& l : cap.layers) {
      const std::string id = std::to_string(l.layer_id);
      h5::Hid g = w.create_group(layers.get(), id);
      w.dataset(g.get(), "k", "layers/" + id + "/k", fp16.get(), fp16.get(), 2, dims, l.k.data(), zstd_level);
      w.dataset(g.get(), "v", "layers/" + id + "/v", fp16.get(), fp16.get(), 2, dims, l.v.data(), zstd_level);
    }
    layers.close();
    fp16.close();
  });
}

}  // namespace

void write_capture(const std::string& path, const Capture& cap, int zstd_level) {
  cap.check_consistent();  // before anything is created
  AtomicOutput out(path);
  write_checked_capture(out, cap, zstd_level);
  out.commit();
}

void write_capture(AtomicOutput& out, const Capture& cap, int zstd_level) {
  cap.check_consistent();
  write_checked_capture(out, cap, zstd_level);
}

Capture read_capture(const std::string& path) {
  const h5::ReadSession session(path);
  const h5::Reader& r = session.reader();
  const hid_t root = session.root();
  r.check_magic_version(root, kCaptureMagic);

  Capture c;
  c.model = r.string_attr(root, "model", "model");
  c.source = r.string_attr(root, "source", "source");
  c.head_dim = r.u32_attr(root, "head_dim");
  c.kv_heads = r.u32_attr(root, "kv_heads");
  c.tokens = r.u32_attr(root, "tokens");
  c.rotated = r.uint_attr(root, "rotated", "rotated", 0, 1) != 0;
  c.rotation_block = r.u32_attr(root, "rotation_block");
  const std::vector<uint32_t> ids = r.u32_array_attr(root, "layer_ids", h5::kMaxLayers);
  c.layers.resize(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) c.layers[i].layer_id = ids[i];
  std::string defect = h5::capture_header_defect(c);
  if (!defect.empty()) r.fail(defect);

  // Structure: /layers holds exactly the listed layers, each exactly k and v.
  r.check_layer_groups(root, ids);
  h5::Hid layers = r.member(root, "layers", "layers", H5I_GROUP);
  c.token_ids = r.token_ids(root, c.tokens, "[tokens]");

  h5::Hid fp16(h5::make_fp16_type());
  if (!fp16.valid()) r.fail("cannot build the fp16 type: " + h5::last_error());
  const std::vector<uint64_t> dims = {c.tokens, c.kv_heads, c.head_dim};
  for (size_t i = 0; i < c.layers.size(); ++i) {
    CaptureLayer& l = c.layers[i];
    const std::string id = std::to_string(l.layer_id), base = "layers/" + id;
    h5::Hid g = r.member(layers.get(), id, base, H5I_GROUP);
    for (const std::string& name : r.link_names(g.get(), base, 2))
      if (name != "k" && name != "v") r.fail("group " + base + " holds an unexpected object '" + name + "'");
    std::vector<uint16_t>* sides[2] = {&l.k, &l.v};
    const char* names[2] = {"k", "v"};
    for (int s = 0; s < 2; ++s) {
      const std::string display = base + "/" + names[s];
      h5::Hid d = r.dataset(g.get(), names[s], display, h5::Elem::fp16, dims, kKvDims);
      sides[s]->resize(c.values_per_layer());
      if (!sides[s]->empty()) r.read(d.get(), fp16.get(), sides[s]->data(), display);
    }
    defect = h5::capture_layer_defect(c, i);
    if (!defect.empty()) r.fail(defect);
  }
  return c;
}

bool is_hdf5_file(const std::string& path) {
  static const unsigned char kSig[8] = {0x89, 'H', 'D', 'F', '\r', '\n', 0x1a, '\n'};
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);  // a FIFO must not block
  if (fd < 0) return false;
  struct stat st;
  bool found = false;
  if (::fstat(fd, &st) == 0 && S_ISREG(st.st_mode)) {
    const uint64_t size = static_cast<uint64_t>(st.st_size);
    // The superblock sits at 0, 512, 1024, 2048, ... (HDF5 file format, "Superblock").
    for (uint64_t off = 0; off + 8 <= size && !found; off = off ? off * 2 : 512) {
      unsigned char buf[8];
      if (::pread(fd, buf, 8, static_cast<off_t>(off)) != 8) break;
      found = std::memcmp(buf, kSig, 8) == 0;
    }
  }
  ::close(fd);
  return found;
}

const char* file_kind_name(FileKind k) {
  switch (k) {
    case FileKind::not_hdf5: return "not HDF5";
    case FileKind::capture: return "capture";
    case FileKind::snapshot: return "snapshot";
    case FileKind::other_hdf5: return "HDF5 (not sjkv)";
  }
  return "?";
}

FileKind sniff_file(const std::string& path) {
  const std::lock_guard<std::mutex> lock(h5::api_mutex());
  h5::Quiet quiet;
  const h5::Reader r{path};
  r.check_openable();
  if (!is_hdf5_file(path)) return FileKind::not_hdf5;
  h5::Hid f = r.open_file();
  if (!r.has_attr(f.get(), "sjkv_format")) return FileKind::other_hdf5;
  std::string magic;
  try {
    magic = r.string_attr(f.get(), "sjkv_format", "sjkv_format");
  } catch (const FileError&) {
    return FileKind::other_hdf5;
  }
  if (magic == kCaptureMagic) return FileKind::capture;
  if (magic == kSnapshotMagic) return FileKind::snapshot;
  return FileKind::other_hdf5;
}

}  // namespace sjkv
