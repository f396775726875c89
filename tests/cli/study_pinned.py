#!/usr/bin/env python3
"""Whether this system holds the study's pinned files as pinned, by scripts/study's own check
(file_defects). Exit 0: all as pinned; 77: some differ or are missing (listed); 1: a manifest
that cannot be read. usage: study_pinned.py SCRIPTS_STUDY MANIFEST..."""
import importlib.machinery
import importlib.util
import sys

loader = importlib.machinery.SourceFileLoader("sjkv_study", sys.argv[1])
study = importlib.util.module_from_spec(importlib.util.spec_from_loader(loader.name, loader))
loader.exec_module(study)
try:
    defects = [d for path in sys.argv[2:] for d in study.file_defects(path, study.load_toml(path))[1]]
except study.StudyError as e:
    print(f"FAIL: {e}")
    sys.exit(1)
if defects:
    print(f"SKIP: {len(defects)} of the study's pinned system files are not as pinned on this machine "
          "(another Debian 12 point release?):\n  " + "\n  ".join(defects))
    sys.exit(77)
