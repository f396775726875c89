#!/usr/bin/env python3
"""Helpers for test_sjkv_encode.sh: writes input files and checks the tool's output.

Only the standard library is used (no numpy, no h5py). Check commands print one line per
check, "PASS <name>" or "FAIL <name>: <detail>", which the shell script counts.

  kvd OUT [--dim D] [--heads H] [--tokens T] [--group G] [--seed S]
        a .kvd tile dump (sjkv/io/kvd.h): blocks of G tokens, heads interleaved per group
  bad-kvd DIR         a set of malformed .kvd files; prints "<file>\t<defect fragment>" lines
  llama OUT [--k-type T]
        a llama.cpp sequence state ('ggsq' v3): 3 layers, 2 heads x 64, 300 shuffled cells,
        K f16 (or ggml type T), V f32 transposed (v_trans = 1)
  policy SINK TAIL TAIL_MAX G UBATCH N
        the journal policy state (docs/SPEC.md 9.5) after encoding N positions: "B B_prev draining"
  check-inspect JSON key=value...     the fields of `inspect --json` against the configuration
  check-against JSON key=value...     error statistics of `inspect --against --json`
  check-sink-dump DUMP KVD SINK       a sink dump equals the fp16 rows of the .kvd input
  check-dump-size JSON REGION FILE    a region dump holds bytes_per_layer_head x kv_heads bytes
  check-plan-json JSON                `plan --json` parses and holds the note's figures
  flip-ohdr IN OUT    IN with one byte of its first HDF5 object header ("OHDR": the root group
                      of a file sjkv wrote) flipped, so that its checksum fails
"""

import json
import math
import os
import random
import struct
import sys

KVD_MAGIC = 0x31445643


# ---- writers -------------------------------------------------------------------------------

def kvd_values(seed, count):
    # Standard Gaussian values: .kvd tiles are seal inputs, already in the rotated basis,
    # where the channels look Gaussian (outliers are spread by the rotation).
    r = random.Random(seed)
    return [r.gauss(0.0, 1.0) for _ in range(count)]


def kvd_block(D, G, head, name, values, magic=KVD_MAGIC):
    return (struct.pack("<iiii", magic, D, G, head) + name.ljust(64, b"\0")[:64] +
            struct.pack("<%de" % len(values), *values))


def write_kvd(path, D=128, H=2, T=640, G=128, seed=1, name=b"cli-test-model"):
    with open(path, "wb") as f:
        blk = 0
        for t0 in range(0, T, G):
            g = min(G, T - t0)
            for h in range(H):
                f.write(kvd_block(D, g, h, name, kvd_values(seed * 100003 + blk, 2 * g * D)))
                blk += 1


def read_kvd_rows(path):
    """{head: (K rows, V rows)} with rows as lists of fp16 byte strings of one token."""
    data = open(path, "rb").read()
    off = 0
    heads = {}
    while off < len(data):
        magic, D, G, head = struct.unpack_from("<iiii", data, off)
        assert magic == KVD_MAGIC
        off += 80
        k = [data[off + g * 2 * D: off + (g + 1) * 2 * D] for g in range(G)]
        off += G * D * 2
        v = [data[off + g * 2 * D: off + (g + 1) * 2 * D] for g in range(G)]
        off += G * D * 2
        hk, hv = heads.setdefault(head, ([], []))
        hk.extend(k)
        hv.extend(v)
    return heads


def bad_kvd(outdir):
    os.makedirs(outdir, exist_ok=True)
    D, G = 64, 16
    good = lambda head, seed=0: kvd_block(D, G, head, b"m", kvd_values(seed, 2 * G * D))
    nan = bytearray(good(0))
    struct.pack_into("<H", nan, 80 + 2 * G * D + 2 * (3 * D + 5), 0x7e00)  # V token 3 channel 5
    inf = bytearray(good(1))
    struct.pack_into("<H", inf, 80 + 2 * (2 * D + 9), 0xfc00)  # K token 2 channel 9: -inf
    cases = [
        ("bad-magic-block1.kvd", good(0) + kvd_block(D, G, 1, b"m", kvd_values(1, 2 * G * D), magic=0x31445644),
         "block 1 (offset 4176): bad magic 0x31445644"),
        ("d-not-pow2.kvd", kvd_block(96, G, 0, b"m", kvd_values(2, 2 * G * 96)), "D = 96 is not a power of two"),
        ("d-differs.kvd", good(0) + kvd_block(128, G, 1, b"m", kvd_values(3, 2 * G * 128)),
         "D = 128 differs from D = 64 of block 0"),
        ("g-not-16.kvd", kvd_block(D, 24, 0, b"m", kvd_values(4, 2 * 24 * D)),
         "G = 24 is not a positive multiple of 16"),
        ("head-negative.kvd", kvd_block(D, G, -1, b"m", kvd_values(5, 2 * G * D)), "head = -1 is outside [0, 4096)"),
        ("head-missing.kvd", good(0) + good(2), "head 1 is missing"),
        ("unequal-heads.kvd", good(0) + good(1) + good(0, 7), "unequal head token counts"),
        ("truncated-tile.kvd", (good(0) + good(1))[:-100], "truncated: K and V tiles need"),
        ("truncated-header.kvd", good(0) + good(1)[:40], "truncated: the header needs 80 bytes"),
        ("nan-in-v.kvd", bytes(nan), "V token 3 channel 5 is NaN"),
        ("inf-in-k.kvd", good(0) + bytes(inf), "K token 2 channel 9 is infinite"),
        ("header-only.kvd", struct.pack("<i", KVD_MAGIC), "truncated: the header needs 80 bytes"),
        ("not-kvd.bin", b"\x7fELF" + bytes(60), "unrecognised first bytes"),
        ("empty.kvd", b"", "unrecognised first bytes"),
        # well formed, but a head size the codec does not implement (64 to 512)
        ("d32-unsupported.kvd", kvd_block(32, G, 0, b"m", kvd_values(8, 2 * G * 32)), "unsupported"),
    ]
    for name, data, frag in cases:
        with open(os.path.join(outdir, name), "wb") as f:
            f.write(data)
        print("%s\t%s" % (name, frag))


def write_llama(path, k_type=1):
    """llama.cpp 'ggsq' version 3 (layout: snapshot/src/llama_state.cpp)."""
    n_layer, n_embd, cells = 3, 2 * 64, 300
    r = random.Random(5)
    order = list(range(cells))
    r.shuffle(order)
    b = bytearray()
    b += struct.pack("<III", 0x67677371, 3, cells)
    b += struct.pack("<%di" % cells, *[1000 + p for p in range(cells)])
    b += struct.pack("<II", 1, cells)  # one stream
    for p in order:
        b += struct.pack("<iIi", p, 1, 0)
    b += struct.pack("<II", 1, n_layer)  # v_trans = 1
    val = lambda l, kv, p, c: math.sin(0.37 * p + 0.11 * c + l + 0.5 * kv) * (1.0 + (c % 7) * 0.25)
    for l in range(n_layer):
        if k_type == 1:
            b += struct.pack("<iQ", 1, 2 * n_embd)
            for p in order:
                b += struct.pack("<%de" % n_embd, *[val(l, 0, p, c) for c in range(n_embd)])
        else:  # a quantized type: the reader must refuse it before reading the rows
            row = n_embd // 32 * 34
            b += struct.pack("<iQ", k_type, row) + bytes(row * cells)
    for l in range(n_layer):
        b += struct.pack("<iII", 0, 4, n_embd)
        for c in range(n_embd):
            b += struct.pack("<%df" % cells, *[val(l, 1, p, c) for p in order])
    with open(path, "wb") as f:
        f.write(b)


# ---- policy --------------------------------------------------------------------------------

def policy(sink, tail, tail_max, G, ub, N):
    st = {"B": sink, "B_prev": sink, "draining": 0}

    def begin(pos0):
        pend = st["B"]
        due = tail_max == 0 or st["draining"] != 0 or (pos0 > st["B"] and pos0 - st["B"] >= tail_max)
        st["draining"] = 0
        if due and pos0 > sink + tail:
            pend = max(sink + G * ((pos0 - tail - sink) // G), st["B"])
        st["B_prev"], st["B"] = st["B"], pend

    for p0 in range(0, N, ub):
        begin(p0)
    begin(N)  # the step an engine takes before its next ubatch
    return st["B"], st["B_prev"], st["draining"]


# ---- checks --------------------------------------------------------------------------------

class Checks:
    def __init__(self, prefix):
        self.prefix = prefix

    def __call__(self, name, cond, detail=""):
        if cond:
            print("PASS %s: %s" % (self.prefix, name))
        else:
            print("FAIL %s: %s (%s)" % (self.prefix, name, detail))

    def close(self, name, got, want, tol=1e-9):
        ok = isinstance(got, (int, float)) and abs(got - want) <= tol * max(1.0, abs(want))
        self(name, ok, "got %r, want %r" % (got, want))

    def eq(self, name, got, want):
        self(name, got == want, "got %r, want %r" % (got, want))


def kv_args(args):
    out = {}
    for a in args:
        k, _, v = a.partition("=")
        out[k] = v
    return out


def load_json(path, chk):
    try:
        with open(path) as f:
            return json.load(f)
    except Exception as e:  # noqa: BLE001 - any parse failure is the finding
        chk("parses as JSON", False, e)
        return None


def row_bytes(staging, D):
    return {"tq6_0": 98 * D // 128, "f16": 2 * D, "q8_0": 34 * D // 32}[staging]


def check_inspect(path, args):
    a = kv_args(args)
    chk = Checks(a.get("name", path))
    j = load_json(path, chk)
    if j is None:
        return
    chk("parses as JSON", True)
    bk, bv = int(a["bits_k"]), int(a["bits_v"])
    D, H, L = int(a["head_dim"]), int(a["kv_heads"]), int(a["layers"])
    sink, tail, tail_max = int(a["sink"]), int(a["tail"]), int(a["tail_max"])
    ub, N, G = int(a["ubatch"]), int(a["N"]), int(a.get("group", 128))
    staging, sink_type = a["staging"], a.get("sink_type", "f16")
    for k, want in (("bits_k", bk), ("bits_v", bv), ("head_dim", D), ("kv_heads", H), ("layers", L),
                    ("sink", sink), ("tail", tail), ("tail_max", tail_max), ("n_ubatch", ub),
                    ("group", G), ("staging", staging), ("sink_type", sink_type), ("body", a.get("body", "scalar")),
                    ("format_version", 1)):
        chk.eq(k, j.get(k), want)
    cid = j.get("codebook_id")
    if a.get("body", "scalar") == "scalar":
        chk.eq("codebook_id", cid, "0" * 16)
    else:  # trellis: the FNV-1a-64 identity of the tables the records were sealed with
        chk("codebook_id is 16 hex digits, not 0", isinstance(cid, str) and len(cid) == 16 and
            all(c in "0123456789abcdef" for c in cid) and cid != "0" * 16, cid)
    B, B_prev, draining = policy(sink, tail, tail_max, G, ub, N)
    pol = j.get("policy", {})
    chk.eq("policy N", pol.get("N"), N)
    chk.eq("policy B", pol.get("B"), B)
    chk.eq("policy B_prev", pol.get("B_prev"), B_prev)
    chk.eq("policy draining", pol.get("draining"), draining)

    n_sink = min(N, sink)
    n_groups = (B - sink) // G
    ring_from = max(B, sink)
    n_ring = N - ring_from if N > ring_from else 0
    rec = G * D * (bk + bv) // 8 + 6 * D + 6 * G
    rb = row_bytes(staging, D)
    sink_row = 2 * D if sink_type == "f16" else rb
    want = {
        "sink": (0, n_sink, n_sink * 2 * sink_row, n_sink * 2 * D),
        "body": (sink, B, n_groups * rec, n_groups * G * 2 * D),
        "ring": (ring_from, N, n_ring * 2 * rb, n_ring * 2 * D),
    }
    regs = j.get("regions", {})
    total_bytes = total_vals = 0
    for name, (f, t, nbytes, nvals) in want.items():
        r = regs.get(name, {})
        chk.eq("regions.%s.from" % name, r.get("from"), f)
        chk.eq("regions.%s.to" % name, r.get("to"), t)
        chk.eq("regions.%s.bytes_per_layer_head" % name, r.get("bytes_per_layer_head"), nbytes)
        chk.eq("regions.%s.bytes_total" % name, r.get("bytes_total"), nbytes * L * H)
        if nvals:
            chk.close("regions.%s.bits_per_value" % name, r.get("bits_per_value"), 8.0 * nbytes / nvals, 1e-7)
        total_bytes += nbytes
        total_vals += nvals
    if nvals and "body" in regs and n_groups:
        chk.close("body bits_per_value by the record formula", regs["body"].get("bits_per_value"),
                  (bk + bv) / 2 + 8.0 * (6 * D + 6 * G) / (2 * G * D), 1e-7)
    bpv = j.get("bits_per_value", {})
    chk.close("bits_per_value.occupied", bpv.get("occupied"), 8.0 * total_bytes / total_vals, 1e-7)
    cap = 128 * ((max(tail, tail_max) + G + 2 * ub + 127) // 128)
    chk.eq("bits_per_value.ring_capacity", bpv.get("ring_capacity"), cap)
    alloc = bpv.get("allocated")
    chk("bits_per_value.allocated >= occupied", isinstance(alloc, (int, float)) and
        alloc + 1e-9 >= bpv.get("occupied", 0), alloc)
    if "expect_model" in a:
        chk.eq("model", j.get("model"), a["expect_model"])


def check_against(path, args):
    a = kv_args(args)
    chk = Checks(a.get("name", path))
    j = load_json(path, chk)
    if j is None:
        return
    rows = j.get("against")
    chk("has an 'against' list", isinstance(rows, list) and len(rows) == int(a.get("layers", 1)), rows)
    if not isinstance(rows, list):
        return
    for row in rows:
        lid = row.get("layer")
        for reg in ("sink", "body", "ring", "all"):
            s = row.get(reg, {})
            if "exact" in a and reg in a["exact"].split(",") and s.get("values"):
                chk.eq("layer %s %s max_abs" % (lid, reg), s.get("max_abs"), 0)
                chk.eq("layer %s %s mse" % (lid, reg), s.get("mse"), 0)
            key = "min_snr_" + reg
            if key in a and s.get("values"):
                snr = s.get("snr_db")
                chk("layer %s %s snr_db >= %s" % (lid, reg, a[key]),
                    snr is None or (isinstance(snr, (int, float)) and snr >= float(a[key])), snr)
            if not s.get("values"):
                chk("layer %s %s: an empty region reports null statistics" % (lid, reg),
                    all(s.get(k) is None for k in ("mse", "snr_db", "max_abs", "cosine")), s)
            if s.get("values"):
                cos = s.get("cosine")
                chk("layer %s %s cosine in (0.5, 1]" % (lid, reg),
                    isinstance(cos, (int, float)) and 0.5 < cos <= 1.0 + 1e-9, cos)


def check_sink_dump(dump, kvd, sink):
    chk = Checks("sink dump of " + os.path.basename(dump))
    heads = read_kvd_rows(kvd)
    want = bytearray()
    T = len(heads[0][0])
    for t in range(min(int(sink), T)):
        for h in range(len(heads)):
            want += heads[h][0][t] + heads[h][1][t]
    got = open(dump, "rb").read()
    chk.eq("size", len(got), len(want))
    first = next((i for i in range(min(len(got), len(want))) if got[i] != want[i]), None)
    chk("bytes equal the input's fp16 K and V rows", got == bytes(want), "first difference at byte %s" % first)


def check_dump_size(path, region, dump):
    chk = Checks("dump %s" % os.path.basename(dump))
    j = load_json(path, chk)
    if j is None:
        return
    want = j["regions"][region]["bytes_per_layer_head"] * j["kv_heads"]
    chk.eq("%s dump size = bytes_per_layer_head x kv_heads" % region, os.path.getsize(dump), want)


def check_plan_json(path):
    chk = Checks("plan --json")
    j = load_json(path, chk)
    if j is None:
        return
    chk("parses as JSON", True)
    opts = {o.get("format"): o for o in j.get("options", [])}
    chk("lists f16, q8_0, sjkv 4/4", all(k in opts for k in ("f16", "q8_0", "sjkv 4/4")), list(opts))
    want_gib = {"f16": 6.75, "q8_0": 3.5859375, "sjkv 4/4": 1.990}
    for fmt, gib in want_gib.items():
        ctx = opts.get(fmt, {}).get("contexts", [{}])
        c0 = next((c for c in ctx if c.get("n_ctx") == 110592), {})
        chk.close("%s GiB at 110592" % fmt, round(c0.get("gib", -1), 3), round(gib, 3), 0)
    f16 = opts.get("f16", {})
    chk.eq("f16 bytes_per_token", f16.get("bytes_per_token"), 65536)
    c0 = next((c for c in f16.get("contexts", []) if c.get("n_ctx") == 110592), {})
    chk.eq("f16 bytes at 110592", c0.get("bytes"), 65536 * 110592)
    for o in j.get("options", []):
        if "max_context" in o:
            chk("%s max_context is a non-negative integer" % o.get("format"),
                isinstance(o["max_context"], int) and o["max_context"] >= 0, o["max_context"])


def main(argv):
    cmd, rest = argv[1], argv[2:]
    if cmd == "kvd":
        opts = {"--dim": 128, "--heads": 2, "--tokens": 640, "--group": 128, "--seed": 1}
        out = rest[0]
        for i in range(1, len(rest), 2):
            opts[rest[i]] = int(rest[i + 1])
        write_kvd(out, opts["--dim"], opts["--heads"], opts["--tokens"], opts["--group"], opts["--seed"])
    elif cmd == "bad-kvd":
        bad_kvd(rest[0])
    elif cmd == "llama":
        write_llama(rest[0], int(rest[2]) if len(rest) > 2 and rest[1] == "--k-type" else 1)
    elif cmd == "policy":
        print("%d %d %d" % policy(*[int(x) for x in rest]))
    elif cmd == "check-inspect":
        check_inspect(rest[0], rest[1:])
    elif cmd == "check-against":
        check_against(rest[0], rest[1:])
    elif cmd == "check-sink-dump":
        check_sink_dump(*rest)
    elif cmd == "check-dump-size":
        check_dump_size(*rest)
    elif cmd == "flip-ohdr":
        b = bytearray(open(rest[0], "rb").read())
        i = b.find(b"OHDR")
        if i < 0:
            sys.exit("no OHDR in " + rest[0])
        b[i + 20] ^= 0x55
        open(rest[1], "wb").write(b)
    elif cmd == "check-plan-json":
        check_plan_json(rest[0])
    else:
        sys.exit("unknown command " + cmd)


if __name__ == "__main__":
    main(sys.argv)
