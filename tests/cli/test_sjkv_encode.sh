#!/usr/bin/env bash
# End-to-end tests of sjkv-encode, run as a user would: exit codes (0 ok, 1 usage, 2 bad
# input, 3 internal), one-line errors naming the file and the defect, --help, encode /
# inspect / decode / dump / plan on small generated inputs, must-reject files, and no output
# or temporary file left behind by a failure.
#
#   test_sjkv_encode.sh SJKV_ENCODE SCRATCH_DIR
#
# Inputs are generated here with cli_helper.py (standard-library Python 3); the must-reject
# HDF5 files come from tests/reject/. Set VERBOSE=1 to list passing checks too. The last
# line is "N passed, M failed"; the exit status is 1 when anything failed.
set -u

TOOL=${1:?usage: test_sjkv_encode.sh SJKV_ENCODE SCRATCH_DIR}
SCRATCH=${2:?usage: test_sjkv_encode.sh SJKV_ENCODE SCRATCH_DIR}
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REJECT_DIR=${SJKV_REJECT_DIR:-$HERE/../reject}
PY=${SJKV_PYTHON:-python3}
HELPER="$HERE/cli_helper.py"
VERBOSE=${VERBOSE:-}

passed=0
failed=0
ok() { passed=$((passed + 1)); if [ -n "$VERBOSE" ]; then echo "ok: $1"; fi; }
bad() { failed=$((failed + 1)); echo "FAIL: $1"; }
check() {  # check NAME COMMAND...: passes when COMMAND succeeds
  local name=$1
  shift
  if "$@"; then ok "$name"; else bad "$name"; fi
}
# Counts the PASS/FAIL lines of a cli_helper.py check; a helper that dies is one failure.
pycheck() {
  local out rc line
  out=$("$PY" -S "$HELPER" "$@" 2>&1)
  rc=$?
  while IFS= read -r line; do
    case $line in
      PASS\ *) ok "${line#PASS }" ;;
      FAIL\ *) bad "${line#FAIL }" ;;
      *) [ -n "$line" ] && echo "  $line" ;;
    esac
  done <<<"$out"
  if [ $rc -ne 0 ]; then bad "cli_helper.py $1 exited $rc"; fi
}

rm -rf "$SCRATCH"
mkdir -p "$SCRATCH"
cd "$SCRATCH" || exit 1
OUT=$SCRATCH/stdout.txt
ERR=$SCRATCH/stderr.txt

# run ARGS...: runs the tool; RC, stdout in $OUT, stderr in $ERR.
run() {
  "$TOOL" "$@" >"$OUT" 2>"$ERR"
  RC=$?
}
show_err() { sed 's/^/    stderr: /' "$ERR" | head -5; }
expect_rc() {  # expect_rc NAME WANT ARGS...
  local name=$1 want=$2
  shift 2
  run "$@"
  if [ "$RC" = "$want" ]; then ok "$name: exit $want"; else
    bad "$name: exit $RC, expected $want ($*)"
    show_err
  fi
}
err_lines() { grep -c '' "$ERR"; }
one_line_error() {  # one_line_error NAME FILE FRAGMENT: stderr is one line naming FILE and FRAGMENT
  local name=$1 file=$2 frag=$3
  local n
  n=$(err_lines)
  if [ "$n" = 1 ]; then ok "$name: one line on stderr"; else
    bad "$name: $n lines on stderr, expected 1"
    show_err
  fi
  if grep -qF -- "$file" "$ERR"; then ok "$name: stderr names the file"; else
    bad "$name: stderr does not name $file"
    show_err
  fi
  if [ -z "$frag" ] || grep -qF -- "$frag" "$ERR"; then ok "$name: stderr names the defect"; else
    bad "$name: stderr lacks '$frag'"
    show_err
  fi
  if grep -q '^sjkv-encode: ' "$ERR"; then ok "$name: stderr starts with the tool name"; else
    bad "$name: stderr does not start with 'sjkv-encode: '"
  fi
}
no_output_left() {  # no_output_left NAME PATH: neither PATH nor a .NAME.tmp-* beside it exists
  local name=$1 path=$2
  local dir base
  dir=$(dirname "$path")
  base=$(basename "$path")
  if [ ! -e "$path" ]; then ok "$name: no output file"; else bad "$name: $path was left behind"; fi
  if [ -d "$dir" ] && compgen -G "$dir/.$base.tmp-*" >/dev/null; then
    bad "$name: temporary file $(compgen -G "$dir/.$base.tmp-*" | head -1) left behind"
  else ok "$name: no temporary file"; fi
}
json_of() {  # json_of FILE ARGS...: runs the tool with ARGS, keeps stdout in FILE, checks exit 0
  local file=$1
  shift
  run "$@"
  cp "$OUT" "$file"
  if [ "$RC" = 0 ]; then ok "$* : exit 0"; else
    bad "$*: exit $RC"
    show_err
  fi
}

# ---------------------------------------------------------------------------------------------
# 1. Help and usage errors
expect_rc "--help" 0 --help
for opt in encode decode inspect dump plan demo; do
  check "--help lists subcommand $opt" grep -q "^  $opt " "$OUT"
done
check "--help documents the exit codes" grep -q "1 usage, 2 bad input, 3 internal error" "$OUT"

declare -A HELP_OPTS=(
  [encode]="--output --bits --body --staging --group --sink --sink-type --tail --tail-max --ubatch --iters --kvarn --codebook --assume-rotated --head-dim --layers --layer-ids --kv-sections --threads --device --quiet"
  [decode]="--output --rotated --ubatch --codebook --quiet"
  [inspect]="--against --json --ubatch --codebook"
  [export]="--output --quiet"
  [import]="--output --ubatch --codebook --quiet"
  [dump]="--layer --region --output"
  [plan]="--model --layers --kv-heads --head-dim --context --budget --ubatch --note-rule --note-12gb --json"
  [demo]="--head-dim --records --seed --threads --path --json --quiet"
)
for sub in encode decode inspect export import dump plan demo; do
  expect_rc "$sub --help" 0 "$sub" --help
  for opt in ${HELP_OPTS[$sub]}; do
    check "$sub --help mentions $opt" grep -q -- "$opt\b" "$OUT"
  done
  expect_rc "$sub -h" 0 "$sub" -h
done

"$PY" -S "$HELPER" kvd in.kvd --dim 128 --heads 2 --tokens 640 --group 128 --seed 1 || bad "writing in.kvd"
check "generated in.kvd has 2 x 5 blocks" test "$(stat -c %s in.kvd)" = $((10 * (80 + 2 * 128 * 128 * 2)))

expect_rc "no subcommand" 1
expect_rc "unknown subcommand" 1 frobnicate
expect_rc "unknown option" 1 --frobnicate
expect_rc "encode: unknown option" 1 encode in.kvd -o x.h5 --frobnicate
expect_rc "encode: missing -o" 1 encode in.kvd
expect_rc "encode: missing input" 1 encode -o x.h5
expect_rc "encode: --staging q4_0" 1 encode in.kvd -o x.h5 --staging q4_0
expect_rc "encode: --ubatch 0" 1 encode in.kvd -o x.h5 --ubatch 0
expect_rc "encode: --iters 65" 1 encode in.kvd -o x.h5 --iters 65
expect_rc "encode: --device gpu" 1 encode in.kvd -o x.h5 --device gpu
expect_rc "encode: --ubatch not a number" 1 encode in.kvd -o x.h5 --ubatch many
# A malformed or unsupported --bits is a usage error: the value of an option, not the input.
for b in x 4 4/4/4 4/4x 5/5 1/1 0/4; do
  expect_rc "encode: --bits $b" 1 encode in.kvd -o x.h5 -q --bits "$b"
  check "encode --bits $b: stderr mentions the bits" grep -qi "bits" "$ERR"
  check "encode --bits $b: stderr does not blame the input file" bash -c "! grep -qF 'in.kvd:' '$ERR'"
done
no_output_left "encode with bad --bits" x.h5
expect_rc "dump: --region tail" 1 dump in.kvd --layer 0 --region tail -o x.bin
expect_rc "dump: missing --layer" 1 dump in.kvd --region body -o x.bin
expect_rc "plan: --context not a number" 1 plan --layers 1 --kv-heads 1 --head-dim 128 --context lots
expect_rc "plan: no geometry" 1 plan
expect_rc "plan: bad --budget" 1 plan --layers 16 --kv-heads 4 --head-dim 256 --budget 11XB
expect_rc "demo: --head-dim 96" 1 demo --head-dim 96
expect_rc "demo: --path slow" 1 demo --path slow
# An input that does not exist: refused before any work (CLI11 checks it: usage), naming it.
run encode missing.kvd -o x.h5
if [ "$RC" = 2 ]; then ok "encode missing.kvd: exit 2"; else bad "encode missing.kvd: exit $RC, expected 2"; fi
one_line_error "encode missing.kvd" missing.kvd "cannot open"
check "encode missing.kvd: stderr names the file" grep -qF missing.kvd "$ERR"
no_output_left "encode missing input" x.h5

# ---------------------------------------------------------------------------------------------
# 2. encode / inspect / decode / dump on a generated .kvd (D = 128, 2 heads, 640 tokens)
D=128
H=2
N=640
# name|encode options|bits_k bits_v sink sink_type staging tail tail_max ubatch body
CONFIGS=(
  "a44|--tail 128 --tail-max 256 --ubatch 64|4 4 128 f16 tq6_0 128 256 64"
  "b42q8|--bits 4/2 --staging q8_0 --tail 256 --tail-max 0 --ubatch 100|4 2 128 f16 q8_0 256 0 100"
  "c34f16|--bits 3/4 --body scalar --staging f16 --sink 64 --sink-type inherit --tail 128 --tail-max 384 --ubatch 32|3 4 64 inherit f16 128 384 32"
  "d22|--bits 2/2 --body scalar --assume-rotated --staging f16 --tail 0 --tail-max 0 --ubatch 640|2 2 128 f16 f16 0 0 640"
  "e33|--bits 3/3 --body scalar --iters 4 --ubatch 1000|3 3 128 f16 tq6_0 4096 8192 1000"
  "fkvarn|--kvarn --ubatch 128|4 4 128 f16 f16 0 0 128"
  "g24|--bits 2/4 --body scalar --staging q8_0 --sink 192 --tail 128 --tail-max 128 --ubatch 7|2 4 192 f16 q8_0 128 128 7"
  "h32t|--bits 3/2 --tail 128 --tail-max 256 --ubatch 64|3 2 128 f16 tq6_0 128 256 64 trellis"
  "i22t|--bits 2/2 --body trellis --staging q8_0 --tail 0 --tail-max 0 --ubatch 96|2 2 128 f16 q8_0 0 0 96 trellis"
  "j33t|--bits 3/3 --body trellis --staging f16 --sink-type inherit --tail 256 --tail-max 384 --ubatch 640|3 3 128 inherit f16 256 384 640 trellis"
)
for spec in "${CONFIGS[@]}"; do
  IFS='|' read -r name opts expect <<<"$spec"
  read -r bk bv sink sink_type staging tail tail_max ub body <<<"$expect"
  # shellcheck disable=SC2086
  expect_rc "encode $name" 0 encode in.kvd -o "$name.h5" $opts --threads 2
  [ "$RC" = 0 ] || continue
  check "encode $name: the summary names the input and output" grep -q "in.kvd: 1 layers, 640 tokens, B=.* -> $name.h5" "$ERR"
  check "encode $name: no temporary file" bash -c "! compgen -G '.$name.h5.tmp-*' >/dev/null"
  json_of "$name.json" inspect "$name.h5" --json
  pycheck check-inspect "$name.json" name="inspect $name" bits_k="$bk" bits_v="$bv" head_dim=$D kv_heads=$H \
    layers=1 sink="$sink" sink_type="$sink_type" staging="$staging" tail="$tail" tail_max="$tail_max" \
    ubatch="$ub" N=$N expect_model=cli-test-model body="${body:-scalar}"
  expect_rc "inspect $name (text)" 0 inspect "$name.h5"
  check "inspect $name: text shows the policy line" grep -q "policy *N=640 B=" "$OUT"
  check "inspect $name: text shows three regions" test "$(grep -cE '^\| (sink|body|ring) \|' "$OUT")" = 3
  check "inspect $name: text shows bits per value" grep -q "^bits per value: occupied" "$OUT"
  for region in sink body ring; do
    expect_rc "dump $name $region" 0 dump "$name.h5" --layer 0 --region "$region" -o "$name.$region.bin"
    pycheck check-dump-size "$name.json" "$region" "$name.$region.bin"
  done
done

# Byte-level: an f16 sink holds the input rows exactly (kvd tiles are already rotated).
pycheck check-sink-dump a44.sink.bin in.kvd 128
pycheck check-sink-dump d22.sink.bin in.kvd 128
# Reproducible: the same snapshot bytes whatever the thread count.
expect_rc "encode a44 on 1 thread" 0 encode in.kvd -o a44-t1.h5 --tail 128 --tail-max 256 --ubatch 64 --threads 1 -q
check "encode -q prints nothing on stderr" test ! -s "$ERR"
check "encode is byte-reproducible across thread counts" cmp -s a44.h5 a44-t1.h5

# Trellis: decode round trip, and codebook files (data/codebooks: the built-in reference tables)
expect_rc "decode h32t --rotated" 0 decode h32t.h5 -o h32t.rot.h5 --rotated -q
json_of h32t-self.json inspect h32t.h5 --against h32t.rot.h5 --json
pycheck check-against h32t-self.json name="3/2t against its rotated decode" min_snr_sink=60 min_snr_body=55 min_snr_ring=55
CB=$HERE/../../data/codebooks
if [ -f "$CB/reference-3bit.bin" ] && [ -f "$CB/reference-2bit.bin" ]; then
  expect_rc "encode 3/2t with the reference tables given" 0 encode in.kvd -o h32t-cb.h5 --bits 3/2 --tail 128 \
    --tail-max 256 --ubatch 64 --threads 2 -q --codebook "$CB/reference-3bit.bin" --codebook "$CB/reference-2bit.bin"
  check "the reference tables given give the default bytes" cmp -s h32t.h5 h32t-cb.h5
  head -c 100 in.kvd >cb-short.bin
  expect_rc "encode --codebook of 100 bytes" 2 encode in.kvd -o cb.h5 --bits 3/2 --codebook cb-short.bin
  one_line_error "--codebook of 100 bytes" cb-short.bin "100 bytes"
  no_output_left "--codebook of 100 bytes" cb.h5
  "$PY" -S -c "import sys; b=bytearray(open(sys.argv[1],'rb').read()); b[10:12]=b'\x00\x7e'; open(sys.argv[2],'wb').write(b)" \
    "$CB/reference-2bit.bin" cb-nan.bin
  expect_rc "encode --codebook with a NaN" 2 encode in.kvd -o cb.h5 --bits 3/2 --codebook "$CB/reference-3bit.bin" \
    --codebook cb-nan.bin
  one_line_error "--codebook with a NaN" cb-nan.bin "NaN"
  no_output_left "--codebook with a NaN" cb.h5
fi

# inspect --against: exact sink, f16 ring exact, error bounds by configuration
json_of a44-against.json inspect a44.h5 --against in.kvd --json
pycheck check-against a44-against.json name="a44 --against" exact=sink min_snr_body=15 min_snr_ring=25
json_of d22-against.json inspect d22.h5 --against in.kvd --json
pycheck check-against d22-against.json name="d22 --against" exact=sink,ring min_snr_body=5
json_of h32t-against.json inspect h32t.h5 --against in.kvd --json
pycheck check-against h32t-against.json name="3/2t --against" exact=sink min_snr_body=8 min_snr_ring=25
json_of fkvarn-against.json inspect fkvarn.h5 --against in.kvd --json
pycheck check-against fkvarn-against.json name="kvarn --against" exact=sink min_snr_body=15
expect_rc "inspect --against (text)" 0 inspect a44.h5 --against in.kvd
check "inspect --against text has an error table" grep -q "^| 0 | body |" "$OUT"

# decode: model basis and rotated basis; both are captures that encode again
expect_rc "decode a44" 0 decode a44.h5 -o a44.dec.h5
check "decode names both files" grep -q "a44.h5 -> a44.dec.h5 (640 tokens, model basis)" "$ERR"
expect_rc "decode a44 --rotated" 0 decode a44.h5 -o a44.rot.h5 --rotated -q
check "decode -q prints nothing on stderr" test ! -s "$ERR"
json_of a44-self.json inspect a44.h5 --against a44.rot.h5 --json
pycheck check-against a44-self.json name="a44 against its rotated decode" min_snr_sink=60 min_snr_body=55 min_snr_ring=55
json_of a44-model.json inspect a44.h5 --against a44.dec.h5 --json
pycheck check-against a44-model.json name="a44 against its model-basis decode" min_snr_sink=60 min_snr_all=35
expect_rc "encode a decoded capture" 0 encode a44.dec.h5 -o a44.re.h5 -q --tail 128 --tail-max 256 --ubatch 64
expect_rc "inspect a decoded capture as a snapshot" 2 inspect a44.dec.h5
one_line_error "inspect a capture" a44.dec.h5 "expected 'sjkv-snapshot'"
expect_rc "dump: no such layer" 2 dump a44.h5 --layer 3 --region body -o nolayer.bin
one_line_error "dump --layer 3" a44.h5 "has no layer 3"
no_output_left "dump --layer 3" nolayer.bin
"$PY" -S "$HELPER" kvd other.kvd --dim 64 --heads 2 --tokens 640 --group 128 --seed 3 || bad "writing other.kvd"
expect_rc "inspect --against a capture of another head size" 2 inspect a44.h5 --against other.kvd
one_line_error "inspect --against other.kvd" other.kvd ""

# A llama.cpp sequence state with 3 layers, 2 heads x 64, V transposed f32
"$PY" -S "$HELPER" llama seq.bin || bad "writing seq.bin"
expect_rc "encode llama state without --head-dim" 2 encode seq.bin -o ll.h5 -q
one_line_error "llama state without --head-dim" seq.bin "--head-dim"
no_output_left "llama state without --head-dim" ll.h5
expect_rc "encode llama state" 0 encode seq.bin -o ll.h5 --head-dim 64 --layers 0 2 --layer-ids 5 9 \
  --bits 4/4 --staging q8_0 --tail 0 --tail-max 128 --ubatch 50 -q
json_of ll.json inspect ll.h5 --json
pycheck check-inspect ll.json name="inspect llama" bits_k=4 bits_v=4 head_dim=64 kv_heads=2 layers=2 sink=128 \
  sink_type=f16 staging=q8_0 tail=0 tail_max=128 ubatch=50 N=300 group=128
for region in sink body ring; do
  expect_rc "dump llama layer 9 $region" 0 dump ll.h5 --layer 9 --region "$region" -o "ll.$region.bin"
  pycheck check-dump-size ll.json "$region" "ll.$region.bin"
done
expect_rc "dump llama layer 0 (not kept)" 2 dump ll.h5 --layer 0 --region body -o ll0.bin
one_line_error "dump llama layer 0" ll.h5 "(layers: 5, 9)"
expect_rc "decode llama" 0 decode ll.h5 -o ll.dec.h5 -q
json_of ll-against.json inspect ll.h5 --against ll.dec.h5 --json
pycheck check-against ll-against.json name="llama against its decode" layers=2 min_snr_sink=60 min_snr_all=35
# inspect --help says --against takes "a reference capture (or .kvd / llama.cpp state)"; a
# state file needs the head size, so inspect must either take it or not advertise state files.
run inspect ll.h5 --against seq.bin
if [ "$RC" = 0 ]; then ok "inspect --against a llama.cpp state file"; else
  "$TOOL" inspect --help >help.txt 2>&1
  if grep -q -- "--head-dim" "$ERR" && ! grep -q -- "--head-dim" help.txt; then
    bad "inspect --against seq.bin: exit $RC asking for --head-dim, which inspect does not take"
    show_err
  else ok "inspect --against a llama.cpp state file: refused with a usable hint"; fi
fi
expect_rc "encode llama state with --layers past the file" 2 encode seq.bin -o ll3.h5 --head-dim 64 --layers 3 -q
one_line_error "llama --layers 3" seq.bin "layer 3 was asked for"
no_output_left "llama --layers 3" ll3.h5
"$PY" -S "$HELPER" llama seq-q8.bin --k-type 8 || bad "writing seq-q8.bin"
expect_rc "encode llama state with a q8_0 cache" 2 encode seq-q8.bin -o llq.h5 --head-dim 64
one_line_error "llama q8_0 cache" seq-q8.bin "cache type Q8_0 (ggml type 8) is not read"
no_output_left "llama q8_0 cache" llq.h5
# --model's architecture and attention shapes are refused as sjkv-replay record refuses them
# (plan, encode and inspect --against took any architecture, head_count 0, or a head_count_kv
# that does not divide head_count). Metadata-only GGUF files: ARCH LAYERS HEADS KV_HEADS HEAD_DIM,
# then any further u32 keys as SUFFIX=VALUE (the key is ARCH.SUFFIX).
write_gguf() {
  "$PY" -S - "$@" <<'PY'
import struct, sys
path, arch, layers, heads, kv, dim = sys.argv[1], sys.argv[2], *map(int, sys.argv[3:7])
s = lambda x: struct.pack("<Q", len(x.encode())) + x.encode()
u32 = lambda k, v: s(k) + struct.pack("<II", 4, v)
kvs = [s("general.architecture") + struct.pack("<I", 8) + s(arch), u32(arch + ".block_count", layers),
       u32(arch + ".attention.head_count", heads), u32(arch + ".attention.head_count_kv", kv),
       u32(arch + ".attention.key_length", dim), u32(arch + ".attention.value_length", dim),
       u32(arch + ".embedding_length", 256), u32(arch + ".context_length", 4096)]
kvs += [u32(arch + "." + k, int(v)) for k, v in (a.split("=") for a in sys.argv[7:])]
open(path, "wb").write(b"GGUF" + struct.pack("<Iqq", 3, 0, len(kvs)) + b"".join(kvs))
PY
}
write_gguf m-ok.gguf llama 3 4 2 64 || bad "writing m-ok.gguf"
write_gguf m-arch.gguf mystery 3 4 2 64 || bad "writing m-arch.gguf"
write_gguf m-h0.gguf llama 3 0 2 64 || bad "writing m-h0.gguf"
write_gguf m-gqa.gguf llama 3 4 3 64 || bad "writing m-gqa.gguf"
write_gguf m-kv0.gguf gemma3 3 4 0 64 || bad "writing m-kv0.gguf"
# encode and inspect --against with --model: the model's checks before any work
expect_rc "encode llama state --model m-ok.gguf" 0 encode seq.bin --model m-ok.gguf --staging q8_0 -o llm.h5 -q
for f in m-arch.gguf m-h0.gguf m-gqa.gguf m-kv0.gguf; do
  expect_rc "encode --model $f" 2 encode seq.bin --model "$f" --staging q8_0 -o llbad.h5 -q
  one_line_error "encode --model $f" "$f" ""
  no_output_left "encode --model $f" llbad.h5
  expect_rc "inspect --against --model $f" 2 inspect llm.h5 --against seq.bin --model "$f"
  one_line_error "inspect --against --model $f" "$f" ""
done

# ---------------------------------------------------------------------------------------------
# 3. plan: the note's worked figures
expect_rc "plan at 110592" 0 plan --layers 16 --kv-heads 4 --head-dim 256 --context 110592
check "plan: f16 6.750 GiB" grep -qE '^\| f16 \| 65536\.0 \| 6\.750 \|' "$OUT"
check "plan: q8_0 3.586 GiB" grep -qE '^\| q8_0 \| 34816\.0 \| 3\.586 \|' "$OUT"
check "plan: sjkv 4/4 1.990 GiB" grep -qE '^\| sjkv 4/4 \| 17536\.0 \| 1\.990 \|' "$OUT"
expect_rc "plan in 11GiB, note's 12 GB setup and rule" 0 plan --layers 16 --kv-heads 4 --head-dim 256 \
  --budget 11GiB --note-12gb --note-rule
check "plan: sjkv 3/2t fits 261334" grep -qE '^\| sjkv 3/2t \(note rule\) \| 11392\.0 \| 261334 \|' "$OUT"
check "plan: turbo3 fits 250881" grep -qE '^\| turbo3 \| 12800\.0 \| 250881 \|' "$OUT"
check "plan: q8_0 fits 96768" grep -qE '^\| q8_0 \| 34816\.0 \| 96768 \|' "$OUT"
expect_rc "plan at 204800 (note rule)" 0 plan --layers 16 --kv-heads 4 --head-dim 256 --context 204800 --note-rule
check "plan: sjkv 3/2t 2.38 GiB at 204800" grep -qE '^\| sjkv 3/2t \(note rule\) \| 11392\.0 \| 2\.38[0-9] \|' "$OUT"
json_of plan.json plan --layers 16 --kv-heads 4 --head-dim 256 --context 110592 --context 204800 --budget 11GiB --json
pycheck check-plan-json plan.json
expect_rc "plan: a missing model file" 2 plan --model missing.gguf
expect_rc "plan: a model that is not GGUF" 2 plan --model in.kvd
one_line_error "plan --model in.kvd" in.kvd ""

# plan --model (the files of section 2): the same checks; the hybrid Qwen 3.5 geometry is planned
expect_rc "plan --model: llama 4/2 heads" 0 plan --model m-ok.gguf
# A dense model's plan has no recurrent state: no line, no KV+state columns.
if grep -q "recurrent\|KV+state" "$OUT"; then bad "plan --model dense: reports a recurrent state"; else
  ok "plan --model dense: no recurrent state"; fi
check "plan --model dense: the table's columns" grep -qxF '| format | bytes/token (body) | GiB @110592 | bpv @110592 |' "$OUT"
# The hybrid: 8 layers, full attention at 3 and 7 (qwen35's default interval 4), Gated DeltaNet
# state Kc 4, S 64, 2 key and 4 value heads: per recurrent layer conv 3 x (2*2*64 + 256) and
# delta 64 x 256 values, 6 layers: 107,520 values, 430,080 bytes in f32, 215,040 in 16 bits.
GDN="ssm.conv_kernel=4 ssm.inner_size=256 ssm.state_size=64 ssm.time_step_rank=4 ssm.group_count=2"
# shellcheck disable=SC2086
write_gguf m-q35.gguf qwen35 8 4 2 64 $GDN || bad "writing m-q35.gguf"
# shellcheck disable=SC2086
write_gguf m-q35-nogroups.gguf qwen35 8 4 2 64 ${GDN% *} || bad "writing m-q35-nogroups.gguf"
expect_rc "plan --model: the hybrid Qwen 3.5 geometry" 0 plan --model m-q35.gguf
check "plan --model: qwen35's full-attention layers" grep -q "qwen35, 2 full-attention layers of 8" "$OUT"
check "plan --model hybrid: the state's shape" \
  grep -qF "recurrent state per sequence: 6 of 8 layers x (conv 3 x 512 + delta 64 x 256) = 107520 values" "$OUT"
check "plan --model hybrid: the state's bytes" \
  grep -qF "430080 bytes (0.410 MiB) at 32 bits (llama.cpp's f32), 215040 bytes (0.205 MiB) at 16 bits" "$OUT"
check "plan --model hybrid: a KV+state column" grep -qF '| GiB @110592 | bpv @110592 | GiB KV+state @110592 |' "$OUT"
# f16 KV: 2 layers x 2 x 2 heads x 64 x 2 B = 1,024 B/token: 1 MiB holds 1,024 tokens, or
# (1 MiB - 215,040 B) / 1,024 = 814 beside the state.
expect_rc "plan --model hybrid in 1MiB" 0 plan --model m-q35.gguf --budget 1MiB
check "plan --model hybrid: f16 fits 1024, 814 with the state" grep -qE '^\| f16 \| 1024\.0 \| 1024 \| 814 \|$' "$OUT"
json_of plan-q35.json plan --model m-q35.gguf --context 4096 --budget 1MiB --json
check "plan --model hybrid --json: state and KV+state bytes" "$PY" -S -c '
import json, sys
d = json.load(open(sys.argv[1]))
s = d["recurrent_state"]
assert (s["layers"], s["of_layers"], s["values"], s["bytes_32bit"], s["bytes_16bit"]) == (6, 8, 107520, 430080, 215040), s
assert (s["conv_values_per_layer"], s["delta_values_per_layer"]) == (1536, 16384), s
f16 = [o for o in d["options"] if o["format"] == "f16"][0]
c = f16["contexts"][0]
assert c["bytes"] == 4096 * 1024 and c["bytes_with_state"] == c["bytes"] + 215040, c
assert (f16["max_context"], f16["max_context_with_state"]) == (1024, 814), f16
' plan-q35.json
json_of plan-dense.json plan --model m-ok.gguf --context 4096 --budget 1MiB --json
check "plan --model dense --json: no state keys" "$PY" -S -c '
import json, sys
d = json.load(open(sys.argv[1]))
assert "recurrent_state" not in d and all("max_context_with_state" not in o for o in d["options"]), d
' plan-dense.json
# encode --model on a hybrid's llama.cpp state file (tests/golden/llama_state, the qwen35 test
# model's): the attention cache is read as layers 3 and 7, the recurrent part walked and checked
# against the model's state shape; another shape is refused by name, with nothing left behind.
Q35_STATE="$HERE/../golden/llama_state/qwen35-f16-fa.ggsq"
# shellcheck disable=SC2086
write_gguf m-q35-256.gguf qwen35 8 4 2 256 $GDN || bad "writing m-q35-256.gguf"
write_gguf m-q35-other.gguf qwen35 8 4 2 256 ssm.conv_kernel=4 ssm.inner_size=256 ssm.state_size=64 \
  ssm.time_step_rank=4 ssm.group_count=1 || bad "writing m-q35-other.gguf"
expect_rc "encode a hybrid's state --model" 0 encode "$Q35_STATE" --model m-q35-256.gguf -o q35.h5 \
  --sink 64 --tail 64 --tail-max 128 --group 64 -q
expect_rc "inspect the hybrid's snapshot" 0 inspect q35.h5
check "the hybrid's snapshot: 2 layers x 2 kv heads x 256" grep -qF "geometry    2 layers x 2 kv heads x head_dim 256" "$OUT"
expect_rc "dump the hybrid's layer 7" 0 dump q35.h5 --layer 7 --region sink -o q35.7.bin
expect_rc "dump the hybrid's layer 0 (recurrent: none)" 2 dump q35.h5 --layer 0 --region sink -o q35.0.bin
one_line_error "dump the hybrid's layer 0" q35.h5 "(layers: 3, 7)"
expect_rc "encode a hybrid's state with another model's state shape" 2 encode "$Q35_STATE" --model m-q35-other.gguf \
  -o q35bad.h5 --sink 64 --tail 64 --tail-max 128 --group 64 -q
one_line_error "hybrid state, other model" "$Q35_STATE" \
  "layer 0 recurrent conv state: rows of 6144 bytes, the model's conv state is 1152 values (4608 bytes in F32)"
no_output_left "hybrid state, other model" q35bad.h5
expect_rc "plan --model: a hybrid without ssm.group_count" 2 plan --model m-q35-nogroups.gguf
one_line_error "plan --model m-q35-nogroups.gguf" m-q35-nogroups.gguf \
  "missing key 'qwen35.ssm.group_count' (the recurrent layers' state shape)"
for m in "m-arch.gguf|architecture 'mystery' is not supported (gemma2, gemma3, llama, phi3, qwen2, qwen3, qwen3moe, cohere2," \
         "m-h0.gguf|layer 0: head_count is 0 (head_count_kv 2)" \
         "m-gqa.gguf|layer 0: head_count 4 is not a multiple of head_count_kv 3" \
         "m-kv0.gguf|layer 0 has no KV heads (head_count 4, head_count_kv 0); gemma3 has no recurrent layers"; do
  f=${m%%|*}; frag=${m#*|}
  expect_rc "plan --model $f" 2 plan --model "$f"
  one_line_error "plan --model $f" "$f" "$frag"
done

# ---------------------------------------------------------------------------------------------
# 4. Must-reject files: exit 2, one line naming the file and the defect, nothing left behind.
# The table of tests/reject/README.md gives the reader and the expected defect of each.
mkdir -p out
n_reject=0
while IFS='|' read -r _ file reader _ frag _; do
  file=$(echo "$file" | tr -d ' `')
  reader=$(echo "$reader" | tr -d ' ')
  frag=$(echo "$frag" | sed 's/^ *`//; s/` *$//')
  [ -f "$REJECT_DIR/$file" ] || continue
  n_reject=$((n_reject + 1))
  f=$REJECT_DIR/$file
  o=out/${file%.h5}.out.h5
  if [ "$reader" = capture ]; then
    # encode reads several formats and tells them apart by their first bytes: a file that is
    # not HDF5 is "not a capture, .kvd dump or llama.cpp state file" there.
    [ "$file" = capture-not-hdf5.h5 ] && frag="unrecognised first bytes"
    expect_rc "encode $file" 2 encode "$f" -o "$o"
    one_line_error "encode $file" "$f" "$frag"
    no_output_left "encode $file" "$o"
    expect_rc "inspect --against $file" 2 inspect a44.h5 --against "$f"
    one_line_error "inspect --against $file" "$f" "$frag"
    expect_rc "inspect $file" 2 inspect "$f"
    one_line_error "inspect $file" "$f" ""
  else
    expect_rc "inspect $file" 2 inspect "$f"
    one_line_error "inspect $file" "$f" "$frag"
    expect_rc "inspect --json $file" 2 inspect "$f" --json
    check "inspect --json $file: nothing on stdout" test ! -s "$OUT"
    expect_rc "decode $file" 2 decode "$f" -o "$o"
    one_line_error "decode $file" "$f" "$frag"
    no_output_left "decode $file" "$o"
    expect_rc "dump $file" 2 dump "$f" --layer 0 --region body -o "$o"
    one_line_error "dump $file" "$f" "$frag"
    no_output_left "dump $file" "$o"
    expect_rc "encode $file" 2 encode "$f" -o "$o"
    one_line_error "encode $file" "$f" "is an sjkv snapshot"
    no_output_left "encode $file" "$o"
  fi
done < <(grep -E '^\| `[^`]+\.h5` \|' "$REJECT_DIR/README.md")
check "found the must-reject fixtures of tests/reject ($n_reject)" test "$n_reject" -ge 10

# Generated bad .kvd files
"$PY" -S "$HELPER" bad-kvd badkvd >badkvd.txt || bad "writing bad .kvd files"
while IFS=$'\t' read -r file frag; do
  expect_rc "encode $file" 2 encode "badkvd/$file" -o "out/$file.h5"
  one_line_error "encode $file" "badkvd/$file" "$frag"
  no_output_left "encode $file" "out/$file.h5"
done <badkvd.txt
# Truncated files of every kind
head -c $(($(stat -c %s a44.h5) / 2)) a44.h5 >trunc-snapshot.h5
for sub in inspect decode dump; do
  case $sub in
    inspect) expect_rc "$sub truncated snapshot" 2 inspect trunc-snapshot.h5 ;;
    decode) expect_rc "$sub truncated snapshot" 2 decode trunc-snapshot.h5 -o out/ts.h5 ;;
    dump) expect_rc "$sub truncated snapshot" 2 dump trunc-snapshot.h5 --layer 0 --region sink -o out/ts.h5 ;;
  esac
  one_line_error "$sub truncated snapshot" trunc-snapshot.h5 "unreadable HDF5 file (truncated or corrupt)"
  no_output_left "$sub truncated snapshot" out/ts.h5
done
head -c $(($(stat -c %s a44.dec.h5) * 9 / 10)) a44.dec.h5 >trunc-capture.h5
expect_rc "encode truncated capture" 2 encode trunc-capture.h5 -o out/tc.h5
one_line_error "encode truncated capture" trunc-capture.h5 "truncated"
no_output_left "encode truncated capture" out/tc.h5
head -c 200000 seq.bin >trunc-seq.bin
expect_rc "encode truncated llama state" 2 encode trunc-seq.bin -o out/tl.h5 --head-dim 64
one_line_error "encode truncated llama state" trunc-seq.bin "runs past the end of the file"
no_output_left "encode truncated llama state" out/tl.h5

# One flipped byte in the root group's object header: HDF5 refuses its checksum
"$PY" -S "$HELPER" flip-ohdr a44.dec.h5 flipped-capture.h5 || bad "writing flipped-capture.h5"
"$PY" -S "$HELPER" flip-ohdr a44.h5 flipped-snapshot.h5 || bad "writing flipped-snapshot.h5"
expect_rc "encode a capture with a bad checksum" 2 encode flipped-capture.h5 -o out/fc.h5
one_line_error "encode a capture with a bad checksum" flipped-capture.h5 "checksum"
no_output_left "encode a capture with a bad checksum" out/fc.h5
expect_rc "inspect a snapshot with a bad checksum" 2 inspect flipped-snapshot.h5
one_line_error "inspect a snapshot with a bad checksum" flipped-snapshot.h5 "checksum"

# A failure leaves an existing output untouched
printf 'keep me' >out/existing.h5
expect_rc "encode a bad file over an existing output" 2 encode badkvd/nan-in-v.kvd -o out/existing.h5
check "the existing output is untouched" test "$(cat out/existing.h5)" = "keep me"

# ---------------------------------------------------------------------------------------------
# 5. Outputs that cannot be written; --device cuda
for sub in encode decode dump; do
  o=$SCRATCH/no/such/dir/x.h5
  case $sub in
    encode) expect_rc "encode into a missing directory" 2 encode in.kvd -o "$o" -q ;;
    decode) expect_rc "decode into a missing directory" 2 decode a44.h5 -o "$o" -q ;;
    dump) expect_rc "dump into a missing directory" 2 dump a44.h5 --layer 0 --region body -o "$o" ;;
  esac
  one_line_error "$sub into a missing directory" "$o" ""
  check "$sub into a missing directory: nothing created" test ! -e "$SCRATCH/no"
done
# Without -q, the failure is still the only line on stderr.
expect_rc "encode into a missing directory (not quiet)" 2 encode in.kvd -o "$SCRATCH/no/x.h5"
one_line_error "encode into a missing directory (not quiet)" "$SCRATCH/no/x.h5" ""
# An output path that is a directory
mkdir -p out/isdir.h5
expect_rc "encode onto a directory" 2 encode in.kvd -o out/isdir.h5 -q
one_line_error "encode onto a directory" out/isdir.h5 ""
check "encode onto a directory: no temporary file" bash -c "! compgen -G 'out/.isdir.h5.tmp-*' >/dev/null"
check "encode onto a directory: the directory is still there" test -d out/isdir.h5
expect_rc "encode --device cpu" 0 encode in.kvd -o cpu.h5 --device cpu -q --tail 128 --tail-max 256 --ubatch 64
check "--device cpu gives the same bytes as auto" cmp -s cpu.h5 a44-t1.h5
expect_rc "encode --device cpu (not quiet)" 0 encode in.kvd -o cpu2.h5 --device cpu --tail 128 --tail-max 256 --ubatch 64
check "--device cpu says it used the cpu" grep -q "device cpu)" "$ERR"
# auto says which device it used: a CUDA device when the build has the kernels and one is
# present, else the CPU. --device cuda then seals on it with the CPU's bytes, or without one
# exits 2 with a one-line error and no output.
expect_rc "encode --device auto (not quiet)" 0 encode in.kvd -o auto.h5 --device auto --tail 128 --tail-max 256 --ubatch 64
check "--device auto names the device it used" grep -Eq "device (cpu|cuda \(.+\))\)" "$ERR"
check "--device auto gives the cpu's bytes" cmp -s auto.h5 cpu.h5
if grep -q "device cuda (" "$ERR"; then
  expect_rc "encode --device cuda" 0 encode in.kvd -o cuda.h5 --device cuda -q --tail 128 --tail-max 256 --ubatch 64
  check "--device cuda gives the cpu's bytes" cmp -s cuda.h5 cpu.h5
  expect_rc "encode --device cuda 3/2t" 0 encode in.kvd -o cuda32.h5 --device cuda -q --bits 3/2 --ubatch 64
  expect_rc "encode --device cpu 3/2t" 0 encode in.kvd -o cpu32.h5 --device cpu -q --bits 3/2 --ubatch 64
  check "--device cuda gives the cpu's bytes at 3/2t" cmp -s cuda32.h5 cpu32.h5
else
  expect_rc "encode --device cuda" 2 encode in.kvd -o cuda.h5 --device cuda
  one_line_error "encode --device cuda" "--device cuda" "cuda"
  no_output_left "encode --device cuda" cuda.h5
fi

# ---------------------------------------------------------------------------------------------
# Sequence-state streams: export and import round trips of every configuration state version 1
# expresses, the ones it cannot refused, and a damaged stream refused.
for spec in "${CONFIGS[@]}"; do
  IFS='|' read -r name opts expect <<<"$spec"
  read -r bk bv sink sink_type staging tail tail_max ub body <<<"$expect"
  [ -e "$name.h5" ] || continue
  case $name in
    b42q8|g24|i22t) why="q8_0 staging" ;;
    fkvarn) why="best-of balancing" ;;
    *) why="" ;;
  esac
  if [ -n "$why" ]; then
    expect_rc "export $name (refused)" 2 export "$name.h5" -o "$name.sjkvseq"
    one_line_error "export $name" "$name.h5" "$why"
    no_output_left "export $name" "$name.sjkvseq"
    continue
  fi
  expect_rc "export $name" 0 export "$name.h5" -o "$name.sjkvseq"
  check "export $name: the summary names the stream" grep -q "$name.h5 -> $name.sjkvseq (sequence-state stream v1" "$ERR"
  expect_rc "import $name" 0 import "$name.sjkvseq" -o "$name.rt.h5" --ubatch "$ub" -q
  expect_rc "export $name again" 0 export "$name.rt.h5" -o "$name.rt.sjkvseq" -q
  check "export $name: the imported snapshot writes the same stream" cmp -s "$name.sjkvseq" "$name.rt.sjkvseq"
  for region in sink body ring; do
    expect_rc "dump $name.sjkvseq $region" 0 dump "$name.sjkvseq" --layer 0 --region "$region" -o "$name.s.$region.bin"
    check "dump $name: the stream's $region is the snapshot's" cmp -s "$name.s.$region.bin" "$name.$region.bin"
  done
  expect_rc "decode $name.sjkvseq" 0 decode "$name.sjkvseq" -o "$name.s.dec.h5" -q --ubatch "$ub"
  expect_rc "decode $name.h5" 0 decode "$name.h5" -o "$name.dec.h5" -q
  json_of "$name.s.json" inspect "$name.sjkvseq" --json --ubatch "$ub"
  pycheck check-inspect "$name.s.json" name="inspect $name.sjkvseq" bits_k="$bk" bits_v="$bv" head_dim=$D \
    kv_heads=$H layers=1 sink="$sink" sink_type="$sink_type" staging="$staging" tail="$tail" tail_max="$tail_max" \
    ubatch="$ub" N=$N body="${body:-scalar}"
done
expect_rc "import a damaged stream" 2 import "$REJECT_DIR/state/checksum.sjkvseq" -o bad.h5
one_line_error "import a damaged stream" "checksum.sjkvseq" "checksum mismatch"
no_output_left "import a damaged stream" bad.h5
expect_rc "inspect a damaged stream" 2 inspect "$REJECT_DIR/state/trellis-4bit.sjkvseq"
one_line_error "inspect a damaged stream" "trellis-4bit.sjkvseq" "trellis is not in state version 1"
expect_rc "encode a stream (not a capture)" 2 encode a44.sjkvseq -o x.h5
one_line_error "encode a stream" a44.sjkvseq "sjkv-encode import"
no_output_left "encode a stream" x.h5

# README's worked example: a llama.cpp sequence state -> snapshot -> stream -> snapshot -> stream.
LLAMA_SEQ=$REJECT_DIR/../golden/llama_state/gemma3-f16-fa.ggsq
expect_rc "readme: encode a llama.cpp state" 0 encode "$LLAMA_SEQ" --head-dim 256 --kv-sections 1 --layer-ids 5 11 17 \
  --sink 64 --group 32 --tail 0 --tail-max 0 -o gemma.h5
expect_rc "readme: export" 0 export gemma.h5 -o gemma.sjkvseq
check "readme: the stream has the bytes README states" test "$(stat -c %s gemma.sjkvseq)" = 256264
expect_rc "readme: import" 0 import gemma.sjkvseq -o back.h5
expect_rc "readme: export again" 0 export back.h5 -o back.sjkvseq
check "readme: the same stream bytes" cmp -s gemma.sjkvseq back.sjkvseq
expect_rc "readme: inspect the stream against llama.cpp's" 0 inspect gemma.sjkvseq --against "$LLAMA_SEQ" --head-dim 256 \
  --kv-sections 1 --layer-ids 5 11 17
check "readme: inspect shows the sealed body" grep -q '^| body | \[64, 128) | 59520 |' "$OUT"
expect_rc "readme: decode the stream" 0 decode gemma.sjkvseq -o decoded.h5

# Nothing stray anywhere in the scratch tree
stray=$(find "$SCRATCH" -name '.*.tmp-*' | head -3)
check "no temporary files anywhere ($stray)" test -z "$stray"

echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
