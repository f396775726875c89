#!/usr/bin/env python3
"""How far the study's numbers moved between two results.csv files (an engine change rescored).

  scripts/study_drift.py OLD.csv NEW.csv [--rows all|history] [--markdown]

OLD may be a git revision's file: `git show REV:study/results.csv > old.csv`. For each statistic
it prints the rows both files have, the median and largest relative change |new - old| / |old|
and the row of the largest, over the per-set rows ('all') or the per-history ones. Rows only
one file has are counted. The ratio rows' wins (histories_won of histories) are compared as
counts, and a comparison whose 95% CI over positions excluded 1 on one side and not the other
is listed: that is where a finding can change.
"""
import argparse
import csv
import statistics
import sys


def load(path):
    try:
        with open(path, newline="") as f:
            rows = list(csv.DictReader(f))
    except OSError as e:
        sys.exit(f"study_drift: {path}: {e.strerror}")
    need = {"set", "history", "arm", "baseline", "statistic", "value"}
    if not rows or not need <= set(rows[0]):
        sys.exit(f"study_drift: {path}: not a study results.csv (columns {', '.join(sorted(need))})")
    return {(r["set"], r["history"], r["arm"], r["baseline"], r["statistic"]): r["value"] for r in rows}


def num(v):
    try:
        return float(v)
    except ValueError:
        return None


def main():
    ap = argparse.ArgumentParser(prog="scripts/study_drift.py", description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="\n\n".join(__doc__.split("\n\n")[1:]))
    ap.add_argument("old")
    ap.add_argument("new")
    ap.add_argument("--rows", choices=("all", "history"), default="all",
                    help="per-set rows over all histories (default) or the per-history rows")
    ap.add_argument("--markdown", action="store_true", help="a Markdown table instead of plain columns")
    a = ap.parse_args()
    old, new = load(a.old), load(a.new)
    keep = (lambda k: k[1] == "all") if a.rows == "all" else (lambda k: k[1] != "all")
    common = sorted(k for k in old.keys() & new.keys() if keep(k))
    only_old = sum(1 for k in old.keys() - new.keys() if keep(k))
    only_new = sum(1 for k in new.keys() - old.keys() if keep(k))

    by_stat = {}
    for k in common:
        o, n = num(old[k]), num(new[k])
        if o is None or n is None or o == 0:
            continue
        by_stat.setdefault(k[4], []).append((abs(n - o) / abs(o), k, o, n))
    head = ("statistic", "rows", "median change", "largest change", "at (set, history, arm, baseline)", "old", "new")
    lines = []
    for st in sorted(by_stat):
        v = sorted(by_stat[st], key=lambda e: e[0])
        rel, k, o, n = v[-1]
        lines.append((st, str(len(v)), f"{statistics.median(e[0] for e in v):.1%}", f"{rel:.1%}",
                      ", ".join(x for x in k[:4] if x), f"{o:.4g}", f"{n:.4g}"))
    if a.markdown:
        print("| " + " | ".join(head) + " |")
        print("|" + "|".join("---" if i in (0, 4) else "--:" for i in range(len(head))) + "|")
        for l in lines:
            print("| " + " | ".join(l) + " |")
    else:
        w = [max(len(r[i]) for r in [head] + lines) for i in range(len(head))]
        for r in [head] + lines:
            print("  ".join(c.ljust(w[i]) for i, c in enumerate(r)).rstrip())
    print(f"\n{len(common)} rows in both, {only_old} only in {a.old}, {only_new} only in {a.new}")

    # Comparisons whose significance changed (CI over positions excludes 1 on one side only).
    flips = []
    for k in common:
        if k[4] != "ratio":
            continue
        lo, hi = (k[:4] + ("ci_low_positions",)), (k[:4] + ("ci_high_positions",))
        if not all(x in d and num(d[x]) is not None for x in (lo, hi) for d in (old, new)):
            continue
        sig = lambda d: (num(d[lo]) > 1) - (num(d[hi]) < 1)
        if sig(old) != sig(new):
            flips.append((k, old[k], new[k], (old[lo], old[hi]), (new[lo], new[hi])))
    print(f"{len(flips)} comparison(s) whose 95% CI over positions changed side of 1:")
    for k, o, n, oc, nc in flips:
        print(f"  {', '.join(x for x in k[:4] if x)}: {float(o):.3g} ({oc[0]}..{oc[1]}) -> {float(n):.3g} ({nc[0]}..{nc[1]})")


if __name__ == "__main__":
    main()
