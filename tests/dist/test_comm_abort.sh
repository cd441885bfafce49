#!/usr/bin/env bash
# A failing rank ends the whole job promptly and non-zero; a layout error is printed once.
set -uo pipefail
source "$(dirname "$0")/mpi_env.sh"
loom_require_mpi
prog=$LOOM_TESTBIN/comm_abort_check
out=$(mktemp)
trap 'rm -f "$out"' EXIT
fail=0

# run_mode MODE NP: sets rc and secs; output in $out
run_mode() {
    local t0=$(date +%s%N)
    timeout 60 bash -c "source '$(dirname "$0")/mpi_env.sh'; loom_mpirun $2 '$prog' $1" >"$out" 2>&1
    rc=$?
    secs=$(( ($(date +%s%N) - t0) / 1000000000 ))
}

expect() { # expect DESCRIPTION CONDITION...
    local what=$1
    shift
    if ! "$@"; then
        echo "FAIL: $what (rc=$rc, ${secs}s)"
        sed 's/^/    /' "$out"
        fail=1
    fi
}

run_mode ok 2
expect "control run exits 0" test "$rc" -eq 0

run_mode assert 3
expect "loom_abort ends every rank with a non-zero status" test "$rc" -ne 0 -a "$rc" -ne 124
expect "loom_abort ends the job well before the timeout" test "$secs" -lt 20
expect "the assertion is reported" \
    grep -q "internal error at .*comm_abort_check.c.*deliberate failure" "$out"

run_mode alone 3
expect "a rank's own error ends the job with its status" test "$rc" -eq 3
expect "it ends well before the timeout" test "$secs" -lt 20
expect "its message names the rank" \
    grep -q "loom: error: \[rank 1\] --data-path /nonexistent" "$out"

run_mode layout 8
expect "a layout error exits 1" test "$rc" -eq 1
expect "the layout error is printed exactly once" \
    test "$(grep -c 'does not divide world size 8' "$out")" -eq 1
msg="loom: error: [rank 0] --tensor-model-parallel-size 3 x --pipeline-model-parallel-size 2"
msg+=" = 6 does not divide world size 8; valid: products that divide 8 (1, 2, 4, 8)"
expect "it names the flags and the valid sizes" grep -qF "$msg" "$out"

[ "$fail" -eq 0 ] && echo "test_comm_abort: ok"
exit "$fail"
