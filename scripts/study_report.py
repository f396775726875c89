"""docs/RESULTS.md and its plots from study/results.csv (scripts/study calls write()).

Everything here is generated: the tables and plots from the CSV, the prose from the
comparison sections of study/arms.toml, whose {ratio:ARM|BASELINE}-style placeholders are
filled from the CSV. Nothing is tuned or edited by hand.
"""
import csv
import html
import math
import os
import re

# {stat:ARM|BASELINE} or {stat@SET:ARM|BASELINE}: ratio, lower (1 - ratio), ci (positions),
# cih (histories), won; {kl:ARM}, {bits:ARM}, {median:ARM}; from study/depth.csv
# {depth@SET:ARM#FROM} (mean KL of the bin starting at FROM tokens), from study/needles.csv
# {needle@SET:ARM#DIST} (answer mean KL at that distance, 0 = all needles), {needleci@SET:ARM#DIST},
# {top1@SET:ARM#DIST} (gold top-1 share) and {reftop1@SET:ARM#DIST} (the reference's).
PLACEHOLDER = re.compile(r"\{(ratio|ci|cih|won|kl|median|bits|lower|depth|needle|needleci|top1|reftop1)"
                         r"(?:@([a-z0-9-]+))?\:([^|{}]+)(?:\|([^{}]+))?\}")
ROW_KINDS = {"depth": ("depth", "mean_kl"), "needle": ("needles", "mean_kl"), "needleci": ("needles", None),
             "top1": ("needles", "gold_top"), "reftop1": ("needles", "ref_gold_top")}


def load(csv_path):
    """(set, history, arm, baseline, statistic) -> value"""
    t = {}
    with open(csv_path, newline="") as f:
        for r in csv.DictReader(f):
            v = r["value"]
            t[(r["set"], r["history"], r["arm"], r["baseline"], r["statistic"])] = float(v) if v not in ("nan", "") else math.nan
    return t


def g(x, digits=3):
    if x is None or x != x:
        return "-"
    if x == 0:
        return "0"
    if abs(x) >= 1e4 or abs(x) < 1e-3:
        return f"{x:.{digits}g}".replace("e-0", "e-").replace("e+0", "e+")
    return f"{x:.{digits}g}"


def pct(x):
    return "-" if x != x else f"{100 * x:.1f}%"


class Table:
    rows = {"depth": {}, "needles": {}}  # (set, arm, bin or distance) -> row of study/depth.csv, needles.csv

    def __init__(self, t, s):
        self.t, self.s = t, s

    def row(self, kind, arm_at):
        """The depth or needle row a {depth|needle|...:ARM#N} placeholder names, or None."""
        arm, _, at = arm_at.rpartition("#")
        return Table.rows[ROW_KINDS[kind][0]].get((self.s, arm, at))

    def stat(self, arm, stat, history="all"):
        return self.t.get((self.s, history, arm, "", stat), math.nan)

    def pair(self, arm, base, stat, history="all"):
        return self.t.get((self.s, history, arm, base, stat), math.nan)

    def arms(self):
        seen = []
        for (s, h, a, b, st) in self.t:
            if s == self.s and b == "" and h == "all" and a not in seen:
                seen.append(a)
        return seen

    def has_pair(self, arm, base):
        return (self.s, "all", arm, base, "ratio") in self.t


def fill(text, tab):
    def rep(m):
        kind, a, b = m.group(1), m.group(3), m.group(4)
        if m.group(2):
            tab_ = Table(tab.t, m.group(2))
        else:
            tab_ = tab
        return value(kind, a, b, tab_, m.group(0))
    return PLACEHOLDER.sub(rep, text)


def value(kind, a, b, tab, whole):
    if kind in ROW_KINDS:
        r = tab.row(kind, a)
        if r is None:
            return whole
        if kind == "needleci":
            return f"{g(float(r['ci_low']))}-{g(float(r['ci_high']))}"
        x = float(r[ROW_KINDS[kind][1]])
        return pct(x) if kind in ("top1", "reftop1") else g(x)
    if kind == "ratio":
        return g(tab.pair(a, b, "ratio"))
    if kind == "lower":  # "lower by": 1 - ratio, as the note writes it
        r = tab.pair(a, b, "ratio")
        return "-" if r != r else f"{100 * (1 - r):.1f}%"
    if kind == "ci":
        return f"{g(tab.pair(a, b, 'ci_low_positions'))}-{g(tab.pair(a, b, 'ci_high_positions'))}"
    if kind == "cih":
        return f"{g(tab.pair(a, b, 'ci_low_histories'))}-{g(tab.pair(a, b, 'ci_high_histories'))}"
    if kind == "median":
        return g(tab.stat(a, "median_kl"))
    if kind == "won":
        return f"{int(tab.pair(a, b, 'histories_won'))} of {int(tab.pair(a, b, 'histories'))}" if tab.has_pair(a, b) else "-"
    if kind == "kl":
        return g(tab.stat(a, "mean_kl"))
    if kind == "bits":
        return f"{tab.stat(a, 'bits_allocated'):.2f}"
    return whole


def svg_open(W, H, x_title, title):
    return [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" font-size="11">',
            f'<rect width="{W}" height="{H}" fill="white"/>',
            f'<text x="{x_title}" y="20" font-size="14">{html.escape(title)}</text>']


def svg_log_grid(y0, y1, Y, x_left, x_right):
    """Horizontal lines at the powers of ten y0..y1 (log10 units), labelled on the left."""
    o = []
    for yv in range(y0, y1 + 1):
        o.append(f'<line x1="{x_left}" y1="{Y(yv):.1f}" x2="{x_right}" y2="{Y(yv):.1f}" stroke="#ddd"/>')
        o.append(f'<text x="{x_left - 5}" y="{Y(yv) + 4:.1f}" text-anchor="end">1e{yv}</text>')
    return o


def svg_save(o, path):
    o.append("</svg>")
    with open(path, "w") as f:
        f.write("\n".join(o) + "\n")
    return True


def svg_scatter(tab, arms, path, title):
    """Mean KL (log) against bits per value allocated, one labelled point per arm."""
    pts = [(tab.stat(a, "bits_allocated"), tab.stat(a, "mean_kl"), a) for a in arms]
    pts = [p for p in pts if p[0] == p[0] and p[1] == p[1] and p[1] > 0]
    W, H, L, R, T, B = 860, 520, 70, 250, 40, 50
    if not pts:
        return False
    xs, ys = [p[0] for p in pts], [math.log10(p[1]) for p in pts]
    x0, x1 = math.floor(min(xs)), math.ceil(max(xs))
    y0, y1 = math.floor(min(ys)), math.ceil(max(ys))
    if x1 == x0:
        x1 += 1
    if y1 == y0:
        y1 += 1
    X = lambda x: L + (x - x0) / (x1 - x0) * (W - L - R)
    Y = lambda y: T + (y1 - y) / (y1 - y0) * (H - T - B)
    o = svg_open(W, H, L, title)
    for xv in range(x0, x1 + 1):
        o.append(f'<line x1="{X(xv):.1f}" y1="{T}" x2="{X(xv):.1f}" y2="{H - B}" stroke="#ddd"/>')
        o.append(f'<text x="{X(xv):.1f}" y="{H - B + 15}" text-anchor="middle">{xv}</text>')
    o += svg_log_grid(y0, y1, Y, L, W - R)
    o.append(f'<text x="{(L + W - R) / 2}" y="{H - 12}" text-anchor="middle">bits per value allocated (compressed layers)</text>')
    o.append(f'<text x="16" y="{(T + H - B) / 2}" transform="rotate(-90 16 {(T + H - B) / 2})" text-anchor="middle">mean KL (nats)</text>')
    for i, (x, y, a) in enumerate(sorted(pts, key=lambda p: p[1])):
        color = "#c0392b" if a.startswith("sj:") else "#2c3e50" if a.startswith("kvarn:") else "#7f8c8d"
        cx, cy = X(x), Y(math.log10(y))
        o.append(f'<circle cx="{cx:.1f}" cy="{cy:.1f}" r="3.5" fill="{color}"/>')
        o.append(f'<text x="{cx + 6:.1f}" y="{cy + 4:.1f}" fill="{color}">{html.escape(a)}</text>')
    return svg_save(o, path)


def svg_forest(tab, pairs, path, title):
    """Each pair's KL ratio (log scale) with its 95% CI over positions (thick) and histories (thin)."""
    rows = []
    for a, b in pairs:
        r = tab.pair(a, b, "ratio")
        if r == r and r > 0:
            rows.append((a, b, r, tab.pair(a, b, "ci_low_positions"), tab.pair(a, b, "ci_high_positions"),
                         tab.pair(a, b, "ci_low_histories"), tab.pair(a, b, "ci_high_histories")))
    if not rows:
        return False
    vals = [v for r in rows for v in r[2:] if v == v and v > 0]
    lo, hi = math.floor(math.log10(min(vals + [0.5]))), math.ceil(math.log10(max(vals + [2.0])))
    W, L, R, T, rowh = 900, 430, 30, 40, 22
    H = T + rowh * len(rows) + 40
    X = lambda v: L + (math.log10(v) - lo) / (hi - lo) * (W - L - R)
    o = svg_open(W, H, 10, title)
    for e in range(lo, hi + 1):
        for m in (1, 2, 5):
            v = m * 10.0 ** e
            if 10.0 ** lo <= v <= 10.0 ** hi:
                o.append(f'<line x1="{X(v):.1f}" y1="{T - 5}" x2="{X(v):.1f}" y2="{H - 30}" stroke="{"#999" if v == 1 else "#eee"}"/>')
                o.append(f'<text x="{X(v):.1f}" y="{H - 15}" text-anchor="middle">{v:g}</text>')
    for i, (a, b, r, pl, ph, hl, hh) in enumerate(rows):
        y = T + rowh * i + rowh / 2
        o.append(f'<text x="{L - 8}" y="{y + 4:.1f}" text-anchor="end">{html.escape(a)} vs {html.escape(b)}</text>')
        if hl == hl and hh == hh and hl > 0:
            o.append(f'<line x1="{X(hl):.1f}" y1="{y:.1f}" x2="{X(hh):.1f}" y2="{y:.1f}" stroke="#7f8c8d" stroke-width="1"/>')
        if pl == pl and ph == ph and pl > 0:
            o.append(f'<line x1="{X(pl):.1f}" y1="{y:.1f}" x2="{X(ph):.1f}" y2="{y:.1f}" stroke="#c0392b" stroke-width="4"/>')
        o.append(f'<circle cx="{X(r):.1f}" cy="{y:.1f}" r="4" fill="#2c3e50"/>')
    o.append(f'<text x="10" y="{H - 2}" fill="#555">KL ratio (arm / baseline); thick: 95% CI over positions, thin: over histories; '
             f'left of 1: the arm is better</text>')
    return svg_save(o, path)


def svg_lines(series, xlabels, path, title, ylabel):
    """One line per arm over categorical x (bins or distances), y on a log scale; points with no
    positive value are left out."""
    pts = {a: [(i, y) for i, y in v if y == y and y > 0] for a, v in series.items()}
    pts = {a: v for a, v in pts.items() if v}
    if not pts:
        return False
    W, H, L, R, T, B = 860, 480, 70, 250, 40, 50
    ys = [math.log10(y) for v in pts.values() for _, y in v]
    y0, y1 = math.floor(min(ys)), math.ceil(max(ys))
    if y1 == y0:
        y1 += 1
    n = max(1, len(xlabels) - 1)
    X = lambda i: L + i / n * (W - L - R)
    Y = lambda y: T + (y1 - y) / (y1 - y0) * (H - T - B)
    o = svg_open(W, H, L, title)
    for i, lab in enumerate(xlabels):
        o.append(f'<line x1="{X(i):.1f}" y1="{T}" x2="{X(i):.1f}" y2="{H - B}" stroke="#ddd"/>')
        o.append(f'<text x="{X(i):.1f}" y="{H - B + 15}" text-anchor="middle">{html.escape(lab)}</text>')
    o += svg_log_grid(y0, y1, Y, L, W - R)
    o.append(f'<text x="16" y="{(T + H - B) / 2}" transform="rotate(-90 16 {(T + H - B) / 2})" text-anchor="middle">'
             f'{html.escape(ylabel)}</text>')
    palette = ["#c0392b", "#2c3e50", "#27ae60", "#8e44ad", "#d35400", "#16a085", "#7f8c8d", "#2980b9", "#f39c12"]
    for k, (a, v) in enumerate(sorted(pts.items())):
        c = palette[k % len(palette)]
        o.append(f'<polyline fill="none" stroke="{c}" stroke-width="1.5" points="'
                 + " ".join(f"{X(i):.1f},{Y(math.log10(y)):.1f}" for i, y in v) + '"/>')
        for i, y in v:
            o.append(f'<circle cx="{X(i):.1f}" cy="{Y(math.log10(y)):.1f}" r="3" fill="{c}"/>')
        o.append(f'<text x="{W - R + 10}" y="{T + 14 * k + 10}" fill="{c}">{html.escape(a)}</text>')
    return svg_save(o, path)


def read_csv(path):
    if not os.path.exists(path):
        return []
    with open(path, newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def kilo(x):
    x = int(x)
    return f"{x // 1000}K" if x and x % 1000 == 0 else str(x)


def depth_section(rows, s, plots):
    """KL by depth in the context for set s (study/depth.csv)."""
    rows = [r for r in rows if r["set"] == s]
    if not rows:
        return []
    bins = sorted({(int(r["from"]), r["to"]) for r in rows})
    labels = [f"{kilo(a)}-{kilo(b)}" if b else f"{kilo(a)}+" for a, b in bins]
    arms = list(dict.fromkeys(r["arm"] for r in rows))
    cell = {(r["arm"], int(r["from"])): r for r in rows}
    o = [f"### KL by depth in the context (set `{s}`)", "",
         "Mean KL of the generated positions by their absolute position in the context (from `study/depth.csv`; 95% CI "
         "of the mean by a block bootstrap within each history; positions per bin in the header).", ""]
    counts = [cell.get((arms[0], a), {}).get("positions", "0") for a, _ in bins]
    o += ["| arm | " + " | ".join(f"{lab} ({int(c):,})" for lab, c in zip(labels, counts)) + " |",
          "|---|" + "--:|" * len(bins)]
    for arm in arms:
        cells = []
        for a, _ in bins:
            r = cell.get((arm, a))
            cells.append("-" if not r else f"{g(float(r['mean_kl']))} ({g(float(r['ci_low']))}-{g(float(r['ci_high']))})")
        o.append(f"| `{arm}` | " + " | ".join(cells) + " |")
    svg = f"kl-by-depth-{s}.svg"
    series = {arm: [(i, float(cell[(arm, a)]["mean_kl"])) for i, (a, _) in enumerate(bins) if (arm, a) in cell] for arm in arms}
    if svg_lines(series, labels, os.path.join(plots, svg), f"set {s}: mean KL by position in the context", "mean KL (nats)"):
        o += ["", f"![mean KL by depth, set {s}](results/{svg})"]
    return o + [""]


def needles_section(rows, s, plots):
    """Answer-token KL and gold top-1 by look-back distance for set s (study/needles.csv)."""
    rows = [r for r in rows if r["set"] == s]
    if not rows:
        return []
    dists = sorted({int(r["distance"]) for r in rows if r["distance"] != "0"})
    arms = list(dict.fromkeys(r["arm"] for r in rows))
    cell = {(r["arm"], int(r["distance"])): r for r in rows}
    any_row = next((r for r in rows if r["distance"] == "0"), rows[0])
    o = [f"### Needles by look-back distance (set `{s}`)", "",
         f"The answer positions ({int(any_row['positions']):,} per arm, documents: {any_row['documents']}; from "
         "`study/needles.csv`): mean KL at each needle's "
         "distance (tokens between the planted code and the end of the document), and over all needles with its 95% CI "
         "by a nested bootstrap (documents, then needles within each). Top-1 = share of answer positions whose most "
         "likely token is the code's digit; the reference's own share is in its row.", ""]
    o += ["| arm | " + " | ".join(kilo(d) for d in dists) + " | all (95% CI) | top-1 |", "|---|" + "--:|" * (len(dists) + 2)]
    ref_top = None
    for arm in arms:
        cells = [g(float(cell[(arm, d)]["mean_kl"])) if (arm, d) in cell else "-" for d in dists]
        r0 = cell.get((arm, 0))
        all_cell = f"{g(float(r0['mean_kl']))} ({g(float(r0['ci_low']))}-{g(float(r0['ci_high']))})" if r0 else "-"
        o.append(f"| `{arm}` | " + " | ".join(cells) + f" | {all_cell} | {pct(float(r0['gold_top'])) if r0 else '-'} |")
        ref_top = r0["ref_gold_top"] if r0 else ref_top
    if ref_top is not None:
        o.append("| reference (f32) | " + " | ".join("0" for _ in dists) + f" | 0 | {pct(float(ref_top))} |")
    o += ["", "Top-1 by distance:", "", "| arm | " + " | ".join(kilo(d) for d in dists) + " |", "|---|" + "--:|" * len(dists)]
    for arm in arms:
        o.append(f"| `{arm}` | " + " | ".join(pct(float(cell[(arm, d)]["gold_top"])) if (arm, d) in cell else "-"
                                             for d in dists) + " |")
    refs = [cell[(arms[0], d)]["ref_gold_top"] if (arms[0], d) in cell else "nan" for d in dists]
    o.append("| reference (f32) | " + " | ".join(pct(float(x)) for x in refs) + " |")
    svg = f"needles-{s}.svg"
    series = {arm: [(i, float(cell[(arm, d)]["mean_kl"])) for i, d in enumerate(dists) if (arm, d) in cell] for arm in arms}
    if svg_lines(series, [kilo(d) for d in dists], os.path.join(plots, svg),
                 f"set {s}: answer-token KL by look-back distance", "mean KL of the answer tokens (nats)"):
        o += ["", f"![answer KL by distance, set {s}](results/{svg})"]
    return o + [""]


def frontier_section(arms_cfg, study_dir, report_dir):
    """The [[frontier]] entries: each one's recommend.md (written by sjkv-replay frontier into
    study/frontier/NAME) and its plot, copied next to the report's plots."""
    entries = arms_cfg.get("frontier", [])
    if not entries:
        return []
    o = ["## Which format at B bits: the frontier", "",
         "`scripts/study --frontier` runs `sjkv-replay frontier` (docs/REPLAY.md): every format family searched by "
         "successive halving on tuning histories that no reported set holds, the best arm per budget of allocated "
         "bits per value rescored on held-out histories against the default `sj:4/4` and against the best plain "
         "format of the same budget. Every candidate's numbers are in `study/frontier/NAME/frontier.csv`.", ""]
    for e in entries:
        name = e["name"]
        d = os.path.join(study_dir, "frontier", name)
        o += [f"### `{name}`", "", e.get("description", "").strip(), ""]
        md = os.path.join(d, "recommend.md")
        if not os.path.exists(md):
            stored = sum(len([f for f in fs if f.endswith(".csv")]) for _, _, fs in os.walk(os.path.join(d, "store")))
            o += [(f"Not finished: {stored} scored (arm, history) row files are kept in `study/frontier/{name}/store`; "
                   if stored else "Not run yet: ") + f"`scripts/study --frontier {name}` runs it (and resumes).", ""]
            continue
        with open(md) as f:
            body = f.read().split("\n", 1)[1].strip()  # without its title
        svg = os.path.join(d, "frontier.svg")
        if os.path.exists(svg):
            dst = os.path.join(report_dir, "results", f"frontier-{name}.svg")
            os.makedirs(os.path.dirname(dst), exist_ok=True)
            with open(svg, "rb") as f, open(dst + ".tmp", "wb") as g2:
                g2.write(f.read())
            os.replace(dst + ".tmp", dst)
            body += f"\n\n![KL against allocated bits, {name}](results/frontier-{name}.svg)"
        o += [body, ""]
    return o


def write(csv_path, histories, arms_cfg, sets, report_dir, cmd, manifest, study_dir, expected, left_out=(),
          engine=None, timing=None):
    t = load(csv_path)
    depth_rows = read_csv(os.path.join(os.path.dirname(csv_path), "depth.csv"))
    needle_rows = read_csv(os.path.join(os.path.dirname(csv_path), "needles.csv"))
    Table.rows = {"depth": {(r["set"], r["arm"], r["from"]): r for r in depth_rows},
                  "needles": {(r["set"], r["arm"], r["distance"]): r for r in needle_rows}}
    plots = os.path.join(report_dir, "results")
    os.makedirs(plots, exist_ok=True)
    rel_csv = os.path.relpath(csv_path, report_dir)
    o = ["# SJ-KVaRN study: what each cache format costs Gemma 3 270M, per bit", "",
         f"Generated by `{cmd}` from `study/manifest.toml` and `study/arms.toml`; every number comes from "
         f"[`{os.path.basename(csv_path)}`]({rel_csv}) (one row per set x history x arm x statistic). Do not edit: "
         "rerun the command.", ""]
    # expected: set -> the arms it scores; a set is complete when each has a row on each history.
    partial = []
    for st in sets:
        planned = [h["name"] for h in histories if st in h["sets"]]
        cells = {(k[1], k[2]) for k in t if k[0] == st and k[1] != "all" and k[3] == "" and k[4] == "mean_kl"}
        done = sum(1 for n in planned for x in expected[st] if (n, x) in cells)
        if done < len(planned) * len(expected[st]):
            partial.append(f"set `{st}`: {done} of {len(planned) * len(expected[st])} history x arm replays scored")
    if left_out:
        partial.append(f"{len(left_out)} arms left out: the tables they name are not trained yet, "
                       f"`scripts/study --train` makes them")
    if partial:
        o += ["**Partial: the study has not finished** (" + "; ".join(partial) + "). Tables cover what is scored "
              "so far; rerun the command to continue.", ""]
    intro = arms_cfg.get("report", {}).get("intro")
    if intro:
        o += [intro.strip(), ""]
    findings = arms_cfg.get("report", {}).get("findings")
    if findings:
        # Items are written against the final numbers: while the study runs, an item is shown
        # only when each number it quotes is scored on every history of its set.
        items = re.split(r"\n(?=\d+\. )", findings.strip())

        def scored(m):
            tab = Table(t, m.group(2) or sets[0])
            if m.group(1) in ROW_KINDS:
                return tab.row(m.group(1), m.group(3)) is not None
            if m.group(4):
                return tab.has_pair(m.group(3), m.group(4))
            return (tab.s, "all", m.group(3), "", "mean_kl") in t

        shown = [fill(x, Table(t, sets[0])) for x in items if all(scored(m) for m in PLACEHOLDER.finditer(x))]
        if shown:
            o += ["## What the study finds", ""]
            if len(shown) < len(items):
                o += [f"({len(shown)} of {len(items)} findings: the others wait for sets still being scored.)", ""]
            o += ["\n".join(shown), ""]
    o += ["## Histories", "", "| history | kind | model | sets | prompt tokens | scored positions |", "|---|---|---|---|--:|--:|"]
    for h in histories:
        model = "Gemma 3 270M" if h.get("model", "default") == "default" else h["model"]
        scored = h.get("scored", "-" if "transcript" in h else h["generate"])
        o.append(f"| `{h['name']}` | {h['kind']} | {model} | {', '.join(h['sets'])} | {h['tokens']:,} | {scored} |")
    o += ["", "Prompt tokens of a transcript (agent session or needle document) are its context: the given and answer "
          "tokens plus its turn cap for each regenerated turn.", "",
          "Files the histories quote, each checked by SHA-256 before the study starts:", ""]
    used = set()
    for h in histories:
        used |= set(h["file_ids"])
    for f in manifest.get("file", []):
        if f["id"] in used:
            o.append(f"- `{f['path']}` ({f.get('package', '?')}), SHA-256 `{f['sha256']}`")
    o.append("")
    for s in sets:
        tab = Table(t, s)
        arms = tab.arms()
        if not arms:
            continue
        desc = arms_cfg["sets"][s].get("description", "")
        o += [f"## Set `{s}`", ""]
        if desc:
            o += [desc.strip(), ""]
        o += ["| arm | bits occupied | bits allocated | mean KL | median | p90 | p99 | same top |",
              "|---|--:|--:|--:|--:|--:|--:|--:|"]
        for a in sorted(arms, key=lambda a: -tab.stat(a, "bits_allocated")):
            o.append(f"| `{a}` | {tab.stat(a, 'bits_occupied'):.3f} | {tab.stat(a, 'bits_allocated'):.3f} | "
                     f"{g(tab.stat(a, 'mean_kl'))} | {g(tab.stat(a, 'median_kl'))} | {g(tab.stat(a, 'p90_kl'))} | "
                     f"{g(tab.stat(a, 'p99_kl'))} | {pct(tab.stat(a, 'same_top'))} |")
        svg = f"kl-vs-bits-{s}.svg"
        if svg_scatter(tab, arms, os.path.join(plots, svg), f"set {s}: mean KL against bits per value allocated"):
            o += ["", f"![mean KL against bits, set {s}](results/{svg})"]
        o.append("")
        o += depth_section(depth_rows, s, plots)
        o += needles_section(needle_rows, s, plots)
        for c in arms_cfg.get("comparison", []):
            if s not in c.get("sets", []):
                continue
            pairs = [(a, b) for a, b in c.get("pairs", []) if tab.has_pair(a, b)]
            if not pairs:
                continue
            o += [f"### {c['title']} (set `{s}`)", ""]
            if c.get("text"):
                o += [fill(c["text"].strip(), tab), ""]
            slug = re.sub(r"[^a-z0-9]+", "-", c["title"].lower()).strip("-")[:40]
            fsvg = f"ratios-{s}-{slug}.svg"
            if svg_forest(tab, pairs, os.path.join(plots, fsvg), c["title"]):
                o += [f"![{c['title'].replace(']', '')}](results/{fsvg})", ""]
            o += ["| arm | baseline | bits (arm / baseline) | KL ratio | 95% CI positions | 95% CI histories | lower at | histories won |",
                  "|---|---|--:|--:|--:|--:|--:|--:|"]
            for a, b in pairs:
                o.append(f"| `{a}` | `{b}` | {tab.stat(a, 'bits_allocated'):.2f} / {tab.stat(b, 'bits_allocated'):.2f} | "
                         f"{g(tab.pair(a, b, 'ratio'))} | {g(tab.pair(a, b, 'ci_low_positions'))}-{g(tab.pair(a, b, 'ci_high_positions'))} | "
                         f"{g(tab.pair(a, b, 'ci_low_histories'))}-{g(tab.pair(a, b, 'ci_high_histories'))} | "
                         f"{int(tab.pair(a, b, 'lower_at'))} of {int(tab.pair(a, b, 'of'))} | "
                         f"{int(tab.pair(a, b, 'histories_won'))} of {int(tab.pair(a, b, 'histories'))} |")
            o.append("")
    o += frontier_section(arms_cfg, study_dir, report_dir)
    train_csv = os.path.join(study_dir, "train.csv")
    if os.path.exists(train_csv):
        with open(train_csv, newline="") as f:
            tr = list(csv.DictReader(f))
        if tr:
            o += ["## Codebooks trained here", "",
                  f"`scripts/study --train` captured K/V of the training texts and trained each width from the identity "
                  f"table (scalar levels) and from the format's reference tables (4 bits has none: its built-in table is "
                  f"the identity); per width the start with the lower held-out MSE is published in `study/codebooks/` "
                  f"(chosen on the training texts, never on the histories). Held-out MSE of the trellis targets, in units "
                  f"of the row step, on {int(tr[0]['heldout_tiles']):,} held-out tiles ({int(tr[0]['train_tiles']) * 256:,} "
                  f"training sequences per side); 'real' is the MSE of sealed and decoded rows.", "",
                  "| bits | start | side | iterations | stop | scalar RTN | identity table | reference tables | trained | real: reference | real: trained | published |",
                  "|--:|---|---|--:|---|--:|--:|--:|--:|--:|--:|---|"]
            for r in tr:
                o.append(f"| {r['bits']} | {r['init']} | {r['side'].upper()} | {r['iterations']} | {r['stop']} | "
                         f"{g(float(r['heldout_mse_scalar']), 4)} | {g(float(r['heldout_mse_identity']), 4)} | "
                         f"{g(float(r['heldout_mse_reference']), 4)} | {g(float(r['heldout_mse_trained']), 4)} | "
                         f"{g(float(r['heldout_real_mse_reference']), 4)} | {g(float(r['heldout_real_mse_trained']), 4)} | "
                         f"{'yes' if r['chosen'] == '1' else ''} |")
            o.append("")
    o += ["## How to read this", "",
          "- KL(reference || arm) in nats at each generated position, the reference being the f32 cache the history "
          "was recorded with; each arm replays the same tokens (teacher forcing).",
          "- Bits per value over the compressed (full-attention) layers: occupied = bytes holding the stored "
          "positions, allocated = bytes reserved for the whole context, both over 2 x head size values per position "
          "and KV head (the note's rules, section 8.4), averaged over the scored positions.",
          "- Ratio = mean KL of the arm / mean KL of the baseline over the same positions. CIs are paired bootstrap 95% "
          "intervals: over positions (circular blocks of ceil(sqrt(n)) within each history) and over whole histories. "
          "'Lower at' counts positions where the arm's KL is the smaller; 'histories won' counts histories whose mean "
          "KL is the smaller."]
    if engine:
        o += [f"- Every score is replay engine {engine}'s (`sjkv-replay engine`; the store is keyed by it, so a new "
              "engine scores everything again)."]
    if timing:
        h, m = divmod(int(timing["wall_s"] / 60 + 0.5), 60)
        o += [f"- Time to score with engine {engine}: {timing['replays']} replays (recordings and arms) in "
              f"{h} h {m:02d} min of wall time over {timing['runs']} run(s) of `scripts/study` on "
              f"{' / '.join(timing['cpus'])}, {' / '.join(timing['shapes'])} (jobs x threads), from "
              f"`study/runs/_timing.csv`."]
    o += [""]
    with open(os.path.join(report_dir, "RESULTS.md") + ".tmp", "w") as f:
        f.write("\n".join(o))
    os.replace(os.path.join(report_dir, "RESULTS.md") + ".tmp", os.path.join(report_dir, "RESULTS.md"))
