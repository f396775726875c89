"""The third hostile pass on import sjkv (issue 40): every bad argument is a Python exception
naming what is wrong, never a crash, a hang or a silent misreading. Calls that crashed or hung
the interpreter before the fixes run in a child process, so a regression fails one test rather
than killing the suite."""
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import sjkv
from kvtiles import tiles


def isolated(code, timeout=120):
    """Runs `code` (after `import numpy as np, sjkv, pytest`) in a child interpreter; fails on
    a crash, a hang or an assertion there."""
    src = "import numpy as np, pytest, sjkv\n" + textwrap.dedent(code)
    try:
        r = subprocess.run([sys.executable, "-c", src], capture_output=True, text=True, timeout=timeout,
                           env=dict(os.environ))
    except subprocess.TimeoutExpired:
        pytest.fail("no answer within %d s (a hang)" % timeout)
    assert r.returncode == 0, "exit %d: %s" % (r.returncode, r.stderr[-2000:])
    return r.stdout


# --- item 1: the cache refuses growth past n_ctx and ubatches past n_ubatch -------------------

def test_cache_append_past_n_ctx_is_refused_not_written():
    isolated("""
        c = sjkv.Cache('sj:4/4:tail=0:sink=64', 2, 2, 128, 128, 64)
        x = np.random.default_rng(1).standard_normal((64, 2, 2, 128)).astype(np.float32)
        c.append(0, x, x)
        c.append(64, x, x)
        for p in (128, 192, 256, 320):
            with pytest.raises(ValueError, match='n_ctx'):
                c.append(c.n_stored, x, x)
        assert c.n_stored == 128
        with pytest.raises(ValueError, match='n_ctx'):
            c.begin_ubatch(128, 1)
        k, v = c.rows(0, 0, 128)  # what was stored reads back
        assert np.isfinite(k).all()
    """)


def test_cache_refuses_a_ubatch_larger_than_n_ubatch_or_n_ctx():
    c = sjkv.Cache("sj:4/4", 1, 1, 128, 1000, 64)
    x = np.zeros((65, 1, 1, 128), np.float32)
    with pytest.raises(ValueError, match="n_ubatch"):
        c.append(0, x, x)
    with pytest.raises(ValueError, match="n_ubatch"):
        c.begin_ubatch(0, 65)
    assert c.n_stored == 0
    small = sjkv.Cache("sj:4/4", 1, 1, 128, 40, 64)
    with pytest.raises(ValueError, match="n_ctx"):
        small.append(0, x[:64], x[:64])
    assert small.n_stored == 0
    small.append(0, x[:40], x[:40])  # exactly n_ctx fits
    assert small.n_stored == 40


# --- item 2: threads in [0, 1024], as the tools' --threads ----------------------------------

def test_threads_out_of_the_tools_range_are_value_errors(tmp_path):
    isolated("""
        k = np.zeros((1, 10, 2, 128), np.float16)
        for t in (100000, 1025, -5, -1):
            with pytest.raises(ValueError, match='threads'):
                sjkv.encode(k, k, 'sj:4/4', threads=t)
        assert sjkv.encode(k, k, 'sj:4/4', threads=1024).N == 10
    """)
    for t in (-5, 1025):
        with pytest.raises(ValueError, match="threads"):
            sjkv.train([str(tmp_path / "cap.h5")], str(tmp_path / "x"), threads=t)
    assert not list(tmp_path.iterdir())


# --- item 3: byte order -----------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [">f2", ">f4"])
def test_non_native_byte_order_reads_the_values(tmp_path, dtype):
    k, v = tiles(layers=1, tokens=300)
    kb, vb = k.astype(dtype), v.astype(dtype)
    assert kb.dtype.byteorder == ">"
    native = sjkv.encode(k, v, "sj:4/4:sink=64:tail=128")
    other = sjkv.encode(kb, vb, "sj:4/4:sink=64:tail=128")
    native.write(str(tmp_path / "a.h5"))
    other.write(str(tmp_path / "b.h5"))
    assert (tmp_path / "a.h5").read_bytes() == (tmp_path / "b.h5").read_bytes()
    sjkv.write_capture(str(tmp_path / "c.h5"), kb, vb)
    back = sjkv.read_capture(str(tmp_path / "c.h5"))
    assert np.array_equal(back["k"], k) and np.array_equal(back["v"], v)
    one = np.ones((1, 4, 1, 128), dtype)
    sjkv.write_capture(str(tmp_path / "one.h5"), one, one)
    assert float(sjkv.read_capture(str(tmp_path / "one.h5"))["k"][0, 0, 0, 0]) == 1.0


# --- item 14: the tools' bounds ---------------------------------------------------------------

def test_cache_sizes_are_bounded():
    isolated("""
        for kw, name in [(dict(n_layers=0), 'n_layers'), (dict(kv_heads=0), 'kv_heads'),
                         (dict(n_ctx=0), 'n_ctx'), (dict(n_ubatch=0), 'n_ubatch'),
                         (dict(n_layers=100000, kv_heads=100000), 'n_layers'),
                         (dict(n_ubatch=(1 << 20) + 1), 'n_ubatch')]:
            args = dict(config='sj:4/4', n_layers=2, kv_heads=2, head_dim=128, n_ctx=1000, n_ubatch=64)
            args.update(kw)
            with pytest.raises(ValueError, match=name):
                sjkv.Cache(**args)
        # within the tools' bounds, but more memory than any machine has: refused at once
        with pytest.raises(ValueError, match='memory'):
            sjkv.Cache('sj:4/4', n_layers=65536, kv_heads=65536, head_dim=128, n_ctx=4000000000)
        with pytest.raises(ValueError, match='memory'):
            sjkv.Cache('sj:4/4', n_layers=1, kv_heads=65536, head_dim=512, n_ctx=4294967295)
    """, timeout=60)


def test_compare_replicates_are_the_tools_range():
    isolated("""
        a = [[0.1, 0.2, 0.3]] * 3
        for r in (10**9, 1000001, 99, 0):
            with pytest.raises(ValueError, match='replicates'):
                sjkv.compare(a, a, replicates=r)
        assert sjkv.compare(a, a, replicates=100)['ratio'] == pytest.approx(1.0)
    """, timeout=60)


@pytest.mark.parametrize("prefix", ["", ".", "..", "sub/", "folder"])
def test_train_prefix_that_names_a_folder_is_refused(tmp_path, monkeypatch, prefix):
    k, v = tiles(layers=1, tokens=400, heads=1, dim=256, seed=3)
    cap = str(tmp_path / "cap.h5")
    sjkv.write_capture(cap, k, v)
    work = tmp_path / "work"
    (work / "folder").mkdir(parents=True)
    (work / "sub").mkdir()
    monkeypatch.chdir(work)
    with pytest.raises(ValueError, match="prefix"):
        sjkv.train([cap], prefix, max_iters=1)
    assert sorted(p.name for p in work.rglob("*")) == ["folder", "sub"]


def test_train_bounds_are_the_tools(tmp_path):
    with pytest.raises(ValueError, match="max_iters"):
        sjkv.train([str(tmp_path / "cap.h5")], str(tmp_path / "x"), max_iters=10001)
    with pytest.raises(ValueError, match="n_ubatch"):
        sjkv.encode(np.zeros((1, 4, 1, 128), np.float16), np.zeros((1, 4, 1, 128), np.float16), "sj:4/4",
                    n_ubatch=(1 << 20) + 1)
    assert not list(tmp_path.iterdir())


# --- item 15: zero sizes ------------------------------------------------------------------------

def test_zero_sized_tiles_and_caches():
    isolated("""
        z = np.zeros((1, 0, 2, 128), np.float16)
        s = sjkv.encode(z, z, 'sj:4/4')
        assert s.N == 0
        k, v = s.decode()
        assert k.shape == (1, 0, 2, 128)
        for kw in (dict(n_layers=0), dict(kv_heads=0)):
            args = dict(n_layers=1, kv_heads=1, head_dim=128, n_ctx=100)
            args.update(kw)
            with pytest.raises(ValueError, match=list(kw)[0]):
                sjkv.Cache('sj:4/4', **args)
        c = sjkv.Cache('sj:4/4', 1, 1, 128, 100)
        e = np.zeros((0, 1, 1, 128), np.float32)
        assert c.append(0, e, e) == 0 and c.n_stored == 0
        assert c.rows(0, 0, 0)[0].shape == (0, 1, 128)
    """)


# --- item 17: write_trajectory names the field it cannot read -----------------------------------

def trajectory():
    rng = np.random.default_rng(4)
    logits = rng.standard_normal((3, 50)).astype(np.float32)
    tokens = np.array([1, 2, 3, 4] + [int(np.argmax(r)) for r in logits], np.int32)
    return sjkv.trajectory_from_logits(tokens, 4, logits, "m.gguf", "0" * 64, "llama")


@pytest.mark.parametrize("field,value", [
    ("n_vocab", "many"), ("prompt_tokens", 1.5), ("prompt_tokens", -1), ("model_file", 3), ("architecture", None),
    ("encoding", 7), ("settings", [1, 2]), ("settings.seed", "x"), ("settings.sample", "yes"),
    ("settings.temperature", "hot"), ("self_kl_max", "big"), ("kept_ids", 5),
])
def test_write_trajectory_wrong_type_names_the_field(tmp_path, field, value):
    t = trajectory()
    sjkv.write_trajectory(str(tmp_path / "ok.h5"), t)
    if field.startswith("settings."):
        t["settings"][field.split(".")[1]] = value
    else:
        t[field] = value
    name = field.split(".")[-1]
    with pytest.raises(ValueError, match=name):
        sjkv.write_trajectory(str(tmp_path / "bad.h5"), t)
    assert not (tmp_path / "bad.h5").exists()


# --- under load: the module's OpenMP waits passively, as the tools' -----------------------------
def _spin_count(extra_env):
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")}
    env.update(extra_env, OMP_DISPLAY_ENV="verbose")
    r = subprocess.run([sys.executable, "-c", "import sjkv"], capture_output=True, text=True, timeout=120, env=env)
    assert r.returncode == 0, r.stderr[-2000:]
    spins = [l.split("'")[1] for l in r.stderr.splitlines() if "GOMP_SPINCOUNT = '" in l]
    assert spins, "GNU OpenMP printed no settings: " + r.stderr[-500:]
    return spins[-1]


def test_import_sets_the_passive_openmp_wait():
    assert _spin_count({}) == "0"


def test_import_leaves_the_environment_as_it_was():
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")}
    code = "import os, sjkv; print(os.environ.get('OMP_WAIT_POLICY'), os.environ.get('GOMP_SPINCOUNT'))"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.split() == ["None", "None"]


def test_a_users_openmp_wait_stands():
    assert _spin_count({"GOMP_SPINCOUNT": "777"}) == "777"
    assert _spin_count({"OMP_WAIT_POLICY": "active"}) != "0"


# --- sizes out of any unsigned range are ValueErrors naming them, not pybind TypeErrors ---------
@pytest.mark.parametrize("call,name", [
    (lambda k: sjkv.encode(k, k, "sj:4/4", threads=2**40), "threads"),
    (lambda k: sjkv.encode(k, k, "sj:4/4", threads=-1), "threads"),
    (lambda k: sjkv.encode(k, k, "sj:4/4", n_ubatch=-1), "n_ubatch"),
    (lambda k: sjkv.Cache("sj:4/4", -1, 2, 128, 256), "n_layers"),
    (lambda k: sjkv.Cache("sj:4/4", 2, 2, 128, 2**40), "n_ctx"),
    (lambda k: sjkv.Cache("sj:4/4", 2, 2, -128, 256), "head_dim"),
    (lambda k: sjkv.compare([[0.1] * 4], [[0.2] * 4], replicates=-1), "replicates"),
])
def test_negative_or_huge_sizes_are_value_errors(call, name):
    k = np.zeros((1, 16, 2, 128), np.float16)
    with pytest.raises(ValueError, match=name):
        call(k)


# --- write_trajectory refuses what a later score would trip on ---------------------------------
@pytest.mark.parametrize("field,value", [
    ("model_sha256", "text"), ("model_sha256", "AB" * 32), ("settings.reference", "sj:4/4::x"),
    ("settings.reference", "bogus"), ("generated", 99),
])
def test_write_trajectory_refuses_values_a_score_would_trip_on(tmp_path, field, value):
    t = trajectory()
    if field.startswith("settings."):
        t["settings"][field.split(".")[1]] = value
    else:
        t[field] = value
    with pytest.raises(ValueError, match=field.split(".")[-1]):
        sjkv.write_trajectory(str(tmp_path / "bad.h5"), t)
    assert not (tmp_path / "bad.h5").exists()


def test_arm_layer_larger_than_the_machine_is_refused_before_allocating():
    # It was accepted, and the first append zero-filled terabytes (killed, not refused).
    isolated("""
        with pytest.raises(ValueError, match="memory"):
            sjkv.ArmLayer("sj:4/4", 0, 8, 8, 256, 2**32 - 1)
        a = sjkv.ArmLayer("sj:4/4", 0, 8, 2, 128, 4096)  # an ordinary one still works
        assert a.n_stored == 0
    """)
