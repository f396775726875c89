#!/bin/sh
# sjkv-train end to end: train on two generated .kvd dumps, then every output passes inspect with
# the same id and raw SHA-256, the .bin matches the SHA-256 in the .h, and --json has the table;
# --device, --checkpoint (killed and resumed: the same bytes) and damaged inputs.
set -eu
tool=$1; py=$2; helper=$3; dir=$4
rm -rf "$dir"; mkdir -p "$dir"
"$py" -c "import sys; sys.path.insert(0, '$helper'); import cli_helper as c; c.write_kvd('$dir/a.kvd', D=128, H=2, T=640, seed=3); c.write_kvd('$dir/b.kvd', D=128, H=2, T=512, seed=4)"
"$tool" "$dir/a.kvd" "$dir/b.kvd" --bits 2 -o "$dir/cb" --max-iters 3 --seed 5 --json -q > "$dir/summary.json"
"$py" - "$dir" <<'PY'
import json, sys, subprocess, hashlib
d = sys.argv[1]
s = json.load(open(d + "/summary.json"))
for side in ("k", "v"):
    row = s["heldout_mse"][side]
    for key in ("scalar", "identity", "reference", "trained"):
        assert isinstance(row[key], float), (side, key, row)
    assert row["trained"] < row["scalar"], row
raw = open(d + "/cb.bin", "rb").read()
assert len(raw) == 1024
sha = hashlib.sha256(raw).hexdigest()
assert s["raw_sha256"] == sha
assert ('#define SJKVARN_CB2_TOK_SHA256 "%s"' % sha) in open(d + "/cb.h").read()
PY
for f in cb.sjcb cb.bin cb.h; do
  "$tool" inspect "$dir/$f" > "$dir/$f.txt"
  grep -q "hashes        ok" "$dir/$f.txt"
  grep -q "codebook id   $("$py" -c "import json; print(json.load(open('$dir/summary.json'))['codebook_id'])")" "$dir/$f.txt"
done
grep -q "input            .*a.kvd" "$dir/cb.sjcb.txt"
# --device: cpu gives the same table bits as the default (auto); cuda without a GPU is exit 2
"$tool" "$dir/a.kvd" "$dir/b.kvd" --bits 2 -o "$dir/cbcpu" --max-iters 3 --seed 5 --device cpu -q > /dev/null
cmp "$dir/cb.bin" "$dir/cbcpu.bin"
if ! command -v nvidia-smi > /dev/null 2>&1; then
  set +e; "$tool" "$dir/a.kvd" --bits 2 -o "$dir/cbcuda" --max-iters 1 --device cuda -q 2> "$dir/dev.err"; rc=$?; set -e
  test $rc -eq 2
  grep -q -- "--device cuda: " "$dir/dev.err"
  test ! -e "$dir/cbcuda.bin"
fi
# --checkpoint: a run killed mid-training goes on from its checkpoint and gives the bytes of a run
# never stopped; the checkpoints are gone at the end; a damaged one is exit 2 naming it.
"$py" -c "import sys; sys.path.insert(0, '$helper'); import cli_helper as c; c.write_kvd('$dir/big.kvd', D=128, H=2, T=4096, seed=6)"
"$py" - "$tool" "$dir" <<'PY'
import json, os, subprocess, sys, time
tool, d = sys.argv[1], sys.argv[2]
args = [tool, d + "/big.kvd", "--bits", "2", "--max-iters", "40", "--tol", "0", "--seed", "5", "--threads", "1", "--json", "-q"]
full = json.loads(subprocess.run(args + ["-o", d + "/full"], check=True, capture_output=True).stdout)
p = subprocess.Popen(args + ["-o", d + "/ck", "--checkpoint"], stdout=subprocess.DEVNULL)
while p.poll() is None and not os.path.exists(d + "/ck.k.ckpt"):
    time.sleep(0.005)
p.kill()
assert p.wait() == -9, "training finished before it could be stopped"
assert not os.path.exists(d + "/ck.bin")
r = subprocess.run(args[:-1] + ["-o", d + "/ck", "--checkpoint"], check=True, capture_output=True, text=True)
assert "goes on from" in r.stderr, r.stderr
res = json.loads(r.stdout)
for k in ("iterations", "stop", "heldout_mse", "codebook_id", "raw_sha256"):
    assert res[k] == full[k], k
assert open(d + "/ck.bin", "rb").read() == open(d + "/full.bin", "rb").read()
assert not any(f.endswith(".ckpt") for f in os.listdir(d)), os.listdir(d)
PY
printf 'SJKVLCK\nnot a checkpoint' > "$dir/bad.k.ckpt"
set +e; "$tool" "$dir/a.kvd" --bits 2 -o "$dir/bad" --max-iters 2 --checkpoint -q 2> "$dir/ckpt.err"; rc=$?; set -e
test $rc -eq 2
grep -q "bad.k.ckpt" "$dir/ckpt.err"
test ! -e "$dir/bad.bin"
# a flipped byte in the container is refused with exit 2
"$py" -c "b = bytearray(open('$dir/cb.sjcb','rb').read()); b[80] ^= 1; open('$dir/bad.sjcb','wb').write(b)"
set +e; "$tool" inspect "$dir/bad.sjcb" 2> "$dir/bad.err"; rc=$?; set -e
test $rc -eq 2
grep -q "checksum mismatch" "$dir/bad.err"
# --model: the architecture and attention shapes refused before any work, as sjkv-replay record
# refuses them (exit 2, one line naming the file; no output). Metadata-only GGUF files.
"$py" - "$dir" <<'PY'
import struct, sys
def gguf(path, arch, heads, kv):
    s = lambda x: struct.pack("<Q", len(x.encode())) + x.encode()
    u32 = lambda k, v: s(k) + struct.pack("<II", 4, v)
    kvs = [s("general.architecture") + struct.pack("<I", 8) + s(arch), u32(arch + ".block_count", 2),
           u32(arch + ".attention.head_count", heads), u32(arch + ".attention.head_count_kv", kv),
           u32(arch + ".attention.key_length", 128), u32(arch + ".attention.value_length", 128)]
    open(path, "wb").write(b"GGUF" + struct.pack("<Iqq", 3, 0, len(kvs)) + b"".join(kvs))
d = sys.argv[1]
gguf(d + "/m-ok.gguf", "qwen3", 4, 2)
gguf(d + "/m-arch.gguf", "mystery", 4, 2)
gguf(d + "/m-h0.gguf", "qwen3", 0, 2)
gguf(d + "/m-gqa.gguf", "qwen3", 4, 3)
PY
"$tool" "$dir/a.kvd" --model "$dir/m-ok.gguf" --bits 2 -o "$dir/mok" --max-iters 1 -q > /dev/null
test -s "$dir/mok.bin"
for m in "m-arch|architecture 'mystery' is not supported" "m-h0|layer 0: head_count is 0" \
         "m-gqa|layer 0: head_count 4 is not a multiple of head_count_kv 3"; do
  f=${m%%|*}; frag=${m#*|}
  for init in auto identity; do
    set +e; "$tool" "$dir/a.kvd" --model "$dir/$f.gguf" --init $init --bits 2 -o "$dir/mbad" --max-iters 1 -q \
      2> "$dir/m.err"; rc=$?; set -e
    test $rc -eq 2
    test "$(wc -l < "$dir/m.err")" -eq 1
    grep -qF "sjkv-train: $dir/$f.gguf: $frag" "$dir/m.err"
    test ! -e "$dir/mbad.bin" && test ! -e "$dir/mbad.sjcb" && test ! -e "$dir/mbad.h"
  done
done
echo OK
