#!/usr/bin/env python3
"""Make the llama.cpp logit fixtures of tests/golden/arch/ from the test models.

A measuring instrument run once by hand, never by the build or the tests. It needs
llama-cpp-python (which builds llama.cpp from its own source) in a separate virtual
environment, and the models of scripts/make-test-models.py:

  python3 scripts/make-test-models.py --out MODELS --check tests/golden/arch/models.sha256
  VENV/bin/python scripts/make-arch-fixtures.py --models MODELS --out tests/golden/arch [--only NAME...]

For each fixture llama.cpp evaluates n_tokens ids drawn uniformly from [0, n_vocab) with the
generator of make-test-models.py (seeded by the fixture's name), in one context of n_ctx cells
with an F32 KV cache, flash attention off, batches of 512, 2 threads, and logits for every
position; the file keeps the rows of the positions listed below. It then checks that every
logit is finite and that neighbouring positions' distributions differ clearly, and prints
the logit std and KL(p_i || p_i+1) it measured.

File (little-endian): char magic[8] "SJKVLGT1"; uint32 n_vocab, n_ctx, n_tokens, n_rows;
char model[32] (NUL padded); int32 tokens[n_tokens]; n_rows x { uint32 position;
float32 logits[n_vocab] }.
"""
import argparse
import hashlib
import importlib.util
import os
import struct
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
spec = importlib.util.spec_from_file_location("make_test_models", os.path.join(HERE, "make-test-models.py"))
mtm = importlib.util.module_from_spec(spec)
spec.loader.exec_module(mtm)

TOKEN_SEED = 7


def span(a, b):
    return list(range(a, b))


# fixture: model, n_ctx, n_tokens, positions kept. phi3 at n_ctx 8192 (> its original context
# 4096) runs with the long rope factors, phi3-short at 2048 with the short ones.
FIXTURES = {
    "qwen2":      ("qwen2",   8192, 4112, span(0, 64) + span(4096, 4112)),
    "qwen3":      ("qwen3",   8192, 4112, span(0, 64) + span(4096, 4112)),
    "qwen2-yarn": ("qwen2-yarn", 8192, 4112, span(0, 64) + span(4096, 4112)),
    "qwen3-yarn": ("qwen3-yarn", 8192, 4112, span(0, 64) + span(4096, 4112)),
    "llama3":     ("llama3",  8192, 4112, span(0, 64) + span(4096, 4112)),
    "mistral":    ("mistral", 8192, 4112, span(0, 64) + span(4096, 4112)),
    "gemma2":     ("gemma2",  8192, 4112, span(0, 64) + span(4096, 4112)),
    "phi3":       ("phi3",    8192, 4112, span(0, 64) + span(4096, 4112)),
    "phi3-short": ("phi3",    2048, 1040, span(0, 64) + span(1024, 1040)),
    "qwen3moe":   ("qwen3moe", 8192, 4112, span(0, 64) + span(4096, 4112)),
    "mixtral":    ("mixtral",  8192, 4112, span(0, 64) + span(4096, 4112)),
    "qwen3moe-ties": ("qwen3moe-ties", 8192, 4112, span(0, 64) + span(4096, 4112)),
    "qwen3moe-yarn": ("qwen3moe-yarn", 8192, 4112, span(0, 64) + span(4096, 4112)),
    "qwen35":     ("qwen35",    8192, 4112, span(0, 64) + span(4096, 4112)),
    "qwen35moe":  ("qwen35moe", 8192, 4112, span(0, 64) + span(4096, 4112)),
    "gemma4":     ("gemma4",    8192, 4112, span(0, 64) + span(4096, 4112)),
    "gemma4-e":   ("gemma4-e",  8192, 4112, span(0, 64) + span(4096, 4112)),
    "gemma4moe":  ("gemma4moe", 8192, 4112, span(0, 64) + span(4096, 4112)),
    "gpt-oss":    ("gpt-oss",   8192, 4112, span(0, 64) + span(4096, 4112)),
    "gpt-oss-mxfp4": ("gpt-oss-mxfp4", 8192, 4112, span(0, 64) + span(4096, 4112)),
    "gpt-oss-mxfp4-f32": ("gpt-oss-mxfp4-f32", 8192, 4112, span(0, 64) + span(4096, 4112)),
}

MAGIC = b"SJKVLGT1"


def token_ids(fixture, n, n_vocab):
    """n ids uniform in [0, n_vocab): the top bits of a 64-bit uniform times n_vocab."""
    key = mtm.stream_key(TOKEN_SEED, "tokens/" + fixture)
    with np.errstate(over="ignore"):
        state = np.uint64(key) + np.arange(1, n + 1, dtype=np.uint64) * np.uint64(mtm.GAMMA)
        x = mtm._mix(state)
    return [(int(v) * n_vocab) >> 64 for v in x]


def log_softmax(x):
    x = x.astype(np.float64)
    m = x.max(axis=-1, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(axis=-1, keepdims=True))


def run(path, n_ctx, ids, threads):
    import llama_cpp
    from llama_cpp import Llama
    f32 = 0  # GGML_TYPE_F32
    llm = Llama(model_path=path, n_ctx=n_ctx, n_batch=512, n_ubatch=512, n_threads=threads,
                n_threads_batch=threads, logits_all=True, type_k=f32, type_v=f32, flash_attn=False,
                verbose=False)
    n_vocab = llm.n_vocab()
    llm.eval(ids)
    out = np.array(llm.scores[:len(ids)], dtype=np.float32)
    del llm
    return out, n_vocab, llama_cpp.__version__


def write_fixture(path, model, n_vocab, n_ctx, ids, rows, logits):
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(MAGIC)
        f.write(struct.pack("<4I", n_vocab, n_ctx, len(ids), len(rows)))
        f.write(model.encode().ljust(32, b"\0"))
        f.write(np.asarray(ids, dtype="<i4").tobytes())
        for p in rows:
            f.write(struct.pack("<I", p))
            f.write(logits[p].astype("<f4").tobytes())
    os.replace(tmp, path)


def stats(logits, rows):
    lp = log_softmax(logits[rows])
    p = np.exp(lp)
    kl = [float((p[i] * (lp[i] - lp[i + 1])).sum()) for i in range(len(rows) - 1) if rows[i + 1] == rows[i] + 1]
    ent = -(p * lp).sum(-1)
    return dict(std=float(logits[rows].std(axis=-1).mean()), absmax=float(np.abs(logits[rows]).max()),
                kl_median=float(np.median(kl)), kl_min=float(np.min(kl)), entropy=float(ent.mean()))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", required=True, help="directory of the NAME.gguf files of make-test-models.py")
    ap.add_argument("--out", required=True, help="directory for NAME.logits")
    ap.add_argument("--only", nargs="+", metavar="FIXTURE", help="only these (%s)" % ", ".join(FIXTURES))
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    names = a.only or list(FIXTURES)
    bad = [n for n in names if n not in FIXTURES]
    if bad:
        ap.error("unknown fixture %s" % ", ".join(bad))
    if importlib.util.find_spec("llama_cpp") is None:
        sys.exit("make-arch-fixtures.py: llama-cpp-python is missing; run this with the Python of its venv")
    os.makedirs(a.out, exist_ok=True)
    failed = False
    for name in names:
        model, n_ctx, n_tokens, rows = FIXTURES[name]
        path = os.path.join(a.models, model + ".gguf")
        n_vocab = mtm.MODELS[model]["n_vocab"]
        ids = token_ids(name, n_tokens, n_vocab)
        logits, n_vocab_llama, version = run(path, n_ctx, ids, a.threads)
        if n_vocab_llama != n_vocab:
            sys.exit("%s: llama.cpp reports %d tokens, the table %d" % (name, n_vocab_llama, n_vocab))
        if not np.isfinite(logits).all():
            print("%s: llama.cpp gave non-finite logits" % name)
            failed = True
            continue
        out = os.path.join(a.out, name + ".logits")
        write_fixture(out, model, n_vocab, n_ctx, ids, rows, logits)
        s = stats(logits, rows)
        digest = hashlib.sha256(open(out, "rb").read()).hexdigest()
        print("%-10s llama-cpp-python %s: logit std %.2f, max |logit| %.1f, entropy %.2f nats, "
              "KL(p_i||p_i+1) median %.3f min %.3f; %s %d bytes sha256 %s"
              % (name, version, s["std"], s["absmax"], s["entropy"], s["kl_median"], s["kl_min"], out,
                 os.path.getsize(out), digest))
        if s["kl_min"] < 1e-2:
            print("%s: neighbouring positions too alike (KL %.2e)" % (name, s["kl_min"]))
            failed = True
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
