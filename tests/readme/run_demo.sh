#!/bin/sh
# README's main job as README gives it: scripts/run-demo, from the repository root. It uses the
# build folder build/, so it runs only when that is the build under test, and the default model.
set -eu
src=$1; build=$2
if [ "$(cd "$build" && pwd -P)" != "$(cd "$src/build" 2>/dev/null && pwd -P)" ]; then
  echo "SKIP: scripts/run-demo builds in $src/build, not this build ($build)"; exit 77
fi
model=${SJKV_MODEL:-${XDG_CACHE_HOME:-$HOME/.cache}/sjkv/models/default.gguf}
if [ ! -f "$model" ]; then echo "SKIP: no model at $model (scripts/setup installs it)"; exit 77; fi
cd "$src"
out=$(mktemp)
trap 'rm -f "$out"' EXIT
rm -rf results/demo
scripts/run-demo > "$out" 2>&1 || { cat "$out"; echo "scripts/run-demo failed" >&2; exit 1; }
cat "$out"
# The table README describes: every arm of the demo, scored, and the study's findings quoted.
for arm in f16 q8_0 kvarn:4/4:tail=0 sj:4/4:tail=128 sj:4/4:tail=128:staging=q8_0 sj:4/4:tail=128:staging=f16 sj:3/2t:tail=128; do
  grep -q "^$arm  *256 " "$out" || { echo "run-demo printed no row for $arm" >&2; exit 1; }
done
grep -q "^At long context" "$out" || { echo "run-demo quoted no finding of docs/RESULTS.md" >&2; exit 1; }
test -s results/demo/summary.md
