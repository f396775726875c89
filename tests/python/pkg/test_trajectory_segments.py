"""Trajectory version 3 through the dict (docs/FORMAT.md 9.4): segments, context and the
provenance round-trip; a one-prompt dict is still written as version 2's bytes however it is
spelled; the writer refuses what the reader would, naming it."""
import re

import numpy as np
import pytest

import sjkv

V = 50
PROVENANCE = {"transcript_sha256": "0" * 64, "chat_template_sha256": "ab" * 32, "chat_template_source": "gguf",
              "template_date": "2026-01-01", "jinja2_version": "3.1.6"}


def rows(n, seed):
    return (np.random.default_rng(seed).standard_normal((n, V)) * 3.0).astype(np.float32)


def one_prompt():
    logits = rows(3, 4)
    tokens = np.array([1, 2, 3, 4] + [int(np.argmax(r)) for r in logits], np.int32)
    return sjkv.trajectory_from_logits(tokens, 4, logits, "m.gguf", "0" * 64, "llama")


def multi_turn():
    """[given 4][generated 2][idle keep 3][given 2][answer 2]: the answer is not the top token."""
    logits = rows(4, 5)
    top = [int(np.argmax(r)) for r in logits]
    tokens = np.array([1, 2, 3, 4, top[0], top[1], 7, 8, (top[2] + 1) % V, (top[3] + 1) % V], np.int32)
    t = sjkv.trajectory_from_logits(tokens[:4].tolist() + top, 4, logits, "m.gguf", "0" * 64, "llama")
    t["tokens"] = tokens
    t["segments"] = [("given", 4, 0), ("generated", 2, 0), ("idle", 0, 3), ("given", 2, 0), ("answer", 2, 0)]
    t["context"] = 16
    t["settings"]["generate"] = 2
    del t["generated"], t["top_tokens"], t["scored_positions"]  # derived: read_trajectory gives them
    return t


def test_one_prompt_reads_with_no_segments():
    t = one_prompt()
    assert t["segments"] == [] and t["context"] == 0
    assert t["scored_positions"].tolist() == [4, 5, 6]


def test_version_three_round_trip(tmp_path):
    t = multi_turn()
    t.update(PROVENANCE)
    sjkv.write_trajectory(str(tmp_path / "t.h5"), t)
    back = sjkv.read_trajectory(str(tmp_path / "t.h5"))
    assert back["segments"] == [("given", 4, 0), ("generated", 2, 0), ("idle", 0, 3), ("given", 2, 0), ("answer", 2, 0)]
    assert back["context"] == 16 and back["generated"] == 4
    assert back["scored_positions"].tolist() == [4, 5, 8, 9]
    assert back["tokens"].tolist() == t["tokens"].tolist()
    for key, value in PROVENANCE.items():
        assert back[key] == value
    sjkv.write_trajectory(str(tmp_path / "again.h5"), back)
    assert (tmp_path / "again.h5").read_bytes() == (tmp_path / "t.h5").read_bytes()
    no_source = sjkv.read_trajectory(str(tmp_path / "t.h5"))
    for key in PROVENANCE:
        del no_source[key]
    sjkv.write_trajectory(str(tmp_path / "plain.h5"), no_source)
    assert "template_date" not in sjkv.read_trajectory(str(tmp_path / "plain.h5"))


def test_kinds_by_code(tmp_path):
    t = multi_turn()
    t["segments"] = [(0, 4, 0), (1, 2, 0), (3, 0, 3), (0, 2, 0), (2, 2, 0)]
    sjkv.write_trajectory(str(tmp_path / "t.h5"), t)
    assert sjkv.read_trajectory(str(tmp_path / "t.h5"))["segments"][2] == ("idle", 0, 3)


def test_the_one_prompt_case_is_version_two_bytes(tmp_path):
    t = one_prompt()
    sjkv.write_trajectory(str(tmp_path / "a.h5"), t)
    t["segments"] = [("given", 4, 0), ("generated", 3, 0)]
    t["context"] = 4 + t["settings"]["generate"]
    sjkv.write_trajectory(str(tmp_path / "b.h5"), t)
    assert (tmp_path / "b.h5").read_bytes() == (tmp_path / "a.h5").read_bytes()
    t["context"] = 64  # not what version 2 implies: version 3, the same pair
    sjkv.write_trajectory(str(tmp_path / "c.h5"), t)
    c = sjkv.read_trajectory(str(tmp_path / "c.h5"))
    assert c["segments"] == [("given", 4, 0), ("generated", 3, 0)] and c["context"] == 64


@pytest.mark.parametrize("edit,message", [
    (lambda t: t.update(segments=[("given", 4, 0), ("generated", 2, 0), ("idle", 0, 3), ("answer", 2, 0),
                                  ("given", 2, 0)]), "segment 2 (idle) is not followed by a given segment"),
    (lambda t: t["segments"].__setitem__(1, ("generated", 2, 5)), "has keep_recent 5"),
    (lambda t: t.update(context=9), "context = 9 is less than n_tokens = 10"),
    (lambda t: t["settings"].update(generate=1), "more than generate = 1"),
    (lambda t: t["tokens"].__setitem__(5, (t["tokens"][5] + 1) % V), "generated token 1 is not the reference's top"),
    (lambda t: t.update(template_date="2026-01-01"), "provenance is partial"),
    (lambda t: t.update(PROVENANCE, transcript_sha256="A" * 64), "transcript_sha256 is not 64 lower-case"),
    (lambda t: t["segments"].__setitem__(0, ("prompt", 4, 0)), "segments[0]': unknown segment kind 'prompt'"),
    (lambda t: t["segments"].__setitem__(0, (7, 4, 0)), "segments[0]': kind code 7 is unknown"),
    (lambda t: t["segments"].__setitem__(0, ("given", 4)), "segments[0]' must be a (kind, length, keep_recent)"),
    (lambda t: t["segments"].__setitem__(0, ("given", -4, 0)), "segments[0].length"),
    (lambda t: t.update(generated=3), "'generated' is 3, but the generated and answer segments hold 4"),
])
def test_writer_refuses_what_the_reader_would(tmp_path, edit, message):
    t = multi_turn()
    edit(t)
    with pytest.raises(ValueError, match=re.escape(message)):
        sjkv.write_trajectory(str(tmp_path / "bad.h5"), t)
    assert not (tmp_path / "bad.h5").exists()
