// sjkv's Python module (_sjkv): numpy in and out over the codec, the snapshot encoder and the
// file library. The work is the C++ libraries'; this file converts arrays and errors only.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "sjkv/cache.h"
#include "sjkv/config.h"
#include "sjkv/fp16.h"
#include "sjkv/io/capture.h"
#include "sjkv/io/capture_file.h"
#include "sjkv/io/codebook.h"
#include "sjkv/io/encode.h"
#include "sjkv/io/file_error.h"
#include "sjkv/io/snapshot.h"
#include "sjkv/io/snapshot_file.h"
#include "sjkv/io/table_set.h"
#include "sjkv/policy.h"
#include "bind.h"

namespace py = pybind11;
using namespace sjkv;

namespace {
py::object g_file_error;  // sjkv.FileError, set at import
}  // namespace

namespace sjkv::pybind {

CodecConfig parse_config_checked(const std::string& text) {
  CodecConfig c;
  std::string err;
  if (!parse_config(text, &c, &err)) throw std::invalid_argument("configuration '" + text + "': " + err);
  const Unsupported why = can_implement(c);
  if (why != Unsupported::none) throw std::invalid_argument("configuration '" + text + "': " + describe(why));
  return c;
}

void check_range(const char* name, long long value, long long lo, long long hi) {
  if (value < lo || value > hi)
    throw std::invalid_argument(std::string(name) + " must be in [" + std::to_string(lo) + ", " + std::to_string(hi) +
                                "] (got " + std::to_string(value) + ")");
}

}  // namespace sjkv::pybind

namespace {

using pybind::parse_config_checked;

// [layers, tokens, kv_heads, head_dim] (or [tokens, kv_heads, head_dim]: one layer) float16 or
// float32 -> fp16 bit patterns per layer; float32 rounds to nearest even, as the engines store.
std::vector<std::vector<uint16_t>> fp16_layers(const py::array& given, const char* name, uint32_t dims[4]) {
  // Big-endian (or otherwise non-native) arrays are read as their values: the float16 path
  // views the bytes as uint16, which would swap them.
  py::array a = given;
  if (given.dtype().kind() == 'f' && !given.dtype().attr("isnative").cast<bool>())
    a = given.attr("astype")(given.dtype().attr("newbyteorder")("="));
  if (a.ndim() != 3 && a.ndim() != 4)
    throw std::invalid_argument(std::string(name) + " must be [layers, tokens, kv_heads, head_dim] or [tokens, kv_heads, head_dim]");
  const bool one = a.ndim() == 3;
  dims[0] = one ? 1u : static_cast<uint32_t>(a.shape(0));
  for (int i = 0; i < 3; ++i) dims[i + 1] = static_cast<uint32_t>(a.shape(i + (one ? 0 : 1)));
  const size_t per = static_cast<size_t>(dims[1]) * dims[2] * dims[3];
  std::vector<std::vector<uint16_t>> out(dims[0], std::vector<uint16_t>(per));
  if (a.dtype().kind() == 'f' && a.dtype().itemsize() == 2) {
    const auto c = py::array_t<uint16_t, py::array::c_style | py::array::forcecast>::ensure(a.attr("view")("uint16"));
    if (per)  // empty tiles have no buffers
      for (uint32_t l = 0; l < dims[0]; ++l) std::memcpy(out[l].data(), c.data() + l * per, per * 2);
  } else if (a.dtype().kind() == 'f' && a.dtype().itemsize() == 4) {
    const auto c = py::array_t<float, py::array::c_style | py::array::forcecast>::ensure(a);
    for (uint32_t l = 0; l < dims[0]; ++l)
      for (size_t i = 0; i < per; ++i) {
        const float x = c.data()[l * per + i];
        if (!std::isfinite(x)) throw std::invalid_argument(std::string(name) + ": a value is not finite");
        out[l][i] = f32_to_f16(x);
      }
  } else {
    throw std::invalid_argument(std::string(name) + " must be float16 or float32");
  }
  return out;
}

py::array_t<uint16_t> as_f16_array(const Capture& cap, bool values_v) {
  const size_t per = cap.values_per_layer();
  py::array_t<uint16_t> a({static_cast<size_t>(cap.layers.size()), static_cast<size_t>(cap.tokens),
                           static_cast<size_t>(cap.kv_heads), static_cast<size_t>(cap.head_dim)});
  uint16_t* p = a.mutable_data();
  if (per)  // empty tiles have no buffers
    for (size_t l = 0; l < cap.layers.size(); ++l)
      std::memcpy(p + l * per, (values_v ? cap.layers[l].v : cap.layers[l].k).data(), per * 2);
  return a;
}

py::object f16_view(py::array_t<uint16_t> a) { return a.attr("view")("float16"); }

Capture capture_of(const py::array& k, const py::array& v, const std::vector<uint32_t>& layer_ids, bool rotated,
                   const std::string& model, const std::string& source, const std::vector<int32_t>& token_ids) {
  uint32_t dk[4], dv[4];
  std::vector<std::vector<uint16_t>> K = fp16_layers(k, "k", dk), V = fp16_layers(v, "v", dv);
  if (std::memcmp(dk, dv, sizeof dk) != 0) throw std::invalid_argument("k and v must have the same shape");
  Capture c;
  c.model = model;
  c.source = source;
  c.tokens = dk[1];
  c.kv_heads = dk[2];
  c.head_dim = dk[3];
  c.rotated = rotated;
  c.token_ids = token_ids;
  if (!layer_ids.empty() && layer_ids.size() != dk[0]) throw std::invalid_argument("layer_ids must have one id per layer");
  for (uint32_t l = 0; l < dk[0]; ++l)
    c.layers.push_back({layer_ids.empty() ? l : layer_ids[l], std::move(K[l]), std::move(V[l])});
  c.check_consistent();
  return c;
}

}  // namespace

py::dict sjkv::pybind::capture_dict(const Capture& c) {
  py::dict d;
  d["k"] = f16_view(as_f16_array(c, false));
  d["v"] = f16_view(as_f16_array(c, true));
  std::vector<uint32_t> ids;
  for (const CaptureLayer& l : c.layers) ids.push_back(l.layer_id);
  d["layer_ids"] = ids;
  d["rotated"] = c.rotated;
  d["model"] = c.model;
  d["source"] = c.source;
  d["token_ids"] = c.token_ids;
  return d;
}

namespace {
using pybind::capture_dict;
}  // namespace

PYBIND11_MODULE(_sjkv, m) {
  m.doc() = "sjkv's C++ core (the codec, the snapshot encoder, the files); use the sjkv package.";
  // pybind11 2.12 and later read numpy 1's and numpy 2's dtype layouts (earlier ones only 1's).
  static_assert(PYBIND11_VERSION_MAJOR > 2 || PYBIND11_VERSION_MINOR >= 12, "sjkv's module needs pybind11 >= 2.12");
  g_file_error = py::reinterpret_borrow<py::object>(
      py::module_::import("builtins").attr("type")(
          "FileError", py::make_tuple(py::module_::import("builtins").attr("Exception")),
          py::dict(py::arg("__module__") = "sjkv",
                   py::arg("__doc__") = "A file sjkv cannot read or write; the message is the tools' one line: "
                                        "'path: defect'.")));
  m.attr("FileError") = g_file_error;
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const FileError& e) {
      PyErr_SetString(g_file_error.ptr(), e.what());
    }
  });

  py::enum_<Body>(m, "Body").value("automatic", Body::automatic).value("scalar", Body::scalar).value("trellis", Body::trellis);

  py::class_<CodecConfig>(m, "Config", "An SJ-KVaRN codec configuration (docs/SPEC.md section 9.1).")
      .def(py::init(&parse_config_checked), py::arg("text"), "Parses a configuration string such as 'sj:3/2t:D=128'.")
      .def_property_readonly("name", &CodecConfig::name, "The canonical configuration string.")
      .def_readonly("head_dim", &CodecConfig::head_dim)
      .def_readonly("group", &CodecConfig::group)
      .def_readonly("bits_k", &CodecConfig::bits_k)
      .def_readonly("bits_v", &CodecConfig::bits_v)
      .def_readonly("sink", &CodecConfig::sink)
      .def_readonly("tail", &CodecConfig::tail)
      .def_readonly("tail_max", &CodecConfig::tail_max)
      .def_readonly("iters", &CodecConfig::iters)
      .def_property_readonly("body", [](const CodecConfig& c) { return c.resolved_body(); })
      .def_property_readonly("staging", [](const CodecConfig& c) { return std::string(staging_name(c.staging)); })
      .def("bits_occupied",
           [](const CodecConfig& c, uint32_t B, uint32_t N) { return occupied_bits(c, B, N).total_bits(); },
           py::arg("B"), py::arg("N"), "Bits per value the regions hold at sealed boundary B and length N.")
      .def("bits_allocated",
           [](const CodecConfig& c, uint32_t n_ctx, uint32_t n_ubatch) {
             const uint32_t cap = ring_capacity(c.tail, c.tail_max, c.group, n_ubatch);
             return allocated_bits(c, n_ctx, cap, n_ctx, n_ctx).total_bits();
           },
           py::arg("n_ctx"), py::arg("n_ubatch") = 512, "Bits per value reserved for a context of n_ctx positions.")
      .def("__repr__", [](const CodecConfig& c) { return "sjkv.Config('" + c.name() + "')"; });

  py::class_<Snapshot>(m, "Snapshot", "An SJ-KVaRN cache state of one sequence (docs/FORMAT.md section 3).")
      .def_property_readonly("config", [](const Snapshot& s) { return s.config; })
      .def_readonly("N", &Snapshot::N)
      .def_readonly("B", &Snapshot::B)
      .def_readonly("B_prev", &Snapshot::B_prev)
      .def_readonly("draining", &Snapshot::draining)
      .def_readonly("kv_heads", &Snapshot::kv_heads)
      .def_readonly("n_ubatch", &Snapshot::n_ubatch)
      .def_readonly("codebook_set", &Snapshot::codebook_set)
      .def_property_readonly("codebook_id", [](const Snapshot& s) { return s.codebook_id; })
      .def_property_readonly("layer_ids",
                             [](const Snapshot& s) {
                               std::vector<uint32_t> ids;
                               for (const SnapshotLayer& l : s.layers) ids.push_back(l.layer_id);
                               return ids;
                             })
      .def("bits_occupied", [](const Snapshot& s) { return occupied_bits(s.config, s.B, s.N).total_bits(); })
      .def(
          "decode",
          [](const Snapshot& s, bool rotated) {
            Capture c;
            {
              py::gil_scoped_release nogil;
              c = decode_snapshot(s, rotated);
            }
            py::dict d = capture_dict(c);
            return py::make_tuple(d["k"], d["v"]);
          },
          py::arg("rotated") = false,
          "Every stored position decoded: (k, v) float16 arrays [layers, tokens, kv_heads, head_dim], in the "
          "model basis unless rotated.")
      .def(
          "write",
          [](const Snapshot& s, const std::string& path, int zstd_level) {
            py::gil_scoped_release nogil;
            write_snapshot(path, s, zstd_level);
          },
          py::arg("path"), py::arg("zstd_level") = 3, "Writes the snapshot file (temporary name, then rename).");

  m.def(
      "encode",
      [](const py::array& k, const py::array& v, const std::string& config, long long n_ubatch, const std::string& codebook,
         const std::vector<uint32_t>& layer_ids, bool rotated, long long threads, const std::string& model,
         const std::string& source, const std::vector<int32_t>& token_ids) {
        pybind::check_threads(threads);
        pybind::check_range("n_ubatch", n_ubatch, 1, kMaxUbatch);
        const Capture cap = capture_of(k, v, layer_ids, rotated, model, source, token_ids);
        EncodeOptions eo;
        eo.config = parse_config_checked(config);
        eo.config.head_dim = cap.head_dim;
        eo.n_ubatch = n_ubatch;
        eo.threads = threads;
        const TableChoice choice = TableChoice::parse(codebook == "auto" ? "reference" : codebook);
        const TableSet* set = choice.resolve(nullptr, eo.config.bits_k, eo.config.bits_v);
        if (set && eo.config.resolved_body() == Body::trellis) eo.codebooks = set->tables_for(eo.config.bits_k, eo.config.bits_v);
        Snapshot s;
        {
          py::gil_scoped_release nogil;
          s = encode_capture(cap, eo);
        }
        if (set && eo.config.resolved_body() == Body::trellis) s.codebook_set = set->name;
        return s;
      },
      py::arg("k"), py::arg("v"), py::arg("config"), py::arg("n_ubatch") = 512, py::arg("codebook") = "reference",
      py::arg("layer_ids") = std::vector<uint32_t>(), py::arg("rotated") = false, py::arg("threads") = 0,
      py::arg("model") = "", py::arg("source") = "", py::arg("token_ids") = std::vector<int32_t>(),
      "Encodes K/V tiles as an engine holds them at their length, as `sjkv-encode encode` does: the same "
      "snapshot for the same capture. codebook: reference (the format's tables) or a shipped set's name.");

  m.def("read_snapshot", [](const std::string& path) { return read_snapshot(path); }, py::arg("path"),
        "A snapshot file (docs/FORMAT.md section 3); read_snapshot_any also takes sequence-state streams.");
  m.def(
      "read_capture", [](const std::string& path) { return capture_dict(read_capture(path)); }, py::arg("path"),
      "A capture file as a dict: k, v (float16 [layers, tokens, kv_heads, head_dim]), layer_ids, rotated, model, "
      "source, token_ids.");
  m.def(
      "write_capture",
      [](const std::string& path, const py::array& k, const py::array& v, const std::vector<uint32_t>& layer_ids,
         bool rotated, const std::string& model, const std::string& source, const std::vector<int32_t>& token_ids) {
        const Capture c = capture_of(k, v, layer_ids, rotated, model, source, token_ids);
        py::gil_scoped_release nogil;
        write_capture(path, c);
      },
      py::arg("path"), py::arg("k"), py::arg("v"), py::arg("layer_ids") = std::vector<uint32_t>(),
      py::arg("rotated") = false, py::arg("model") = "", py::arg("source") = "", py::arg("token_ids") = std::vector<int32_t>());

  m.def(
      "read_codebook",
      [](const std::string& path) {
        const CodebookContainer c = read_codebook_any(path);
        py::array_t<uint16_t> k(c.table.k.size()), v(c.table.v.size());
        std::memcpy(k.mutable_data(), c.table.k.data(), c.table.k.size() * 2);
        std::memcpy(v.mutable_data(), c.table.v.data(), c.table.v.size() * 2);
        return py::make_tuple(c.table.bits, f16_view(k), f16_view(v));
      },
      py::arg("path"), "A codebook file (.sjcb, raw .bin or C header): (bits, k_table, v_table), float16 tables.");
  m.def(
      "write_codebook",
      [](const std::string& path, const py::array& k, const py::array& v, const std::string& comment) {
        RawCodebook cb;
        uint32_t dk[4], dv[4];
        const py::array k3 = k.attr("reshape")(1, 1, -1), v3 = v.attr("reshape")(1, 1, -1);
        cb.k = fp16_layers(k3, "k", dk)[0];
        cb.v = fp16_layers(v3, "v", dv)[0];
        cb.bits = 0;
        for (uint32_t b = 2; b <= 4; ++b)
          if (cb.k.size() == (1u << (6 + b)) && cb.v.size() == cb.k.size()) cb.bits = b;
        if (!cb.bits) throw std::invalid_argument("tables must hold 256, 512 or 1024 entries each");
        auto ends = [&](const char* e) {
          const std::string x(e);
          return path.size() >= x.size() && path.compare(path.size() - x.size(), x.size(), x) == 0;
        };
        if (ends(".sjcb")) {
          CodebookContainer c;
          c.table = cb;
          write_codebook_container(path, c);
        } else if (ends(".h")) {
          write_codebook_header(path, cb, comment);
        } else {
          write_raw_codebook(path, cb);
        }
      },
      py::arg("path"), py::arg("k"), py::arg("v"), py::arg("comment") = "",
      "Writes a table pair in the form its name says: .sjcb (sjkv's container, no provenance), .h (the C header of "
      "the reference generator) or any other name a raw table file (K then V, fp16).");
  pybind::bind_cache(m);
  pybind::bind_files(m);
  pybind::bind_train(m);
  pybind::bind_results(m);
  m.def("table_sets", [] {
    std::vector<std::string> names;
    for (const TableSet& s : shipped_table_sets()) names.push_back(s.summary());
    return names;
  });
}
