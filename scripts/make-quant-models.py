#!/usr/bin/env python3
"""Write small random-weight GGUF models whose matrices hold one low-bit block type each.

sjkv's decoders of these types are bit-exact against gguf.quants (tests/codec), but only a
whole model run by llama.cpp shows that the forward pass reads them as llama.cpp does. Each
model here has every 2-D matrix (token_embd, attn_q/k/v/output, ffn_gate/up/down, output) in
one type; the norms stay F32. tests/replay/test_quant_models.cpp compares sjkv's logits on it
with llama.cpp's (tests/golden/quant/, whose README says how they were made and what the
bounds are).

  python3 scripts/make-quant-models.py --out DIR [--only TYPE...] [--twins] \\
      [--check tests/golden/quant/models.sha256] [--write-hashes FILE]
  VENV/bin/python scripts/make-quant-models.py --out DIR --twins --fixtures tests/golden/quant
  python3 scripts/make-quant-models.py --out DIR --table   (after test_quant_models has run)

Model (quant-TYPE.gguf): the llama architecture, 2 layers, n_embd 256 (every row a whole
number of 256-value blocks), 4/2 heads x 128, n_ff 512, rms eps 1e-6, rope base 1e6, the
480-token SentencePiece-style vocabulary of make-test-models.py's mistral, untied output.
Pieces of scripts/make-test-models.py (imported, not copied): its counter-based generator
(stream_key, uniforms, rand_tensor), its vocabulary writer and its weight scales, so each
matrix has the std its F32 models use (q, k: sqrt(SCORE_STD / n_embd); v, gate, up:
1/sqrt(n_embd); attn_output 1/sqrt(512); ffn_down 1/sqrt(n_ff); token_embd EMBD_STD; output
LOGIT_STD/sqrt(n_embd)).

How the blocks are made, per type (TYPES below):
  quantize  TQ1_0, TQ2_0, MXFP4: gguf.quants quantizes the generator's normal-like numbers
            (scaled once more by the measured ratio, so the decoded std is the F32 one).
  fields    every other type: random code bytes (uniform, from the generator; every byte
            pattern is a valid block of these types: grid indices cover their whole grid,
            scales are small unsigned fields), then the fp16 scale fields (SCALE_FIELDS: d,
            and Q2_K's dmin = 1.5 d so its sub-block offsets centre the weights) set to
            uniform(0.5, 1) x c, with c = target std / measured rms of the blocks decoded by
            gguf.quants at c = 1 (rounded to 4 digits). IQ1_M keeps its fp16 d in the top
            nibbles of its four scale words.
  nvfp4     random code bytes; the four UE4M3 block scales gguf.quants' own rounding of
            uniform(0.75, 1.25) x s, s measured as above.
The script checks that doubling the scale fields doubles every decoded weight (so no scale
field is missed) and that the decoded std is within 10% of the target.

--twins also writes quant-TYPE-f32.gguf: the same model with the blocks decoded to F32 (by
gguf.quants, which sjkv's decoders equal bit for bit). llama.cpp on the twin does every
product in f32, so sjkv on the quantized model must agree with it to the F32 models' bound.

--fixtures (with llama-cpp-python; a measuring instrument, never a build or test dependency)
writes tests/golden/quant/TYPE.logits (llama.cpp on quant-TYPE.gguf, positions 0-63) and
TYPE-f32.logits (on the twin, positions 0-15), with make-arch-fixtures.py's token generator,
runner and file format, and prints KL(llama.cpp quantized || llama.cpp twin).

--table reads the kl-TYPE.txt files that test_quant_models writes next to the models, runs a
float64 forward pass of each model with f32 activations and with the activations rounded as
llama.cpp's CPU products round them (Q8_K or Q8_0, the type's vec_dot_type), compares both with
the fixtures, and rewrites the results table of tests/golden/quant/README.md.

Seeds: the generator's streams are keyed by "quant-TYPE/TENSOR" under make-test-models.py's
SEED, so each type has its own fixed numbers; the bytes depend only on them and gguf 0.19.0
(--check).
"""
import argparse
import functools
import importlib.util
import math
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
GOLDEN = os.path.join(ROOT, "tests", "golden", "quant")


@functools.lru_cache(maxsize=None)
def _load(fname, modname):
    spec = importlib.util.spec_from_file_location(modname, os.path.join(HERE, fname))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


mtm = _load("make-test-models.py", "make_test_models")

N_LAYER = 2
N_CTX = 256          # the fixtures' context (64 tokens kept)
N_TOKENS = 64
TWIN_ROWS = 16       # twin fixtures keep positions 0..15: a decoder error shows at every position
TOKEN_FIXTURE = "quant"  # every type sees the same token ids
SPEC = dict(arch="llama", n_embd=256, n_head=4, n_head_kv=2, head=128, vocab="spm", n_vocab=480,
            ctx=32768, rope_base=1e6, n_ff=512)

# type: GGML type name, vec_dot_type of llama.cpp's CPU backend (type_traits_cpu in
# ggml/src/ggml-cpu/ggml-cpu.c of the llama.cpp llama-cpp-python 0.3.36 builds: the format its
# matrix products round the f32 activations to), how the blocks are made.
TYPES = {
    "q2_k":    ("Q2_K", "Q8_K", "fields"),
    "q3_k":    ("Q3_K", "Q8_K", "fields"),
    "iq2_xxs": ("IQ2_XXS", "Q8_K", "fields"),
    "iq2_xs":  ("IQ2_XS", "Q8_K", "fields"),
    "iq2_s":   ("IQ2_S", "Q8_K", "fields"),
    "iq3_xxs": ("IQ3_XXS", "Q8_K", "fields"),
    "iq3_s":   ("IQ3_S", "Q8_K", "fields"),
    "iq1_s":   ("IQ1_S", "Q8_K", "fields"),
    "iq1_m":   ("IQ1_M", "Q8_K", "iq1_m"),
    "iq4_nl":  ("IQ4_NL", "Q8_0", "fields"),
    "iq4_xs":  ("IQ4_XS", "Q8_K", "fields"),
    "tq1_0":   ("TQ1_0", "Q8_K", "quantize"),
    "tq2_0":   ("TQ2_0", "Q8_K", "quantize"),
    "mxfp4":   ("MXFP4", "Q8_0", "quantize"),
    "nvfp4":   ("NVFP4", "Q8_0", "nvfp4"),
}

# Byte offsets of the fp16 scale fields in one block (ggml's block structs, ggml-common.h):
# Q2_K {scales[16], qs[64], d, dmin}, Q3_K {hmask[32], qs[64], scales[12], d}, the IQ types
# and IQ4_NL/IQ4_XS {d, ...}. Q2_K's second field (dmin) is set to DMIN_RATIO x d.
SCALE_FIELDS = {
    "Q2_K": (80, 82), "Q3_K": (108,), "IQ2_XXS": (0,), "IQ2_XS": (0,), "IQ2_S": (0,), "IQ3_XXS": (0,),
    "IQ3_S": (0,), "IQ1_S": (0,), "IQ4_NL": (0,), "IQ4_XS": (0,),
}
DMIN_RATIO = 1.5  # Q2_K: mean of sc*q is 7.5*1.5 for uniform bytes, mean of m is 7.5
IQ1_M_SCALES = 48  # IQ1_M {qs[32], qh[16], scales[8]}: fp16 d in the top nibble of each uint16


def fail(msg, code=1):
    print("make-quant-models.py: " + msg, file=sys.stderr)
    sys.exit(code)


def qtype(tname):
    import gguf
    return gguf.GGMLQuantizationType[TYPES[tname][0]]


def bits_per_weight(tname):
    import gguf
    bs, ts = gguf.GGML_QUANT_SIZES[qtype(tname)]
    return 8.0 * ts / bs


# ---- blocks -----------------------------------------------------------------------------------
def code_bytes(key_name, n):
    u = mtm.uniforms(mtm.stream_key(mtm.SEED, key_name), n)
    return np.floor(u * 256.0).astype(np.uint8)


def decode(blocks, qt, shape):
    import gguf
    return gguf.quants.dequantize(blocks, qt).reshape(shape)


def rms(x):
    return float(np.sqrt(np.mean(np.square(x.astype(np.float64)))))


def four_digits(c):
    return float("%.4g" % c)


def set_f16(blocks, offsets, values):
    """values (n_blocks,) float64 -> fp16 at each offset (Q2_K's second one times DMIN_RATIO)."""
    for i, off in enumerate(offsets):
        v = values * (DMIN_RATIO if i == 1 else 1.0)
        blocks[:, off:off + 2] = v.astype(np.float16).view(np.uint8).reshape(-1, 2)


def set_iq1_m_d(blocks, values):
    bits = values.astype(np.float16).view(np.uint16)
    words = blocks[:, IQ1_M_SCALES:IQ1_M_SCALES + 8].copy().view(np.uint16)  # (n_blocks, 4), little-endian
    for k in range(4):
        nib = (bits >> np.uint16(4 * k)) & np.uint16(0xF)
        words[:, k] = (words[:, k] & np.uint16(0x0FFF)) | (nib << np.uint16(12))
    blocks[:, IQ1_M_SCALES:IQ1_M_SCALES + 8] = words.view(np.uint8)


def scale_setter(how, ttype):
    if how == "iq1_m":
        return set_iq1_m_d
    offs = SCALE_FIELDS[ttype]
    return lambda blocks, v: set_f16(blocks, offs, v)


def make_blocks(tname, key, shape, std):
    """The bytes of one matrix of type tname, shape (rows, cols), decoded std about std."""
    import gguf
    ttype, _, how = TYPES[tname]
    qt = qtype(tname)
    bs, ts = gguf.GGML_QUANT_SIZES[qt]
    rows, cols = shape
    assert cols % bs == 0, (key, shape)
    n_blocks = rows * cols // bs
    if how == "quantize":
        x = mtm.rand_tensor(mtm.SEED, key, shape, std)
        c = four_digits(std / rms(decode(gguf.quants.quantize(x, qt), qt, shape)))
        blocks = gguf.quants.quantize((x * np.float32(c)).astype(np.float32), qt)
    elif how == "nvfp4":
        blocks = code_bytes(key + "/codes", n_blocks * ts).reshape(n_blocks, ts)
        u = 0.75 + 0.5 * mtm.uniforms(mtm.stream_key(mtm.SEED, key + "/scales"), n_blocks * 4).reshape(n_blocks, 4)

        def with_scale(s):
            b = blocks.copy()
            b[:, :4] = gguf.quants.NVFP4.fp32_to_ue4m3((u * s).astype(np.float32))
            return b

        s = four_digits(std / rms(decode(with_scale(0.1), qt, shape)) * 0.1)
        blocks = with_scale(s)
    else:
        blocks = code_bytes(key + "/codes", n_blocks * ts).reshape(n_blocks, ts)
        d0 = 0.5 + 0.5 * mtm.uniforms(mtm.stream_key(mtm.SEED, key + "/scales"), n_blocks)
        setter = scale_setter(how, ttype)
        setter(blocks, d0)
        once = decode(blocks, qt, shape)
        c = four_digits(std / rms(once))
        # every scale field found: twice the scale decodes to exactly twice every weight
        twice = blocks.copy()
        setter(twice, d0 * 2.0)
        if not np.array_equal(decode(twice, qt, shape), 2.0 * once):
            fail("internal error: %s: doubling the scale fields does not double the weights" % ttype)
        setter(blocks, d0 * c)
    got = rms(decode(blocks, qt, shape))
    if not (0.9 * std < got < 1.1 * std):
        fail("internal error: %s %s: decoded rms %.4g, wanted %.4g" % (ttype, key, got, std))
    return blocks.reshape(rows, cols // bs * ts)


# ---- models -----------------------------------------------------------------------------------
def matrices():
    """(tensor name, (rows, cols), std) of every matrix, in file order."""
    E, H, HKV, D, F = SPEC["n_embd"], SPEC["n_head"], SPEC["n_head_kv"], SPEC["head"], SPEC["n_ff"]
    V = SPEC["n_vocab"]
    qk = math.sqrt(mtm.SCORE_STD / E)
    unit_in = 1 / math.sqrt(E)
    out = [("token_embd.weight", (V, E), mtm.EMBD_STD)]
    for il in range(N_LAYER):
        b = "blk.%d." % il
        out += [(b + "attn_q.weight", (H * D, E), qk), (b + "attn_k.weight", (HKV * D, E), qk),
                (b + "attn_v.weight", (HKV * D, E), unit_in), (b + "attn_output.weight", (E, H * D), 1 / math.sqrt(H * D)),
                (b + "ffn_gate.weight", (F, E), unit_in), (b + "ffn_up.weight", (F, E), unit_in),
                (b + "ffn_down.weight", (E, F), 1 / math.sqrt(F))]
    out.append(("output.weight", (V, E), mtm.LOGIT_STD * unit_in))
    return out


def build(tname, path, twin_path=None):
    """quant-TYPE.gguf at path (and its F32 twin at twin_path)."""
    import gguf
    model = "quant-" + tname
    qt = qtype(tname)
    E, D = SPEC["n_embd"], SPEC["head"]
    mats = {n: make_blocks(tname, model + "/" + n, shape, std) for n, shape, std in matrices()}
    shapes = {n: shape for n, shape, _ in matrices()}

    def write(p, twin):
        w = gguf.GGUFWriter(p, SPEC["arch"])
        w.add_name(model + ("-f32" if twin else ""))
        w.add_context_length(SPEC["ctx"])
        w.add_embedding_length(E)
        w.add_block_count(N_LAYER)
        w.add_feed_forward_length(SPEC["n_ff"])
        w.add_head_count(SPEC["n_head"])
        w.add_head_count_kv(SPEC["n_head_kv"])
        w.add_layer_norm_rms_eps(mtm.RMS_EPS)
        w.add_rope_freq_base(SPEC["rope_base"])
        w.add_key_length(D)
        w.add_value_length(D)
        w.add_rope_dimension_count(D)
        w.add_vocab_size(SPEC["n_vocab"])
        ft = "ALL_F32" if twin else "MOSTLY_" + TYPES[tname][0]
        if hasattr(gguf.LlamaFileType, ft):
            w.add_file_type(getattr(gguf.LlamaFileType, ft))
        n_vocab = mtm.add_vocab(w, SPEC)
        assert n_vocab == SPEC["n_vocab"]

        def mat(n):
            if twin:
                w.add_tensor(n, decode(mats[n], qt, shapes[n]).astype(np.float32))
            else:
                w.add_tensor(n, mats[n], raw_dtype=qt)

        def norm(n):
            w.add_tensor(n, mtm.rand_tensor(mtm.SEED, model + "/" + n, (E,), mtm.NORM_STD, 1.0))

        mat("token_embd.weight")
        for il in range(N_LAYER):
            b = "blk.%d." % il
            norm(b + "attn_norm.weight")
            for n in ("attn_q", "attn_k", "attn_v", "attn_output"):
                mat(b + n + ".weight")
            norm(b + "ffn_norm.weight")
            for n in ("ffn_gate", "ffn_up", "ffn_down"):
                mat(b + n + ".weight")
        norm("output_norm.weight")
        mat("output.weight")
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()

    write(path, False)
    if twin_path:
        write(twin_path, True)


def write_atomically(final, fn):
    tmp = final + ".tmp%d" % os.getpid()
    try:
        fn(tmp)
        os.replace(tmp, final)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


# ---- fixtures (llama-cpp-python) --------------------------------------------------------------
def kl_rows(p_logits, q_logits):
    """KL(p || q) per row, in nats, of the softmaxes of two (rows, n_vocab) arrays."""
    maf = _load("make-arch-fixtures.py", "make_arch_fixtures")
    lp, lq = maf.log_softmax(p_logits), maf.log_softmax(q_logits)
    return np.maximum(0.0, (np.exp(lp) * (lp - lq)).sum(-1))


def make_fixtures(names, models, out, threads):
    maf = _load("make-arch-fixtures.py", "make_arch_fixtures")
    os.makedirs(out, exist_ok=True)
    V = SPEC["n_vocab"]
    ids = maf.token_ids(TOKEN_FIXTURE, N_TOKENS, V)
    for t in names:
        quant, n_vocab, version = maf.run(os.path.join(models, "quant-%s.gguf" % t), N_CTX, ids, threads)
        twin, n_vocab_twin, _ = maf.run(os.path.join(models, "quant-%s-f32.gguf" % t), N_CTX, ids, threads)
        if n_vocab != V or n_vocab_twin != V:
            fail("%s: llama.cpp reports %d/%d tokens, the model has %d" % (t, n_vocab, n_vocab_twin, V))
        if not (np.isfinite(quant).all() and np.isfinite(twin).all()):
            fail("%s: llama.cpp gave non-finite logits" % t)
        maf.write_fixture(os.path.join(out, t + ".logits"), "quant-" + t, V, N_CTX, ids, list(range(N_TOKENS)), quant)
        maf.write_fixture(os.path.join(out, t + "-f32.logits"), "quant-%s-f32" % t, V, N_CTX, ids,
                          list(range(TWIN_ROWS)), twin)
        d = kl_rows(quant, twin)
        s = maf.stats(quant, list(range(N_TOKENS)))
        print("%-8s llama-cpp-python %s: logit std %.2f, entropy %.2f; KL(llama.cpp %s || llama.cpp F32 twin) "
              "max %.3e mean %.3e" % (t, version, s["std"], s["entropy"], TYPES[t][0], d.max(), d.mean()))


# ---- a float64 forward pass, with and without llama.cpp's activation rounding ------------------
def round_q8_k(x):
    """Each 256-value block as Q8_K holds it (quantize_row_q8_K_ref, ggml-quants.c, which the x86
    build uses): scale -127/m for m the value of largest magnitude, round half to even, at most
    127, times the f32 inverse scale."""
    b = x.astype(np.float32).reshape(-1, 256)
    m = b[np.arange(b.shape[0]), np.abs(b).argmax(axis=1)][:, None]
    with np.errstate(divide="ignore", invalid="ignore"):
        iscale = np.float32(-127.0) / m
        q = np.minimum(np.rint(iscale * b), 127.0)
        out = q * (np.float32(1.0) / iscale)
    return np.where(m == 0, 0.0, out).reshape(x.shape).astype(np.float64)


def round_q8_0(x):
    """Each 32-value block as Q8_0 holds it (quantize_row_q8_0 of ggml-cpu/arch/x86/quants.c):
    d = max|x| / 127 stored as fp16, values rint(x * 127 / max|x|) times that d."""
    b = x.astype(np.float32).reshape(-1, 32)
    a = np.abs(b).max(axis=1, keepdims=True)
    d = (a / np.float32(127.0)).astype(np.float16).astype(np.float32)
    with np.errstate(divide="ignore", invalid="ignore"):
        q = np.rint(b * np.where(a == 0, np.float32(0.0), np.float32(127.0) / a))
    return (q * d).reshape(x.shape).astype(np.float64)


def forward(tname, ids, round_acts):
    """Logits (len(ids), n_vocab) of quant-TYPE.gguf in float64, its blocks decoded by gguf.quants;
    with round_acts every product's input is first rounded to the type's vec_dot_type, as
    llama.cpp's CPU backend does. The llama graph: RMS norm, q/k/v, RoPE on adjacent pairs,
    causal softmax attention (q head h reads kv head h / (n_head / n_head_kv)), SwiGLU."""
    model = "quant-" + tname
    qt = qtype(tname)
    E, H, HKV, D = SPEC["n_embd"], SPEC["n_head"], SPEC["n_head_kv"], SPEC["head"]
    W = {n: decode(make_blocks(tname, model + "/" + n, shape, std), qt, shape).astype(np.float64)
         for n, shape, std in matrices()}
    rnd = {"Q8_K": round_q8_k, "Q8_0": round_q8_0}[TYPES[tname][1]] if round_acts else (lambda x: x)

    def norm(x, n):
        g = mtm.rand_tensor(mtm.SEED, model + "/" + n, (E,), mtm.NORM_STD, 1.0).astype(np.float64)
        return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + mtm.RMS_EPS) * g

    def mul(n, x):
        return rnd(x) @ W[n].T

    T = len(ids)
    pos = np.arange(T, dtype=np.float64)[:, None]
    theta = pos * SPEC["rope_base"] ** (-np.arange(0, D, 2, dtype=np.float64) / D)  # (T, D/2)
    cos, sin = np.cos(theta)[:, None, :], np.sin(theta)[:, None, :]

    def rope(x):  # (T, heads, D), pairs (2i, 2i+1)
        a, b = x[..., 0::2], x[..., 1::2]
        out = np.empty_like(x)
        out[..., 0::2], out[..., 1::2] = a * cos - b * sin, a * sin + b * cos
        return out

    x = W["token_embd.weight"][ids]
    mask = np.triu(np.full((T, T), -np.inf), 1)
    for il in range(N_LAYER):
        b = "blk.%d." % il
        h = norm(x, b + "attn_norm.weight")
        q = rope(mul(b + "attn_q.weight", h).reshape(T, H, D))
        k = rope(mul(b + "attn_k.weight", h).reshape(T, HKV, D))
        v = mul(b + "attn_v.weight", h).reshape(T, HKV, D)
        o = np.empty((T, H, D))
        for hh in range(H):
            kv = hh // (H // HKV)
            s = q[:, hh] @ k[:, kv].T / math.sqrt(D) + mask
            p = np.exp(s - s.max(axis=1, keepdims=True))
            o[:, hh] = (p / p.sum(axis=1, keepdims=True)) @ v[:, kv]
        x = x + mul(b + "attn_output.weight", o.reshape(T, H * D))
        h = norm(x, b + "ffn_norm.weight")
        g = mul(b + "ffn_gate.weight", h)
        x = x + mul(b + "ffn_down.weight", g / (1 + np.exp(-g)) * mul(b + "ffn_up.weight", h))
    return mul("output.weight", norm(x, "output_norm.weight"))


# ---- results table ----------------------------------------------------------------------------
TABLE_BEGIN = "<!-- results table: written by scripts/make-quant-models.py --table -->"
TABLE_END = "<!-- end of results table -->"


def read_fixture_logits(path):
    """(token ids, {position: logits}) of a fixture file (make-arch-fixtures.py's format)."""
    import struct
    with open(path, "rb") as f:
        data = f.read()
    n_vocab, _, n_tokens, n_rows = struct.unpack_from("<4I", data, 8)
    ids = [int(i) for i in np.frombuffer(data, dtype="<i4", count=n_tokens, offset=8 + 16 + 32)]
    off = 8 + 16 + 32 + 4 * n_tokens
    rows = {}
    for _ in range(n_rows):
        (p,) = struct.unpack_from("<I", data, off)
        rows[p] = np.frombuffer(data, dtype="<f4", count=n_vocab, offset=off + 4)
        off += 4 + 4 * n_vocab
    return ids, rows


def write_table(models):
    lines = ["| type | bits/weight | vec_dot type | max KL | mean KL | bound | F32 twin: max KL | "
             "0-15: llama.cpp vs its twin / vs sjkv | f64 pass, f32 activations: max KL | "
             "f64 pass, rounded as llama.cpp: positions within 1e-9 (max KL there) | fixture bytes |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for t in TYPES:
        kl_file = os.path.join(models, "kl-%s.txt" % t)
        try:
            with open(kl_file, encoding="utf-8") as f:
                vals = {k: float(v) for k, v in (line.split() for line in f if line.strip())}
        except (OSError, ValueError) as e:
            fail("cannot read %s (%s); run test_quant_models first" % (kl_file, e), 2)
        ids, quant = read_fixture_logits(os.path.join(GOLDEN, t + ".logits"))
        _, twin = read_fixture_logits(os.path.join(GOLDEN, t + "-f32.logits"))
        pos = sorted(twin)
        own = kl_rows(np.stack([quant[p] for p in pos]), np.stack([twin[p] for p in pos]))
        rows = np.stack([quant[p] for p in sorted(quant)])
        plain = kl_rows(rows, forward(t, ids, False))
        rounded = kl_rows(rows, forward(t, ids, True))
        exact = rounded < 1e-9
        size = os.path.getsize(os.path.join(GOLDEN, t + ".logits")) + os.path.getsize(os.path.join(GOLDEN, t + "-f32.logits"))
        lines.append("| %s | %.4g | %s | %.2e | %.2e | %.2g | %.1e | %.2e / %.2e | %.2e | %d of %d (%.0e) | %d |" % (
            TYPES[t][0], bits_per_weight(t), TYPES[t][1], vals["max"], vals["mean"], vals["bound"], vals["twin_max"],
            own.max(), vals["max_0_15"], plain.max(), exact.sum(), len(exact), rounded[exact].max(), size))
    readme = os.path.join(GOLDEN, "README.md")
    with open(readme, encoding="utf-8") as f:
        text = f.read()
    a, b = text.find(TABLE_BEGIN), text.find(TABLE_END)
    if a < 0 or b < a:
        fail("%s has no results table markers" % readme, 2)
    text = text[:a + len(TABLE_BEGIN)] + "\n" + "\n".join(lines) + "\n" + text[b:]
    with open(readme, "w", encoding="utf-8") as f:
        f.write(text)
    print("\n".join(lines))


class Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, exit 2
        fail("error: %s (see --help)" % message, 2)


def main():
    ap = Parser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, help="directory of quant-TYPE.gguf (created if missing)")
    ap.add_argument("--only", nargs="+", metavar="TYPE", help="only these types (%s)" % ", ".join(TYPES))
    ap.add_argument("--twins", action="store_true", help="also write quant-TYPE-f32.gguf (blocks decoded to F32)")
    ap.add_argument("--check", metavar="FILE", help="compare the SHA-256 of each quant-TYPE.gguf with FILE; exit 1 on a mismatch")
    ap.add_argument("--write-hashes", metavar="FILE", help="write the SHA-256 of the quant-TYPE.gguf files to FILE")
    ap.add_argument("--fixtures", metavar="DIR", help="then run llama.cpp (llama-cpp-python) on them and write "
                    "DIR/TYPE.logits and DIR/TYPE-f32.logits (needs --twins)")
    ap.add_argument("--threads", type=int, default=2, help="llama.cpp threads for --fixtures (default 2)")
    ap.add_argument("--table", action="store_true", help="only rewrite the results table of tests/golden/quant/README.md "
                    "from the kl-TYPE.txt files test_quant_models wrote into --out")
    a = ap.parse_args()
    names = a.only or list(TYPES)
    for n in names:
        if n not in TYPES:
            ap.error("unknown type '%s' (known: %s)" % (n, ", ".join(TYPES)))
    if a.fixtures and not a.twins:
        ap.error("--fixtures needs --twins")
    try:
        import gguf  # noqa: F401
    except ImportError:
        fail("the Python package gguf is missing (pip install gguf==0.19.0)", 2)
    if a.table:
        write_table(a.out)
        return 0
    if a.fixtures and importlib.util.find_spec("llama_cpp") is None:
        fail("--fixtures: llama-cpp-python is missing; run this with the Python of its venv", 2)
    expected = mtm.read_hashes(a.check) if a.check else None
    try:
        os.makedirs(a.out, exist_ok=True)
    except OSError as e:
        fail("cannot create --out %s (%s)" % (a.out, e.strerror), 2)
    digests = {}
    for n in names:
        final = os.path.join(a.out, "quant-%s.gguf" % n)
        twin = os.path.join(a.out, "quant-%s-f32.gguf" % n) if a.twins else None
        tmp_twin = twin + ".tmp%d" % os.getpid() if twin else None
        try:
            write_atomically(final, lambda tmp: build(n, tmp, tmp_twin))
            if twin:
                os.replace(tmp_twin, twin)
        finally:
            if tmp_twin and os.path.exists(tmp_twin):
                os.unlink(tmp_twin)
        fname = os.path.basename(final)
        digests[fname] = mtm.sha256(final)
        print("%s  %s (%d bytes, %s)" % (digests[fname], final, os.path.getsize(final), TYPES[n][0]))
    mtm.hash_list(digests, a.write_hashes, expected, a.check)
    if a.fixtures:
        make_fixtures(names, a.out, a.fixtures, a.threads)
    return 0


if __name__ == "__main__":
    sys.exit(main())
