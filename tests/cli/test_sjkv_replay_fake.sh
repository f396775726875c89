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

# cheap checks come before the long work, and a failed command leaves none of its outputs
set +e
# the baseline must be one of the arms: exit 1 before recording, no folder
"$tool" run --prompt-file "$dir/prompt.txt" --generate 4 --arms f32,f16 --baseline q4_0 --out "$dir/nb" -q 2> "$dir/e6"; r6=$?
# prompts: empty, blank, empty on stdin, invalid UTF-8 (a stray byte, a cut sequence)
: > "$dir/empty.txt"; printf ' \n\t \n' > "$dir/blank.txt"
printf 'ab\377cd' > "$dir/bad1.txt"; printf 'caf\303' > "$dir/bad2.txt"; printf '\355\240\200' > "$dir/bad3.txt"
"$tool" record --generate 4 --prompt-file "$dir/empty.txt" -o "$dir/p1.h5" -q 2> "$dir/e7"; r7=$?
"$tool" record --generate 4 --prompt-file "$dir/blank.txt" -o "$dir/p1.h5" -q 2> "$dir/e8"; r8=$?
"$tool" record --generate 4 -o "$dir/p1.h5" -q < "$dir/empty.txt" 2> "$dir/e9"; r9=$?
"$tool" record --generate 4 --prompt-file "$dir/bad1.txt" -o "$dir/p1.h5" -q 2> "$dir/e10"; r10=$?
"$tool" record --generate 4 --prompt-file "$dir/bad2.txt" -o "$dir/p1.h5" -q 2> "$dir/e11"; r11=$?
"$tool" run --generate 4 --arms f32 --out "$dir/p2" -q < "$dir/bad3.txt" 2> "$dir/e12"; r12=$?
# output paths: a folder, a missing folder, -o and --capture the same file
mkdir -p "$dir/adir"
"$tool" record --generate 4 --prompt-file "$dir/prompt.txt" -o "$dir/adir" -q 2> "$dir/e13"; r13=$?
"$tool" record --generate 4 --prompt-file "$dir/prompt.txt" -o "$dir/nodir/t.h5" -q 2> "$dir/e14"; r14=$?
"$tool" record --generate 4 --prompt-file "$dir/prompt.txt" -o "$dir/p3.h5" --capture "$dir/adir" -q 2> "$dir/e15"; r15=$?
"$tool" record --generate 4 --prompt-file "$dir/prompt.txt" -o "$dir/p3.h5" --capture "$dir/./p3.h5" -q 2> "$dir/e16"; r16=$?
"$tool" score "$dir/t.h5" --arms f16 --out "$dir/nodir/res" -q 2> "$dir/e17"; r17=$?
"$tool" score "$dir/t.h5" --arms f16 --out "$dir/prompt.txt" -q 2> "$dir/e18"; r18=$?
"$tool" run --generate 4 --prompt-file "$dir/prompt.txt" --arms f32 --out "$dir/nodir/run" -q 2> "$dir/e19"; r19=$?
"$tool" run --generate 4 --prompt-file "$dir/prompt.txt" --arms f32 --out "$dir/p4" --capture "$dir/p4/trajectory.h5" -q \
  2> "$dir/e20"; r20=$?
# the capture cannot be written (a folder no file can be made in): no trajectory either
if [ -d /proc/self ]; then
  "$tool" record --generate 4 --prompt-file "$dir/prompt.txt" -o "$dir/p5.h5" --capture /proc/sjkv-cap.h5 -q 2> "$dir/e21"
  r21=$?
else
  r21=2
fi
# scoring trajectories of different references, or of another model, together
"$tool" record --prompt-file "$dir/prompt.txt" --generate 20 --ubatch 8 --reference f16 -o "$dir/t16.h5" -q
"$tool" score "$dir/t.h5" "$dir/t16.h5" --arms f16,f32 --out "$dir/mix" -q 2> "$dir/e22"; r22=$?
"$tool" record --prompt-file "$dir/prompt.txt" --generate 20 --ubatch 8 --model "$dir/other.bin" -o "$dir/tother.h5" -q
"$tool" score "$dir/t.h5" "$dir/tother.h5" --arms f16 --out "$dir/mix2" -q 2> "$dir/e23"; r23=$?
set -e
test $r6 -eq 1; grep -q "baseline 'q4_0' is not one of --arms" "$dir/e6"; test ! -e "$dir/nb"
test $r7 -eq 2; grep -q "empty.txt: the prompt is empty" "$dir/e7"
test $r8 -eq 2; grep -q "blank.txt: the prompt is empty" "$dir/e8"
test $r9 -eq 2; grep -q "<stdin>: the prompt is empty" "$dir/e9"
test $r10 -eq 2; grep -q "bad1.txt: not valid UTF-8 at byte 2$" "$dir/e10"
test $r11 -eq 2; grep -q "bad2.txt: not valid UTF-8 at byte 4$" "$dir/e11"
test $r12 -eq 2; grep -q "<stdin>: not valid UTF-8 at byte 1$" "$dir/e12"; test ! -e "$dir/p2"
test ! -e "$dir/p1.h5"
test $r13 -eq 2; grep -q "adir: -o: is a folder" "$dir/e13"
test $r14 -eq 2; grep -q "nodir/t.h5: -o: the folder .*nodir does not exist" "$dir/e14"
test $r15 -eq 2; grep -q "adir: --capture: is a folder" "$dir/e15"; test ! -e "$dir/p3.h5"
test $r16 -eq 1; grep -q -- "-o and --capture name the same file" "$dir/e16"; test ! -e "$dir/p3.h5"
test $r17 -eq 2; grep -q "nodir/res: --out: the folder" "$dir/e17"
test $r18 -eq 2; grep -q "prompt.txt: --out: exists and is not a folder" "$dir/e18"
test $r19 -eq 2; test ! -e "$dir/nodir"
test $r20 -eq 1; test ! -e "$dir/p4"
test $r21 -ne 0; test ! -e "$dir/p5.h5"; test -z "$(ls "$dir" | grep '^p5')"
test $r22 -eq 2; grep -q "t16.h5: recorded with reference arm 'f16', but .*t.h5 with 'f32'" "$dir/e22"
test ! -e "$dir/mix/results.json"
test $r23 -eq 2; grep -q "tother.h5: recorded with model other.bin" "$dir/e23"
for e in 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22 23; do test "$(wc -l < "$dir/e$e")" -eq 1; done
# --help of score and run lists the arm examples
"$tool" score --help | grep -q "Arms, e.g.: f32, f16"
"$tool" run --help | grep -q "Arms, e.g.: f32, f16"
echo "checks OK"

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
