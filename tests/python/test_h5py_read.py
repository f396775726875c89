#!/usr/bin/env python3
"""h5py reads the files sjkv writes (docs/FORMAT.md section 4).

Usage: test_h5py_read.py DIR, where DIR holds capture.h5, snapshot.h5 and expect.json from
sjkv_write_fixtures. Writes nothing. Exits 77 (ctest's skip code) when h5py or hdf5plugin
cannot be imported. The zstd filter comes from hdf5plugin when it has one (pip's does), or
from HDF5_PLUGIN_PATH (ctest points it at sjkv's own plugin: Debian's python3-hdf5plugin
ships no zstd).
"""
import json
import os
import sys

SKIP = 77
ZSTD = 32015


def main():
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    try:
        import numpy as np
        import h5py
    except ImportError as e:
        print(f"SKIP: cannot import h5py/numpy ({e}); install python3-h5py")
        return SKIP
    try:
        import hdf5plugin  # noqa: F401  (registers its filters, zstd among them when built with it)
    except ImportError as e:
        print(f"SKIP: cannot import hdf5plugin ({e}); install python3-hdf5plugin")
        return SKIP

    d = sys.argv[1]
    with open(os.path.join(d, "expect.json")) as fh:
        exp = json.load(fh)
    bad = []

    def check(ok, what):
        if not ok:
            bad.append(what)

    def bits(x):
        return int(np.asarray(x, dtype=np.float16).view(np.uint16))

    def sum32(a):
        return int(np.asarray(a).astype(np.uint64).sum() % (1 << 32))

    try:
        check_files(np, h5py, d, exp, check, bits, sum32)
    except OSError as e:
        print(f"FAIL: h5py could not read the files: {e}")
        if "plugin" in str(e) or "filter" in str(e) or "directory" in str(e):
            print(f"  the zstd filter {ZSTD} is not available: use pip's hdf5plugin, or set "
                  "HDF5_PLUGIN_PATH=<build>/snapshot/hdf5-plugins (ctest does)")
        return 1
    if bad:
        for b in bad:
            print("FAIL:", b)
        return 1
    print(f"ok: h5py {h5py.__version__} (HDF5 {h5py.version.hdf5_version}) read capture and snapshot")
    return 0


def text(v):
    """sjkv stores fixed-length strings; h5py returns them as bytes."""
    return v.decode("utf-8") if isinstance(v, bytes) else v


def check_files(np, h5py, d, exp, check, bits, sum32):
    c = exp["capture"]
    with h5py.File(os.path.join(d, c["file"]), "r") as f:
        a = {k: text(v) for k, v in f.attrs.items()}
        check(a["sjkv_format"] == "sjkv-capture", f"sjkv_format = {a['sjkv_format']!r}")
        check(int(a["version"]) == 1, "version")
        check(a["model"] == c["model"], f"model = {a['model']!r}")
        for key in ("head_dim", "kv_heads", "tokens", "rotated", "rotation_block"):
            check(int(a[key]) == c[key], f"{key} = {a[key]} (expected {c[key]})")
        check(list(a["layer_ids"]) == c["layer_ids"], f"layer_ids = {list(a['layer_ids'])}")
        shape = (c["tokens"], c["kv_heads"], c["head_dim"])
        for lid in c["layer_ids"]:
            for side in ("k", "v"):
                ds = f[f"layers/{lid}/{side}"]
                check(ds.shape == shape, f"layers/{lid}/{side} shape {ds.shape}")
                check(ds.dtype == np.float16, f"layers/{lid}/{side} dtype {ds.dtype}")
                check(ds.chunks is not None, f"layers/{lid}/{side} is not chunked")
                zstd = ds.id.get_create_plist().get_filter_by_id(ZSTD)
                check(zstd is not None and tuple(zstd[1]) == (3,), f"layers/{lid}/{side} zstd filter {zstd}")
        s = c["k_sample"]
        check(bits(f[f"layers/{s['layer']}/k"][tuple(s["index"])]) == s["bits"], "K sample")
        s = c["v_sample"]
        check(bits(f[f"layers/{s['layer']}/v"][tuple(s["index"])]) == s["bits"], "V sample")
        check(float(f["layers/3/k"][5, 1, 7]) == 65504.0, "K sample as a float16 value")
        s = c["k_sum"]
        check(sum32(f[f"layers/{s['layer']}/k"][...].view(np.uint16)) == s["sum32"], "K checksum")
        s = c["v_sum"]
        check(sum32(f[f"layers/{s['layer']}/v"][...].view(np.uint16)) == s["sum32"], "V checksum")
        check(f["token_ids"].dtype == np.int32, "token_ids dtype")
        check(sum32(f["token_ids"][...].astype(np.uint32)) == c["token_ids_sum"], "token_ids checksum")

    sn = exp["snapshot"]
    with h5py.File(os.path.join(d, sn["file"]), "r") as f:
        a = {k: text(v) for k, v in f.attrs.items()}
        check(a["sjkv_format"] == "sjkv-snapshot", f"sjkv_format = {a['sjkv_format']!r}")
        check(int(a["version"]) == 1 and int(a["record_format_version"]) == 1, "versions")
        check(a["config_name"] == sn["config_name"], f"config_name = {a['config_name']!r}")
        for key in ("B", "B_prev", "N", "record_bytes", "row_bytes"):
            check(int(a[key]) == sn[key], f"{key} = {a[key]} (expected {sn[key]})")
        check(a["body"] == "scalar" and a["staging"] == "tq6_0" and a["sink_type"] == "f16", "enums")
        check(int(a["codebook_id"]) == 0, "codebook_id")
        check(list(a["layer_ids"]) == sn["layer_ids"], "layer_ids")
        for name, shp in sn["shapes"].items():
            ds = f[f"layers/0/{name}"]
            check(list(ds.shape) == shp, f"layers/0/{name} shape {ds.shape} (expected {shp})")
        check(f["layers/0/body"].dtype == np.uint8, "body dtype")
        s = sn["sink_k_sample"]
        check(bits(f[f"layers/{s['layer']}/sink_k"][tuple(s["index"])]) == s["bits"], "sink K sample")
        s = sn["body_sum"]
        check(sum32(f[f"layers/{s['layer']}/body"][...]) == s["sum32"], "body checksum")
        s = sn["ring_v_sum"]
        check(sum32(f[f"layers/{s['layer']}/ring_v"][...]) == s["sum32"], "ring_v checksum")
        check("codebooks" not in f, "a scalar snapshot has no /codebooks")


if __name__ == "__main__":
    sys.exit(main())
