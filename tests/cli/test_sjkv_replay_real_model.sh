#!/bin/sh
# sjkv-replay end to end on the real default model (skips with 77 when it is not installed):
# a short prompt, 48 generated tokens, the reference arm replayed against itself (KL exactly 0),
# f16 near 0, compressed arms above it, every KL >= 0, results complete; 1 and 2 threads agree.
# The trellis arm runs with the format's tables (Gemma 3 270M's shipped table set,
# data/tablesets/gemma3-270m.json, is the default for no width since docs/RESULTS.md finding 11);
# --codebook gemma3-270m names the set: so in the results, the same bits as its table files.
set -eu
tool=$1; dir=$2; prompt=$3; encode=$4; train=$5
model=${SJKV_MODEL:-${XDG_CACHE_HOME:-$HOME/.cache}/sjkv/models/default.gguf}
if [ ! -f "$model" ]; then echo "no model at $model (scripts/setup installs it)"; exit 77; fi
rm -rf "$dir"; mkdir -p "$dir"
# ~480 prompt tokens: the first paragraphs of the shipped demo prompt.
head -c 2200 "$prompt" > "$dir/prompt.txt"
arms=f32,f16,q4_0:rot,sj:4/4:tail=128,sj:3/2t:tail=128
"$tool" run --prompt-file "$dir/prompt.txt" --generate 48 --arms "$arms" --baseline f16 --ubatch 64 \
  --out "$dir/r2" --threads 2 -q > "$dir/table2.txt"
for f in results.json positions.csv summary.md kl_by_position.svg kl_cdf.svg kl_vs_bits.svg trajectory.h5; do
  test -s "$dir/r2/$f"
done
python3 - "$dir/r2" <<'PY'
import csv, json, sys
d = sys.argv[1]
r = json.load(open(d + "/results.json"))
arms = {a["arm"]: a for a in r["arms"]}
T = "sj:3/2t:tail=128"  # auto: the format's tables (the shipped set is no default)
assert set(arms) == {"f32", "f16", "q4_0:rot", "sj:4/4:tail=128", T}, arms.keys()
for a in arms.values():
    assert a["positions"] == 48, a
    for k in ("mean_kl", "median_kl", "p90_kl", "p99_kl", "max_kl"):
        assert a[k] >= 0.0, (a["arm"], k, a[k])
    assert a["median_kl"] <= a["p90_kl"] <= a["p99_kl"] <= a["max_kl"], a
    assert 0.0 <= a["same_top"] <= 1.0, a
assert arms["f32"]["max_kl"] == 0.0, arms["f32"]            # the reference replayed: exactly 0
assert arms["f16"]["mean_kl"] < 1e-4, arms["f16"]
for name in ("q4_0:rot", "sj:4/4:tail=128", T):
    assert arms[name]["mean_kl"] > arms["f16"]["mean_kl"], (name, arms[name], arms["f16"])
    assert arms[name]["mean_kl"] < 1.0, arms[name]
    assert arms[name]["bits_occupied"] < 16.0, arms[name]
assert abs(arms["q4_0:rot"]["bits_occupied"] - 4.5) < 1e-9, arms["q4_0:rot"]
assert all("note" not in a for a in arms.values()), arms  # every SJ body sealed groups
# the SJ body was exercised: fewer bits than its all-staging 6.5 + sink
assert arms[T]["bits_occupied"] < arms["sj:4/4:tail=128"]["bits_occupied"]
comps = {c["arm"]: c for c in r["comparisons"]}
for name in ("q4_0:rot", "sj:4/4:tail=128", T):
    c = comps[name]
    assert c["baseline"] == "f16" and c["of"] == 48, c
    assert c["ci_low"] <= c["ratio"] <= c["ci_high"], c
rows = list(csv.DictReader(open(d + "/positions.csv")))
assert len(rows) == 5 * 48, len(rows)
assert all(float(x["kl"]) >= 0.0 for x in rows)
print("real model ok:", {k: round(v["mean_kl"], 6) for k, v in arms.items()})
PY
# the same trajectory scored with one thread gives the same numbers
"$tool" score "$dir/r2/trajectory.h5" --arms "$arms" --baseline f16 --out "$dir/r1" --threads 1 -q > /dev/null
cmp "$dir/r1/positions.csv" "$dir/r2/positions.csv"

# --codebook gemma3-270m names the shipped set (its rows are its files', cb=FILES), and
# --codebook reference is the format's tables under the arm's own name: auto's rows
src=$(cd "$(dirname "$prompt")/../.." && pwd)
files="$src/study/codebooks/gemma3-270m-3bit.bin+$src/study/codebooks/gemma3-270m-2bit.bin"
"$tool" score "$dir/r2/trajectory.h5" --arms f16,sj:3/2t:tail=128 --codebook gemma3-270m --out "$dir/rs" --threads 2 -q \
  > /dev/null
"$tool" score "$dir/r2/trajectory.h5" --arms "f16,sj:3/2t:tail=128:cb=$files" --out "$dir/rf" --threads 2 -q > /dev/null
"$tool" score "$dir/r2/trajectory.h5" --arms f16,sj:3/2t:tail=128 --codebook reference --out "$dir/rr" --threads 2 -q \
  2> "$dir/rr.err" > /dev/null
python3 - "$dir" <<'PY'
import csv, sys
d = sys.argv[1]
def kl(folder, prefix):
    return [r["kl"] for r in csv.DictReader(open(f"{d}/{folder}/positions.csv")) if r["arm"].startswith(prefix)]
shipped = kl("rs", "sj:3/2t:tail=128:cb=gemma3-270m")
assert len(shipped) == 48 and shipped == kl("rf", "sj:3/2t:tail=128:cb="), "set and files differ"
ref = [r for r in csv.DictReader(open(f"{d}/rr/positions.csv")) if r["arm"] != "f16"]
assert {r["arm"] for r in ref} == {"sj:3/2t:tail=128"}, {r["arm"] for r in ref}
assert [r["kl"] for r in ref] == kl("r2", "sj:3/2t:tail=128"), "auto is not the format's tables"
assert [r["kl"] for r in ref] != shipped, "--codebook reference gave the set's tables"
PY
test ! -s "$dir/rr.err"
# sjkv-encode: with --model auto is the format's tables (no name), --codebook gemma3-270m the set
# (named in the snapshot); sjkv-train --model starts from the set's table of its width
"$tool" record --prompt-file "$dir/prompt.txt" --generate 4 -o "$dir/c.h5" --capture "$dir/c.capture.h5" -q
"$encode" encode "$dir/c.capture.h5" -o "$dir/s-set.h5" --bits 3/2 --tail 128 --tail-max 256 --codebook gemma3-270m -q
"$encode" encode "$dir/c.capture.h5" -o "$dir/s-ref.h5" --bits 3/2 --tail 128 --tail-max 256 --codebook reference -q
"$encode" encode "$dir/c.capture.h5" -o "$dir/s-auto.h5" --bits 3/2 --tail 128 --tail-max 256 --model "$model" -q
"$encode" inspect "$dir/s-set.h5" | grep -q "^  tables      shipped set gemma3-270m$"
"$encode" inspect "$dir/s-ref.h5" | grep -q "^  tables      the format's (reference)$"
"$encode" inspect "$dir/s-auto.h5" | grep -q "^  tables      the format's (reference)$"  # the set is no default
cmp "$dir/s-ref.h5" "$dir/s-auto.h5"
"$encode" decode "$dir/s-set.h5" -o "$dir/s-set.dec.h5" -q
"$train" "$dir/c.capture.h5" --model "$model" --bits 2 -o "$dir/cb2" --max-iters 1 > "$dir/train.out"
grep -q "from table set gemma3-270m" "$dir/train.out"

# cheap refusals before any generation (exit 1 usage / 2 bad input), nothing written
printf 'The capital of France is' > "$dir/short.txt"
: > "$dir/empty.txt"
set +e
"$tool" record --prompt-file "$dir/empty.txt" --generate 4 -o "$dir/e.h5" -q 2> "$dir/e1"; a=$?
"$tool" run --prompt-file "$dir/short.txt" --generate 1048576 --arms f16 --out "$dir/long" -q 2> "$dir/e2"; b=$?
set -e
test $a -eq 2; grep -q "empty.txt: the prompt is empty" "$dir/e1"; test ! -e "$dir/e.h5"
test $b -eq 1; grep -q "+ --generate 1048576 = .* exceeds .*training context of [0-9]* tokens" "$dir/e2"
test ! -e "$dir/long"
# an SJ arm whose body never sealed (6 + 4 positions < sink + group + tail): warned and noted
"$tool" run --prompt-file "$dir/short.txt" --generate 4 --arms f32,sj:4/4 --out "$dir/unsealed" -q \
  > /dev/null 2> "$dir/e3"
grep -q "warning: sj:4/4: no group was sealed on 1 of 1 trajectories" "$dir/e3"
grep -q '"arm": "sj:4/4".*"note": "no group was sealed' "$dir/unsealed/results.json"
grep -q '^\[1\] `sj:4/4`: no group was sealed' "$dir/unsealed/summary.md"
# SmolLM2 (head_dim 64), when installed: arms its shapes cannot take fail at once, naming why
small=$(dirname "$model")/smollm2.gguf
if [ -f "$small" ]; then
  for arm in turbo3 tq6_0 sj:3/2t; do
    set +e
    "$tool" run --model "$small" --prompt-file "$dir/short.txt" --generate 4 --arms f16,$arm --out "$dir/small" -q \
      2> "$dir/e4"; r=$?
    set -e
    test $r -eq 1; grep -q "^sjkv-replay: --arms '$arm' does not fit smollm2.gguf (layer 0, head_dim 64): " "$dir/e4"
    test "$(wc -l < "$dir/e4")" -eq 1; test ! -e "$dir/small"
  done
fi
echo OK
