"""import sjkv's sequence cache, other inputs, training and results against the tools: a cache
driven ubatch by ubatch is the snapshot sjkv-encode writes; llama.cpp state files, streams and
trajectories read as the tools read them; training gives sjkv-train's tables; a results folder
gives the statistics sjkv-replay printed."""
import hashlib
import json
import os
import subprocess

import numpy as np
import pytest

import sjkv

import kvtiles

ENCODE = os.environ.get("SJKV_ENCODE", "")
TRAIN = os.environ.get("SJKV_TRAIN", "")
REPLAY = os.environ.get("SJKV_REPLAY", "")
MODELS = os.environ.get("SJKV_TEST_MODELS", "")
SRC = os.environ.get("SJKV_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", "..", ".."))
STATE = os.path.join(SRC, "tests", "golden", "llama_state")


def run(exe, *args):
    if not exe:
        pytest.skip("tool path not given")
    r = subprocess.run([exe, *args], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return r


def tiles(layers=2, tokens=700, heads=2, dim=128, seed=9):
    return kvtiles.tiles(layers, tokens, heads, dim, seed)


@pytest.mark.parametrize("config", ["sj:4/4:tail=128/256", "sj:3/2t:tail=128/256", "sj:3/3:staging=q8_0:tail=256"])
def test_cache_step_by_step_is_the_encoders_snapshot(tmp_path, config):
    k, v = tiles()
    N, ub = k.shape[1], 64
    cache = sjkv.Cache(config, n_layers=2, kv_heads=2, head_dim=128, n_ctx=N + 1, n_ubatch=ub)
    kk = np.ascontiguousarray(k.transpose(1, 0, 2, 3).astype(np.float32))  # [tokens, layers, heads, dim]
    vv = np.ascontiguousarray(v.transpose(1, 0, 2, 3).astype(np.float32))
    sealed = 0
    for p0 in range(0, N, ub):
        sealed += cache.append(p0, kk[p0:p0 + ub], vv[p0:p0 + ub])
    sealed += cache.begin_ubatch(N, 1)  # the step before the next token, as the encoder ends
    assert cache.n_stored == N and sealed > 0
    enc = sjkv.encode(k, v, config, n_ubatch=ub)
    assert cache.B == enc.B
    cache.snapshot().write(str(tmp_path / "cache.h5"))
    enc.write(str(tmp_path / "enc.h5"))
    assert (tmp_path / "cache.h5").read_bytes() == (tmp_path / "enc.h5").read_bytes()
    # rows as attention reads them: the snapshot's decoded rows (which round to fp16)
    kr, vr = cache.rows(1, 0, N)
    kd, vd = enc.decode()
    assert kr.shape == (N, 2, 128) and kr.dtype == np.float32
    scale = np.abs(kd[1].astype(np.float32)).max()
    assert np.abs(kr - kd[1].astype(np.float32)).max() <= 2e-3 * scale
    assert np.abs(vr - vd[1].astype(np.float32)).max() <= 2e-3 * np.abs(vd[1].astype(np.float32)).max()
    # rows given already rotated are stored as given (read in place): the rotated rows read
    # back are what a cache fed the model-basis rows holds
    # (one ubatch of the 128 sink rows: a ubatch larger than n_ubatch is refused)
    again = sjkv.Cache(config, n_layers=2, kv_heads=2, head_dim=128, n_ctx=N + 1, n_ubatch=128)
    kr_rot, vr_rot = cache.rows(1, 0, 128, rotated=True)  # the sink: exact rotated rows (f16)
    ksink = np.repeat(kr_rot[None], 2, axis=0).transpose(1, 0, 2, 3).astype(np.float32)
    vsink = np.repeat(vr_rot[None], 2, axis=0).transpose(1, 0, 2, 3).astype(np.float32)
    again.append(0, np.ascontiguousarray(ksink), np.ascontiguousarray(vsink), rotated=True)
    k2, v2 = again.rows(1, 0, 128, rotated=True)
    assert np.array_equal(k2, kr_rot) and np.array_equal(v2, vr_rot)
    # the sink is exact
    assert np.allclose(kr[:128], k[1, :128].astype(np.float32), rtol=0, atol=2e-3 * scale)


def test_cache_refuses_what_an_engine_would_not_do():
    cache = sjkv.Cache("sj:4/4", n_layers=1, kv_heads=1, head_dim=128, n_ctx=100, n_ubatch=64)
    x = np.zeros((4, 1, 1, 128), np.float32)
    with pytest.raises(ValueError, match="pos0 must be 0"):
        cache.append(5, x, x)
    with pytest.raises(ValueError, match="k must be"):
        cache.append(0, x[:, :, :, :64], x[:, :, :, :64])
    bad = x.copy()
    bad[0, 0, 0, 3] = np.inf
    with pytest.raises(ValueError):
        cache.append(0, bad, bad)
    assert cache.n_stored == 0
    with pytest.raises(ValueError):
        sjkv.Cache("sj:3/2t", n_layers=1, kv_heads=1, head_dim=64, n_ctx=100)  # trellis needs D % 128


def test_llama_state_file_and_stream_as_the_tool(tmp_path):
    state = os.path.join(STATE, "qwen3-f32-fa.ggsn")
    cap = sjkv.load_capture(state, head_dim=128)
    assert cap["k"].shape[1:] == (64, 8, 128) or cap["k"].shape[1] == 64
    run(ENCODE, "encode", state, "-o", str(tmp_path / "tool.h5"), "--head-dim", "128", "--bits", "4/4", "--tail",
        "0", "--tail-max", "0", "--sink", "64", "--ubatch", "32", "-q")
    snap = sjkv.encode(cap["k"], cap["v"], "sj:4/4:sink=64:tail=0", n_ubatch=32, layer_ids=cap["layer_ids"],
                       model=cap["model"], source=cap["source"], token_ids=cap["token_ids"])
    snap.write(str(tmp_path / "py.h5"))
    assert (tmp_path / "py.h5").read_bytes() == (tmp_path / "tool.h5").read_bytes()
    # the sequence-state stream: sjkv-encode export's bytes, and read back as the same state
    run(ENCODE, "export", str(tmp_path / "tool.h5"), "-o", str(tmp_path / "tool.sjkvseq"), "-q")
    sjkv.write_state_stream(str(tmp_path / "py.sjkvseq"), snap)
    assert (tmp_path / "py.sjkvseq").read_bytes() == (tmp_path / "tool.sjkvseq").read_bytes()
    back = sjkv.read_snapshot_any(str(tmp_path / "py.sjkvseq"))
    assert (back.N, back.B) == (snap.N, snap.B)
    with pytest.raises(sjkv.FileError, match="py.sjkvseq"):
        data = (tmp_path / "py.sjkvseq").read_bytes()
        (tmp_path / "py.sjkvseq").write_bytes(data[:-1] + bytes([data[-1] ^ 1]))
        sjkv.read_snapshot_any(str(tmp_path / "py.sjkvseq"))
    with pytest.raises(sjkv.FileError, match="head"):
        sjkv.load_capture(state)  # a state file needs the head size


def test_training_gives_the_tools_tables(tmp_path):
    k, v = tiles(layers=1, tokens=1200, heads=1, dim=256, seed=3)
    cap = str(tmp_path / "cap.h5")
    sjkv.write_capture(cap, k, v)
    run(TRAIN, cap, "--bits", "2", "-o", str(tmp_path / "tool"), "--max-iters", "3", "--threads", "2")
    rep = sjkv.train([cap], str(tmp_path / "py"), bits=2, max_iters=3, threads=1)
    assert (tmp_path / "py.bin").read_bytes() == (tmp_path / "tool.bin").read_bytes()
    assert rep["outputs"] == [str(tmp_path / "py") + e for e in (".sjcb", ".bin", ".h")]
    assert rep["train_tiles"] > 0 and rep["heldout_tiles"] > 0
    for side in ("k", "v"):
        assert rep[side]["trained"] < rep[side]["identity"] <= rep[side]["scalar"] * 1.0001
    bits, kt, vt = sjkv.read_codebook(str(tmp_path / "py.sjcb"))
    assert bits == 2 and kt.shape == (256,)
    with pytest.raises(sjkv.FileError, match="missing.h5"):
        sjkv.train([str(tmp_path / "missing.h5")], str(tmp_path / "x"))
    assert not (tmp_path / "x.bin").exists()


def test_training_options_are_the_tools(tmp_path):
    """The channel axis, another staging, sink and balancing iterations, and a checkpointed run:
    the bytes sjkv-train writes with the same options."""
    k, v = tiles(layers=1, tokens=900, heads=1, dim=256, seed=5)
    cap = str(tmp_path / "cap.h5")
    sjkv.write_capture(cap, k, v)
    opts = ["--bits", "3", "--axis", "channel", "--staging", "q8_0", "--sink", "64", "--iters", "8", "--max-iters", "2"]
    run(TRAIN, cap, *opts, "-o", str(tmp_path / "tool"))
    rep = sjkv.train([cap], str(tmp_path / "py"), bits=3, axis="channel", staging="q8_0", sink=64, iters=8,
                     max_iters=2, checkpoint=True)
    assert rep["outputs"] == [str(tmp_path / "py") + e for e in (".sjcb", ".bin")]  # no C header off the token axis
    assert (tmp_path / "py.bin").read_bytes() == (tmp_path / "tool.bin").read_bytes()  # .sjcb names the tool
    assert not list(tmp_path.glob("py*.ckpt"))  # removed at the end
    for bad, msg in [({"axis": "rows"}, "axis must be"), ({"staging": "q4_0"}, "staging must be"),
                     ({"heldout": 1.0}, "heldout must be"), ({"bits": 5}, "bits, sink, iters or axis")]:
        with pytest.raises(ValueError, match=msg):
            sjkv.train([cap], str(tmp_path / "bad"), **bad)
    assert not list(tmp_path.glob("bad*"))


def test_trajectory_and_results_as_the_replay_wrote_them(tmp_path):
    model = os.path.join(MODELS, "qwen3.gguf") if MODELS else ""
    if not (REPLAY and os.path.exists(model)):
        pytest.skip("sjkv-replay or the test models not given")
    prompt = tmp_path / "p.txt"
    prompt.write_text(open(os.path.join(SRC, "data", "prompts", "demo.txt")).read()[:1200])
    traj = str(tmp_path / "t.h5")
    run(REPLAY, "record", "--model", model, "--prompt-file", str(prompt), "--generate", "12", "-o", traj, "-q")
    t = sjkv.read_trajectory(traj)
    assert t["model_file"] == "qwen3.gguf" and t["generated"] == 12 and t["architecture"] == "qwen3"
    assert len(t["tokens"]) == t["prompt_tokens"] + 12
    assert list(t["top_tokens"]) == list(t["tokens"][t["prompt_tokens"]:])  # greedy
    out = tmp_path / "res"
    run(REPLAY, "score", traj, "--model", model, "--arms", "f16,q4_0,sj:4/4:tail=128", "--out", str(out), "-q")
    res = sjkv.read_results(str(out))
    printed = {a["arm"]: a for a in json.load(open(out / "results.json"))["arms"]}
    assert list(res) == ["f16", "q4_0", "sj:4/4:tail=128"]
    for arm, a in res.items():
        assert len(a["kl"]) == 12 and a["position"].dtype == np.int64
        for key in ("mean_kl", "median_kl", "p90_kl", "max_kl", "same_top"):
            assert a["stats"][key] == pytest.approx(printed[arm][key], rel=1e-8, abs=1e-12), (arm, key)  # results.json: 9 digits
        # positions.csv keeps bits to 4 decimals
        assert a["stats"]["bits_occupied"] == pytest.approx(printed[arm]["bits_occupied"], abs=1e-4)
    cmp = json.load(open(out / "results.json"))["comparisons"]
    q4 = next(c for c in cmp if c["arm"] == "q4_0")
    got = sjkv.compare([list(res["q4_0"]["kl"])], [list(res["f16"]["kl"])])
    assert got["ratio"] == pytest.approx(q4["ratio"], rel=1e-8)
    assert got["ci_low"] == pytest.approx(q4["ci_low"], rel=1e-8)
    with pytest.raises(sjkv.FileError, match="positions.csv"):
        (out / "positions.csv").write_text("trajectory,position\n1,2\n")
        sjkv.read_results(str(out))


@pytest.mark.parametrize("encoding", ["hidden", "sparse"])
def test_trajectory_round_trip_is_the_recorders_bytes(tmp_path, encoding):
    """read_trajectory keeps every field of the reference: writing it back gives the file
    sjkv-replay record wrote, byte for byte."""
    model = os.path.join(MODELS, "qwen3.gguf") if MODELS else ""
    if not (REPLAY and os.path.exists(model)):
        pytest.skip("sjkv-replay or the test models not given")
    prompt = tmp_path / "p.txt"
    prompt.write_text(open(os.path.join(SRC, "data", "prompts", "demo.txt")).read()[:900])
    src = tmp_path / "t.h5"
    run(REPLAY, "record", "--model", model, "--prompt-file", str(prompt), "--generate", "5",
        "--reference-encoding", encoding, "-o", str(src), "-q")
    t = sjkv.read_trajectory(str(src))
    assert t["encoding"] == encoding and len(t["log_z"]) == 5
    if encoding == "hidden":
        assert t["hidden"].shape == (5, t["n_embd"]) and t["top_ids"].shape[0] == 5
        assert list(t["top_ids"][:, 0]) == list(t["top_tokens"])
    else:
        assert [int(ids[np.argmax(lg)]) for ids, lg in zip(t["kept_ids"], t["kept_logits"])] == list(t["top_tokens"])
    sjkv.write_trajectory(str(tmp_path / "again.h5"), t)
    assert (tmp_path / "again.h5").read_bytes() == src.read_bytes()
    t["tokens"][-1] = (t["tokens"][-1] + 1) % t["n_vocab"]  # no longer the reference's top token
    with pytest.raises(ValueError, match="generated token 4 is not the reference's top token"):
        sjkv.write_trajectory(str(tmp_path / "bad.h5"), t)
    assert not (tmp_path / "bad.h5").exists()


def test_trajectory_from_another_engines_logits_scores(tmp_path):
    """Logits from elsewhere become a sparse trajectory kept by the recorder's rule (the fewest
    top tokens whose loss is within the target), which sjkv-replay score reads."""
    model = os.path.join(MODELS, "qwen3.gguf") if MODELS else ""
    if not (REPLAY and os.path.exists(model)):
        pytest.skip("sjkv-replay or the test models not given")
    prompt = tmp_path / "p.txt"
    prompt.write_text(open(os.path.join(SRC, "data", "prompts", "demo.txt")).read()[:900])
    run(REPLAY, "record", "--model", model, "--prompt-file", str(prompt), "--generate", "1", "-o", str(tmp_path / "r.h5"), "-q")
    rec = sjkv.read_trajectory(str(tmp_path / "r.h5"))
    n_vocab, P, G = rec["n_vocab"], rec["prompt_tokens"], 6
    rng = np.random.default_rng(4)
    logits = (rng.standard_normal((G, n_vocab)) * 3.0).astype(np.float32)
    tokens = np.concatenate([rec["tokens"][:P], np.argmax(logits, axis=1)]).astype(np.int32)
    sha = hashlib.sha256(open(model, "rb").read()).hexdigest()
    target = 1e-4
    t = sjkv.trajectory_from_logits(tokens, P, logits, "qwen3.gguf", sha, rec["architecture"], self_kl_target=target)
    assert t["encoding"] == "sparse" and list(t["top_tokens"]) == list(tokens[P:])
    worst = 0.0
    for j in range(G):
        row = logits[j].astype(np.float64)
        log_z = np.log(np.sum(np.exp(row - row.max()))) + row.max()
        assert t["log_z"][j] == pytest.approx(log_z, rel=1e-12)
        ids = t["kept_ids"][j]
        assert list(ids) == sorted(ids) and np.array_equal(t["kept_logits"][j], logits[j][ids])
        p = np.exp(row - log_z)
        rest = np.ones(n_vocab, bool)
        rest[ids] = False
        assert t["rest_mass"][j] == pytest.approx(p[rest].sum(), rel=1e-9)
        # the stored form spreads the rest evenly: its loss is within the target, and keeping
        # one token fewer (the smallest kept) would not be
        def loss(kept):
            r = np.ones(n_vocab, bool)
            r[kept] = False
            q = p.copy()
            q[r] = p[r].sum() / r.sum()
            return float(np.sum(p * (np.log(p) - np.log(q))))
        kl = loss(ids)
        worst = max(worst, kl)
        assert kl <= target * (1 + 1e-6)
        fewer = ids[ids != ids[np.argmin(logits[j][ids])]]
        assert loss(fewer) > target
    assert t["self_kl_max"] == pytest.approx(worst, rel=1e-6)
    path = tmp_path / "other.h5"
    sjkv.write_trajectory(str(path), t)
    assert sjkv.read_trajectory(str(path))["kept_ids"][0].tolist() == t["kept_ids"][0].tolist()
    out = tmp_path / "res"
    run(REPLAY, "score", str(path), "--model", model, "--arms", "f16", "--out", str(out), "-q")
    res = sjkv.read_results(str(out))
    assert len(res["f16"]["kl"]) == G and np.all(np.isfinite(res["f16"]["kl"])) and np.all(res["f16"]["kl"] > 0)
    with pytest.raises(ValueError, match="logits must be"):
        sjkv.trajectory_from_logits(tokens, P, logits[0], "qwen3.gguf", sha, rec["architecture"])


@pytest.mark.parametrize("reader,source", [
    ("read_trajectory", None),
    ("load_capture", os.path.join(STATE, "qwen3-f32-fa.ggsn")),
    ("read_codebook", os.path.join(SRC, "data", "codebooks", "gemma3-270m-3bit.sjcb")),
    ("read_capture", None),
])
def test_every_reader_refuses_a_damaged_file(tmp_path, reader, source):
    """A truncated file is sjkv.FileError naming it, never a crash or a silent short read."""
    if source is None:
        k, v = tiles(layers=1, tokens=64)
        source = str(tmp_path / "src.h5")
        if reader == "read_capture":
            sjkv.write_capture(source, k, v)
        else:
            model = os.path.join(MODELS, "qwen3.gguf") if MODELS else ""
            if not (REPLAY and os.path.exists(model)):
                pytest.skip("sjkv-replay or the test models not given")
            prompt = tmp_path / "p.txt"
            prompt.write_text("The quick brown fox jumps over the lazy dog. " * 8)
            run(REPLAY, "record", "--model", model, "--prompt-file", str(prompt), "--generate", "4", "-o", source, "-q")
    data = open(source, "rb").read()
    bad = tmp_path / "bad.bin"
    bad.write_bytes(data[: len(data) * 2 // 3])
    kwargs = {"head_dim": 128} if reader == "load_capture" else {}
    with pytest.raises(sjkv.FileError, match=r"bad\.bin: "):
        getattr(sjkv, reader)(str(bad), **kwargs)
