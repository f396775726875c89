#!/usr/bin/env python3
"""Writes tests/golden/quants/TYPE.bin: blocks of ggml's low-bit weight formats and what the
`gguf` package's numpy dequantizer (gguf.quants, pinned gguf==0.19.0) makes of them, for
tests/codec/test_block_decode_lowbit.cpp to decode and compare bit for bit.

    python3 scripts/make-quant-fixtures.py [OUT_DIR]     # default tests/golden/quants
    python3 scripts/make-quant-fixtures.py --ggml-lib LIB [OUT_DIR]

Q1_0 and Q2_0 (ggml types 41 and 42) have no gguf.quants dequantizer: with --ggml-lib (the
libggml-base.so that llama-cpp-python 0.3.36 installs beside its package, a measuring
instrument, never a build or test dependency) their expected values come from ggml's own
to_float (ggml_get_type_traits), called through ctypes; only those two files are written then.

File layout (little-endian):
    magic        8 bytes  "SJKVQNT1"
    type name   16 bytes  ASCII, NUL-padded (the GGMLQuantizationType name, e.g. "IQ2_XXS")
    ggml type    u32      GGMLQuantizationType value
    n_blocks     u32
    block bytes  u32
    values       u32      values per block
    blocks       n_blocks * block bytes
    expected     n_blocks * values * f32   gguf.quants.dequantize of the blocks

Blocks per type, from a fixed seed (the type's id):
  * scale blocks: random bytes with the fp16 scale(s) set to finite values of every kind in
    turn (+-0, the smallest and largest subnormals, the smallest normal, 1, a negative normal,
    +-65504, a random normal); for MXFP4 every e8m0 byte 0..255 and for NVFP4 every E4M3
    byte, one per scale slot;
  * edge blocks: the sub-block scale fields walk every value, grid indices walk the whole
    grid, 7-bit sign indices (IQ2_XXS, IQ2_XS, IQ3_XXS) every ksigns entry, raw sign bytes
    (IQ2_S, IQ3_S) every byte, IQ1 delta bits both ways, packed 2-bit/trit/nibble bytes every
    byte value (TQ1_0: all 256 in qs, 64 of them in qh); d cycles through nonzero values
    (normal, subnormal, negative, 65504) so that no walk is multiplied away.
"""
import struct
import sys
import warnings
from importlib.metadata import version
from pathlib import Path

import numpy as np

import gguf.quants as gq
from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType as T

GGUF_VERSION = "0.19.0"
MAGIC = b"SJKVQNT1"

# fp16 bit patterns for the scale blocks; the last slot is drawn at random (finite, normal).
SCALES = [0x0000, 0x8000, 0x0001, 0x83FF, 0x0400, 0x3C00, 0xB4CD, 0x7BFF, 0xFBFF, None]
# Nonzero fp16 scales that the edge blocks cycle through.
EDGE_D = [0x3C00, 0x2E66, 0xB800, 0x0003, 0x7BFF, 0x4A00, 0x9C00, 0x0400]


def put16(blk, off, v):
    blk[off:off + 2] = np.frombuffer(struct.pack("<H", v), dtype=np.uint8)


def put32(blk, off, v):
    blk[off:off + 4] = np.frombuffer(struct.pack("<I", v), dtype=np.uint8)


def get16(blk, off):
    return int(blk[off]) | (int(blk[off + 1]) << 8)


def random_normal_half(rng):
    e = int(rng.integers(1, 31))
    return (int(rng.integers(0, 2)) << 15) | (e << 10) | int(rng.integers(0, 1024))


class Gen:
    """Per-type block makers: scale blocks (set_scales) and edge blocks (fill_edge)."""

    def __init__(self, qtype, rng):
        self.qtype = qtype
        self.rng = rng
        self.nvals, self.nbytes = GGML_QUANT_SIZES[qtype]

    def rand_block(self):
        return self.rng.integers(0, 256, self.nbytes, dtype=np.uint8)

    def scale_blocks(self):
        out = []
        for i, s in enumerate(SCALES):
            s = random_normal_half(self.rng) if s is None else s
            s2 = SCALES[(3 * i + 5) % (len(SCALES) - 1)]
            blk = self.rand_block()
            self.set_scales(blk, s, s2)
            out.append(blk)
        return out

    D_OFFSET = 0  # byte offset of the fp16 scale d
    EDGES = 0     # edge blocks: fill_edge's pattern for b = 0 .. EDGES - 1

    def set_scales(self, blk, d, d2):
        put16(blk, self.D_OFFSET, d)

    def edge(self):
        """Random blocks, each given fill_edge's pattern for its number, then edge scales."""
        out = []
        for b in range(self.EDGES):
            blk = self.rand_block()
            self.fill_edge(blk, b)
            self.set_scales(blk, self.edge_d(b), self.edge_d(b + 3))
            out.append(blk)
        return out

    def edge_d(self, b):
        return EDGE_D[b % len(EDGE_D)]


def set_nibble(blk, off, k, v):
    """Nibble k (0 low, 1 high) of byte blk[off] := v."""
    sh = 4 * k
    blk[off] = (int(blk[off]) & ~(0xF << sh) & 0xFF) | ((v & 0xF) << sh)


class Q2_K(Gen):
    D_OFFSET = 80  # d, then dmin
    EDGES = 16  # every scale byte (scale nibble x min nibble)

    def set_scales(self, blk, d, d2):
        put16(blk, self.D_OFFSET, d)
        put16(blk, self.D_OFFSET + 2, d2)

    def fill_edge(self, blk, b):
        blk[0:16] = np.arange(16 * b, 16 * b + 16, dtype=np.uint8)


class Q3_K(Gen):
    D_OFFSET = 108
    EDGES = 4  # 64 six-bit scales, 16 a block

    def fill_edge(self, blk, b):
        blk[96:108] = 0
        for k in range(16):
            s = 16 * b + k
            lo, hi = s & 0xF, s >> 4
            set_nibble(blk, 96 + k % 8, k // 8, lo)
            blk[96 + 8 + k % 4] |= hi << (2 * (k // 4))


class IQ4_NL(Gen):
    EDGES = 16  # every byte of two nibbles

    def fill_edge(self, blk, b):
        blk[2:18] = np.arange(16 * b, 16 * b + 16, dtype=np.uint8)


class IQ4_XS(Gen):
    EDGES = 8  # 64 six-bit scales, 8 a block

    def fill_edge(self, blk, b):
        h = 0
        for ib in range(8):
            s = 8 * b + ib
            set_nibble(blk, 4 + ib // 2, ib % 2, s & 0xF)
            h |= (s >> 4) << (2 * ib)
        put16(blk, 2, h)
        if b < 2:  # every qs byte
            blk[8:136] = np.arange(128 * b, 128 * b + 128, dtype=np.uint8)


class IQ2_XXS(Gen):
    EDGES = 8

    def fill_edge(self, blk, b):
        for ib in range(8):
            idx = sign = 0
            for g in range(4):
                n = 32 * b + 4 * ib + g
                idx |= (n % 256) << (8 * g)
                sign |= (n % 128) << (7 * g)
            put32(blk, 2 + 8 * ib, idx)
            put32(blk, 2 + 8 * ib + 4, sign | (((8 * b + ib) % 16) << 28))


class IQ2_XS(Gen):
    EDGES = 16

    def fill_edge(self, blk, b):
        for j in range(32):
            n = 32 * b + j
            put16(blk, 2 + 2 * j, (n % 512) | ((n % 128) << 9))
        for i in range(8):  # scales 2i, 2i+1 = 0..15 each block
            blk[66 + i] = (2 * i) | ((2 * i + 1) << 4)


class IQ2_S(Gen):
    EDGES = 32

    def fill_edge(self, blk, b):
        for j in range(32):
            n = 32 * b + j  # grid index 0..1023
            blk[2 + j] = n & 0xFF
            blk[34 + j] = n & 0xFF  # sign bytes: all 256 in 8 blocks
        for i in range(8):
            blk[66 + i] = sum(((32 * b + 4 * i + k) >> 8 & 3) << (2 * k) for k in range(4))
            blk[74 + i] = (2 * i) | ((2 * i + 1) << 4)


class IQ3_XXS(Gen):
    EDGES = 4

    def fill_edge(self, blk, b):
        blk[2:66] = np.arange(64 * b, 64 * b + 64, dtype=np.uint8)
        for ib in range(8):
            sign = 0
            for g in range(4):
                sign |= ((32 * b + 4 * ib + g) % 128) << (7 * g)
            put32(blk, 66 + 4 * ib, sign | (((8 * b + ib) % 16) << 28))


class IQ3_S(Gen):
    EDGES = 8

    def fill_edge(self, blk, b):
        for j in range(64):
            n = 64 * b + j  # grid index 0..511
            blk[2 + j] = n & 0xFF
        for i in range(8):
            blk[66 + i] = sum(((64 * b + 8 * i + k) >> 8 & 1) << k for k in range(8))
        blk[74:106] = np.arange(32 * b, 32 * b + 32, dtype=np.uint8)  # sign bytes
        for i in range(4):
            blk[106 + i] = ((8 * b + 2 * i) % 16) | (((8 * b + 2 * i + 1) % 16) << 4)


class IQ1_S(Gen):
    EDGES = 64

    def fill_edge(self, blk, b):
        for ib in range(8):
            h = 0
            for g in range(4):
                n = 32 * b + 4 * ib + g  # grid index 0..2047
                blk[2 + 4 * ib + g] = n & 0xFF
                h |= (n >> 8) << (3 * g)
            h |= ((ib + b) % 8) << 12
            h |= ((ib + b) & 1) << 15
            put16(blk, 34 + 2 * ib, h)


class IQ1_M(Gen):
    def set_scales(self, blk, d, d2):
        for i in range(4):  # nibble i of d into the top nibble of scale word i
            w = get16(blk, 48 + 2 * i)
            put16(blk, 48 + 2 * i, (w & 0x0FFF) | (((d >> (4 * i)) & 0xF) << 12))

    EDGES = 64

    def fill_edge(self, blk, b):
        for j in range(32):
            n = 32 * b + j  # grid index 0..2047
            blk[j] = n & 0xFF
            set_nibble(blk, 32 + j // 2, j % 2, (n >> 8) | (((b + j) & 1) << 3))
        for i in range(4):
            w = sum(((b + 4 * i + k) % 8) << (3 * k) for k in range(4))
            put16(blk, 48 + 2 * i, w)


class TQ1_0(Gen):
    D_OFFSET = 52
    EDGES = 16

    def fill_edge(self, blk, b):
        blk[0:32] = (np.arange(32) + 32 * b) % 256
        blk[32:48] = (np.arange(16) + 16 * b) % 256
        blk[48:52] = np.arange(4) * 64 + 4 * b + (b % 4)


class TQ2_0(Gen):
    D_OFFSET = 64
    EDGES = 4

    def fill_edge(self, blk, b):
        blk[0:64] = np.arange(64 * b, 64 * b + 64, dtype=np.uint8)


class MXFP4(Gen):
    def scale_blocks(self):  # every e8m0 byte, the qs bytes all 256 values in the first 16
        out = []
        for e in range(256):
            blk = self.rand_block()
            blk[0] = e
            if e < 16:
                blk[1:17] = np.arange(16 * e, 16 * e + 16, dtype=np.uint8)
            out.append(blk)
        return out



class NVFP4(Gen):
    def scale_blocks(self):  # every E4M3 byte in each of the 4 slots
        out = []
        for b in range(64):
            blk = self.rand_block()
            for s in range(4):
                blk[s] = 64 * s + b
            if b < 8:
                blk[4:36] = np.arange(32 * b, 32 * b + 32, dtype=np.uint8)
            out.append(blk)
        return out



class Q1_0(Gen):
    EDGES = 16  # every byte value in the sign bytes (16 a block)

    def fill_edge(self, blk, b):
        blk[2:18] = np.arange(16 * b, 16 * b + 16, dtype=np.uint8)


class Q2_0(Gen):
    EDGES = 16  # every byte value in the code bytes (four codes each)

    def fill_edge(self, blk, b):
        blk[2:18] = np.arange(16 * b, 16 * b + 16, dtype=np.uint8)


GENS = [Q2_K, Q3_K, IQ4_NL, IQ4_XS, IQ3_XXS, IQ3_S, IQ2_XXS, IQ2_XS, IQ2_S, IQ1_S, IQ1_M,
        TQ1_0, TQ2_0, MXFP4, NVFP4]
# ggml's types without a gguf.quants dequantizer: (name, ggml type, values, bytes), per ggml.h and
# ggml-common.h of llama-cpp-python 0.3.36 (gguf 0.19.0 names Q1_0 but not Q2_0).
GGML_ONLY = {Q1_0: ("Q1_0", 41, 128, 18), Q2_0: ("Q2_0", 42, 64, 18)}


def ggml_to_float(lib_path):
    """f(blocks, type_id, n_values) -> float32 values, by ggml's type traits' to_float."""
    import ctypes

    class Traits(ctypes.Structure):  # struct ggml_type_traits (ggml.h)
        _fields_ = [("type_name", ctypes.c_char_p), ("blck_size", ctypes.c_int64),
                    ("blck_size_interleave", ctypes.c_int64), ("type_size", ctypes.c_size_t),
                    ("is_quantized", ctypes.c_bool), ("to_float", ctypes.c_void_p),
                    ("from_float_ref", ctypes.c_void_p)]

    lib = ctypes.CDLL(lib_path)
    lib.ggml_get_type_traits.restype = ctypes.POINTER(Traits)
    lib.ggml_get_type_traits.argtypes = [ctypes.c_int]
    to_float_t = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64)

    def run(blocks, type_id, n_values, values_per_block, block_bytes):
        t = lib.ggml_get_type_traits(type_id).contents
        assert t.blck_size == values_per_block and t.type_size == block_bytes, (t.blck_size, t.type_size)
        src = np.ascontiguousarray(blocks, dtype=np.uint8)
        out = np.empty(n_values, dtype=np.float32)
        to_float_t(t.to_float)(src.ctypes.data, out.ctypes.data, n_values)
        return out.reshape(blocks.shape[0], values_per_block)
    return run


class GgmlOnly:  # the GGMLQuantizationType stand-in of a type gguf 0.19.0 cannot size
    def __init__(self, name, value):
        self.name, self.value = name, value

    def __int__(self):
        return self.value


def write_fixture(gen_cls, out_dir, to_float=None):
    if gen_cls in GGML_ONLY:
        name, type_id, nvals, nbytes = GGML_ONLY[gen_cls]
        qtype = GgmlOnly(name, type_id)
        gen = gen_cls.__new__(gen_cls)
        gen.qtype, gen.rng, gen.nvals, gen.nbytes = qtype, np.random.default_rng(type_id), nvals, nbytes
    else:
        qtype = T[gen_cls.__name__]
        gen = gen_cls(qtype, np.random.default_rng(int(qtype)))
    blocks = np.stack(gen.scale_blocks() + gen.edge()).astype(np.uint8)
    if to_float is not None:
        expected = to_float(blocks, int(qtype), blocks.shape[0] * gen.nvals, gen.nvals, gen.nbytes)
    else:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # MXFP4 e = 255 overflows to inf
            expected = gq.dequantize(blocks, qtype)
    n = blocks.shape[0]
    assert blocks.shape == (n, gen.nbytes) and expected.shape == (n, gen.nvals)
    assert expected.dtype == np.float32
    path = out_dir / (qtype.name + ".bin")
    with open(path, "wb") as f:
        f.write(MAGIC)
        f.write(qtype.name.encode("ascii").ljust(16, b"\0"))
        f.write(struct.pack("<4I", int(qtype), n, gen.nbytes, gen.nvals))
        f.write(blocks.tobytes())
        f.write(expected.astype("<f4").tobytes())
    return path, n


def main():
    if version("gguf") != GGUF_VERSION:
        sys.exit("make-quant-fixtures: gguf %s installed, %s pinned"
                 % (version("gguf"), GGUF_VERSION))
    args = sys.argv[1:]
    lib = None
    if args[:1] == ["--ggml-lib"]:
        if len(args) < 2:
            sys.exit("make-quant-fixtures: --ggml-lib needs the path of libggml-base.so")
        lib, args = args[1], args[2:]
    out_dir = Path(args[0] if args else "tests/golden/quants")
    out_dir.mkdir(parents=True, exist_ok=True)
    to_float = ggml_to_float(lib) if lib else None
    for g in (list(GGML_ONLY) if lib else GENS):
        path, n = write_fixture(g, out_dir, to_float)
        print("%-28s %4d blocks %7d bytes" % (path, n, path.stat().st_size))


if __name__ == "__main__":
    main()
