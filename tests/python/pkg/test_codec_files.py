"""import sjkv against sjkv's command-line tools on the same inputs: the snapshot a Python
encode writes is byte for byte the one `sjkv-encode encode` writes, decoding agrees with
`sjkv-encode decode`, codebook files read as the tools read them, and every reader's refusal of
a damaged file is sjkv.FileError carrying the tool's message."""
import os
import shutil
import subprocess

import numpy as np
import pytest

import sjkv
from kvtiles import tiles

ENCODE = os.environ.get("SJKV_ENCODE", "")
SRC = os.environ.get("SJKV_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
CB = os.path.join(SRC, "data", "codebooks")


def tool(*args):
    if not ENCODE:
        pytest.skip("SJKV_ENCODE (sjkv-encode) not given")
    return subprocess.run([ENCODE, *args], capture_output=True, text=True)




CONFIGS = ["sj:4/4:tail=128/256", "sj:3/2t:tail=128/256", "sj:2/2t:tail=128:staging=q8_0", "sj:4/2:sink=64:tail=256/512"]


@pytest.mark.parametrize("config", CONFIGS)
def test_encode_matches_the_tool_byte_for_byte(tmp_path, config):
    k, v = tiles()
    cap = str(tmp_path / "cap.h5")
    sjkv.write_capture(cap, k, v, layer_ids=[5, 11], model="m", source="numpy")
    cfg = sjkv.Config(config)
    args = ["encode", cap, "-o", str(tmp_path / "tool.h5"), "--bits", f"{cfg.bits_k}/{cfg.bits_v}",
            "--tail", str(cfg.tail), "--tail-max", str(cfg.tail_max), "--sink", str(cfg.sink),
            "--staging", cfg.staging, "--ubatch", "64", "-q"]
    if "t" in config.split(":")[1]:
        args += ["--body", "trellis"]
    r = tool(*args)
    assert r.returncode == 0, r.stderr
    got = sjkv.read_capture(cap)
    snap = sjkv.encode(got["k"], got["v"], config, n_ubatch=64, layer_ids=got["layer_ids"])
    # the tool names the capture's model and source in the snapshot; a numpy encode names neither
    tool_snap = sjkv.read_snapshot(str(tmp_path / "tool.h5"))
    assert (snap.N, snap.B, snap.B_prev, snap.config.name) == (tool_snap.N, tool_snap.B, tool_snap.B_prev,
                                                                 tool_snap.config.name)
    assert snap.codebook_id == tool_snap.codebook_id
    for a, b in zip(snap.decode(), tool_snap.decode()):
        assert np.array_equal(a.view(np.uint16), b.view(np.uint16))
    # decoding agrees with sjkv-encode decode, bit for bit
    r = tool("decode", str(tmp_path / "tool.h5"), "-o", str(tmp_path / "dec.h5"), "-q")
    assert r.returncode == 0, r.stderr
    dec = sjkv.read_capture(str(tmp_path / "dec.h5"))
    k2, v2 = snap.decode()
    assert np.array_equal(dec["k"].view(np.uint16), k2.view(np.uint16))
    assert np.array_equal(dec["v"].view(np.uint16), v2.view(np.uint16))
    assert dec["layer_ids"] == [5, 11]
    # and what Python writes reads back as the same state
    snap.write(str(tmp_path / "py.h5"))
    back = sjkv.read_snapshot(str(tmp_path / "py.h5"))
    assert (back.N, back.B, back.codebook_id) == (snap.N, snap.B, snap.codebook_id)
    assert all(np.array_equal(a.view(np.uint16), b.view(np.uint16)) for a, b in zip(back.decode(), (k2, v2)))


def test_python_writes_the_tools_bytes(tmp_path):
    """A snapshot written from Python is the file the tool writes for the same content."""
    k, v = tiles(layers=1)
    cap = str(tmp_path / "cap.h5")
    sjkv.write_capture(cap, k, v)
    r = tool("encode", cap, "-o", str(tmp_path / "tool.h5"), "--bits", "3/2", "--body", "trellis", "--tail", "128",
             "--tail-max", "256", "--ubatch", "64", "-q")
    assert r.returncode == 0, r.stderr
    got = sjkv.read_capture(cap)
    assert got["source"] == "" and got["model"] == ""
    sjkv.encode(got["k"], got["v"], "sj:3/2t:tail=128/256", n_ubatch=64, model=got["model"],
                source=got["source"], token_ids=got["token_ids"]).write(str(tmp_path / "py.h5"))
    assert (tmp_path / "tool.h5").read_bytes() == (tmp_path / "py.h5").read_bytes()


def test_float32_input_rounds_to_nearest_even():
    k, v = tiles(layers=1, tokens=300)
    k32 = k.astype(np.float32) + np.float32(1e-4)  # rounds back to k except where it crosses a half step
    a = sjkv.encode(k32, v.astype(np.float32), "sj:4/4:tail=128/256", n_ubatch=64)
    b = sjkv.encode(k32.astype(np.float16), v, "sj:4/4:tail=128/256", n_ubatch=64)
    for x, y in zip(a.decode(), b.decode()):
        assert np.array_equal(x.view(np.uint16), y.view(np.uint16))


def test_shipped_set_and_reference_tables():
    k, v = tiles(layers=1, dim=256, heads=1, tokens=700)
    ref = sjkv.encode(k, v, "sj:3/2t:tail=128/256", n_ubatch=64)
    gem = sjkv.encode(k, v, "sj:3/2t:tail=128/256", n_ubatch=64, codebook="gemma3-270m")
    assert ref.codebook_set == "" and gem.codebook_set == "gemma3-270m"
    assert ref.codebook_id != gem.codebook_id
    bits, kt, vt = sjkv.read_codebook(os.path.join(SRC, "study", "codebooks", "gemma3-270m-2bit.sjcb"))
    assert bits == 2 and kt.dtype == np.float16 and kt.shape == (256,)
    with pytest.raises(ValueError, match="not auto, reference or a shipped table set"):
        sjkv.encode(k, v, "sj:3/2t", codebook="gemma3")


def test_codebook_forms_agree_and_write_back(tmp_path):
    forms = [sjkv.read_codebook(os.path.join(CB, f"gemma3-270m-3bit.{ext}")) for ext in ("sjcb", "bin", "h")]
    for bits, k, v in forms:
        assert bits == 3 and k.shape == (512,) and v.shape == (512,)
        assert np.array_equal(k.view(np.uint16), forms[0][1].view(np.uint16))
        assert np.array_equal(v.view(np.uint16), forms[0][2].view(np.uint16))
    out = tmp_path / "t.bin"
    sjkv.write_codebook(str(out), forms[0][1], forms[0][2])
    assert out.read_bytes() == open(os.path.join(CB, "gemma3-270m-3bit.bin"), "rb").read()
    for ext in ("sjcb", "h"):  # the other forms read back as the same tables
        sjkv.write_codebook(str(tmp_path / f"t.{ext}"), forms[0][1], forms[0][2])
        bits, k, v = sjkv.read_codebook(str(tmp_path / f"t.{ext}"))
        assert bits == 3 and np.array_equal(k.view(np.uint16), forms[0][1].view(np.uint16))
        assert np.array_equal(v.view(np.uint16), forms[0][2].view(np.uint16))


def test_config_strings():
    c = sjkv.Config("sj:3/2t")
    assert c.name.startswith("sj:3/2t:D=128:G=128:staging=tq6_0:sink=128:tail=4096/8192")
    assert sjkv.Config(c.name).name == c.name
    assert (c.bits_k, c.bits_v, c.body) == (3, 2, sjkv.Body.trellis)
    assert 0 < c.bits_allocated(12000) < 16
    with pytest.raises(ValueError, match="configuration 'sj:5/4'"):
        sjkv.Config("sj:5/4")


def damaged(tmp_path, name, data):
    p = tmp_path / name
    p.write_bytes(data)
    return str(p)


def test_refusals_are_file_errors_with_the_tools_message(tmp_path):
    k, v = tiles(layers=1)
    good = str(tmp_path / "good.h5")
    sjkv.encode(k, v, "sj:4/4:tail=128/256", n_ubatch=64).write(good)
    data = open(good, "rb").read()
    bad = damaged(tmp_path, "trunc.h5", data[: len(data) // 2])
    with pytest.raises(sjkv.FileError) as e:
        sjkv.read_snapshot(bad)
    r = tool("inspect", bad)
    assert r.returncode == 2
    assert r.stderr.strip() == "sjkv-encode: " + str(e.value)
    assert type(e.value).__module__ == "sjkv" and "sjkv.FileError" in repr(e.type)  # what a traceback names
    for reader, payload in ((sjkv.read_capture, b"not hdf5"), (sjkv.read_codebook, b"\x00" * 100),
                            (sjkv.read_snapshot, b"")):
        with pytest.raises(sjkv.FileError, match=r"^.*x\.bin: "):
            reader(damaged(tmp_path, "x.bin", payload))
    with pytest.raises(sjkv.FileError, match="cannot open|No such file"):
        sjkv.read_capture(str(tmp_path / "missing.h5"))


def test_bad_arrays_are_value_errors():
    k, v = tiles(layers=1, tokens=200)
    with pytest.raises(ValueError, match="same shape"):
        sjkv.encode(k, v[:, :100], "sj:4/4")
    with pytest.raises(ValueError, match="float16 or float32"):
        sjkv.encode(k.astype(np.int32), v, "sj:4/4")
    nan = k.astype(np.float32)
    nan[0, 3, 0, 0] = np.nan
    with pytest.raises(ValueError, match="not finite"):
        sjkv.encode(nan, v, "sj:4/4")


def test_nothing_half_written(tmp_path):
    k, v = tiles(layers=1, tokens=200)
    target = tmp_path / "sub" / "x.h5"
    with pytest.raises((sjkv.FileError, ValueError, OSError)):
        sjkv.encode(k, v, "sj:4/4").write(str(target))
    assert not target.exists()
    shutil.rmtree(tmp_path / "sub", ignore_errors=True)
