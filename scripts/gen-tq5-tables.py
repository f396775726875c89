#!/usr/bin/env python3
"""Writes codec/include/sjkv/tq5_tables.h: the 32 Lloyd-Max levels for N(0, 1/128) of the replay
arm tq5_0 and their 31 decision thresholds.

    python3 scripts/gen-tq5-tables.py > codec/include/sjkv/tq5_tables.h

Method: Lloyd-Max iteration on the Gaussian density in double precision. With levels
symmetric about 0, only the positive half is iterated: thresholds are the midpoints of
neighbouring levels (0 and +inf at the ends), and each level is replaced by the mean of
N(0, 1) over its cell, (phi(a) - phi(b)) / (Q(a) - Q(b)) with Q(x) = erfc(x / sqrt 2) / 2
(no cancellation in the tail), until no level moves by more than 1e-14 in a step (the
iteration contracts by about 0.996 per step at 32 levels, 0.999 at 64, so the levels are
then within about 1e-11 of the fixed point, far below binary32's resolution; smaller steps
are lost in double rounding at 64 levels). The levels are then scaled by sigma = 1/sqrt(128).

Check (printed to stderr on every run): the same routine at 64 levels must reproduce the
published tq6_0 centroids and midpoints (docs/SPEC.md §4.2, Appendix A; six decimals) to the printed
precision, which validates both the method and the scale.
"""
import math
import struct
import sys

TQ6_CENTROIDS_POS = [  # the positive half of the published tq6_0 table (docs/SPEC.md §4.2, Appendix A)
    0.002953, 0.008863, 0.014787, 0.020733, 0.026710, 0.032729, 0.038798, 0.044929,
    0.051133, 0.057422, 0.063809, 0.070310, 0.076940, 0.083717, 0.090663, 0.097801,
    0.105157, 0.112765, 0.120663, 0.128895, 0.137517, 0.146600, 0.156230, 0.166522,
    0.177626, 0.189753, 0.203203, 0.218435, 0.236198, 0.257865, 0.286417, 0.330935]
TQ6_MIDPOINTS_POS = [  # and of its midpoints, T[32..62]
    0.005908, 0.011825, 0.017760, 0.023722, 0.029719, 0.035763, 0.041864, 0.048031,
    0.054277, 0.060616, 0.067060, 0.073625, 0.080329, 0.087190, 0.094232, 0.101479,
    0.108961, 0.116714, 0.124779, 0.133206, 0.142059, 0.151415, 0.161376, 0.172074,
    0.183690, 0.196478, 0.210819, 0.227316, 0.247031, 0.272141, 0.308676]


def phi(x):
    return math.exp(-0.5 * x * x) / math.sqrt(2.0 * math.pi)


def upper_tail(x):
    return 0.5 * math.erfc(x / math.sqrt(2.0))


def lloyd_max(n):
    """Positive half of the n-level Lloyd-Max quantizer of N(0, 1): levels, thresholds."""
    half = n // 2
    c = [(k + 0.5) * 3.0 / half for k in range(half)]
    for _ in range(1000000):
        t = [0.0] + [0.5 * (c[k] + c[k + 1]) for k in range(half - 1)] + [math.inf]
        new = []
        for k in range(half):
            a, b = t[k], t[k + 1]
            pb = 0.0 if math.isinf(b) else phi(b)
            qb = 0.0 if math.isinf(b) else upper_tail(b)
            new.append((phi(a) - pb) / (upper_tail(a) - qb))
        delta = max(abs(x - y) for x, y in zip(new, c))
        c = new
        if delta < 1e-14:
            break
    else:
        sys.exit("Lloyd-Max did not converge")
    return c, [0.5 * (c[k] + c[k + 1]) for k in range(half - 1)]


def f32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]


def f32_bits(x):
    return struct.unpack("<I", struct.pack("<f", x))[0]


def check_tq6():
    sigma = 1.0 / math.sqrt(128.0)
    c, t = lloyd_max(64)
    for name, ours, pub in (("centroids", c, TQ6_CENTROIDS_POS), ("midpoints", t, TQ6_MIDPOINTS_POS)):
        worst_abs = max(abs(x * sigma - p) for x, p in zip(ours, pub))
        worst_rel = max(abs(x * sigma - p) / p for x, p in zip(ours, pub))
        same = all(f"{x * sigma:.6f}" == f"{p:.6f}" for x, p in zip(ours, pub))
        print(f"tq6_0 check: 64-level Lloyd-Max vs the published {name}: max abs diff {worst_abs:.2e}, "
              f"max rel diff {worst_rel:.2e}, all {len(pub)} positive entries equal at 6 decimals: {same}",
              file=sys.stderr)
        if not same:
            sys.exit(f"64-level Lloyd-Max does not reproduce tq6_0's {name}")


def main():
    check_tq6()
    sigma = 1.0 / math.sqrt(128.0)
    c, t = lloyd_max(32)
    cent = [-x * sigma for x in reversed(c)] + [x * sigma for x in c]
    mids = [-x * sigma for x in reversed(t)] + [0.0] + [x * sigma for x in t]
    assert len(cent) == 32 and len(mids) == 31
    cf, mf = [f32(x) for x in cent], [f32(x) for x in mids]
    for k in range(31):
        assert cf[k] < mf[k] < cf[k + 1], k

    def rows(vals):
        lines, line = [], []
        for v in vals:
            line.append(f"0x{f32_bits(v):08x}u")
            if len(line) == 6:
                lines.append("    " + ", ".join(line) + ",")
                line = []
        if line:
            lines.append("    " + ", ".join(line) + ",")
        return "\n".join(lines)

    print(f"""\
// tq5_0 tables (a cache arm's row format; docs/REPLAY.md): the 32 Lloyd-Max levels for N(0, 1/128) and the
// 31 decision thresholds, each the midpoint of its two neighbouring levels, as binary32 bit
// patterns. Computed in double by scripts/gen-tq5-tables.py (Lloyd-Max iteration on the
// Gaussian density to a fixed point, levels scaled by 1/sqrt(128)), rounded to binary32 once;
// the same routine at 64 levels reproduces tq6_0's published centroids (docs/SPEC.md 4.2).
// Generated file: edit the script, not this header.
#pragma once

#include <cstdint>

namespace sjkv {{
namespace blockfmt {{

// Levels, ascending: {", ".join(f"{x:.6f}" for x in cent[:4])}, ..., {", ".join(f"{x:.6f}" for x in cent[-2:])}.
static constexpr uint32_t kTq5CentroidBits[32] = {{
{rows(cf)}
}};

// Thresholds, ascending; T[15] = 0. Code k covers [T[k-1], T[k]).
static constexpr uint32_t kTq5MidpointBits[31] = {{
{rows(mf)}
}};

}}  // namespace blockfmt
}}  // namespace sjkv""")


if __name__ == "__main__":
    main()
