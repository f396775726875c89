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
# rebuild any history there, skip (77) naming the files, as they do without the model. The
# study's own check decides (study_pinned.py); a manifest it cannot read fails the test.
pinned=0
"$py" "$src/tests/cli/study_pinned.py" "$src/scripts/study" "$src/study/manifest.toml" "$src/study/train-manifest.toml" || pinned=$?
[ "$pinned" = 0 ] || { [ "$pinned" = 77 ] && exit 77; fail "checking the study's pinned files (exit $pinned)"; }
