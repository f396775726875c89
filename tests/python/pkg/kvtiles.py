"""Test data shared by the package tests."""
import numpy as np


def tiles(layers=2, tokens=700, heads=2, dim=128, seed=5):
    """K/V float16 [layers, tokens, heads, dim], keys with a per-channel scale spread, as real keys have."""
    rng = np.random.default_rng(seed)
    scale = np.exp(rng.standard_normal(dim) * 0.7)
    k = (rng.standard_normal((layers, tokens, heads, dim)) * scale).astype(np.float16)
    v = rng.standard_normal((layers, tokens, heads, dim)).astype(np.float16)
    return k, v
