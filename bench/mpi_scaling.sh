#!/bin/sh
# The table of docs/CLUSTER.md: one Lloyd iteration (bench_mpi_lloyd) at each width on 1..R
# ranks, one thread each, with the speed-up against one rank.
#   bench/mpi_scaling.sh [BUILD_DIR] [SEQUENCES] [MAX_RANKS]
set -eu
build=${1:-build}; n=${2:-4194304}; ranks=${3:-2}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl_vader_single_copy_mechanism=none
echo "| bits | ranks | seconds per iteration | speed-up | one combine of the sums | bytes handed on per hop | table |"
echo "|--:|--:|--:|--:|--:|--:|---|"
for bits in 2 3; do
  r=1; one=
  while [ "$r" -le "$ranks" ]; do
    # bench row: | bits | ranks | threads | sequences | s/iter | combine us | bytes | mse | table |
    row=$(mpirun -n "$r" --oversubscribe "$build/bench/bench_mpi_lloyd" --sequences "$n" --bits "$bits" --threads 1)
    echo "$row" | awk -F'|' -v one="$one" '{
      s = $6 + 0; if (one == "") one = s; t = $10; gsub(/ /, "", t)
      comb = ($3 + 0 == 1) ? "-" : sprintf("%.1f us", $7)
      printf "| %d | %d | %.2f | %.2fx | %s | %d | %s |\n", $2, $3, s, one / s, comb, $8, t }'
    [ -n "$one" ] || one=$(echo "$row" | awk -F'|' '{ print $6 + 0 }')
    r=$((r + 1))
  done
done
