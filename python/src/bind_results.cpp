// _sjkv: sjkv-replay's results: an arm's statistics with their CIs, two arms compared.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <string>
#include <vector>

#include "bind.h"
#include "sjkv/io/positions_csv.h"
#include "sjkv/replay/results.h"

namespace py = pybind11;
using namespace sjkv;

namespace {

py::dict stats_dict(const replay::ArmStats& a) {
  py::dict d;
  d["arm"] = a.arm;
  d["positions"] = a.positions;
  d["mean_kl"] = a.mean_kl;
  d["median_kl"] = a.median_kl;
  d["p90_kl"] = a.p90_kl;
  d["p99_kl"] = a.p99_kl;
  d["max_kl"] = a.max_kl;
  d["same_top"] = a.same_top;
  d["bits_occupied"] = a.bits_occupied;
  d["bits_allocated"] = a.bits_allocated;
  return d;
}

}  // namespace

namespace sjkv::pybind {

void bind_results(py::module_& m) {
  m.def(
      "read_results",
      [](const std::string& folder) {
        const std::vector<replay::PositionRow> rows = replay::read_positions_csv(folder + "/positions.csv");
        // One pass: each arm's columns and its rows per trajectory (for arm_stats), arms in file order.
        struct Columns {
          std::vector<double> pos, kl, same, bo, ba;
          std::vector<std::string> traj;
          std::map<std::string, std::vector<replay::ScoreRow>> by_traj;
        };
        std::map<std::string, Columns> cols;
        std::vector<std::string> order;
        for (const replay::PositionRow& r : rows) {
          if (!cols.count(r.arm)) order.push_back(r.arm);
          Columns& c = cols[r.arm];
          c.traj.push_back(r.trajectory);
          c.pos.push_back(r.position);
          c.kl.push_back(r.row.kl);
          c.same.push_back(r.row.same_top ? 1.0 : 0.0);
          c.bo.push_back(r.row.bits_occupied);
          c.ba.push_back(r.row.bits_allocated);
          c.by_traj[r.trajectory].push_back(r.row);
        }
        py::dict out;
        for (const std::string& arm : order) {
          const Columns& c = cols[arm];
          const auto& [pos, kl, same, bo, ba, traj, by_traj] = c;
          py::dict a;
          a["trajectory"] = traj;
          a["position"] = py::array_t<double>(pos.size(), pos.data()).attr("astype")("int64");
          a["kl"] = py::array_t<double>(kl.size(), kl.data());
          a["same_top"] = py::array_t<double>(same.size(), same.data()).attr("astype")("bool");
          a["bits_occupied"] = py::array_t<double>(bo.size(), bo.data());
          a["bits_allocated"] = py::array_t<double>(ba.size(), ba.data());
          std::vector<std::vector<replay::ScoreRow>> per;
          for (const auto& [t, rs] : by_traj) per.push_back(rs);
          a["stats"] = stats_dict(replay::arm_stats(arm, per));
          out[py::str(arm)] = a;
        }
        return out;
      },
      py::arg("folder"),
      "A results folder of sjkv-replay score/run: per arm, arrays per position (trajectory, position, kl, "
      "same_top, bits) and its summary statistics.");
  m.def(
      "compare",
      [](const std::vector<std::vector<double>>& a, const std::vector<std::vector<double>>& b, long long replicates,
         uint64_t seed) {
        check_range("replicates", replicates, 100, 1000000);  // sjkv-replay's --bootstrap
        replay::BootstrapOptions o;
        o.replicates = static_cast<uint32_t>(replicates);
        o.seed = seed;
        const replay::Comparison c = replay::compare_arms("a", "b", a, b, o);
        py::dict d;
        d["ratio"] = c.ratio;
        d["ci_low"] = c.ci_low;
        d["ci_high"] = c.ci_high;
        d["ci_low_traj"] = c.ci_low_traj;
        d["ci_high_traj"] = c.ci_high_traj;
        d["lower_at"] = c.lower_at;
        d["of"] = c.of;
        return d;
      },
      py::arg("a"), py::arg("b"), py::arg("replicates") = 2000, py::arg("seed") = replay::BootstrapOptions{}.seed,
      "Paired comparison of two arms' KL (a[t][i], b[t][i]: trajectory t, position i): the ratio of means and "
      "its 95% block-bootstrap CIs over positions and over trajectories, as sjkv-replay reports them.");
}

}  // namespace sjkv::pybind
