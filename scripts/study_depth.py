"""KL by depth in the context and the needle table: study/depth.csv and study/needles.csv from
the scored arm folders (scripts/study calls write(); scripts/study_report.py renders them).

depth.csv    set,arm,from,to,histories,positions,mean_kl,ci_low,ci_high,same_top: the generated
             positions of a set's transcript histories (agent sessions) in bins of absolute position
             (the 1-2-5 series `sjkv-replay score` uses), per arm; the CI of the mean KL is a bootstrap
             over circular blocks of ceil(sqrt(n)) positions within each history's bin.
needles.csv  set,arm,distance,documents,answers,positions,mean_kl,ci_low,ci_high,gold_top,ref_gold_top:
             the answer positions of the needle histories by the look-back distance their needle was
             planted at (study/needles.json; distance 0 = all), per arm; the CI is a nested bootstrap
             (documents with replacement, then needles within each), gold_top the share of answer
             positions whose top token is the answer's, ref_gold_top the reference's.
Fixed seeds: the same scores give the same bytes.
"""
import csv
import io
import json
import math
import os
import random

BINS = [0, 1000, 2000, 5000, 10000, 20000, 50000, 100000, 200000]
REPS = 1000
SEED = 20261205


def bin_of(p):
    for i in range(len(BINS) - 1, -1, -1):
        if p >= BINS[i]:
            return i
    return 0


def read_rows(path, cols):
    """The columns `cols` (name -> type) of every row of a CSV with a header; ValueError naming
    the file and line where one is missing or not of its type."""
    with open(path, newline="", encoding="utf-8") as f:
        rows = []
        for n, r in enumerate(csv.DictReader(f), 2):
            try:
                rows.append({c: kind(r[c]) for c, kind in cols.items()})
            except (KeyError, TypeError, ValueError) as e:
                raise ValueError(f"{path}: line {n}: not a row of this table ({e})")
        return rows


def block_mean_ci(groups, rng):
    """95% CI of the pooled mean over `groups` (lists of values, one per history), resampling
    circular blocks of ceil(sqrt(n)) within each group."""
    prep = []
    for v in groups:
        n = len(v)
        if not n:
            continue
        b = max(1, math.ceil(math.sqrt(n)))
        ext = v + v[:b]
        pre = [0.0]
        for x in ext:
            pre.append(pre[-1] + x)
        prep.append((n, b, pre, -(-n // b)))
    if not prep:
        return math.nan, math.nan
    means = []
    for _ in range(REPS):
        s = c = 0.0
        for n, b, pre, k in prep:
            for _ in range(k):
                i = rng.randrange(n)
                s += pre[i + b] - pre[i]
                c += b
        means.append(s / c)
    means.sort()
    return means[int(0.025 * REPS)], means[int(0.975 * REPS) - 1]


def nested_mean_ci(docs, rng):
    """95% CI of the mean over `docs` (each a list of needles, each a list of values): documents
    with replacement, then needles within each."""
    docs = [d for d in docs if d]
    if not docs:
        return math.nan, math.nan
    means = []
    for _ in range(REPS):
        s = c = 0.0
        for _ in docs:
            d = docs[rng.randrange(len(docs))]
            for _ in d:
                nd = d[rng.randrange(len(d))]
                s += sum(nd)
                c += len(nd)
        means.append(s / c)
    means.sort()
    return means[int(0.025 * REPS)], means[int(0.975 * REPS) - 1]


def fmt(x):
    return "nan" if x != x else f"{float(x):.9g}"


def depth_table(sets, histories, arms_of_set, folder_of):
    out = io.StringIO()
    w = csv.writer(out, lineterminator="\n")
    w.writerow(["set", "arm", "from", "to", "histories", "positions", "mean_kl", "ci_low", "ci_high", "same_top"])
    for s in sets:
        hs = [h for h in histories if s in h["sets"] and h.get("kind") == "agentic" and "transcript" in h]
        for a in arms_of_set(s):
            per_bin = {}
            for h in hs:
                f = folder_of(h, a)
                if not f:
                    continue
                for r in read_rows(os.path.join(f, "positions.csv"), {"position": int, "kl": float, "same_top": int}):
                    per_bin.setdefault(bin_of(r["position"]), {}).setdefault(h["name"], []).append((r["kl"], r["same_top"]))
            rng = random.Random(SEED)
            for b in sorted(per_bin):
                groups = [[kl for kl, _ in v] for _, v in sorted(per_bin[b].items())]
                n = sum(len(g) for g in groups)
                lo, hi = block_mean_ci(groups, rng)
                same = sum(t for v in per_bin[b].values() for _, t in v) / n
                top = BINS[b + 1] if b + 1 < len(BINS) else ""
                w.writerow([s, a, BINS[b], top, len(groups), n, fmt(sum(map(sum, groups)) / n), fmt(lo), fmt(hi), fmt(same)])
    return out.getvalue()


def needle_table(sets, histories, arms_of_set, folder_of, needles_json):
    with open(needles_json, encoding="utf-8") as f:
        meta = {x["history"]: [n["distance_target"] for n in x["needles"]] for x in json.load(f)["haystacks"]}
    out = io.StringIO()
    w = csv.writer(out, lineterminator="\n")
    w.writerow(["set", "arm", "distance", "documents", "answers", "positions", "mean_kl", "ci_low", "ci_high",
                "gold_top", "ref_gold_top"])
    for s in sets:
        hs = [h for h in histories if s in h["sets"] and h.get("kind") == "needles"]
        for a in arms_of_set(s):
            by_dist = {}  # distance -> doc -> list of needles (lists of (kl, gold, ref_gold))
            for h in hs:
                f = folder_of(h, a)
                if not f or not os.path.exists(os.path.join(f, "answers.csv")):
                    continue
                dist = meta.get(h["name"])
                if dist is None:
                    raise ValueError(f"study/needles.json has no haystack {h['name']}")
                segs = {}
                cols = {"segment": int, "kl": float, "gold_top": int, "ref_gold_top": int}
                for r in read_rows(os.path.join(f, "answers.csv"), cols):
                    segs.setdefault(r["segment"], []).append((r["kl"], r["gold_top"], r["ref_gold_top"]))
                if len(segs) != len(dist):
                    raise ValueError(f"{h['name']}: {len(segs)} answer segments scored, study/needles.json has {len(dist)} for it")
                for d, k in zip(dist, sorted(segs)):
                    for key in (d, 0):
                        by_dist.setdefault(key, {}).setdefault(h["name"], []).append(segs[k])
            rng = random.Random(SEED)
            for d in sorted(by_dist, key=lambda x: (x == 0, x)):
                docs = [v for _, v in sorted(by_dist[d].items())]
                vals = [x for doc in docs for nd in doc for x in nd]
                lo, hi = nested_mean_ci([[[x[0] for x in nd] for nd in doc] for doc in docs], rng)
                w.writerow([s, a, d, len(docs), sum(len(doc) for doc in docs), len(vals),
                            fmt(sum(x[0] for x in vals) / len(vals)), fmt(lo), fmt(hi),
                            fmt(sum(x[1] for x in vals) / len(vals)), fmt(sum(x[2] for x in vals) / len(vals))])
    return out.getvalue()


def write(out_dir, sets, histories, arms_of_set, folder_of, needles_json, write_atomic):
    """depth.csv and needles.csv into out_dir (only the tables that have rows beside the header)."""
    paths = []
    for name, text in (("depth.csv", depth_table(sets, histories, arms_of_set, folder_of)),
                       ("needles.csv", needle_table(sets, histories, arms_of_set, folder_of, needles_json)
                        if os.path.exists(needles_json) else "")):
        p = os.path.join(out_dir, name)
        if text.count("\n") > 1:
            write_atomic(p, text.encode())
            paths.append(p)
    return paths
