"""sjkv.hf.score_trajectory runs one prompt and its generation: a trajectory of several segments
(docs/FORMAT.md 9.4) is refused with ValueError before the model is touched; a two-segment
version-3 file (a context of its own) is the one-prompt case and scores."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
import sjkv  # noqa: E402
import sjkv.hf  # noqa: E402

V = 96


def trajectory(tmp_path, segments, context):
    logits = (np.random.default_rng(3).standard_normal((4, V)) * 3.0).astype(np.float32)
    top = [int(np.argmax(r)) for r in logits]
    t = sjkv.trajectory_from_logits([1, 2, 3, 4] + top, 4, logits, "m.gguf", "0" * 64, "llama")
    if len(segments) > 2:  # a given token between the two turns
        t["tokens"] = np.array([1, 2, 3, 4, top[0], top[1], 9, top[2], top[3]], np.int32)
        t["settings"]["generate"] = 2
    t["segments"], t["context"] = segments, context
    del t["generated"]
    path = str(tmp_path / "t.h5")
    sjkv.write_trajectory(path, t)
    return path


def test_several_segments_are_refused(tmp_path):
    path = trajectory(tmp_path, [("given", 4, 0), ("generated", 2, 0), ("given", 1, 0), ("generated", 2, 0)], 12)
    with pytest.raises(ValueError, match="4 segments"):
        sjkv.hf.score_trajectory(None, path, ["q8_0"])


def test_two_segments_score(tmp_path):
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(vocab_size=V, hidden_size=256, intermediate_size=256, num_hidden_layers=2,
                                   num_attention_heads=2, num_key_value_heads=1, head_dim=128,
                                   max_position_embeddings=64)
    model = transformers.LlamaForCausalLM(cfg).to(torch.float32)
    model.config._attn_implementation = "eager"
    path = trajectory(tmp_path, [("given", 4, 0), ("generated", 4, 0)], 32)
    assert sjkv.read_trajectory(path)["context"] == 32  # version 3
    res = sjkv.hf.score_trajectory(model, path, ["q8_0"])
    assert len(res["q8_0"]["kl"]) == 4
