"""sjkv.hf against sjkv-replay: SmolLM2-135M from the same GGUF in transformers (float32 weights
dequantized by transformers, torch CPU) and in sjkv's own forward pass, the same tokens, each
arm's KL against its own engine's f32-cache run.

Measured on this trajectory (data/prompts/demo.txt, 738 prompt tokens, 32 generated): the mean
KL ratios hf/replay were q8_0 1.12, kvarn:4/4:tail=0 1.05, sj:4/4:staging=q8_0:tail=128/256
1.17, sj:3/3:staging=q8_0:tail=128/256 0.57, the same ranking. The engines differ by more than
rounding: sjkv, as llama.cpp, multiplies quantized weights with activations rounded to Q8_1
blocks, transformers with float32 activations; and 32 positions of a heavy-tailed KL are few.
The stated tolerance is therefore a factor of 2 on each arm's mean KL, plus the same order of
the arms, plus exactly zero for the f32 arm (the cache layer itself adds nothing). SmolLM2's
head size, 64, takes no trellis body (sj:3/2t): the low-width arm is scalar 3/3; the tails are
shortened so that the SJ bodies seal at this length.

Gemma 3 270M (the default model; 18 layers, 15 of them sliding-window, which both engines keep
unquantized) on the same prompt, 32 generated tokens, with its head size 256 taking the trellis
3/2t and tq6_0 staging: measured ratios q8_0 1.04, kvarn:4/4:tail=0 0.93, sj:4/4:tail=128/256
0.85, sj:3/2t:tail=128/256 0.82, the same ranking, the same bits. Both engines run the arms with
the format's tables (sjkv-replay --codebook reference), as sjkv.hf runs an arm string as given."""
import os
import subprocess

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
import sjkv  # noqa: E402
import sjkv.hf  # noqa: E402

REPLAY = os.environ.get("SJKV_REPLAY", "")
SRC = os.environ.get("SJKV_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", "..", ".."))
MODELS = os.path.join(os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "sjkv", "models")
CASES = {
    "smollm2": ("smollm2.gguf", ["q8_0", "kvarn:4/4:tail=0", "sj:4/4:staging=q8_0:tail=128/256",
                                 "sj:3/3:staging=q8_0:tail=128/256"]),
    "gemma3": ("default.gguf", ["q8_0", "kvarn:4/4:tail=0", "sj:4/4:tail=128/256", "sj:3/2t:tail=128/256"]),
}


@pytest.mark.parametrize("case", list(CASES))
def test_the_transformers_cache_agrees_with_the_replay(tmp_path, case):
    name, ARMS = CASES[case]
    MODEL = os.path.realpath(os.path.join(MODELS, name))
    if not REPLAY or not os.path.exists(MODEL):
        pytest.skip("sjkv-replay or the model (scripts/setup) missing")
    traj = str(tmp_path / "t.h5")
    prompt = os.path.join(SRC, "data", "prompts", "demo.txt")
    for cmd in (["record", "--model", MODEL, "--prompt-file", prompt, "--generate", "32", "-o", traj],
                ["score", traj, "--model", MODEL, "--arms", ",".join(ARMS), "--codebook", "reference",
                 "--out", str(tmp_path / "r")]):
        r = subprocess.run([REPLAY, *cmd, "--threads", "2", "-q"], capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
    replay = sjkv.read_results(str(tmp_path / "r"))

    torch.set_num_threads(2)
    model = transformers.AutoModelForCausalLM.from_pretrained(os.path.dirname(MODEL), gguf_file=os.path.basename(MODEL),
                                                              dtype=torch.float32)
    model.config._attn_implementation = "eager"
    hf = sjkv.hf.score_trajectory(model, traj, ["f32"] + ARMS)
    assert len(hf["f32"]["kl"]) == 32 and float(np.max(hf["f32"]["kl"])) == 0.0

    means = {}
    for arm in ARMS:
        h, r = float(np.mean(hf[arm]["kl"])), float(np.mean(replay[arm]["kl"]))
        means[arm] = (h, r)
        assert len(hf[arm]["kl"]) == len(replay[arm]["kl"]) == 32
        assert 0.5 <= h / r <= 2.0, (arm, h, r)
        # the arm stores what the replay's does: its bits at the last position
        assert hf[arm]["bits"]["occupied"] == pytest.approx(float(replay[arm]["bits_occupied"][-1]), abs=0.06), arm
    order_hf = sorted(ARMS, key=lambda a: means[a][0])
    order_replay = sorted(ARMS, key=lambda a: means[a][1])
    assert order_hf == order_replay, means
    print(case, "hf / replay mean KL:", {a: round(h / r, 3) for a, (h, r) in means.items()})
