"""Damaged copies of a GGUF for the command-line tests: a key or tensor name as GGUF writes it,
and a copy of the file with one unique byte run replaced (same length keeps every offset valid)."""
import struct


def named(s):
    """A GGUF string: u64 length, then the bytes."""
    return struct.pack("<Q", len(s)) + s.encode()


def patcher(src, folder):
    """patched(old, new, name) writes FOLDER/NAME: the file SRC with its one run OLD replaced by NEW."""
    with open(src, "rb") as f:
        b = f.read()

    def patched(old, new, name):
        i = b.find(old)
        assert i >= 0 and b.find(old, i + 1) < 0, name
        with open(folder + "/" + name, "wb") as f:
            f.write(b[:i] + new + b[i + len(old):])
    return patched
