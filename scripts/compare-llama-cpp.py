#!/usr/bin/env python3
"""Agreement and speed of sjkv-replay's forward pass against llama.cpp (llama-cpp-python).

Both engines run the same token ids (llama.cpp's tokenization of the text, BOS added) with an
f32 KV cache (llama.cpp type_k = type_v = 0) on the same number of threads. Reports the mean,
median and max KL(p_llama.cpp || p_sjkv) in nats over every position's next-token
distribution, the same-top-token rate, and prefill / decode tokens per second of both.
A measuring instrument only: nothing in the build or the tests needs it.

  python3 scripts/compare-llama-cpp.py --model M.gguf --replay-logits build/bench/replay_logits \
      [--tokens 256] [--threads 2] [--decode 32] [--text-file F]
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


def last_logits(llm):
    import llama_cpp
    ptr = llama_cpp.llama_get_logits_ith(llm.ctx, -1)
    return np.ctypeslib.as_array(ptr, shape=(llm.n_vocab(),))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True)
    ap.add_argument("--replay-logits", required=True, help="path of the replay_logits program")
    ap.add_argument("--tokens", type=int, default=256, help="prompt tokens (positions scored)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--decode", type=int, default=32, help="greedy decode steps timed")
    ap.add_argument("--text-file")
    ap.add_argument("--llama-batch", type=int, default=512, help="llama.cpp n_batch = n_ubatch")
    ap.add_argument("--llama-model", help="the file llama.cpp loads (default --model); e.g. an F32 "
                    "requantization of --model, to compare the graphs without llama.cpp's activation quantization")
    ap.add_argument("--type-k", type=int, default=0, help="llama.cpp cache type (0 f32, 1 f16, 8 q8_0, 2 q4_0)")
    ap.add_argument("--type-v", type=int, default=0)
    a = ap.parse_args()

    from llama_cpp import Llama

    text = open(a.text_file).read() if a.text_file else TEXT
    n_ctx = a.tokens + a.decode + 16
    llm = Llama(model_path=a.llama_model or a.model, n_ctx=n_ctx, n_batch=a.llama_batch, n_ubatch=a.llama_batch, n_threads=a.threads,
                n_threads_batch=a.threads, logits_all=True, type_k=a.type_k, type_v=a.type_v,
                verbose=False)
    ids = llm.tokenize(text.encode(), add_bos=True, special=False)
    while len(ids) < a.tokens:  # repeat the text when the tokenizer packs it tightly
        ids += llm.tokenize((" " + text).encode(), add_bos=False, special=False)
    ids = ids[: a.tokens]
    n = len(ids)

    llm.eval(ids)
    ref = np.array(llm.scores[:n], dtype=np.float32)
    del llm
    # Speed on the file given by --model, computing only the last position's logits.
    llm = Llama(model_path=a.model, n_ctx=n_ctx, n_batch=512, n_ubatch=512, n_threads=a.threads,
                n_threads_batch=a.threads, logits_all=False, type_k=a.type_k, type_v=a.type_v,
                verbose=False)
    t0, c0 = time.perf_counter(), time.process_time()
    llm.eval(ids)
    t_prefill, c_prefill = time.perf_counter() - t0, time.process_time() - c0
    tok = int(np.argmax(last_logits(llm)))
    t0, c0 = time.perf_counter(), time.process_time()
    for _ in range(a.decode):
        llm.eval([tok])
        tok = int(np.argmax(last_logits(llm)))
    t_decode, c_decode = time.perf_counter() - t0, time.process_time() - c0

    with tempfile.TemporaryDirectory() as d:
        idf, outf = os.path.join(d, "ids.txt"), os.path.join(d, "logits.f32")
        with open(idf, "w") as f:
            f.write(",".join(map(str, ids)))
        r = subprocess.run([a.replay_logits, a.model, "--ids-file", idf, "--out", outf, "--threads",
                            str(a.threads)], capture_output=True, text=True)
        if r.returncode != 0:
            sys.exit("replay_logits failed: " + r.stderr)
        ours = np.fromfile(outf, dtype=np.float32).reshape(n, -1)
        # timed without --out: only the last position's logits, as llama.cpp's timed run
        r2 = subprocess.run([a.replay_logits, a.model, "--ids-file", idf, "--threads", str(a.threads),
                             "--decode", str(a.decode)], capture_output=True, text=True)
    def timing(what):
        m = re.search(what + r" \d+ tokens: ([\d.]+) s, [\d.]+ tokens/s, cpu ([\d.]+) s", r2.stderr)
        return (float(m.group(1)), float(m.group(2))) if m else (float("nan"), float("nan"))
    ours_prefill, ours_cprefill = timing("prefill")
    ours_decode, ours_cdecode = timing("decode")

    V = min(ref.shape[1], ours.shape[1])
    if ref.shape[1] != ours.shape[1]:
        print(f"note: vocab sizes differ ({ref.shape[1]} vs {ours.shape[1]}); comparing the first {V}")
    kl = np.empty(n)
    for i in range(0, n, 32):  # in row chunks: float64 copies of the whole vocabulary are large
        lp, lq = log_softmax(ref[i:i + 32, :V]), log_softmax(ours[i:i + 32, :V])
        kl[i:i + 32] = (np.exp(lp) * (lp - lq)).sum(axis=-1)
    same = (ref[:, :V].argmax(-1) == ours[:, :V].argmax(-1)).mean()
    print(f"model {os.path.basename(a.model)}  positions {n}  threads {a.threads}  cache types k={a.type_k} v={a.type_v}")
    print(f"KL(llama.cpp || sjkv) nats: mean {kl.mean():.3e}  median {np.median(kl):.3e}  "
          f"p99 {np.quantile(kl, 0.99):.3e}  max {kl.max():.3e}  same top token {same:.4f}")
    # CPU time (all threads, spinning included) is steadier than wall time on a shared machine.
    print(f"llama.cpp: prefill {n / t_prefill:.1f} tok/s ({c_prefill / n * 1e3:.2f} cpu-ms/token)  "
          f"decode {a.decode / t_decode:.1f} tok/s ({c_decode / max(a.decode, 1) * 1e3:.2f} cpu-ms/token)")
    print(f"sjkv:      prefill {n / ours_prefill:.1f} tok/s ({ours_cprefill / n * 1e3:.2f} cpu-ms/token)  "
          f"decode {a.decode / ours_decode:.1f} tok/s ({ours_cdecode / max(a.decode, 1) * 1e3:.2f} cpu-ms/token)")


if __name__ == "__main__":
    main()
