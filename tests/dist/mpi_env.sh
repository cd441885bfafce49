# Sourced by the tests/dist scripts: launch N ranks quickly on a small, oversubscribed machine.
# Shared memory and the loopback only, no binding, and idle ranks yield their core instead of
# spinning (with 8 ranks on 2 cores, spinning ranks starve the ones doing the work).
export OMPI_MCA_rmaps_base_oversubscribe=1
export OMPI_MCA_mpi_yield_when_idle=1
export OMPI_MCA_btl=self,vader
export OMPI_MCA_btl_vader_single_copy_mechanism=none
export OMPI_MCA_hwloc_base_binding_policy=none
export OMP_NUM_THREADS=1
LOOM_BUILD=${LOOM_BUILD:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../../build" && pwd)}
LOOM_TESTBIN=$LOOM_BUILD/tests

# Exit the calling script with success (a skip) when this build has no MPI backend or no mpirun.
loom_require_mpi() {
    if ! command -v mpirun >/dev/null; then
        echo "skipped: no mpirun"
        exit 0
    fi
    if grep -q '^LOOM_MPI:BOOL=OFF' "$LOOM_BUILD/CMakeCache.txt" 2>/dev/null; then
        echo "skipped: built with -DLOOM_MPI=OFF"
        exit 0
    fi
}

# loom_mpirun N program args...
loom_mpirun() {
    local n=$1
    shift
    mpirun --allow-run-as-root --oversubscribe --bind-to none -np "$n" "$@"
}
