#!/usr/bin/env python3
r"""Agreement and speed of sjkv-replay's forward pass against llama.cpp (llama-cpp-python).

Both engines run the same token ids (llama.cpp's tokenization of the text, BOS added) on the
same number of threads: llama.cpp with the cache types --type-k/--type-v (default f32), sjkv
with the cache arm --arm (default f32). Reports the mean, median, p99 and max
KL(p_llama.cpp || p_sjkv) in nats over every position's next-token distribution, the
same-top-token rate, and prefill / decode tokens per second of both.

With --baselines and a quantized cache, each engine also runs with an f32 cache (llama.cpp
with the same flash-attention setting), and the script reports what the cache costs each
engine on its own, KL(f32 || quantized) for llama.cpp and for sjkv, next to the cross-engine
KLs. llama.cpp needs flash attention for a quantized V cache; --flash-attn auto turns it on
whenever a cache type is quantized. --rot-disable sets LLAMA_ATTN_ROT_DISABLE=1 (llama.cpp
then stores quantized caches unrotated, like our arms without ":rot"). --fa-pair runs
llama.cpp alone with flash attention on and off at the given (unquantized-V) cache types:
how much a quantized cache amplifies a mere change of summation order.
A measuring instrument only: nothing in the build or the tests needs it.

  python3 scripts/compare-llama-cpp.py --model M.gguf --replay-logits build/bench/replay_logits \
      [--llama-model M-f32.gguf] [--type-k q8_0 --type-v q8_0 --arm q8_0:rot:swa=same] \
      [--baselines] [--rot-disable] [--fa-pair] [--tokens 256] [--threads 2] [--decode 32] [--no-speed]
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile
import time

import numpy as np

TEXT = (
    "The history of the printing press begins in the fifteenth century, when Johannes Gutenberg "
    "combined a screw press with movable metal type and oil-based ink. Before his workshop in "
    "Mainz produced its first books, texts in Europe were copied by hand or printed from carved "
    "wooden blocks, a slow process that kept books rare and expensive. Within fifty years, "
    "printing shops had spread to more than two hundred cities, and millions of volumes were in "
    "circulation. Scholars could compare identical copies of a text, errors could be corrected "
    "in later editions, and ideas travelled faster than ever before. The press changed religion, "
    "science and politics: pamphlets carried arguments to readers who had never owned a book, "
    "scientific results could be checked by distant colleagues, and governments learned to fear "
    "and to use the printed word. Historians still debate how quickly these changes happened and "
    "how much they depended on the technology itself rather than on the merchants, readers and "
    "teachers who adopted it. What is clear is that the cost of a page fell dramatically, that "
    "literacy rose in the following centuries, and that the habit of reading silently and alone "
    "became common among people who would once have listened to a text read aloud. "
    "Today the same questions are asked about computers and networks, which again lower the cost "
    "of copying words and again change who may speak to whom."
)


def log_softmax(x):
    x = x.astype(np.float64)
    m = x.max(axis=-1, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(axis=-1, keepdims=True))


# ggml type ids of the cache types llama.cpp accepts (ggml.h enum ggml_type)
CACHE_TYPES = {"f32": 0, "f16": 1, "q4_0": 2, "q4_1": 3, "q5_0": 6, "q5_1": 7, "q8_0": 8, "iq4_nl": 20, "bf16": 30}


def cache_type(s):
    return int(s) if s.isdigit() else CACHE_TYPES[s]


def type_name(t):
    return next((k for k, v in CACHE_TYPES.items() if v == t), str(t))


def last_logits(llm):
    import llama_cpp
    ptr = llama_cpp.llama_get_logits_ith(llm.ctx, -1)
    return np.ctypeslib.as_array(ptr, shape=(llm.n_vocab(),))


def make_llama(path, n_ctx, batch, a, type_k, type_v, logits_all):
    from llama_cpp import Llama
    if a.rot_disable:
        os.environ["LLAMA_ATTN_ROT_DISABLE"] = "1"  # read when the context's cache is made
    else:
        os.environ.pop("LLAMA_ATTN_ROT_DISABLE", None)
    fa = a.flash_attn == "on" or (a.flash_attn == "auto" and (type_k > 1 or type_v > 1 or
                                                              a.type_k > 1 or a.type_v > 1))
    return Llama(model_path=path, n_ctx=n_ctx, n_batch=batch, n_ubatch=batch, n_threads=a.threads,
                 n_threads_batch=a.threads, logits_all=logits_all, type_k=type_k, type_v=type_v,
                 flash_attn=fa, verbose=False), fa


def llama_logits(path, ids, n_ctx, a, type_k, type_v):
    llm, fa = make_llama(path, n_ctx, a.llama_batch, a, type_k, type_v, True)
    llm.eval(ids)
    out = np.array(llm.scores[:len(ids)], dtype=np.float32)
    del llm
    return out, fa


def sjkv_logits(a, model, arm, idf, outf, n):
    r = subprocess.run([a.replay_logits, model, "--ids-file", idf, "--out", outf, "--threads",
                        str(a.threads), "--arm", arm], capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit("replay_logits failed: " + r.stderr)
    return np.fromfile(outf, dtype=np.float32).reshape(n, -1)


def kl_stats(p_logits, q_logits):
    """KL(p || q) in nats per position and the same-top-token rate."""
    n = p_logits.shape[0]
    V = min(p_logits.shape[1], q_logits.shape[1])
    kl = np.empty(n)
    for i in range(0, n, 32):  # in row chunks: float64 copies of the whole vocabulary are large
        lp, lq = log_softmax(p_logits[i:i + 32, :V]), log_softmax(q_logits[i:i + 32, :V])
        kl[i:i + 32] = (np.exp(lp) * (lp - lq)).sum(axis=-1)
    same = (p_logits[:, :V].argmax(-1) == q_logits[:, :V].argmax(-1)).mean()
    return kl, same


def kl_line(label, p_logits, q_logits):
    kl, same = kl_stats(p_logits, q_logits)
    return (f"{label:<44} mean {kl.mean():.3e}  median {np.median(kl):.3e}  "
            f"p99 {np.quantile(kl, 0.99):.3e}  max {kl.max():.3e}  same top {same:.4f}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True, help="the file sjkv loads (and llama.cpp, unless --llama-model)")
    ap.add_argument("--replay-logits", required=True, help="path of the replay_logits program")
    ap.add_argument("--tokens", type=int, default=256, help="prompt tokens (positions scored)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--decode", type=int, default=32, help="greedy decode steps timed")
    ap.add_argument("--text-file")
    ap.add_argument("--llama-batch", type=int, default=512, help="llama.cpp n_batch = n_ubatch")
    ap.add_argument("--llama-model", help="the file llama.cpp loads for the logits (default --model); e.g. an "
                    "F32 requantization of --model, to compare without llama.cpp's q8 rounding of matmul inputs")
    ap.add_argument("--type-k", type=cache_type, default=0,
                    help="llama.cpp K cache type: a name (f32 f16 q8_0 q4_0 ...) or a ggml type id")
    ap.add_argument("--type-v", type=cache_type, default=0)
    ap.add_argument("--arm", default="f32", help="sjkv cache arm spec (docs/REPLAY.md, Arms)")
    ap.add_argument("--flash-attn", choices=["auto", "on", "off"], default="auto",
                    help="llama.cpp flash attention; auto: on when a cache type is quantized")
    ap.add_argument("--rot-disable", action="store_true", help="LLAMA_ATTN_ROT_DISABLE=1 for llama.cpp")
    ap.add_argument("--baselines", action="store_true",
                    help="also run both engines with an f32 cache and report each cache's own KL")
    ap.add_argument("--no-speed", action="store_true", help="skip the timed runs")
    ap.add_argument("--fa-pair", action="store_true",
                    help="llama.cpp alone: KL between its runs with flash attention on and off (another "
                    "summation order) at the given cache types, next to the cost of the cache; V must not be "
                    "quantized. Shows how a quantized cache amplifies rounding differences")
    a = ap.parse_args()

    from llama_cpp import Llama

    text = open(a.text_file).read() if a.text_file else TEXT
    n_ctx = a.tokens + a.decode + 16
    llama_model = a.llama_model or a.model
    tok = Llama(model_path=llama_model, n_ctx=64, vocab_only=True, verbose=False)
    ids = tok.tokenize(text.encode(), add_bos=True, special=False)
    while len(ids) < a.tokens:  # repeat the text when the tokenizer packs it tightly
        ids += tok.tokenize((" " + text).encode(), add_bos=False, special=False)
    del tok
    ids = ids[: a.tokens]
    n = len(ids)

    if a.fa_pair:
        if a.type_v > 1:
            sys.exit("--fa-pair needs an unquantized V cache (llama.cpp needs flash attention for a quantized V)")
        a.flash_attn = "on"
        on, _ = llama_logits(llama_model, ids, n_ctx, a, a.type_k, a.type_v)
        base, _ = llama_logits(llama_model, ids, n_ctx, a, 0, 0)
        a.flash_attn = "off"
        off, _ = llama_logits(llama_model, ids, n_ctx, a, a.type_k, a.type_v)
        base_off, _ = llama_logits(llama_model, ids, n_ctx, a, 0, 0)
        cache = f"k={type_name(a.type_k)} v={type_name(a.type_v)}"
        print(f"llama.cpp loads {os.path.basename(llama_model)}  positions {n}  threads {a.threads}  "
              f"rotation {'disabled' if a.rot_disable else 'default'}")
        print(kl_line("KL(f32 cache: flash attn on || off)", base, base_off))
        print(kl_line(f"KL({cache}: flash attn on || off)", on, off))
        print(kl_line(f"KL(f32 || {cache}), flash attn on", base, on))
        return

    ref, fa = llama_logits(llama_model, ids, n_ctx, a, a.type_k, a.type_v)
    with tempfile.TemporaryDirectory() as d:
        idf, outf = os.path.join(d, "ids.txt"), os.path.join(d, "logits.f32")
        with open(idf, "w") as f:
            f.write(",".join(map(str, ids)))
        ours = sjkv_logits(a, a.model, a.arm, idf, outf, n)
        quantized = a.type_k > 1 or a.type_v > 1 or a.arm not in ("f32", "")
        if a.baselines and quantized:
            ref32, _ = llama_logits(llama_model, ids, n_ctx, a, 0, 0)
            ours32 = sjkv_logits(a, a.model, "f32", idf, outf, n)
        r2 = None
        if not a.no_speed:
            # timed without --out: only the last position's logits, as llama.cpp's timed run
            r2 = subprocess.run([a.replay_logits, a.model, "--ids-file", idf, "--threads", str(a.threads),
                                 "--decode", str(a.decode), "--arm", a.arm], capture_output=True, text=True)

    cache = f"k={type_name(a.type_k)} v={type_name(a.type_v)}"
    print(f"model {os.path.basename(a.model)}  llama.cpp loads {os.path.basename(llama_model)}  positions {n}  "
          f"threads {a.threads}")
    print(f"llama.cpp cache {cache}  flash_attn {'on' if fa else 'off'}  "
          f"rotation {'disabled' if a.rot_disable else 'default'}  |  sjkv arm {a.arm}")
    print(kl_line("KL(llama.cpp || sjkv)", ref, ours))
    if a.baselines and quantized:
        print(kl_line("KL(llama.cpp f32 || sjkv f32)", ref32, ours32))
        print(kl_line(f"KL(llama.cpp f32 || llama.cpp {cache})", ref32, ref))
        print(kl_line(f"KL(sjkv f32 || sjkv {a.arm})", ours32, ours))
        print(kl_line(f"KL(llama.cpp f32 || sjkv {a.arm})", ref32, ours))
    if r2 is None:
        return

    # Speed on the file given by --model, computing only the last position's logits.
    llm, _ = make_llama(a.model, n_ctx, 512, a, a.type_k, a.type_v, False)
    t0, c0 = time.perf_counter(), time.process_time()
    llm.eval(ids)
    t_prefill, c_prefill = time.perf_counter() - t0, time.process_time() - c0
    tok = int(np.argmax(last_logits(llm)))
    t0, c0 = time.perf_counter(), time.process_time()
    for _ in range(a.decode):
        llm.eval([tok])
        tok = int(np.argmax(last_logits(llm)))
    t_decode, c_decode = time.perf_counter() - t0, time.process_time() - c0

    def timing(what):
        m = re.search(what + r" \d+ tokens: ([\d.]+) s, [\d.]+ tokens/s, cpu ([\d.]+) s", r2.stderr)
        return (float(m.group(1)), float(m.group(2))) if m else (float("nan"), float("nan"))
    ours_prefill, ours_cprefill = timing("prefill")
    ours_decode, ours_cdecode = timing("decode")
    # CPU time (all threads, spinning included) is steadier than wall time on a shared machine.
    print(f"llama.cpp: prefill {n / t_prefill:.1f} tok/s ({c_prefill / n * 1e3:.2f} cpu-ms/token)  "
          f"decode {a.decode / t_decode:.1f} tok/s ({c_decode / max(a.decode, 1) * 1e3:.2f} cpu-ms/token)")
    print(f"sjkv:      prefill {n / ours_prefill:.1f} tok/s ({ours_cprefill / n * 1e3:.2f} cpu-ms/token)  "
          f"decode {a.decode / ours_decode:.1f} tok/s ({ours_cdecode / max(a.decode, 1) * 1e3:.2f} cpu-ms/token)")


if __name__ == "__main__":
    main()
