#!/usr/bin/env python3
"""Runs README.md's commands, so that none can go stale.

Every ```sh block of README runs, in order, as one bash script (set -euo pipefail), in a fresh
folder whose build/ is the build under test and data/, tests/, examples/ and scripts/ the
repository's, so the
commands' own outputs land there and nothing in the tree changes. A block is left out only
when the line before its fence says `<!-- readme-check: not run here; REASON -->`, REASON
naming what runs it instead (the set-up block: .ci/run runs scripts/run-tests, the test
readme_demo runs scripts/run-demo). Exit 77 (skipped) when the default model is not
installed; the examples record with it.

usage: readme_commands.py README REPO BUILD WORKDIR
"""
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

SKIP = re.compile(r"<!--\s*readme-check:\s*not run here;\s*(.+?)\s*-->")
LINKED = ("data", "tests", "examples", "scripts")


def blocks(text):
    """(first line number, lines, skip reason or None) of each ```sh block."""
    out, lines = [], text.split("\n")
    i = 0
    while i < len(lines):
        if lines[i].strip() == "```sh":
            start, body = i + 1, []
            i += 1
            while i < len(lines) and lines[i].strip() != "```":
                body.append(lines[i])
                i += 1
            if i == len(lines):
                sys.exit(f"README: the ```sh block at line {start} is not closed")
            prev = next((l for l in reversed(lines[:start - 1]) if l.strip()), "")
            m = SKIP.search(prev)
            out.append((start + 1, body, m.group(1) if m else None))
        i += 1
    return out


def main():
    if len(sys.argv) != 5:
        sys.exit(__doc__.strip().split("\n")[-1])
    readme, repo, build, work = Path(sys.argv[1]), Path(sys.argv[2]).resolve(), Path(sys.argv[3]).resolve(), Path(sys.argv[4])
    found = blocks(readme.read_text(encoding="utf-8"))
    run = [b for b in found if b[2] is None]
    skipped = [b for b in found if b[2] is not None]
    # The set-up block is the only one another test runs; everything else runs here.
    if len(skipped) > 1:
        sys.exit(f"README: {len(skipped)} blocks are marked not run here; only the set-up block may be")
    commands = sum(1 for _, body, _ in run for l in body if l.strip() and not l.strip().startswith("#"))
    if commands < 10:
        sys.exit(f"README: only {commands} commands found in ```sh blocks; the examples are missing")

    model = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "sjkv/models/default.gguf"
    if not model.is_file():
        print(f"SKIP: no model at {model} (scripts/setup installs it)")
        return 77

    if work.exists():
        shutil.rmtree(work)
    work.mkdir(parents=True)
    (work / "build").symlink_to(build)
    for name in LINKED:
        (work / name).symlink_to(repo / name)
    script = ["set -euo pipefail"]
    for line_no, body, _ in run:
        script.append(f"echo '=== README.md line {line_no}'")
        command = []  # a command's lines, joined by trailing backslashes
        for line in body:
            command.append(line)
            if line.endswith("\\"):
                continue
            text = " ".join(l.rstrip("\\").strip() for l in command)
            if text and not text.startswith("#"):
                script.append("echo " + shlex.quote("$ " + text))
            script.extend(command)
            command = []
        script.extend(command)
    (work / "readme.sh").write_text("\n".join(script) + "\n", encoding="utf-8")
    for _, reason in [(b[0], b[2]) for b in skipped]:
        print(f"not run here: {reason}")
    r = subprocess.run(["bash", "readme.sh"], cwd=work)
    if r.returncode != 0:
        print(f"README's commands failed (exit {r.returncode}); the script is {work / 'readme.sh'}", file=sys.stderr)
        return 1
    print(f"README: {commands} commands in {len(run)} blocks ran")
    return 0


if __name__ == "__main__":
    sys.exit(main())
