"""sjkv: SJ-KVaRN compressed KV caches from Python.

The codec, the snapshot encoder and sjkv's files, numpy in and out. Every call runs sjkv's
C++ libraries (the same bytes as the command-line tools); a bad file raises sjkv.FileError
with the one-line message the tools print, a bad argument ValueError.

    import numpy as np, sjkv
    k = np.random.default_rng(0).standard_normal((1, 700, 2, 128)).astype(np.float16)
    snap = sjkv.encode(k, k, "sj:3/2t", n_ubatch=64)   # as an engine holds it at 700 tokens
    k2, v2 = snap.decode()                              # float16 [layers, tokens, heads, dim]
    snap.write("cache.h5")
"""
import os as _os

# The coarse OpenMP loops (encoding, training) wait passively, as in the tools (sjkv/parallel.h):
# GNU OpenMP reads this once, when the module's library loads it, so it is set for that load
# alone and then taken back (other OpenMP runtimes the process loads later, and child
# processes, keep their defaults); a choice of the user's (OMP_WAIT_POLICY, GOMP_SPINCOUNT)
# stands. The replay's fine-grained loops run on sjkv's own pool whatever this says.
_passive = "OMP_WAIT_POLICY" not in _os.environ and "GOMP_SPINCOUNT" not in _os.environ
if _passive:
    _os.environ["OMP_WAIT_POLICY"] = "PASSIVE"
try:
    from ._sjkv import (  # noqa: E402,F401
        Arm,
        ArmLayer,
        Body,
        Cache,
        Config,
        FileError,
        Snapshot,
        compare,
        encode,
        load_capture,
        read_capture,
        read_codebook,
        read_results,
        read_snapshot,
        read_snapshot_any,
        read_trajectory,
        table_sets,
        train,
        trajectory_from_logits,
        write_capture,
        write_codebook,
        write_state_stream,
        write_trajectory,
    )
finally:
    if _passive:
        del _os.environ["OMP_WAIT_POLICY"]

__all__ = [
    "Arm",
    "ArmLayer",
    "Body",
    "Cache",
    "Config",
    "FileError",
    "Snapshot",
    "compare",
    "encode",
    "load_capture",
    "read_capture",
    "read_codebook",
    "read_results",
    "read_snapshot",
    "read_snapshot_any",
    "read_trajectory",
    "table_sets",
    "train",
    "trajectory_from_logits",
    "write_capture",
    "write_codebook",
    "write_state_stream",
    "write_trajectory",
]
__version__ = "0.1.0"
