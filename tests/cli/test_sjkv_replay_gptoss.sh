#!/bin/sh
# gpt-oss end to end on its test model (scripts/make-test-models.py: learned attention sinks,
# a 128-token window on layers 0 and 2, YaRN, 8 experts of 128 with top 4, head size 64):
# recorded at 1 and 2 threads (the same trajectory bytes), scored with f16, q8_0,
# sj:4/4:staging=q8_0 (the scalar 4/4 that a head of 64 admits; plain sj:4/4 is refused with the
# codec's reason) and kvarn:4/4:tail=0 at 1 and 2 threads (the same positions.csv bytes); a
# frontier --quick over three trajectories, whose default falls back to sj:4/4:staging=q8_0;
# sjkv-encode plan --model names the sliding layers.
set -eu
replay=$1; models=$3; prompt=$4; dir=$5; py=$6; encode=$7
rm -rf "$dir"; mkdir -p "$dir"
m="$models/gpt-oss.gguf"
arms=f16,q8_0,sj:4/4:staging=q8_0,kvarn:4/4:tail=0
for t in 1 2; do  # one folder per thread count: positions.csv names the trajectory file
  mkdir "$dir/t$t"
  "$replay" record --model "$m" --prompt-file "$prompt" --generate 8 -o "$dir/t$t/g.h5" --threads $t -q
  "$replay" score --model "$m" "$dir/t$t/g.h5" --arms "$arms" --baseline f16 --out "$dir/t$t/s" --threads $t -q \
    > /dev/null
done
cmp "$dir/t1/g.h5" "$dir/t2/g.h5"
cmp "$dir/t1/s/positions.csv" "$dir/t2/s/positions.csv"
"$py" - "$dir/t2/s/results.json" <<'PY'
import json, math, sys
arms = {a["arm"]: a for a in json.load(open(sys.argv[1]))["arms"]}
assert set(arms) == {"f16", "q8_0", "sj:4/4:staging=q8_0", "kvarn:4/4:tail=0"}, arms.keys()
n = arms["f16"]["positions"]
assert 1 <= n <= 8, arms["f16"]
for a in arms.values():
    assert a["positions"] == n, a
    assert all(math.isfinite(a[k]) and a[k] >= 0.0 for k in ("mean_kl", "max_kl")), a
f16, q8, kv = arms["f16"], arms["q8_0"], arms["kvarn:4/4:tail=0"]
assert q8["bits_occupied"] == 8.5 and q8["mean_kl"] > f16["mean_kl"], (q8, f16)
assert "note" not in kv, kv  # every group sealed
assert kv["mean_kl"] > q8["mean_kl"] and kv["bits_occupied"] < 8.0, (kv, q8)
print("gpt-oss", {k: float("%.3g" % v["mean_kl"]) for k, v in arms.items()})
PY

# sj:4/4 (tq6_0 staging) cannot hold a head of 64: refused, naming the reason.
if "$replay" score --model "$m" "$dir/t1/g.h5" --arms sj:4/4 --out "$dir/bad" -q 2> "$dir/bad.err"; then
  echo "sj:4/4 accepted on a head of 64" >&2; exit 1
fi
grep -q "head_dim must be a multiple of the staging block" "$dir/bad.err"

# frontier --quick: two tuning trajectories, one held out; the default falls back to the arm
# that fits, and the report is written.
for i in 1 2 3; do
  tail -c +$((i * 700)) "$prompt" | head -c 1400 > "$dir/p$i.txt"
  "$replay" record --model "$m" --prompt-file "$dir/p$i.txt" --generate 8 -o "$dir/f$i.h5" --threads 2 -q
done
"$replay" frontier --model "$m" --tune "$dir/f1.h5" "$dir/f2.h5" --heldout "$dir/f3.h5" --budgets 5 9 17 --quick \
  --threads 2 --out "$dir/fr" 2> "$dir/fr.err" > /dev/null
grep -q "default arm sj:4/4:staging=q8_0 (sj:4/4 does not fit" "$dir/fr.err"
grep -q "skipping sj:3/2t:tail=128: .*trellis bodies need head_dim a multiple of 128" "$dir/fr.err"
grep -q "Default: \`sj:4/4:staging=q8_0\`" "$dir/fr/recommend.md"
"$py" - "$dir/fr/frontier.csv" <<'PY'
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
arms = {r["arm"] for r in rows}
assert "sj:4/4:tail=128:staging=q8_0" in arms and "sj:3/2t:tail=128" not in arms, arms
picks = {b: r["arm"] for r in rows if r["frontier_at"] for b in r["frontier_at"].split("+")}
assert set(picks) == {"5", "9", "17"}, picks
print("gpt-oss frontier picks", picks)
PY
# a --default that does not fit is a usage error naming it
if "$replay" frontier --model "$m" --tune "$dir/f1.h5" --heldout "$dir/f3.h5" --budgets 5 --quick --default sj:3/2t \
    --out "$dir/fr2" -q 2> "$dir/fr2.err"; then
  echo "a default that does not fit was accepted" >&2; exit 1
fi
grep -q "\-\-default 'sj:3/2t' does not fit gpt-oss.gguf: .*trellis bodies need head_dim a multiple of 128" "$dir/fr2.err"
test ! -e "$dir/fr2/recommend.md"

"$encode" plan --model "$m" > "$dir/plan.txt"
grep -q "gpt-oss, 2 full-attention layers of 4; sliding unless (il + 1) % 2 == 0" "$dir/plan.txt"
grep -q "sliding-window layers (beside the table, never compressed): 2 of 4 layers" "$dir/plan.txt"
