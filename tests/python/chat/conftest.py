"""Fixtures for sjkv.chat's tests: the module loaded from the source tree (it is pure Python,
so the compiled package is not needed), the project's Gemma template, and SmolLM2's own chat
template read from the installed GGUF."""
import importlib.util
import os
import struct

import pytest

pytest.importorskip("jinja2")

SRC = os.environ.get("SJKV_SOURCE_DIR") or os.path.join(os.path.dirname(__file__), "..", "..", "..")
CHAT_PY = os.path.join(SRC, "python", "sjkv", "chat.py")
GEMMA_TEMPLATE = os.path.join(SRC, "data", "templates", "gemma3-turns.jinja")


@pytest.fixture(scope="session")
def chat():
    spec = importlib.util.spec_from_file_location("sjkv_chat_under_test", CHAT_PY)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="session")
def gemma_template():
    with open(GEMMA_TEMPLATE, encoding="utf-8") as f:
        return f.read()


def _models_dir():
    d = os.environ.get("SJKV_MODEL_DIR")
    if d:
        return d
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "sjkv", "models")


# GGUF metadata value types (the GGUF spec): fixed sizes, 8 = string, 9 = array.
_FIXED = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}


def gguf_string(path, wanted):
    """The string value of metadata key `wanted` in a GGUF file (version 2 or 3), or None.
    Reads the key/value section only, so no gguf package is needed."""
    with open(path, "rb") as f:
        def u32():
            return struct.unpack("<I", f.read(4))[0]

        def u64():
            return struct.unpack("<Q", f.read(8))[0]

        def string():
            return f.read(u64())

        def skip(t):
            if t == 8:
                f.seek(u64(), 1)
            elif t == 9:
                inner, n = u32(), u64()
                if inner in _FIXED:
                    f.seek(n * _FIXED[inner], 1)
                else:
                    for _ in range(n):
                        skip(inner)
            else:
                f.seek(_FIXED[t], 1)

        if f.read(4) != b"GGUF" or u32() not in (2, 3):
            raise ValueError(f"{path} is not a GGUF file of version 2 or 3")
        u64()  # tensors
        for _ in range(u64()):
            key = string().decode("utf-8")
            t = u32()
            if key == wanted and t == 8:
                return string().decode("utf-8")
            skip(t)
    return None


@pytest.fixture(scope="session")
def smollm2_template():
    path = os.environ.get("SJKV_SMOLLM2_GGUF") or os.path.join(_models_dir(), "smollm2.gguf")
    if not os.path.exists(path):
        pytest.skip(f"no SmolLM2 GGUF at {path} (scripts/setup installs it)")
    text = gguf_string(path, "tokenizer.chat_template")
    assert text, f"{path} has no tokenizer.chat_template"
    return text
