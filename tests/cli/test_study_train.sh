#!/usr/bin/env bash
# scripts/study --train end to end on a copy of study/ whose training manifest keeps two texts
# (skipped, exit 77, without the default model): the texts are captured, every run of
# TRAIN_RUNS trains (one Lloyd iteration: a check of the pipeline, not of convergence), the
# tables land in the copy's codebooks/ with train.csv, a fresh work folder takes the runs from
# the store without capturing, --no-train says which arms it left out, a training text that is also a study
# file is refused before any work, and the report carries the training table.
# Usage: test_study_train.sh SOURCE_DIR BUILD_DIR SCRATCH
set -euo pipefail
# shellcheck source=study_common.sh
. "$(dirname "$0")/study_common.sh"

cp -r "$src/study" "$scratch/study"
rm -rf "$scratch/study/codebooks" "$scratch/study/train.csv"
cp -r "$scratch/study" "$scratch/study-notrain"
"$py" - "$scratch/study/train-manifest.toml" <<'PY'
import re, sys
p = sys.argv[1]
s = open(p).read()
files = re.findall(r'(\[\[file\]\]\n(?:[a-z0-9_]+ = "[^"]*"\n)+)', s)
texts = re.findall(r'\[\[text\]\]\nname = "([^"]+)"\ntemplate = "([^"]+)"', s)
assert len(texts) >= 2 and files
open(p, "w").write("\n".join(files) + "\n" + "".join(f'[[text]]\nname = "{n}"\ntemplate = "{t}"\n\n' for n, t in texts[:2]))
PY
"$py" "$src/scripts/study" --quick --train --report-only --train-max-iters 1 --build "$build" --study-dir "$scratch/study" \
  --work "$scratch/work" --out "$scratch/out" --store "$scratch/store" 2> "$scratch/train.log" || { tail -5 "$scratch/train.log"; fail "study --train"; }
for b in 2 3 4; do
  for ext in sjcb bin; do [ -s "$scratch/study/codebooks/gemma3-270m-${b}bit.$ext" ] || fail "no ${b}-bit .$ext"; done
done
[ "$(wc -c < "$scratch/study/codebooks/gemma3-270m-3bit.bin")" = 2048 ] || fail "3-bit table size"
[ "$(wc -c < "$scratch/study/codebooks/gemma3-270m-4bit.bin")" = 4096 ] || fail "4-bit table size"
"$py" - "$scratch/study/train.csv" <<'PY' || fail "train.csv"
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
runs = {(r["bits"], r["init"]) for r in rows}
assert runs == {("3", "reference"), ("2", "reference"), ("3", "identity"), ("4", "identity")}, runs
for b in ("2", "3", "4"):
    chosen = {r["init"] for r in rows if r["bits"] == b and r["chosen"] == "1"}
    assert len(chosen) == 1, (b, chosen)
for r in rows:
    assert int(r["train_tiles"]) > 0 and int(r["iterations"]) <= 1, r
    if r["init"] == "reference":  # iteration 0 is the reference tables: training starts at their error
        assert float(r["heldout_mse_trained"]) < 1.5 * float(r["heldout_mse_reference"]), r
PY
grep -q "## Codebooks trained here" "$scratch/out/RESULTS.md" || fail "the report has no training table"

# Without the tables, --no-train reports the detail set from the committed scores and says which
# arms it left out instead of calling the set complete.
"$py" "$src/scripts/study" --sets detail --no-train --report-only --build "$build" --study-dir "$scratch/study-notrain" \
  --work "$scratch/work-notrain" --out "$scratch/out-notrain" 2> "$scratch/notrain.log" ||
  { tail -5 "$scratch/notrain.log"; fail "study --no-train --report-only"; }
grep -q "6 arms left out: the tables they name are not trained yet" "$scratch/out-notrain/RESULTS.md" ||
  fail "the report does not say the trained-table arms were left out"
grep -q '^detail,all,sj:4/4:exact=k,sj:4/4,ratio,' "$scratch/out-notrain/results.csv" || fail "no detail comparison from the store"

# The finished runs are in the store: a fresh work folder captures and trains nothing and
# publishes the same tables and train.csv.
for r in b3-reference b2-reference b3-identity b4-identity; do
  for ext in sjcb bin json; do [ -s "$scratch/store/_train/$r.$ext" ] || fail "no stored $r.$ext"; done
done
# What is committed names no folder of the machine that trained it: outputs and inputs are bare names.
if grep -l -F "$scratch" "$scratch"/store/_train/* "$scratch"/study/codebooks/*; then fail "a stored run names a machine path"; fi
cp "$scratch/study/train.csv" "$scratch/train-first.csv"
cp "$scratch/study/codebooks/gemma3-270m-3bit.bin" "$scratch/cb3-first.bin"
rm -rf "$scratch/study/codebooks" "$scratch/study/train.csv"
"$py" "$src/scripts/study" --quick --train --report-only --train-max-iters 1 --build "$build" --study-dir "$scratch/study" \
  --work "$scratch/work-fresh" --out "$scratch/out" --store "$scratch/store" 2> "$scratch/fresh.log" ||
  { tail -5 "$scratch/fresh.log"; fail "study --train from the store"; }
grep -q "0 to capture, 0 of 4 runs to train" "$scratch/fresh.log" || { cat "$scratch/fresh.log"; fail "the fresh run captured or trained"; }
cmp -s "$scratch/study/train.csv" "$scratch/train-first.csv" || fail "train.csv from the store differs"
cmp -s "$scratch/study/codebooks/gemma3-270m-3bit.bin" "$scratch/cb3-first.bin" || fail "the 3-bit table from the store differs"

# A training text that quotes a study file is refused by name, exit 2, before any capture.
cp -r "$scratch/study" "$scratch/study-bad"
"$py" - "$scratch/study-bad" <<'PY'
import re, sys, tomllib
d = sys.argv[1]
m = tomllib.load(open(d + "/manifest.toml", "rb"))
f = m["file"][0]
p = d + "/train-manifest.toml"
s = open(p).read()
s = re.sub(r'(\[\[file\]\]\nid = "[^"]*"\npath = ")[^"]*("\nsha256 = ")[0-9a-f]*', lambda x: x.group(1) + f["path"] + x.group(2) + f["sha256"], s, count=1)
open(p, "w").write(s)
PY
set +e
"$py" "$src/scripts/study" --quick --train --report-only --build "$build" --study-dir "$scratch/study-bad" --work "$scratch/work-bad" \
  --out "$scratch/out-bad" 2> "$scratch/bad.log"
rc=$?
set -e
[ $rc -eq 2 ] || { cat "$scratch/bad.log"; fail "a shared file gave exit $rc, not 2"; }
grep -q "is also a study file" "$scratch/bad.log" || { cat "$scratch/bad.log"; fail "message"; }
[ ! -e "$scratch/work-bad/train" ] || [ -z "$(ls "$scratch/work-bad/train" | grep capture)" ] || fail "captured despite the refusal"
echo "study --train: ok"
