#!/usr/bin/env python3
"""Print a Markdown summary of a bench_codec Google Benchmark JSON file.

Runs nothing itself. Produce the input with, for example:

    ./build/bench/bench_codec --benchmark_min_time=0.2 \\
        --benchmark_out=bench.json --benchmark_out_format=json
    python3 bench/summary.py bench.json

One row per benchmark: config, seal path, threads, time per record or per row (from the
benchmark's own unit-named counters), the ratio against the reference codec's published
single-thread figure where one applies (reference time / our time, higher is faster), and
for seals the ratio against this library's own reference path measured in the same run. Reference figures (github.com/JakeATX/sj-kvarn-codec README, Limitations; Ryzen 7
5800X3D, one thread, -O2, D = 256, G = 128): 19.8 ms per 4/4 scalar record seal, 7.6 to
8.8 us per K+V row decode. With --benchmark_repetitions the median aggregate is used.
Python 3 standard library only.
"""

import argparse
import json
import sys

REF_SEAL_MS_44 = 19.8
REF_DECODE_US = 7.6

SEAL_PATHS = {0: "reference", 1: "fast", 2: "fast-baseline", 3: "fast-avx2", 4: "fast-avx512"}
STAGING = {0: "tq6_0", 1: "f16", 2: "q8_0"}


def parse_name(name):
    """'BM_Seal/D:256/bk:4/bv:4/path:0/real_time' -> ('BM_Seal', {'D': 256, ...})."""
    parts = name.split("/")
    args = {}
    for p in parts[1:]:
        if ":" in p:
            k, v = p.split(":", 1)
            try:
                args[k] = int(v)
            except ValueError:
                args[k] = v
    return parts[0], args


def pick_runs(benchmarks):
    """One entry per run_name: the median aggregate if present, else the last iteration run."""
    chosen, order = {}, []
    for b in benchmarks:
        key = b.get("run_name", b["name"])
        if key not in chosen:
            order.append(key)
        if b.get("run_type") == "aggregate":
            if b.get("aggregate_name") == "median":
                chosen[key] = b
            continue
        prev = chosen.get(key)
        if prev is None or prev.get("run_type") != "aggregate":
            chosen[key] = b
    return [chosen[k] for k in order if k in chosen]


def fmt(x, digits=3):
    if x is None:
        return "-"
    if x == 0:
        return "0"
    mag = abs(x)
    if mag >= 100:
        return f"{x:.0f}"
    if mag >= 10:
        return f"{x:.1f}"
    if mag >= 1:
        return f"{x:.2f}"
    return f"{x:.{digits}f}"


def ratio(ref, ours, label):
    if ours is None or ours <= 0:
        return "-"
    return f"{ref / ours:.2f}x vs {label}"


def reference_path_ms(runs):
    """ms per record of the reference seal path in this run, keyed by (D, bk, bv)."""
    out = {}
    for b in runs:
        family, a = parse_name(b.get("run_name", b["name"]))
        if family == "BM_Seal" and a.get("path") == 0 and not b.get("error_occurred"):
            out[(a.get("D"), a.get("bk"), a.get("bv"))] = b.get("ms_per_record")
    return out


def row_for(b, own_ref):
    family, a = parse_name(b.get("run_name", b["name"]))
    bits = f"{a.get('bk', '?')}/{a.get('bv', '?')}"
    d = a.get("D", "?")
    err = b.get("error_message") if b.get("error_occurred") else None

    if family == "BM_Seal":
        path = SEAL_PATHS.get(a.get("path"), str(a.get("path")))
        ms = b.get("ms_per_record")
        ref = ratio(REF_SEAL_MS_44, ms, "19.8 ms") if (d == 256 and bits == "4/4") else "-"
        own = own_ref.get((d, a.get("bk"), a.get("bv")))
        own_col = "1.00x (itself)" if a.get("path") == 0 else (f"{own / ms:.2f}x" if own and ms else "-")
        return [family, f"{bits} D={d}", path, "1", f"{fmt(ms)} ms/record", ref, own_col], err
    if family == "BM_SealBatchThreads":
        threads = b.get("threads")
        nt = a.get("n_threads")
        tcol = (str(int(threads)) if threads is not None else "?") + (" (all)" if nt == 0 else "")
        ms = b.get("ms_per_record")
        extra = ""
        if b.get("core_ms_per_record") is not None:
            extra = f" (x threads: {fmt(b['core_ms_per_record'])}, process CPU: {fmt(b.get('cpu_ms_per_record'))})"
        ref = ratio(REF_SEAL_MS_44, ms, "19.8 ms") if (d == 256 and bits == "4/4") else "-"
        own = own_ref.get((d, a.get("bk"), a.get("bv")))
        own_col = f"{own / ms:.2f}x" if own and ms else "-"
        return [family, f"{bits} D={d}, 64 records", "fast", tcol, f"{fmt(ms)} ms/record wall{extra}", ref,
                own_col], err
    if family == "BM_Tq6StagingRow":
        t = STAGING.get(a.get("type"), str(a.get("type")))
        ns = b.get("ns_per_row")
        us = ns / 1e3 if ns is not None else None
        return [family, f"{t} D={d}", "-", "1", f"{fmt(us)} us/row", "-", "-"], err
    if family == "BM_DecodeKVRow":
        ns = b.get("ns_per_kv_row")
        us = ns / 1e3 if ns is not None else None
        ref = ratio(REF_DECODE_US, us, "7.6 us") if d == 256 else "- (ref is D=256)"
        return [family, f"scalar {bits} D={d}", "-", "1", f"{fmt(us)} us/K+V row", ref, "-"], err
    if family == "BM_AttentionRef":
        us = b.get("us_per_query")
        ns = b.get("ns_per_position")
        return [family, f"4/4 D=128 N={a.get('N', '?')}", "-", "1",
                f"{fmt(us)} us/query ({fmt(ns)} ns/position)", "-", "-"], err
    # Anything else: the benchmark's own time column.
    unit = b.get("time_unit", "ns")
    return [family, b.get("label", ""), "-", str(b.get("threads", 1)), f"{fmt(b.get('cpu_time'))} {unit} CPU", "-",
            "-"], err


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("json", help="Google Benchmark JSON output (--benchmark_out_format=json); '-' for stdin")
    opts = ap.parse_args()
    with (sys.stdin if opts.json == "-" else open(opts.json, encoding="utf-8")) as f:
        data = json.load(f)

    ctx = data.get("context", {})
    caches = ", ".join(f"L{c.get('level')} {c.get('type', '')[:1]} {c.get('size', 0) // 1024} KiB"
                       for c in ctx.get("caches", []))
    print(f"Host: {ctx.get('host_name', '?')}, {ctx.get('num_cpus', '?')} CPUs at "
          f"{ctx.get('mhz_per_cpu', '?')} MHz ({caches}); run {ctx.get('date', '?')}; "
          f"load avg {', '.join(fmt(x) for x in ctx.get('load_avg', [])) or '?'}")
    print()
    header = ["benchmark", "config", "path", "threads", "time", "vs reference codec", "vs reference path, this run"]
    print("| " + " | ".join(header) + " |")
    print("|" + "|".join("---" for _ in header) + "|")
    runs = pick_runs(data.get("benchmarks", []))
    own_ref = reference_path_ms(runs)
    for b in runs:
        cells, err = row_for(b, own_ref)
        if err:
            cells[4] = f"skipped: {err}"
            cells[5] = cells[6] = "-"
        print("| " + " | ".join(str(c).replace("|", "\\|") for c in cells) + " |")
    print()
    print("Times: per-item counters; single-thread rows are CPU time of the benchmark thread, "
          "batch rows wall time. 'vs reference codec': its published figure / ours (19.8 ms per "
          "4/4 record seal, 7.6 us per K+V row decode; one thread, Ryzen 7 5800X3D, -O2, D=256; "
          "sj-kvarn-codec README), so it mixes code and hardware. 'vs reference path': this "
          "library's SealPath::reference, same config, same run, same machine.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
