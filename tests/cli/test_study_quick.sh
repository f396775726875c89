#!/usr/bin/env bash
# scripts/study --quick end to end on the real default model (skipped, exit 77, without it):
# the report and the table hold every arm and comparison, a second run recomputes nothing and
# gives the same bytes, a fresh work folder resumes from the store of scores (a history whose
# prompt changed is dropped from it; a damaged store file stops it, exit 2, by name), a
# damaged recording or scored arm in the work folder is made again, a transcript history (an agent
# session) gives KL by depth, and a manifest whose file hash differs is refused by name before any
# work. Usage: test_study_quick.sh SOURCE_DIR BUILD_DIR SCRATCH
set -euo pipefail
# shellcheck source=study_common.sh
. "$(dirname "$0")/study_common.sh"

study() { "$py" "$src/scripts/study" --quick --build "$build" --work "$scratch/work" --out "$scratch/out" --store "$scratch/store" "$@"; }

study 2> "$scratch/first.log" || { cat "$scratch/first.log"; fail "study --quick"; }
csv=$scratch/out/results.csv md=$scratch/out/RESULTS.md
[ -s "$csv" ] && [ -s "$md" ] || fail "no results.csv or RESULTS.md"
[ "$(head -1 "$csv")" = "set,history,arm,baseline,statistic,value" ] || fail "results.csv header"
for arm in f16 kvarn:4/4:tail=0 sj:4/4:tail=128 sj:4/4:tail=128:staging=q8_0; do
  for h in quick-retr-cc0-1 quick-code-shells-1 quick-agent-1 all; do
    grep -q "^quick,$h,$arm,,mean_kl," "$csv" || fail "no mean_kl row for $h x $arm"
  done
  grep -q "| \`$arm\` |" "$md" || fail "RESULTS.md has no row for $arm"
done
grep -q '^quick,all,sj:4/4:tail=128,kvarn:4/4:tail=0,ci_low_histories,' "$csv" || fail "no comparison row"
grep -q '^quick,all,sj:4/4:tail=128,kvarn:4/4:tail=0,histories,3$' "$csv" || fail "the comparison does not span 3 histories"
[ -s "$scratch/out/results/kl-vs-bits-quick.svg" ] || fail "no plot"
# The transcript history (an agent session, sampled, idle steps between requests): KL by depth.
[ "$(head -1 "$scratch/out/depth.csv")" = "set,arm,from,to,histories,positions,mean_kl,ci_low,ci_high,same_top" ] ||
  fail "depth.csv header"
for arm in f16 kvarn:4/4:tail=0 sj:4/4:tail=128 sj:4/4:tail=128:staging=q8_0; do
  grep -q "^quick,$arm,[0-9]*,[0-9]*,1,[1-9]" "$scratch/out/depth.csv" || fail "no depth row for $arm"
done
grep -q 'KL by depth in the context (set `quick`)' "$md" || fail "RESULTS.md has no depth table"
[ -s "$scratch/out/results/kl-by-depth-quick.svg" ] || fail "no depth plot"
grep -q '| `quick-agent-1` | agentic |' "$md" || fail "RESULTS.md does not list the transcript history"
# f16 against the f32 recording: tiny but not zero; every KL finite.
"$py" - "$csv" <<'PY' || fail "implausible numbers"
import csv, math, sys
rows = list(csv.DictReader(open(sys.argv[1])))
mean = {(r["history"], r["arm"]): float(r["value"]) for r in rows if r["statistic"] == "mean_kl" and not r["baseline"]}
assert all(math.isfinite(v) and v >= 0 for v in mean.values()), mean
assert 0 < mean[("all", "f16")] < 1e-5, mean[("all", "f16")]
assert mean[("all", "sj:4/4:tail=128")] > 10 * mean[("all", "f16")]
PY

cp "$csv" "$scratch/first.csv"
study 2> "$scratch/second.log" || { cat "$scratch/second.log"; fail "second run"; }
grep -q " 0 replays to run" "$scratch/second.log" || { cat "$scratch/second.log"; fail "the second run recomputed"; }
cmp -s "$csv" "$scratch/first.csv" || fail "the second run's table differs"

# The store has every history x arm; a fresh work folder (a clean clone) scores nothing.
for h in quick-retr-cc0-1 quick-code-shells-1 quick-agent-1; do
  [ -s "$scratch/store/$h/key.txt" ] || fail "no store key for $h"
  [ "$(ls "$scratch/store/$h" | grep -vc '^key.txt$')" -eq 4 ] || fail "the store does not hold 4 arms of $h"
  [ -s "$scratch/store/$h/sj:4_4:tail=128/positions.csv" ] || fail "no stored positions.csv for $h"
done
study --work "$scratch/work-fresh" 2> "$scratch/fresh.log" || { cat "$scratch/fresh.log"; fail "fresh work folder"; }
grep -q " 0 replays to run" "$scratch/fresh.log" || { cat "$scratch/fresh.log"; fail "the fresh work folder recomputed"; }
cmp -s "$csv" "$scratch/first.csv" || fail "the table from the store differs"

# The run that replayed logged its replays and wall time in the store, under the engine that
# replayed them, and the report says so; a timing file that is not one stops the report, exit 2, by name.
engine=$("$build/tools/sjkv-replay" engine)
[ "$(head -1 "$scratch/store/_timing.csv")" = "engine,date,replays,wall_s,jobs,threads,cpu" ] || fail "timing header"
grep -q "^$engine,[0-9-]*,[1-9][0-9]*,[0-9]*,[1-9],[1-9]," "$scratch/store/_timing.csv" || fail "no timing row"
grep -q "Time to score with engine $engine: " "$scratch/out/RESULTS.md" || fail "the report gives no time"
cp -r "$scratch/store" "$scratch/store-time"
printf 'engine,date,replays\n%s,today,many\n' "$engine" > "$scratch/store-time/_timing.csv"
set +e
study --work "$scratch/work-time" --store "$scratch/store-time" --report-only 2> "$scratch/time.log"
rc=$?
set -e
[ $rc -eq 2 ] || { cat "$scratch/time.log"; fail "a bad timing file gave exit $rc, not 2"; }
grep -qF "store-time/_timing.csv: not a timing file" "$scratch/time.log" || { cat "$scratch/time.log"; fail "no timing-file message"; }

# The store's files are checked where they are read: a truncated results.json, or a positions.csv
# cut inside its last number, stops a fresh work folder with exit 2 naming the store file.
cp -r "$scratch/store" "$scratch/store-bad"
arm="$scratch/store-bad/quick-retr-cc0-1/f16"
for damage in json csv; do
  rm -rf "$scratch/work-dmg"
  if [ $damage = json ]; then
    cp "$scratch/store/quick-retr-cc0-1/f16/results.json" "$arm/results.json"
    head -c -40 "$scratch/store/quick-retr-cc0-1/f16/results.json" > "$arm/results.json"
    file="$arm/results.json"
  else
    cp "$scratch/store/quick-retr-cc0-1/f16/results.json" "$arm/results.json"
    head -c -2 "$scratch/store/quick-retr-cc0-1/f16/positions.csv" > "$arm/positions.csv"
    file="$arm/positions.csv"
  fi
  set +e
  study --work "$scratch/work-dmg" --store "$scratch/store-bad" --report-only 2> "$scratch/dmg.log"
  rc=$?
  set -e
  [ $rc -eq 2 ] || { cat "$scratch/dmg.log"; fail "a damaged store $damage gave exit $rc, not 2"; }
  [ "$(grep -c '' "$scratch/dmg.log")" -eq 1 ] || { cat "$scratch/dmg.log"; fail "a damaged store $damage: not one line"; }
  # (named from the source folder when it lies inside it)
  grep -qF "store-bad/quick-retr-cc0-1/f16/$(basename "$file"): " "$scratch/dmg.log" ||
    { cat "$scratch/dmg.log"; fail "a damaged store $damage: the store file is not named"; }
done

# A damaged recording in the work folder is recorded again (it failed the same way on every
# rerun); a damaged scored arm there is scored again.
traj="$scratch/work/histories/quick-retr-cc0-1/quick-retr-cc0-1.h5"
head -c 5000 "$traj" > "$traj.cut" && mv "$traj.cut" "$traj"
rm -rf "$scratch/work/histories/quick-retr-cc0-1/arms/f16" "$scratch/store/quick-retr-cc0-1/f16"
pc="$scratch/work/histories/quick-retr-cc0-1/arms/kvarn:4_4:tail=0/positions.csv"
head -c -2 "$pc" > "$pc.cut" && mv "$pc.cut" "$pc"
study 2> "$scratch/redo.log" || { cat "$scratch/redo.log"; fail "rerun over a damaged recording"; }
grep -q "quick-retr-cc0-1.h5: damaged (its SHA-256 is not the recorded one); recording it again" "$scratch/redo.log" ||
  { cat "$scratch/redo.log"; fail "no re-record message"; }
grep -q "positions.csv: no line end after the last row (the file is cut short); scoring it again" "$scratch/redo.log" ||
  { cat "$scratch/redo.log"; fail "no re-score message"; }
cmp -s "$csv" "$scratch/first.csv" || fail "the table after re-recording differs"

# A history whose prompt changed is dropped from the store, the other kept.
cp -r "$src/study" "$scratch/study-edit"
tpl=$("$py" -c 'import re,sys; print(re.search(r'"'"'name = "quick-code-shells-1"[^[]*?template = "([^"]+)"'"'"', open(sys.argv[1]).read()).group(1))' "$scratch/study-edit/manifest.toml")
echo "One more line." >> "$scratch/study-edit/$tpl"
study --work "$scratch/work-edit" --study-dir "$scratch/study-edit" --report-only 2> "$scratch/edit.log" ||
  { cat "$scratch/edit.log"; fail "report after an edit"; }
grep -q "quick-code-shells-1: scored for another prompt, length, model or engine; dropping it" "$scratch/edit.log" || { cat "$scratch/edit.log"; fail "no drop message"; }
[ ! -e "$scratch/store/quick-code-shells-1" ] || fail "the changed history was kept in the store"
[ -s "$scratch/store/quick-retr-cc0-1/key.txt" ] || fail "the unchanged history was dropped"

# A manifest entry whose hash differs is refused by name, exit 2, before any work.
cp -r "$src/study" "$scratch/study-bad"
"$py" - "$scratch/study-bad/manifest.toml" <<'PY'
import re, sys
p = sys.argv[1]
s = open(p).read()
s = re.sub(r'(id = "cc0"\npath = "[^"]*"\nsha256 = ")[0-9a-f]', r'\g<1>X', s, count=1)
open(p, "w").write(s)
PY
set +e
"$py" "$src/scripts/study" --quick --build "$build" --work "$scratch/work-bad" --out "$scratch/out-bad" \
  --study-dir "$scratch/study-bad" 2> "$scratch/bad.log"
rc=$?
set -e
[ $rc -eq 2 ] || { cat "$scratch/bad.log"; fail "a bad hash gave exit $rc, not 2"; }
grep -q "file 'cc0' (/usr/share/common-licenses/CC0-1.0) has SHA-256" "$scratch/bad.log" || { cat "$scratch/bad.log"; fail "message"; }
[ ! -e "$scratch/work-bad/histories" ] || fail "work started despite the bad manifest"
echo "study --quick: ok"
