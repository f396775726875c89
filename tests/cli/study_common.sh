# Sourced by the study tests: SOURCE_DIR BUILD_DIR SCRATCH from the arguments, the model check
# (exit 77 without it), the interpreter, a fresh scratch folder and fail().
src=$1 build=$2 scratch=$3
model=${SJKV_MODEL:-${XDG_CACHE_HOME:-$HOME/.cache}/sjkv/models/default.gguf}
[ -e "$model" ] || { echo "no model at $model (scripts/setup)"; exit 77; }
py=${SJKV_PYTHON:-python3}
rm -rf "$scratch" && mkdir -p "$scratch"
fail() { echo "FAIL: $*"; exit 1; }
