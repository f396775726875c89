// The result plots as plain SVG text: no plotting library, a fixed layout.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "sjkv/replay/frontier.h"
#include "sjkv/replay/results.h"

namespace sjkv {
namespace replay {

namespace {

// KL values at or below this are drawn on the axis floor (log axes cannot show 0).
constexpr double kKlFloor = 1e-10;

const char* const kColors[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd",
                               "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"};

std::string esc(const std::string& s) {
  std::string o;
  for (char c : s) {
    if (c == '&') o += "&amp;";
    else if (c == '<') o += "&lt;";
    else if (c == '>') o += "&gt;";
    else if (c == '"') o += "&quot;";
    else o += c;
  }
  return o;
}

std::string f(double x) {
  char b[32];
  std::snprintf(b, sizeof b, "%.2f", x);
  return b;
}

std::string tick_text(double v, bool log) {
  char b[32];
  if (log) std::snprintf(b, sizeof b, "1e%d", static_cast<int>(std::lround(std::log10(v))));
  else std::snprintf(b, sizeof b, "%g", std::fabs(v) < 1e-9 ? 0.0 : v);  // no "-0" from rounding
  return b;
}

struct Axis {
  double lo, hi;
  bool log;
  double norm(double v) const {
    if (log) return (std::log10(v) - std::log10(lo)) / (std::log10(hi) - std::log10(lo));
    return (v - lo) / (hi - lo);
  }
  std::vector<double> ticks() const {
    std::vector<double> t;
    if (log) {
      const int a = static_cast<int>(std::ceil(std::log10(lo) - 1e-9)), b = static_cast<int>(std::floor(std::log10(hi) + 1e-9));
      const int step = std::max(1, (b - a + 1) / 8 + 1);
      for (int e = a; e <= b; e += step) t.push_back(std::pow(10.0, e));
    } else {
      const double raw = (hi - lo) / 6.0, mag = std::pow(10.0, std::floor(std::log10(raw)));
      const double step = raw / mag < 2 ? 2 * mag : raw / mag < 5 ? 5 * mag : 10 * mag;
      for (double v = std::ceil(lo / step) * step; v <= hi + 1e-9 * step; v += step) t.push_back(v);
    }
    return t;
  }
};

// A log axis spanning the values, padded to whole decades.
Axis log_axis(double mn, double mx) {
  mn = std::max(mn, kKlFloor);
  mx = std::max(mx, mn * 10);
  return {std::pow(10.0, std::floor(std::log10(mn))), std::pow(10.0, std::ceil(std::log10(mx))), true};
}

Axis lin_axis(double mn, double mx) {
  if (!(mx > mn)) {
    mn -= 1;
    mx += 1;
  }
  const double pad = 0.05 * (mx - mn);
  return {mn - pad, mx + pad, false};
}

class Plot {
 public:
  Plot(std::string title, std::string xlabel, std::string ylabel, Axis x, Axis y)
      : x_(x), y_(y) {
    o_ = "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + f(W) + "\" height=\"" + f(H) + "\" viewBox=\"0 0 " + f(W) +
         " " + f(H) + "\" font-family=\"sans-serif\" font-size=\"12\">\n";
    o_ += "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
    o_ += "<text x=\"" + f(W / 2) + "\" y=\"20\" text-anchor=\"middle\" font-size=\"14\">" + esc(title) + "</text>\n";
    o_ += "<rect x=\"" + f(L) + "\" y=\"" + f(T) + "\" width=\"" + f(pw()) + "\" height=\"" + f(ph()) +
          "\" fill=\"none\" stroke=\"black\"/>\n";
    for (double v : x.ticks()) {
      const double px = X(v);
      o_ += "<line x1=\"" + f(px) + "\" y1=\"" + f(T) + "\" x2=\"" + f(px) + "\" y2=\"" + f(T + ph()) +
            "\" stroke=\"#ddd\"/>\n<text x=\"" + f(px) + "\" y=\"" + f(T + ph() + 16) + "\" text-anchor=\"middle\">" +
            tick_text(v, x.log) + "</text>\n";
    }
    for (double v : y.ticks()) {
      const double py = Y(v);
      o_ += "<line x1=\"" + f(L) + "\" y1=\"" + f(py) + "\" x2=\"" + f(L + pw()) + "\" y2=\"" + f(py) +
            "\" stroke=\"#ddd\"/>\n<text x=\"" + f(L - 6) + "\" y=\"" + f(py + 4) + "\" text-anchor=\"end\">" +
            tick_text(v, y.log) + "</text>\n";
    }
    o_ += "<text x=\"" + f(L + pw() / 2) + "\" y=\"" + f(H - 8) + "\" text-anchor=\"middle\">" + esc(xlabel) + "</text>\n";
    o_ += "<text transform=\"translate(16," + f(T + ph() / 2) + ") rotate(-90)\" text-anchor=\"middle\">" + esc(ylabel) +
          "</text>\n";
  }
  double X(double v) const { return L + std::clamp(x_.norm(v), 0.0, 1.0) * pw(); }
  double Y(double v) const { return T + (1.0 - std::clamp(y_.norm(v), 0.0, 1.0)) * ph(); }

  void polyline(const std::vector<std::pair<double, double>>& pts, const char* color) {
    if (pts.empty()) return;
    o_ += "<polyline fill=\"none\" stroke=\"" + std::string(color) + "\" stroke-width=\"1.2\" points=\"";
    for (const auto& p : pts) o_ += f(X(p.first)) + "," + f(Y(p.second)) + " ";
    o_ += "\"/>\n";
  }
  void dot(double x, double y, const char* color) {
    o_ += "<circle cx=\"" + f(X(x)) + "\" cy=\"" + f(Y(y)) + "\" r=\"3\" fill=\"" + color + "\"/>\n";
  }
  void point(double x, double y, const char* color, const std::string& label) {
    o_ += "<circle cx=\"" + f(X(x)) + "\" cy=\"" + f(Y(y)) + "\" r=\"4\" fill=\"" + color + "\"/>\n";
    // Labels of nearby points would overprint: move this one down a line until it is clear
    // of the labels already placed (width estimated at 7 px per character).
    const double w = 7.0 * static_cast<double>(label.size()), h = 14.0, lx = X(x) + 6;
    double ly = Y(y) - 6;
    // Bounded: each pass moves the label below one placed label at most once per label, with
    // a small margin so that rounding cannot leave it overlapping by an ulp forever.
    for (size_t pass = 0, moved = 1; moved && pass <= labels_.size(); ++pass) {
      moved = 0;
      for (const auto& b : labels_)
        if (lx < b[0] + b[2] && b[0] < lx + w && ly - h < b[1] - 0.5 && b[1] - h < ly - 0.5) {
          ly = b[1] + h;
          moved = 1;
        }
    }
    labels_.push_back({lx, ly, w});
    o_ += "<text x=\"" + f(lx) + "\" y=\"" + f(ly) + "\" fill=\"" + color + "\">" + esc(label) + "</text>\n";
  }
  void legend(size_t i, const std::string& label, const char* color) {
    const double y = T + 10 + 18 * static_cast<double>(i);
    o_ += "<line x1=\"" + f(L + pw() + 12) + "\" y1=\"" + f(y) + "\" x2=\"" + f(L + pw() + 32) + "\" y2=\"" + f(y) +
          "\" stroke=\"" + color + "\" stroke-width=\"2\"/>\n<text x=\"" + f(L + pw() + 38) + "\" y=\"" + f(y + 4) + "\">" +
          esc(label) + "</text>\n";
  }
  void note(const std::string& text) {
    o_ += "<text x=\"" + f(L) + "\" y=\"" + f(T - 4) + "\" font-size=\"10\" fill=\"#555\">" + esc(text) + "</text>\n";
  }
  std::string finish() { return o_ + "</svg>\n"; }

 private:
  static constexpr double W = 760, H = 440, L = 70, R = 190, T = 36, B = 50;
  static double pw() { return W - L - R; }
  static double ph() { return H - T - B; }
  Axis x_, y_;
  std::string o_;
  std::vector<std::array<double, 3>> labels_;  // x, baseline y, width of each point label
};

const char* color(size_t i) { return kColors[i % (sizeof kColors / sizeof kColors[0])]; }

void kl_range(const Results& r, double* mn, double* mx) {
  *mn = INFINITY;
  *mx = 0;
  for (const ArmRows& a : r.arms)
    for (const auto& t : a.rows)
      for (const ScoreRow& s : t)
        if (std::isfinite(s.kl) && s.kl > kKlFloor) {
          *mn = std::min(*mn, s.kl);
          *mx = std::max(*mx, s.kl);
        }
  if (!std::isfinite(*mn)) *mn = *mx = kKlFloor;
}

}  // namespace

std::string svg_kl_by_position(const Results& r) {
  size_t longest = 1;
  for (const TrajectoryInfo& t : r.trajectories) longest = std::max<size_t>(longest, t.generated());
  double mn, mx;
  kl_range(r, &mn, &mx);
  Plot p("KL against generated position", "generated position", "KL(p||q), nats",
         lin_axis(0, static_cast<double>(longest - 1)), log_axis(mn, mx));
  p.note(r.trajectories.size() > 1 ? "mean over trajectories; values <= 1e-10 drawn at the floor"
                                   : "values <= 1e-10 drawn at the floor");
  for (size_t i = 0; i < r.arms.size(); ++i) {
    std::vector<std::pair<double, double>> pts;
    for (size_t j = 0; j < longest; ++j) {
      double s = 0;
      int n = 0;
      for (const auto& t : r.arms[i].rows)
        if (j < t.size()) {
          s += t[j].kl;
          ++n;
        }
      if (n) pts.emplace_back(static_cast<double>(j), std::max(s / n, kKlFloor));
    }
    p.polyline(pts, color(i));
    p.legend(i, r.arms[i].arm, color(i));
  }
  return p.finish();
}

std::string svg_kl_cdf(const Results& r) {
  double mn, mx;
  kl_range(r, &mn, &mx);
  Plot p("KL CDF per arm", "KL(p||q), nats", "fraction of positions <= KL", log_axis(mn, mx), {0.0, 1.0, false});
  p.note("values <= 1e-10 counted at the left edge");
  for (size_t i = 0; i < r.arms.size(); ++i) {
    std::vector<double> v;
    for (const auto& t : r.arms[i].rows)
      for (const ScoreRow& s : t) v.push_back(std::max(s.kl, kKlFloor));
    std::sort(v.begin(), v.end());
    std::vector<std::pair<double, double>> pts;
    const double n = static_cast<double>(v.size());
    for (size_t k = 0; k < v.size(); ++k) {
      pts.emplace_back(v[k], static_cast<double>(k) / n);
      pts.emplace_back(v[k], static_cast<double>(k + 1) / n);
    }
    p.polyline(pts, color(i));
    p.legend(i, r.arms[i].arm, color(i));
  }
  return p.finish();
}

std::string svg_kl_vs_bits(const Report& rep) {
  double bmn = INFINITY, bmx = -INFINITY, kmn = INFINITY, kmx = 0;
  for (const ArmStats& a : rep.arms) {
    if (!std::isfinite(a.bits_occupied) || !std::isfinite(a.mean_kl)) continue;
    bmn = std::min(bmn, a.bits_occupied);
    bmx = std::max(bmx, a.bits_occupied);
    if (a.mean_kl > kKlFloor) kmn = std::min(kmn, a.mean_kl);
    kmx = std::max(kmx, a.mean_kl);
  }
  if (!std::isfinite(bmn)) bmn = bmx = 0;
  if (!std::isfinite(kmn)) kmn = kmx = kKlFloor;
  Plot p("Mean KL against bits per value", "bits per value occupied (compressed layers)", "mean KL(p||q), nats",
         lin_axis(bmn, bmx), log_axis(kmn, kmx));
  p.note("a mean KL of 0 is drawn on the bottom edge");
  for (size_t i = 0; i < rep.arms.size(); ++i) {
    const ArmStats& a = rep.arms[i];
    if (!std::isfinite(a.bits_occupied) || !std::isfinite(a.mean_kl)) continue;
    p.point(a.bits_occupied, std::max(a.mean_kl, kKlFloor), color(i), a.arm);
  }
  return p.finish();
}

std::string svg_kl_by_depth(const Report& rep) {
  double pmn = INFINITY, pmx = 0, kmn = INFINITY, kmx = 0;
  std::vector<std::string> arms;  // in the rows' (Results') order
  for (const DepthRow& d : rep.depth) {
    if (std::find(arms.begin(), arms.end(), d.arm) == arms.end()) arms.push_back(d.arm);
    if (!std::isfinite(d.mean_kl)) continue;
    pmn = std::min(pmn, std::max(d.mean_position, 1.0));
    pmx = std::max(pmx, std::max(d.mean_position, 1.0));
    if (d.mean_kl > kKlFloor) kmn = std::min(kmn, d.mean_kl);
    kmx = std::max(kmx, d.mean_kl);
  }
  if (!std::isfinite(pmn)) pmn = pmx = 1000;
  if (!std::isfinite(kmn)) kmn = kmx = kKlFloor;
  // Whole decades of position around the bins' mean positions.
  const double xlo = std::pow(10.0, std::floor(std::log10(pmn))),
               xhi = std::max(std::pow(10.0, std::ceil(std::log10(pmx))), 10 * xlo);
  Plot p("Mean KL by depth in the context", "absolute position (mean of the bin's generated positions)",
         "mean KL(p||q), nats", {xlo, xhi, true}, log_axis(kmn, kmx));
  p.note(rep.depth.empty() ? "no generated positions"
                           : "one point per bin (depth.csv); a mean KL <= 1e-10 is drawn at the floor");
  for (size_t i = 0; i < arms.size(); ++i) {
    std::vector<std::pair<double, double>> pts;
    for (const DepthRow& d : rep.depth)
      if (d.arm == arms[i] && std::isfinite(d.mean_kl))
        pts.emplace_back(std::max(d.mean_position, 1.0), std::max(d.mean_kl, kKlFloor));
    p.polyline(pts, color(i));
    for (const auto& q : pts) p.dot(q.first, q.second, color(i));
    p.legend(i, arms[i], color(i));
  }
  return p.finish();
}

std::string frontier_svg(const FrontierResult& r) {
  double bmn = INFINITY, bmx = -INFINITY, kmn = INFINITY, kmx = 0;
  for (const FrontierPoint& p : r.points) {
    if (!std::isfinite(p.tuning_kl)) continue;
    bmn = std::min(bmn, p.bits);
    bmx = std::max(bmx, p.bits);
    if (p.tuning_kl > kKlFloor) kmn = std::min(kmn, p.tuning_kl);
    kmx = std::max(kmx, p.tuning_kl);
  }
  if (!std::isfinite(bmn)) bmn = bmx = 0;
  if (!std::isfinite(kmn)) kmn = kmx = kKlFloor;
  Plot p("Mean KL against allocated bits per value (tuning trajectories)",
         "bits per value allocated at " + std::to_string(r.context) + " tokens", "mean KL(p||q), nats",
         lin_axis(bmn, bmx), log_axis(kmn, kmx));
  p.note("every scored candidate (each family a colour); the line joins the best arm of each budget");
  std::vector<std::string> families;
  for (const FrontierPoint& q : r.points)
    if (std::find(families.begin(), families.end(), q.family) == families.end()) families.push_back(q.family);
  for (size_t f = 0; f < families.size(); ++f) p.legend(f, families[f], color(f));
  for (const FrontierPoint& q : r.points) {
    if (!std::isfinite(q.tuning_kl)) continue;
    const size_t f = static_cast<size_t>(std::find(families.begin(), families.end(), q.family) - families.begin());
    p.point(q.bits, std::max(q.tuning_kl, kKlFloor), color(f), q.arm);
  }
  std::vector<std::pair<double, double>> line;
  for (const FrontierPick& pk : r.picks)
    for (const FrontierPoint& q : r.points)
      if (q.arm == pk.arm && std::isfinite(q.tuning_kl)) line.emplace_back(q.bits, std::max(q.tuning_kl, kKlFloor));
  std::sort(line.begin(), line.end());
  line.erase(std::unique(line.begin(), line.end()), line.end());
  p.polyline(line, "black");
  return p.finish();
}

}  // namespace replay
}  // namespace sjkv
