#!/usr/bin/env python3
"""Writes the llama.cpp state files of tests/golden/llama_state/ (run once; they are committed).

Each file is the KV cache llama.cpp holds after a prefill of the first tokens of a text every
Debian 12 system has, saved by llama.cpp itself: a sequence state ('ggsq',
llama_state_seq_save_file) or a full context state ('ggsn', llama_state_save_file), with an f16
or f32 cache, flash attention on or off, for both models scripts/setup installs. The test
(tests/replay/test_llama_state_fixtures.cpp) imports each with sjkv's llama.cpp state reader and
checks that its K/V equal what sjkv's own forward pass computes for the file's tokens, so a
change of llama.cpp's state layout is caught. A hybrid model's files (qwen35: Gated DeltaNet
layers beside full attention) also hold its recurrent state after the KV cache; the test reads
both and checks them against each other and against the model's weights.

llama.cpp runs on an F32 copy of each model (every tensor dequantized by llama.cpp's own
quantize tool, ftype ALL_F32), so that its matrix products use exactly the weights sjkv
dequantizes at load: on the quantized file llama.cpp rounds the activations of every matrix
product to 8 bits, and its K/V then differ from any f32 forward pass by 1-10% (docs/REPLAY.md,
"Two references for the weights"). The copies go to a temporary folder and are removed.

llama-cpp-python is a measuring instrument here, never a dependency of the build or the tests:

    CMAKE_ARGS="-DGGML_NATIVE=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF" \\
      pip install llama-cpp-python==0.3.36
    scripts/make-llama-state-fixtures.py tests/golden/llama_state [--only FILE...]

It writes the files and their README (what each is, the command, the SHA-256 of each file,
of each model and of the text). --only rewrites the named files alone and keeps the README's
rows of the others.
"""
import argparse
import ctypes
import hashlib
import os
import re
import sys
import tempfile

TEXT = "/usr/share/common-licenses/GPL-3"
TEXT_SHA256 = "3972dc9744f6499f0f9b2dbf76696f2ae7ad8af9b23dde66d6af86c9dfb36986"
# file name, model (under the models folder), cache type, flash attention, kind, tokens. Each
# model has one sequence state and one full state; between them every cache type and both flash
# settings. The first is README's worked example: 128 tokens, so that records seal past a sink of 64.
# A model named "test:NAME" is the random-weight test model NAME of scripts/make-test-models.py
# (already F32; --test-models says where it was written): the architectures whose real weights
# cannot be fetched, so that the importer is checked on their layouts too (Gemma 2's sliding
# and full sections, Qwen 3's head size 128 from key_length, Phi-3's 96, Qwen 3.5's hybrid
# memory: the full-attention layers' cache with iM-RoPE cell records, then the recurrent state;
# Gemma 4's full layers of 512-value heads beside sliding ones of 128, and gemma4-e's shared-KV
# layers, which store nothing).
FIXTURES = [
    ("gemma3-f16-fa.ggsq", "default.gguf", "f16", True, "seq", 128),
    ("gemma3-f32-nofa.ggsn", "default.gguf", "f32", False, "full", 64),
    ("smollm2-f32-nofa.ggsq", "smollm2.gguf", "f32", False, "seq", 64),
    ("smollm2-f16-fa.ggsn", "smollm2.gguf", "f16", True, "full", 64),
    ("gemma2-f16-nofa.ggsq", "test:gemma2", "f16", False, "seq", 64),
    ("qwen3-f32-fa.ggsn", "test:qwen3", "f32", True, "full", 64),
    ("phi3-f16-fa.ggsq", "test:phi3", "f16", True, "seq", 64),
    ("qwen35-f16-fa.ggsq", "test:qwen35", "f16", True, "seq", 64),
    ("qwen35-f32-nofa.ggsn", "test:qwen35", "f32", False, "full", 64),
    ("gemma4-f16-fa.ggsq", "test:gemma4", "f16", True, "seq", 64),
    ("gemma4-e-f32-nofa.ggsn", "test:gemma4-e", "f32", False, "full", 64),
]


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def models_dir():
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "sjkv", "models")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out", help="folder to write (tests/golden/llama_state)")
    ap.add_argument("--test-models", default="build/test-models",
                    help="where scripts/make-test-models.py wrote the test models (default build/test-models)")
    ap.add_argument("--only", nargs="+", metavar="FILE", help="write only these fixtures (%s)"
                    % ", ".join(f[0] for f in FIXTURES))
    args = ap.parse_args()
    known = [f[0] for f in FIXTURES]
    for name in args.only or []:
        if name not in known:
            sys.exit("--only: no fixture named %s (%s)" % (name, ", ".join(known)))
    try:
        import llama_cpp
    except ImportError:
        sys.exit("llama-cpp-python is not installed (see this script's docstring)")
    if sha256(TEXT) != TEXT_SHA256:
        sys.exit(TEXT + " is not the text the fixtures were made from (SHA-256 differs)")
    text = open(TEXT, "rb").read()
    os.makedirs(args.out, exist_ok=True)
    rows = []
    model_sha = {}
    tmp = tempfile.TemporaryDirectory(prefix="sjkv-f32-models-")
    f32_copy = {}
    for name, model, cache, fa, kind, n_tokens in FIXTURES:
        if args.only and name not in args.only:
            continue
        test_model = model.startswith("test:")
        src = (os.path.join(args.test_models, model[5:] + ".gguf") if test_model
               else os.path.join(models_dir(), model))
        if not os.path.exists(src):
            sys.exit(src + " is missing: run " + ("scripts/make-test-models.py" if test_model else "scripts/setup"))
        if test_model and model not in f32_copy:
            model_sha[model] = sha256(src)
            f32_copy[model] = src  # its tensors are F32 already
        if model not in f32_copy:
            model_sha[model] = sha256(src)
            f32_copy[model] = os.path.join(tmp.name, model)
            p = llama_cpp.llama_model_quantize_default_params()
            p.ftype = 0  # LLAMA_FTYPE_ALL_F32
            p.allow_requantize = True
            if llama_cpp.llama_model_quantize(src.encode(), f32_copy[model].encode(), p) != 0:
                sys.exit("llama_model_quantize failed for " + src)
        path = f32_copy[model]
        ggml_type = {"f32": 0, "f16": 1}[cache]
        llm = llama_cpp.Llama(model_path=path, n_ctx=256, n_batch=128, n_ubatch=128, n_threads=2,
                              type_k=ggml_type, type_v=ggml_type, flash_attn=fa, verbose=False)
        tokens = llm.tokenize(text, add_bos=True, special=False)[:n_tokens]
        llm.eval(tokens)
        arr = (llama_cpp.llama_token * len(tokens))(*tokens)
        dest = os.path.join(args.out, name)
        if kind == "seq":
            n = llama_cpp.llama_state_seq_save_file(llm.ctx, dest.encode(), 0, arr, len(tokens))
            if n == 0:
                sys.exit("llama_state_seq_save_file failed for " + dest)
        else:
            if not llama_cpp.llama_state_save_file(llm.ctx, dest.encode(), arr, len(tokens)):
                sys.exit("llama_state_save_file failed for " + dest)
        rows.append(("`%s`" % name, model, cache, "on" if fa else "off", kind, str(len(tokens)), str(os.path.getsize(dest)),
                     "`%s`" % sha256(dest)))
        print("wrote %s (%d bytes)" % (dest, os.path.getsize(dest)))
        del llm
    readme = os.path.join(args.out, "README.md")
    if args.only:
        # keep the rows and model hashes of the fixtures not rewritten, in FIXTURES order
        old_rows, old_sha = {}, {}
        for line in open(readme).read().splitlines():
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if line.startswith("| `") and len(cells) == 8:
                old_rows[cells[0].strip("`")] = tuple(cells)
            if line.startswith("Models before the F32 copy"):
                old_sha.update(re.findall(r"`([^`]+)` `([0-9a-f]{64})`", line))
        new_rows = {r[0].strip("`"): r for r in rows}
        rows = [new_rows.get(n) or old_rows[n] for n in known if n in new_rows or n in old_rows]
        old_sha.update(model_sha)
        model_sha = old_sha
    with open(readme, "w") as f:
        f.write("# llama.cpp state files\n\n"
                "KV caches saved by llama.cpp itself (llama-cpp-python %s) after a prefill of the first 64 or 128 tokens\n"
                "of `%s` (SHA-256 `%s`), with F32 copies (llama.cpp's quantize tool, ftype ALL_F32)\n"
                "of the models scripts/setup installs, so that llama.cpp multiplies the weights sjkv uses, and with\n"
                "the random-weight test models `test:NAME` of scripts/make-test-models.py (F32 already;\n"
                "tests/golden/arch/models.sha256).\n"
                "`tests/replay/test_llama_state_fixtures.cpp` imports each with sjkv's reader and checks its K/V\n"
                "against sjkv's own forward pass over the file's tokens. The hybrid model's files (`qwen35-*`) also\n"
                "hold its recurrent state after the KV cache: the test reads both, compares the sequence and full\n"
                "files with each other and the first layer's conv state with the model's weights. Made with\n\n"
                "    scripts/make-llama-state-fixtures.py tests/golden/llama_state [--only FILE...]\n\n"
                "| file | model | cache | flash attention | state | tokens | bytes | SHA-256 |\n"
                "|---|---|---|---|---|--:|--:|---|\n" % (llama_cpp.__version__, TEXT, TEXT_SHA256))
        for r in rows:
            f.write("| %s |\n" % " | ".join(r))
        f.write("\nModels before the F32 copy (SHA-256): %s.\n" % ", ".join("`%s` `%s`" % kv for kv in sorted(model_sha.items())))


if __name__ == "__main__":
    main()
