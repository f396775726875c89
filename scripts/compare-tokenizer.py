#!/usr/bin/env python3
"""Compare sjkv's tokenizer with llama.cpp's on the same GGUF vocabulary.

llama.cpp is reached through llama-cpp-python (a measuring instrument installed beside the
project, never a dependency of it); run this script with the Python that has it:

  # agreement over texts, unit by unit (lines and paragraphs), with and without BOS
  PY scripts/compare-tokenizer.py agree --model M.gguf --tool build/bench/sjkv_tokenize FILE...

  # random short strings of awkward pieces (white space, digits, scripts, emoji, bad bytes)
  PY scripts/compare-tokenizer.py random --model M.gguf --tool build/bench/sjkv_tokenize --n 5000 --seed 1 [--pieces case]

  # every token's piece and end-of-generation flag
  PY scripts/compare-tokenizer.py vocab --model M.gguf --tool build/bench/sjkv_tokenize

  # the golden file tests/replay/test_tokenizer.cpp reads (ids from llama.cpp)
  PY scripts/compare-tokenizer.py golden --model M.gguf --out tests/golden/tokenizer/NAME.txt

Both call llama.cpp as Llama(model_path, vocab_only=True).tokenize(text, add_bos, special=False).

  # a small vocabulary whose merges join combining marks to their neighbours, so that the
  # ids tell qwen35 from qwen2 (the test models' merges are ASCII-only and cannot), and
  # llama.cpp's ids for it under both pre-tokenizers
  PY scripts/compare-tokenizer.py marks --out tests/golden/tokenizer/marks-vocab.txt

  # the pre-tokenizer's words by the patterns themselves (no llama.cpp, no sjkv): needs the
  # PyPI package `regex` and Python 3.13 (its unicodedata is Unicode 15.1, llama.cpp's tables)
  PY3.13 scripts/compare-tokenizer.py splits --out tests/golden/tokenizer/pretok-splits.txt
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
    # Combining marks (\p{M}), which qwen35 counts with letters and qwen2 with punctuation.
    ("\u0928\u092e\u0938\u094d\u0924\u0947 \u0926\u0941\u0928\u093f\u092f\u093e, \u0939\u093f\u0928\u094d\u0926\u0940 \u092e\u0947\u0902\u0964".encode(), False),
    ("\u0e2a\u0e27\u0e31\u0e2a\u0e14\u0e35\u0e0a\u0e32\u0e27\u0e42\u0e25\u0e01 \u0e20\u0e32\u0e29\u0e32\u0e44\u0e17\u0e22".encode(), False),
    ("\u05e9\u05c1\u05b8\u05dc\u05d5\u05b9\u05dd \u05e2\u05d5\u05b9\u05dc\u05b8\u05dd \u0645\u064e\u0631\u0652\u062d\u064e\u0628\u064b\u0627".encode(), False),
    ("Tie\u0302\u0301ng Vie\u0323\u0302t cafe\u0301! nai\u0308ve".encode(), False),
    ("\u0301start (\u0301x) 1\u0301 !!\u0301 \u0301 \t\u0301 \n\u0301 e\u0301's \u0301'll".encode(), False),
    ("keycap 1\u20e3 \u2764\ufe0f a\u20dd \u304b\u3099 \u0915\u093e\u0903".encode(), False),
    ("'\u017fx I'\u017ft".encode(), False),  # long s: no contraction for llama.cpp, one for the regex
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


# The patterns of tokenizer.json as llama.cpp's src/llama-vocab.cpp quotes them, by
# tokenizer.ggml.pre value; llama.cpp runs a hand-written splitter for each.
SPLIT_PATTERNS = {
    "qwen2": r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
             r"|\s*[\r\n]+|\s+(?!\S)|\s+",
    "qwen35": r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*"
              r"|\s*[\r\n]+|\s+(?!\S)|\s+",
}

# Strings for the pre-tokenizer unit test, most with combining marks (\p{M}: Mn, Mc, Me) in
# every position: inside words of several scripts, at the start, after punctuation, digits,
# spaces and newlines; and CR/LF mixes and contractions.
SPLIT_SAMPLES = [
    "e\u0301", "e\u0301 combining accent", "cafe\u0301 nai\u0308ve", "e\u0301.",
    "Tie\u0302\u0301ng Vie\u0323\u0302t", "x\u0301y1\u0301'\u0301s",
    "\u0928\u092e\u0938\u094d\u0924\u0947 \u0926\u0941\u0928\u093f\u092f\u093e",  # Devanagari
    "\u0939\u093f\u0928\u094d\u0926\u0940 \u092e\u0947\u0902 \u092a\u093e\u0920\u0964",  # with danda (Po)
    "\u0915\u094d\u0937\u0924\u094d\u0930\u093f\u092f 42",
    "\u0e2a\u0e27\u0e31\u0e2a\u0e14\u0e35\u0e0a\u0e32\u0e27\u0e42\u0e25\u0e01",  # Thai
    "\u0e20\u0e32\u0e29\u0e32\u0e44\u0e17\u0e22 123 \u0e17\u0e35\u0e48\u0e19\u0e35\u0e48",
    "\u05e9\u05c1\u05b8\u05dc\u05d5\u05b9\u05dd \u05e2\u05d5\u05b9\u05dc\u05b8\u05dd",  # Hebrew points
    "\u05d1\u05bc\u05b0\u05e8\u05b5\u05d0\u05e9\u05c1\u05b4\u05d9\u05ea",
    "\u0645\u064e\u0631\u0652\u062d\u064e\u0628\u064b\u0627 \u0628\u0650\u0627\u0644\u0652\u0639\u064e\u0627\u0644\u064e\u0645\u0650",  # Arabic harakat
    "\u304b\u3099\u304d\u3099",  # combining dakuten
    "\u0301abc", "\u0301", "\u0301\u0301 x", "\u0301\u0300\u0302",  # a mark first
    "(\u0301x)", "!!\u0301", "..\u0301a", "\"\u0301\"", " \u0301!", "a,\u0301,b",  # after punctuation
    "1\u0301", "12\u0301\u0301a", "\u0663\u064e", "1\u20e3 #\ufe0f\u20e3",  # after digits; keycaps (Me)
    " \u0301", "  \u0301a", "\t\u0301", "a \u0301 b", "\u3000\u0301", "\u00a0\u0301x",  # after spaces
    "\n\u0301", "\r\n\u0301x", "x\r\n\r\n\u0301", "\u0301\n\u0301",  # after newlines
    "a\u20dd b", "\u2764\ufe0f love", "\U0001f44d\U0001f3fd\u200d", "a\u0378\u0301b",  # enclosing, VS16, unassigned
    "\u0915\u093e\u0903", "\U000e0100x\U000e0100",  # spacing marks (Mc), a supplementary-plane mark
    "a\r\n b\n\n\r c\r", " \r\n \n ", "!!\r\n\r\nx", "\r\r\n\n\ta", "x \n\u0301 \r",
    "don't I'LL we're THEY'RE it's O'Neil", "'s'S'\u0301s", "'\u0301", "x'\u0301ll", "'ll'\u0301ve",
    "'\u017fx", "I'\u017ft \u017f's",  # U+017F LONG S: see LLAMA_CPP_SPLITS
    "12345 \u00bd\u0301", "a  b   c\u0301    ", "   ",
]

# Where llama.cpp's hand-written splitter (src/unicode.cpp) cuts otherwise than the pattern:
# the pattern's (?i:'s...) folds case by Unicode, so U+017F LONG S matches 's', while llama.cpp
# lowers the character after the apostrophe (U+017F is already lower case) and compares it with
# ASCII, so "'\u017f" is no contraction there: the apostrophe leads a letter run instead.
LLAMA_CPP_SPLITS = {
    "'\u017fx": ["'\u017fx"],
    "I'\u017ft \u017f's": ["I", "'\u017ft", " \u017f", "'s"],
}


def cmd_splits(a):
    import unicodedata
    import regex
    if unicodedata.unidata_version != "15.1.0":
        sys.exit("unicodedata is %s; run with Python 3.13 (Unicode 15.1, llama.cpp's tables)" % unicodedata.unidata_version)
    # regex has its own (newer) Unicode tables: every sample's code points must have the same
    # letter/number/mark class there as in Unicode 15.1, or the words would not be llama.cpp's.
    for text in SPLIT_SAMPLES:
        for ch in text:
            major = unicodedata.category(ch)[0]
            for cls in "LNM":
                if bool(regex.match(r"\p{%s}" % cls, ch)) != (major == cls):
                    sys.exit("U+%04X in %r is classed differently by regex and Unicode 15.1" % (ord(ch), text))
    hexw = lambda ws: " ".join(w.encode().hex() for w in ws)
    lines = [
        "# Words of the pre-tokenizers by their patterns, run with PyPI regex %s on Python %s"
        % (regex.__version__, sys.version.split()[0]),
        "# produced by: scripts/compare-tokenizer.py splits --out %s" % os.path.basename(a.out),
        "# source 'regex' is the pattern's match list; 'llama.cpp' marks a case where llama.cpp's",
        "# hand-written splitter cuts otherwise (LLAMA_CPP_SPLITS in the script says why); then",
        "# the words are llama.cpp's, and a comment line just before gives the regex's words",
        "# columns: pre TAB hex(text) TAB hex(word) ... TAB source TAB readable text",
    ]
    for pre, pattern in SPLIT_PATTERNS.items():
        compiled = regex.compile(pattern)
        for text in SPLIT_SAMPLES:
            words = compiled.findall(text)
            assert "".join(words) == text
            source = "regex"
            if text in LLAMA_CPP_SPLITS:
                lines.append("# %s regex words: %s" % (pre, hexw(words)))
                assert LLAMA_CPP_SPLITS[text] != words and "".join(LLAMA_CPP_SPLITS[text]) == text
                words, source = LLAMA_CPP_SPLITS[text], "llama.cpp"
            b = text.encode()
            lines.append("%s\t%s\t%s\t%s\t%s" % (pre, b.hex(), hexw(words), source, readable(b)))
    with open(a.out, "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    print("wrote %s (%d cases)" % (a.out, len(SPLIT_PATTERNS) * len(SPLIT_SAMPLES)))


# Words the marks vocabulary makes whole tokens of (with every prefix of theirs that ends on a
# code point boundary, see mark_vocab), and the strings whose ids the golden file holds.
MARK_WORDS = [
    "cafe\u0301", "e\u0301", "\u0301", "!\u0301", "\u0301!", "\u0301'", "'s", " \u0301x", " \u0301",
    "1\u0301", "\u0301\n", "\n\u0301", "'\u017fx", "\u017fx",
    "\u0928\u092e\u0938\u094d\u0924\u0947", "\u0938\u094d", "\u094d\u0924", "\u0947",  # Devanagari
    "\u0e2a\u0e27\u0e31\u0e2a\u0e14\u0e35", "\u0e31\u0e2a", "\u0e35",  # Thai
    "\u05e9\u05c1\u05b8\u05dc\u05d5\u05b9\u05dd", "\u05c1\u05b8",  # Hebrew points
]
MARK_SAMPLES = [
    "cafe\u0301!", "cafe\u0301 e\u0301", "!\u0301", "!!\u0301!", "\u0301's", "x \u0301x", "1\u0301",
    "a\u0301\n\u0301", "\u0928\u092e\u0938\u094d\u0924\u0947", "\u0e2a\u0e27\u0e31\u0e2a\u0e14\u0e35",
    "\u05e9\u05c1\u05b8\u05dc\u05d5\u05b9\u05dd", "'\u017fx", "I'\u017fx's", "\t\u0301x",
]
MARK_PRES = ["qwen2", "qwen35"]


def mark_vocab():
    """(tokens, merges) in GPT-2's byte-level characters: the 256 byte tokens, then what the
    merges of MARK_WORDS make, then <|endoftext|>. A word's merges join each multi-byte code
    point's bytes left to right, then the code points left to right."""
    bs, chars = byte_chars()
    enc = dict(zip(bs, chars))
    tokens = list(chars)
    merges = []

    def merge(left, right):
        if (left, right) not in merges:
            merges.append((left, right))
        if left + right not in tokens:
            tokens.append(left + right)
        return left + right

    for word in MARK_WORDS:
        pieces = []
        for ch in word:
            b = ch.encode()
            piece = enc[b[0]]
            for x in b[1:]:
                piece = merge(piece, enc[x])
            pieces.append(piece)
        left = pieces[0]
        for right in pieces[1:]:
            left = merge(left, right)
    return tokens + ["<|endoftext|>"], [a + " " + b for a, b in merges]


def byte_chars():
    """GPT-2's byte -> printable character table: (bytes in token order, their characters), as
    make-test-models.py writes it into the test vocabularies (one copy of the table)."""
    import importlib.machinery
    import importlib.util
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "make-test-models.py")
    loader = importlib.machinery.SourceFileLoader("make_test_models", path)
    mod = importlib.util.module_from_spec(importlib.util.spec_from_loader("make_test_models", loader))
    loader.exec_module(mod)
    return mod.byte_chars()


def cmd_marks(a):
    import tempfile
    import gguf
    import llama_cpp
    tokens, merges = mark_vocab()
    lines = [
        "# The marks vocabulary of scripts/compare-tokenizer.py (MARK_WORDS) and llama.cpp's ids for",
        "# MARK_SAMPLES under each pre-tokenizer (llama-cpp-python %s)" % llama_cpp.__version__,
        "# produced by: scripts/compare-tokenizer.py marks --out %s" % os.path.basename(a.out),
        "# lines: 'token' TAB hex(text), in id order (the last one is control, BOS and EOS);",
        "# 'merge' TAB hex(left SPACE right), in rank order; 'case' TAB pre TAB hex(text) TAB ids TAB readable",
    ]
    lines += ["token\t" + t.encode().hex() for t in tokens]
    lines += ["merge\t" + m.encode().hex() for m in merges]
    with tempfile.TemporaryDirectory() as tmp:
        for pre in MARK_PRES:
            path = os.path.join(tmp, pre + ".gguf")
            # A vocabulary-only file: llama.cpp reads the architecture's hyper-parameters even
            # with vocab_only, so the file has a minimal qwen2 header and no tensors.
            w = gguf.GGUFWriter(path, "qwen2")
            w.add_context_length(64)
            w.add_embedding_length(64)
            w.add_feed_forward_length(64)
            w.add_block_count(1)
            w.add_head_count(1)
            w.add_layer_norm_rms_eps(1e-6)
            w.add_tokenizer_model("gpt2")
            w.add_tokenizer_pre(pre)
            w.add_token_list(tokens)
            w.add_token_types([1] * (len(tokens) - 1) + [3])
            w.add_token_merges(merges)
            w.add_bos_token_id(len(tokens) - 1)
            w.add_eos_token_id(len(tokens) - 1)
            w.write_header_to_file()
            w.write_kv_data_to_file()
            w.write_tensors_to_file()
            w.close()
            lm = llama(path)
            assert lm.n_vocab() == len(tokens)
            for text in MARK_SAMPLES:
                b = text.encode()
                ids = llama_ids(lm, b, False)
                lines.append("case\t%s\t%s\t%s\t%s" % (pre, b.hex(), " ".join(map(str, ids)), readable(b)))
    with open(a.out, "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    print("wrote %s (%d tokens, %d merges, %d cases)" % (a.out, len(tokens), len(merges), len(MARK_PRES) * len(MARK_SAMPLES)))


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


# --pieces case: what GPT-4o's pre-tokenizer (gpt-4o, llama4) cuts apart: case changes with
# ASCII and non-ASCII capitals, contractions after capitals, slashes after punctuation, and
# gpt-oss's harmony markers (some of which llama.cpp matches in text as user-defined tokens).
CASE_PIECES = ["HTTP", "Server", "iPhone", "A", "b", "\u00c9COLE", "\u00e9cole", "\u0416\u0436", "\u03a9",
               "'S", "'Re", "'ll", "/", "//", "*/", "\u01c5", "\u02b0", "\u1e9e", "<|start|>", "<|end|>",
               "<|message|>", "<|channel|>", "<|return|>", "<|call|>", "<|constrain|>", "<|endoftext|>"]


def random_texts(n, seed, extra=()):
    """Short strings drawn from pieces that stress the pre-tokenizers and merges."""
    import random
    rng = random.Random(seed)
    pieces = [" ", "  ", "   ", "\t", "\n", "\n\n", "\r\n", "\u00a0", "\u3000", "\u2009", "a", "Z", "the",
              " word", "'s", "'LL", "'", "0", "7", "123", "4567", "\u0663", "\u00bd", "\u2167", ".", ",", "!?",
              "...", "--", "(", ")", "<", ">", "</s>", "<b>", "<table>", "<end_of_turn>", "<|im_end|>",
              "\u00e9", "e\u0301", "\u00df", "\u0416", "\u05d0", "\u0627", "\u4e2d", "\u65e5\u672c",
              "\uac00", "\u0e01", "\U0001f999", "\U0001f44d\U0001f3fd", "\u200d", "\ufeff", "\x00", "\x7f",
              "\U0001d400", "\U000e0041", "\u0378", "\uffff", "\u0301", "\u094d\u0924", "\u0e31", "\u05b8",
              "\u20e3", "\ufe0f", "'\u017f"] + list(extra)
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
    texts = random_texts(a.n, a.seed, CASE_PIECES if a.pieces == "case" else ())
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
    r.add_argument("--pieces", choices=["default", "case"], default="default",
                   help="case: add CASE_PIECES (capitals, slashes, harmony markers) to the pieces")
    r.add_argument("--seed", type=int, default=1)
    r.add_argument("--show", type=int, default=5)
    v = sub.add_parser("vocab")
    v.add_argument("--model", required=True)
    v.add_argument("--tool", required=True)
    v.add_argument("--show", type=int, default=5)
    mk = sub.add_parser("marks")
    mk.add_argument("--out", required=True)
    sp = sub.add_parser("splits")
    sp.add_argument("--out", required=True)
    a = ap.parse_args()
    {"golden": cmd_golden, "agree": cmd_agree, "random": cmd_random, "vocab": cmd_vocab, "splits": cmd_splits,
     "marks": cmd_marks}[a.cmd](a)


if __name__ == "__main__":
    sys.exit(main())
