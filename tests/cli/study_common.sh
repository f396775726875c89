# Sourced by the study tests: SOURCE_DIR BUILD_DIR SCRATCH from the arguments, the model check
# (exit 77 without it), the interpreter, a fresh scratch folder and fail().
src=$1 build=$2 scratch=$3
model=${SJKV_MODEL:-${XDG_CACHE_HOME:-$HOME/.cache}/sjkv/models/default.gguf}
[ -e "$model" ] || { echo "no model at $model (scripts/setup)"; exit 77; }
py=${SJKV_PYTHON:-python3}
rm -rf "$scratch" && mkdir -p "$scratch"
fail() { echo "FAIL: $*"; exit 1; }
# The study rebuilds its histories from system files pinned by SHA-256 (study/manifest.toml,
# study/train-manifest.toml). A Debian 12 of another point release may hold other bytes at some
# of those paths; scripts/study then refuses by name (exit 2), and these tests, which cannot
# rebuild any history there, skip (77) naming the files, as they do without the model.
"$py" - "$src/study/manifest.toml" "$src/study/train-manifest.toml" <<'PY' || exit 77
import hashlib, sys, tomllib
differ = []
for manifest in sys.argv[1:]:
    for f in tomllib.load(open(manifest, "rb")).get("file", []):
        try:
            got = hashlib.sha256(open(f["path"], "rb").read()).hexdigest()
        except OSError:
            got = "missing"
        if got != f["sha256"]:
            differ.append(f["path"])
if differ:
    print(f"SKIP: {len(differ)} of the study's pinned system files differ on this machine "
          f"(another Debian 12 point release?): {', '.join(sorted(set(differ)))}")
    sys.exit(1)
PY
