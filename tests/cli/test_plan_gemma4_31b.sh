#!/bin/sh
# scripts/plan-gemma4-31b: sjkv-encode plan --model on a metadata-only GGUF of Gemma 4 31B's
# geometry reproduces the note's section 9 memory rule (10 full-attention layers of 4 x 512 at
# 262,144 tokens: 20 GiB at f16), counts the 50 sliding layers apart, and in the budget SJ-KVaRN
# 4/4 used at the note's 216,064 tokens fits 3/3t and 3/2t at the model's 262,144 (as the note).
set -eu
python=$1; script=$2; build=$3; dir=$4
rm -rf "$dir"; mkdir -p "$dir"
"$python" "$script" --build "$build" --keep "$dir/31b.gguf" > "$dir/out.md"
cat "$dir/out.md"
grep -q "262,144 tokens: 21,474,836,480 B = 20.000 GiB" "$dir/out.md"
grep -q "^- sliding layers: 50 of 60, 1,536 cells (window 1,024 + ubatch 512): 637.5 MiB at q8_0" "$dir/out.md"
"$python" - "$dir/out.md" <<'PY'
import sys
rows = {}
for line in open(sys.argv[1]):
    c = [x.strip() for x in line.strip().strip("|").split("|")]
    if len(c) == 7 and c[0] in ("f16", "tq6_0", "sjkv 4/4", "sjkv 3/3t", "sjkv 3/2t"):
        rows[c[0]] = int(c[5].replace(",", ""))
assert len(rows) == 5, rows
assert 216064 <= rows["sjkv 4/4"] < 216064 + 1024, rows   # the budget is its own bytes
for f in ("sjkv 3/3t", "sjkv 3/2t"):
    assert rows[f] >= 262144, (f, rows)                     # the note: the full window
assert rows["tq6_0"] >= 112640 and rows["f16"] < rows["tq6_0"] < rows["sjkv 4/4"], rows
PY
# the file itself: plan's text names the sliding layers too
"$build/tools/sjkv-encode" plan --model "$dir/31b.gguf" --context 262144 --ubatch 512 | grep -q \
  "^sliding-window layers (.*): 50 of 60 layers, 409600 values a cell; 1536 cells"
echo "plan on Gemma 4 31B's geometry: the note's rule"
