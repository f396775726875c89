"""Writers in several Python threads, one destination (issue 40, item 4): each write has its own
temporary, so every call returns normally, the file reads back as one writer's whole content,
and no temporary is left. With one temporary name per process, 27 of 60 Snapshot.write calls
failed and once the published file was unreadable."""
import os
import threading

import numpy as np

import sjkv
from kvtiles import tiles

THREADS = 12


def together(fn, n=THREADS):
    """Runs fn(i) in n threads started at once; returns each thread's exception (or None)."""
    start = threading.Barrier(n)
    errors = [None] * n

    def body(i):
        start.wait()
        try:
            fn(i)
        except Exception as e:  # noqa: BLE001 -- reported by the test
            errors[i] = e

    threads = [threading.Thread(target=body, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return errors


def temporaries(folder):
    return [f for f in os.listdir(folder) if ".tmp-" in f]


def test_snapshot_write_from_threads(tmp_path):
    snaps = []
    for i in range(THREADS):
        k, v = tiles(layers=1, tokens=300, seed=100 + i)
        snaps.append(sjkv.encode(k, v, "sj:4/4:tail=128/256", n_ubatch=64))
    path = str(tmp_path / "snap.h5")
    for _ in range(3):
        errors = together(lambda i: snaps[i].write(path))
        assert errors == [None] * THREADS, [str(e) for e in errors if e]
        back = sjkv.read_snapshot(path)
        got_k = back.decode()[0].view(np.uint16)
        assert any(np.array_equal(got_k, s.decode()[0].view(np.uint16)) for s in snaps)
        assert temporaries(tmp_path) == []


def test_write_trajectory_from_threads(tmp_path):
    rng = np.random.default_rng(8)
    n_vocab, prompt, generated = 64, 5, 4
    trajs = []
    for i in range(THREADS):
        logits = (rng.standard_normal((generated, n_vocab)) * 3.0).astype(np.float32)
        tokens = np.concatenate([np.arange(1, prompt + 1), np.argmax(logits, axis=1)]).astype(np.int32)
        trajs.append(sjkv.trajectory_from_logits(tokens, prompt, logits, "m.gguf", "ab" * 32, "llama",
                                                 self_kl_target=1e-4))
    path = str(tmp_path / "t.h5")
    for _ in range(3):
        errors = together(lambda i: sjkv.write_trajectory(path, trajs[i]))
        assert errors == [None] * THREADS, [str(e) for e in errors if e]
        back = sjkv.read_trajectory(path)
        assert any(np.array_equal(back["log_z"], t["log_z"]) and list(back["tokens"]) == list(t["tokens"])
                   for t in trajs)
        assert temporaries(tmp_path) == []


def test_write_capture_from_threads(tmp_path):
    caps = [tiles(layers=1, tokens=64, heads=1, dim=64, seed=200 + i) for i in range(THREADS)]
    path = str(tmp_path / "c.h5")
    errors = together(lambda i: sjkv.write_capture(path, caps[i][0], caps[i][1]))
    assert errors == [None] * THREADS, [str(e) for e in errors if e]
    got = sjkv.read_capture(path)
    assert any(np.array_equal(got["k"].view(np.uint16), k.view(np.uint16)) for k, _ in caps)
    assert temporaries(tmp_path) == []
