#!/usr/bin/env bash
# The mpi comm backend and the parallel state under mpirun: every collective (comm_check) with
# 2, 3 and 8 ranks; groups of every layout and the TP/SP regions (comm_parallel_check) with 2,
# 4 and 8 ranks.
set -euo pipefail
source "$(dirname "$0")/mpi_env.sh"
loom_require_mpi
for n in 2 3 8; do
    loom_mpirun "$n" "$LOOM_TESTBIN/comm_check"
done
for n in 2 4 8; do
    loom_mpirun "$n" "$LOOM_TESTBIN/comm_parallel_check"
done
