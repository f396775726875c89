#!/bin/sh
# sjkv-replay end to end on the test model: record, score, run, exit codes, thread invariance.
set -eu
tool=$1; dir=$2
rm -rf "$dir"; mkdir -p "$dir"
printf 'tiny-model v1\n' > "$dir/model.bin"
printf 'tiny-model v2\n' > "$dir/other.bin"
printf 'The quick brown fox jumps over the lazy dog.' > "$dir/prompt.txt"
export SJKV_MODEL="$dir/model.bin"

"$tool" record --prompt-file "$dir/prompt.txt" --generate 20 --ubatch 8 -o "$dir/t.h5" -q
"$tool" score "$dir/t.h5" --arms f16,f32 --baseline f32 --out "$dir/res" -q > "$dir/score.txt"
for f in results.json positions.csv summary.md kl_by_position.svg kl_cdf.svg kl_vs_bits.svg; do
  test -s "$dir/res/$f"
done
grep -q '"arm": "f16"' "$dir/res/results.json"
grep -q '"baseline": "f32"' "$dir/res/results.json"
# the reference arm replayed against its own trajectory: every KL exactly 0
test "$(grep -c ',f32,0,1,' "$dir/res/positions.csv")" -eq 20
grep -q '^f16 ' "$dir/score.txt"

# the sparse encoding scores like the hidden one: the same arm exactly 0, f16 close
"$tool" record --prompt-file "$dir/prompt.txt" --generate 20 --ubatch 8 --reference-encoding sparse -o "$dir/sp.h5" -q
"$tool" score "$dir/sp.h5" --arms f16,f32 --baseline f32 --out "$dir/res-sp" -q > /dev/null
test "$(grep -c ',f32,0,1,' "$dir/res-sp/positions.csv")" -eq 20

# run, with 1 and 2 threads: the same numbers
"$tool" run --prompt-file "$dir/prompt.txt" --generate 16 --sample --seed 3 --temperature 0.9 --top-k 40 \
  --arms f32,f16 --out "$dir/run1" --threads 1 -q > /dev/null
"$tool" run --prompt-file "$dir/prompt.txt" --generate 16 --sample --seed 3 --temperature 0.9 --top-k 40 \
  --arms f32,f16 --out "$dir/run2" --threads 2 -q > /dev/null
cmp "$dir/run1/positions.csv" "$dir/run2/positions.csv"
test -s "$dir/run1/trajectory.h5"
# stdin prompt and a capture
"$tool" record --generate 4 -o "$dir/s.h5" --capture "$dir/cap.h5" -q < "$dir/prompt.txt"
test -s "$dir/cap.h5"

# exit codes: 1 usage, 2 bad input (another model, a damaged trajectory)
set +e
"$tool" score "$dir/t.h5" --arms q9_9 --out "$dir/x" -q 2> "$dir/e1"; a=$?
"$tool" score "$dir/t.h5" --arms f16 --out "$dir/x" --model "$dir/other.bin" -q 2> "$dir/e2"; b=$?
head -c 2000 "$dir/t.h5" > "$dir/trunc.h5"
"$tool" score "$dir/trunc.h5" --arms f16 --out "$dir/x" -q 2> "$dir/e3"; c=$?
"$tool" record --generate 4 -o "$dir/y.h5" --prompt-file "$dir/missing.txt" -q 2> "$dir/e4"; d=$?
"$tool" --bogus 2> /dev/null; e=$?
SJKV_FAKE_OTHER_BUILD=1 "$tool" score "$dir/t.h5" --arms f16 --out "$dir/x" -q 2> "$dir/e5"; f=$?
SJKV_FAKE_OTHER_BUILD=1 "$tool" score "$dir/sp.h5" --arms f16 --out "$dir/x-sp" -q > /dev/null; g=$?
"$tool" record --generate 4 -o "$dir/y.h5" --reference-encoding dense -q < "$dir/prompt.txt" 2> /dev/null; h=$?
set -e
test $a -eq 1; grep -q "unknown arm" "$dir/e1"
test $b -eq 2; grep -q "recorded with model model.bin" "$dir/e2"; grep -q "other.bin" "$dir/e2"
test $c -eq 2; grep -q "trunc.h5" "$dir/e3"
test $d -eq 2; grep -q "missing.txt" "$dir/e4"
test $e -eq 1
test $f -eq 2; grep -q "t.h5.*output projection does not reproduce" "$dir/e5"; test "$(wc -l < "$dir/e5")" -eq 1
test $g -eq 0
test $h -eq 1
test ! -e "$dir/y.h5"
echo OK

# --device: cpu always works; cuda without a GPU (or without the kernels) is a one-line exit 2
"$tool" score "$dir/t.h5" --arms f16 --out "$dir/dev-cpu" --device cpu -q > /dev/null
if ! command -v nvidia-smi > /dev/null 2>&1; then
  set +e
  "$tool" score "$dir/t.h5" --arms f16 --out "$dir/dev-cuda" --device cuda -q 2> "$dir/e-dev"; r=$?
  set -e
  test $r -eq 2; grep -q -- "--device cuda: " "$dir/e-dev"; test "$(wc -l < "$dir/e-dev")" -eq 1
  test ! -e "$dir/dev-cuda/results.json"
fi
echo "device OK"
