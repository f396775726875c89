#!/usr/bin/env bash
# A libFuzzer campaign over the readers (README.md "With libFuzzer"): builds the sanitizer
# build, runs each target for SECONDS (JOBS at a time), and prints one table row per reader
# (runs, coverage, corpus, findings). Not a test; the counts go to README.md by hand with the
# date and the command.
#
#   tests/fuzz/campaign.sh [SECONDS [JOBS [READER...]]]      default: 1800 2 (every reader)
#
# libhdf5 allocates sizes it reads from a damaged file (2 and 4 GiB were seen) before sjkv can
# look at anything, and copes with a NULL: max_allocation_size_mb makes such an allocation
# return NULL instead of ending the run as an out-of-memory finding (sjkv's own allocations
# are bounded by its readers well below that).
#
# Work folders: $FUZZ_BUILD (default /tmp/fuzzbuild) and $FUZZ_WORK (default /tmp/fz): per
# reader a working corpus (new inputs; the stored corpus is only read), artifacts (crash-*,
# leak-*, timeout-*) and the log.
set -euo pipefail
cd "$(dirname "$0")/../.."
secs=${1:-1800}
jobs=${2:-2}
shift $(($# > 2 ? 2 : $#)) || true
readers=("$@")
[ ${#readers[@]} -gt 0 ] || readers=(capture snapshot kvd llama_state gguf trajectory codebook)
build=${FUZZ_BUILD:-/tmp/fuzzbuild}
work=${FUZZ_WORK:-/tmp/fz}
cxx=$(command -v clang++-14 || command -v clang++)
cc=$(command -v clang-14 || command -v clang)

targets=()
for r in "${readers[@]}"; do targets+=("fuzz_$r"); done
CC=$cc CXX=$cxx cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSJKV_FUZZ=ON -DSJKV_CUDA=OFF \
  -DSJKV_BUILD_BENCH=OFF >"$build.configure.log" 2>&1 || { cat "$build.configure.log"; exit 1; }
cmake --build "$build" -j2 --target "${targets[@]}" >"$build.build.log" 2>&1 || { tail -30 "$build.build.log"; exit 1; }

run_one() {
  local r=$1 d=$work/$1
  mkdir -p "$d/corpus" "$d/artifacts"
  LSAN_OPTIONS=suppressions=$PWD/tests/fuzz/lsan.supp \
  UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  ASAN_OPTIONS=allocator_may_return_null=1:max_allocation_size_mb=1536:suppressions=$PWD/tests/fuzz/asan-hdf5.supp \
    "$build/tests/fuzz/fuzz_$r" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -malloc_limit_mb=2048 \
    -print_final_stats=1 \
    -artifact_prefix="$d/artifacts/" "$d/corpus" "tests/fuzz/corpus/$r" >"$d/log" 2>&1 || true
}

pids=()
for r in "${readers[@]}"; do
  run_one "$r" &
  pids+=($!)
  while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do sleep 5; done
done
wait

printf '| reader | seconds | runs | coverage (edges) | features | corpus | findings |\n|---|--:|--:|--:|--:|--:|--:|\n'
for r in "${readers[@]}"; do
  d=$work/$r
  runs=$(grep -o 'stat::number_of_executed_units: [0-9]*' "$d/log" | tail -1 | awk '{print $2}')
  cov=$(grep -oE 'cov: [0-9]+' "$d/log" | tail -1 | awk '{print $2}')
  ft=$(grep -oE 'ft: [0-9]+' "$d/log" | tail -1 | awk '{print $2}')
  corp=$(find "$d/corpus" -type f | wc -l)
  finds=$(find "$d/artifacts" -type f | wc -l)
  printf '| %s | %s | %s | %s | %s | %s | %s |\n' "$r" "$secs" "${runs:-?}" "${cov:-?}" "${ft:-?}" "$corp" "$finds"
done
