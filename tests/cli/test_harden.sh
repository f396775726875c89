#!/usr/bin/env bash
# The defects a hostile pass found in the built tools, one check (or a few) per defect, run
# as a user would: outputs that name an input, special files, a full disk, sizes that wrapped
# 32-bit arithmetic, usage errors blamed on the input, names too long for the temporary, JSON
# of damaged strings, leftovers after a failure.
#
#   test_harden.sh SJKV_ENCODE SJKV_TRAIN SJKV_REPLAY_FAKE SCRATCH_DIR
#
# SJKV_REPLAY_FAKE is sjkv-replay built with the test model (tests/replay/fake_model.cpp).
# Checks that need h5py or a tmpfs mount are skipped (and counted as skipped) without them.
# The last line is "N passed, M failed, K skipped".
set -u

ENC=${1:?usage: test_harden.sh SJKV_ENCODE SJKV_TRAIN SJKV_REPLAY_FAKE SCRATCH_DIR}
TRAIN=${2:?}
REPLAY=${3:?}
SCRATCH=${4:?}
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
PY=${SJKV_PYTHON:-python3}
HELPER="$HERE/cli_helper.py"

passed=0 failed=0 skipped=0
ok() { passed=$((passed + 1)); [ -n "${VERBOSE:-}" ] && echo "ok: $1"; return 0; }
bad() { failed=$((failed + 1)); echo "FAIL: $1"; sed 's/^/    stderr: /' "$ERR" 2>/dev/null | head -3; }
skip() { skipped=$((skipped + 1)); echo "SKIP: $1"; }
check() { local n=$1; shift; if "$@"; then ok "$n"; else bad "$n"; fi; }

umount "$SCRATCH/full" 2>/dev/null  # a mount an interrupted earlier run left
rm -rf "$SCRATCH"
mkdir -p "$SCRATCH"
cd "$SCRATCH" || exit 1
ERR=$SCRATCH/stderr.txt
OUT=$SCRATCH/stdout.txt
run() { local t=$1; shift; "$t" "$@" >"$OUT" 2>"$ERR"; RC=$?; }
expect() {  # expect NAME RC TOOL ARGS...
  local n=$1 want=$2
  shift 2
  run "$@"
  if [ "$RC" = "$want" ]; then ok "$n: exit $want"; else bad "$n: exit $RC, expected $want"; fi
}
one_line() { if [ "$(grep -c '' "$ERR")" = 1 ]; then ok "$1: one line"; else bad "$1: $(grep -c '' "$ERR") lines on stderr"; fi; }
says() { if grep -qF -- "$2" "$ERR"; then ok "$1: says '$2'"; else bad "$1: stderr lacks '$2'"; fi; }
no_temps() {  # no temporary anywhere under the scratch folder
  local t
  t=$(find "$SCRATCH" -name '.*.tmp-*' | head -1)
  if [ -z "$t" ]; then ok "$1: no temporary left"; else bad "$1: $t left behind"; rm -f "$t"; fi
}
have_h5py() { "$PY" -c 'import h5py' 2>/dev/null; }
# write_kvd_np PATH HEADS TOKENS gauss|max: a .kvd (D = 128, G = 128) written with numpy
write_kvd_np() {
  "$PY" - "$@" <<'PY' 2>/dev/null
import struct, sys
import numpy as np
path, H, T, kind = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
D, G = 128, 128
rng = np.random.default_rng(5)
with open(path, "wb") as f:
    for t0 in range(0, T, G):
        for h in range(H):
            v = np.full(2 * G * D, 65504.0) if kind == "sink65504" and t0 == 0 else rng.standard_normal(2 * G * D)
            f.write(struct.pack("<iiii", 0x31445643, D, G, h) + b"harden".ljust(64, b"\0"))
            f.write(v.astype("<f2").tobytes())
PY
}

"$PY" -S "$HELPER" kvd in.kvd --dim 128 --heads 2 --tokens 640 --group 128 --seed 1 || bad "writing in.kvd"
"$ENC" encode in.kvd -o snap.h5 -q --tail 128 --tail-max 256 --ubatch 64 || bad "encoding snap.h5"

# ---- 1. sizes that wrapped 32-bit arithmetic ----------------------------------------------
expect "encode --tail 4294966144 --tail-max 0" 1 "$ENC" encode in.kvd -o big.h5 -q --tail 4294966144 --tail-max 0
says "encode huge tail" "--tail"
check "encode huge tail: no output" test ! -e big.h5
expect "plan --ubatch 2147479488" 1 "$ENC" plan --layers 16 --kv-heads 4 --head-dim 256 --ubatch 2147479488
expect "plan --layers 4294967295" 1 "$ENC" plan --layers 4294967295 --kv-heads 4294967295 --head-dim 4294967295

# ---- 2. special files as outputs -------------------------------------------------------------
expect "encode -o /dev/null" 0 "$ENC" encode in.kvd -o /dev/null -q
check "/dev/null is still a character device" test -c /dev/null
if [ -w /dev/full ]; then
  expect "dump -o /dev/full" 2 "$ENC" dump snap.h5 --layer 0 --region body -o /dev/full
  one_line "dump -o /dev/full"
  says "dump -o /dev/full" "No space left on device"
  check "/dev/full is still a character device" test -c /dev/full
  expect "encode -o /dev/full" 2 "$ENC" encode in.kvd -o /dev/full -q
  check "/dev/full is still a character device after encode" test -c /dev/full
else
  skip "/dev/full not writable"
fi
mkfifo out.fifo
expect "encode -o FIFO" 2 "$ENC" encode in.kvd -o out.fifo -q
check "the FIFO is still a FIFO" test -p out.fifo
mkdir -p outdir
expect "decode -o FOLDER" 2 "$ENC" decode snap.h5 -o outdir
says "decode -o FOLDER" "is a folder"
check "decode -o FOLDER: nothing written into it" test -z "$(ls -A outdir)"

# ---- 3. a full disk ---------------------------------------------------------------------------
mkdir -p full
if mount -t tmpfs -o size=64k tmpfs full 2>/dev/null; then
  dd if=/dev/zero of=full/filler bs=1k count=64 2>/dev/null  # fills it: every write fails
  expect "dump onto a full disk" 2 "$ENC" dump snap.h5 --layer 0 --region body -o full/body.bin
  one_line "dump onto a full disk"
  check "dump onto a full disk: no output" test ! -e full/body.bin
  expect "decode onto a full disk" 2 "$ENC" decode snap.h5 -o full/cap.h5
  one_line "decode onto a full disk (no HDF5 stack)"
  check "decode onto a full disk: no output" test ! -e full/cap.h5
  "$PY" -S "$HELPER" kvd tr.kvd --dim 128 --heads 2 --tokens 1280 --group 128 --seed 2
  expect "train onto a full disk" 2 "$TRAIN" tr.kvd --bits 2 --max-iters 1 -o full/cb -q
  check "train onto a full disk: no output at all" test "$(ls -A full)" = filler
  no_temps "full disk"
  umount full
else
  skip "no tmpfs mount (not root?): full-disk checks"
fi

# ---- 4. an output that names an input ---------------------------------------------------------
cp snap.h5 keep.h5
expect "encode x -o x" 1 "$ENC" encode in.kvd -o in.kvd -q
check "encode x -o x: input intact" test "$(stat -c %s in.kvd)" = $((10 * (80 + 2 * 128 * 128 * 2)))
expect "decode s -o ./s" 1 "$ENC" decode snap.h5 -o ./snap.h5
ln snap.h5 hardlink.h5
expect "dump s -o HARDLINK-of-s" 1 "$ENC" dump snap.h5 --layer 0 --region body -o hardlink.h5
check "the snapshot is intact" cmp -s snap.h5 keep.h5
printf 'tiny-model v1\n' > model.bin
printf 'The quick brown fox jumps over the lazy dog.' > prompt.txt
cp prompt.txt prompt.keep
export SJKV_MODEL=$SCRATCH/model.bin
expect "record -o PROMPT" 1 "$REPLAY" record --prompt-file prompt.txt --generate 4 -o prompt.txt -q
expect "record -o MODEL" 1 "$REPLAY" record --prompt-file prompt.txt --generate 4 -o model.bin -q
check "prompt intact" cmp -s prompt.txt prompt.keep
"$REPLAY" record --prompt-file prompt.txt --generate 4 --ubatch 8 -o res-in/summary.md -q 2>/dev/null ||
  { mkdir -p res-in && "$REPLAY" record --prompt-file prompt.txt --generate 4 --ubatch 8 -o res-in/summary.md -q; }
cp res-in/summary.md traj.keep
expect "score --out over its own trajectory" 1 "$REPLAY" score res-in/summary.md --arms f32 --out res-in -q
check "the trajectory is intact" cmp -s res-in/summary.md traj.keep
check "model intact" test "$(cat model.bin)" = "tiny-model v1"
cp in.kvd in.bin
expect "train with an output over its --init file" 1 "$TRAIN" in.kvd --bits 2 -o in -q --init in.bin

# ---- 5. leftovers -----------------------------------------------------------------------------
# Job control on, so that background jobs keep SIGINT (a script's background jobs ignore it).
set -m
if write_kvd_np long.kvd 8 8192 gauss; then
  for sig in INT TERM; do
    "$ENC" encode long.kvd -o long.h5 -q --threads 1 --bits 3/2 &
    pid=$!
    # wait for the snapshot's temporary to appear (the write is under way), then interrupt
    for _ in $(seq 1 400); do compgen -G '.long.h5.tmp-*' >/dev/null && break; sleep 0.05; done
    kill -$sig $pid 2>/dev/null
    wait $pid
    rc=$?
    if [ $rc -gt 128 ]; then
      ok "SIG$sig during encode: died of the signal"
      # A signal after the rename (the write was done) leaves the whole snapshot; before it,
      # nothing. Never a part.
      if [ -e long.h5 ]; then
        check "SIG$sig after the commit: the snapshot is whole" "$ENC" inspect long.h5 >/dev/null 2>&1
        rm -f long.h5
      else
        ok "SIG$sig during encode: no output"
      fi
    else
      ok "SIG$sig during encode: had finished (exit $rc)"
      rm -f long.h5
    fi
    no_temps "SIG$sig during encode"
  done
else
  skip "no numpy: signal checks on a long encode"
fi
"$REPLAY" run --prompt-file prompt.txt --generate 400 --arms f32,f16 --out runint -q >/dev/null 2>&1 &
pid=$!
sleep 0.5
kill -INT $pid 2>/dev/null
wait $pid
rc=$?
if [ $rc = 130 ]; then
  # all or nothing: a signal after the commit (the run was done) leaves every file
  if [ -e runint/results.json ]; then
    check "SIGINT after run's commit: the trajectory is there too" test -s runint/trajectory.h5
  else
    check "SIGINT during run: no trajectory.h5" test ! -e runint/trajectory.h5
    check "SIGINT during run: no results folder left" test ! -e runint
  fi
else
  ok "run had finished before SIGINT (exit $rc)"
fi
no_temps "SIGINT during run"
set +m

# ---- 6. exit codes and messages ---------------------------------------------------------------
mkdir -p promptdir
expect "record --prompt-file FOLDER" 2 "$REPLAY" record --prompt-file promptdir --generate 4 -o t.h5 -q
one_line "record --prompt-file FOLDER"
says "record --prompt-file FOLDER" "is a folder"
for args in "--sink 100" "--tail 100" "--tail 0 --tail-max 64" "--bits 3/4 --body trellis"; do
  # shellcheck disable=SC2086
  expect "encode $args" 1 "$ENC" encode in.kvd -o bad.h5 -q $args
  check "encode $args: not blamed on the input" bash -c "! grep -qF 'in.kvd:' '$ERR'"
done
says "encode --bits 3/4 --body trellis" "--bits"
# --init reference starts from the format's built-in tables: its iteration 0 is the reference
# column of the held-out table (the identity start is the scalar column); --json names the
# start and why training stopped.
expect "train --init reference" 0 "$TRAIN" in.kvd --bits 3 --init reference --max-iters 2 -o cbref -q --json
"$PY" - "$OUT" <<'PY' && ok "train --init reference: starts at the reference tables" || bad "train --init reference: iteration 0 is not the reference"
import json, sys
j = json.load(open(sys.argv[1]))
assert j["init"].startswith("reference"), j["init"]
assert j["stop"]["k"] in ("converged", "cap", "no gain"), j["stop"]
for s in ("k", "v"):
    it0 = j["iterations"][s][0]["heldout_mse"]
    ref = j["heldout_mse"][s]["reference"]
    assert abs(it0 - ref) <= 1e-9 * max(1.0, ref), (s, it0, ref)
PY
expect "train --sink 100" 1 "$TRAIN" in.kvd --bits 2 --sink 100 -o cbs -q
says "train --sink 100" "--sink"
expect "record --temperature inf" 1 "$REPLAY" record --prompt-file prompt.txt --sample --temperature inf --generate 4 -o t.h5 -q
expect "record --seed -1" 1 "$REPLAY" record --prompt-file prompt.txt --sample --seed -1 --generate 4 -o t.h5 -q
expect "train --seed -1" 1 "$TRAIN" in.kvd --bits 2 --seed -1 -o cbn -q
mkdir -p cbdir
expect "train -o FOLDER/" 1 "$TRAIN" in.kvd --bits 2 -o cbdir/ -q
expect "train -o FOLDER" 1 "$TRAIN" in.kvd --bits 2 -o cbdir -q
check "train -o FOLDER: no hidden files" test -z "$(ls -A cbdir)"

# ---- 7. names, decodability, messages -----------------------------------------------------------
long=$(printf 'n%.0s' $(seq 1 250))
expect "encode -o a 250-character name" 0 "$ENC" encode in.kvd -o "$long" -q --tail 128 --tail-max 256
check "the 250-character output exists" test -s "$long"
rm -f "$long"
expect "record --capture into a missing folder" 2 "$REPLAY" record --prompt-file prompt.txt --generate 4 -o t.h5 --capture nodir/c.h5 -q
check "--capture error names no doubled temporary" bash -c "! grep -q 'tmp-[0-9]*\.tmp-' '$ERR'"
if write_kvd_np huge.kvd 1 384 sink65504; then
  # a rotated-basis input whose sink is all 65504: stored exactly; its model-basis rows
  # overflow fp16, so decode says so about the snapshot (it wrote a NaN-check error about
  # "capture" before), and --rotated gives the stored values back
  expect "encode a sink of 65504s" 0 "$ENC" encode huge.kvd -o huge.h5 -q --tail 0 --tail-max 0
  expect "decode it to the model basis" 2 "$ENC" decode huge.h5 -o huge-cap.h5 -q
  one_line "decode of 65504s"
  says "decode of 65504s" "huge.h5: layer 0 position 0 head 0 decodes to values that do not fit fp16"
  check "decode of 65504s: no output" test ! -e huge-cap.h5
  expect "decode it --rotated" 0 "$ENC" decode huge.h5 -o huge-cap.h5 -q --rotated
else
  skip "no numpy: 65504 check"
fi

# ---- 8. strings from files in JSON ------------------------------------------------------------
if have_h5py; then
  cp snap.h5 badname.h5
  "$PY" - badname.h5 <<'PY'
import sys, h5py, numpy as np
with h5py.File(sys.argv[1], "r+") as f:
    raw = b"model \xff\xfe \x01\x1b[31m end"
    tid = h5py.h5t.C_S1.copy(); tid.set_size(len(raw)); tid.set_strpad(h5py.h5t.STR_NULLTERM)
    del f.attrs["model"]
    f.attrs.create("model", np.frombuffer(raw, dtype="S%d" % len(raw))[0], dtype=h5py.Datatype(tid))
PY
  run "$ENC" inspect badname.h5 --json
  if [ "$RC" = 0 ]; then
    check "inspect --json of a damaged model name is valid JSON" "$PY" -c 'import json,sys; json.load(open(sys.argv[1]))' "$OUT"
  else
    ok "damaged model name refused (exit $RC)"
    one_line "damaged model name"
    check "damaged model name: no raw control byte on stderr" bash -c "! grep -qP '[\x01\x1b]' '$ERR'"
  fi
  # a trajectory whose ubatch attribute wraps the ring (2^31 - 64 gave SIGFPE, 2^31 a wrong KL)
  "$REPLAY" record --prompt-file prompt.txt --generate 6 --ubatch 8 -o good.h5 -q
  for ub in 2147483584 2147483648; do
    cp good.h5 "ub$ub.h5"
    "$PY" - "ub$ub.h5" "$ub" <<'PY'
import sys, h5py, numpy as np
with h5py.File(sys.argv[1], "r+") as f:
    f.attrs.modify("ubatch", np.uint32(int(sys.argv[2])))
PY
    expect "score a trajectory with ubatch $ub" 2 "$REPLAY" score "ub$ub.h5" --arms f32,f16 --out "res$ub" -q
    one_line "ubatch $ub"
    says "ubatch $ub" "ubatch"
  done
  # recordings with 1 and 2 threads are the same bytes
  "$REPLAY" record --prompt-file prompt.txt --generate 6 --ubatch 8 --threads 1 -o th1.h5 -q
  "$REPLAY" record --prompt-file prompt.txt --generate 6 --ubatch 8 --threads 2 -o th2.h5 -q
  check "trajectory bytes do not depend on --threads" cmp -s th1.h5 th2.h5
else
  skip "no h5py: damaged-string and attribute checks"
fi

# ---- 9. the second pass (harden-2) ---------------------------------------------------------------
# record --capture on a model with no full-attention layer: usage, naming the model, before any work
expect "record --capture, no full-attention layer" 1 env SJKV_FAKE_ALL_SLIDING=1 "$REPLAY" record \
  --prompt-file prompt.txt --generate 64 -o slide.h5 --capture slide-cap.h5 -q
one_line "record --capture, no full-attention layer"
says "record --capture, no full-attention layer" "--capture: the model $SCRATCH/model.bin has no full-attention layer"
check "record --capture, no full-attention layer: no output" test ! -e slide.h5 -a ! -e slide-cap.h5

# compare: a position twice is the defect of the file that holds the second
"$REPLAY" record --prompt-file prompt.txt --generate 6 --ubatch 8 -o t6.h5 -q
"$REPLAY" score t6.h5 --arms f32,f16 --out cmp-a -q >/dev/null
"$REPLAY" score t6.h5 --arms f32,f16 --out cmp-b -q >/dev/null
expect "compare, the same rows twice" 2 "$REPLAY" compare cmp-a cmp-b -o cmp.csv
one_line "compare, the same rows twice"
says "compare, the same rows twice" "cmp-b/positions.csv: line 2: arm f32, history t6.h5: position"
says "compare, the same rows twice" "appears twice, first (cmp-a/positions.csv line 2)"
mkdir -p cmp-c
{ cat cmp-a/positions.csv; sed -n 3p cmp-a/positions.csv; } > cmp-c/positions.csv
: > nopairs.txt
expect "compare, a row twice in one file" 2 "$REPLAY" compare cmp-c --pairs nopairs.txt -o cmp.csv
says "compare, a row twice in one file" "cmp-c/positions.csv: line 14: arm f32"
says "compare, a row twice in one file" "first (cmp-c/positions.csv line 3)"
printf 'f16 q4_0\n' > pairs.txt
expect "compare, a pair with no rows" 2 "$REPLAY" compare cmp-a --pairs pairs.txt -o cmp.csv
says "compare, a pair with no rows" "pairs.txt: line 1: pair f16 vs q4_0: no rows of q4_0"
head -c -2 cmp-a/positions.csv > cmp-c/positions.csv
expect "compare, positions.csv cut inside its last number" 2 "$REPLAY" compare cmp-c -o cmp.csv
says "compare, positions.csv cut inside its last number" "cmp-c/positions.csv: line 13: no line end"
check "compare failures: no output" test ! -e cmp.csv

# encode --group: checked with the codec options (usage, naming it) before the input is read
for g in 0 1 15 17 1025 4096 4294967295 ""; do
  expect "encode --group '$g'" 1 "$ENC" encode in.kvd -o grp.h5 -q --group "$g" --tail 0 --tail-max 0
  says "encode --group '$g'" "--group"
  check "encode --group '$g': not blamed on the input" bash -c "! grep -qF 'in.kvd' '$ERR'"
done
expect "encode --group 64 with a trellis body" 1 "$ENC" encode in.kvd -o grp.h5 -q --bits 3/3 --group 64 --tail 0 --tail-max 0
says "encode --group 64 with a trellis body" "--group: trellis bodies need group 128"
expect "encode --group with a missing input" 1 "$ENC" encode missing.kvd -o grp.h5 -q --group 17
check "encode --group: no output" test ! -e grp.h5
"$ENC" encode --help > help.txt
check "encode --help states --group's range" grep -qF "a multiple of 16 in [16, 1024]" help.txt

# a FIFO as an input: refused at once (it blocked in open() before)
mkfifo in.fifo
for args in "inspect in.fifo" "inspect snap.h5 --against in.fifo" "encode in.fifo -o f.h5 -q" "decode in.fifo -o f.h5" \
            "dump in.fifo --layer 0 --region body -o f.bin" "import in.fifo -o f.h5"; do
  # shellcheck disable=SC2086
  expect "$args" 2 timeout 20 "$ENC" $args
  one_line "$args"
  says "$args" "in.fifo: is a FIFO, not a regular file"
done
expect "train on a FIFO" 2 timeout 20 "$TRAIN" in.fifo --bits 2 -o cbf -q
says "train on a FIFO" "in.fifo: is a FIFO"
expect "train inspect a FIFO" 2 timeout 20 "$TRAIN" inspect in.fifo
expect "score a FIFO" 2 timeout 20 "$REPLAY" score in.fifo --arms f32 --out res-fifo -q
says "score a FIFO" "in.fifo: is a FIFO, not a regular file"
expect "score with a FIFO as the model" 2 timeout 20 env SJKV_MODEL="$SCRATCH/in.fifo" "$REPLAY" score t6.h5 --arms f32 --out res-fifo -q
says "score with a FIFO as the model" "in.fifo: is a FIFO"
mkdir -p fifo-res
ln -sf "$SCRATCH/in.fifo" fifo-res/positions.csv
expect "compare a FIFO" 2 timeout 20 "$REPLAY" compare fifo-res -o cmp.csv
expect "compare --pairs FIFO" 2 timeout 20 "$REPLAY" compare cmp-a --pairs in.fifo -o cmp.csv
check "FIFO inputs: nothing written" test ! -e f.h5 -a ! -e f.bin -a ! -e res-fifo -a ! -e cmp.csv

# a newline, carriage return or tab in a path: \xNN, not a space
for c in '\n' '\r' '\t'; do
  name=$(printf "bad${c}name.h5")
  hex=$(printf '%s' "$c" | sed 's/\\n/0a/; s/\\r/0d/; s/\\t/09/')
  expect "a path with \\x$hex" 2 "$ENC" inspect "$name"
  one_line "a path with \\x$hex"
  says "a path with \\x$hex" "bad\\x${hex}name.h5: cannot open"
done

# score: two trajectories of one base name (their rows would merge), or one given twice
mkdir -p ta tb
cp t6.h5 ta/t.h5
cp t6.h5 tb/t.h5
expect "score a/t.h5 b/t.h5" 1 "$REPLAY" score ta/t.h5 tb/t.h5 --arms f32 --out res-two -q
one_line "score a/t.h5 b/t.h5"
says "score a/t.h5 b/t.h5" "trajectories ta/t.h5 and tb/t.h5 have one name, t.h5"
expect "score t.h5 t.h5" 1 "$REPLAY" score ta/t.h5 ta/t.h5 --arms f32 --out res-two -q
says "score t.h5 t.h5" "trajectory ta/t.h5 is given twice"
check "score with one name twice: no output" test ! -e res-two

# a report on standard output that cannot be written: exit 2, one line
stdout_fails() {  # stdout_fails NAME HOW TOOL ARGS...: HOW is full (/dev/full) or closed
  local n=$1 how=$2
  shift 2
  if [ "$how" = full ]; then "$@" >/dev/full 2>"$ERR"; else "$@" >&- 2>"$ERR"; fi
  RC=$?
  if [ "$RC" = 2 ]; then ok "$n: exit 2"; else bad "$n: exit $RC, expected 2"; fi
  one_line "$n"
  says "$n" "standard output: cannot write the report"
}
CB="$HERE/../../data/codebooks/reference-3bit.bin"
for how in full closed; do
  [ "$how" = full ] && [ ! -w /dev/full ] && { skip "/dev/full not writable"; continue; }
  stdout_fails "inspect >$how" "$how" "$ENC" inspect snap.h5
  stdout_fails "inspect --json >$how" "$how" "$ENC" inspect snap.h5 --json
  stdout_fails "plan >$how" "$how" "$ENC" plan --layers 16 --kv-heads 4 --head-dim 256
  stdout_fails "train inspect --json >$how" "$how" "$TRAIN" inspect --json "$CB"
  stdout_fails "train inspect >$how" "$how" "$TRAIN" inspect "$CB"
  stdout_fails "replay engine >$how" "$how" "$REPLAY" engine
done
# with stdout closed, no file the tool opens becomes fd 1: the snapshot is not written into
cp snap.h5 snap-keep.h5
"$ENC" inspect snap-keep.h5 --json >&- 2>/dev/null
check "inspect with stdout closed leaves its input alone" cmp -s snap.h5 snap-keep.h5

# the engine version: one line, the one of replay/include/sjkv/replay/engine.h, named in --help
want=$(sed -n 's/.*kEngineVersion = "\([^"]*\)".*/\1/p' "$HERE/../../replay/include/sjkv/replay/engine.h")
expect "replay engine" 0 "$REPLAY" engine
check "replay engine prints kEngineVersion ($want)" test -n "$want" -a "$(cat "$OUT")" = "$want"
check "replay engine prints one line" test "$(grep -c '' "$OUT")" = 1
"$REPLAY" --help > help.txt
check "replay --help names engine" grep -q "^  engine " help.txt

# ---- 10. the third pass (harden-3) -----------------------------------------------------------------
# a failing device output publishes nothing: the device is written before any file is renamed
"$REPLAY" record --prompt-file prompt.txt --generate 6 --ubatch 8 -o ft1.h5 -q
"$REPLAY" record --prompt-file prompt.txt --generate 7 --ubatch 8 -o ft2.h5 -q
frontier() { "$REPLAY" frontier --tune ft1.h5 --heldout ft2.h5 --budgets 20 --arms f16 f32 -q "$@"; }
if [ -w /dev/full ]; then
  expect "record --capture /dev/full" 2 "$REPLAY" record --prompt-file prompt.txt --generate 4 -o devfull.h5 --capture /dev/full -q
  one_line "record --capture /dev/full"
  says "record --capture /dev/full" "/dev/full"
  check "record --capture /dev/full: no trajectory" test ! -e devfull.h5
  expect "run --capture /dev/full" 2 "$REPLAY" run --prompt-file prompt.txt --generate 4 --arms f32 --out run-full --capture /dev/full -q
  check "run --capture /dev/full: no results folder" test ! -e run-full
  mkdir -p fr-full
  ln -s /dev/full fr-full/recommend.md
  expect "frontier, recommend.md a link to /dev/full" 2 frontier --default f16 --out fr-full
  one_line "frontier, recommend.md a link to /dev/full"
  check "frontier into /dev/full: no frontier.csv or .svg" test ! -e fr-full/frontier.csv -a ! -e fr-full/frontier.svg
  check "frontier into /dev/full: the link stays" test -L fr-full/recommend.md
  check "/dev/full is still a character device after frontier" test -c /dev/full
  no_temps "device outputs"
else
  skip "/dev/full not writable: device-output checks"
fi
# frontier --context: bounded (exit 1, naming it), before any work
for c in 100000000 4294967295; do
  expect "frontier --context $c" 1 frontier --default f16 --out fr-ctx --context "$c"
  says "frontier --context $c" "--context"
done
check "frontier --context: no output" test ! -e fr-ctx
# a held-out trajectory with a tuning one's bytes (a copy, a hard link, a symbolic link)
cp ft1.h5 ft1-copy.h5
ln ft1.h5 ft1-hard.h5
ln -s ft1.h5 ft1-sym.h5
for h in ft1-copy.h5 ft1-hard.h5 ft1-sym.h5; do
  expect "frontier --heldout $h of --tune ft1.h5" 1 "$REPLAY" frontier --tune ft1.h5 --heldout "$h" --budgets 20 \
    --arms f16 f32 --default f16 --out fr-same -q
  says "frontier --heldout $h" "ft1.h5"
done
check "frontier with a held-out copy: no output" test ! -e fr-same
# frontier --default: an arm that does not parse is usage
for d in bogus ""; do
  expect "frontier --default '$d'" 1 frontier --out fr-def --default "$d"
  says "frontier --default '$d'" "--default"
done
check "frontier --default: no output" test ! -e fr-def
# an output that is a folder: refused before the search
mkdir -p fr-dir/frontier.svg
expect "frontier, frontier.svg a folder" 2 frontier --default f16 --out fr-dir
one_line "frontier, frontier.svg a folder"
says "frontier, frontier.svg a folder" "fr-dir/frontier.svg: --out: is a folder"
check "frontier, frontier.svg a folder: nothing scored" test ! -e fr-dir/store

# Under load (issue 40): the tools start OpenMP with the passive wait (GNU OpenMP prints its
# settings with OMP_DISPLAY_ENV=verbose, at each start: the last is the one that runs), and a
# user's own setting stands.
spin_of() { env -u OMP_WAIT_POLICY -u GOMP_SPINCOUNT OMP_DISPLAY_ENV=verbose "$@" --help 2>&1 >/dev/null |
  sed -n "s/.*GOMP_SPINCOUNT = '\([0-9]*\)'.*/\1/p" | tail -1; }
for t in "$ENC" "$TRAIN" "$REPLAY"; do
  got=$(spin_of "$t")
  if [ "$got" = 0 ]; then ok "$(basename "$t"): passive OpenMP wait"; else bad "$(basename "$t"): GOMP_SPINCOUNT '$got', expected 0"; fi
done
got=$(spin_of env GOMP_SPINCOUNT=777 "$ENC")
if [ "$got" = 777 ]; then ok "a user's GOMP_SPINCOUNT stands"; else bad "a user's GOMP_SPINCOUNT: got '$got'"; fi
got=$(spin_of env OMP_WAIT_POLICY=active "$ENC")
if [ -n "$got" ] && [ "$got" != 0 ]; then ok "a user's OMP_WAIT_POLICY stands"; else bad "a user's OMP_WAIT_POLICY=active: spin '$got'"; fi

echo "$passed passed, $failed failed, $skipped skipped"
[ "$failed" = 0 ]
