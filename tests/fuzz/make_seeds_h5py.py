#!/usr/bin/python3
"""Rewrites sjkv HDF5 seeds in HDF5's oldest object formats, for the fuzz corpus.

    HDF5_PLUGIN_PATH=build/snapshot/hdf5-plugins /usr/bin/python3 \
        tests/fuzz/make_seeds_h5py.py tests/fuzz/corpus

sjkv writes HDF5 1.10 object formats, whose metadata all carry checksums: nearly every byte a
fuzzer flips in such a file fails a checksum inside HDF5, and the fuzzer rarely reaches sjkv's
own checks of attributes and shapes. Readers accept any HDF5 file (docs/FORMAT.md), so this
script copies a few of the seeds `sjkv_fuzz_seeds` wrote into files with libver 'earliest'
(version 0 superblock, version 1 object headers, no metadata checksums) and uncompressed
contiguous datasets, same attributes (integer types and dataspaces kept; strings as
fixed-length null-padded UTF-8), same values. Needs h5py and
numpy (Debian: python3-h5py) and sjkv's zstd plugin to read the sources.
"""

import os
import sys

import h5py
import numpy

SOURCES = {
    "capture": ["valid-d32-h1-t4.h5", "valid-d64-h2-t40-2layers.h5"],
    "snapshot": ["valid-n-below-sink.h5", "valid-44-q8-d64.h5"],
}


def copy_attrs(src, dst):
    for name in src.attrs:
        aid = src.attrs.get_id(name)
        value, dtype = src.attrs[name], aid.dtype
        if h5py.check_string_dtype(dtype) is not None:
            # fixed-length, null-padded UTF-8 (docs/FORMAT.md section 1; readers refuse
            # variable-length strings); the empty string is one NUL byte
            raw = value.encode("utf-8") if isinstance(value, str) else bytes(value)
            tid = h5py.h5t.C_S1.copy()
            tid.set_size(max(1, len(raw)))
            tid.set_strpad(h5py.h5t.STR_NULLPAD)
            tid.set_cset(h5py.h5t.CSET_UTF8)
            space = h5py.h5s.create(h5py.h5s.SCALAR)
            a = h5py.h5a.create(dst.id, name.encode(), tid, space)
            a.write(numpy.array(raw.ljust(max(1, len(raw)), b"\0"), dtype="S%d" % max(1, len(raw))), mtype=tid)
            continue
        dst.attrs.create(name, value, shape=aid.shape, dtype=dtype)


def copy_tree(src, dst):
    copy_attrs(src, dst)
    for name, obj in src.items():
        if isinstance(obj, h5py.Group):
            copy_tree(obj, dst.create_group(name))
        else:
            d = dst.create_dataset(name, data=obj[...], dtype=obj.dtype)  # contiguous, no filters
            copy_attrs(obj, d)


def main(root):
    for reader, names in SOURCES.items():
        for name in names:
            src_path = os.path.join(root, reader, name)
            dst_path = os.path.join(root, reader, name.replace("valid-", "valid-h5-earliest-"))
            with h5py.File(src_path, "r") as src, h5py.File(dst_path, "w", libver="earliest", track_order=False) as dst:
                copy_tree(src, dst)
            print(dst_path, os.path.getsize(dst_path))


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "tests/fuzz/corpus")
