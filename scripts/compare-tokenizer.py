#!/usr/bin/env python3
"""Compare sjkv's tokenizer with llama.cpp's on the same GGUF vocabulary.

llama.cpp is reached through llama-cpp-python (a measuring instrument installed beside the
project, never a dependency of it); run this script with the Python that has it:

  # agreement over texts, unit by unit (lines and paragraphs), with and without BOS
  PY scripts/compare-tokenizer.py agree --model M.gguf --tool build/bench/sjkv_tokenize FILE...

  # random short strings of awkward pieces (white space, digits, scripts, emoji, bad bytes)
  PY scripts/compare-tokenizer.py random --model M.gguf --tool build/bench/sjkv_tokenize --n 5000 --seed 1

  # every token's piece and end-of-generation flag
  PY scripts/compare-tokenizer.py vocab --model M.gguf --tool build/bench/sjkv_tokenize

  # the golden file tests/replay/test_tokenizer.cpp reads (ids from llama.cpp)
  PY scripts/compare-tokenizer.py golden --model M.gguf --out tests/golden/tokenizer/NAME.txt

Both call llama.cpp as Llama(model_path, vocab_only=True).tokenize(text, add_bos, special=False).
"""
import argparse
import hashlib
import os
import subprocess
import sys

# Sample strings of the golden files: (text as bytes, add_special).
SAMPLES = [
    (b"", False),
    (b"", True),
    (b"Hello world", False),
    (b"Hello world", True),
    (b" Hello world", False),
    (b"The quick brown fox jumps over the lazy dog.", True),
    (b"12345", False),
    (b"3.14159 and 1,000,000 and 2024-06-01", False),
    (b"Hello, world! (Really?) \"Quoted\" -- dash; semi: colon... [x] {y} <z> @#$%^&*_+=|\\~`", False),
    (b"a  b   c    d     e", False),
    (b"  leading and trailing  ", False),
    (b" ", False),
    (b"   ", False),
    (b"line one\nline two\n\nline four\n", False),
    (b"\n\n\n", False),
    (b"\r\nwindows\r\nlines\r\n", False),
    (b"col1\tcol2\t\tcol4\n\tindented", False),
    ("café naïve Ångström façade Ünïcödé ß".encode(), False),
    ("e\u0301 combining accent".encode(), False),
    ("你好，世界。日本語のテキスト".encode(), False),
    ("한국어 텍스트".encode(), False),
    ("Привет мир, как дела?".encode(), False),
    ("مرحبا بالعالم".encode(), False),
    ("🦙 llamas 👍🏽 and 🇫🇷 flags".encode(), False),
    ("½ ² ⅷ ٣ numbers".encode(), False),
    (b"don't I'll we're THEY'RE it's O'Neil", False),
    (b"for (int i = 0; i < n; ++i) { x[i] += 2 * y[i]; }", False),
    (b"def f(x):\n    return x ** 2  # square\n", False),
    (b"<b>bold</b> <table><tr><td>1</td></tr></table>", False),
    (b"<start_of_turn>user\nhi<end_of_turn> </s> <|im_start|> <|endoftext|>", False),
    (b"https://example.com/path?q=1&r=2#frag", False),
    (b"abc\xffdef \xc3 broken utf-8", False),
]


def llama(model):
    from llama_cpp import Llama
    return Llama(model_path=model, vocab_only=True, verbose=False)


def llama_ids(lm, text, bos):
    return lm.tokenize(text, add_bos=bos, special=False)


def readable(text):
    s = text.decode("utf-8", "backslashreplace")
    return s.replace("\\", "\\\\").replace("\n", "\\n").replace("\t", "\\t").replace("\r", "\\r")


def cmd_golden(a):
    lm = llama(a.model)
    import llama_cpp
    sha = hashlib.sha256(open(a.model, "rb").read()).hexdigest()
    lines = [
        "# Token ids from llama.cpp (llama-cpp-python %s) for %s" % (llama_cpp.__version__, os.path.basename(os.path.realpath(a.model))),
        "# model sha256 %s" % sha,
        "# produced by: scripts/compare-tokenizer.py golden --model %s --out %s"
        % (os.path.basename(os.path.realpath(a.model)), os.path.basename(a.out)),
        "# columns: hex(text) TAB add_special TAB ids TAB readable text",
        "n_vocab %d" % lm.n_vocab(),
    ]
    for text, bos in SAMPLES:
        ids = llama_ids(lm, text, bos)
        lines.append("%s\t%d\t%s\t%s" % (text.hex(), int(bos), " ".join(map(str, ids)), readable(text)))
    with open(a.out, "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    print("wrote %s (%d cases)" % (a.out, len(SAMPLES)))


def units(paths):
    """Lines and paragraphs (blank-line separated blocks) of the files, each once."""
    lines, paras = [], []
    for p in paths:
        data = open(p, "rb").read()
        if b"\0" in data:
            continue
        lines += [l for l in data.split(b"\n") if l.strip()]
        paras += [b for b in data.split(b"\n\n") if b.strip()]
    return lines, paras


def ours(tool, model, texts, bos):
    cmd = [tool, model, "--nul"] + (["--bos"] if bos else [])
    r = subprocess.run(cmd, input=b"\0".join(texts), capture_output=True, check=True)
    out = r.stdout.decode().split("\n")
    return [list(map(int, l.split())) for l in out[: len(texts)]]


def cmd_agree(a):
    lm = llama(a.model)
    lines, paras = units(a.files)
    total_bytes = sum(os.path.getsize(p) for p in a.files)
    print("model %s: %d files, %d bytes; %d lines, %d paragraphs" %
          (os.path.basename(a.model), len(a.files), total_bytes, len(lines), len(paras)))
    worst = []
    for name, texts in (("lines", lines), ("paragraphs", paras)):
        for bos in (False, True):
            mine = ours(a.tool, a.model, texts, bos)
            same = 0
            ntok = 0
            for t, m in zip(texts, mine):
                ref = llama_ids(lm, t, bos)
                ntok += len(ref)
                if ref == m:
                    same += 1
                elif len(worst) < a.show:
                    worst.append((t[:80], ref[:12], m[:12]))
            print("  %-10s bos=%d: %d/%d identical (%.3f%%), %d llama.cpp tokens" %
                  (name, bos, same, len(texts), 100.0 * same / max(1, len(texts)), ntok))
    whole = b"".join(open(p, "rb").read() for p in a.files)
    ref = llama_ids(lm, whole, False)
    mine = ours(a.tool, a.model, [whole.replace(b"\0", b"")], False)[0] if b"\0" not in whole else None
    if mine is not None:
        print("  whole text: %s (%d tokens)" % ("identical" if ref == mine else "DIFFERENT", len(ref)))
    for w in worst:
        print("  differs:", w)


def random_texts(n, seed):
    """Short strings drawn from pieces that stress the pre-tokenizers and merges."""
    import random
    rng = random.Random(seed)
    pieces = [" ", "  ", "   ", "\t", "\n", "\n\n", "\r\n", "\u00a0", "\u3000", "\u2009", "a", "Z", "the",
              " word", "'s", "'LL", "'", "0", "7", "123", "4567", "\u0663", "\u00bd", "\u2167", ".", ",", "!?",
              "...", "--", "(", ")", "<", ">", "</s>", "<b>", "<table>", "<end_of_turn>", "<|im_end|>",
              "\u00e9", "e\u0301", "\u00df", "\u0416", "\u05d0", "\u0627", "\u4e2d", "\u65e5\u672c",
              "\uac00", "\u0e01", "\U0001f999", "\U0001f44d\U0001f3fd", "\u200d", "\ufeff", "\x00", "\x7f",
              "\U0001d400", "\U000e0041", "\u0378", "\uffff"]
    out = []
    for _ in range(n):
        s = "".join(rng.choice(pieces) for _ in range(rng.randint(1, 12)))
        b = s.encode("utf-8", "surrogatepass")
        if rng.random() < 0.05:
            b = b + bytes([rng.choice([0x80, 0xc3, 0xe2, 0xf0, 0xff])])
        out.append(b.replace(b"\0", b""))
    return [t for t in out if t]


def cmd_random(a):
    lm = llama(a.model)
    texts = random_texts(a.n, a.seed)
    shown = 0
    for bos in (False, True):
        mine = ours(a.tool, a.model, texts, bos)
        same = 0
        for t, m in zip(texts, mine):
            ref = llama_ids(lm, t, bos)
            if ref == m:
                same += 1
            elif shown < a.show:
                shown += 1
                print("  differs:", (t, ref, m))
        print("  random bos=%d: %d/%d identical (%.3f%%)" % (bos, same, len(texts), 100.0 * same / len(texts)))


def cmd_vocab(a):
    """Every token's piece (llama_token_to_piece, special=False) and end-of-generation flag."""
    import ctypes
    import llama_cpp
    lm = llama(a.model)
    vocab = llama_cpp.llama_model_get_vocab(lm.model)
    r = subprocess.run([a.tool, a.model, "--vocab"], capture_output=True, check=True)
    rows = [l.split("\t") for l in r.stdout.decode().splitlines()]
    buf = ctypes.create_string_buffer(1024)
    bad_piece = bad_eog = 0
    for sid, hexpiece, eog in rows:
        i = int(sid)
        n = llama_cpp.llama_token_to_piece(vocab, i, buf, len(buf), 0, False)
        ref = buf.raw[:n] if n >= 0 else b"?"
        ref_eog = bool(llama_cpp.llama_vocab_is_eog(vocab, i))
        if ref != bytes.fromhex(hexpiece):
            bad_piece += 1
            if bad_piece <= a.show:
                print("  piece differs:", i, ref, bytes.fromhex(hexpiece))
        if ref_eog != (eog == "1"):
            bad_eog += 1
            if bad_eog <= a.show:
                print("  eog differs:", i, ref_eog)
    print("  %d tokens: %d pieces differ, %d end-of-generation flags differ" % (len(rows), bad_piece, bad_eog))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    g = sub.add_parser("golden")
    g.add_argument("--model", required=True)
    g.add_argument("--out", required=True)
    c = sub.add_parser("agree")
    c.add_argument("--model", required=True)
    c.add_argument("--tool", required=True, help="the sjkv_tokenize program (bench/tokenize.cpp)")
    c.add_argument("--show", type=int, default=5, help="how many differing units to print")
    c.add_argument("files", nargs="+")
    r = sub.add_parser("random")
    r.add_argument("--model", required=True)
    r.add_argument("--tool", required=True)
    r.add_argument("--n", type=int, default=5000)
    r.add_argument("--seed", type=int, default=1)
    r.add_argument("--show", type=int, default=5)
    v = sub.add_parser("vocab")
    v.add_argument("--model", required=True)
    v.add_argument("--tool", required=True)
    v.add_argument("--show", type=int, default=5)
    a = ap.parse_args()
    {"golden": cmd_golden, "agree": cmd_agree, "random": cmd_random, "vocab": cmd_vocab}[a.cmd](a)


if __name__ == "__main__":
    sys.exit(main())
