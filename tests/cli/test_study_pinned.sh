#!/bin/sh
# The study tests' pre-check (study_pinned.py over scripts/study's file_defects): a manifest whose
# files are as pinned passes (0), one naming a file with another SHA-256 or a missing file
# skips (77) and lists them, one that is not valid TOML fails (1).
# Usage: test_study_pinned.sh SOURCE_DIR SCRATCH PYTHON
set -eu
src=$1 scratch=$2 py=$3
rm -rf "$scratch" && mkdir -p "$scratch"
printf 'pinned text\n' > "$scratch/a.txt"
sum=$("$py" -c 'import hashlib, sys; print(hashlib.sha256(open(sys.argv[1], "rb").read()).hexdigest())' "$scratch/a.txt")
check() { "$py" "$src/tests/cli/study_pinned.py" "$src/scripts/study" "$@" > "$scratch/out.txt" 2>&1 && echo 0 || echo $?; }
fail() { echo "FAIL: $*"; cat "$scratch/out.txt"; exit 1; }

printf '[[file]]\nid = "a"\npath = "%s"\nsha256 = "%s"\n' "$scratch/a.txt" "$sum" > "$scratch/ok.toml"
[ "$(check "$scratch/ok.toml")" = 0 ] || fail "files as pinned"

other=$(printf '%s' "$sum" | sed 's/^./0/; t; s/^/0/')
[ "$other" != "$sum" ] || other=$(printf '%s' "$sum" | sed 's/^./1/')
printf '[[file]]\nid = "a"\npath = "%s"\nsha256 = "%s"\n[[file]]\nid = "b"\npath = "%s"\nsha256 = "%s"\n' \
  "$scratch/a.txt" "$other" "$scratch/none.txt" "$sum" > "$scratch/differ.toml"
[ "$(check "$scratch/ok.toml" "$scratch/differ.toml")" = 77 ] || fail "a changed and a missing file"
grep -q "^SKIP: 2 of the study's pinned system files" "$scratch/out.txt" || fail "the count"
grep -q "file 'a' ($scratch/a.txt) has SHA-256 $sum, the manifest says $other" "$scratch/out.txt" || fail "the changed file"
grep -q "file 'b' ($scratch/none.txt) is missing on this system" "$scratch/out.txt" || fail "the missing file"

printf 'garbage =\n' > "$scratch/bad.toml"
[ "$(check "$scratch/bad.toml")" = 1 ] || fail "a manifest that is not TOML"
grep -q "^FAIL: .*not valid TOML" "$scratch/out.txt" || fail "the TOML message"
echo "study_pinned: 3 cases passed"
