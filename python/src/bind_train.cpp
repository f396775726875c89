// _sjkv: training trellis codebooks (sjkv-train's train_and_evaluate).
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <string>
#include <vector>

#include "bind.h"
#include "sjkv/io/paths.h"
#include "sjkv/io/table_set.h"
#include "sjkv/train/pipeline.h"

namespace py = pybind11;
using namespace sjkv;

namespace sjkv::pybind {

void bind_train(py::module_& m) {
  m.def(
      "train",
      [](const std::vector<std::string>& inputs, const std::string& prefix, uint32_t bits, const std::string& init,
         uint64_t seed, double heldout, double tol, long long max_iters, long long threads, uint32_t head_dim,
         uint32_t kv_sections, const std::string& axis, const std::string& staging, uint32_t sink, uint32_t iters,
         bool assume_rotated, bool checkpoint) {
        // sjkv-train's checks of its options, as ValueError naming the argument
        pybind::check_threads(threads);
        check_range("max_iters", max_iters, 0, 10000);
        {
          // A prefix that names a folder ('', '.', 'out/') would write hidden files .sjcb, .bin, .h in it.
          const std::string base = base_name(prefix);
          if (base.empty() || base == "." || base == ".." || is_folder(prefix))
            throw std::invalid_argument("prefix '" + prefix + "' names a folder; give a file prefix such as " +
                                        (prefix.empty() || prefix.back() == '/' ? prefix : prefix + "/") +
                                        "cb3 (writes cb3.sjcb, cb3.bin, cb3.h)");
        }
        if (!(heldout >= 0.0 && heldout < 1.0)) throw std::invalid_argument("heldout must be in [0, 1)");
        if (!(tol >= 0.0 && std::isfinite(tol))) throw std::invalid_argument("tol must be finite and >= 0");
        if (axis != "token" && axis != "channel") throw std::invalid_argument("axis must be token or channel");
        train::TrainRun run;
        if (!parse_staging(staging, &run.staging)) throw std::invalid_argument("staging must be tq6_0, q8_0 or f16");
        run.axis = axis == "channel" ? TrellisAxis::channel : TrellisAxis::token;
        {
          CodecConfig cc;
          cc.bits_k = cc.bits_v = bits;
          cc.body = Body::trellis;
          cc.sink = sink;
          cc.iters = iters;
          cc.trellis_axis = run.axis;
          cc.head_dim = head_dim ? head_dim : 256;
          const Unsupported why = can_implement(cc);
          if (why != Unsupported::none) throw std::invalid_argument(std::string("bits, sink, iters or axis: ") + describe(why));
        }
        run.sink = sink;
        run.iters = iters;
        run.assume_rotated = assume_rotated;
        run.checkpoint = checkpoint;
        run.inputs = inputs;
        run.prefix = prefix;
        run.bits = bits;
        run.init = init;
        run.seed = seed;
        run.heldout = heldout;
        run.tol = tol;
        run.max_iters = max_iters;
        run.threads = threads;
        run.io.head_dim = head_dim;
        run.io.kv_sections = kv_sections;
        run.tool_version = "sjkv python 0.1.0";
        train::TrainReport rep;
        {
          py::gil_scoped_release nogil;
          rep = train::train_and_evaluate(run);
        }
        py::dict d;
        d["outputs"] = rep.outputs;
        d["init"] = rep.init_name;
        d["codebook_id"] = rep.codebook.codebook_id;
        d["train_tiles"] = rep.train_tiles;
        d["heldout_tiles"] = rep.heldout_tiles;
        const char* sides[2] = {"k", "v"};
        for (int s = 0; s < 2; ++s) {
          py::dict h;
          h["scalar"] = rep.heldout[s].scalar;
          h["identity"] = rep.heldout[s].identity;
          h["reference"] = rep.heldout[s].reference;
          h["trained"] = rep.heldout[s].trained;
          h["iterations"] = rep.result[s].iterations;
          h["stop"] = rep.result[s].stop;
          d[sides[s]] = h;
        }
        return d;
      },
      py::arg("inputs"), py::arg("prefix"), py::arg("bits") = 3, py::arg("init") = "identity", py::arg("seed") = 1,
      py::arg("heldout") = 0.2, py::arg("tol") = train::TrainRun{}.tol, py::arg("max_iters") = train::TrainRun{}.max_iters,
      py::arg("threads") = 0, py::arg("head_dim") = 0, py::arg("kv_sections") = 0, py::arg("axis") = "token",
      py::arg("staging") = "tq6_0", py::arg("sink") = train::TrainRun{}.sink, py::arg("iters") = train::TrainRun{}.iters,
      py::arg("assume_rotated") = false, py::arg("checkpoint") = false,
      "sjkv-train: trains a trellis table pair on captures (.kvd dumps, llama.cpp state files), writes "
      "PREFIX.sjcb/.bin and, for the token axis, PREFIX.h, and returns the held-out report (MSE of the trellis "
      "targets per side and table). init: identity, reference, a shipped set's name or a codebook file. "
      "checkpoint: each side's Lloyd state goes to PREFIX.{k,v}.ckpt after every update, and a run with the same "
      "inputs and options goes on from there with the same bytes. The options are sjkv-train's.");
}

}  // namespace sjkv::pybind
