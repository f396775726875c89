"""sjkv.hf: a transformers cache whose full-attention layers store K/V through sjkv's arms.

Each full-attention layer keeps its keys and values in an sjkv-replay arm (docs/REPLAY.md's
grammar: "q8_0", "kvarn:4/4:tail=0", "sj:4/4:staging=q8_0", ...), the replay's own C++ store:
the staging ring, the journal policy's step at each forward call (a ubatch), sealed records and
the exact tail. Attention then reads every stored row decoded, as the replay's fused attention
reads them. Sliding-window layers keep transformers' own cache, as the replay keeps them f16.

    from transformers import AutoModelForCausalLM
    import sjkv.hf
    model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32)
    kl = sjkv.hf.score(model, tokens, prompt_tokens, ["q8_0", "sj:4/4:staging=q8_0"])

Needs torch and transformers (scripts/setup installs them for the tests).
"""
from __future__ import annotations

import inspect
import operator
from typing import Dict, List, Optional, Sequence, Union

import numpy as np
import torch
from transformers.cache_utils import Cache, DynamicCache, DynamicLayer, DynamicSlidingWindowLayer

from . import _sjkv


# transformers' Llama-family attention rotates halves (x_j with x_{j + D/2}); llama.cpp's
# GGUF of those models keeps adjacent pairs (its converter permutes the Q and K weights, and
# transformers undoes that when it loads a GGUF). An engine's cache holds llama.cpp's order,
# and the block formats and the codec's Hadamard see the channels in that order, so keys are
# stored interleaved and read back in transformers' order. Values are not rotated: no change.
_ADJACENT_PAIR_MODELS = {"llama", "mistral"}


def _interleave(x: np.ndarray) -> np.ndarray:
    """[..., D] halves -> adjacent pairs: out[2j + h] = x[h * D/2 + j]."""
    d = x.shape[-1]
    return np.ascontiguousarray(x.reshape(*x.shape[:-1], 2, d // 2).swapaxes(-1, -2).reshape(x.shape))


def _deinterleave(x: np.ndarray) -> np.ndarray:
    d = x.shape[-1]
    return np.ascontiguousarray(x.reshape(*x.shape[:-1], d // 2, 2).swapaxes(-1, -2).reshape(x.shape))


class SjkvLayer(DynamicLayer):
    """One full-attention layer stored through an sjkv arm (batch size 1).

    arm: an sjkv.Arm made for the whole model (the replay's per-layer choices: tier=edge, wide=,
    layers=), or a spec string for a model of this one layer.
    adjacent_pairs: store keys in llama.cpp's channel order (Llama-family models, see above)."""

    def __init__(self, arm: Union[str, "_sjkv.Arm"], layer: int, n_head: int, n_head_kv: int, head_dim: int,
                 n_ctx: int, n_ubatch: int = 512, adjacent_pairs: bool = False):
        super().__init__()
        if isinstance(arm, str):
            self.store = _sjkv.ArmLayer(arm, layer, n_head, n_head_kv, head_dim, n_ctx, n_ubatch)
        else:
            self.store = arm.layer(layer, n_head, n_head_kv, head_dim, n_ctx, n_ubatch)
        self.adjacent_pairs = adjacent_pairs

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        if key_states.shape[0] != 1:
            raise ValueError("sjkv.hf caches hold one sequence (batch size 1)")
        # [1, heads, n, dim] -> [n, heads, dim], float32 as the arms take them; detached, as a
        # forward outside torch.no_grad() hands over states that require grad
        k = key_states[0].detach().transpose(0, 1).to(torch.float32).contiguous().cpu().numpy()
        v = value_states[0].detach().transpose(0, 1).to(torch.float32).contiguous().cpu().numpy()
        if self.adjacent_pairs:
            k = _interleave(k)
        self.store.append(self.store.n_stored, k, v)
        K, V = self.store.rows()
        if self.adjacent_pairs:
            K = _deinterleave(K)
        self.keys = torch.from_numpy(K).transpose(0, 1).unsqueeze(0).to(key_states.dtype)
        self.values = torch.from_numpy(V).transpose(0, 1).unsqueeze(0).to(value_states.dtype)
        return self.keys, self.values

    def crop(self, tokens_to_remove: int) -> None:
        raise NotImplementedError("an sjkv arm keeps every position it stored")


class SjkvCache(Cache):
    """A transformers Cache: full-attention layers through the arm, sliding layers as transformers'.

    n_ctx: the most positions the sequence will reach (the SJ arms reserve for it);
    n_ubatch: the largest ubatch the caller runs (the staging ring's margin).
    """

    def __init__(self, config, arm: str, n_ctx: int, n_ubatch: int = 512):
        text = config.get_text_config() if hasattr(config, "get_text_config") else config
        n_layers = text.num_hidden_layers
        n_head = text.num_attention_heads
        n_head_kv = getattr(text, "num_key_value_heads", None) or n_head
        head_dim = getattr(text, "head_dim", None) or text.hidden_size // n_head
        types = getattr(text, "layer_types", None) or ["full_attention"] * n_layers
        pairs = getattr(text, "model_type", "") in _ADJACENT_PAIR_MODELS
        # One arm for the model, as sjkv-replay runs it: it refuses layers=/wide= naming a layer
        # the model lacks (ValueError), and picks tier=edge's first and last layers among all.
        model_arm = _sjkv.Arm(arm, [t == "full_attention" for t in types])
        layers = []
        for i, t in enumerate(types):
            if t == "full_attention":
                layers.append(SjkvLayer(model_arm, i, n_head, n_head_kv, head_dim, n_ctx, n_ubatch, adjacent_pairs=pairs))
            else:
                layers.append(DynamicSlidingWindowLayer(sliding_window=text.sliding_window))
        super().__init__(layers=layers)
        self.arm = arm

    def bits(self) -> Dict[str, float]:
        """Bits per value over the arm's layers now (occupied, allocated), as the replay counts them."""
        b = [l.store.bits() for l in self.layers if isinstance(l, SjkvLayer)]
        return {k: float(np.mean([x[k] for x in b])) for k in ("occupied", "allocated")} if b else {}


def _cache_arg(model) -> str:
    """The forward's name for the cache: `cache` (transformers 5.x, which deprecates the old name
    and drops it in 5.40), else `past_key_values`."""
    return "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"


def _log_probs(model, cache, tokens: Sequence[int], prompt_tokens: int, ubatch: int) -> List[torch.Tensor]:
    """Log-probabilities (float64) of every scored position: the prompt in ubatches, then one token
    at a time, as sjkv-replay score runs a trajectory."""
    ids = torch.tensor([list(tokens)], dtype=torch.long)
    kw = {_cache_arg(model): cache}
    out = []
    with torch.no_grad():
        logits = None
        for p0 in range(0, prompt_tokens, ubatch):
            p1 = min(prompt_tokens, p0 + ubatch)
            logits = model(input_ids=ids[:, p0:p1], use_cache=True, **kw,
                           cache_position=torch.arange(p0, p1)).logits
        out.append(torch.log_softmax(logits[0, -1].to(torch.float64), dim=-1))
        for p in range(prompt_tokens, len(tokens) - 1):
            logits = model(input_ids=ids[:, p:p + 1], use_cache=True, **kw,
                           cache_position=torch.arange(p, p + 1)).logits
            out.append(torch.log_softmax(logits[0, -1].to(torch.float64), dim=-1))
    return out


def score(model, tokens: Sequence[int], prompt_tokens: int, arms: Sequence[str], ubatch: int = 512,
          n_ctx: Optional[int] = None) -> Dict[str, Dict[str, object]]:
    """KL(f32 cache || arm) at every generated position of `tokens` (prompt, then the generated
    tokens), each arm against this engine's own f32-cache run, as sjkv-replay score scores a
    trajectory: per arm the KL array, whether the top token agrees, and the arm's bits.

    prompt_tokens: 1 to len(tokens) - 1 (a trajectory's prompt, then at least one generated token)."""
    try:
        prompt_tokens = operator.index(prompt_tokens)
    except TypeError:
        raise ValueError("prompt_tokens must be an integer (got %r)" % (prompt_tokens,)) from None
    if not 1 <= prompt_tokens < len(tokens):
        raise ValueError("prompt_tokens must be in [1, %d] for %d tokens (got %d): the prompt, then at least one "
                         "generated token" % (len(tokens) - 1, len(tokens), prompt_tokens))
    if not 1 <= ubatch <= 65536:  # sjkv-replay's --ubatch
        raise ValueError("ubatch must be in [1, 65536] (got %r)" % (ubatch,))
    n_ctx = n_ctx or len(tokens)
    if n_ctx < len(tokens):
        raise ValueError("n_ctx must be at least len(tokens), %d (got %d)" % (len(tokens), n_ctx))
    ref = _log_probs(model, DynamicCache(config=model.config), tokens, prompt_tokens, ubatch)
    result = {}
    for arm in arms:
        cache = SjkvCache(model.config, arm, n_ctx=n_ctx, n_ubatch=ubatch)
        got = _log_probs(model, cache, tokens, prompt_tokens, ubatch)
        kl = np.array([float(torch.sum(torch.exp(r) * (r - g))) for r, g in zip(ref, got)])
        same = np.array([int(torch.argmax(r)) == int(torch.argmax(g)) for r, g in zip(ref, got)])
        result[arm] = {"kl": np.maximum(kl, 0.0), "same_top": same, "bits": cache.bits()}
    return result


def score_trajectory(model, path: str, arms: Sequence[str]) -> Dict[str, Dict[str, object]]:
    """score() on a trajectory file of sjkv-replay record: its tokens, prompt length and ubatch.
    A trajectory of several segments (version 3: turns, answers, idle steps) is refused with
    ValueError: score() runs one prompt and its generation only."""
    t = _sjkv.read_trajectory(path)
    if len(t["segments"]) > 2:
        raise ValueError("%s: a trajectory of %d segments (turns, answers or idle steps); sjkv.hf.score runs one "
                         "prompt and its generation only" % (path, len(t["segments"])))
    return score(model, list(t["tokens"]), int(t["prompt_tokens"]), arms, ubatch=int(t["settings"]["ubatch"]))
