"""sjkv.hf under the third hostile pass (issue 40, items 12 and 13), on a small random-weight
Llama model built in transformers (three layers, head size 128, no download):

- the arm is resolved for the whole model as sjkv-replay resolves it: tier=edge puts the first
  and last layers at 4/4 and the others at the arm's width (each layer once made its own
  one-layer arm, so every layer was an edge); wide= and layers= choose the layers they name;
  a layer index beyond the model is a ValueError, as sjkv-replay refuses it (exit 1);
- a plain forward (transformers' default, gradients on) goes through the cache;
- score() refuses a prompt length that leaves no generated token with ValueError naming it."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
import sjkv  # noqa: E402
import sjkv.hf  # noqa: E402


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(vocab_size=96, hidden_size=256, intermediate_size=256, num_hidden_layers=3,
                                   num_attention_heads=2, num_key_value_heads=1, head_dim=128,
                                   max_position_embeddings=512)
    m = transformers.LlamaForCausalLM(cfg).to(torch.float32)
    m.config._attn_implementation = "eager"
    return m


def run(model, arm, n=40):
    cache = sjkv.hf.SjkvCache(model.config, arm, n_ctx=n, n_ubatch=64)
    ids = torch.arange(n).remainder(96).unsqueeze(0)
    with torch.no_grad():
        model(input_ids=ids, use_cache=True, **{sjkv.hf._cache_arg(model): cache})
    return cache, [layer.store.storage for layer in cache.layers]


def test_tier_edge_is_the_replays_first_and_last_layers(model):
    cache, names = run(model, "sj:3/3:tier=edge")
    assert names[0].startswith("sj:4/4") and names[2].startswith("sj:4/4"), names
    assert names[1].startswith("sj:3/3"), names
    assert all(layer.store.n_stored == 40 for layer in cache.layers)


def test_wide_and_layers_choose_the_layers_they_name(model):
    _, names = run(model, "sj:3/3:wide=1")
    assert names[1].startswith("sj:4/4") and names[0].startswith("sj:3/3") and names[2].startswith("sj:3/3"), names
    _, names = run(model, "sj:3/3:layers=1")
    assert names[0] == "f16" and names[2] == "f16" and names[1].startswith("sj:3/3"), names


@pytest.mark.parametrize("arm", ["sj:4/4:layers=5", "sj:3/3:wide=5", "sj:3/3:layers=0+3"])
def test_a_layer_beyond_the_model_is_refused(model, arm):
    with pytest.raises(ValueError, match=r"(layers|wide)=\d: not a full-attention layer"):
        sjkv.hf.SjkvCache(model.config, arm, n_ctx=40)


def test_arm_layers_come_from_one_arm():
    arm = sjkv.Arm("sj:3/3:tier=edge", [True, False, True, True])
    with pytest.raises(ValueError, match="layer 4"):
        arm.layer(4, 2, 1, 128, 64)
    with pytest.raises(ValueError, match="sliding-window"):
        arm.layer(1, 2, 1, 128, 64)
    layers = [arm.layer(i, 2, 1, 128, 64, 64) for i in (0, 2, 3)]
    x = np.zeros((8, 1, 128), np.float32)
    for layer in layers:
        layer.append(0, x, x)
    assert [layer.storage.split(":")[1] for layer in layers] == ["4/4", "3/3", "4/4"]


def test_a_plain_forward_with_gradients_goes_through_the_cache(model):
    assert any(p.requires_grad for p in model.parameters())
    cache = sjkv.hf.SjkvCache(model.config, "sj:4/4", n_ctx=40, n_ubatch=64)
    ids = torch.arange(20).unsqueeze(0)
    out = model(input_ids=ids, use_cache=True, **{sjkv.hf._cache_arg(model): cache})
    assert torch.isfinite(out.logits).all()
    assert cache.layers[0].store.n_stored == 20


def test_score_refuses_a_prompt_length_without_generated_tokens(model):
    tokens = list(range(12))
    for bad in (0, 12, 13, 40, -1):
        with pytest.raises(ValueError, match="prompt_tokens"):
            sjkv.hf.score(model, tokens, bad, ["f32"])
    with pytest.raises(ValueError, match="prompt_tokens"):
        sjkv.hf.score(model, tokens, None, ["f32"])
    res = sjkv.hf.score(model, tokens, 8, ["f32", "sj:3/3:tier=edge"])
    assert len(res["f32"]["kl"]) == 4 and float(np.max(res["f32"]["kl"])) == 0.0
