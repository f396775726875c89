#!/bin/sh
# sjkv-replay frontier --quick on the qwen3 test model (scripts/make-test-models.py): four short
# trajectories, three to tune and one held out. Checks the three files, that the picks follow
# the nested rule (frontier_rule: the lowest budget's is the lowest geometric mean among the
# fully scored candidates that fit it, a larger budget's is the one below's or passed the
# confidence test there, and their geometric means never rise), that its best plain
# format is fully scored too (also when --keep 1 would drop it), that the halving left
# some candidates on fewer trajectories, the CIs bracket the ratios, that a second run reads
# every row from the store (no replay) and writes the same bytes, 2 MPI ranks the same bytes
# (when built with MPI), and the refusals.
set -eu
replay=$1; models=$2; prompt=$3; dir=$4; py=$5
rm -rf "$dir"; mkdir -p "$dir"
m="$models/qwen3.gguf"
for i in 1 2 3 4; do
  tail -c +$((i * 400)) "$prompt" | head -c 1400 > "$dir/p$i.txt"
  "$replay" record --model "$m" --prompt-file "$dir/p$i.txt" --generate 12 -o "$dir/t$i.h5" --threads 2 -q
done
run() {
  "$replay" frontier --model "$m" --tune "$dir/t1.h5" "$dir/t2.h5" "$dir/t3.h5" --heldout "$dir/t4.h5" \
    --budgets 5 9 18 --quick --keep 2 --default sj:4/4:tail=128 --threads 2 \
    --also sj:4/4:staging=tq6_0:tail=128 "$@"
}
run --out "$dir/f" > "$dir/stdout1" 2> "$dir/stderr1"
for f in frontier.csv frontier.svg recommend.md; do test -s "$dir/f/$f"; done
grep -q "read from the store" "$dir/stderr1"
# the same arm written otherwise is one candidate
grep -q "'sj:4/4:staging=tq6_0:tail=128' is the candidate 'sj:4/4:tail=128' written otherwise" "$dir/stderr1"
"$py" - "$dir/f" <<'PY'
import csv, math, sys
d = sys.argv[1]
rows = list(csv.DictReader(open(d + "/frontier.csv")))
assert len(rows) == 8, len(rows)
budgets = [5.0, 9.0, 18.0]
full = max(int(r["tuning_trajectories"]) for r in rows)
assert full == 3, full
assert any(0 < int(r["tuning_trajectories"]) < 3 for r in rows), "the halving dropped nothing"
for r in rows:
    assert (r["fits"] == "1") == (float(r["bits_allocated"]) <= 18.0 + 1e-9), r
    if r["fits"] == "0":
        assert r["tuning_trajectories"] == "0", r  # never scored
prev = None
for b in budgets:
    cands = [r for r in rows if int(r["tuning_trajectories"]) == full and float(r["bits_allocated"]) <= b + 1e-9]
    picks = [r for r in rows if r["frontier_at"] and str(int(b)) in r["frontier_at"].split("+")]
    if not cands:
        assert not picks, (b, picks)
        continue
    # the budget's best plain format survives the halving, so it is compared on held-out
    plain = [r for r in rows if r["family"] in ("f16", "q8_0", "q4_0", "q4_0:rot") and r["fits"] == "1"
             and float(r["bits_allocated"]) <= b + 1e-9]
    if plain:
        assert any(int(r["tuning_trajectories"]) == full for r in plain), (b, plain)
    assert len(picks) == 1, (b, picks)
    p = picks[0]
    geo = float(p["tuning_geomean_kl"])
    if prev is None:
        best = min(cands, key=lambda r: float(r["tuning_geomean_kl"]))
        assert p["arm"] == best["arm"], (b, p["arm"], best["arm"])
        assert p["tested_at"] == str(int(b)) and not p["vs_lower_pick"], p
    elif p["arm"] != prev["arm"]:
        assert p["tested_at"] == str(int(b)) and float(p["vs_lower_pick_high"]) < 1, p
        assert float(p["vs_lower_pick"]) <= float(p["vs_lower_pick_high"]), p
        assert geo < float(prev["tuning_geomean_kl"]), (p, prev)
    # a candidate whose first test was at this budget and failed it is not the pick
    for r in cands:
        if r["tested_at"] == str(int(b)) and r["vs_lower_pick_high"] and float(r["vs_lower_pick_high"]) >= 1:
            assert r["arm"] != p["arm"], r
    prev = p
    if p["ratio_vs_default"] and p["ci_low"]:
        assert float(p["ci_low"]) <= float(p["ratio_vs_default"]) <= float(p["ci_high"]), p
md = open(d + "/recommend.md").read()
for b in ("| 5 |", "| 9 |", "| 18 |"):
    assert b in md, b
    line = next(l for l in md.splitlines() if l.startswith(b))
    assert "| none |" not in line, line
svg = open(d + "/frontier.svg").read()
assert svg.startswith("<svg") and "polyline" in svg
for r in rows:
    scored = int(r["tuning_trajectories"]) > 0
    assert bool(r["tuning_geomean_kl"]) == scored, r
    if scored:
        assert float(r["tuning_geomean_kl"]) <= float(r["tuning_mean_kl"]) * (1 + 1e-9), r  # geometric <= arithmetic
assert "The picks are nested" in open(d + "/recommend.md").read()
print("frontier ok:", [(r["arm"], r["frontier_at"]) for r in rows if r["frontier_at"]])
PY
# the halving keeps the budget's best plain format for the held-out comparison even when
# --keep 1 would drop it (here sj:4/4 leads and the default is kept besides)
"$replay" frontier --model "$m" --tune "$dir/t1.h5" "$dir/t2.h5" "$dir/t3.h5" --heldout "$dir/t4.h5" --budgets 18 \
  --arms q4_0 q4_0:rot sj:4/4:tail=128 sj:3/2t:tail=128 --keep 1 --default sj:3/2t:tail=128 --threads 2 \
  --out "$dir/g" -q > /dev/null
grep "^| 18 |" "$dir/g/recommend.md" | grep -q '`q4_0:rot` | [0-9]'
grep -q "^q4_0:rot,q4_0:rot,4.5,1,3," "$dir/g/frontier.csv"
# resumed: every row from the store, the same files
cp "$dir/f/frontier.csv" "$dir/csv1"
run --out "$dir/f" > "$dir/stdout2" 2> "$dir/stderr2"
grep -q " 0 (arm, trajectory) replays" "$dir/stderr2"
cmp "$dir/csv1" "$dir/f/frontier.csv"
cmp "$dir/stdout1" "$dir/stdout2"

# under mpirun (when the build has MPI: $MPIRUN), 2 ranks write the one process's bytes
if [ -n "${MPIRUN:-}" ]; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1  # CI containers run as root
  # --tune=FILE, once per file: Open MPI's MPI_Init takes a bare "--tune FILE" for its own parameter file
  # and prints a parser error for every line of the trajectory (docs/REPLAY.md).
  "$MPIRUN" -n 2 --oversubscribe "$replay" frontier --model "$m" --tune="$dir/t1.h5" --tune="$dir/t2.h5" \
    --tune="$dir/t3.h5" --heldout "$dir/t4.h5" --budgets 5 9 18 --quick --keep 2 --default sj:4/4:tail=128 \
    --threads 1 --out "$dir/mpi" > "$dir/stdout-mpi" 2> "$dir/stderr-mpi"
  if grep -q "keyval parser" "$dir/stderr-mpi"; then echo "FAIL: Open MPI read a trajectory as its parameter file"; exit 1; fi
  for f in frontier.csv frontier.svg recommend.md; do cmp "$dir/f/$f" "$dir/mpi/$f"; done
  cmp "$dir/stdout1" "$dir/stdout-mpi"
  (cd "$dir/f/store" && find . -type f | sort | xargs cat) > "$dir/store1"
  (cd "$dir/mpi/store" && find . -type f | sort | xargs cat) > "$dir/store2"
  cmp "$dir/store1" "$dir/store2"
  echo "frontier under 2 MPI ranks: the same bytes"
fi

# refusals: a trajectory in both sets, a bad budget (exit 1); a damaged stored row file (exit 2,
# naming it)
set +e
"$replay" frontier --model "$m" --tune "$dir/t1.h5" --heldout "$dir/t1.h5" --budgets 5 --quick --out "$dir/x" -q 2> "$dir/e1"
a=$?
run --out "$dir/y" --budgets 0 -q 2> "$dir/e2"
b=$?
store_file=$(find "$dir/f/store" -name '*.csv' | head -1)
printf 'not,a,positions,file\n' > "$store_file"
run --out "$dir/f" -q > /dev/null 2> "$dir/e3"
c=$?
set -e
test "$a" -eq 1 && grep -q "both a tuning and a held-out" "$dir/e1"
test "$b" -eq 1 && grep -q "budget" "$dir/e2"
test ! -e "$dir/x" && test ! -e "$dir/y"
test "$c" -eq 2 && grep -q "$(basename "$store_file")" "$dir/e3"

# harden-3: two cb= files whose paths differ only by '/' against '_' get two store files (they
# shared one: the second arm's rows overwrote the first's and every resume failed), and a
# second run reads both back
cbs=$(dirname "$prompt")/../codebooks
mkdir -p "$dir/cb"
cp "$cbs/reference-3bit.bin" "$dir/cb/x.bin"
cp "$cbs/gemma3-270m-3bit.bin" "$dir/cb_x.bin"
collide() {
  (cd "$dir" && "$replay" frontier --model "$m" --tune t1.h5 --heldout t4.h5 --budgets 20 --threads 2 \
     --arms f16 sj:3/3t:tail=128:cb=cb/x.bin sj:3/3t:tail=128:cb=cb_x.bin --default f16 --out "$@")
}
collide cb-f > /dev/null 2> "$dir/e4"
test "$(find "$dir/cb-f/store" -name 'sj:3_3t*' | wc -l)" -eq 2
collide cb-f > /dev/null 2> "$dir/e5"
grep -q " 0 (arm, trajectory) replays" "$dir/e5"
# a cb= path longer than a file name's room: its store name is shortened with a hash of the
# spec, so the run finishes (it failed after the replays: "File name too long") and resumes
long=$(printf 'c%.0s' $(seq 240)).bin
cp "$cbs/reference-3bit.bin" "$dir/$long"
longrun() {
  (cd "$dir" && "$replay" frontier --model "$m" --tune t1.h5 --heldout t4.h5 --budgets 20 --threads 2 \
     --arms f16 "sj:3/3t:tail=128:cb=$long" --default f16 --out long-f)
}
longrun > /dev/null 2>&1
test -s "$dir/long-f/frontier.csv"
test "$(find "$dir/long-f/store" -name 'sj:3_3t*~*' | wc -l)" -eq 1
longrun > /dev/null 2> "$dir/e9"
grep -q " 0 (arm, trajectory) replays" "$dir/e9"
# score --per-arm names what collides: the two arms' folder
set +e
(cd "$dir" && "$replay" score t1.h5 --model "$m" --threads 2 --arms sj:3/3t:tail=128:cb=cb/x.bin,sj:3/3t:tail=128:cb=cb_x.bin \
   --per-arm --out per -q) 2> "$dir/e6"
d=$?
# --context beyond the model's training context (32768): usage, before any work
run --out "$dir/ctx" --context 40000 -q > /dev/null 2> "$dir/e7"
e=$?
# record --capture of a model whose head size (phi3's 96) a capture cannot hold: usage, naming
# the model, before the generation
"$replay" record --model "$models/phi3.gguf" --prompt-file "$dir/p1.txt" --generate 4 -o "$dir/ph.h5" \
  --capture "$dir/ph-cap.h5" -q 2> "$dir/e8"
f=$?
set -e
test "$d" -eq 1 && grep -q "would share the folder per/sj:3_3t:tail=128:cb=cb_x.bin" "$dir/e6"
test "$e" -eq 1 && grep -q -- "--context 40000 exceeds qwen3.gguf's training context of 32768" "$dir/e7"
test ! -e "$dir/ctx"
test "$f" -eq 1 && grep -q -- "--capture: the model $models/phi3.gguf .*head_dim = 96" "$dir/e8"
test ! -e "$dir/ph.h5" && test ! -e "$dir/ph-cap.h5"
echo "frontier end to end ok"
